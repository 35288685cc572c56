"""voltlock for asyncio: the same surface as :mod:`voltlock`, with ``await``, ``async with``
and ``async for``, running the same protocol plans (`voltlock._protocol`).

    from voltlock import aio

    client = aio.Client(["http://10.77.0.10:7480"])
    async with client.session(ttl=10) as s:
        async with s.lock("db/primary", timeout=5) as seq:
            await client.put("config/db", "10.0.0.5", sequencer=seq)

HTTP/1.1 is parsed by h11 (a sans-I/O HTTP library, pure Python, no dependencies of its own)
over asyncio streams, with a keep-alive pool per replica.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from typing import (Any, AsyncIterator, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, TypeVar, Union)

import h11

from . import _protocol as p
from . import errors
from ._surface import (BarrierBase, ClientBase, LockBase, SessionBase, WatchBase,
                       probe_while_held)
from .errors import *  # noqa: F401,F403  (the same exceptions, for `aio.LockBusy` and the like)
from .models import KeyValue, Sequencer, Value, WatchEvent

T = TypeVar("T")

_CONNECTION_ERRORS = (OSError, asyncio.TimeoutError, h11.ProtocolError, EOFError)


class _Connection:
    """One HTTP/1.1 connection: h11 parses, asyncio streams carry the bytes."""

    def __init__(self, endpoint: p.Endpoint, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.endpoint, self.reader, self.writer = endpoint, reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.probing = False  # probe_while_held

    def probe(self, held: bool) -> None:
        if held != self.probing:
            probe_while_held(self.writer.get_extra_info("socket"), held)
            self.probing = held

    @classmethod
    async def open(cls, endpoint: p.Endpoint, timeout: float,
                   tls: Optional[ssl.SSLContext]) -> "_Connection":
        secure = tls if endpoint.tls else None
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port, ssl=secure,
                                    server_hostname=endpoint.host if secure else None),
            timeout)
        return cls(endpoint, reader, writer)

    async def send(self, attempt: p.Attempt) -> h11.Response:
        headers = [("Host", f"{self.endpoint.host}:{self.endpoint.port}"), *attempt.headers]
        if attempt.body is not None or attempt.method in ("POST", "PUT", "DELETE"):
            # cpp-httplib reads a POST without a length until the connection closes.
            headers.append(("Content-Length", str(len(attempt.body or b""))))
        data = self.h11.send(h11.Request(method=attempt.method, target=attempt.target,
                                         headers=headers)) or b""
        if attempt.body:
            data += self.h11.send(h11.Data(data=attempt.body)) or b""
        data += self.h11.send(h11.EndOfMessage()) or b""
        self.writer.write(data)
        await self.writer.drain()
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise EOFError(f"unexpected {type(event).__name__} instead of a response")

    async def _next_event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await self.reader.read(65536))
                continue
            return event

    async def read_some(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                if event.data:
                    return bytes(event.data)
                continue
            if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return b""
            raise EOFError(f"unexpected {type(event).__name__} in a body")

    async def read_body(self) -> bytes:
        chunks: List[bytes] = []
        while True:
            chunk = await self.read_some()
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    def reusable(self) -> bool:
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            return True
        return False

    def close(self) -> None:
        self.writer.close()


def _headers(response: h11.Response) -> Dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in response.headers}


class AsyncTransport:
    """Keep-alive connections, a pool per replica, for one client."""

    def __init__(self, tls: Optional[ssl.SSLContext] = None,
                 max_idle_per_endpoint: int = 32) -> None:
        self._tls = tls
        self._idle: Dict[p.Endpoint, List[_Connection]] = {}
        self._max_idle = max_idle_per_endpoint
        self._held: p.HeldRequests[_Connection] = p.HeldRequests()

    async def _send(self, attempt: p.Attempt) -> Union[p.Failure,
                                                        Tuple[_Connection, h11.Response]]:
        for fresh in (False, True):
            idle = self._idle.get(attempt.endpoint)
            reused = bool(idle) and not fresh
            try:
                connection = idle.pop() if idle and not fresh else \
                    await _Connection.open(attempt.endpoint, attempt.connect_timeout, self._tls)
            except _CONNECTION_ERRORS as e:
                return p.connect_failure(attempt.endpoint, e)
            try:
                connection.probe(attempt.held)
                if not attempt.held:
                    return connection, await asyncio.wait_for(connection.send(attempt),
                                                              attempt.read_timeout)
                held = await self._held_answer(connection, attempt)
                if held is None:
                    self._held.leave(connection, attempt.read_timeout)
                    return p.Failure(p.stopped_replica(attempt.endpoint))
                return connection, held
            except _CONNECTION_ERRORS as e:
                connection.close()
                # A kept connection the server closed while idle: try a fresh one, same replica.
                if not (reused and not isinstance(e, asyncio.TimeoutError)):
                    return p.Failure(p.describe(e))
            except BaseException:  # cancelled mid-request: the connection is in no known state
                connection.close()
                raise
        raise AssertionError("unreachable")

    async def _held_answer(self, connection: _Connection,
                           attempt: p.Attempt) -> Optional[h11.Response]:
        """The answer to a request the cell holds, or None once its replica failed
        HELD_CHECK_MISSES /healthz checks in a row while the answer did not come."""
        answer = asyncio.ensure_future(asyncio.wait_for(connection.send(attempt),
                                                        attempt.read_timeout))
        misses = 0
        try:
            while True:
                done, _ = await asyncio.wait({answer}, timeout=p.HELD_CHECK_INTERVAL_S)
                if done:
                    return answer.result()
                misses = 0 if await self._healthy(attempt.endpoint) else misses + 1
                # An answer may have come during the check.
                if misses >= p.HELD_CHECK_MISSES and not answer.done():
                    answer.cancel()
                    await asyncio.wait({answer})
                    if answer.cancelled():
                        return None
                    return answer.result()  # came meanwhile, or failed by itself (raises)
        except BaseException:
            answer.cancel()
            raise

    async def _healthy(self, endpoint: p.Endpoint) -> bool:
        if self._held.answered_lately(endpoint):
            return True

        async def ask() -> bool:
            check = await _Connection.open(endpoint, p.HELD_CHECK_TIMEOUT_S, self._tls)
            try:
                response = await check.send(p.Attempt(endpoint, "GET", "/healthz", (), None,
                                                      p.HELD_CHECK_TIMEOUT_S,
                                                      p.HELD_CHECK_TIMEOUT_S))
                return response.status_code == 200
            finally:
                check.close()
        try:
            healthy = await asyncio.wait_for(ask(), p.HELD_CHECK_TIMEOUT_S)
        except _CONNECTION_ERRORS:
            return False
        if healthy:
            self._held.answered(endpoint)
        return healthy

    async def perform(self, attempt: p.Attempt) -> Union[p.Reply, p.Failure]:
        for left in self._held.to_close():
            left.close()
        sent = await self._send(attempt)
        if isinstance(sent, p.Failure):
            return sent
        connection, response = sent
        try:
            body = await asyncio.wait_for(connection.read_body(), attempt.read_timeout)
        except _CONNECTION_ERRORS as e:
            connection.close()
            return p.Failure(p.describe(e))
        except BaseException:
            connection.close()
            raise
        if connection.reusable() and len(self._idle.setdefault(attempt.endpoint, [])) < \
                self._max_idle:
            self._idle[attempt.endpoint].append(connection)
        else:
            connection.close()
        return p.Reply(response.status_code, _headers(response), body)

    async def open_stream(self, attempt: p.Attempt) -> Union[p.Reply, p.Failure, _Connection]:
        sent = await self._send(attempt)
        if isinstance(sent, p.Failure):
            return sent
        connection, response = sent
        if response.status_code == 200:
            return connection
        try:
            body = await asyncio.wait_for(connection.read_body(), attempt.read_timeout)
        except _CONNECTION_ERRORS as e:
            return p.Failure(p.describe(e))
        finally:
            connection.close()
        return p.Reply(response.status_code, _headers(response), body)

    def close(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()
        for left in self._held.to_close(everything=True):
            left.close()


class Client(ClientBase[AsyncTransport]):
    """An asyncio client of one Voltlock cell: :class:`voltlock.Client` with ``await``.
    One per event loop. TLS and ``token`` options as :class:`voltlock.Client`'s."""

    def _make_transport(self, tls: Optional[ssl.SSLContext]) -> AsyncTransport:
        return AsyncTransport(tls)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """As :meth:`voltlock.Client.close`: the sessions opened through this client are closed
        (best effort, within ``attempt_timeout`` all together) and their keepalive tasks
        stopped, its watches end, and any later call raises RuntimeError."""
        deadline = self._closing_deadline()
        for session in list(self._sessions):
            try:
                await session.close(timeout=session._close_budget(deadline))
            except errors.Error as e:
                self._session_not_closed(session, e)
        self._close_the_rest()

    async def _run(self, plan: p.Plan[T]) -> T:
        try:
            self._check_not_closed()
            step = next(plan)
            while True:
                if isinstance(step, p.Sleep):
                    await asyncio.sleep(step.seconds)
                    outcome: p.Outcome = None
                else:
                    outcome = await self._transport.perform(step)
                step = plan.send(outcome)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            plan.close()

    def session(self, ttl: float = 10.0, *, lock_delay: float = 0.0, name: str = "",
                grace: Optional[float] = None,
                on_lost: Optional[Callable[["Session"], None]] = None,
                timeout: Optional[float] = None) -> "Session":
        """As :meth:`voltlock.Client.session`: ``async with client.session(ttl=10) as s:``."""
        return Session(self, ttl=ttl, lock_delay=lock_delay, name=name, grace=grace,
                       on_lost=on_lost, timeout=timeout)

    async def put(self, key: str, value: Value, *, prev_revision: Optional[int] = None,
                  sequencer: Optional[Sequencer] = None,
                  session: "Union[Session, int, None]" = None,
                  timeout: Optional[float] = None) -> int:
        """As :meth:`voltlock.Client.put`."""
        session_id = session.id if isinstance(session, Session) else session
        return await self._run(self._protocol.put(key, value, prev_revision=prev_revision,
                                                  sequencer=sequencer, session=session_id,
                                                  timeout=timeout))

    async def get(self, key: str, *, stale: bool = False,
                  timeout: Optional[float] = None) -> Optional[KeyValue]:
        return (await self._run(self._protocol.get(key, timeout, stale)))[0]

    async def get_revision(self, key: str, *, timeout: Optional[float] = None
                           ) -> Tuple[Optional[KeyValue], int]:
        return await self._run(self._protocol.get(key, timeout))

    def get_prefix(self, prefix: str, *, page_size: Optional[int] = None,
                   timeout: Optional[float] = None) -> AsyncIterator[KeyValue]:
        """``async for kv in client.get_prefix("config/")``: pages as the sync one."""
        return self._pages(p.PrefixPager(self._protocol, prefix, page_size, timeout))

    async def _pages(self, pager: p.PrefixPager) -> AsyncIterator[KeyValue]:
        while not pager.done:
            for kv in await self._run(pager.next_page()):
                yield kv

    async def delete(self, key: str, *, prefix: bool = False,
                     prev_revision: Optional[int] = None,
                     sequencer: Optional[Sequencer] = None,
                     timeout: Optional[float] = None) -> int:
        return await self._run(self._protocol.delete(key, prefix=prefix,
                                                     prev_revision=prev_revision,
                                                     sequencer=sequencer, timeout=timeout))

    async def check(self, sequencer: Sequencer, *, timeout: Optional[float] = None) -> bool:
        return await self._run(self._protocol.check(sequencer, timeout))

    def watch(self, key: str, *, prefix: bool = False, start_revision: Optional[int] = None,
              spaces: Optional[Sequence[str]] = None,
              timeout: Optional[float] = None) -> "Watch":
        """``async for ev in client.watch(...)``; ``close()`` ends it. ``async with`` places it
        first, as :meth:`voltlock.Client.watch` does, within ``timeout``."""
        return Watch(self, p.WatchStream(self._protocol, key, prefix=prefix,
                                         start_revision=start_revision, spaces=spaces),
                     self._protocol.budget(timeout))

    async def lock_info(self, name: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        p.check_name(name, "lock name")
        return await self._run(self._protocol.read(f"/v1/locks/{p.quote_name(name)}", timeout))

    async def cluster(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        return await self._run(self._protocol.read("/v1/cluster", timeout))

    # --- users, roles and tokens (the admin role; docs/security-auth.md) -------------------------

    async def put_role(self, name: str, grants: Sequence[Mapping[str, Any]], *,
                       timeout: Optional[float] = None) -> int:
        """Creates the role or replaces its grants, each ``{"permissions": ["read", ...],
        "resource": "key:app/"}`` (resource: key:, lock:, barrier: PREFIX, or "*"). Returns the
        auth revision."""
        answer = await self._run(self._protocol.auth_write(
            "PUT", f"/v1/auth/roles/{p.quote_name(name)}", {"grants": [dict(g) for g in grants]},
            timeout))
        return int(answer["auth_revision"])

    async def delete_role(self, name: str, *, timeout: Optional[float] = None) -> int:
        """Removes the role (and takes it from its users); NotFound if there is none."""
        answer = await self._run(self._protocol.auth_write(
            "DELETE", f"/v1/auth/roles/{p.quote_name(name)}", None, timeout))
        return int(answer["auth_revision"])

    async def roles(self, *, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Every replicated role: ``{name, grants}``."""
        return list((await self._run(self._protocol.read("/v1/auth/roles", timeout)))["roles"])

    async def put_user(self, name: str, roles: Sequence[str], *,
                       timeout: Optional[float] = None) -> int:
        """Creates the user or replaces its roles ("admin" or roles that exist)."""
        answer = await self._run(self._protocol.auth_write(
            "PUT", f"/v1/auth/users/{p.quote_name(name)}", {"roles": list(roles)}, timeout))
        return int(answer["auth_revision"])

    async def delete_user(self, name: str, *, timeout: Optional[float] = None) -> int:
        """Removes the user and revokes its tokens."""
        answer = await self._run(self._protocol.auth_write(
            "DELETE", f"/v1/auth/users/{p.quote_name(name)}", None, timeout))
        return int(answer["auth_revision"])

    async def users(self, *, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Every replicated user: ``{name, roles, tokens}`` (token ids)."""
        return list((await self._run(self._protocol.read("/v1/auth/users", timeout)))["users"])

    async def create_token(self, user: str, *, ttl: Optional[float] = None,
                           timeout: Optional[float] = None) -> Dict[str, Any]:
        """A new token for `user`, expiring after ``ttl`` seconds (None: never):
        ``{token, id, user, ttl_s, ...}``. The only time the token is shown."""
        return await self._run(self._protocol.create_token(user, ttl, timeout))

    async def revoke_token(self, token_id: str, *, timeout: Optional[float] = None) -> int:
        """Revokes a token by its id: every replica refuses it once it has applied this."""
        answer = await self._run(self._protocol.auth_write(
            "DELETE", f"/v1/auth/tokens/{p.quote_name(token_id)}", None, timeout))
        return int(answer["auth_revision"])

    async def tokens(self, *, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Every replicated token: ``{id, user, created_ms, expires_ms}``; never the token."""
        return list((await self._run(self._protocol.read("/v1/auth/tokens", timeout)))["tokens"])


class Session(SessionBase[Client]):
    """As :class:`voltlock.Session`; kept alive by an asyncio task, :attr:`lost` is an
    ``asyncio.Event``, ``on_lost`` callbacks run on the event loop."""

    _new_event = asyncio.Event
    lost: asyncio.Event
    _stop: asyncio.Event
    _task: Optional["asyncio.Task[None]"] = None

    async def open(self) -> "Session":
        self._core.check_openable()
        ttl, lock_delay, name, timeout = self._settings
        sent = self._client._protocol.clock()
        created = await self._client._run(self._client._protocol.create_session(
            ttl, lock_delay, name, timeout))
        self._opened(int(created["session"]), sent)
        self._task = asyncio.ensure_future(self._keep_alive())
        return self

    async def close(self, *, timeout: Optional[float] = None) -> None:
        """As :meth:`voltlock.Session.close`."""
        self._stop.set()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if not self._closing():
            return
        try:
            await self._client._run(self._client._protocol.close_session(self.id, timeout))
        finally:
            self._core.close()

    async def __aenter__(self) -> "Session":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _keep_alive(self) -> None:
        protocol = self._client._protocol
        while True:
            delay, budget = self._core.next_keepalive()
            try:
                await asyncio.wait_for(self._stop.wait(), delay)
                return
            except asyncio.TimeoutError:
                pass
            sent, error = protocol.clock(), None
            try:
                await self._client._run(self._keepalive(budget))
            except errors.Error as e:
                error = e
            if self._stop.is_set() or not self._keepalive_done(sent, error):
                return

    async def _call(self, plan: p.Plan[T]) -> T:
        try:
            return await self._client._run(self._guard(plan))
        except errors.SessionExpired:
            raise
        except errors.UnknownSession as e:
            raise self._core.expired(e) from e

    def lock(self, name: str, *, shared: bool = False, timeout: Optional[float] = None,
             on_lost: Optional[Callable[[Sequencer], None]] = None) -> "Lock":
        return Lock(self, name, shared=shared, timeout=timeout, on_lost=on_lost)

    def barrier(self, name: str, count: int) -> "Barrier":
        return Barrier(self, name, count)

    def election(self, name: str) -> "Election":
        return Election(self, name)

    async def info(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        return await self._call(self._client._protocol.read(f"/v1/sessions/{self.id}", timeout))


_UNSET: Any = object()


class Lock(LockBase[Session]):
    """As :class:`voltlock.Lock`: ``async with s.lock(name) as seq:``."""

    async def acquire(self, timeout: Optional[float] = _UNSET, *,
                      call_timeout: Optional[float] = None) -> Sequencer:
        wait = self._core.timeout if timeout is _UNSET else timeout
        return await self._session._call(self._core.acquire(
            self._session._client._protocol.acquire(self.name, self._session.id, self.shared,
                                                    wait, call_timeout)))

    async def release(self, *, timeout: Optional[float] = None) -> None:
        if self._core.releasing():
            await self._session._call(self._session._client._protocol.release(
                self.name, self._session.id, timeout))

    async def __aenter__(self) -> Sequencer:
        return await self.acquire()

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        lost = self._core.lost_while_held()
        try:
            await self.release()
        except errors.SessionExpired as e:
            lost = lost or e
        except errors.Error as e:
            if lost is None:
                raise
            # The grant did not stand: that is the news, whatever became of the release.
            lost.__cause__ = e
        if lost is not None and exc_type is None:
            raise lost


class Barrier(BarrierBase[Session]):
    """As :class:`voltlock.Barrier`, awaited."""

    async def enter(self, timeout: Optional[float] = None, *,
                    call_timeout: Optional[float] = None) -> int:
        return await self._session._call(self._session._client._protocol.barrier_enter(
            self.name, self._session.id, self.count, timeout, call_timeout))

    async def leave(self, timeout: Optional[float] = None, *,
                    call_timeout: Optional[float] = None) -> int:
        return await self._session._call(self._session._client._protocol.barrier_leave(
            self.name, self._session.id, timeout, call_timeout))


class Election:
    """As :class:`voltlock.Election`, awaited."""

    def __init__(self, session: Session, name: str) -> None:
        self.name = p.check_name(name, "election name")
        self._session = session
        self._lock = session.lock(name)

    async def campaign(self, value: Value, timeout: Optional[float] = None, *,
                       call_timeout: Optional[float] = None) -> Sequencer:
        seq = await self._lock.acquire(timeout, call_timeout=call_timeout)
        await self._session._call(self._session._client._protocol.put(
            self.name, value, prev_revision=None, sequencer=seq, session=self._session.id,
            timeout=call_timeout))
        return seq

    async def leader(self, *, timeout: Optional[float] = None) -> Optional[Value]:
        kv = await self._session._client.get(self.name, timeout=timeout)
        return kv.value if kv is not None else None

    async def resign(self, *, timeout: Optional[float] = None) -> None:
        seq = self._lock.sequencer
        if seq is not None and not self._session.lost.is_set():
            try:
                await self._session._client.delete(self.name, sequencer=seq, timeout=timeout)
            except errors.SequencerInvalid:
                pass
        await self._lock.release(timeout=timeout)

    async def observe(self, *, timeout: Optional[float] = None
                      ) -> AsyncIterator[Optional[Value]]:
        kv, revision = await self._session._client.get_revision(self.name, timeout=timeout)
        yield kv.value if kv is not None else None
        async with self._session._client.watch(self.name, start_revision=revision + 1,
                                               timeout=timeout) as changes:
            async for event in changes:
                yield event.value if event.type == "put" else None


class Watch(WatchBase[Client]):
    """As :class:`voltlock.Watch`: ``async for ev in watch``; ``close()`` ends it."""

    def __init__(self, client: Client, stream: p.WatchStream, place_within: float) -> None:
        super().__init__(client, stream)
        self._stream: Optional[_Connection] = None
        # The stream being opened, for close() to end.
        self._opening: Optional["asyncio.Task[Union[p.Reply, p.Failure, _Connection]]"] = None
        self._closed = asyncio.Event()
        self._place_within = place_within

    def __aiter__(self) -> "Watch":
        return self

    async def __aenter__(self) -> "Watch":
        """Opens the stream and reads until the cell says where it starts, so that a watch
        "from the next change" sees every change after ``async with`` entered (a cell that
        cannot be reached within the watch's timeout leaves that to the first event)."""
        deadline = time.monotonic() + self._place_within
        while self._state.next_revision is None and not self._closed.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await self._step(left)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        if self._opening is not None:
            self._opening.cancel()
        if self._stream is not None:
            self._stream.close()

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._closed.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def __anext__(self) -> WatchEvent:
        while not self._closed.is_set():
            if self._ready:
                return self._ready.popleft()
            await self._step()
        raise StopAsyncIteration  # closed: events still buffered are not handed out

    async def _step(self, seconds: Optional[float] = None) -> None:
        """Opens the stream (within `seconds`, if given), or takes its next chunk; reopens it
        after a drop or a cut."""
        if self._stream is None:
            await self._open(seconds)
            return
        try:
            chunk = await asyncio.wait_for(self._stream.read_some(), p.WATCH_READ_TIMEOUT)
            problem = "the stream ended"
        except _CONNECTION_ERRORS as e:
            chunk, problem = b"", p.describe(e)
        if not chunk:
            self._stream.close()
            self._stream = None
            await self._pause(self._state.dropped(problem))
        elif not self._take(chunk):
            self._stream.close()
            self._stream = None

    async def _open(self, seconds: Optional[float]) -> None:
        opening = self._opening = asyncio.ensure_future(
            self._client._transport.open_stream(self._state.attempt(seconds)))
        try:
            # Not awaited itself: its cancellation by close() is not this task's.
            await asyncio.wait({opening})
        except BaseException:
            opening.cancel()
            raise
        finally:
            self._opening = None
        if opening.cancelled():
            return  # close() ended it
        opened = opening.result()
        if self._closed.is_set():
            if isinstance(opened, _Connection):
                opened.close()
        elif isinstance(opened, p.Failure):
            await self._pause(self._state.unreached(opened))
        elif isinstance(opened, p.Reply):
            await self._pause(self._state.refused(opened))
        else:
            self._state.opened()
            self._stream = opened
