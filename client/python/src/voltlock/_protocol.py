"""The protocol rules of the Voltlock SDK, without any I/O (sans-I/O).

Everything the sync client and `voltlock.aio` have in common lives here, once: checking
arguments, building requests, choosing the replica, the idempotency headers, retry and failover
decisions, mapping errors, parsing answers, the session lease rule, and reading watch streams.

An operation is a *plan*: a generator that yields what it needs done, an :class:`Attempt` (send
this HTTP request to this replica) or a :class:`Sleep`, and is sent back the outcome, a
:class:`Reply` or a :class:`Failure` (the request got no answer). Its return value is the
operation's result; its exceptions are the operation's errors. The sync client runs plans with
blocking sockets, `voltlock.aio` with asyncio; neither makes a decision of its own.
"""
from __future__ import annotations

import json
import logging
import math
import random
import re
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Generator, Generic, List, Mapping, Optional, Sequence,
                    Tuple, TypeVar, Union)

from . import errors
from .models import EXCLUSIVE, SHARED, KeyValue, Sequencer, Value, WatchEvent

T = TypeVar("T")
ConnectionT = TypeVar("ConnectionT")

# --- the limits of docs/api.md, checked before anything is sent ------------------------------

MAX_NAME_BYTES = 512
MAX_SESSION_NAME_BYTES = 128
MIN_TTL_MS, MAX_TTL_MS = 1_000, 86_400_000
MAX_LOCK_DELAY_MS = 60_000
MAX_WAIT_MS = 3_600_000  # one server-side wait; longer waits ask again
MAX_BARRIER_COUNT = 1_024
#: The cell answers a larger request body with 413 and closes the connection while it is still
#: being sent: refused here instead, at once.
MAX_REQUEST_BODY_BYTES = 1 << 20
#: How long past its wait the cell may take to say how a wait ended (docs/api.md "Waits").
WAIT_OUTCOME_MARGIN = 5.0
#: The cell sends a comment every 10 s of quiet on a watch: silence beyond this is a dead stream.
WATCH_READ_TIMEOUT = 25.0
#: A wait is silent on purpose, for up to an hour. While it is held the transport has the kernel
#: probe the connection (TCP keepalive) every this many seconds, and gives the connection up
#: after HELD_PROBES probes in a row went unanswered: a replica cut off from the client is left
#: within seconds, and the same request asked again at the next one finds the wait's outcome.
HELD_PROBE_INTERVAL_S = 1
HELD_PROBES = 3
#: A replica whose process is stopped (SIGSTOP, a frozen VM) still answers those probes from its
#: kernel. So while nothing arrives the transport also asks the same replica's /healthz, on a
#: connection of its own, every HELD_CHECK_INTERVAL_S, each given HELD_CHECK_TIMEOUT_S, and leaves
#: the wait after HELD_CHECK_MISSES unanswered in a row. The left connection is not closed until
#: the wait would have ended: a replica that saw it close would withdraw the wait, which the
#: request asked again elsewhere (same identity) has joined.
HELD_CHECK_INTERVAL_S = 1.0
HELD_CHECK_TIMEOUT_S = 1.0
HELD_CHECK_MISSES = 2


def stopped_replica(endpoint: Endpoint) -> str:
    """Why a held request was left (HELD_CHECK_MISSES)."""
    return (f"{endpoint.url} stopped answering /healthz ({HELD_CHECK_MISSES} checks "
            f"{HELD_CHECK_INTERVAL_S:g} s apart) while it held the request")


class HeldRequests(Generic[ConnectionT]):
    """A transport's bookkeeping for the requests the cell holds (HELD_CHECK_INTERVAL_S): when
    each replica last answered a /healthz check, which stands for every wait there for the next
    interval (a thousand waits at one replica make one check a second, not a thousand); and
    the connections of requests left at a replica that stopped answering, each kept open until
    its request would have ended there. Thread-safe."""

    def __init__(self) -> None:
        self._answered: Dict[Endpoint, float] = {}
        self._left: List[Tuple[float, ConnectionT]] = []
        self._mutex = threading.Lock()

    def answered_lately(self, endpoint: Endpoint) -> bool:
        with self._mutex:
            at = self._answered.get(endpoint)
        return at is not None and time.monotonic() - at < HELD_CHECK_INTERVAL_S

    def answered(self, endpoint: Endpoint) -> None:
        with self._mutex:
            self._answered[endpoint] = time.monotonic()

    def leave(self, connection: ConnectionT, seconds: float) -> None:
        with self._mutex:
            self._left.append((time.monotonic() + seconds, connection))

    def to_close(self, everything: bool = False) -> List[ConnectionT]:
        """Those whose time is up (all of them with `everything`), no longer kept."""
        now = time.monotonic()
        with self._mutex:
            done = [c for until, c in self._left if everything or until <= now]
            self._left = [(u, c) for u, c in self._left if not everything and u > now]
        return done


_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")


def utf8(text: str, what: str) -> bytes:
    """`text` as UTF-8; ValueError for a str that has none (a lone surrogate)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} is not valid Unicode text ({e.reason} at index {e.start})")


def check_name(name: object, what: str = "name", *, allow_empty: bool = False) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    size = len(utf8(name, what))
    if size == 0 and not allow_empty:
        raise ValueError(f"{what} must not be empty")
    if size > MAX_NAME_BYTES:
        raise ValueError(f"{what} is {size} bytes; at most {MAX_NAME_BYTES}")
    if _CONTROL_CHARACTER.search(name):
        raise ValueError(f"{what} {name!r} contains a control character")
    return name


def check_int(value: object, what: str, low: int, high: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"{low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{what} is {value}; it must be {bound}")
    return value


def check_bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, not {type(value).__name__}")
    return value


# The longest time an argument may give: about 31 years (more is a mistake, and would not fit
# the milliseconds the cell takes).
MAX_SECONDS = 1e9


def check_seconds(value: object, what: str) -> float:
    """A length of time: a finite number of seconds from 0 to MAX_SECONDS (NaN and infinity
    are refused: they are no time a request, a lease or a pause can be given)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not 0 <= value <= MAX_SECONDS:
        raise ValueError(f"{what} must be a finite number of seconds from 0 to "
                         f"{MAX_SECONDS:g}, not {value}")
    return float(value)


def check_positive_seconds(value: object, what: str) -> float:
    """A time that must pass before anything can happen (a call's, a connection's): > 0."""
    seconds = check_seconds(value, what)
    if seconds <= 0:
        raise ValueError(f"{what} must be > 0 seconds, not {value}")
    return seconds


def check_wait(value: object, what: str = "timeout") -> Optional[float]:
    """How long a lock or barrier waits: None waits for ever, and so does math.inf (the same
    wait, spelled as a number); 0 tries once."""
    if value is None or value == math.inf:
        return None
    return check_seconds(value, what)


def check_sequencer(seq: object) -> Sequencer:
    if not isinstance(seq, Sequencer):
        raise TypeError(f"sequencer must be a voltlock.Sequencer, not {type(seq).__name__} "
                        "(Sequencer.parse(text) reads one from text)")
    return seq


def value_fields(value: object) -> Dict[str, Any]:
    """The JSON fields carrying a value: text as it is, bytes as base64."""
    if isinstance(value, str):
        utf8(value, "value")
        return {"value": value}
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64
        return {"value": base64.b64encode(bytes(value)).decode("ascii"), "encoding": "base64"}
    raise TypeError(f"value must be str or bytes, not {type(value).__name__}")


_PLAIN_NAME = re.compile("[A-Za-z0-9_.~/:-]*")


def quote_name(name: str) -> str:
    """A name in a URL path: '/' and ':' stay as they are (docs/api.md), the rest is
    percent-encoded UTF-8."""
    if _PLAIN_NAME.fullmatch(name):
        return name  # the common case, without urllib's cost per call
    return urllib.parse.quote(name, safe="/:")


# --- what a plan asks for and is told ---------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """One replica's HTTP address; ``tls``: https://."""

    url: str
    host: str
    port: int
    tls: bool = False

    @classmethod
    def parse(cls, text: str) -> "Endpoint":
        if not isinstance(text, str):
            raise TypeError(f"an endpoint must be a str, not {type(text).__name__}")
        raw = text.strip()
        parts = urllib.parse.urlsplit(raw if "//" in raw else "http://" + raw)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"endpoint {text!r}: only http:// and https:// are supported")
        if not parts.hostname or parts.path not in ("", "/") or parts.query:
            raise ValueError(f"endpoint {text!r}: expected http://host:port or "
                             "https://host:port")
        tls = parts.scheme == "https"
        try:
            port = parts.port or (443 if tls else 80)
        except ValueError:
            raise ValueError(f"endpoint {text!r}: bad port")
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        return cls(url=f"{parts.scheme}://{shown}:{port}", host=host, port=port, tls=tls)


@dataclass(frozen=True)
class Attempt:
    """Send this request to this replica and answer with a Reply or a Failure. With ``stream``
    the driver hands the body over as it arrives (watches) instead of reading it whole, and
    ``read_timeout`` is for the headers only (the body's silence: WATCH_READ_TIMEOUT). With
    ``held`` (a wait) the driver probes the connection while it waits (HELD_PROBE_INTERVAL_S),
    and checks that the replica still answers (HELD_CHECK_INTERVAL_S)."""

    endpoint: Endpoint
    method: str
    target: str
    headers: Tuple[Tuple[str, str], ...]
    body: Optional[bytes]
    connect_timeout: float
    read_timeout: float
    stream: bool = False
    held: bool = False


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise errors.Error(f"HTTP {self.status}: the answer is not JSON: {self.body[:200]!r}",
                               code="bad_answer", status=self.status)


@dataclass(frozen=True)
class Failure:
    """The attempt got no answer: no connection, a timeout, or a dropped connection.
    ``permanent``: what to raise instead of trying again, for a failure no retry can cure."""

    reason: str
    permanent: Optional[Exception] = None


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def connect_failure(endpoint: Endpoint, error: Exception) -> Failure:
    """A connection to `endpoint` that did not open. A replica whose TLS certificate does not
    verify, or that does not speak TLS on an https:// endpoint, is a client's configuration
    error: it fails the call at once (an ``ssl.SSLError``) rather than being retried."""
    reason = f"connect: {describe(error)}"
    if isinstance(error, ssl.SSLCertVerificationError):
        return Failure(reason, ssl.SSLCertVerificationError(
            f"{endpoint.url}: the replica's TLS certificate did not verify "
            f"({error}): pass cacert= (the cell's CA certificate) or "
            "set VOLTLOCK_CACERT"))
    if isinstance(error, ssl.SSLError) and error.reason == "WRONG_VERSION_NUMBER":
        return Failure(reason, ssl.SSLError(
            f"{endpoint.url}: the replica does not answer in TLS ({error}): is the cell "
            "without TLS? then its endpoints are http://"))
    return Failure(reason)


Step = Union[Attempt, Sleep]
Outcome = Union[Reply, Failure, None]
Plan = Generator[Step, Outcome, T]


def error_from_reply(reply: Reply) -> errors.Error:
    try:
        body = json.loads(reply.body)
    except ValueError:
        body = reply.body.decode("utf-8", "replace")
    return errors.error_from_body(reply.status, body)


# --- which replica ------------------------------------------------------------------------------

class Router:
    """The replicas and the one requests go to now. It sticks to a replica while it answers,
    moves to the next one on a failure or a 503, and to the leader when a reply names it
    (``X-Voltlock-Leader: <index>``). The first answer makes it read the cell's member list
    (``/v1/cluster``, once): the replicas it was not given join its list, so a client given one
    replica still fails over, and a leader's index maps to an address. Thread-safe."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.split(",") if e.strip()]
        parsed = [Endpoint.parse(e) for e in endpoints]
        if not parsed:
            raise ValueError("no endpoints: pass a list of replicas' http://host:port "
                             "(or set VOLTLOCK_ENDPOINTS)")
        # Only ever grows (learn_members), so an index into it stays valid.
        self.endpoints: Tuple[Endpoint, ...] = tuple(dict.fromkeys(parsed))
        self.given = self.endpoints
        self._current = 0
        self._members: Optional[Dict[int, Endpoint]] = None
        self._leader: Optional[int] = None
        self._mutex = threading.Lock()

    def current(self) -> Endpoint:
        with self._mutex:
            return self.endpoints[self._current]

    def failed(self, endpoint: Endpoint) -> None:
        """Moves on from `endpoint`, unless another caller already has."""
        with self._mutex:
            if self.endpoints[self._current] == endpoint:
                self._current = (self._current + 1) % len(self.endpoints)

    def note_leader(self, header: str) -> None:
        try:
            index = int(header)
        except ValueError:
            return
        with self._mutex:
            self._leader = index
            self._go_to_leader()

    def _go_to_leader(self) -> None:
        leader = (self._members or {}).get(self._leader) if self._leader is not None else None
        if leader is not None:
            self._current = self.endpoints.index(leader)

    def take_member_question(self) -> bool:
        """True once, for the first caller after the first answer: it is to read the member
        list."""
        with self._mutex:
            wanted = self._members is None
            if wanted:
                self._members = {}
            return wanted

    def learn_members(self, cluster: Any) -> None:
        members: Dict[int, Endpoint] = {}
        # The cell lists addresses; they are reached as the endpoints given are (https or not).
        scheme = "https" if self.endpoints[0].tls else "http"
        for m in cluster.get("members", []) if isinstance(cluster, dict) else []:
            try:
                members[int(m["replica"])] = Endpoint.parse(
                    f"{scheme}://{m['ip']}:{m['http_port']}")
            except (KeyError, TypeError, ValueError):
                continue
        with self._mutex:
            self.endpoints += tuple(e for e in dict.fromkeys(members.values())
                                    if e not in self.endpoints)
            self._members = members
            self._go_to_leader()


class IdentityPool:
    """Idempotency identities (``X-Voltlock-Client-Id`` / ``-Request-Number``). The cell keeps
    one outstanding request per client id, so each concurrent call borrows an id of its own for
    the whole call, retries included, and every new call takes that id's next number."""

    def __init__(self, rng: Optional[random.Random] = None) -> None:
        self._rng = rng or random.SystemRandom()
        self._idle: List[List[int]] = []  # [client id, last number used]
        self._mutex = threading.Lock()

    def take(self) -> Tuple[int, int]:
        with self._mutex:
            entry = self._idle.pop() if self._idle else [self._rng.randint(1, 2**63 - 1), 0]
        entry[1] += 1
        return entry[0], entry[1]

    def give_back(self, identity: Tuple[int, int]) -> None:
        with self._mutex:
            self._idle.append([identity[0], identity[1]])


# --- one call, with retries and failover --------------------------------------------------------

@dataclass(frozen=True)
class Call:
    """One API request. ``write``: it changes state, so it carries an idempotency pair and is
    retried with the same pair. ``budget``: seconds for the whole call, retries included.
    ``hold``: seconds the cell holds the request on purpose (a wait); the answer to an attempt
    it holds may come up to WAIT_OUTCOME_MARGIN later, even past the budget."""

    method: str
    path: str
    query: Optional[Mapping[str, str]] = None
    body: Optional[Mapping[str, Any]] = None
    write: bool = False
    budget: float = 10.0
    hold: float = 0.0


def backoff(round_number: int) -> float:
    """After every replica failed `round_number` times in a row: 50 ms, doubling, at most 1 s."""
    return float(min(1.0, 0.05 * 2 ** max(0, round_number - 1)))


class Protocol:
    """The rules, for one client: its replicas, its identities, its default timeout."""

    def __init__(self, endpoints: Sequence[str], *, timeout: float = 10.0,
                 connect_timeout: float = 1.0, attempt_timeout: float = 3.0,
                 clock: Callable[[], float] = time.monotonic,
                 rng: Optional[random.Random] = None, token: Optional[str] = None) -> None:
        self.router = Router(endpoints)
        # Sent as `Authorization: Bearer` on every request, never in a URL.
        self.auth_headers: Tuple[Tuple[str, str], ...] = (
            (("Authorization", f"Bearer {token}"),) if token else ())
        self.identities = IdentityPool(rng)
        self.timeout = check_positive_seconds(timeout, "timeout")
        self.attempt_timeout = check_positive_seconds(attempt_timeout, "attempt_timeout")
        self.connect_timeout = check_positive_seconds(connect_timeout, "connect_timeout")
        self.clock = clock

    def budget(self, timeout: Optional[float]) -> float:
        """A call's time: `timeout`, or the client's when None."""
        return self.timeout if timeout is None else check_positive_seconds(timeout, "timeout")

    def exchange(self, call: Call) -> Plan[Any]:
        """Runs one call to an answer: the JSON body of a 2xx, or the error it maps to.
        A failure or a 503 moves to the next replica and tries again (a write with the same
        idempotency pair, so it applies at most once) until the budget is spent."""
        deadline = self.clock() + call.budget
        headers: List[Tuple[str, str]] = [("Accept", "application/json"), *self.auth_headers]
        body = None
        if call.body is not None:
            body = json.dumps(call.body, separators=(",", ":")).encode("utf-8")
            if len(body) > MAX_REQUEST_BODY_BYTES:
                raise errors.TooLarge(
                    f"the request body is {len(body):,} bytes; at most "
                    f"{MAX_REQUEST_BODY_BYTES:,} (docs/api.md, Limits)", status=413,
                    details={"limit_bytes": MAX_REQUEST_BODY_BYTES, "size_bytes": len(body)})
            headers.append(("Content-Type", "application/json"))
        identity = self.identities.take() if call.write else None
        if identity is not None:
            headers += [("X-Voltlock-Client-Id", str(identity[0])),
                        ("X-Voltlock-Request-Number", str(identity[1]))]
        target = quote_target(call.path, call.query)
        margin = WAIT_OUTCOME_MARGIN if call.hold > 0 else 0.0
        margin_given = False
        failures = 0
        last_problem = "no attempt"
        try:
            while True:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    raise errors.Unavailable(
                        f"no replica answered {call.method} {call.path} within "
                        f"{call.budget:g} s (last: {last_problem})"
                        + ("; the write may still apply, once" if call.write else ""),
                        details={"last": last_problem})
                endpoint = self.router.current()
                outcome = yield Attempt(
                    endpoint, call.method, target, tuple(headers), body,
                    connect_timeout=min(self.connect_timeout, remaining),
                    # A replica that says nothing for this long (stopped, cut off, or
                    # retrying a view change) is left for the next one, with the same pair.
                    # Only a wait the cell holds gets the margin, in which the cell may still
                    # say how the wait ended: a call nothing holds ends at its deadline.
                    read_timeout=min(remaining, self.attempt_timeout + call.hold) + margin,
                    held=call.hold > 0)
                if isinstance(outcome, Reply) and outcome.status != 503:
                    leader = outcome.headers.get("x-voltlock-leader")
                    if leader is not None:
                        self.router.note_leader(leader)
                    if self.router.take_member_question():
                        yield from self._learn_members(endpoint, deadline)
                    if 200 <= outcome.status < 300:
                        return outcome.json()
                    raise error_from_reply(outcome)
                if isinstance(outcome, Reply):
                    last_problem = f"{endpoint.url}: {error_from_reply(outcome)}"
                    if margin and not margin_given:
                        # A replica held the wait and said 503 at its end (no outcome seen in
                        # time: a leader change): the same request again finds the outcome,
                        # so the call has the margin's time for that, once.
                        deadline = max(deadline, self.clock() + margin)
                        margin_given = True
                elif outcome is not None and outcome.permanent is not None and \
                        endpoint in self.router.given:
                    # A learned address (the cell lists IPs) may fail where the names given
                    # verify: only the endpoints given say the configuration is wrong.
                    raise outcome.permanent
                else:
                    last_problem = f"{endpoint.url}: {outcome.reason if outcome else '?'}"
                self.router.failed(endpoint)
                failures += 1
                if failures % len(self.router.endpoints) == 0:
                    pause = min(backoff(failures // len(self.router.endpoints)),
                                max(0.0, deadline - self.clock()))
                    yield Sleep(pause)
        finally:
            if identity is not None:
                self.identities.give_back(identity)

    def _learn_members(self, endpoint: Endpoint, deadline: float) -> Plan[None]:
        remaining = max(0.1, min(2.0, deadline - self.clock()))
        outcome = yield Attempt(endpoint, "GET", "/v1/cluster",
                                (("Accept", "application/json"), *self.auth_headers), None,
                                min(self.connect_timeout, remaining), remaining)
        if isinstance(outcome, Reply) and outcome.status == 200:
            try:
                self.router.learn_members(json.loads(outcome.body))
            except ValueError:
                pass

    # --- sessions -------------------------------------------------------------------------------

    def create_session(self, ttl: float, lock_delay: float, name: str,
                       timeout: Optional[float]) -> Plan[Dict[str, Any]]:
        body = {"ttl_ms": seconds_to_ms(ttl, "ttl", MIN_TTL_MS, MAX_TTL_MS),
                "lock_delay_ms": seconds_to_ms(lock_delay, "lock_delay", 0, MAX_LOCK_DELAY_MS)}
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if name:
            if len(utf8(name, "session name")) > MAX_SESSION_NAME_BYTES:
                raise ValueError(f"session name is longer than {MAX_SESSION_NAME_BYTES} bytes")
            body["name"] = check_name(name, "session name")  # type: ignore[assignment]
        answer = yield from self.exchange(Call("POST", "/v1/sessions", body=body, write=True,
                                               budget=self.budget(timeout)))
        return dict(answer)

    def keepalive(self, session: int, budget: float) -> Plan[Dict[str, Any]]:
        answer = yield from self.exchange(Call("POST", f"/v1/sessions/{session}:keepalive",
                                               write=True, budget=budget))
        return dict(answer)

    def close_session(self, session: int, timeout: Optional[float]) -> Plan[bool]:
        """Ends the session; False if the cell did not know it (it had already ended)."""
        try:
            yield from self.exchange(Call("DELETE", f"/v1/sessions/{session}", write=True,
                                          budget=self.budget(timeout)))
        except errors.UnknownSession:
            return False
        return True

    def read(self, path: str, timeout: Optional[float],
             query: Optional[Mapping[str, str]] = None) -> Plan[Dict[str, Any]]:
        answer = yield from self.exchange(Call("GET", path, query=query,
                                               budget=self.budget(timeout)))
        return dict(answer)

    # --- users, roles and tokens (admin; docs/security-auth.md) ---------------------------------

    def auth_write(self, method: str, path: str, body: Optional[Dict[str, Any]],
                   timeout: Optional[float]) -> Plan[Dict[str, Any]]:
        """A change under /v1/auth (through the log, so retried safely with the client id)."""
        answer = yield from self.exchange(Call(method, path, body=body, write=True,
                                               budget=self.budget(timeout)))
        return dict(answer)

    def create_token(self, user: str, ttl: Optional[float],
                     timeout: Optional[float]) -> Plan[Dict[str, Any]]:
        body: Dict[str, Any] = {"user": user}
        if ttl is not None:
            seconds = check_seconds(ttl, "ttl")
            if seconds < 1 or not seconds.is_integer():
                raise ValueError(f"ttl is {ttl} s; it must be a whole number of seconds, >= 1")
            body["ttl_s"] = int(seconds)
        return (yield from self.auth_write("POST", "/v1/auth/tokens", body, timeout))

    # --- locks ----------------------------------------------------------------------------------

    def acquire(self, name: str, session: int, shared: bool, wait: Optional[float],
                timeout: Optional[float]) -> Plan[Dict[str, Any]]:
        """The sequencer's JSON. ``wait``: None waits for ever, 0 tries once (LockBusy)."""
        check_name(name, "lock name")
        mode = SHARED if shared else EXCLUSIVE
        answer = yield from self._wait_in_steps(
            f"/v1/locks/{quote_name(name)}:acquire", {"session": session, "mode": mode},
            wait, timeout)
        return dict(answer["sequencer"])

    def release(self, name: str, session: int, timeout: Optional[float]) -> Plan[Dict[str, Any]]:
        check_name(name, "lock name")
        answer = yield from self.exchange(Call("POST", f"/v1/locks/{quote_name(name)}:release",
                                               body={"session": session}, write=True,
                                               budget=self.budget(timeout)))
        return dict(answer)

    def check(self, seq: Sequencer, timeout: Optional[float]) -> Plan[bool]:
        check_sequencer(seq)
        answer = yield from self.exchange(Call("POST", "/v1/sequencers:check",
                                               body={"sequencer": seq.to_json()}, write=True,
                                               budget=self.budget(timeout)))
        return bool(answer["valid"])

    def _wait_in_steps(self, path: str, body: Dict[str, Any], wait: Optional[float],
                       timeout: Optional[float]) -> Plan[Any]:
        """A wait of any length as server-sized waits (at most an hour each): ``wait`` None
        is for ever, 0 is once without waiting. A step that times out with time left asks again."""
        wait = check_wait(wait)
        end = None if wait is None else self.clock() + wait
        while True:
            left = MAX_WAIT_MS / 1000 if end is None else max(0.0, end - self.clock())
            step_ms = 0 if wait == 0 else max(1, min(MAX_WAIT_MS, int(left * 1000)))
            call = Call("POST", path, body={**body, "wait_ms": step_ms}, write=True,
                        budget=step_ms / 1000 + self.budget(timeout), hold=step_ms / 1000)
            try:
                return (yield from self.exchange(call))
            except errors.WaitTimedOut:
                if end is None or (step_ms > 0 and end - self.clock() > 0.001):
                    continue
                raise

    # --- key/value ------------------------------------------------------------------------------

    def put(self, key: str, value: Value, *, prev_revision: Optional[int],
            sequencer: Optional[Sequencer], session: Optional[int],
            timeout: Optional[float]) -> Plan[int]:
        check_name(key, "key")
        body: Dict[str, Any] = value_fields(value)
        if prev_revision is not None:
            body["prev_revision"] = check_int(prev_revision, "prev_revision", 0)
        if sequencer is not None:
            body["sequencer"] = check_sequencer(sequencer).to_json()
        if session is not None:
            body["session"] = check_int(session, "session", 1)
        answer = yield from self.exchange(Call("PUT", f"/v1/kv/{quote_name(key)}", body=body,
                                               write=True, budget=self.budget(timeout)))
        return int(answer["revision"])

    def get(self, key: str, timeout: Optional[float],
            stale: bool = False) -> Plan[Tuple[Optional[KeyValue], int]]:
        """The key (None if absent) and the revision the answer is at."""
        check_name(key, "key")
        query = {"stale": "true"} if check_bool(stale, "stale") else None
        try:
            answer = yield from self.exchange(Call("GET", f"/v1/kv/{quote_name(key)}",
                                                   query=query, budget=self.budget(timeout)))
        except errors.KeyNotFound as absent:
            return None, int(absent.details.get("revision", 0))
        return KeyValue.from_json(answer), int(answer.get("revision", 0))

    def delete(self, key: str, *, prefix: bool, prev_revision: Optional[int],
               sequencer: Optional[Sequencer], timeout: Optional[float]) -> Plan[int]:
        check_name(key, "key", allow_empty=prefix)
        query: Dict[str, str] = {}
        if check_bool(prefix, "prefix"):
            if prev_revision is not None:
                raise ValueError("prev_revision cannot be combined with a prefix delete")
            query["prefix"] = "true"
        if prev_revision is not None:
            query["prev_revision"] = str(check_int(prev_revision, "prev_revision", 0))
        body = {"sequencer": check_sequencer(sequencer).to_json()} \
            if sequencer is not None else None
        answer = yield from self.exchange(Call("DELETE", f"/v1/kv/{quote_name(key)}",
                                               query=query, body=body, write=True,
                                               budget=self.budget(timeout)))
        return int(answer["deleted"])

    # --- barriers -------------------------------------------------------------------------------

    def barrier_enter(self, name: str, session: int, count: int, wait: Optional[float],
                      timeout: Optional[float]) -> Plan[int]:
        check_name(name, "barrier name")
        check_int(count, "count", 1, MAX_BARRIER_COUNT)
        answer = yield from self._wait_in_steps(f"/v1/barriers/{quote_name(name)}:enter",
                                                {"session": session, "count": count}, wait,
                                                timeout)
        return int(answer["revision"])

    def barrier_leave(self, name: str, session: int, wait: Optional[float],
                      timeout: Optional[float]) -> Plan[int]:
        check_name(name, "barrier name")
        answer = yield from self._wait_in_steps(f"/v1/barriers/{quote_name(name)}:leave",
                                                {"session": session}, wait, timeout)
        return int(answer["revision"])


def seconds_to_ms(value: object, what: str, low_ms: int, high_ms: int) -> int:
    seconds = check_seconds(value, what)
    ms = int(round(seconds * 1000))
    if not low_ms <= ms <= high_ms:
        raise ValueError(f"{what} is {seconds:g} s; it must be {low_ms / 1000:g} to "
                         f"{high_ms / 1000:g} s")
    return ms


def quote_target(path: str, query: Optional[Mapping[str, str]]) -> str:
    return path + ("?" + urllib.parse.urlencode(query) if query else "")


# --- paging -------------------------------------------------------------------------------------

class PrefixPager:
    """The keys under a prefix, a page at a time: each page is a read through the log, and the
    next one starts after the last key of the one before (``more``/``next_after``)."""

    def __init__(self, protocol: Protocol, prefix: str, page_size: Optional[int],
                 timeout: Optional[float]) -> None:
        check_name(prefix, "prefix", allow_empty=True)
        if page_size is not None:
            check_int(page_size, "page_size", 1)
        self._protocol, self._prefix, self._page_size = protocol, prefix, page_size
        self._timeout = protocol.budget(timeout)
        self._after: Optional[str] = None
        self.done = False

    def next_page(self) -> Plan[List[KeyValue]]:
        query = {"prefix": "true"}
        if self._after is not None:
            query["after"] = self._after
        if self._page_size is not None:
            query["limit"] = str(self._page_size)
        answer = yield from self._protocol.read(f"/v1/kv/{quote_name(self._prefix)}",
                                                self._timeout, query)
        kvs = [KeyValue.from_json(kv) for kv in answer["kvs"]]
        self.done = not answer.get("more") or not kvs
        self._after = answer.get("next_after") or (kvs[-1].key if kvs else None)
        return kvs


# --- sessions: the lease rule -------------------------------------------------------------------

CONNECTED, SUSPENDED, LOST, CLOSED = "connected", "suspended", "lost", "closed"


class Lease:
    """What the client may believe about its session, from its own clock only.

    A keepalive sent at time t and answered renews the lease to t + ttl (docs/api.md: count the
    lease from when the keepalive was sent; the cell's deadline is later). While the lease runs
    the session and its locks certainly stand (``CONNECTED``). When it runs out unrenewed the
    client no longer knows (``SUSPENDED``: locks are not to be trusted, keepalives go on, and a
    new leader's grace period may still save the session). ``LOST`` is final: the cell said the
    session is gone, or no keepalive got through for ``grace`` seconds after the lease ran out.
    ``CLOSED`` is final too: the client ended the session itself."""

    def __init__(self, ttl: float, grace: float, now: float) -> None:
        self.ttl, self.grace = ttl, grace
        self.state = CONNECTED
        self.expires = now + ttl
        self.last_renewal_sent = now
        self.last_failed = False
        self.reason = ""

    def renewed(self, sent_at: float) -> None:
        if self.state in (LOST, CLOSED):
            return
        self.last_renewal_sent = max(self.last_renewal_sent, sent_at)
        self.expires = max(self.expires, sent_at + self.ttl)
        self.state = CONNECTED
        self.last_failed = False

    def failed(self) -> None:
        """A keepalive got no renewal (the cell unreachable or in a view change)."""
        self.last_failed = True

    def poll(self, now: float) -> str:
        """Moves the state on with time; returns it."""
        if self.state == CONNECTED and now >= self.expires:
            self.state = SUSPENDED
        if self.state == SUSPENDED and now >= self.expires + self.grace:
            self.lose("no keepalive got through for the lease and a grace period "
                      f"({self.ttl:g} s + {self.grace:g} s)")
        return self.state

    def lose(self, reason: str) -> None:
        self.end(LOST, reason)

    def end(self, state: str, reason: str) -> None:
        """Ends the lease for good (LOST or CLOSED), unless it has ended already."""
        if self.state not in (LOST, CLOSED):
            self.state, self.reason = state, reason

    def holds(self, now: float) -> bool:
        return self.poll(now) == CONNECTED

    def next_keepalive(self, now: float) -> float:
        """Seconds until the next keepalive: ttl/3 after the last one that got through, or soon
        after one that failed."""
        if self.last_failed or self.state != CONNECTED:
            return min(0.2, self.ttl / 10)
        return max(0.0, self.last_renewal_sent + self.ttl / 3 - now)

    def keepalive_budget(self) -> float:
        """How long one keepalive may try (replicas in turn) before the loop looks again."""
        return max(0.5, self.ttl / 3)


# --- watches ------------------------------------------------------------------------------------

class SseParser:
    """Server-sent events (the WHATWG rules, as far as the cell uses them): fields per line,
    an event at each blank line, comments starting with ':'."""

    def __init__(self) -> None:
        self._buffer = b""
        self._fields: Dict[str, str] = {}
        self._data: List[str] = []
        self.comments: List[str] = []

    def feed(self, chunk: bytes) -> List[Dict[str, str]]:
        """The complete events in `chunk` (and what came before), each {event, data, id?}."""
        self._buffer += chunk
        events: List[Dict[str, str]] = []
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                return events
            line = self._buffer[:newline].rstrip(b"\r").decode("utf-8", "replace")
            self._buffer = self._buffer[newline + 1:]
            if not line:
                if self._data or self._fields:
                    event = {"event": self._fields.get("event", "message"),
                             "data": "\n".join(self._data)}
                    if "id" in self._fields:
                        event["id"] = self._fields["id"]
                    events.append(event)
                self._fields, self._data = {}, []
            elif line.startswith(":"):
                self.comments.append(line[1:].strip())
            else:
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "data":
                    self._data.append(value)
                elif name in ("event", "id"):
                    self._fields[name] = value


class WatchStream:
    """The rules of a watch that survives dropped streams and leader changes: it resumes at
    any replica from the revision after the last one it handed out, and hands out a revision's
    events only once its last one has come (the cell marks it with ``id:``), so nothing is
    missed or repeated."""

    def __init__(self, protocol: Protocol, key: str, *, prefix: bool,
                 start_revision: Optional[int], spaces: Optional[Sequence[str]]) -> None:
        check_name(key, "key", allow_empty=prefix)
        if start_revision is not None:
            check_int(start_revision, "start_revision", 1)
        self._protocol = protocol
        self._path = f"/v1/watch/{quote_name(key)}"
        self._query: Dict[str, str] = {"prefix": "true"} if check_bool(prefix, "prefix") else {}
        if spaces is not None:
            if isinstance(spaces, str):
                spaces = [spaces]
            allowed = {"kv", "session", "lock", "barrier", "all"}
            bad = [s for s in spaces if s not in allowed]
            if bad or not spaces:
                raise ValueError(f"spaces must be some of {sorted(allowed)}, not {list(spaces)}")
            self._query["spaces"] = ",".join(spaces)
        self.next_revision = start_revision
        self._failures = 0
        self._reset()

    def _reset(self) -> None:
        self._parser = SseParser()
        self._pending: List[WatchEvent] = []
        self._endpoint: Optional[Endpoint] = None
        # The cell cut the stream of a reader that fell behind (``slow_reader``): the caller
        # reopens it at once, from next_revision, which loses nothing.
        self.cut = False

    def attempt(self, seconds: Optional[float] = None) -> Attempt:
        """The request that opens (or reopens) the stream, given at most `seconds` if said.
        The cell answers a watch's headers at once, so a replica that has not within
        attempt_timeout (stopped, cut off) is left for the next, as for any call; the stream
        itself may then be quiet for up to WATCH_READ_TIMEOUT."""
        self._reset()
        query = dict(self._query)
        if self.next_revision is not None:
            query["start_revision"] = str(self.next_revision)
        self._endpoint = self._protocol.router.current()
        answer_within = self._protocol.attempt_timeout if seconds is None else \
            min(self._protocol.attempt_timeout, seconds)
        return Attempt(self._endpoint, "GET", quote_target(self._path, query),
                       (("Accept", "text/event-stream"), *self._protocol.auth_headers), None,
                       connect_timeout=min(self._protocol.connect_timeout, answer_within),
                       read_timeout=answer_within, stream=True)

    def refused(self, reply: Reply) -> float:
        """The stream did not open: raises the error (410 compacted, 400, ...), or for a 503
        says how long to wait before trying the next replica."""
        if reply.status != 503:
            raise error_from_reply(reply)
        return self.dropped(f"HTTP 503 {reply.body[:100]!r}")

    def opened(self) -> None:
        self._failures = 0

    def unreached(self, failure: Failure) -> float:
        """The stream did not open: raises what no retry cures, else as `dropped`."""
        if failure.permanent is not None and self._endpoint in self._protocol.router.given:
            raise failure.permanent
        return self.dropped(failure.reason)

    def dropped(self, reason: str) -> float:
        """The stream broke (or never opened): seconds to wait before reopening elsewhere."""
        if self._endpoint is not None:
            self._protocol.router.failed(self._endpoint)
        self._failures += 1
        rounds = self._failures // len(self._protocol.router.endpoints)
        return backoff(rounds) if self._failures % len(self._protocol.router.endpoints) == 0 \
            else 0.0

    def feed(self, chunk: bytes) -> List[WatchEvent]:
        """The events that `chunk` completes, in order. An ``error`` event raises its error
        (:class:`~voltlock.Compacted`: the stream fell behind the history), except
        ``slow_reader``, which sets `cut`: the stream is to be reopened."""
        done: List[WatchEvent] = []
        for sse in self._parser.feed(chunk):
            if sse["event"] == "error":
                try:
                    body = json.loads(sse["data"])
                except ValueError:
                    body = sse["data"]
                if isinstance(body, dict) and body.get("code") == "slow_reader":
                    self.cut = True
                    return done
                raise errors.error_from_body(410, body)
            if sse["data"]:
                event = WatchEvent.from_json(json.loads(sse["data"]))
                if self.next_revision is None or event.revision >= self.next_revision:
                    self._pending.append(event)
            if "id" in sse:
                complete = int(sse["id"])
                done += [e for e in self._pending if e.revision <= complete]
                self._pending = [e for e in self._pending if e.revision > complete]
                self.next_revision = max(self.next_revision or 0, complete + 1)
        while self._parser.comments:
            comment = self._parser.comments.pop(0)
            if comment.startswith("watching from revision") and self.next_revision is None:
                self.next_revision = int(comment.rsplit(" ", 1)[1])
        return done


# --- what session and lock objects know, shared by both clients ---------------------------------

class SessionCore:
    """A session object's bookkeeping: its id, its :class:`Lease`, the locks it holds and the
    callbacks to run when it is lost. Thread-safe; no I/O. `announce` runs first when the
    session is lost (the client sets its `lost` event there), then each held lock and each
    callback is told, once.

    A grant is the session's, not a lock object's (the cell answers a second acquire of a lock
    the session holds with the same grant, and one release ends it): every lock object of the
    session for that name sees the one grant, and each of those that acquired it is told if it
    is lost."""

    def __init__(self, ttl: float, grace: Optional[float], clock: Callable[[], float],
                 announce: Callable[[], None]) -> None:
        seconds_to_ms(ttl, "ttl", MIN_TTL_MS, MAX_TTL_MS)
        self.ttl = float(ttl)
        self.grace = self.ttl if grace is None else check_seconds(grace, "grace")
        self.id = 0
        self._clock, self._announce = clock, announce
        self._lease: Optional[Lease] = None
        self._callbacks: List[Callable[[], None]] = []
        self._grants: Dict[str, Sequencer] = {}  # lock name -> the grant held
        self._holders: Dict[str, List["LockCore"]] = {}  # lock name -> the objects that got it
        self._ended = False
        # Its owner is closing it: the cell's unknown_session from then on is that close's.
        self._closing = False
        self._mutex = threading.Lock()

    def check_openable(self) -> None:
        """RuntimeError unless the session was never opened: a session opens once."""
        with self._mutex:
            self._check_openable()

    def _check_openable(self) -> None:
        if self._lease is None:
            return
        state = self._lease.poll(self._clock())
        if state in (LOST, CLOSED):
            raise RuntimeError(f"session {self.id} is {state}: a session is opened only once "
                               "(client.session(...) makes a new one)")
        raise RuntimeError("this session is already open")

    def opened(self, session_id: int, sent_at: float) -> None:
        with self._mutex:
            self._check_openable()
            self.id = session_id
            self._lease = Lease(self.ttl, self.grace, sent_at)

    @property
    def is_open(self) -> bool:
        return self._lease is not None

    def state(self) -> str:
        with self._mutex:
            return CLOSED if self._lease is None else self._lease.poll(self._clock())

    def holds(self) -> bool:
        with self._mutex:
            return self._lease is not None and self._lease.holds(self._clock())

    def lost(self) -> bool:
        return self.state() == LOST

    def ended(self) -> bool:
        """Lost, or closed: nothing more can be done with it."""
        return self.is_open and self.state() in (LOST, CLOSED)

    def next_keepalive(self) -> Tuple[float, float]:
        """(seconds until the next keepalive, how long it may try)."""
        with self._mutex:
            assert self._lease is not None
            return self._lease.next_keepalive(self._clock()), self._lease.keepalive_budget()

    def renewed(self, sent_at: float) -> None:
        with self._mutex:
            assert self._lease is not None
            self._lease.renewed(sent_at)

    def failed(self) -> None:
        with self._mutex:
            assert self._lease is not None
            self._lease.failed()

    def check_lost(self) -> None:
        """Announces the loss if the lease's grace period ran out since the last look."""
        if self.lost():
            self.lose("")

    def lose(self, reason: str) -> None:
        """The session is lost, for good: announced, then the locks and callbacks told, once."""
        ended = self._end(LOST, reason)
        if ended is None:
            return
        held, callbacks = ended
        self._announce()
        for lock, seq in held:
            lock.session_lost(seq)
        for callback in callbacks:
            _run_callback(callback, f"on_lost callback of session {self.id}")

    def closing(self) -> None:
        """Its owner is about to ask the cell to end the session: a call on it that the cell
        then answers with unknown_session is told the session is closed, and nothing is lost."""
        self._closing = True

    def close(self) -> None:
        """The session was closed on purpose: the locks it still held are told, not its
        callbacks, and nothing is announced (nothing was lost that its owner did not end)."""
        ended = self._end(CLOSED, "it was closed")
        for lock, seq in ended[0] if ended is not None else []:
            lock.session_lost(seq)

    def _end(self, state: str, reason: str) -> Optional[Tuple[List[Tuple["LockCore", Sequencer]],
                                                              List[Callable[[], None]]]]:
        """Ends the lease; the locks to tell (with their grants) and the callbacks, or None if
        it had ended already."""
        with self._mutex:
            if self._lease is None or self._ended:
                return None
            self._lease.end(state, reason)
            self._ended = True
            callbacks, self._callbacks = self._callbacks, []
            held = [(lock, seq) for name, seq in self._grants.items()
                    for lock in self._holders.get(name, [])]
            self._grants, self._holders = {}, {}
        return held, callbacks

    @property
    def reason(self) -> str:
        return self._lease.reason if self._lease is not None else ""

    def on_lost(self, callback: Callable[[], None]) -> None:
        with self._mutex:
            if not self._ended:
                self._callbacks.append(callback)
                return
            lost = self._lease is not None and self._lease.state == LOST
        if lost:
            callback()

    def hold(self, lock: "LockCore", seq: Sequencer) -> None:
        with self._mutex:
            self._grants[lock.name] = seq
            holders = self._holders.setdefault(lock.name, [])
            if lock not in holders:
                holders.append(lock)

    def grant(self, name: str) -> Optional[Sequencer]:
        with self._mutex:
            return self._grants.get(name)

    def stands(self, name: str, generation: int) -> bool:
        """Whether this session still holds that grant of lock `name`, as far as this client
        knows: not released, and the lease running."""
        with self._mutex:
            seq = self._grants.get(name)
            return seq is not None and seq.generation == generation and \
                self._lease is not None and self._lease.holds(self._clock())

    def drop(self, name: str) -> Optional[Sequencer]:
        """Forgets the grant of lock `name` (released); the grant, or None if none was held."""
        with self._mutex:
            self._holders.pop(name, None)
            return self._grants.pop(name, None)

    def check_usable(self) -> None:
        """Before any call on behalf of the session (and between a call's attempts)."""
        if not self.is_open:
            raise RuntimeError("open the session first (with client.session(...) as s, "
                               "or .open())")
        self.check_lost()
        if self.ended():
            raise errors.SessionExpired(f"session {self.id} is {self.state()}: {self.reason}")

    def expired(self, unknown: errors.UnknownSession) -> errors.SessionExpired:
        """The cell said it does not know the session: it is lost, unless its owner is closing
        it (the cell ended it on the owner's word, and may say so to a call under way before
        the close itself has heard back)."""
        if self._closing:
            ended = "closed"
        else:
            self.lose(f"the cell no longer knows session {self.id}")
            ended = "lost"
        return errors.SessionExpired(f"session {self.id} is {ended}: {unknown.message}",
                                     details=unknown.details, status=unknown.status)


def guarded(plan: Plan[T], check: Callable[[], None]) -> Plan[T]:
    """`plan`, with `check()` before each of its steps: what it raises ends the plan there (a
    session's call once the session is lost, its keepalive once it is being closed)."""
    try:
        step = next(plan)
        while True:
            check()
            step = plan.send((yield step))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        plan.close()


def _run_callback(callback: Callable[[], None], what: str) -> None:
    try:
        callback()
    except Exception:
        logging.getLogger("voltlock").exception(what)


# How often a grant that came while the lease was suspended looks again for a keepalive.
_LEASE_LOOK_S = 0.05


class LockCore:
    """A lock object's view of its session's grant of the lock (:class:`SessionCore`): whether
    one is held and still stands as far as this client knows, and what to tell the user when it
    was lost while held."""

    def __init__(self, session: SessionCore, name: str, *, shared: bool,
                 timeout: Optional[float], on_lost: Optional[Callable[[Sequencer], None]]
                 ) -> None:
        self.name = check_name(name, "lock name")
        self.shared = check_bool(shared, "shared")
        self.timeout = check_wait(timeout)
        self.session = session
        self._on_lost = on_lost

    @property
    def sequencer(self) -> Optional[Sequencer]:
        return self.session.grant(self.name)

    def acquire(self, plan: Plan[Dict[str, Any]]) -> Plan[Sequencer]:
        """The acquire `plan`, then its grant if the client can stand behind it. A grant that
        comes while the session's lease is not running (``SUSPENDED``) may have ended already,
        with the session (a replica that was behind answers a wait from the history it has
        applied), so the plan waits until a keepalive gets through (the session lives, so the
        grant stands) or the session is lost (``SessionExpired``: the cell freed the lock)."""
        sequencer_json = yield from plan
        while not self.session.holds():
            self.session.check_usable()
            yield Sleep(_LEASE_LOOK_S)
        return self.granted(sequencer_json)

    def granted(self, sequencer_json: Mapping[str, Any]) -> Sequencer:
        generation = int(sequencer_json["generation"])
        seq = Sequencer.from_json(sequencer_json,
                                  valid_check=lambda: self.session.stands(self.name, generation))
        self.session.hold(self, seq)
        return seq

    def releasing(self) -> bool:
        """Forgets the grant; True if the cell must be asked to release it."""
        held = self.session.drop(self.name)
        return held is not None and not self.session.ended()

    def session_lost(self, seq: Sequencer) -> None:
        if self._on_lost is not None:
            on_lost = self._on_lost
            _run_callback(lambda: on_lost(seq), f"on_lost callback of lock {self.name!r}")

    def lost_while_held(self) -> Optional[errors.SessionExpired]:
        """At the end of a `with` block: the error to raise if the grant did not stand
        throughout (the session lost, or its lease lapsed), else None."""
        if self.session.lost():
            why = "is lost"
        elif self.sequencer is not None and not self.sequencer.valid:
            why = "could not renew its lease in time"
        else:
            return None
        return errors.SessionExpired(
            f"lock {self.name!r} may have been lost while held: session {self.session.id} {why}")
