"""Forwarding over the replication channel (issue 12, docs/frontend.md "Forwarding"): an op sent
to a follower travels to the leader as a VR Request carrying the client's identity and comes
back in the Reply. Every op kind through a follower; a Reply lost on the way is sent again and
the op applied once; a leader killed (SIGKILL) while ops are forwarded, with each op retried
under its identity across the failover, applies every put and lock acquire once. Keepalives
travel as Requests too, answered by the leader's lease tracker; linearizable reads of locks and
barriers at a follower wait for the leader's commit point (ReadIndex) and are never stale."""
import http.client
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from api import Client, call
from cell import Cell
from replication import wait_until

pytestmark = [pytest.mark.usefixtures("root"), pytest.mark.voltlockd]


def fresh(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def new_client_id() -> str:
    return str(secrets.randbelow(2**62) + 1)


@pytest.fixture(scope="module")
def cell():
    # A follower that misses the leader's heartbeats for 300 ms (the default) starts a view
    # change, and under the lossy link below it could become the leader itself (the next view's
    # leader is round-robin): 1.5 s is 30 heartbeats, which 33% loss does not all drop.
    with Cell(replicas=3, config_extra={"view_change_timeout_ticks": 150}) as c:
        yield c


def followers(c: Cell) -> list:
    return [r for r in range(3) if r != c.leader]


def api_counters(c: Cell, replica: int) -> dict:
    return call(c, replica, "GET", "/v1/cluster")["api"]


def test_every_op_kind_travels_as_a_request_through_a_follower(cell):
    leader = cell.wait_for_leader()
    f = followers(cell)[0]
    before = api_counters(cell, f)
    answers = []

    def at_f(method, path, body=None, expect=200):
        r = call(cell, f, method, path, body)
        assert r.status == expect, (method, path, r)
        answers.append(r)
        return r

    s = at_f("POST", "/v1/sessions", {"ttl_ms": 30_000, "name": "fwd"}, 201)["session"]
    other = at_f("POST", "/v1/sessions", {"ttl_ms": 30_000}, 201)["session"]
    key = fresh("fwd-kv")
    put = at_f("PUT", f"/v1/kv/{key}", {"value": "1"})
    cas = at_f("PUT", f"/v1/kv/{key}", {"value": "2", "prev_revision": put["revision"]})
    assert cas["version"] == 2
    mismatch = call(cell, f, "PUT", f"/v1/kv/{key}", {"value": "3", "prev_revision": 1})
    assert mismatch.status == 409 and mismatch["code"] == "cas_mismatch"
    assert mismatch.headers.get("X-Voltlock-Leader") == str(leader)
    assert at_f("GET", f"/v1/kv/{key}")["value"] == "2"  # a linearizable get is an op too
    lock = f"/v1/locks/{fresh('fwd-lock')}"
    granted = at_f("POST", f"{lock}:acquire", {"session": s})
    assert granted["granted"] is True
    assert at_f("POST", "/v1/sequencers:check", {"sequencer": granted["sequencer"]})["valid"]
    # A wait sent to a follower waits there, from the revision in the leader's Reply.
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(call, cell, f, "POST", f"{lock}:acquire",
                              {"session": other, "wait_ms": 10_000})
        wait_until(lambda: any(w["session"] == other for w in
                               call(cell, leader, "GET", lock)["waiters"]),
                   10, "the second session to wait for the lock")
        at_f("POST", f"{lock}:release", {"session": s})
        second = waiting.result(timeout=15)
    assert second.status == 200 and second["granted"] is True, second
    at_f("POST", f"{lock}:release", {"session": other})
    barrier = f"/v1/barriers/{fresh('fwd-barrier')}"
    assert at_f("POST", f"{barrier}:enter", {"session": s, "count": 1})["passed"] is True
    assert at_f("POST", f"{barrier}:leave", {"session": s})["passed"] is True
    at_f("DELETE", f"/v1/kv/{key}")
    # Linearizable reads of locks and barriers: a no-op's Reply gives the commit point, and
    # the follower answers from its own state once it has applied that far (ReadIndex).
    assert at_f("GET", lock)["holders"] == []
    assert at_f("GET", barrier, expect=404)["code"] == "barrier_not_found"  # all left
    # A keepalive: a Request that the leader's API answers from its lease tracker, with the
    # answer it gives at its own front end.
    leader_before = api_counters(cell, leader)
    kept = at_f("POST", f"/v1/sessions/{s}:keepalive")
    at_leader = call(cell, leader, "POST", f"/v1/sessions/{s}:keepalive")
    assert at_leader.status == 200 and set(kept.body) == set(at_leader.body), (kept, at_leader)
    assert kept["session"] == s and kept["ttl_ms"] == 30_000
    assert kept["lease_deadline_ms"] <= at_leader["lease_deadline_ms"]
    missing = call(cell, f, "POST", "/v1/sessions/999999999:keepalive")
    assert missing.status == 404 and missing["code"] == "unknown_session", missing
    leader_after = api_counters(cell, leader)
    at_f("DELETE", f"/v1/sessions/{s}")
    at_f("DELETE", f"/v1/sessions/{other}")

    assert all(r.headers.get("X-Voltlock-Leader") == str(leader) for r in answers), answers
    after = api_counters(cell, f)
    as_requests = after["forwarded_as_requests"] - before["forwarded_as_requests"]
    # Every answer above (the CAS mismatch and the unknown session's keepalive too).
    assert as_requests >= len(answers), (before, after)
    assert after["request_fallbacks"] == before["request_fallbacks"]
    assert after["forwarded"] - before["forwarded"] == as_requests  # nothing over HTTP
    assert after["keepalives_as_requests"] - before["keepalives_as_requests"] == 2
    assert after["reads_at_commit_point"] - before["reads_at_commit_point"] == 2
    served = "keepalive_requests_served"
    assert leader_after[served] - leader_before[served] == 2, (leader_before, leader_after)
    metrics = call(cell, f, "GET", "/metrics").body
    for name in ("forwarded_as_requests", "request_retransmits", "request_fallbacks",
                 "keepalives_as_requests", "keepalive_requests_served", "keepalives_asked_again",
                 "reads_at_commit_point"):
        assert f"voltlock_api_{name}_total " in metrics


def test_a_retried_identity_through_followers_gets_the_first_answer(cell):
    cell.wait_for_leader()
    key = fresh("fwd-idem")
    headers = {"X-Voltlock-Client-Id": new_client_id(), "X-Voltlock-Request-Number": "7"}
    first = call(cell, followers(cell)[0], "PUT", f"/v1/kv/{key}", {"value": "once"}, headers)
    assert first.status == 200, first
    again = call(cell, followers(cell)[1], "PUT", f"/v1/kv/{key}", {"value": "once"}, headers)
    assert again.status == 200 and again.body == first.body
    assert call(cell, cell.leader, "GET", f"/v1/kv/{key}")["version"] == 1
    # A lower number than the client's latest is refused, as at the leader.
    headers["X-Voltlock-Request-Number"] = "3"
    stale = call(cell, followers(cell)[0], "PUT", f"/v1/kv/{key}", {"value": "no"}, headers)
    assert stale.status == 409 and stale["code"] == "request_number_stale", stale
    assert call(cell, cell.leader, "GET", f"/v1/kv/{key}")["version"] == 1


def test_a_client_cannot_send_the_headers_replicas_send_each_other(cell):
    """X-Voltlock-Forwarded, -Wait-Here, -On-Behalf-Of and -Local-View are believed from a peer
    replica only (its request signed with the cell's key): from a client they are 400 naming the
    header, at the leader and at a follower, and nothing is done. Before, Forwarded made a
    follower answer 503 not_leader, and Wait-Here on an acquire that had to wait got 202 with
    X-Voltlock-Waiting while the wait stayed queued for nobody. Requests a follower forwards
    over HTTP, which carry Forwarded, are still served."""
    leader = cell.wait_for_leader()
    f = followers(cell)[0]
    key = fresh("fwd-internal")
    lock = f"/v1/locks/{fresh('fwd-internal')}"
    holder = call(cell, leader, "POST", "/v1/sessions", {"ttl_ms": 30_000})["session"]
    waiter = call(cell, leader, "POST", "/v1/sessions", {"ttl_ms": 30_000})["session"]
    assert call(cell, leader, "POST", f"{lock}:acquire", {"session": holder})["granted"]
    for replica in (leader, f):
        for name in ("X-Voltlock-Forwarded", "X-Voltlock-Wait-Here", "X-Voltlock-On-Behalf-Of",
                     "X-Voltlock-Local-View"):
            put = call(cell, replica, "PUT", f"/v1/kv/{key}", {"value": "x"}, {name: "1"})
            assert put.status == 400 and put["details"]["field"] == name, (replica, put)
            wait = call(cell, replica, "POST", f"{lock}:acquire",
                        {"session": waiter, "wait_ms": 5_000}, {name: "1"})
            assert wait.status == 400 and "X-Voltlock-Waiting" not in wait.headers, wait
    assert call(cell, leader, "GET", lock)["waiters"] == []
    assert call(cell, leader, "GET", f"/v1/kv/{key}").status == 404
    # Reads of sessions go from a follower to the leader over HTTP.
    before = api_counters(cell, f)
    sessions = call(cell, f, "GET", "/v1/sessions")
    assert sessions.status == 200, sessions
    assert {holder, waiter} <= {s["session"] for s in sessions["sessions"]}, sessions
    assert call(cell, f, "GET", f"/v1/sessions/{holder}")["session"] == holder
    after = api_counters(cell, f)
    assert after["forwarded"] - after["forwarded_as_requests"] >= \
        before["forwarded"] - before["forwarded_as_requests"] + 2, (before, after)
    for session in (holder, waiter):
        call(cell, leader, "DELETE", f"/v1/sessions/{session}")


def test_a_followers_cluster_is_the_leaders_look_asked_with_a_header_clients_may_not_send(cell):
    """A follower's /v1/cluster asks the leader for its own look with X-Voltlock-Local-View,
    signed with the cell's key as forwarded requests are: the leader answers it, and every
    member is reachable. From a client the header is 400 (it made a follower answer with its own
    look alone)."""
    leader = cell.wait_for_leader()
    f = followers(cell)[0]
    cluster = call(cell, f, "GET", "/v1/cluster")
    assert cluster.status == 200 and cluster["members_seen_by"] == leader, cluster.body
    assert all(m["reachable"] for m in cluster["members"]), cluster.body
    for replica in (leader, f):
        asked = call(cell, replica, "GET", "/v1/cluster", headers={"X-Voltlock-Local-View": "1"})
        assert asked.status == 400, (replica, asked)
        assert asked["details"]["field"] == "X-Voltlock-Local-View", asked.body


def test_a_lost_reply_is_sent_again_and_the_op_applied_once(cell):
    leader = cell.wait_for_leader()
    f = followers(cell)[0]
    status = call(cell, f, "GET", "/v1/status").body
    assert status["status"] == "normal" and status["leader"] == leader, status
    key = fresh("fwd-lossy")
    before = api_counters(cell, f)
    puts = 40
    client = Client(cell, timeout=30)
    # A third of what reaches the follower is lost: Replies among it (and Prepares, which the
    # leader sends again; the other follower keeps the quorum).
    cell.netem(f, "loss 33%", direction="in")
    try:
        for i in range(puts):
            headers = {"X-Voltlock-Client-Id": new_client_id(), "X-Voltlock-Request-Number": "1"}
            # The client's own TCP connection crosses the lossy link too: one dropped (seen once
            # in many runs) leaves the put's outcome unknown, and the client sends it again with
            # the same pair on a new connection, as an SDK does; the version check below still
            # proves each put applied once.
            for attempt in range(3):
                try:
                    r = client(f, "PUT", f"/v1/kv/{key}", {"value": str(i)}, headers)
                    break
                except (OSError, http.client.HTTPException):
                    if attempt == 2:
                        raise
            assert r.status == 200, r
    finally:
        cell.heal()
        client.close()
    after = api_counters(cell, f)
    counters = ("forwarded_as_requests", "request_retransmits", "request_fallbacks")
    travelled = sum(after[k] - before[k] for k in ("forwarded_as_requests", "request_fallbacks"))
    assert travelled >= puts, {k: (before[k], after[k]) for k in counters}
    assert after["request_retransmits"] > before["request_retransmits"], (
        {k: (before[k], after[k]) for k in counters},
        call(cell, f, "GET", "/v1/status")["counters"])
    got = call(cell, cell.wait_for_leader(), "GET", f"/v1/kv/{key}")
    assert got["version"] == puts and got["value"] == str(puts - 1), got


def test_keepalives_through_a_lossy_follower_keep_the_session(cell):
    """A third of what reaches the follower is lost (its Replies among it): each keepalive is
    sent again until the leader's answer comes, and the session outlives its TTL many times."""
    leader = cell.wait_for_leader()
    f = followers(cell)[0]
    # Long enough for the rare keepalive whose four Requests all went unanswered (1.5 s) and
    # that then went over HTTP on the same lossy link (TCP retransmits).
    ttl_ms = 6_000
    s = call(cell, leader, "POST", "/v1/sessions", {"ttl_ms": ttl_ms})["session"]
    before = api_counters(cell, f)
    # As an SDK does, a keepalive the link holds up for a third of the TTL is sent again on a
    # new connection: waiting on one, a lost SYN-ACK or two (1 s, then 2 s more) at the
    # follower's fallback could outlast the lease.
    client = Client(cell, timeout=ttl_ms / 3000)
    kept = 0
    cell.netem(f, "loss 33%", direction="in")
    try:
        end = time.monotonic() + 2.5 * ttl_ms / 1000
        while time.monotonic() < end:
            lease_end = time.monotonic() + ttl_ms / 1000
            while True:
                try:
                    r = client(f, "POST", f"/v1/sessions/{s}:keepalive")
                    break
                except (OSError, http.client.HTTPException):
                    assert time.monotonic() < lease_end, "no keepalive answered within the TTL"
            assert r.status == 200 and r["session"] == s, r
            kept += 1
            time.sleep(0.3)
    finally:
        cell.heal()
        client.close()
    after = api_counters(cell, f)
    counters = ("keepalives_as_requests", "request_retransmits", "request_fallbacks")
    moved = {k: after[k] - before[k] for k in counters}
    # Four Replies in a row lost (1 in 81) sends a keepalive over HTTP: rare, not never. A
    # keepalive the client gave up on and sent again may be counted too.
    assert moved["keepalives_as_requests"] + moved["request_fallbacks"] >= kept, moved
    assert moved["keepalives_as_requests"] >= kept * 3 // 4, moved
    assert moved["request_retransmits"] > 0, moved
    alive = call(cell, cell.wait_for_leader(), "GET", f"/v1/sessions/{s}")
    assert alive.status == 200 and alive["session"] == s, alive
    call(cell, cell.leader, "DELETE", f"/v1/sessions/{s}")


def check_reads_see_acknowledged_writes(cell, leader: int, f: int, rounds: int) -> None:
    s = call(cell, leader, "POST", "/v1/sessions", {"ttl_ms": 30_000})["session"]
    lock = f"/v1/locks/{fresh('rd-lock')}"
    for i in range(rounds):
        # Acknowledged at the leader, then read at once at the follower.
        if i % 2 == 0:
            assert call(cell, leader, "POST", f"{lock}:acquire", {"session": s})["granted"]
            got = call(cell, f, "GET", lock)
            assert got.status == 200 and [h["session"] for h in got["holders"]] == [s], got
        else:
            call(cell, leader, "POST", f"{lock}:release", {"session": s})
            got = call(cell, f, "GET", lock)
            assert got.status == 200 and got["holders"] == [], got
        barrier = f"/v1/barriers/{fresh('rd-barrier')}"
        # Passed at once (a count of one), and a member until it leaves.
        r = call(cell, leader, "POST", f"{barrier}:enter", {"session": s, "count": 1})
        assert r.status == 200 and r["passed"] is True, r
        got = call(cell, f, "GET", barrier)
        assert got.status == 200 and [m["session"] for m in got["members"]] == [s], got
        listed = call(cell, f, "GET", "/v1/barriers")
        assert any(b["name"] == barrier.rsplit("/", 1)[1] for b in listed["barriers"]), listed
        call(cell, leader, "POST", f"{barrier}:leave", {"session": s})
        t = call(cell, leader, "POST", "/v1/sessions", {"ttl_ms": 30_000})["session"]
        got = call(cell, f, "GET", f"/v1/sessions/{t}")
        assert got.status == 200 and got["session"] == t, got
        assert any(x["session"] == t for x in call(cell, f, "GET", "/v1/sessions")["sessions"])
        call(cell, leader, "DELETE", f"/v1/sessions/{t}")
    call(cell, leader, "DELETE", f"/v1/sessions/{s}")


def test_a_read_at_a_follower_sees_every_write_acknowledged_before_it(cell):
    leader = cell.wait_for_leader()
    f = followers(cell)[0]
    before = api_counters(cell, f)
    check_reads_see_acknowledged_writes(cell, leader, f, 20)
    # The follower slowed: what reaches it (Prepares, Commits, Replies) 30 ms late, so it
    # applies the leader's writes well after the leader acknowledged them.
    cell.netem(f, "delay 30ms", direction="in")
    try:
        check_reads_see_acknowledged_writes(cell, leader, f, 20)
    finally:
        cell.heal()
    after = api_counters(cell, f)
    # A lock read and two barrier reads a round (sessions are read at the leader).
    assert after["reads_at_commit_point"] - before["reads_at_commit_point"] >= 40 * 3
    assert after["request_fallbacks"] == before["request_fallbacks"]


def test_a_read_at_a_follower_cut_off_from_the_leader_is_never_stale(cell):
    leader = cell.wait_for_leader()
    f = followers(cell)[0]
    s = call(cell, leader, "POST", "/v1/sessions", {"ttl_ms": 60_000})["session"]
    lock = f"/v1/locks/{fresh('rd-cut')}"
    assert call(cell, f, "GET", lock)["holders"] == []
    cell.partition(f, peers=[r for r in range(3) if r != f])
    try:
        # Acknowledged by the leader and the other follower; the cut-off follower never hears.
        assert call(cell, leader, "POST", f"{lock}:acquire", {"session": s})["granted"]
        got = call(cell, f, "GET", lock, timeout=90)
        assert got.status == 503, got  # no quorum to confirm a commit point: no answer
        stale = call(cell, f, "GET", f"{lock}?stale=true")
        assert stale.status == 200 and stale["holders"] == [], stale  # what it would have said
    finally:
        cell.heal()
    cell.wait_for_leader()
    got = call(cell, f, "GET", lock, timeout=30)
    assert got.status == 200 and [h["session"] for h in got["holders"]] == [s], got
    call(cell, cell.leader, "DELETE", f"/v1/sessions/{s}")


def test_a_leader_killed_while_ops_are_forwarded_applies_each_op_once(cell):
    """Workers at both followers put and lock, each op retried with its identity until it is
    answered; the leader is killed -9 in the middle. Each key's version counts its puts; a lock
    acquired again by a retry after its release would be left held."""
    old_leader = cell.wait_for_leader()
    workers = followers(cell)
    stop_at = time.monotonic() + 60
    killed = threading.Event()
    results = {}
    errors = []

    def work(replica: int, w: int):
        client = Client(cell, timeout=20)
        client_id, number = new_client_id(), 0
        key, lock = fresh(f"fwd-kill-{w}"), f"/v1/locks/{fresh(f'fwd-kill-{w}')}"

        def op(method, path, body, expect=200):
            nonlocal number
            number += 1
            headers = {"X-Voltlock-Client-Id": client_id,
                       "X-Voltlock-Request-Number": str(number)}
            while time.monotonic() < stop_at:
                try:
                    r = client(replica, method, path, body, headers)
                except OSError:
                    time.sleep(0.05)
                    continue
                if r.status == 503:
                    time.sleep(0.05)
                    continue  # no leader yet: the same identity again
                assert r.status == expect, (method, path, r)
                return r
            raise AssertionError(f"{method} {path} unanswered")

        try:
            s = op("POST", "/v1/sessions", {"ttl_ms": 60_000}, 201)["session"]
            cycles = puts = after_kill = 0
            while after_kill < 5:  # across the failover, and a few after it
                if killed.is_set():
                    after_kill += 1
                assert op("PUT", f"/v1/kv/{key}", {"value": str(puts)})["version"] == puts + 1
                puts += 1
                assert op("POST", f"{lock}:acquire", {"session": s})["granted"] is True
                op("POST", f"{lock}:release", {"session": s})
                cycles += 1
            results[w] = (key, lock, puts, cycles)
        except Exception as e:  # reported below, with the others
            errors.append(e)
        finally:
            client.close()

    threads = [threading.Thread(target=work, args=(replica, w))
               for w, replica in enumerate(workers * 2)]
    for t in threads:
        t.start()
    try:
        time.sleep(1)  # some ops forwarded before the kill
        cell.kill(old_leader)
        killed.set()
        for t in threads:
            t.join(timeout=90)
        assert not errors, errors
        assert len(results) == len(threads)
        new_leader = cell.wait_for_leader()
        assert new_leader != old_leader
        for key, lock, puts, cycles in results.values():
            assert call(cell, new_leader, "GET", f"/v1/kv/{key}")["version"] == puts
            state = call(cell, new_leader, "GET", lock)
            assert state["holders"] == [] and state["waiters"] == [], state
        retransmits = sum(api_counters(cell, r)["request_retransmits"] for r in workers)
        assert retransmits > 0
    finally:
        killed.set()
        cell.start(old_leader)
