"""What the blocking client (`_sync`) and the asyncio one (`aio`) share above their I/O: a
client made from its options, and the state, accessors and decisions of sessions, locks,
barriers and watches. Each of the two adds only what blocks or awaits."""
from __future__ import annotations

import logging
import os
import socket
import ssl
import collections
import weakref
from typing import Any, Callable, Deque, Generic, Optional, Sequence, Set, TypeVar
from typing import Protocol as Interface

from . import _protocol as p
from . import errors
from ._tls import client_context
from .models import Sequencer, WatchEvent

log = logging.getLogger("voltlock")


class Transport(Interface):
    """What the client base needs of a transport (its own calls differ, sync or async)."""

    def close(self) -> None: ...


TransportT = TypeVar("TransportT", bound=Transport)
T = TypeVar("T")
ClientT = TypeVar("ClientT", bound="ClientBase[Any]")
SessionT = TypeVar("SessionT", bound="SessionBase[Any]")


def endpoints_from_env(endpoints: Optional[Sequence[str]]) -> Sequence[str]:
    if endpoints is not None:
        return endpoints
    env = os.environ.get("VOLTLOCK_ENDPOINTS", "")
    if not env.strip():
        raise ValueError("no endpoints: pass Client([...]) or set VOLTLOCK_ENDPOINTS "
                         "(comma-separated http://host:port)")
    return env


def probe_while_held(sock: Any, held: bool) -> None:
    """Has the kernel probe the connection while the cell holds a request on it (a wait: TCP
    keepalive, p.HELD_PROBE_INTERVAL_S), or stop (an idle kept connection is left quiet)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, int(held))
    if not held:
        return
    for option, value in (("TCP_KEEPIDLE", p.HELD_PROBE_INTERVAL_S),
                          ("TCP_KEEPINTVL", p.HELD_PROBE_INTERVAL_S),
                          ("TCP_KEEPCNT", p.HELD_PROBES)):
        if hasattr(socket, option):  # Linux; elsewhere the system's own (slower) probing
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class ClientBase(Generic[TransportT]):
    """The protocol's state (routing, identities, timeouts) and a transport over it; options as
    :class:`voltlock.Client` documents them."""

    def __init__(self, endpoints: Optional[Sequence[str]] = None, *, timeout: float = 10.0,
                 connect_timeout: float = 1.0, attempt_timeout: float = 3.0,
                 cacert: Optional[str] = None, cert: Optional[str] = None,
                 key: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 token: Optional[str] = None) -> None:
        self._protocol = p.Protocol(endpoints_from_env(endpoints), timeout=timeout,
                                    connect_timeout=connect_timeout,
                                    attempt_timeout=attempt_timeout,
                                    token=token if token is not None
                                    else os.environ.get("VOLTLOCK_TOKEN") or None)
        self._transport = self._make_transport(client_context(
            self._protocol.router.endpoints, ssl_context=ssl_context, cacert=cacert, cert=cert,
            key=key))
        # What close() ends: the sessions opened through this client and not yet closed, and
        # its watches.
        self._sessions: Set[Any] = set()
        self._watches: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._closed = False

    def _check_not_closed(self) -> None:
        if self._closed:
            raise RuntimeError("this voltlock client is closed")

    def _closing_deadline(self) -> float:
        """close() ends the sessions within one attempt_timeout, all together: best effort, as a
        session the cell cannot be told of ends at its TTL anyway."""
        return self._protocol.clock() + self._protocol.attempt_timeout

    @staticmethod
    def _session_not_closed(session: Any, error: Exception) -> None:
        log.warning("closing the client: session %d not closed at the cell (%s); it ends at its "
                    "TTL", session.id, error)

    def _close_the_rest(self) -> None:
        """close() after its sessions: ends the watches, refuses later calls, hangs up."""
        for watch in list(self._watches):
            watch.close()
        self._closed = True
        self._transport.close()

    def _make_transport(self, tls: Optional[ssl.SSLContext]) -> TransportT:
        raise NotImplementedError


class Flag(Interface):
    """What a session needs of its events: threading.Event and asyncio.Event both are one."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


class SessionBase(Generic[ClientT]):
    """A session's lease state (`p.SessionCore`) and what reads it; `lost` and `_stop` are the
    events of the I/O side (`_new_event`)."""

    _new_event: Callable[[], Flag]
    lost: Flag

    def __init__(self, client: ClientT, *, ttl: float, lock_delay: float, name: str,
                 grace: Optional[float], on_lost: Optional[Callable[[Any], None]],
                 timeout: Optional[float]) -> None:
        self._client = client
        self.lost = self._new_event()
        self._stop = self._new_event()
        self._core = p.SessionCore(ttl, grace, client._protocol.clock, self._announce_loss)
        self._settings = (ttl, lock_delay, name, timeout)
        if on_lost is not None:
            self.on_lost(on_lost)

    @property
    def id(self) -> int:
        return self._core.id

    @property
    def ttl(self) -> float:
        return self._core.ttl

    @property
    def state(self) -> str:
        """``"connected"`` (the lease is known to run), ``"suspended"`` (it ran out unrenewed:
        the cell may have ended the session; keepalives go on), ``"lost"`` (for good), or
        ``"closed"`` (closed by its owner, or not opened yet)."""
        return self._core.state()

    def on_lost(self: SessionT, callback: Callable[[SessionT], None]) -> None:
        """Runs `callback(session)` once when the session is lost (at once if it is already)."""
        self._core.on_lost(lambda: callback(self))

    def _announce_loss(self) -> None:
        self.lost.set()
        self._stop.set()

    def _keepalive_done(self, sent: float, error: Optional[errors.Error]) -> bool:
        """Takes in how the keepalive sent at `sent` went (`error` None: it got through);
        False once the session is gone for good and keepalives end."""
        if isinstance(error, errors.UnknownSession):
            self._core.lose(f"the cell no longer knows session {self.id} (it expired)")
            return False
        if error is not None:
            log.debug("keepalive of session %d: %s", self.id, error)
            self._core.failed()
        else:
            self._core.renewed(sent)
        self._core.check_lost()
        return True

    def _opened(self, session_id: int, sent: float) -> None:
        self._core.opened(session_id, sent)
        self._client._sessions.add(self)

    def _closing(self) -> bool:
        """The client forgets the session; True if the cell is still to be told to end it (the
        core then knows that the session's end at the cell is its owner's doing)."""
        self._client._sessions.discard(self)
        if not self._core.is_open or self._core.ended():
            return False
        self._core.closing()
        return True

    def _close_budget(self, deadline: float) -> float:
        return max(0.1, deadline - self._client._protocol.clock())

    def _guard(self, plan: p.Plan[T]) -> p.Plan[T]:
        """`plan` on behalf of this session: SessionExpired before it starts, or between its
        attempts, once the session is lost (not the call's whole timeout later)."""
        return p.guarded(plan, self._core.check_usable)

    def _keepalive(self, budget: float) -> p.Plan[Any]:
        """One keepalive, given up between attempts once the session is being closed."""
        return p.guarded(self._client._protocol.keepalive(self.id, budget), self._check_running)

    def _check_running(self) -> None:
        if self._stop.is_set():
            raise errors.SessionExpired(f"session {self.id} is being closed")


class LockBase(Generic[SessionT]):
    """A lock's grant state (`p.LockCore`) for one session."""

    def __init__(self, session: SessionT, name: str, *, shared: bool, timeout: Optional[float],
                 on_lost: Optional[Callable[[Sequencer], None]]) -> None:
        self._session = session
        self._core = p.LockCore(session._core, name, shared=shared, timeout=timeout,
                                on_lost=on_lost)
        self.name, self.shared = self._core.name, self._core.shared

    @property
    def sequencer(self) -> Optional[Sequencer]:
        """The grant held, or None."""
        return self._core.sequencer


class BarrierBase(Generic[SessionT]):
    """A double barrier's name and size, checked, for one session."""

    def __init__(self, session: SessionT, name: str, count: int) -> None:
        self.name = p.check_name(name, "barrier name")
        self.count = p.check_int(count, "count", 1, p.MAX_BARRIER_COUNT)
        self._session = session


class WatchBase(Generic[ClientT]):
    """A watch's resumable position and parser (`p.WatchStream`)."""

    def __init__(self, client: ClientT, stream: p.WatchStream) -> None:
        client._check_not_closed()
        self._client, self._state = client, stream
        self._ready: Deque[WatchEvent] = collections.deque()
        client._watches.add(self)

    def close(self) -> None:
        raise NotImplementedError

    def _take(self, chunk: bytes) -> bool:
        """The events in the next chunk of the stream, ready to yield; False if the cell cut
        the stream of a reader that fell behind, to be reopened where it left off. A stream the
        cell ended with an error (Compacted) closes the watch and raises."""
        try:
            self._ready.extend(self._state.feed(chunk))
        except errors.Error:
            self.close()
            raise
        return not self._state.cut

    @property
    def next_revision(self) -> Optional[int]:
        """Where the watch would resume: the revision after the last one it yielded."""
        return self._state.next_revision
