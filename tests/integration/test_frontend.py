"""The event-driven HTTP front end (issue 12, docs/frontend.md) against a real 3-replica cell:
strict targets and query parameters (issue 11), pipelining, unsound framing, floods of idle,
slowloris, watching and waiting clients while /healthz stays fast and honest clients are served,
the connection limit's 503, a waiter that hangs up has its wait withdrawn, a slow watch reader is
cut and resumes with no gap, and /readyz and /v1/cluster on a leader cut off from its quorum.

Counts are small enough for CI on 2 shared cores; VL_FRONTEND_SCALE=10 multiplies the floods."""
import json
import os
import resource
import secrets
import signal
import socket
import statistics
import threading
import time

import pytest

from api import Client, Watch, call, quote
from cell import Cell
from cellrig.util import entered_netns
from replication import wait_until

pytestmark = [pytest.mark.usefixtures("root"), pytest.mark.voltlockd]

SCALE = int(os.environ.get("VL_FRONTEND_SCALE", "1"))
HEADER_TIMEOUT_MS = 2_000
STREAM_BUFFER_BYTES = 64 * 1024
MAX_CONNECTIONS = 1_500
# /healthz must answer within 10 ms under the floods (issue 12); a loaded CI machine gets some
# slack on the worst of a few samples, none on the median.
HEALTHZ_MEDIAN_S = 0.010
HEALTHZ_WORST_S = 0.100


def fresh(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


# Each test on a cell that parses HTTP on the replica's loop (the default) and on one with an
# I/O thread of its own (http_io_threads 1).
@pytest.fixture(scope="module", params=[0, 1], ids=["http-on-loop", "http-io-thread"])
def cell(request):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    extra = {"http_io_threads": request.param,
             "http_header_timeout_ms": HEADER_TIMEOUT_MS,
             "http_stream_buffer_bytes": STREAM_BUFFER_BYTES,
             "http_max_connections": MAX_CONNECTIONS * SCALE,
             "http_max_connections_per_address": MAX_CONNECTIONS * SCALE}
    with Cell(replicas=3, config_extra=extra) as c:
        yield c
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def raw_socket(c: Cell, replica: int, timeout: float = 10.0) -> socket.socket:
    r = c.replicas[replica]
    with entered_netns(c.endpoints["client_namespace"]):
        sock = socket.create_connection((r["ip"], r["http_port"]), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def raw_post(c: Cell, replica: int, path: str, fields: dict) -> socket.socket:
    """A connection that sent POST `path` with `fields`, its answer left unread."""
    sock = raw_socket(c, replica)
    body = json.dumps(fields).encode()
    sock.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
                 .encode() + body)
    return sock


def raw_wait(c: Cell, replica: int, lock: str, session_id: int) -> socket.socket:
    """A connection waiting (up to a minute) for `lock` as `session_id`, answer left unread."""
    return raw_post(c, replica, f"/v1/locks/{quote(lock)}:acquire",
                    {"session": session_id, "wait_ms": 60_000})


def waits_withdrawn(c: Cell, replica: int) -> int:
    return call(c, replica, "GET", "/v1/cluster")["api"]["waits_withdrawn"]


def waiting_sessions(c: Cell, lock: str) -> list:
    return [w["session"] for w in call(c, c.leader, "GET", f"/v1/locks/{quote(lock)}")["waiters"]]


def read_responses(sock: socket.socket, count: int, timeout: float = 10.0) -> list:
    """Reads `count` HTTP responses with Content-Length bodies: [(status, body text)]."""
    sock.settimeout(timeout)
    data, out = b"", []
    while len(out) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end].decode()
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(data) >= head_end + 4 + length:
                status = int(head.split()[1])
                out.append((status, data[head_end + 4:head_end + 4 + length].decode()))
                data = data[head_end + 4 + length:]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed after {len(out)} responses")
        data += chunk
    return out


def closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection: end of stream, or a reset (a close with
    unread bytes of the client's still queued is a reset)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def dechunk(body: bytes) -> bytes:
    """The payload of a chunked transfer-encoded body."""
    out = b""
    while True:
        size_end = body.index(b"\r\n")
        size = int(body[:size_end].split(b";")[0], 16)
        if size == 0:
            return out
        out += body[size_end + 2:size_end + 2 + size]
        body = body[size_end + 2 + size + 2:]


def healthz_latencies(c: Cell, replica: int, samples: int = 20) -> list:
    """/healthz on a fresh connection each time, as a load balancer's probe does."""
    times = []
    for _ in range(samples):
        sock = raw_socket(c, replica)
        start = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        (status, _), = read_responses(sock, 1)
        times.append(time.monotonic() - start)
        sock.close()
        assert status == 200
    return times


def assert_healthz_fast(c: Cell, replica: int):
    times = healthz_latencies(c, replica)
    assert statistics.median(times) < HEALTHZ_MEDIAN_S, times
    assert max(times) < HEALTHZ_WORST_S, times


def assert_error(r, status: int, code: str):
    assert r.status == status, r
    assert r["code"] == code, r.body
    if status == 503:
        assert r.headers.get("Retry-After"), r.headers


def session(c: Cell, replica: int = 0, ttl_ms: int = 30_000) -> int:
    r = call(c, replica, "POST", "/v1/sessions", {"ttl_ms": ttl_ms})
    assert r.status == 201, r
    return r["session"]


# ---- Strict targets (issue 11) -----------------------------------------------------------------

def test_bad_percent_encoding_is_400_and_stores_nothing(cell):
    prefix = fresh("pct")
    for path in (f"/v1/kv/{prefix}/%zz", f"/v1/kv/{prefix}/%", f"/v1/kv/{prefix}/%4"):
        r = call(cell, 1, "PUT", path, {"value": "x"})
        assert_error(r, 400, "invalid_argument")
        assert "percent" in r["details"]["violation"], r.body
    r = call(cell, 1, "GET", f"/v1/kv/{prefix}/?prefix=true&after=%g1")
    assert_error(r, 400, "invalid_argument")
    listing = call(cell, 0, "GET", f"/v1/kv/{prefix}/?prefix=true")
    assert listing.status == 200 and listing["kvs"] == [], listing
    # A well-formed escape is still a key's byte.
    assert call(cell, 1, "PUT", f"/v1/kv/{prefix}/%25zz", {"value": "y"}).status == 200
    assert call(cell, 0, "GET", f"/v1/kv/{prefix}/%25zz")["key"] == f"{prefix}/%zz"


def test_unknown_query_parameters_are_400_and_change_nothing(cell):
    prefix = fresh("query")
    for i in range(3):
        assert call(cell, 0, "PUT", f"/v1/kv/{prefix}/{i}", {"value": str(i)}).status == 200
    r = call(cell, 1, "DELETE", f"/v1/kv/{prefix}/?prefix=true&dry=1")
    assert_error(r, 400, "unknown_field")
    assert r["details"]["field"] == "dry" and "prefix" in r["details"]["allowed"], r.body
    assert len(call(cell, 0, "GET", f"/v1/kv/{prefix}/?prefix=true")["kvs"]) == 3
    assert_error(call(cell, 0, "GET", f"/v1/kv/{prefix}/0?stail=true"), 400, "unknown_field")
    assert_error(call(cell, 0, "POST", "/v1/sessions?ttl_ms=5000", {"ttl_ms": 5000}), 400,
                 "unknown_field")
    assert_error(call(cell, 0, "GET", "/v1/cluster?verbose=1"), 400, "unknown_field")
    assert_error(call(cell, 0, "GET", f"/v1/kv/{prefix}/0?stale=true&stale=false"), 400,
                 "invalid_argument")
    assert call(cell, 0, "GET", f"/v1/kv/{prefix}/0?stale=true").status == 200


def test_hundreds_of_query_parameters_are_400_at_once(cell):
    """Before, a few hundred parameters filled libmicrohttpd's pool for the connection, and the
    client heard nothing until the header timeout closed it (10 s)."""
    for count in (65, 300, 1500):
        query = "&".join(f"p{i}=1" for i in range(count))
        for replica in (cell.leader, (cell.leader + 1) % 3):
            sock = raw_socket(cell, replica)
            sock.sendall(f"GET /v1/kv/x?{query} HTTP/1.1\r\nHost: x\r\n\r\n"
                         "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            (status, text), (after, _) = read_responses(sock, 2, timeout=5.0)
            sock.close()
            assert status == 400, text
            assert json.loads(text)["details"]["violation"] == "too many parameters", text
            assert after == 200


# ---- HTTP/1.1 ----------------------------------------------------------------------------------

def test_pipelined_requests_answer_in_order(cell):
    key = fresh("pipe")
    body = json.dumps({"value": "v1"}).encode()
    requests = (f"PUT /v1/kv/{key} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    requests += f"GET /v1/kv/{key} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    requests += b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    requests += f"GET /v1/kv/{key}-missing HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    for replica in (cell.leader, (cell.leader + 1) % 3):
        sock = raw_socket(cell, replica)
        sock.sendall(requests)  # all four in one write, before any answer
        answers = read_responses(sock, 4)
        sock.close()
        assert [status for status, _ in answers] == [200, 200, 200, 404], answers
        assert json.loads(answers[1][1])["value"] == "v1"
        assert json.loads(answers[2][1]) == {"ok": True}


def test_head_of_a_watch_is_its_headers_alone(cell):
    """HEAD of a stream answers the stream's headers with no body, so the next answer on the
    connection reads right (libmicrohttpd sent the chunked body's last chunk), and leaves no
    watch behind."""
    for replica in (cell.leader, (cell.leader + 1) % 3):
        sock = raw_socket(cell, replica)
        sock.sendall(b"HEAD /v1/watch/head-of?prefix=true HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        (status, body), (after, after_body) = read_responses(sock, 2)
        sock.close()
        assert (status, body) == (200, ""), body
        assert (after, json.loads(after_body)) == (200, {"ok": True}), after_body
        wait_until(lambda: call(cell, replica, "GET", "/v1/cluster")["api"]["watchers"] == 0,
                   timeout=5.0, what="the HEAD's watch is gone")


def test_a_watch_holds_nothing_once_its_client_is_gone(cell):
    """HEAD of a watch opens no stream, and a watch whose client hung up is freed within the
    hang-up check (100 ms), not at the next heartbeat (every 5 s). Before, both lingered up to
    5 s, and 11,000 pipelined HEADs filled http_max_streams: every watch and wait at that
    replica got 503."""
    replica = (cell.leader + 1) % 3

    def watchers() -> int:
        return call(cell, replica, "GET", "/v1/cluster")["api"]["watchers"]

    wait_until(lambda: watchers() == 0, timeout=10.0, what="the earlier tests' watches gone")
    heads = 200
    sock = raw_socket(cell, replica)
    sock.sendall(b"HEAD /v1/watch/gone?prefix=true HTTP/1.1\r\nHost: x\r\n\r\n" * heads)
    assert [status for status, _ in read_responses(sock, heads)] == [200] * heads
    assert watchers() == 0
    sock.close()
    # Two tries 2 s apart: a heartbeat falls within 1 s of one of them at most.
    for _ in range(2):
        sock = raw_socket(cell, replica)
        sock.sendall(b"GET /v1/watch/gone?prefix=true HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        wait_until(lambda: watchers() == 1, timeout=5.0, what="the watch open")
        sock.close()
        wait_until(lambda: watchers() == 0, timeout=1.0, what="the closed watch freed",
                   interval=0.05)
        time.sleep(2)


def test_unsound_framing_and_raw_spaces_are_400_at_once_and_store_nothing(cell):
    """The shapes of request smuggling (RFC 9112 5.1 and 6.3) are 400 at once and the
    connection closes after the answer; a raw space, tab or NUL in the target is 400 on a
    connection that stays open, and a NUL in the method names no endpoint. Nothing is written.
    Before, a Transfer-Encoding other than chunked left the client waiting out the body timeout
    (10 s), and so did 'chunked ' with a space or tab after it (chunked to us, not to
    libmicrohttpd), `PUT /v1/kv/a b` wrote the key 'a b', and `PUT /v1/kv/a<NUL>b` wrote 'a'."""
    key = fresh("frame")
    body = json.dumps({"value": "x"}).encode()
    length = f"Content-Length: {len(body)}\r\n"
    unframed = ["Transfer-Encoding: gzip\r\n", "Transfer-Encoding: gzip, chunked\r\n",
                "Transfer-Encoding: chunked \r\n", "Transfer-Encoding: chunked\t\r\n",
                f"{length}Content-Length: 99\r\n", f"Content-Length : {len(body)}\r\n",
                f"{length}Transfer-Encoding: chunked\r\n"]
    bad_targets = [f"/v1/kv/{key} b", f"/v1/kv/{key}\tb", f"/v1/kv/{key}\0b",
                   f"/v1/kv/{key}\0b?x=1%41"]
    for replica in (cell.leader, (cell.leader + 1) % 3):
        for headers in unframed:
            sock = raw_socket(cell, replica)
            sock.sendall(f"PUT /v1/kv/{key} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode()
                         + body)
            (status, text), = read_responses(sock, 1, timeout=5.0)
            assert status == 400 and json.loads(text)["code"] == "invalid_argument", text
            assert closed(sock), headers  # where the body ends is unknown
            sock.close()
        for target in bad_targets:
            sock = raw_socket(cell, replica)
            sock.sendall(f"PUT {target} HTTP/1.1\r\nHost: x\r\n{length}\r\n".encode() + body
                         + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            (status, text), (after, _) = read_responses(sock, 2)
            sock.close()
            assert status == 400 and json.loads(text)["details"]["field"] == "target", text
            assert after == 200
        for method in ("PUT\0X", "PUT\0", "PUT\0 "):
            sock = raw_socket(cell, replica)
            sock.sendall(f"{method} /v1/kv/{key} HTTP/1.1\r\nHost: x\r\n{length}\r\n".encode()
                         + body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            (status, text), (after, _) = read_responses(sock, 2)
            sock.close()
            assert status == 404 and json.loads(text)["code"] == "not_found", text
            assert after == 200
    assert call(cell, 0, "GET", f"/v1/kv/{key}?prefix=true")["kvs"] == []
    # The absolute form (what a proxy sends) is read as its path.
    sock = raw_socket(cell, cell.leader)
    sock.sendall(f"PUT http://x/v1/kv/{key} HTTP/1.1\r\nHost: x\r\n{length}\r\n".encode()
                 + body)
    (status, text), = read_responses(sock, 1)
    sock.close()
    assert status == 200, text
    assert call(cell, 0, "GET", f"/v1/kv/{key}")["value"] == "x"


def test_a_request_without_one_sound_host_is_400_and_stores_nothing(cell):
    """RFC 9112 3.2, as Go's net/http answers etcd's clients: an HTTP/1.1 request without Host,
    any request with two, or with one that is not a host[:port], is 400 naming Host and the
    connection closes. HTTP/1.0 without Host, and an empty Host, are served. Before, all were
    served."""
    key = fresh("host")
    body = json.dumps({"value": "x"}).encode()
    length = f"Content-Length: {len(body)}\r\n"
    refused = [("HTTP/1.1", ""), ("HTTP/1.1", "Host: a\r\nHost: b\r\n"),
               ("HTTP/1.0", "Host: a\r\nHost: a\r\n"), ("HTTP/1.1", "Host: a b\r\n"),
               ("HTTP/1.1", "Host: user@a/b\r\n")]
    for replica in (cell.leader, (cell.leader + 1) % 3):
        for version, hosts in refused:
            sock = raw_socket(cell, replica)
            sock.sendall(f"PUT /v1/kv/{key} {version}\r\n{hosts}{length}\r\n".encode() + body)
            (status, text), = read_responses(sock, 1, timeout=5.0)
            assert status == 400, (version, hosts, text)
            assert json.loads(text)["details"]["field"] == "Host", text
            assert closed(sock), (version, hosts)
            sock.close()
    assert call(cell, 0, "GET", f"/v1/kv/{key}?prefix=true")["kvs"] == []
    for version, hosts in (("HTTP/1.0", ""), ("HTTP/1.1", "Host:\r\n"),
                           ("HTTP/1.1", "Host: [::1]:7480\r\n")):
        sock = raw_socket(cell, cell.leader)
        sock.sendall(f"PUT /v1/kv/{key} {version}\r\n{hosts}{length}\r\n".encode() + body)
        (status, text), = read_responses(sock, 1)
        sock.close()
        assert status == 200, (version, hosts, text)
    assert call(cell, 0, "GET", f"/v1/kv/{key}")["version"] == 3


def test_headers_of_12_kb_are_read_and_of_20_kb_are_431_and_store_nothing(cell):
    """Each connection's header space is 16 KB (http_server.cpp, kConnectionPoolBytes): 12 KB
    of headers are served on a connection that keeps serving, 20 KB are 431 and write nothing."""
    key, refused = fresh("headers"), fresh("headers")
    body = json.dumps({"value": "x"}).encode()
    for replica in (cell.leader, (cell.leader + 1) % 3):
        sock = raw_socket(cell, replica)
        sock.sendall(f"PUT /v1/kv/{key} HTTP/1.1\r\nHost: x\r\nX-Pad: {'p' * 12_000}\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body
                     + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        (status, text), (after, _) = read_responses(sock, 2)
        sock.close()
        assert status == 200 and after == 200, text
        sock = raw_socket(cell, replica)
        sock.sendall(f"PUT /v1/kv/{refused} HTTP/1.1\r\nHost: x\r\nX-Pad: {'p' * 20_000}\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        (status, _), = read_responses(sock, 1)
        sock.close()
        assert status == 431
    assert call(cell, 0, "GET", f"/v1/kv/{key}")["version"] == 2
    assert call(cell, 0, "GET", f"/v1/kv/{refused}?prefix=true")["kvs"] == []


# ---- Floods ------------------------------------------------------------------------------------

def test_idle_connections_cost_nothing(cell):
    count = 1000 * SCALE
    replica = cell.leader
    idle = [raw_socket(cell, replica) for _ in range(count)]
    try:
        assert_healthz_fast(cell, replica)
        client = Client(cell)
        key = fresh("idle")
        for i in range(20):
            r = client(replica, "PUT", f"/v1/kv/{key}", {"value": str(i)})
            assert r.status == 200 and r.elapsed < 1.0, r
        client.close()
        connections = call(cell, replica, "GET", "/v1/cluster")["api"]["connections"]
        assert connections >= count, connections
    finally:
        for sock in idle:
            sock.close()


def test_slowloris_is_cut_and_others_are_served(cell):
    count = 200 * SCALE
    replica = (cell.leader + 1) % 3
    slow = [raw_socket(cell, replica) for _ in range(count)]
    stop = threading.Event()
    cut = set()

    def trickle():
        line = b"GET /v1/kv/slow HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        sent = 0
        while not stop.is_set() and len(cut) < count and sent < len(line):
            for i, sock in enumerate(slow):
                if i in cut:
                    continue
                try:
                    sock.send(line[sent:sent + 1])
                except OSError:
                    cut.add(i)
            sent += 1
            stop.wait(0.25)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        assert_healthz_fast(cell, replica)
        client = Client(cell)
        key = fresh("loris")
        for i in range(10):
            r = client(replica, "PUT", f"/v1/kv/{key}", {"value": str(i)})
            assert r.status == 200 and r.elapsed < 1.0, r
        client.close()

        # Each slow connection is closed once its header time runs out.
        def all_closed():
            for i, sock in enumerate(slow):
                if i in cut:
                    continue
                sock.setblocking(False)
                try:
                    if sock.recv(1) == b"":
                        cut.add(i)
                except BlockingIOError:
                    pass
                except OSError:
                    cut.add(i)
            return len(cut) == count
        wait_until(all_closed, timeout=HEADER_TIMEOUT_MS / 1000 + 10, what="slowloris cut")
        assert time.monotonic() - start < HEADER_TIMEOUT_MS / 1000 + 10
        timed_out = call(cell, replica, "GET", "/v1/cluster")["api"]["connections_timed_out"]
        assert timed_out >= count, timed_out
    finally:
        stop.set()
        thread.join()
        for sock in slow:
            sock.close()


def test_over_the_connection_limit_is_503_but_healthz_answers(cell):
    replica = (cell.leader + 2) % 3
    held = []
    try:
        for _ in range(MAX_CONNECTIONS * SCALE):
            held.append(raw_socket(cell, replica))
        extra = raw_socket(cell, replica)
        extra.sendall(b"GET /v1/kv/x HTTP/1.1\r\nHost: x\r\n\r\n")
        (status, body), = read_responses(extra, 1)
        extra.close()
        assert status == 503 and json.loads(body)["code"] == "unavailable", body
        assert "http_max_connections" in json.loads(body)["message"]
        probe = raw_socket(cell, replica)
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        (status, _), = read_responses(probe, 1)
        probe.close()
        assert status == 200
    finally:
        for sock in held:
            sock.close()
    # Once the others are gone, new connections are served again.
    wait_until(lambda: call(cell, replica, "GET", "/v1/kv/x").status == 404, timeout=10,
               what="served again")


def test_past_the_connection_cap_the_oldest_idle_connections_make_room(cell):
    # The server accepts up to an eighth above http_max_connections (at least 256) to answer 503
    # on; past that, a new connection closes the ones that have waited longest on their client.
    limit = MAX_CONNECTIONS * SCALE
    cap = limit + max(256, limit // 8)
    over = 300
    replica = (cell.leader + 2) % 3
    r = cell.replicas[replica]
    evicted_before = call(cell, replica, "GET", "/v1/cluster")["api"]["connections_evicted"]
    held = []
    try:
        with entered_netns(cell.endpoints["client_namespace"]):
            for _ in range(cap + over):  # oldest first; faster than the header timeout
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex((r["ip"], r["http_port"]))
                held.append(sock)
        probe = raw_socket(cell, replica)
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        (status, _), = read_responses(probe, 1)
        probe.close()
        assert status == 200
        refused = raw_socket(cell, replica)
        refused.sendall(b"GET /v1/kv/x HTTP/1.1\r\nHost: x\r\n\r\n")
        refused.settimeout(10)
        head = refused.recv(65536)
        refused.close()
        assert head.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: " in head, head

        def closed_ones():
            out = []
            for i, sock in enumerate(held):
                try:
                    if closed(sock):
                        out.append(i)
                except BlockingIOError:
                    pass
            return out
        wait_until(lambda: len(closed_ones()) >= over, timeout=10, what="room made")
        gone = closed_ones()
        # The oldest went, in the order they began to wait (a little slack for handshakes that
        # complete out of order). Hundreds are accepted in one millisecond: ties in milliseconds
        # went by address, and a CI run closed the 500th among the first 320.
        assert max(gone) < len(gone) + 8, (len(gone), max(gone))
    finally:
        for sock in held:
            sock.close()
    wait_until(lambda: call(cell, replica, "GET", "/v1/kv/x").status == 404, timeout=10,
               what="served again")
    evicted = call(cell, replica, "GET", "/v1/cluster")["api"]["connections_evicted"]
    assert evicted - evicted_before >= over


def test_many_watches_each_see_every_event(cell):
    count = 300 * SCALE
    replica = (cell.leader + 1) % 3
    prefix = fresh("watched")
    watches = [Watch(cell, replica, f"/v1/watch/{prefix}/?prefix=true") for _ in range(count)]
    try:
        assert all(w.status == 200 for w in watches)
        assert_healthz_fast(cell, replica)
        revisions = [call(cell, 0, "PUT", f"/v1/kv/{prefix}/{i}", {"value": str(i)})["revision"]
                     for i in range(5)]
        for w in watches:
            w.wait_for(lambda events: len(events) >= 5, timeout=30, what="5 events")
            assert [int(i) for i, _, _ in w.events()[:5]] == revisions
        assert call(cell, replica, "GET", "/v1/cluster")["api"]["watchers"] >= count
        assert_healthz_fast(cell, replica)
    finally:
        for w in watches:
            w.close()


def test_watches_and_waits_on_keys_of_their_own_each_get_theirs(cell):
    """Applications each watching their own config key and waiting on their own lock: more
    connections than one libmicrohttpd daemon takes (HttpServer's shards), each woken by its own
    key's event alone (WatchIndex), while the replica keeps answering."""
    count = 600 * SCALE
    locks = 40 * SCALE
    replica = (cell.leader + 1) % 3
    prefix = fresh("own")
    watches = [Watch(cell, replica, f"/v1/watch/{prefix}/{i}/config") for i in range(count)]
    holder = session(cell, ttl_ms=300_000)
    for i in range(locks):
        assert call(cell, 0, "POST", f"/v1/locks/{prefix}-lock-{i}:acquire",
                    {"session": holder})["granted"] is True
    waiters = []
    try:
        assert all(w.status == 200 for w in watches)
        for i in range(locks):
            sock = raw_socket(cell, replica)
            body = json.dumps({"session": session(cell), "wait_ms": 60_000}).encode()
            sock.sendall((f"POST /v1/locks/{prefix}-lock-{i}:acquire HTTP/1.1\r\nHost: x\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {len(body)}"
                          "\r\n\r\n").encode() + body)
            waiters.append(sock)
        wait_until(lambda: call(cell, replica, "GET", "/v1/cluster")["api"]["waiters"] >= locks,
                   timeout=30, what=f"{locks} waiters")
        revisions = {}
        for i in range(count):  # through another replica; every other key twice
            for _ in range(1 + i % 2):
                r = call(cell, cell.leader, "PUT", f"/v1/kv/{prefix}/{i}/config",
                         {"value": str(i)})
                assert r.status == 200, r
                revisions.setdefault(i, []).append(r["revision"])
        assert_healthz_fast(cell, replica)
        for i, w in enumerate(watches):
            w.wait_for(lambda events: len(events) >= len(revisions[i]), timeout=30,
                       what=f"the events of key {i}")
            assert [int(e[0]) for e in w.events()] == revisions[i], (i, w.events())
        for i in range(locks):
            assert call(cell, 0, "POST", f"/v1/locks/{prefix}-lock-{i}:release",
                        {"session": holder}).status == 200
        for sock in waiters:  # each granted its own lock
            [(status, body)] = read_responses(sock, 1, timeout=30)
            assert status == 200 and json.loads(body)["granted"] is True, body
    finally:
        for w in watches:
            w.close()
        for sock in waiters:
            sock.close()


def test_many_waits_hold_no_threads(cell):
    count = 200 * SCALE
    replica = cell.leader
    lock = fresh("crowded")
    holder = session(cell, ttl_ms=300_000)
    assert call(cell, 0, "POST", f"/v1/locks/{quote(lock)}:acquire",
                {"session": holder})["granted"] is True
    waiters = [session(cell) for _ in range(count)]
    sockets = [raw_wait(cell, replica, lock, s) for s in waiters]
    try:
        wait_until(lambda: call(cell, replica, "GET", "/v1/cluster")["api"]["waiters"] >= count,
                   timeout=30, what=f"{count} waiters")
        assert_healthz_fast(cell, replica)
        r = call(cell, replica, "PUT", f"/v1/kv/{fresh('honest')}", {"value": "x"})
        assert r.status == 200 and r.elapsed < 1.0, r
    finally:
        for sock in sockets:
            sock.close()
    # Every waiter hung up: every wait is withdrawn, and the lock goes to nobody.
    wait_until(lambda: call(cell, 0, "GET", f"/v1/locks/{quote(lock)}")["waiters"] == [],
               timeout=30, what="waits withdrawn")
    assert call(cell, 0, "POST", f"/v1/locks/{quote(lock)}:release",
                {"session": holder}).status == 200
    assert call(cell, 0, "GET", f"/v1/locks/{quote(lock)}")["holders"] == []


@pytest.mark.parametrize("at", ["leader", "follower"])
def test_a_waiter_that_hangs_up_has_its_wait_withdrawn(cell, at):
    replica = cell.leader if at == "leader" else (cell.leader + 1) % 3
    lock = fresh("abandoned")
    holder, waiter = session(cell), session(cell)
    assert call(cell, 0, "POST", f"/v1/locks/{quote(lock)}:acquire",
                {"session": holder})["granted"] is True
    withdrawn_before = waits_withdrawn(cell, replica)
    sock = raw_wait(cell, replica, lock, waiter)
    wait_until(lambda: waiting_sessions(cell, lock) == [waiter], timeout=10,
               what="the waiter in line")
    sock.close()
    wait_until(lambda: call(cell, 0, "GET", f"/v1/locks/{quote(lock)}")["waiters"] == [],
               timeout=10, what="the wait withdrawn")
    assert call(cell, 0, "POST", f"/v1/locks/{quote(lock)}:release",
                {"session": holder}).status == 200
    assert call(cell, 0, "GET", f"/v1/locks/{quote(lock)}")["holders"] == []
    assert waits_withdrawn(cell, replica) > withdrawn_before


@pytest.mark.parametrize("at", ["leader", "follower"])
def test_a_barrier_enter_that_hangs_up_is_withdrawn(cell, at):
    # Else the barrier would pass with a member whose client is gone.
    replica = cell.leader if at == "leader" else (cell.leader + 1) % 3
    path = f"/v1/barriers/{quote(fresh('rendezvous'))}"
    gone, late = session(cell), session(cell)
    withdrawn_before = waits_withdrawn(cell, replica)
    sock = raw_post(cell, replica, f"{path}:enter", {"session": gone, "count": 2, "wait_ms": 60_000})
    wait_until(lambda: call(cell, 0, "GET", path).status == 200, timeout=10,
               what="the member waiting to enter")
    sock.close()
    wait_until(lambda: call(cell, 0, "GET", path).status == 404, timeout=10,
               what="the enter withdrawn (the barrier gone with its only member)")
    r = call(cell, 0, "POST", f"{path}:enter", {"session": late, "count": 2})
    assert r.status == 409 and r["code"] == "barrier_not_ready", r
    assert waits_withdrawn(cell, replica) > withdrawn_before


def test_a_slow_watch_reader_is_cut_and_resumes_without_a_gap(cell):
    replica = (cell.leader + 2) % 3
    prefix = fresh("firehose")
    sock = raw_socket(cell, replica)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(f"GET /v1/watch/{prefix}/?prefix=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    value = "v" * 1000
    written = []
    client = Client(cell)
    # Far more than the socket buffers and the stream's buffer hold, while nobody reads.
    for i in range(400):
        written.append(client(0, "PUT", f"/v1/kv/{prefix}/{i % 10}", {"value": value})["revision"])
    client.close()
    wait_until(lambda: call(cell, replica, "GET", "/v1/cluster")["api"]["slow_readers_cut"] >= 1,
               timeout=20, what="the slow reader cut")
    # Now read what it was sent: events, then the error naming where to resume, then the end.
    sock.settimeout(10)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    data = dechunk(data[data.index(b"\r\n\r\n") + 4:])
    text = data.decode(errors="replace")
    seen = [int(line[4:]) for line in text.split("\n") if line.startswith("id: ")]
    error_line = [line for line in text.split("\n") if line.startswith("data: {\"code\":\"slow_reader")]
    assert error_line, text[-500:]
    resume = json.loads(error_line[0][6:])["details"]["resume_revision"]
    assert seen and resume == seen[-1] + 1, (seen[-3:], resume)
    rest = Watch(cell, replica, f"/v1/watch/{prefix}/?prefix=true&start_revision={resume}")
    try:
        rest.wait_for(lambda events: events and int(events[-1][0] or 0) >= written[-1],
                      timeout=20, what="the rest")
        resumed = [int(i) for i, _, _ in rest.events() if i is not None]
    finally:
        rest.close()
    assert seen + resumed == written, (len(seen), len(resumed), len(written))


# ---- Health of the cell ------------------------------------------------------------------------

def test_a_leader_cut_off_from_its_quorum_is_not_ready_and_sees_followers_down():
    with Cell(replicas=3) as c:
        leader = c.leader
        assert call(c, leader, "GET", "/readyz").status == 200
        c.partition(leader, peers=[r for r in range(3) if r != leader])
        try:
            wait_until(lambda: call(c, leader, "GET", "/readyz").status == 503, timeout=10,
                       what="the cut-off leader not ready")
            r = call(c, leader, "GET", "/readyz")
            assert r["code"] == "not_ready" and r.headers.get("Retry-After"), r
            # Its view changes away from the old leader once the others elect one; until then it
            # still believes it leads, and says its followers are down.
            others = sorted(r for r in range(3) if r != leader)

            def followers_down():
                cluster = call(c, leader, "GET", "/v1/cluster")
                down = [m["replica"] for m in cluster["members"] if m.get("role") == "down"]
                return not cluster["is_leader"] or sorted(down) == others
            wait_until(followers_down, timeout=10, what="the followers marked down")
            start = time.monotonic()
            times = healthz_latencies(c, leader, samples=5)
            assert max(times) < HEALTHZ_WORST_S, times
            assert time.monotonic() - start < 5
        finally:
            c.heal()
        wait_until(lambda: call(c, leader, "GET", "/readyz").status == 200, timeout=20,
                   what="ready again")


def test_a_replica_without_a_quorum_says_no_leader_everywhere():
    """A replica left alone has lost its leader (it asks the others for a view change nobody
    answers): /v1/status, /readyz and the voltlock_leader metric all say it knows no leader.
    Before, /v1/status named one (the old view's leader, or the next view's) while the others
    said none."""
    with Cell(replicas=3) as c:
        alone = (c.leader + 1) % 3
        for r in range(3):
            if r != alone:
                c.kill(r)
        # /readyz reads the role the loop publishes every 100 ms.
        wait_until(lambda: call(c, alone, "GET", "/readyz").status == 503, timeout=10,
                   what="the replica alone not ready")
        ready = call(c, alone, "GET", "/readyz")
        assert ready["details"]["leader"] is None, ready.body
        status = call(c, alone, "GET", "/v1/status")
        assert status["leader"] is None, status.body
        assert "\nvoltlock_leader -1\n" in call(c, alone, "GET", "/metrics").body


# ---- The event loop around a snapshot ----------------------------------------------------------

# Before the fix a snapshot of this test's state (about 58 MiB) held a follower's loop with
# durability sync for the whole of its write, 1-2 s on this machine; now the loop waits for one
# 1 MiB chunk's memtable insert at most. On 2 shared cores a turn can still be preempted for a few
# hundred ms, so the bound is the one the symptom broke: no turn of a second or more.
STALL_VALUE_BYTES = 6_000
STALL_KEYS = 5_000


def fill_pipelined(c: Cell, replica: int, prefix: str, keys: int, value: str, connections: int):
    """PUTs `keys` keys, pipelined 200 at a time on each of a few kept-alive connections."""
    body = json.dumps({"value": value}).encode()
    errors = []

    def worker(first: int):
        sock = raw_socket(c, replica, timeout=60)
        try:
            for start in range(first, keys, connections * 200):
                indexes = range(start, min(keys, start + connections * 200), connections)
                sock.sendall(b"".join(
                    f"PUT /v1/kv/{prefix}/{i:06d} HTTP/1.1\r\nHost: x\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                    .encode() + body for i in indexes))
                errors.extend(s for s, _ in read_responses(sock, len(indexes), timeout=60)
                              if s != 200)
        finally:
            sock.close()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:10]


def test_a_follower_loop_never_waits_for_its_snapshot_write():
    # Durability sync: the loop writes every step's log to RocksDB while the writer thread
    # writes the snapshot. MTU 9000 for large values, so that the state is big quickly.
    with Cell(replicas=3, durability="sync", mtu=9000, snapshot_every_ops=2_000,
              snapshot_every_seconds=1) as c:
        prefix = fresh("stall")
        fill_pipelined(c, c.leader, prefix, STALL_KEYS, "v" * STALL_VALUE_BYTES, connections=4)
        follower = next(r for r in range(3) if r != c.wait_for_leader())

        def snapshots_written():
            return call(c, follower, "GET", "/v1/status")["counters"]["snapshots_written"]
        wait_until(lambda: call(c, follower, "GET", "/v1/status")["storage"]["snapshot_bytes"]
                   > STALL_KEYS * STALL_VALUE_BYTES, timeout=60,
                   what="the follower's snapshot holding the whole state")
        # Caught up first: a follower that falls behind the leader's log fetches and installs a
        # snapshot, which it writes on its loop by design (docs/frontend.md: not fixed here).
        leader = c.leader
        wait_until(lambda: call(c, follower, "GET", "/v1/status")["commit"]
                   >= call(c, leader, "GET", "/v1/status")["commit"], timeout=60,
                   what="the follower caught up")
        written_before = snapshots_written()
        before = call(c, follower, "GET", "/v1/status")
        long_turns_before = before["event_loop"]["turns_over_1s"]
        installed_before = before["counters"]["snapshots_installed"]
        # Puts through the follower from a few clients until it has written 3 more snapshots.
        statuses, stop = [], threading.Event()

        def putter(n: int):
            client = Client(c, timeout=30)
            i = 0
            while not stop.is_set():
                r = client(follower, "PUT", f"/v1/kv/{prefix}/p{n}-{i % 50}", {"value": "x"})
                statuses.append((r.status, r.elapsed))
                i += 1
            client.close()
        threads = [threading.Thread(target=putter, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: snapshots_written() >= written_before + 3, timeout=90,
                       what="3 more snapshots written at the follower under load")
        finally:
            stop.set()
            for t in threads:
                t.join()
        after = call(c, follower, "GET", "/v1/status")
        loop = after["event_loop"]
        metrics = call(c, follower, "GET", "/metrics").body
        assert not [s for s, _ in statuses if s != 200], sorted(set(s for s, _ in statuses))
        if after["counters"]["snapshots_installed"] != installed_before:
            pytest.skip("the follower fell behind under load and installed a snapshot, which it "
                        "writes on its loop (docs/frontend.md); its own snapshots were not alone")
        assert loop["turns_over_1s"] == long_turns_before, loop
        assert "voltlock_event_loop_longest_turn_seconds " in metrics
        slowest = max(elapsed for _, elapsed in statuses)
        assert slowest < 5.0, slowest


def replica_pid(c: Cell, replica: int) -> int:
    state = json.load(open(os.path.join(c.endpoints["state_dir"], "cell.json")))
    return state["replicas"][replica]["process"]["pid"]


def seen_down(c: Cell, asked: int) -> list:
    """The replicas `asked`'s /v1/cluster marks down."""
    cluster = call(c, asked, "GET", "/v1/cluster")
    assert cluster.status == 200, cluster
    return sorted(m["replica"] for m in cluster["members"] if m.get("role") == "down")


@pytest.mark.parametrize("how", ["SIGSTOP", "SIGKILL"])
def test_a_follower_that_stopped_answering_is_down_at_the_leader_and_the_other_follower(how):
    with Cell(replicas=3) as c:
        leader = c.leader
        gone, other = [r for r in range(3) if r != leader]
        assert seen_down(c, leader) == [] and seen_down(c, other) == []
        pid = replica_pid(c, gone)
        if how == "SIGSTOP":
            os.kill(pid, signal.SIGSTOP)
        else:
            c.kill(gone)
        try:
            # The leader asks for a no-op when asked and nothing is in flight: no writes needed.
            wait_until(lambda: seen_down(c, leader) == [gone], timeout=10,
                       what=f"r{gone} down at the leader")
            wait_until(lambda: seen_down(c, other) == [gone], timeout=10,
                       what=f"r{gone} down at the other follower")
            cluster = call(c, other, "GET", "/v1/cluster")
            assert cluster["members_seen_by"] == leader, cluster.body
            assert call(c, leader, "GET", "/readyz").status == 200  # a quorum is left
            assert max(healthz_latencies(c, leader, samples=5)) < HEALTHZ_WORST_S
        finally:
            if how == "SIGSTOP":
                os.kill(pid, signal.SIGCONT)
        if how == "SIGKILL":
            c.start(gone)
        wait_until(lambda: seen_down(c, leader) == [] and seen_down(c, other) == [],
                   timeout=20, what=f"r{gone} up again everywhere")


def test_a_leader_that_stopped_answering_is_down_as_seen_from_a_follower():
    with Cell(replicas=3) as c:
        leader = c.leader
        follower = next(r for r in range(3) if r != leader)
        pid = replica_pid(c, leader)
        os.kill(pid, signal.SIGSTOP)
        try:
            # Until the followers elect another leader it is down as the follower sees it (it
            # does not answer); after, the new leader marks it down.
            wait_until(lambda: leader in seen_down(c, follower), timeout=15,
                       what=f"the stopped leader r{leader} down at r{follower}")
        finally:
            os.kill(pid, signal.SIGCONT)


def test_a_hung_up_wait_is_withdrawn_without_taking_back_a_grant_made_meanwhile():
    """A client waits for a lock at a follower, hangs up, and at once asks again at another
    replica, which tells it that it holds the lock: the holder released it meanwhile. The
    follower hears everything 400 ms late, so it sees the hang-up after the grant. Withdrawing
    the wait must leave the grant alone: the client was told it holds the lock (the withdrawal
    was a Release before, and the lock went free while its client held it)."""
    # 400 ms of delay is below a view-change timeout of 1.5 s: the follower stays in the cell.
    with Cell(replicas=3, config_extra={"view_change_timeout_ticks": 150}) as c:
        leader = c.wait_for_leader()
        slow, other = [r for r in range(3) if r != leader]
        lock = fresh("hung-up")
        at = f"/v1/locks/{quote(lock)}"
        holder, waiter = session(c, leader, 60_000), session(c, leader, 60_000)
        assert call(c, leader, "POST", f"{at}:acquire", {"session": holder})["granted"] is True
        sock = raw_wait(c, slow, lock, waiter)
        wait_until(lambda: waiting_sessions(c, lock) == [waiter], timeout=10,
                   what="the waiter in line")
        c.netem(slow, "delay 400ms", direction="in")
        try:
            sock.close()
            assert call(c, leader, "POST", f"{at}:release", {"session": holder}).status == 200
            again = call(c, other, "POST", f"{at}:acquire", {"session": waiter})
            assert again.status == 200 and again["granted"] is True, again
            # Sent through the slow follower after its client hung up, so proposed after the
            # withdrawal (a follower's Requests reach the leader in order).
            put = call(c, slow, "PUT", f"/v1/kv/{fresh('after')}", {"value": "x"}, timeout=30)
            assert put.status == 200, put
        finally:
            c.heal()
        got = call(c, leader, "GET", at)
        assert [h["session"] for h in got["holders"]] == [waiter], got
        assert got["generation"] == again["sequencer"]["generation"], (got, again)
        wait_until(lambda: call(c, slow, "GET", "/v1/cluster")["api"]["withdrawals_too_late"]
                   >= 1, timeout=10, what="the withdrawal found the wait over")
        third = call(c, leader, "POST", f"{at}:acquire", {"session": session(c, leader)})
        assert_error(third, 409, "lock_busy")
