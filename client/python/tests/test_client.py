"""Unit tests of the two clients above the protocol (no cell): the sync and asyncio clients over
a scripted transport (sessions, locks, closing), and their transports over local sockets (TLS
errors, the probing of a held wait)."""
from __future__ import annotations

import asyncio
import http.server
import json
import math
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Union

import pytest

import voltlock
from voltlock import _protocol as p
from voltlock import _sync, aio
from conftest import wait_until

EPS = ["http://10.0.0.1:7480", "http://10.0.0.2:7480", "http://10.0.0.3:7480"]
SEQUENCER = {"lock": "x", "mode": "exclusive", "generation": 4, "session": 5}


class ScriptedCell:
    """Answers a client's attempts as a cell of one session (id 5) would; `reachable` False
    makes every attempt fail as a cut-off cell's do. A lock in `busy` is another session's: a
    wait for it is held (`waiting` is set) until a session is ended, and then answered
    unknown_session, as the cell answers the waits of a session it ended;
    `before_answering_close` runs when a session is ended, before its close hears back (the
    cell's answers to the close and to the session's wait may come in either order)."""

    def __init__(self) -> None:
        self.reachable = True
        self.sent: List[str] = []
        self.busy: Set[str] = set()
        self.waiting = threading.Event()
        self.ended = threading.Event()
        self.before_answering_close: Callable[[], Any] = lambda: None
        self._mutex = threading.Lock()

    def answer(self, attempt: p.Attempt) -> Union[p.Reply, p.Failure]:
        with self._mutex:
            self.sent.append(f"{attempt.method} {attempt.target}")
        if not self.reachable:
            return p.Failure("timed out")
        body: Dict[str, Any] = {}
        if attempt.target == "/v1/sessions":
            body = {"session": 5 + sum(t == "POST /v1/sessions" for t in self.sent) - 1}
        elif attempt.target == "/v1/cluster":
            body = {"members": []}
        elif self.closes(attempt):
            self.ended.set()
        elif self.lock_of(attempt) in self.busy:
            if self.ended.is_set():
                return p.Reply(404, {}, json.dumps({"code": "unknown_session",
                                                    "message": "no session 5"}).encode())
            return p.Reply(409, {}, json.dumps({"code": "lock_busy",
                                                "message": "held"}).encode())
        elif attempt.target.endswith(":acquire"):
            body = {"granted": True, "revision": 3, "sequencer": SEQUENCER}
        return p.Reply(200, {}, json.dumps(body).encode())

    @staticmethod
    def lock_of(attempt: p.Attempt) -> Optional[str]:
        """The lock an acquire is for, else None."""
        path = attempt.target.partition("?")[0]
        if path.startswith("/v1/locks/") and path.endswith(":acquire"):
            return path[len("/v1/locks/"):-len(":acquire")]
        return None

    def holds(self, attempt: p.Attempt) -> bool:
        held = attempt.held and self.lock_of(attempt) in self.busy
        if held:
            self.waiting.set()
        return held

    @staticmethod
    def closes(attempt: p.Attempt) -> bool:
        return attempt.method == "DELETE" and attempt.target.startswith("/v1/sessions/")

    # The transport's interface, for the sync client.
    def perform(self, attempt: p.Attempt) -> Union[p.Reply, p.Failure]:
        if self.holds(attempt):
            self.ended.wait(10)
        answer = self.answer(attempt)
        if self.closes(attempt):
            self.before_answering_close()
        return answer

    def close(self) -> None:
        pass


class AsyncScriptedCell(ScriptedCell):
    """`before_answering_close` is awaited."""

    def __init__(self) -> None:
        super().__init__()

        async def nothing() -> None:
            pass
        self.before_answering_close = nothing

    async def perform(self, attempt: p.Attempt) -> Union[p.Reply, p.Failure]:  # type: ignore
        await asyncio.sleep(0)
        if self.holds(attempt):
            while not self.ended.is_set():
                await asyncio.sleep(0.01)
        answer = self.answer(attempt)
        if self.closes(attempt):
            await self.before_answering_close()
        return answer


@pytest.fixture
def scripted() -> Iterator[tuple]:
    client = voltlock.Client(EPS, timeout=0.6, attempt_timeout=0.2)
    cell = ScriptedCell()
    client._transport = cell  # type: ignore[assignment]
    yield client, cell
    cell.reachable = True
    client.close()


def test_a_closed_session_is_closed_not_lost(scripted):
    client, cell = scripted
    told: List[str] = []
    s = client.session(ttl=3, on_lost=lambda _: told.append("lost")).open()
    lock_told: List[voltlock.Sequencer] = []
    seq = s.lock("x", on_lost=lock_told.append).acquire()
    s.close()
    assert s.state == voltlock.CLOSED == "closed" and not s.lost.is_set() and told == []
    assert lock_told == [seq] and not seq.valid  # a lock still held is told, as before
    assert not s._thread.is_alive()
    with pytest.raises(voltlock.SessionExpired, match="closed"):
        s.lock("y").acquire()
    s.close()  # again: nothing more to do
    assert cell.sent.count("DELETE /v1/sessions/5") == 1
    with pytest.raises(RuntimeError, match="session 5 is closed: a session is opened only once"):
        s.open()
    again = client.session(ttl=3).open()
    with pytest.raises(RuntimeError, match="already open"):
        again.open()
    again.close()


@pytest.mark.parametrize("closer", ["session", "client"])
def test_closing_a_session_while_a_call_on_it_waits_does_not_lose_it(scripted, closer):
    """The cell ends the waits of the session it was told to end (unknown_session), and may say
    so to the waiter before the close hears back: the session is closed all the same."""
    client, cell = scripted
    client._protocol.timeout = 30
    told: List[str] = []
    s = client.session(ttl=30, on_lost=lambda _: told.append("lost")).open()
    cell.busy.add("x")
    waited: List[Exception] = []

    def wait_for_x() -> None:
        try:
            s.lock("x").acquire(30)
        except voltlock.Error as e:
            waited.append(e)
    waiter = threading.Thread(target=wait_for_x)
    waiter.start()
    wait_until(cell.waiting.is_set, 5, "the wait to be held")
    cell.before_answering_close = lambda: waiter.join(5)  # the waiter hears first
    s.close() if closer == "session" else client.close()
    assert not waiter.is_alive()
    assert s.state == voltlock.CLOSED and not s.lost.is_set() and told == []
    assert isinstance(waited[0], voltlock.SessionExpired) and "is closed" in str(waited[0])


def test_closing_an_asyncio_session_while_a_call_on_it_waits_does_not_lose_it():
    async def main() -> None:
        client = aio.Client(EPS, timeout=30, attempt_timeout=0.2)
        cell = AsyncScriptedCell()
        client._transport = cell  # type: ignore[assignment]
        told: List[str] = []
        s = await client.session(ttl=30, on_lost=lambda _: told.append("lost")).open()
        cell.busy.add("x")
        waiter = asyncio.ensure_future(s.lock("x").acquire(30))
        while not cell.waiting.is_set():
            await asyncio.sleep(0.01)

        async def waiter_hears_first() -> None:
            await asyncio.wait({waiter}, timeout=5)
        cell.before_answering_close = waiter_hears_first
        await s.close()
        assert s.state == voltlock.CLOSED and not s.lost.is_set() and told == []
        with pytest.raises(voltlock.SessionExpired, match="is closed"):
            await waiter
        await client.close()
    asyncio.run(main())


def test_lock_objects_of_one_session_for_one_name_share_the_grant(scripted):
    client, cell = scripted
    with client.session(ttl=3) as s:
        with s.lock("x") as outer:
            with s.lock("x") as inner:
                assert inner == outer
            # The inner release ended the session's one grant (the cell released the lock).
            assert not outer.valid and s.lock("x").sequencer is None
        assert cell.sent.count("POST /v1/locks/x:release") == 1


def test_leaving_a_lock_whose_lease_lapsed_raises_session_expired_not_unavailable(scripted):
    client, cell = scripted
    s = client.session(ttl=1, grace=60).open()
    with pytest.raises(voltlock.SessionExpired) as raised:
        with s.lock("x") as seq:
            cell.reachable = False
            wait_until(lambda: not seq.valid, 3, "the lease to lapse")
    assert "renew" in str(raised.value)
    assert isinstance(raised.value.__cause__, voltlock.Unavailable)  # the release's fate
    assert s.state == voltlock.SUSPENDED


def test_a_session_call_ends_in_session_expired_once_the_session_is_lost(scripted):
    client, cell = scripted
    client._protocol.timeout = 30  # a call's whole timeout is far off
    s = client.session(ttl=1, grace=0.5).open()
    cell.reachable = False
    started = time.monotonic()
    with pytest.raises(voltlock.SessionExpired):
        s.info()
    assert time.monotonic() - started < 3 and s.state == voltlock.LOST


def test_closing_the_client_closes_its_sessions_and_refuses_later_calls(scripted):
    client, cell = scripted
    sessions = [client.session(ttl=30).open() for _ in range(2)]
    done = client.session(ttl=30).open()
    done.close()
    client.close()
    assert sorted(t for t in cell.sent if t.startswith("DELETE")) == [
        "DELETE /v1/sessions/5", "DELETE /v1/sessions/6", "DELETE /v1/sessions/7"]
    for s in sessions:
        assert s.state == voltlock.CLOSED and not s._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        client.put("k", "v")
    with pytest.raises(RuntimeError, match="closed"):
        client.session(ttl=3).open()
    with pytest.raises(RuntimeError, match="closed"):
        client.watch("k")


def test_closing_the_client_when_the_cell_is_unreachable_takes_bounded_time(scripted):
    client, cell = scripted
    client._protocol.timeout = 30
    s = client.session(ttl=30).open()
    cell.reachable = False
    started = time.monotonic()
    client.close()
    assert time.monotonic() - started < 1.5  # attempt_timeout (0.2 s), not the 30 s timeout
    assert s.state == voltlock.CLOSED and not s._thread.is_alive()


def test_closing_the_asyncio_client_closes_its_sessions():
    async def main() -> None:
        client = aio.Client(EPS, timeout=0.6, attempt_timeout=0.2)
        cell = AsyncScriptedCell()
        client._transport = cell  # type: ignore[assignment]
        s = await client.session(ttl=30).open()
        closed = await client.session(ttl=30).open()
        await closed.close()
        assert closed.state == voltlock.CLOSED and not closed.lost.is_set()
        await client.close()
        assert "DELETE /v1/sessions/5" in cell.sent and s.state == voltlock.CLOSED
        assert s._task is not None and s._task.done()
        with pytest.raises(RuntimeError, match="closed"):
            await client.get("k")
    asyncio.run(main())


def test_bad_client_arguments_are_refused():
    with pytest.raises(ValueError):
        voltlock.Client(EPS, connect_timeout=0)
    with pytest.raises(ValueError):
        aio.Client(EPS, connect_timeout=0)
    client = voltlock.Client(EPS)
    client._transport = ScriptedCell()  # type: ignore[assignment]
    s = client.session(ttl=3).open()
    with pytest.raises(TypeError):
        s.lock("x", shared="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.get("k", stale="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^ttl must be a finite number"):
        client.session(ttl=math.inf)
    with pytest.raises(ValueError, match="^grace must be a finite number"):
        aio.Client(EPS).session(grace=math.nan)
    # A wait of inf is a wait for ever, as None is (the scripted cell grants at once).
    assert s.lock("x", timeout=math.inf).acquire().generation == SEQUENCER["generation"]
    s.close()
    client.close()


def session_on_a_cell_gone_unreachable(scripted):
    """A session opened with the client's calls given 30 s each; then the cell answers no more."""
    client, cell = scripted
    client._protocol.timeout = 30
    s = client.session(ttl=30).open()
    cell.reachable = False
    return s


def test_a_barrier_call_has_a_time_of_its_own_beside_its_wait(scripted):
    s = session_on_a_cell_gone_unreachable(scripted)
    started = time.monotonic()
    with pytest.raises(voltlock.Unavailable):
        s.barrier("b", 2).enter(0, call_timeout=0.3)
    with pytest.raises(voltlock.Unavailable):
        s.barrier("b", 2).leave(0, call_timeout=0.3)
    assert time.monotonic() - started < 2  # not the client's 30 s


def test_an_election_call_has_a_time_of_its_own_beside_its_wait(scripted):
    s = session_on_a_cell_gone_unreachable(scripted)
    started = time.monotonic()
    with pytest.raises(voltlock.Unavailable):
        s.election("e").campaign("me", 0, call_timeout=0.3)
    with pytest.raises(voltlock.Unavailable):
        s.election("e").leader(timeout=0.3)
    assert time.monotonic() - started < 2  # not the client's 30 s


# --- the transports over local sockets ---------------------------------------------------------

def test_a_held_wait_has_its_connection_probed_and_others_do_not():
    """A wait is silent on purpose; the kernel's keepalive probes find out whether the replica
    is still there (a cut-off one is left within seconds, not at the end of the wait)."""
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        connection = _sync._Connection("127.0.0.1", listener.getsockname()[1], timeout=1)
        connection.connect()
        sock = connection.sock
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
        connection.probe(True)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == \
            p.HELD_PROBE_INTERVAL_S
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == p.HELD_PROBES
        connection.probe(False)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
        connection.close()

        async def asyncio_side() -> None:
            made = await aio._Connection.open(
                p.Endpoint.parse(f"http://127.0.0.1:{listener.getsockname()[1]}"), 1, None)
            made.probe(True)
            raw = made.writer.get_extra_info("socket")
            assert raw.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            made.close()
        asyncio.run(asyncio_side())
    finally:
        listener.close()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[str]:
    """An https:// server with a self-signed certificate, for a client without its CA."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    where = tmp_path_factory.mktemp("tls")
    cert, key = os.path.join(where, "cert.pem"), os.path.join(where, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def plain_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("server, error", [("tls_server", ssl.SSLCertVerificationError),
                                           ("plain_server", ssl.SSLError)])
def test_a_tls_misconfiguration_fails_at_once_not_as_unavailable(request, server, error):
    url = request.getfixturevalue(server)
    client = voltlock.Client([url], timeout=5)
    started = time.monotonic()
    with pytest.raises(error) as raised:
        client.put("k", "v")
    assert time.monotonic() - started < 2 and url in str(raised.value)
    client.close()

    async def asyncio_side() -> None:
        async with aio.Client([url], timeout=5) as client:
            with pytest.raises(error):
                await client.get("k")
    asyncio.run(asyncio_side())
