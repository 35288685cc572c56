"""The blocking client: the protocol plans of `_protocol` run over `http.client` keep-alive
connections (the standard library: no dependency, and the least overhead per request)."""
from __future__ import annotations

import http.client
import selectors
import socket
import ssl
import threading
import time
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar, Union)

from . import _protocol as p
from . import errors
from ._surface import (BarrierBase, ClientBase, LockBase, SessionBase, WatchBase,
                       probe_while_held)
from .models import KeyValue, Sequencer, Value, WatchEvent

T = TypeVar("T")

_RECONNECTABLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                  ConnectionAbortedError)


class _Connection(http.client.HTTPConnection):
    _held: Optional[List[bytes]] = None
    tls: Optional[ssl.SSLContext] = None  # https: the client's context
    probing = False  # probe_while_held

    def probe(self, held: bool) -> None:
        if held != self.probing:
            probe_while_held(self.sock, held)
            self.probing = held

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        # Requests are small and answered at once: no Nagle delay on a kept connection.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host) if self.tls else sock

    def send(self, data: Any) -> None:
        if self._held is not None and isinstance(data, (bytes, bytearray)):
            self._held.append(bytes(data))
            return
        super().send(data)

    def request_in_one_write(self, method: str, target: str, body: Optional[bytes],
                             headers: Dict[str, str]) -> None:
        """http.client's request, but headers and body leave in one write (http.client sends
        them separately): one segment and one syscall per request instead of two."""
        self._held = []
        try:
            self.request(method, target, body=body, headers=headers)
        finally:
            held, self._held = self._held, None
        assert self.sock is not None
        self.sock.sendall(b"".join(held))


def _shut_down(connection: _Connection) -> None:
    """Ends the connection at once, from any thread: the FIN goes out even while a response
    object still holds the socket (http.client's makefile keeps the descriptor open until it is
    closed itself), so a server holding a wait for it sees its client leave, and a read or
    write on it in another thread fails. The socket stays for its owner to close."""
    sock = connection.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _hang_up(connection: _Connection) -> None:
    """Closes the connection for good, at once (its owner's thread)."""
    _shut_down(connection)
    connection.close()


class _Stream:
    """An open watch response, read a chunk at a time; `close()` from any thread ends a read."""

    def __init__(self, connection: _Connection, response: http.client.HTTPResponse) -> None:
        self._connection, self._response = connection, response

    def read_chunk(self) -> bytes:
        return self._response.read1(65536)

    def close(self) -> None:
        _hang_up(self._connection)


class HttpTransport:
    """Keep-alive connections, a pool per replica, shared by every thread of one client."""

    def __init__(self, tls: Optional[ssl.SSLContext] = None,
                 max_idle_per_endpoint: int = 32) -> None:
        self._tls = tls
        self._idle: Dict[p.Endpoint, List[_Connection]] = {}
        self._max_idle = max_idle_per_endpoint
        self._mutex = threading.Lock()
        self._held: p.HeldRequests[_Connection] = p.HeldRequests()

    def _take(self, endpoint: p.Endpoint, attempt: p.Attempt,
              fresh: bool) -> Tuple[_Connection, bool]:
        if not fresh:
            with self._mutex:
                idle = self._idle.get(endpoint)
                if idle:
                    return idle.pop(), True
        connection = _Connection(endpoint.host, endpoint.port, timeout=attempt.connect_timeout)
        if endpoint.tls:
            connection.tls = self._tls
        connection.connect()
        return connection, False

    def _give_back(self, endpoint: p.Endpoint, connection: _Connection) -> None:
        with self._mutex:
            idle = self._idle.setdefault(endpoint, [])
            if len(idle) < self._max_idle:
                idle.append(connection)
                return
        connection.close()

    def _send(self, attempt: p.Attempt,
              connected: Optional[Callable[[_Connection], bool]] = None
              ) -> Union[p.Failure, Tuple[_Connection, http.client.HTTPResponse]]:
        """Sends the request and reads the answer's headers; `connected` is told each
        connection the request goes on, before it is sent, and says whether to go on."""
        for fresh in (False, True):
            try:
                connection, reused = self._take(attempt.endpoint, attempt, fresh)
            except OSError as e:
                return p.connect_failure(attempt.endpoint, e)
            if connected is not None and not connected(connection):
                connection.close()
                return p.Failure("closed before it was sent")
            try:
                assert connection.sock is not None
                connection.sock.settimeout(attempt.read_timeout)
                connection.probe(attempt.held)
                connection.request_in_one_write(attempt.method, attempt.target, attempt.body,
                                                dict(attempt.headers))
                if not attempt.held:
                    return connection, connection.getresponse()
                if not self._answer_coming(connection, attempt):
                    self._held.leave(connection, attempt.read_timeout)
                    return p.Failure(p.stopped_replica(attempt.endpoint))
                response = connection.getresponse()
                connection.sock.settimeout(attempt.read_timeout)  # for the body
                return connection, response
            except (OSError, http.client.HTTPException) as e:
                connection.close()
                # A kept connection the server closed while idle fails at once: try a fresh one
                # to the same replica (safe: writes carry their idempotency pair).
                if not (reused and isinstance(e, _RECONNECTABLE)):
                    return p.Failure(p.describe(e))
            except BaseException:
                # Interrupted mid-request (KeyboardInterrupt, or whatever a signal handler
                # raises): hang up, so that the cell withdraws a lock wait rather than grant it
                # later to a caller that has gone (as aio does for a cancelled task).
                _hang_up(connection)
                raise
        raise AssertionError("unreachable")

    def _answer_coming(self, connection: _Connection, attempt: p.Attempt) -> bool:
        """While the cell holds the request: False once its replica failed HELD_CHECK_MISSES
        /healthz checks in a row with nothing arriving; True as soon as something arrives, or
        at the read timeout, with the socket's timeout set to what is left of it."""
        deadline = time.monotonic() + attempt.read_timeout
        misses = 0
        sock = connection.sock
        assert sock is not None
        with selectors.DefaultSelector() as selector:
            selector.register(sock, selectors.EVENT_READ)

            def arrived(wait: float) -> bool:
                return bool((isinstance(sock, ssl.SSLSocket) and sock.pending()) or
                            selector.select(wait))
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or arrived(min(p.HELD_CHECK_INTERVAL_S, left)):
                    sock.settimeout(max(0.001, deadline - time.monotonic()))
                    return True
                misses = 0 if self._healthy(attempt.endpoint) else misses + 1
                # An answer may have come during the check.
                if misses >= p.HELD_CHECK_MISSES and not arrived(0):
                    return False

    def _healthy(self, endpoint: p.Endpoint) -> bool:
        if self._held.answered_lately(endpoint):
            return True
        check = _Connection(endpoint.host, endpoint.port, timeout=p.HELD_CHECK_TIMEOUT_S)
        if endpoint.tls:
            check.tls = self._tls
        try:
            check.connect()
            check.request("GET", "/healthz")
            response = check.getresponse()
            response.read()
            if response.status != 200:
                return False
        except (OSError, http.client.HTTPException):
            return False
        finally:
            check.close()
        self._held.answered(endpoint)
        return True

    def perform(self, attempt: p.Attempt) -> Union[p.Reply, p.Failure]:
        for left in self._held.to_close():
            left.close()
        sent = self._send(attempt)
        if isinstance(sent, p.Failure):
            return sent
        connection, response = sent
        try:
            body = response.read()
        except (OSError, http.client.HTTPException) as e:
            connection.close()
            return p.Failure(p.describe(e))
        except BaseException:
            _hang_up(connection)
            raise
        headers = {k.lower(): v for k, v in response.getheaders()}
        if response.will_close:
            connection.close()
        else:
            self._give_back(attempt.endpoint, connection)
        return p.Reply(response.status, headers, body)

    def open_stream(self, attempt: p.Attempt, connected: Callable[[_Connection], bool]
                    ) -> Union[p.Reply, p.Failure, _Stream]:
        """Opens a watch's stream; `connected` is told the connection it is being opened on
        (for a close() from another thread to shut down), and says whether to go on."""
        sent = self._send(attempt, connected)
        if isinstance(sent, p.Failure):
            return sent
        connection, response = sent
        if response.status == 200:
            # The headers had the attempt's time; the stream's silence has its own limit (the
            # cell sends a comment every 10 s).
            assert connection.sock is not None
            connection.sock.settimeout(p.WATCH_READ_TIMEOUT)
            return _Stream(connection, response)
        try:
            body = response.read()
        except (OSError, http.client.HTTPException) as e:
            return p.Failure(p.describe(e))
        finally:
            connection.close()
        return p.Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, body)

    def close(self) -> None:
        with self._mutex:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()
        for left in self._held.to_close(everything=True):
            left.close()


class Client(ClientBase[HttpTransport]):
    """A client of one Voltlock cell. Thread-safe: share one per process.

    ``endpoints``: the replicas, ``["http://10.77.0.10:7480", ...]`` (or a comma-separated
    string); None reads ``VOLTLOCK_ENDPOINTS``. ``timeout``: seconds any call may take, retries
    and failover included, unless the call says otherwise (every call that talks to the cell
    takes ``timeout=``, or ``call_timeout=`` where ``timeout`` is a wait).
    ``connect_timeout``, ``attempt_timeout``: how long one replica may take to accept a
    connection, and to answer (plus any wait asked for), before the call tries the next.
    https:// endpoints: ``cacert`` (the cell CA's PEM file; default the system's CAs),
    ``cert`` and ``key`` (a client certificate, for a cell that requires one), or a whole
    ``ssl_context``; unset, ``VOLTLOCK_CACERT``, ``VOLTLOCK_CERT``, ``VOLTLOCK_KEY``.
    ``token``: a bearer token for a cell with auth on (docs/security-auth.md), sent as
    ``Authorization: Bearer``; unset, ``VOLTLOCK_TOKEN``.
    """

    def _make_transport(self, tls: Optional[ssl.SSLContext]) -> HttpTransport:
        return HttpTransport(tls)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the sessions opened through this client (best effort, within
        ``attempt_timeout`` all together: a session the cell cannot be told of ends at its TTL),
        stopping their keepalives; ends its watches and closes the kept connections. Any later
        call raises RuntimeError."""
        deadline = self._closing_deadline()
        for session in list(self._sessions):
            try:
                session.close(timeout=session._close_budget(deadline))
            except errors.Error as e:
                self._session_not_closed(session, e)
        self._close_the_rest()

    def _run(self, plan: p.Plan[T]) -> T:
        try:
            self._check_not_closed()
            step = next(plan)
            while True:
                if isinstance(step, p.Sleep):
                    time.sleep(step.seconds)
                    outcome: p.Outcome = None
                else:
                    outcome = self._transport.perform(step)
                step = plan.send(outcome)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            plan.close()

    # --- sessions -------------------------------------------------------------------------------

    def session(self, ttl: float = 10.0, *, lock_delay: float = 0.0, name: str = "",
                grace: Optional[float] = None,
                on_lost: Optional[Callable[["Session"], None]] = None,
                timeout: Optional[float] = None) -> "Session":
        """A session (not yet open: ``with client.session(ttl=10) as s:`` or ``.open()``).
        ``ttl`` and ``lock_delay`` in seconds; ``grace``: how long after its lease ran out
        unrenewed the client still tries before it calls the session lost (default: ttl)."""
        return Session(self, ttl=ttl, lock_delay=lock_delay, name=name, grace=grace,
                       on_lost=on_lost, timeout=timeout)

    # --- key/value ------------------------------------------------------------------------------

    def put(self, key: str, value: Value, *, prev_revision: Optional[int] = None,
            sequencer: Optional[Sequencer] = None, session: "Union[Session, int, None]" = None,
            timeout: Optional[float] = None) -> int:
        """Writes `value` (str or bytes) at `key`; returns the new revision.
        ``prev_revision``: compare-and-set on the key's mod_revision (0: must not exist;
        CasMismatch otherwise). ``sequencer``: a fenced write, refused with SequencerInvalid
        once that grant is gone. ``session``: the key is ephemeral, deleted when it ends."""
        session_id = session.id if isinstance(session, Session) else session
        return self._run(self._protocol.put(key, value, prev_revision=prev_revision,
                                            sequencer=sequencer, session=session_id,
                                            timeout=timeout))

    def get(self, key: str, *, stale: bool = False,
            timeout: Optional[float] = None) -> Optional[KeyValue]:
        """The key, or None. Linearizable (a read through the log) unless ``stale``."""
        return self._run(self._protocol.get(key, timeout, stale))[0]

    def get_revision(self, key: str, *,
                     timeout: Optional[float] = None) -> Tuple[Optional[KeyValue], int]:
        """The key (or None) and the cell's revision at that read: watch from revision + 1 to
        see every later change."""
        return self._run(self._protocol.get(key, timeout))

    def get_prefix(self, prefix: str, *, page_size: Optional[int] = None,
                   timeout: Optional[float] = None) -> Iterator[KeyValue]:
        """Every key under `prefix` in key order, read a page at a time (each page is its own
        linearizable read; ``""`` is every key)."""
        return self._pages(p.PrefixPager(self._protocol, prefix, page_size, timeout))

    def _pages(self, pager: p.PrefixPager) -> Iterator[KeyValue]:
        while not pager.done:
            yield from self._run(pager.next_page())

    def delete(self, key: str, *, prefix: bool = False, prev_revision: Optional[int] = None,
               sequencer: Optional[Sequencer] = None, timeout: Optional[float] = None) -> int:
        """Deletes the key (or every key under it with ``prefix``); returns how many."""
        return self._run(self._protocol.delete(key, prefix=prefix, prev_revision=prev_revision,
                                               sequencer=sequencer, timeout=timeout))

    def check(self, sequencer: Sequencer, *, timeout: Optional[float] = None) -> bool:
        """Whether the cell still holds that grant (any process's sequencer)."""
        return self._run(self._protocol.check(sequencer, timeout))

    def watch(self, key: str, *, prefix: bool = False, start_revision: Optional[int] = None,
              spaces: Optional[Sequence[str]] = None,
              timeout: Optional[float] = None) -> "Watch":
        """The changes to `key` (or under it), from `start_revision` (default: the next change
        after this call) on, for as long as it is iterated; it reconnects by itself.
        ``close()`` ends it. Without `start_revision` it returns once the cell has said where
        the watch starts: the replicas are tried in turn, each for ``attempt_timeout``, for up
        to ``timeout`` (the client's by default); if none answered, the watch starts where its
        stream first opens."""
        watch = Watch(self, p.WatchStream(self._protocol, key, prefix=prefix,
                                          start_revision=start_revision, spaces=spaces))
        watch._place(self._protocol.budget(timeout))
        return watch

    # --- reading the cell's state ---------------------------------------------------------------

    def lock_info(self, name: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """``{name, holders, waiters, generation, delay_until_ms}`` of a lock."""
        p.check_name(name, "lock name")
        return self._run(self._protocol.read(f"/v1/locks/{p.quote_name(name)}", timeout))

    def cluster(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """``GET /v1/cluster`` of the replica in use: members, leader, view, counters."""
        return self._run(self._protocol.read("/v1/cluster", timeout))

    # --- users, roles and tokens (the admin role; docs/security-auth.md) -------------------------

    def put_role(self, name: str, grants: Sequence[Mapping[str, Any]], *,
                 timeout: Optional[float] = None) -> int:
        """Creates the role or replaces its grants, each ``{"permissions": ["read", ...],
        "resource": "key:app/"}`` (resource: key:, lock:, barrier: PREFIX, or "*"). Returns the
        auth revision."""
        answer = self._run(self._protocol.auth_write(
            "PUT", f"/v1/auth/roles/{p.quote_name(name)}", {"grants": [dict(g) for g in grants]},
            timeout))
        return int(answer["auth_revision"])

    def delete_role(self, name: str, *, timeout: Optional[float] = None) -> int:
        """Removes the role (and takes it from its users); NotFound if there is none."""
        answer = self._run(self._protocol.auth_write(
            "DELETE", f"/v1/auth/roles/{p.quote_name(name)}", None, timeout))
        return int(answer["auth_revision"])

    def roles(self, *, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Every replicated role: ``{name, grants}``."""
        return list((self._run(self._protocol.read("/v1/auth/roles", timeout)))["roles"])

    def put_user(self, name: str, roles: Sequence[str], *,
                 timeout: Optional[float] = None) -> int:
        """Creates the user or replaces its roles ("admin" or roles that exist)."""
        answer = self._run(self._protocol.auth_write(
            "PUT", f"/v1/auth/users/{p.quote_name(name)}", {"roles": list(roles)}, timeout))
        return int(answer["auth_revision"])

    def delete_user(self, name: str, *, timeout: Optional[float] = None) -> int:
        """Removes the user and revokes its tokens."""
        answer = self._run(self._protocol.auth_write(
            "DELETE", f"/v1/auth/users/{p.quote_name(name)}", None, timeout))
        return int(answer["auth_revision"])

    def users(self, *, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Every replicated user: ``{name, roles, tokens}`` (token ids)."""
        return list((self._run(self._protocol.read("/v1/auth/users", timeout)))["users"])

    def create_token(self, user: str, *, ttl: Optional[float] = None,
                     timeout: Optional[float] = None) -> Dict[str, Any]:
        """A new token for `user`, expiring after ``ttl`` seconds (None: never):
        ``{token, id, user, ttl_s, ...}``. The only time the token is shown."""
        return self._run(self._protocol.create_token(user, ttl, timeout))

    def revoke_token(self, token_id: str, *, timeout: Optional[float] = None) -> int:
        """Revokes a token by its id: every replica refuses it once it has applied this."""
        answer = self._run(self._protocol.auth_write(
            "DELETE", f"/v1/auth/tokens/{p.quote_name(token_id)}", None, timeout))
        return int(answer["auth_revision"])

    def tokens(self, *, timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Every replicated token: ``{id, user, created_ms, expires_ms}``; never the token."""
        return list((self._run(self._protocol.read("/v1/auth/tokens", timeout)))["tokens"])


class Session(SessionBase[Client]):
    """A session: its locks, barriers and ephemeral keys live while it does. Kept alive by a
    background thread (every ttl/3). When it is lost, the client learns it: :attr:`lost` is
    set, the ``on_lost`` callbacks run (on the keepalive thread), every sequencer of it is no
    longer ``valid``, and the next call on it raises :class:`~voltlock.SessionExpired`."""

    _new_event = threading.Event
    lost: threading.Event
    _stop: threading.Event
    _thread: Optional[threading.Thread] = None

    # --- life -----------------------------------------------------------------------------------

    def open(self) -> "Session":
        """Creates the session in the cell and starts its keepalives."""
        self._core.check_openable()
        ttl, lock_delay, name, timeout = self._settings
        sent = self._client._protocol.clock()
        created = self._client._run(self._client._protocol.create_session(
            ttl, lock_delay, name, timeout))
        self._opened(int(created["session"]), sent)
        self._thread = threading.Thread(target=self._keep_alive, daemon=True,
                                        name=f"voltlock-keepalive-{self.id}")
        self._thread.start()
        return self

    def close(self, *, timeout: Optional[float] = None) -> None:
        """Stops the keepalives and ends the session (releasing its locks and deleting its
        ephemeral keys); its state is then ``"closed"`` (:attr:`lost` is not set). If the cell
        cannot be told (Unavailable), the session ends there at its TTL. A lost session is only
        stopped."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if not self._closing():
            return
        try:
            self._client._run(self._client._protocol.close_session(self.id, timeout))
        finally:
            self._core.close()

    def __enter__(self) -> "Session":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _keep_alive(self) -> None:
        protocol = self._client._protocol
        while True:
            delay, budget = self._core.next_keepalive()
            if self._stop.wait(delay):
                return
            sent, error = protocol.clock(), None
            try:
                self._client._run(self._keepalive(budget))
            except errors.Error as e:
                error = e
            if self._stop.is_set() or not self._keepalive_done(sent, error):
                return

    def _call(self, plan: p.Plan[T]) -> T:
        """Runs a plan on behalf of this session: SessionExpired if it is lost (or turns out to
        be)."""
        try:
            return self._client._run(self._guard(plan))
        except errors.SessionExpired:
            raise
        except errors.UnknownSession as e:
            raise self._core.expired(e) from e

    # --- what a session holds -------------------------------------------------------------------

    def lock(self, name: str, *, shared: bool = False, timeout: Optional[float] = None,
             on_lost: Optional[Callable[[Sequencer], None]] = None) -> "Lock":
        """A lock of this session (``with s.lock(name) as seq:``, or ``.acquire()``).
        ``timeout``: None (or math.inf) waits for ever, 0 tries once (LockBusy), else
        WaitTimedOut."""
        return Lock(self, name, shared=shared, timeout=timeout, on_lost=on_lost)

    def barrier(self, name: str, count: int) -> "Barrier":
        """A double barrier of `count` sessions: ``enter()`` then ``leave()``."""
        return Barrier(self, name, count)

    def election(self, name: str) -> "Election":
        """Leader election on `name` (a lock and an ephemeral key of that name)."""
        return Election(self, name)

    def info(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        """What the cell knows of this session: held and waited-for locks, barriers, keys."""
        return self._call(self._client._protocol.read(f"/v1/sessions/{self.id}", timeout))


_UNSET: Any = object()


class Lock(LockBase[Session]):
    """A lock held by a session. Mutual exclusion is between sessions: threads that share one
    session share its locks."""

    def acquire(self, timeout: Optional[float] = _UNSET, *,
                call_timeout: Optional[float] = None) -> Sequencer:
        """Waits for the lock (``timeout`` as in ``Session.lock``) and returns its sequencer."""
        wait = self._core.timeout if timeout is _UNSET else timeout
        return self._session._call(self._core.acquire(self._session._client._protocol.acquire(
            self.name, self._session.id, self.shared, wait, call_timeout)))

    def release(self, *, timeout: Optional[float] = None) -> None:
        """Releases the lock (nothing to do if its session is lost: the cell released it)."""
        if self._core.releasing():
            self._session._call(self._session._client._protocol.release(
                self.name, self._session.id, timeout))

    def __enter__(self) -> Sequencer:
        return self.acquire()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        lost = self._core.lost_while_held()
        try:
            self.release()
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
    """A double barrier: ``enter()`` returns once `count` sessions have entered, ``leave()``
    once all of them have left."""

    def enter(self, timeout: Optional[float] = None, *,
              call_timeout: Optional[float] = None) -> int:
        """Waits for the barrier to fill; returns the revision. None waits for ever, 0 does not
        wait (BarrierNotReady), else WaitTimedOut. ``call_timeout``: the call's own time on top
        of the wait (the client's by default), as for ``Lock.acquire``."""
        return self._session._call(self._session._client._protocol.barrier_enter(
            self.name, self._session.id, self.count, timeout, call_timeout))

    def leave(self, timeout: Optional[float] = None, *,
              call_timeout: Optional[float] = None) -> int:
        """Waits for every member to leave; returns the revision."""
        return self._session._call(self._session._client._protocol.barrier_leave(
            self.name, self._session.id, timeout, call_timeout))


class Election:
    """Leader election: the winner holds the lock `name` and publishes its value at the key
    `name` (ephemeral, fenced with its sequencer), so the key names the leader only while the
    leader's session lives."""

    def __init__(self, session: Session, name: str) -> None:
        self.name = p.check_name(name, "election name")
        self._session = session
        self._lock = session.lock(name)

    def campaign(self, value: Value, timeout: Optional[float] = None, *,
                 call_timeout: Optional[float] = None) -> Sequencer:
        """Waits to become the leader (``timeout`` as in ``Lock.acquire``), then publishes
        `value`; returns the leadership's sequencer (fence your writes with it).
        ``call_timeout``: the time of the acquire on top of its wait, and of the publishing
        (the client's by default), as for ``Lock.acquire``."""
        seq = self._lock.acquire(timeout, call_timeout=call_timeout)
        self._session._call(self._session._client._protocol.put(
            self.name, value, prev_revision=None, sequencer=seq, session=self._session.id,
            timeout=call_timeout))
        return seq

    def leader(self, *, timeout: Optional[float] = None) -> Optional[Value]:
        """The current leader's value, or None."""
        kv = self._session._client.get(self.name, timeout=timeout)
        return kv.value if kv is not None else None

    def resign(self, *, timeout: Optional[float] = None) -> None:
        """Withdraws this session's value and leadership (``timeout`` for each of the two)."""
        seq = self._lock.sequencer
        if seq is not None and not self._session.lost.is_set():
            try:
                self._session._client.delete(self.name, sequencer=seq, timeout=timeout)
            except errors.SequencerInvalid:
                pass
        self._lock.release(timeout=timeout)

    def observe(self, *, timeout: Optional[float] = None) -> Iterator[Optional[Value]]:
        """The leader's value now and after every change (None: no leader), for ever.
        ``timeout``: for the first read, and to place the watch (``Client.watch``)."""
        kv, revision = self._session._client.get_revision(self.name, timeout=timeout)
        yield kv.value if kv is not None else None
        with self._session._client.watch(self.name, start_revision=revision + 1,
                                         timeout=timeout) as changes:
            for event in changes:
                yield event.value if event.type == "put" else None


class Watch(WatchBase[Client]):
    """An iterator of :class:`~voltlock.WatchEvent`; reconnects after a dropped stream or a
    leader change and resumes after the last revision it yielded. ``close()`` (from any
    thread) ends the iteration."""

    def __init__(self, client: Client, stream: p.WatchStream) -> None:
        super().__init__(client, stream)
        self._stream: Optional[_Stream] = None
        # The connection of the stream, open or being opened: what close() ends.
        self._connection: Optional[_Connection] = None
        self._closed = threading.Event()
        # Held while a thread reads or opens the stream: the connection is that thread's to
        # close, and close() from another only shuts it down.
        self._stepping = threading.Lock()

    def __iter__(self) -> "Watch":
        return self

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        connection = self._connection
        if connection is None:
            return
        if not self._stepping.acquire(blocking=False):
            _shut_down(connection)  # the thread in _step sees it fail and closes it
            return
        try:
            _hang_up(connection)
        finally:
            self._stepping.release()

    def __next__(self) -> WatchEvent:
        while not self._closed.is_set():
            if self._ready:
                return self._ready.popleft()
            self._step()
        raise StopIteration  # closed: events still buffered are not handed out

    def _place(self, seconds: float) -> None:
        """Opens the stream and reads until the cell says where it starts, so that a watch
        "from the next change" sees every change after watch() returned, not only those after
        the first next(). A cell that cannot be reached in `seconds` leaves that to next()."""
        deadline = time.monotonic() + seconds
        while self._state.next_revision is None and not self._closed.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._step(left)

    def _step(self, seconds: Optional[float] = None) -> None:
        """Opens the stream (within `seconds`, if given), or takes its next chunk; reopens it
        after a drop or a cut."""
        with self._stepping:
            if not self._closed.is_set():
                self._step_stream(seconds)
            if self._closed.is_set() and self._connection is not None:
                # close() came from another thread during the step and only shut it down.
                self._stream = None
                _hang_up(self._connection)

    def _step_stream(self, seconds: Optional[float]) -> None:
        if self._stream is None:
            self._open(seconds)
            return
        try:
            chunk = self._stream.read_chunk()
            problem = "the stream ended"
        except (OSError, http.client.HTTPException) as e:
            chunk, problem = b"", p.describe(e)
        except Exception:
            if self._closed.is_set():
                return  # close() from another thread tore the stream down under the read
            raise
        if not chunk:
            self._stream.close()
            self._stream = None
            self._closed.wait(self._state.dropped(problem))
        elif not self._take(chunk):
            self._stream.close()
            self._stream = None

    def _open(self, seconds: Optional[float]) -> None:
        opened = self._client._transport.open_stream(self._state.attempt(seconds),
                                                     self._connected)
        if self._closed.is_set():
            # close() came while it opened: the replica failed at nothing, and _step closes
            # the connection.
            return
        if isinstance(opened, p.Failure):
            self._closed.wait(self._state.unreached(opened))
        elif isinstance(opened, p.Reply):
            self._closed.wait(self._state.refused(opened))
        else:
            self._state.opened()
            self._stream = opened

    def _connected(self, connection: _Connection) -> bool:
        """Notes the connection the stream is being opened on; False once close() was called
        (it may have come before it could see this connection)."""
        self._connection = connection
        return not self._closed.is_set()
