"""The lock service's HTTP/JSON API (issue 5, docs/api.md) against a real 3-replica cell: every
endpoint's answers and errors, forwarding from followers, idempotent retries, stale reads,
session expiry and lock-delay, and the leader killed with -9 while clients wait on a lock and
watch a prefix. Most tests share one cell (each uses names of its own); the ones that kill
replicas have a cell each."""
import concurrent.futures
import re
import secrets
import subprocess
import threading
import time

import pytest

from api import Client, Watch, call, quote
from cell import Cell, voltlockd_path
from replication import wait_until

pytestmark = [pytest.mark.usefixtures("root"), pytest.mark.voltlockd]


def fresh(prefix: str) -> str:
    """A name no other test in the shared cell uses."""
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture(scope="module")
def cell():
    import os
    if os.geteuid() != 0:
        pytest.skip("needs root")
    with Cell(replicas=3) as c:
        yield c


def followers(c: Cell) -> list:
    return [r for r in range(3) if r != c.leader]


def session(c: Cell, replica: int = 0, ttl_ms: int = 30_000, **extra) -> int:
    r = call(c, replica, "POST", "/v1/sessions", {"ttl_ms": ttl_ms, **extra})
    assert r.status == 201, r
    return r["session"]


def assert_error(r, status: int, code: str):
    assert r.status == status, r
    assert set(r.body) == {"code", "message", "details"}, r.body
    assert r["code"] == code, r.body
    assert isinstance(r["details"], dict) and r["message"]
    if status == 503:
        assert r.headers.get("Retry-After"), r.headers


# ---- Sessions ----------------------------------------------------------------------------------

def test_session_lifecycle_on_any_replica(cell):
    f = followers(cell)[0]
    created = call(cell, f, "POST", "/v1/sessions",
                   {"ttl_ms": 10_000, "lock_delay_ms": 500, "name": "worker 1"})
    assert created.status == 201
    s = created["session"]
    assert created["ttl_ms"] == 10_000 and created["lock_delay_ms"] == 500
    one = call(cell, cell.leader, "GET", f"/v1/sessions/{s}")
    assert one.status == 200 and one["name"] == "worker 1" and one["session"] == s
    assert "lease_deadline_ms" in one.body  # answered by the leader, which keeps the leases
    assert any(x["session"] == s for x in call(cell, f, "GET", "/v1/sessions")["sessions"])
    kept = call(cell, f, "POST", f"/v1/sessions/{s}:keepalive")
    assert kept.status == 200 and kept["ttl_ms"] == 10_000
    closed = call(cell, f, "DELETE", f"/v1/sessions/{s}")
    assert closed.status == 200 and closed["closed"] is True
    gone = [call(cell, f, "DELETE", f"/v1/sessions/{s}"),
            call(cell, f, "GET", f"/v1/sessions/{s}"),
            call(cell, f, "POST", f"/v1/sessions/{s}:keepalive"),
            call(cell, cell.leader, "POST", f"/v1/sessions/{s}:keepalive")]
    for answer in gone:
        assert_error(answer, 404, "unknown_session")
        # The revision the answer was made at, as every unknown_session says (a keepalive's was 0).
        assert answer["details"]["revision"] >= closed["revision"], answer.body


def test_a_post_without_content_length_is_answered_at_once(cell):
    """curl -XPOST sends no Content-Length; cpp-httplib 0.11 would read such a body until the
    connection closed. The API answers it as a request without a body."""
    import socket as sockets
    from cellrig.util import entered_netns
    s = session(cell)
    r = cell.replicas[followers(cell)[0]]
    with entered_netns(cell.endpoints["client_namespace"]):
        sock = sockets.create_connection((r["ip"], r["http_port"]), timeout=5)
    with sock:
        start = time.monotonic()
        sock.sendall(f"POST /v1/sessions/{s}:keepalive HTTP/1.1\r\nHost: x\r\n"
                     "Connection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert time.monotonic() - start < 2


def test_session_requests_that_are_wrong_are_400_and_change_nothing(cell):
    s = session(cell)
    before = call(cell, 0, "GET", "/v1/cluster")["api"]["revision"]
    assert_error(call(cell, 0, "POST", "/v1/sessions", {"ttl_ms": 999}), 400, "invalid_argument")
    assert_error(call(cell, 0, "POST", "/v1/sessions", {"ttl_ms": 5000, "tll": 1}), 400,
                 "unknown_field")
    assert_error(call(cell, 0, "POST", "/v1/sessions", raw=b"{nope"), 400, "bad_json")
    assert_error(call(cell, 0, "POST", "/v1/sessions", {"ttl_ms": "5000"}), 400,
                 "invalid_argument")
    assert_error(call(cell, 0, "POST", "/v1/sessions", {"ttl_ms": 5000, "name": "x" * 129}), 400,
                 "invalid_argument")
    assert_error(call(cell, 0, "GET", "/v1/sessions/abc"), 400, "invalid_argument")
    # A keepalive and a close take no fields: a body with any is refused, not ignored (before, a
    # keepalive with {"ttl_ms": 5} renewed the lease at its old TTL and said 200).
    for replica in range(3):
        assert_error(call(cell, replica, "POST", f"/v1/sessions/{s}:keepalive", {"ttl_ms": 5}),
                     400, "unknown_field")
        assert_error(call(cell, replica, "POST", f"/v1/sessions/{s}:keepalive", raw=b"nope"),
                     400, "bad_json")
        assert_error(call(cell, replica, "DELETE", f"/v1/sessions/{s}", {"force": True}), 400,
                     "unknown_field")
        assert call(cell, replica, "POST", f"/v1/sessions/{s}:keepalive", {}).status == 200
    assert call(cell, 0, "GET", f"/v1/sessions/{s}").status == 200
    assert call(cell, 0, "GET", "/v1/cluster")["api"]["revision"] == before


# ---- Locks -------------------------------------------------------------------------------------

def test_exclusive_lock_try_busy_release_and_sequencers(cell):
    a, b = session(cell), session(cell)
    lock = fresh("db/primary:x")  # '/' and ':' are ordinary characters of a name
    path = f"/v1/locks/{quote(lock)}"
    got = call(cell, 1, "POST", f"{path}:acquire", {"session": a})
    assert got.status == 200 and got["granted"] is True
    seq = got["sequencer"]
    assert seq["lock"] == lock and seq["mode"] == "exclusive" and seq["session"] == a
    again = call(cell, 2, "POST", f"{path}:acquire", {"session": a})
    assert again["sequencer"] == seq  # a retry returns the same grant
    assert_error(call(cell, 2, "POST", f"{path}:acquire", {"session": b}), 409, "lock_busy")
    assert_error(call(cell, 2, "POST", f"{path}:acquire", {"session": a, "mode": "shared"}), 409,
                 "mode_conflict")
    assert_error(call(cell, 0, "POST", f"{path}:release", {"session": b}), 409, "not_held")
    state = call(cell, 1, "GET", path)
    assert [h["session"] for h in state["holders"]] == [a] and state["waiters"] == []
    assert call(cell, 0, "POST", "/v1/sequencers:check", {"sequencer": seq})["valid"] is True
    assert call(cell, 0, "POST", f"{path}:release", {"session": a})["released"] is True
    assert call(cell, 0, "POST", "/v1/sequencers:check", {"sequencer": seq})["valid"] is False
    regrant = call(cell, 0, "POST", f"{path}:acquire", {"session": b})
    assert regrant["sequencer"]["generation"] > seq["generation"]
    assert_error(call(cell, 0, "POST", f"{path}:acquire", {"session": 999_999}), 404,
                 "unknown_session")
    assert_error(call(cell, 0, "POST", f"{path}:acquire", {"session": a, "mode": "both"}), 400,
                 "invalid_argument")
    assert_error(call(cell, 0, "POST", "/v1/locks/bad%01name:acquire", {"session": a}), 400,
                 "invalid_argument")
    assert call(cell, 0, "GET", "/v1/locks")["locks"]


def test_shared_holders_and_an_exclusive_waiter_queue_fifo(cell):
    s1, s2, s3, s4 = (session(cell) for _ in range(4))
    path = f"/v1/locks/{fresh('shared')}"
    assert call(cell, 0, "POST", f"{path}:acquire", {"session": s1, "mode": "shared"})["granted"]
    assert call(cell, 1, "POST", f"{path}:acquire", {"session": s2, "mode": "shared"})["granted"]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        exclusive = pool.submit(call, cell, 2, "POST", f"{path}:acquire",
                                {"session": s3, "wait_ms": 10_000})
        wait_until(lambda: len(call(cell, 0, "GET", path)["waiters"]) == 1, 5, "s3 to queue")
        # A shared request behind a queued exclusive one waits: no overtaking.
        shared = pool.submit(call, cell, 1, "POST", f"{path}:acquire",
                             {"session": s4, "mode": "shared", "wait_ms": 10_000})
        wait_until(lambda: len(call(cell, 0, "GET", path)["waiters"]) == 2, 5, "s4 to queue")
        assert [w["session"] for w in call(cell, 0, "GET", path)["waiters"]] == [s3, s4]
        call(cell, 0, "POST", f"{path}:release", {"session": s1})
        time.sleep(0.3)
        assert not exclusive.done()
        call(cell, 0, "POST", f"{path}:release", {"session": s2})
        got = exclusive.result(timeout=10)
        assert got.status == 200 and got["sequencer"]["session"] == s3
        assert not shared.done()
        call(cell, 0, "POST", f"{path}:release", {"session": s3})
        assert shared.result(timeout=10)["sequencer"]["mode"] == "shared"


def test_a_lock_wait_times_out_with_408_and_leaves_nothing_behind(cell):
    holder, waiter = session(cell), session(cell)
    path = f"/v1/locks/{fresh('timeout')}"
    call(cell, 0, "POST", f"{path}:acquire", {"session": holder})
    r = call(cell, 1, "POST", f"{path}:acquire", {"session": waiter, "wait_ms": 400})
    assert_error(r, 408, "wait_timed_out")
    assert 0.3 < r.elapsed < 3, r.elapsed
    state = call(cell, 0, "GET", path)
    assert state["waiters"] == [] and [h["session"] for h in state["holders"]] == [holder]


def test_a_waiter_whose_session_is_closed_gets_404(cell):
    holder, waiter = session(cell), session(cell)
    path = f"/v1/locks/{fresh('closed')}"
    call(cell, 0, "POST", f"{path}:acquire", {"session": holder})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, cell, 2, "POST", f"{path}:acquire",
                              {"session": waiter, "wait_ms": 10_000})
        wait_until(lambda: call(cell, 0, "GET", path)["waiters"], 5, "the waiter to queue")
        call(cell, 1, "DELETE", f"/v1/sessions/{waiter}")
        assert_error(waiting.result(timeout=10), 404, "unknown_session")


def test_session_expiry_releases_the_lock_and_lock_delay_holds_it(cell):
    """A session that stops keeping alive expires (the leader proposes it); its lock is free
    only after lock_delay_ms; a waiter queued meanwhile gets it when the delay ends."""
    doomed = session(cell, ttl_ms=1_000, lock_delay_ms=2_000)
    other = session(cell)
    lock = fresh("expiring")
    key = fresh("ephemeral")
    path = f"/v1/locks/{lock}"
    assert call(cell, 0, "POST", f"{path}:acquire", {"session": doomed})["granted"]
    assert call(cell, 0, "PUT", f"/v1/kv/{key}", {"value": "mine", "session": doomed}).status == 200
    start = time.monotonic()
    wait_until(lambda: call(cell, 1, "GET", f"/v1/sessions/{doomed}").status == 404, 5,
               "the session to expire")
    expired_after = time.monotonic() - start
    assert 0.8 < expired_after < 3, expired_after
    assert call(cell, 0, "GET", f"/v1/kv/{key}").status == 404  # ephemeral key went with it
    state = call(cell, 0, "GET", path)
    assert state["holders"] == [] and state["delay_until_ms"] > 0
    busy = call(cell, 0, "POST", f"{path}:acquire", {"session": other})
    assert_error(busy, 409, "lock_busy")
    assert busy["details"]["delay_until_ms"] == state["delay_until_ms"]
    waited = call(cell, 2, "POST", f"{path}:acquire", {"session": other, "wait_ms": 10_000})
    assert waited.status == 200 and waited["sequencer"]["session"] == other
    assert 0.5 < waited.elapsed < 3.5, waited.elapsed  # the rest of the 2 s delay


# ---- Key/value ---------------------------------------------------------------------------------

def test_kv_put_get_cas_delete_and_listing(cell):
    base = fresh("cfg") + "/"
    put = call(cell, 1, "PUT", f"/v1/kv/{base}a", {"value": "1"})
    assert put.status == 200 and put["prev_mod_revision"] == 0 and put["version"] == 1
    got = call(cell, 2, "GET", f"/v1/kv/{base}a")
    assert got["value"] == "1" and got["mod_revision"] == put["revision"]
    cas = call(cell, 0, "PUT", f"/v1/kv/{base}a", {"value": "2", "prev_revision": 1})
    assert_error(cas, 409, "cas_mismatch")
    assert cas["details"]["mod_revision"] == put["revision"]
    ok = call(cell, 0, "PUT", f"/v1/kv/{base}a", {"value": "2", "prev_revision": put["revision"]})
    assert ok.status == 200 and ok["version"] == 2
    assert_error(call(cell, 0, "PUT", f"/v1/kv/{base}a", {"value": "x", "prev_revision": 0}), 409,
                 "cas_mismatch")  # 0: must not exist
    for k in "bcde":
        call(cell, 0, "PUT", f"/v1/kv/{base}{k}", {"value": k})
    listing = call(cell, 1, "GET", f"/v1/kv/{base}?prefix=true")
    assert [kv["key"] for kv in listing["kvs"]] == [base + k for k in "abcde"]
    page = call(cell, 1, "GET", f"/v1/kv/{base}?prefix=true&limit=2")
    assert len(page["kvs"]) == 2 and page["more"] is True and page["next_after"] == base + "b"
    rest = call(cell, 1, "GET", f"/v1/kv/{quote(base)}?prefix=true&after={quote(base + 'b')}")
    assert [kv["key"] for kv in rest["kvs"]] == [base + k for k in "cde"]
    assert_error(call(cell, 0, "DELETE", f"/v1/kv/{base}a?prev_revision=1"), 409, "cas_mismatch")
    assert call(cell, 0, "DELETE", f"/v1/kv/{base}a")["deleted"] == 1
    assert_error(call(cell, 0, "GET", f"/v1/kv/{base}a"), 404, "key_not_found")
    assert call(cell, 2, "DELETE", f"/v1/kv/{base}?prefix=true")["deleted"] == 4
    assert call(cell, 1, "GET", f"/v1/kv/{base}?prefix=true")["kvs"] == []
    assert_error(call(cell, 0, "GET", "/v1/kv/"), 400, "invalid_argument")  # "" only as prefix
    assert_error(call(cell, 0, "GET", f"/v1/kv/{base}a?limit=3"), 400, "invalid_argument")
    assert_error(call(cell, 0, "DELETE", f"/v1/kv/{base}?prefix=true&prev_revision=3"), 400,
                 "invalid_argument")


def test_binary_values_round_trip_as_base64(cell):
    key = fresh("bin")
    value = "AAEC//79"  # bytes 00 01 02 ff fe fd
    assert call(cell, 0, "PUT", f"/v1/kv/{key}", {"value": value, "encoding": "base64"}).status == 200
    got = call(cell, 1, "GET", f"/v1/kv/{key}")
    assert got["value"] == value and got["encoding"] == "base64"
    call(cell, 0, "PUT", f"/v1/kv/{key}", {"value": "text"})
    assert call(cell, 1, "GET", f"/v1/kv/{key}?encoding=base64")["value"] == "dGV4dA=="
    assert_error(call(cell, 0, "PUT", f"/v1/kv/{key}", {"value": "!!", "encoding": "base64"}), 400,
                 "invalid_argument")


def test_a_value_too_large_for_a_datagram_is_413_naming_the_limit(cell):
    key = "k"
    r = call(cell, 1, "PUT", f"/v1/kv/{key}", {"value": "x" * 1349})
    assert_error(r, 413, "too_large")
    assert r["details"]["limit_bytes"] == 1348 and "1,348" in r["message"]
    assert call(cell, 1, "PUT", f"/v1/kv/{key}", {"value": "x" * 1348}).status == 200
    assert len(call(cell, 0, "GET", f"/v1/kv/{key}")["value"]) == 1348
    assert_error(call(cell, 1, "PUT", "/v1/kv/k", {"value": "x" * 100_000}), 413, "too_large")


def test_at_the_quota_what_adds_records_is_507_and_what_frees_them_goes_through():
    """quota_bytes 100,000: 1 KB puts through a follower until the cell refuses one. Then, at
    every replica, a put, a new session, an acquire and a barrier entry are 507 quota_exceeded
    and change nothing; reads, keepalives and deletes go through, and once the keys are deleted
    a put does too."""
    quota = 100_000
    with Cell(replicas=3, config_extra={"quota_bytes": quota}) as c:
        follower = followers(c)[0]
        holder = session(c, follower)
        value = "v" * 1000
        for i in range(300):
            r = call(c, follower, "PUT", f"/v1/kv/q/{i}", {"value": value})
            if r.status != 200:
                break
        assert_error(r, 507, "quota_exceeded")
        assert r["details"]["quota_bytes"] == quota
        assert r["details"]["stored_bytes"] >= quota
        filled = i
        assert 50 < filled < 100, f"{filled} puts of 1 KB filled a quota of {quota} bytes"
        for replica in range(3):
            for refused in [("PUT", "/v1/kv/q/more", {"value": "x"}),
                            ("POST", "/v1/sessions", {"ttl_ms": 30_000}),
                            ("POST", "/v1/locks/q-lock:acquire", {"session": holder}),
                            ("POST", "/v1/barriers/q-barrier:enter",
                             {"session": holder, "count": 2})]:
                assert_error(call(c, replica, *refused), 507, "quota_exceeded")
            assert_error(call(c, replica, "GET", "/v1/kv/q/more"), 404, "key_not_found")
            assert call(c, replica, "GET", "/v1/kv/q/0")["value"] == value
            assert call(c, replica, "POST", f"/v1/sessions/{holder}:keepalive").status == 200
        api = call(c, follower, "GET", "/v1/cluster")["api"]
        assert api["quota_bytes"] == quota and api["stored_bytes"] >= quota
        assert re.search(rf"^voltlock_quota_bytes {quota}$",
                         call(c, follower, "GET", "/metrics").body, re.M)

        assert call(c, follower, "DELETE", "/v1/kv/q/?prefix=true")["deleted"] == filled
        wait_until(lambda: call(c, follower, "GET", "/v1/cluster")["api"]["stored_bytes"] < quota,
                   timeout=10, what="the follower applies the delete")
        assert call(c, follower, "PUT", "/v1/kv/q/more", {"value": "x"}).status == 200
        assert call(c, follower, "POST", "/v1/locks/q-lock:acquire",
                    {"session": holder})["granted"]


def test_fenced_and_ephemeral_writes(cell):
    s = session(cell)
    lock = fresh("fence")
    seq = call(cell, 0, "POST", f"/v1/locks/{lock}:acquire", {"session": s})["sequencer"]
    key = fresh("fenced")
    assert call(cell, 1, "PUT", f"/v1/kv/{key}", {"value": "a", "sequencer": seq}).status == 200
    call(cell, 0, "POST", f"/v1/locks/{lock}:release", {"session": s})
    stale = call(cell, 1, "PUT", f"/v1/kv/{key}", {"value": "b", "sequencer": seq})
    assert_error(stale, 409, "sequencer_invalid")
    assert call(cell, 2, "GET", f"/v1/kv/{key}")["value"] == "a"  # nothing changed
    assert_error(call(cell, 1, "DELETE", f"/v1/kv/{key}", {"sequencer": seq}), 409,
                 "sequencer_invalid")
    eph = fresh("eph")
    assert call(cell, 2, "PUT", f"/v1/kv/{eph}", {"value": "e", "session": s})["version"] == 1
    assert call(cell, 0, "GET", f"/v1/kv/{eph}")["session"] == s
    assert_error(call(cell, 0, "PUT", f"/v1/kv/{eph}", {"value": "e", "session": 999_999}), 404,
                 "unknown_session")
    call(cell, 1, "DELETE", f"/v1/sessions/{s}")
    assert_error(call(cell, 0, "GET", f"/v1/kv/{eph}"), 404, "key_not_found")


def test_stale_reads_are_local_and_say_how_far_behind(cell):
    key = fresh("stale")
    put = call(cell, cell.leader, "PUT", f"/v1/kv/{key}", {"value": "v"})
    f = followers(cell)[0]
    got = wait_until(lambda: (lambda r: r if r.status == 200 else None)(
        call(cell, f, "GET", f"/v1/kv/{key}?stale=true")), 5, "the follower to apply the put")
    assert got["value"] == "v"
    stale = got["stale"]
    assert stale["replica"] == f and stale["is_leader"] is False
    assert stale["leader"] == cell.leader and stale["commit"] <= stale["op"]
    assert stale["revision"] >= put["revision"]
    assert "X-Voltlock-Leader" not in got.headers  # served here, not forwarded
    on_leader = call(cell, cell.leader, "GET", f"/v1/kv/{key}?stale=true")
    assert on_leader["stale"]["is_leader"] is True
    for path in ("/v1/sessions?stale=true", "/v1/locks?stale=true", "/v1/barriers?stale=true"):
        r = call(cell, f, "GET", path)
        assert r.status == 200 and r["stale"]["replica"] == f


# ---- Forwarding and idempotency ----------------------------------------------------------------

def test_followers_forward_to_the_leader_transparently(cell):
    for f in followers(cell):
        key = fresh("fwd")
        r = call(cell, f, "PUT", f"/v1/kv/{key}", {"value": str(f)})
        assert r.status == 200 and r.headers.get("X-Voltlock-Leader") == str(cell.leader)
        assert call(cell, f, "GET", f"/v1/kv/{key}")["value"] == str(f)
    assert call(cell, followers(cell)[0], "GET", "/v1/cluster")["api"]["forwarded"] > 0


def test_a_retry_with_the_same_client_id_and_request_number_applies_once(cell):
    key = fresh("idem")
    client_id = str(secrets.randbelow(2**62) + 1)
    headers = {"X-Voltlock-Client-Id": client_id, "X-Voltlock-Request-Number": "1"}
    first = call(cell, cell.leader, "PUT", f"/v1/kv/{key}", {"value": "once"}, headers)
    # The same request again, at another replica (as after a failover): the same answer.
    retry = call(cell, followers(cell)[0], "PUT", f"/v1/kv/{key}", {"value": "once"}, headers)
    assert retry.status == 200 and retry.body == first.body
    assert call(cell, 0, "GET", f"/v1/kv/{key}")["version"] == 1
    # A new number is a new request.
    headers["X-Voltlock-Request-Number"] = "2"
    assert call(cell, 1, "PUT", f"/v1/kv/{key}", {"value": "twice"}, headers)["version"] == 2
    # Reusing a number for a different request is refused, not misapplied.
    reused = call(cell, 1, "DELETE", f"/v1/kv/{key}", None, headers)
    assert_error(reused, 409, "request_number_reused")
    assert call(cell, 0, "GET", f"/v1/kv/{key}")["value"] == "twice"
    assert_error(call(cell, 0, "PUT", f"/v1/kv/{key}", {"value": "x"},
                      {"X-Voltlock-Client-Id": "5"}), 400, "invalid_argument")



def test_a_number_reused_for_another_request_of_the_same_kind_is_refused(cell):
    # Same op, other arguments: the cell tells it from a retry by the request's bytes, at the
    # leader and through a follower, and never answers with the first request's result.
    client_id = str(secrets.randbelow(2**62) + 1)
    first_key, other_key = fresh("reuse"), fresh("reuse")
    headers = {"X-Voltlock-Client-Id": client_id, "X-Voltlock-Request-Number": "1"}
    first = call(cell, cell.leader, "PUT", f"/v1/kv/{first_key}", {"value": "A"}, headers)
    assert first.status == 200
    for replica in (cell.leader, followers(cell)[0]):
        assert_error(call(cell, replica, "PUT", f"/v1/kv/{first_key}", {"value": "B"}, headers),
                     409, "request_number_reused")
        assert_error(call(cell, replica, "PUT", f"/v1/kv/{other_key}", {"value": "C"}, headers),
                     409, "request_number_reused")
    assert call(cell, 0, "GET", f"/v1/kv/{first_key}")["value"] == "A"
    assert call(cell, 0, "GET", f"/v1/kv/{other_key}").status == 404
    assert call(cell, cell.leader, "GET", "/v1/status")["counters"]["requests_reused"] >= 2
    # A lock granted under a pair is not "granted" again for another lock under it.
    holder, other = session(cell), session(cell)
    mine, theirs = fresh("reuse-lock"), fresh("reuse-lock")
    assert call(cell, 0, "POST", f"/v1/locks/{theirs}:acquire", {"session": other})["granted"]
    headers["X-Voltlock-Request-Number"] = "2"
    assert call(cell, 0, "POST", f"/v1/locks/{mine}:acquire", {"session": holder},
                headers)["granted"]
    for replica in (cell.leader, followers(cell)[0]):
        assert_error(call(cell, replica, "POST", f"/v1/locks/{theirs}:acquire",
                          {"session": holder}, headers), 409, "request_number_reused")
    holders = call(cell, 0, "GET", f"/v1/locks/{theirs}")["holders"]
    assert [h["session"] for h in holders] == [other]


# ---- Barriers ----------------------------------------------------------------------------------

def test_a_double_barrier_releases_its_members_together(cell):
    members = [session(cell) for _ in range(3)]
    path = f"/v1/barriers/{fresh('phase')}"
    assert_error(call(cell, 0, "POST", f"{path}:enter", {"session": members[0], "count": 3}), 409,
                 "barrier_not_ready")
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        entering = [pool.submit(call, cell, i, "POST", f"{path}:enter",
                                {"session": s, "count": 3, "wait_ms": 10_000})
                    for i, s in enumerate(members)]
        results = [f.result(timeout=15) for f in entering]
    assert all(r.status == 200 and r["passed"] for r in results), results
    assert len({r["revision"] for r in results}) == 1  # released together
    assert call(cell, 1, "GET", path)["phase"] == "entered"
    outsider = session(cell)
    assert_error(call(cell, 0, "POST", f"{path}:enter", {"session": outsider, "count": 3}), 409,
                 "barrier_in_use")
    assert_error(call(cell, 0, "POST", f"{path}:leave", {"session": outsider}), 409, "not_member")
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        leaving = [pool.submit(call, cell, i, "POST", f"{path}:leave",
                               {"session": s, "wait_ms": 10_000})
                   for i, s in enumerate(members)]
        assert all(f.result(timeout=15).status == 200 for f in leaving)
    assert_error(call(cell, 0, "GET", path), 404, "barrier_not_found")


def test_a_barrier_wait_times_out_with_408(cell):
    s = session(cell)
    path = f"/v1/barriers/{fresh('lonely')}"
    r = call(cell, 1, "POST", f"{path}:enter", {"session": s, "count": 2, "wait_ms": 300})
    assert_error(r, 408, "wait_timed_out")
    assert_error(call(cell, 1, "GET", path), 404, "barrier_not_found")  # the enter was undone
    other = session(cell)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, cell, 2, "POST", f"{path}:enter",
                              {"session": other, "count": 2, "wait_ms": 1_000})
        wait_until(lambda: call(cell, 0, "GET", path).status == 200, 5, "the barrier to exist")
        mismatch = call(cell, 0, "POST", f"{path}:enter", {"session": s, "count": 5})
        assert_error(mismatch, 409, "count_mismatch")
        assert mismatch["details"]["count"] == 2
        assert_error(waiting.result(timeout=10), 408, "wait_timed_out")


# ---- Watches -----------------------------------------------------------------------------------

def test_watch_streams_changes_in_order_and_resumes_without_gap_or_duplicate(cell):
    prefix = fresh("w") + "/"
    first = call(cell, 0, "PUT", f"/v1/kv/{prefix}0", {"value": "0"})["revision"]
    watch = Watch(cell, followers(cell)[0], f"/v1/watch/{prefix}?prefix=true&start_revision={first}")
    assert watch.status == 200
    for i in range(1, 6):
        call(cell, i % 3, "PUT", f"/v1/kv/{prefix}{i}", {"value": str(i)})
    call(cell, 1, "DELETE", f"/v1/kv/{prefix}?prefix=true")  # one revision, six events
    events = watch.wait_for(lambda e: len(e) >= 12, 10, "12 events")
    watch.close()
    assert [t for _, t, _ in events[:6]] == ["put"] * 6
    assert [d["key"] for _, _, d in events[:6]] == [f"{prefix}{i}" for i in range(6)]
    assert [t for _, t, _ in events[6:]] == ["delete"] * 6
    revisions = [d["revision"] for _, _, d in events]
    assert revisions == sorted(revisions) and revisions[0] == first
    assert len(set(revisions[6:])) == 1  # the prefix delete is one revision
    assert [i for i, _, _ in events[6:]] == [None] * 5 + [str(revisions[-1])]  # id: whole revision
    # Resume from the middle on another replica: exactly the rest.
    middle = revisions[3]
    resumed = Watch(cell, 2, f"/v1/watch/{prefix}?prefix=true&start_revision={middle + 1}")
    rest = resumed.wait_for(lambda e: len(e) >= 8, 10, "the rest")
    time.sleep(0.3)
    resumed.close()
    assert [(d["revision"], d["key"]) for _, _, d in resumed.events()] == \
        [(d["revision"], d["key"]) for _, _, d in events[4:]]
    assert len(rest) == 8


def test_a_watch_resumes_after_its_last_event_id(cell):
    """Last-Event-ID, as a browser's EventSource sends it on reconnecting: the stream goes on from
    the revision after it; start_revision, when given, wins."""
    prefix = fresh("last-id") + "/"
    revisions = [call(cell, 0, "PUT", f"/v1/kv/{prefix}{i}", {"value": str(i)})["revision"]
                 for i in range(4)]
    resumed = Watch(cell, 1, f"/v1/watch/{prefix}?prefix=true",
                    headers={"Last-Event-ID": str(revisions[1])})
    explicit = Watch(cell, 2, f"/v1/watch/{prefix}?prefix=true&start_revision={revisions[0]}",
                     headers={"Last-Event-ID": str(revisions[2])})
    try:
        assert resumed.status == 200 and explicit.status == 200
        got = resumed.wait_for(lambda e: len(e) >= 2, 10, "the events after the last id")
        assert [d["revision"] for _, _, d in got] == revisions[2:]
        got = explicit.wait_for(lambda e: len(e) >= 4, 10, "the events from start_revision")
        assert [d["revision"] for _, _, d in got] == revisions
    finally:
        resumed.close()
        explicit.close()
    # The largest id has no successor: refused, not read as a watch of the whole history.
    for bad in ("18446744073709551615", "-1", "x"):
        refused = Watch(cell, 0, f"/v1/watch/{prefix}?prefix=true", headers={"Last-Event-ID": bad})
        assert refused.status == 400 and refused.body["details"]["field"] == "Last-Event-ID", bad


def test_watch_of_locks_and_sessions(cell):
    lock = fresh("watched-lock")
    watch = Watch(cell, 1, f"/v1/watch/{lock}?spaces=lock")
    wait_until(lambda: watch.comments, 5, "the stream to start")
    s = session(cell)
    call(cell, 0, "POST", f"/v1/locks/{lock}:acquire", {"session": s})
    call(cell, 0, "POST", f"/v1/locks/{lock}:release", {"session": s})
    events = watch.wait_for(lambda e: len(e) >= 2, 5, "grant and release")
    watch.close()
    assert [t for _, t, _ in events] == ["lock_grant", "lock_release"]
    assert events[0][2]["generation"] == events[1][2]["generation"]


def test_watch_errors(cell):
    bad = Watch(cell, 0, "/v1/watch/x?spaces=kv,nope")
    assert bad.status == 400 and bad.body["code"] == "invalid_argument"
    empty = Watch(cell, 0, "/v1/watch/")
    assert empty.status == 400


@pytest.mark.slow
def test_a_watch_older_than_the_history_is_410_compacted(cell):
    """The history keeps 10,000 events: 5,000 puts and one prefix delete of them push the start
    out of it."""
    prefix = fresh("compact") + "/"
    start = call(cell, 0, "PUT", f"/v1/kv/{prefix}first", {"value": "x"})["revision"]
    def writer(worker: int):
        client = Client(cell)
        try:
            for i in range(250):
                r = client(cell.leader, "PUT", f"/v1/kv/{prefix}{worker}-{i}", {"value": "v"})
                assert r.status == 200, r
        finally:
            client.close()
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        for f in [pool.submit(writer, w) for w in range(20)]:
            f.result(timeout=120)
    assert call(cell, 0, "DELETE", f"/v1/kv/{prefix}?prefix=true")["deleted"] == 5001
    # Replica 1 applies the delete when the leader's next commit reaches it.
    wait_until(lambda: call(cell, 1, "GET", "/v1/cluster")["api"]["oldest_revision"] > start, 5,
               "replica 1 to drop the start from its history")
    old = Watch(cell, 1, f"/v1/watch/{prefix}?prefix=true&start_revision={start}")
    assert old.status == 410
    assert old.body["code"] == "compacted" and old.body["details"]["oldest_revision"] > start
    oldest = old.body["details"]["oldest_revision"]
    ok = Watch(cell, 1, f"/v1/watch/{prefix}?prefix=true&start_revision={oldest}")
    assert ok.status == 200
    ok.wait_for(lambda e: e and e[-1][2]["type"] == "delete", 10, "the delete's events")
    ok.close()


# ---- Admin -------------------------------------------------------------------------------------

def test_cluster_status_health_and_readiness(cell):
    c = call(cell, cell.leader, "GET", "/v1/cluster")
    assert c.status == 200 and c["is_leader"] is True and c["leader"] == cell.leader
    assert len(c["members"]) == 3 and all("lag_ops" in m for m in c["members"])
    assert c["members"][cell.leader]["role"] == "leader"
    assert c["commit"] <= c["op"] and "messages_in" in c["counters"]
    f = call(cell, followers(cell)[0], "GET", "/v1/cluster")
    assert f["is_leader"] is False and f["leader"] == cell.leader
    status = call(cell, 0, "GET", "/v1/status")
    assert {"replica", "status", "view", "leader", "op", "commit", "counters"} <= set(status.body)
    # The digest reads the whole state on the loop: only for who asks.
    assert "digest" not in status["machine"], status["machine"]
    digested = call(cell, 0, "GET", "/v1/status?digest=true")
    assert digested.status == 200 and re.fullmatch(r"[0-9a-f]{16}", digested["machine"]["digest"])
    assert_error(call(cell, 0, "GET", "/v1/status?digest=maybe"), 400, "invalid_argument")
    assert call(cell, 1, "GET", "/healthz").body == {"ok": True}
    ready = call(cell, 2, "GET", "/readyz")
    assert ready.status == 200 and ready["ready"] is True
    assert_error(call(cell, 0, "GET", "/v1/nothing-here"), 404, "not_found")
    assert_error(call(cell, 0, "POST", "/v1/locks/x"), 404, "not_found")


def test_each_replica_says_which_version_it_runs(cell):
    """/v1/status, /v1/cluster and /metrics (voltlock_build_info) carry voltlockd --version's,
    so an operator sees a rolling upgrade's progress. Before, nothing did."""
    printed = subprocess.run([voltlockd_path(), "--version"], capture_output=True, text=True,
                             check=True).stdout
    version = printed.split()[1]
    for replica in range(3):
        assert call(cell, replica, "GET", "/v1/status")["version"] == version
        assert call(cell, replica, "GET", "/v1/cluster")["version"] == version
        metrics = call(cell, replica, "GET", "/metrics").body
        assert f'\nvoltlock_build_info{{version="{version}"}} 1\n' in metrics, metrics[:500]


def test_a_burst_of_digest_requests_reads_the_state_once_per_op(cell):
    """?digest=true reads the whole state on the loop. Requests at the same applied op share one
    reading, and one loop turn reads it at most once (a request wanting another op's digest in
    that turn: 503 with Retry-After). Before, 30 at once at a leader with 126,000 keys were served
    in one turn of 30 readings (about 0.6 s) and deposed it."""
    leader = cell.wait_for_leader()
    before = call(cell, leader, "GET", "/v1/status")["machine"]["digests_computed"]
    burst = 30
    start = threading.Barrier(burst)

    def ask(_):
        start.wait()
        return call(cell, leader, "GET", "/v1/status?digest=true")

    with concurrent.futures.ThreadPoolExecutor(burst) as pool:
        answers = list(pool.map(ask, range(burst)))
    refused = [a for a in answers if a.status != 200]
    assert all(a.status == 503 and "Retry-After" in a.headers for a in refused), refused
    digests = {}
    for a in answers:
        if a.status == 200:
            digests.setdefault(a["commit"], set()).add(a["machine"]["digest"])
    assert digests and all(len(d) == 1 for d in digests.values()), digests
    after = call(cell, leader, "GET", "/v1/status")["machine"]["digests_computed"]
    assert after - before <= len(digests), (before, after, digests)


def test_openapi_describes_every_endpoint(cell):
    doc = call(cell, 1, "GET", "/v1/openapi.json").body
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for path, method in [("/v1/sessions", "post"), ("/v1/sessions/{id}:keepalive", "post"),
                         ("/v1/sessions/{id}", "delete"), ("/v1/sessions", "get"),
                         ("/v1/sessions/{id}", "get"), ("/v1/locks/{name}:acquire", "post"),
                         ("/v1/locks/{name}:release", "post"), ("/v1/locks", "get"),
                         ("/v1/locks/{name}", "get"), ("/v1/sequencers:check", "post"),
                         ("/v1/kv/{key}", "get"), ("/v1/kv/{key}", "put"),
                         ("/v1/kv/{key}", "delete"), ("/v1/watch/{key}", "get"),
                         ("/v1/barriers/{name}:enter", "post"),
                         ("/v1/barriers/{name}:leave", "post"), ("/v1/cluster", "get"),
                         ("/v1/openapi.json", "get"), ("/metrics", "get"), ("/healthz", "get"),
                         ("/readyz", "get")]:
        assert method in paths[path], (path, method)
    for name in ("Error", "Sequencer", "KeyValue", "Cluster"):
        assert name in doc["components"]["schemas"]


def test_metrics_parse_as_prometheus_text(cell):
    parser = pytest.importorskip("prometheus_client.parser")
    call(cell, 0, "GET", "/healthz")
    invented = "M" + str(secrets.randbelow(10**9))  # a method is a label, not a new series
    assert call(cell, cell.leader, invented, "/v1/kv/a").status == 404
    text = call(cell, cell.leader, "GET", "/metrics").body
    assert invented not in text
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert families["voltlock_is_leader"].samples[0].value == 1
    for name in ("voltlock_view", "voltlock_op", "voltlock_commit", "voltlock_revision",
                 "voltlock_sessions"):
        assert name in families, name
    messages = families["voltlock_messages_out"].samples  # counters lose _total in the name
    assert any(s.labels["type"] == "prepare" and s.value > 0 for s in messages)
    requests = families["voltlock_http_requests"].samples
    assert any(s.labels["endpoint"] == "/v1/kv/{key}" and s.labels["code"] == "200"
               for s in requests)
    assert any(s.labels["method"] == "other" and s.labels["code"] == "404" for s in requests)
    lag = families["voltlock_replica_lag_ops"].samples
    assert {s.labels["replica"] for s in lag} == {"0", "1", "2"}


def test_schemathesis_finds_no_server_error_and_answers_match_the_document(cell):
    """Property-based requests from /v1/openapi.json, valid and invalid: no 5xx, and every answer
    has a documented status, content type and body schema. Waits are capped at 300 ms so that a
    generated wait cannot hold the test for an hour; the watch (an endless stream) is left out."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import (content_type_conformance, response_schema_conformance,
                                     status_code_conformance)
    from cellrig.util import entered_netns

    r = cell.replicas[cell.leader]
    base = f"http://{r['ip']}:{r['http_port']}"
    namespace = cell.endpoints["client_namespace"]
    with entered_netns(namespace):
        schema = schemathesis.openapi.from_url(f"{base}/v1/openapi.json")
    schema = schema.exclude(path="/v1/watch/{key}")
    checks = [response_schema_conformance, status_code_conformance, content_type_conformance]
    server_errors, nonconforming, calls = [], [], [0]

    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=40, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case):
            if isinstance(case.body, dict) and isinstance(case.body.get("wait_ms"), int):
                case.body["wait_ms"] = min(case.body["wait_ms"], 300)
            with entered_netns(namespace):  # requests makes its sockets there
                response = case.call(base_url=base, timeout=20)
            calls[0] += 1
            if response.status_code >= 500:
                server_errors.append((case.method, case.formatted_path, case.body,
                                      response.status_code, response.text[:300]))
            try:
                case.validate_response(response, checks=checks)
            except BaseException as failure:  # a FailureGroup is not an Exception
                nonconforming.append((case.method, case.formatted_path, response.status_code,
                                      str(failure)[:300]))

        run()
    assert calls[0] > 400
    assert not server_errors, server_errors[:5]
    assert not nonconforming, nonconforming[:5]


# ---- Failover ----------------------------------------------------------------------------------

def test_leader_killed_while_clients_wait_on_a_lock_and_watch():
    """kill -9 of the leader while: a client waits on a lock through a follower (the forwarder
    retries transparently); another waits directly at the leader and retries with its client id
    and request number elsewhere; a watch streams from the leader (resumed elsewhere from its
    last revision); a writer keeps writing. Afterwards: each waiter was granted once, in FIFO
    order, never two holders at once; the resumed watch has no gap and no duplicate; and with a
    second replica gone there is no quorum: 503 with Retry-After."""
    with Cell(replicas=3) as c:
        old = c.leader
        f1, f2 = [r for r in range(3) if r != old]
        holder, b, d = (session(c, f1, ttl_ms=6_000) for _ in range(3))
        stop = threading.Event()

        def keep_alive():
            while not stop.is_set():
                for s in (holder, b, d):
                    for r in (f1, f2):
                        try:
                            if call(c, r, "POST", f"/v1/sessions/{s}:keepalive",
                                    timeout=3).status == 200:
                                break
                        except OSError:
                            pass
                stop.wait(0.5)

        keeper = threading.Thread(target=keep_alive, daemon=True)
        keeper.start()
        lock = "jobs/leader-election"
        path = f"/v1/locks/{lock}"
        assert call(c, old, "POST", f"{path}:acquire", {"session": holder})["granted"]
        prefix = "failover/"
        start = call(c, old, "PUT", f"/v1/kv/{prefix}start", {"value": "0"})["revision"]
        watch = Watch(c, old, f"/v1/watch/{prefix}?prefix=true&start_revision={start}")

        written = []

        def writer():
            client_id = str(secrets.randbelow(2**62) + 1)
            for n in range(1, 10_000):
                if stop.is_set():
                    return
                headers = {"X-Voltlock-Client-Id": client_id, "X-Voltlock-Request-Number": str(n)}
                for attempt in range(40):  # the same request until it is answered
                    try:
                        r = call(c, (f1, f2)[attempt % 2], "PUT", f"/v1/kv/{prefix}{n}",
                                 {"value": str(n)}, headers, timeout=10)
                        if r.status == 200:
                            written.append(n)
                            break
                    except OSError:
                        pass
                    time.sleep(0.1)
                time.sleep(0.02)

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            writing = pool.submit(writer)
            waiter_b = pool.submit(call, c, f1, "POST", f"{path}:acquire",
                                   {"session": b, "wait_ms": 30_000}, None, 60)
            wait_until(lambda: len(call(c, old, "GET", path)["waiters"]) == 1, 5, "b to queue")
            identity = {"X-Voltlock-Client-Id": str(secrets.randbelow(2**62) + 1),
                        "X-Voltlock-Request-Number": "1"}

            def waiter_at_leader():
                try:
                    return call(c, old, "POST", f"{path}:acquire",
                                {"session": d, "wait_ms": 30_000}, identity, 60)
                except OSError:
                    pass  # the leader died under us: the same request, elsewhere
                for attempt in range(50):
                    try:
                        return call(c, (f2, f1)[attempt % 2], "POST", f"{path}:acquire",
                                    {"session": d, "wait_ms": 30_000}, identity, 60)
                    except OSError:
                        time.sleep(0.2)

            waiter_d = pool.submit(waiter_at_leader)
            wait_until(lambda: len(call(c, old, "GET", path)["waiters"]) == 2, 5, "d to queue")
            watch.wait_for(lambda e: len(e) >= 3, 10, "some writes on the watch")
            # Longer than a forwarder's 8 s bound on finding a leader: that bound is per outage,
            # not per request, so a wait held this long still survives the kill.
            time.sleep(9)

            c.kill(old)
            new = c.wait_for_leader(timeout=15)
            assert new != old
            seen_before = watch.last_complete_revision()
            watch.wait_for(lambda e: watch.closed.is_set(), 10, "the dead leader's stream to end")
            time.sleep(1.0)  # writes go on under the new leader

            # The waiters kept their places in the queue across the failover.
            state = call(c, new, "GET", path)
            assert [h["session"] for h in state["holders"]] == [holder]
            assert [w["session"] for w in state["waiters"]] == [b, d]
            assert not waiter_b.done() and not waiter_d.done()

            call(c, f2, "POST", f"{path}:release", {"session": holder})
            got_b = waiter_b.result(timeout=20)
            assert got_b.status == 200 and got_b["sequencer"]["session"] == b, got_b
            time.sleep(0.3)
            assert not waiter_d.done()  # one holder at a time
            held = call(c, new, "GET", path)["holders"]
            assert [h["session"] for h in held] == [b]
            call(c, f1, "POST", f"{path}:release", {"session": b})
            got_d = waiter_d.result(timeout=20)
            assert got_d is not None and got_d.status == 200, got_d
            assert got_d["sequencer"]["session"] == d
            assert got_d["sequencer"]["generation"] > got_b["sequencer"]["generation"]
            stop.set()
            writing.result(timeout=60)

        # Resume the watch elsewhere from its last complete revision: together with what it got
        # before, exactly the history a fresh watch from the start sees.
        resumed = Watch(c, f1, f"/v1/watch/{prefix}?prefix=true&start_revision={seen_before + 1}")
        full = Watch(c, f2, f"/v1/watch/{prefix}?prefix=true&start_revision={start}")
        expected = len(written) + 1
        full.wait_for(lambda e: len(e) >= expected, 15, "the whole history")
        before = [(d["revision"], d["key"]) for _, _, d in watch.events()
                  if d["revision"] <= seen_before]
        resumed.wait_for(lambda e: len(before) + len(e) >= expected, 15, "the rest after resume")
        time.sleep(0.3)
        combined = before + [(d["revision"], d["key"]) for _, _, d in resumed.events()]
        assert combined == [(d["revision"], d["key"]) for _, _, d in full.events()]
        assert len(combined) == len(set(combined)) == expected
        # Every acknowledged write is there exactly once.
        keys = [key for _, key in combined]
        assert sorted(keys) == sorted([f"{prefix}start"] + [f"{prefix}{n}" for n in written])
        resumed.close()
        full.close()
        watch.close()

        # Now a second replica goes: no quorum. Requests are 503 with Retry-After.
        survivor = f1 if new == f2 else f2
        c.kill(new)
        r = call(c, survivor, "PUT", "/v1/kv/after", {"value": "x"}, timeout=30)
        assert_error(r, 503, "unavailable")
        assert 7 < r.elapsed < 15, r.elapsed
        wait_until(lambda: call(c, survivor, "GET", "/readyz").status == 503, 10,
                   "the survivor to say it is not ready")
        stale = call(c, survivor, "GET", "/v1/kv/failover/start?stale=true")
        assert stale.status == 200 and stale["stale"]["is_leader"] is False
