"""Issue 11's five scenarios, run against real cells as the issue writes them: the promises a lock
service makes (one holder at a time; nothing acknowledged is lost; the cell serves again) at
the edges of leases, restarts and partitions.

1. A deposed leader, cut off from its peers while a client keeps sending it keepalives, must not
   let that client's lease (counted by docs/api.md's rule: from the send time of the last
   answered keepalive, one TTL) overlap the new leader's grant of the same lock to another.
2. Snapshot durability, snapshots every 20 ops, Electrode on where the kernel allows: with r0
   down, 100 writes acknowledged by r1 and r2; then r2 killed and r0 and r2 restarted. r1 never
   stopped and holds everything: no acknowledged write may be lost.
3. A graceful stop of every replica (SIGTERM) and a start of them all loses nothing.
4. Durability sync, 6,000 writes after the last snapshot, every replica killed at once: the cell
   comes back with every write. Run with 30,000 writes: with a log that long the followers fetch
   it from the new leader for many view-change timeouts, which used to depose every leader in
   turn (docs/fault-testing.md, "whole-cell restarts with long logs").
5. Traffic towards the leader dropped (one-way partition): the cell serves again within 5 s
   (the goal is 2 s after the failure detection timeouts).
6. (Found by the fault suite's lease check, docs/fault-testing.md.) A release whose answer the
   client never got lands when a partition heals, after the client acquired the lock again: it
   ends that grant. Retried with the same X-Voltlock-Client-Id and -Request-Number until
   answered (docs/api.md, "Sessions and leases"), the late copy changes nothing.
7. A leader stopped (SIGSTOP) just as a keepalive reaches it, and continued once the new leader
   has given the lock away, answers nothing that extends the client's lease past that grant: it
   checks its leader lease by the clock at the moment it answers (docs/leases.md, rule 2), also
   for a keepalive sent to it after the grant.
8. The leader's wall clock stepped an hour forward, then back (`date -s`, NTP's `makestep`):
   a session kept alive is not expired, and a wait ends at its deadline, not an hour later.
9. Replicas started with their wall clocks an hour slow (a clock not yet set at boot), one of
   which then leads: a wait and a lock-delay still end on time, not an hour later.
10. (The "left out" of issue 11's operations.md.) A replica whose disk was lost, started as
   systemd starts it (no --recover), with the one other replica that holds the writes stopped:
   it must not start a new cell with the replica that missed them, and once that one is back,
   every write is there. Before, it started fresh and the two of them lost every write.
11. (An operator's finding.) The same replica restarted while it still waited to recover holds
   nothing still: before, it restarted the cell with a crashed replica's older snapshot while
   the replica holding the writes was stopped, and they were lost.
12. (A tester's finding.) Traffic towards a follower dropped: before, it started a view change
   the others joined, then another at growing intervals while the cut lasted, each a pause in
   writes. It only asks the others now (docs/replication.md, "Failure detection"): the leader
   keeps its view, writes go on, and healed, the follower catches up in that view.
"""
import http.client
import json
import os
import shutil
import signal
import threading
import time

import pytest

import steppable_clocks
from api import Client, call, connect
from cell import Cell, unique_name
from cellrig.util import ProcessRef
from replication import wait_until

pytestmark = [pytest.mark.usefixtures("root"), pytest.mark.voltlockd]

SERVE_AGAIN_BOUND_S = 5.0


def attempt(client: Client, replica: int, method: str, path: str, body=None):
    """One request; None when the connection failed or timed out (the outcome is unknown)."""
    try:
        return client(replica, method, path, body)
    except (OSError, http.client.HTTPException):
        return None


def until_ok(client: Client, replicas: list, method: str, path: str, body=None,
             timeout: float = 30.0, ok=(200, 201)):
    """Sends the request, to each replica in turn, until one answers with a status in `ok`.
    Only for requests that may safely apply twice (a put of the same value, a read)."""
    deadline = time.monotonic() + timeout
    i, last = 0, None
    while time.monotonic() < deadline:
        last = attempt(client, replicas[i % len(replicas)], method, path, body)
        if last is not None and last.status in ok:
            return last
        i += 1
        time.sleep(0.05)
    raise AssertionError(f"{method} {path}: no answer in {ok} within {timeout:g} s; last {last}")


def value_of(key: str, size: int = 0) -> str:
    """What write_keys writes to key: v-<key>, padded with dots to `size` characters."""
    return f"v-{key}".ljust(size, ".")


def write_keys(cell: Cell, replicas: list, keys: list, workers: int = 1,
               value_size: int = 0) -> None:
    """Writes value_of(key) to every key, each acknowledged before this returns; `workers`
    clients at once, each on its own kept-alive connections (the leader batches their writes)."""
    errors = []

    def writer(worker: int):
        client = Client(cell, timeout=10.0)
        try:
            for key in keys[worker::workers]:
                until_ok(client, replicas, "PUT", f"/v1/kv/{key}",
                         {"value": value_of(key, value_size)})
        except BaseException as e:  # noqa: BLE001: reported below
            errors.append(e)
        finally:
            client.close()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def listed_values(cell: Cell, prefix: str, timeout: float = 60.0) -> dict:
    """Every key under prefix with its value, read through the log page by page."""
    client = Client(cell, timeout=10.0)
    found, after = {}, None
    try:
        while True:
            query = "prefix=true" + (f"&after={after}" if after else "")
            page = until_ok(client, list(range(cell.replica_count)), "GET",
                            f"/v1/kv/{prefix}?{query}", timeout=timeout)
            found.update((kv["key"], kv["value"]) for kv in page.body["kvs"])
            if not page.body["more"]:
                return found
            after = page.body["next_after"]
    finally:
        client.close()


def missing_keys(cell: Cell, replicas: list, keys: list, timeout: float = 60.0) -> list:
    """Reads every key through the log (waiting for the cell to serve); the ones absent or with
    another value than write_keys wrote."""
    client = Client(cell, timeout=5.0)
    missing = []
    try:
        for key in keys:
            r = until_ok(client, replicas, "GET", f"/v1/kv/{key}", timeout=timeout, ok=(200, 404))
            if r.status != 200 or r.body["value"] != value_of(key):
                missing.append(key)
    finally:
        client.close()
    return missing


# ---- 1. Two holders of one lock through a deposed leader ---------------------------------------

TTL_MS = 4000


def lease_overlap_through_a_deposed_leader(cell: Cell, tag: str) -> tuple:
    """Runs the scenario once; returns (A's lease end, B's grant), seconds on one clock, and
    whether A's fenced write was refused after B's grant."""
    leader = cell.wait_for_leader()
    others = [i for i in range(cell.replica_count) if i != leader]
    a = Client(cell, timeout=1.0)
    b = Client(cell, timeout=5.0)
    lock = f"edge1/{tag}"
    try:
        session_a = until_ok(a, [leader], "POST", "/v1/sessions",
                             {"ttl_ms": TTL_MS, "lock_delay_ms": 0})["session"]
        grant_a = until_ok(a, [leader], "POST", f"/v1/locks/{lock}:acquire",
                           {"session": session_a})
        assert grant_a.body["granted"], grant_a
        # Keepalives to the leader only, until one is replicated (the leader replicates one when
        # the machine's copy of the lease lags by half a TTL); then cut the leader off.
        deadline = time.monotonic() + 3 * TTL_MS / 1000
        while True:
            assert time.monotonic() < deadline, "no keepalive was replicated"
            sent = time.monotonic()
            r = attempt(a, leader, "POST", f"/v1/sessions/{session_a}:keepalive")
            assert r is not None and r.status == 200, r
            lease_from = sent   # the documented rule: one TTL from the send time
            if r.body["replicated"]:
                break
            time.sleep(0.1)
        cell.partition(leader, peers=others)

        granted = {}

        def client_b():
            # B's own lease outlasts its wait; it sends no keepalives.
            session_b = until_ok(b, others, "POST", "/v1/sessions",
                                 {"ttl_ms": 60000, "lock_delay_ms": 0})["session"]
            r = until_ok(b, others, "POST", f"/v1/locks/{lock}:acquire",
                         {"session": session_b, "wait_ms": 20000}, timeout=40)
            granted["at"] = time.monotonic()
            granted["sequencer"] = r.body["sequencer"]
        thread = threading.Thread(target=client_b)
        thread.start()
        while thread.is_alive():         # A goes on as a client does: keepalives to its leader
            sent = time.monotonic()
            r = attempt(a, leader, "POST", f"/v1/sessions/{session_a}:keepalive")
            if r is not None and r.status == 200 and "at" not in granted:
                lease_from = max(lease_from, sent)
            time.sleep(0.1)
        thread.join()
        assert "at" in granted, "B was never granted the lock"
        fenced = until_ok(b, others, "PUT", f"/v1/kv/{lock}",
                          {"value": "from A", "sequencer": grant_a.body["sequencer"]},
                          ok=(200, 409))
        return lease_from + TTL_MS / 1000, granted["at"], fenced
    finally:
        cell.heal()
        a.close()
        b.close()


@pytest.mark.slow
def test_a_deposed_leader_never_lets_a_lease_overlap_the_next_holders_grant():
    """The issue saw the overlap in 5 of 6 tries: two tries, each on its own cell."""
    for try_number in range(2):
        with Cell(replicas=3, name=unique_name("se")) as cell:
            lease_end, grant, fenced = lease_overlap_through_a_deposed_leader(
                cell, f"t{try_number}")
        assert fenced.status == 409 and fenced.body["code"] == "sequencer_invalid", fenced
        assert grant >= lease_end, (
            f"try {try_number + 1}: A's lease runs until {lease_end:.3f} by the documented "
            f"rule, B was granted the lock at {grant:.3f}: {lease_end - grant:.2f} s of two "
            "holders")


# ---- 2. f+1 replicas restarted while the one that holds everything lives on --------------------

@pytest.mark.slow
def test_a_restart_of_two_replicas_never_overwrites_the_survivors_committed_state():
    """As the issue ran it (it lost writes in 1 of 2 tries with Electrode on): two tries."""
    for try_number in range(2):
        with Cell(replicas=3, name=unique_name("se"), electrode="on",
                  snapshot_every_ops=20) as cell:
            keys = [f"edge2/{try_number}/{i:03d}" for i in range(130)]
            write_keys(cell, [0, 1, 2], keys[:30])
            cell.kill(0)
            write_keys(cell, [1, 2], keys[30:])
            cell.kill(2)
            cell.start(0, 2, timeout=30)
            lost = missing_keys(cell, [1, 0, 2], keys)
            assert not lost, (f"try {try_number + 1}: {len(lost)} of 130 acknowledged writes "
                              f"lost after r0 and r2 restarted next to r1, e.g. {lost[:5]}")


# ---- 3. A graceful stop of the whole cell -----------------------------------------------------

@pytest.mark.slow
def test_a_graceful_stop_and_start_of_every_replica_loses_nothing():
    with Cell(replicas=3, name=unique_name("se")) as cell:
        keys = [f"edge3/{i:02d}" for i in range(20)]
        write_keys(cell, [cell.leader], keys)
        cell.stop("all")
        cell.start("all", timeout=30)
        lost = missing_keys(cell, [0, 1, 2], keys)
        assert not lost, f"{len(lost)} of 20 keys lost by stop all + start all: {lost[:5]}"


# ---- 4. A power cut in sync mode with a log longer than the pipeline --------------------------

# Found by the fault suite: 24,000-39,000 entries after the last snapshot made every new leader
# step down within 0.5 s, for ever (docs/fault-testing.md): the followers fetch the log from it
# a datagram at a time. Values of 400 bytes (3 entries a datagram) make 30,000 entries a fetch
# of ~10,000 round trips, seconds even on an idle machine, as the fault suite's were under load.
LONG_LOG_WRITES = 30_000
LONG_LOG_VALUE_BYTES = 400
# Measured 3-5 s on a loaded 2-core VM (docs/fault-testing.md); before the fix, never.
LONG_LOG_SERVE_BOUND_S = 30.0


@pytest.mark.slow
def test_a_power_cut_in_sync_mode_with_a_long_log_serves_again_with_every_write():
    count = LONG_LOG_WRITES
    # No snapshot while it writes: every entry is after the last one (op 0) at the power cut.
    with Cell(replicas=3, name=unique_name("se"), durability="sync",
              snapshot_every_ops=10 * count, snapshot_every_seconds=3600) as cell:
        keys = [f"edge4/{i:05d}" for i in range(count)]
        write_keys(cell, [cell.leader], keys, workers=32, value_size=LONG_LOG_VALUE_BYTES)
        cell.kill("all")
        cell.start("all", wait=False)
        started = time.monotonic()
        client = Client(cell, timeout=5.0)
        try:
            until_ok(client, [0, 1, 2], "PUT", "/v1/kv/edge4-after", {"value": "x"},
                     timeout=3 * LONG_LOG_SERVE_BOUND_S)
        finally:
            client.close()
        unavailable = time.monotonic() - started
        print(f"power cut with {count} entries after the last snapshot: served again after "
              f"{unavailable:.2f} s")
        found = listed_values(cell, "edge4/")
        lost = [key for key in keys if found.get(key) != value_of(key, LONG_LOG_VALUE_BYTES)]
        assert not lost, f"{len(lost)} of {count} acknowledged writes lost, e.g. {lost[:5]}"
        assert unavailable <= LONG_LOG_SERVE_BOUND_S, (
            f"after a power cut with {count} log entries after the last snapshot the cell "
            f"served nothing for {unavailable:.1f} s (bound {LONG_LOG_SERVE_BOUND_S:g} s)")


# ---- 5. A one-way partition towards the leader ------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("electrode", ["off", "on"])
def test_the_cell_serves_again_soon_after_traffic_towards_the_leader_is_dropped(electrode):
    with Cell(replicas=3, name=unique_name("se"), electrode=electrode) as cell:
        leader = cell.leader
        followers = [i for i in range(3) if i != leader]
        client = Client(cell, timeout=1.0)
        assert call(cell, followers[0], "PUT", "/v1/kv/edge5/before", {"value": "x"}).status == 200
        try:
            cell.partition(leader, direction="in")
            cut = time.monotonic()
            served = until_ok(client, followers, "PUT", "/v1/kv/edge5/during", {"value": "y"},
                              timeout=20)
            unavailable = time.monotonic() - cut
        finally:
            cell.heal()
            client.close()
        assert served.status == 200
        assert unavailable <= SERVE_AGAIN_BOUND_S, (
            f"with traffic towards the leader dropped the cell served nothing for "
            f"{unavailable:.1f} s (bound {SERVE_AGAIN_BOUND_S:g} s)")


# ---- 6. A release that lands late --------------------------------------------------------------

def late_release(cell: Cell, lock: str, retry: bool) -> dict:
    """A holds `lock`, B waits for it at the leader. A sends a release to a follower that
    nothing reaches (on a connection made before the cut, which A leaves open) and has no
    answer. With
    `retry`, A sends the same request (same identity) to the leader until it is answered, waits
    for B to have the lock and give it back, and acquires it again with its next request
    number; without, A just acquires again ("granted", held already). Then the partition heals
    and the late copy of the release reaches the follower. Returns B's grant (or None), A's
    last grant, the late copy's answer and the holders after it."""
    leader = cell.wait_for_leader()
    follower = next(i for i in range(cell.replica_count) if i != leader)
    a, b = Client(cell, timeout=5.0), Client(cell, timeout=40.0)
    identity = {"X-Voltlock-Client-Id": str(700_000 + (1 if retry else 0)),
                "X-Voltlock-Request-Number": "1"}
    outcome: dict = {"b": None}
    try:
        session_a = a(leader, "POST", "/v1/sessions", {"ttl_ms": 60000})["session"]
        session_b = a(leader, "POST", "/v1/sessions", {"ttl_ms": 60000})["session"]
        first = a(leader, "POST", f"/v1/locks/{lock}:acquire", {"session": session_a})
        assert first.status == 200, first

        def client_b():
            r = b(leader, "POST", f"/v1/locks/{lock}:acquire",
                  {"session": session_b, "wait_ms": 30000})
            outcome["b"] = r.body.get("sequencer")
            if not retry:
                return
            assert b(leader, "POST", f"/v1/locks/{lock}:release",
                     {"session": session_b}).status == 200
        waiter = threading.Thread(target=client_b)
        waiter.start()
        cut = connect(cell, follower, 60.0)       # made before the cut; A gets no answer on it
        cell.partition(follower, direction="in")
        release = {"session": session_a}
        cut.request("POST", f"/v1/locks/{lock}:release", body=json.dumps(release),
                    headers={"Content-Type": "application/json", **(identity if retry else {})})
        if retry:
            answered = a(leader, "POST", f"/v1/locks/{lock}:release", release, headers=identity)
            assert answered.status == 200 and answered.body["released"], answered
            waiter.join(timeout=40)
            identity["X-Voltlock-Request-Number"] = "2"
        again = a(leader, "POST", f"/v1/locks/{lock}:acquire",
                  {"session": session_a, "wait_ms": 10000}, headers=identity if retry else None)
        assert again.status == 200 and again.body["granted"], again
        outcome["a"] = again.body["sequencer"]
    finally:
        cell.heal()
    try:
        # The late copy arrives when TCP sends it again, and is answered on that connection.
        late = cut.getresponse()
        outcome["late"] = (late.status, json.loads(late.read().decode()))
        waiter.join(timeout=40)
        outcome["holders"] = a(leader, "GET", f"/v1/locks/{lock}").body["holders"]
        return outcome
    finally:
        cut.close()
        a.close()
        b.close()


@pytest.mark.slow
def test_a_release_that_lands_late_ends_only_the_grant_it_was_meant_for():
    with Cell(replicas=3, name=unique_name("se")) as cell:
        # Unresolved, the late release ends the grant A took again: A must not count on it.
        hazard = late_release(cell, "edge6/unresolved", retry=False)
        assert hazard["late"][0] == 200 and hazard["late"][1]["released"], hazard
        assert hazard["b"] is not None and hazard["b"]["generation"] > hazard["a"]["generation"], (
            "the late release did not pass the lock on", hazard)
        # Resolved by the retry with the same identity, the late copy is a duplicate.
        resolved = late_release(cell, "edge6/resolved", retry=True)
        assert [h["generation"] for h in resolved["holders"]] == [resolved["a"]["generation"]], (
            "the late copy of a release that was retried and answered ended a later grant",
            resolved)


# ---- 7. A keepalive that reaches a leader as it is stopped -------------------------------------

def daemon(cell: Cell, replica: int) -> ProcessRef:
    """The replica's daemon, from the rig's record (checked against its start time)."""
    with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
        ref = ProcessRef.from_json(json.load(f)["replicas"][replica].get("process"))
    assert ref is not None and ref.alive(), f"r{replica} is not running"
    return ref


def keepalive_into_a_pause(cell: Cell, tag: str) -> tuple:
    """A holds a lock and keeps its session alive at the leader. One keepalive is written to
    the leader and the leader stopped at once, with the request in its socket or half handled.
    B waits for the lock at the others; once B has it, a second keepalive is written to the
    stopped leader, which then continues and handles both. Returns A's lease end by the
    documented rule, B's grant time, and the two answers (None: no answer)."""
    leader = cell.wait_for_leader()
    others = [i for i in range(cell.replica_count) if i != leader]
    a, b = Client(cell, timeout=5.0), Client(cell, timeout=3.0)
    lock = f"edge7/{tag}"
    paused = daemon(cell, leader)
    stopped = False
    conns = []

    def send_keepalive() -> float:
        conn = connect(cell, leader, 60.0)
        conns.append(conn)
        sent = time.monotonic()
        conn.request("POST", f"/v1/sessions/{session_a}:keepalive")
        return sent

    def answer_of(conn):
        try:
            response = conn.getresponse()
            return response.status, json.loads(response.read().decode())
        except (OSError, http.client.HTTPException):
            return None

    try:
        session_a = until_ok(a, [leader], "POST", "/v1/sessions",
                             {"ttl_ms": TTL_MS, "lock_delay_ms": 0})["session"]
        assert until_ok(a, [leader], "POST", f"/v1/locks/{lock}:acquire",
                        {"session": session_a}).body["granted"]
        sent = time.monotonic()
        assert a(leader, "POST", f"/v1/sessions/{session_a}:keepalive").status == 200
        lease_from = sent

        sends = [send_keepalive()]
        os.kill(paused.pid, signal.SIGSTOP)
        stopped = True
        session_b = until_ok(b, others, "POST", "/v1/sessions",
                             {"ttl_ms": 60000, "lock_delay_ms": 0})["session"]
        until_ok(b, others, "POST", f"/v1/locks/{lock}:acquire",
                 {"session": session_b, "wait_ms": 2000}, timeout=40)
        granted = time.monotonic()
        # Sent after the lock was given away: only a leader that judged its lease by a clock
        # stopped with it (the time before the pause) could answer it.
        sends.append(send_keepalive())
        os.kill(paused.pid, signal.SIGCONT)
        stopped = False
        answers = [answer_of(conn) for conn in conns]
        for sent, answer in zip(sends, answers):
            if answer is not None and answer[0] == 200:
                lease_from = max(lease_from, sent)
        return lease_from + TTL_MS / 1000, granted, answers
    finally:
        if stopped:
            os.kill(paused.pid, signal.SIGCONT)
        for conn in conns:
            conn.close()
        a.close()
        b.close()


@pytest.mark.slow
def test_a_leader_stopped_as_a_keepalive_reaches_it_never_extends_a_lease_past_the_next_grant():
    """Two tries: the keepalive is read before the stop in some, after it in others."""
    for try_number in range(2):
        with Cell(replicas=3, name=unique_name("se")) as cell:
            lease_end, grant, answer = keepalive_into_a_pause(cell, f"t{try_number}")
        assert grant >= lease_end, (
            f"try {try_number + 1}: the paused leader answered {answer}; A's lease runs until "
            f"{lease_end:.3f} by the documented rule, B was granted the lock at {grant:.3f}: "
            f"{lease_end - grant:.2f} s of two holders")


# ---- 8. The leader's wall clock stepped ---------------------------------------------------------

def test_a_stepped_clock_on_the_leader_expires_no_session_and_holds_no_wait(voltlockd):
    if not steppable_clocks.available():
        pytest.skip(f"no {steppable_clocks.LIBFAKETIME} (scripts/install-deps installs it)")
    clocks = steppable_clocks.SteppableClocks(voltlockd)
    ttl_s = 2.0
    with Cell(replicas=3, name=unique_name("sc"), voltlockd=clocks.voltlockd) as cell:
        leader = cell.wait_for_leader()
        a, b = Client(cell, timeout=10.0), Client(cell, timeout=10.0)
        try:
            holder = a(leader, "POST", "/v1/sessions", {"ttl_ms": int(ttl_s * 1000)})
            session_a = holder.body["session"]
            assert a(leader, "POST", "/v1/locks/clock:acquire",
                     {"session": session_a}).body["granted"]
            session_b = b(leader, "POST", "/v1/sessions", {"ttl_ms": 60000}).body["session"]

            def keep_a_alive_for(seconds: float) -> None:
                """Keepalives every quarter TTL, each answered 200, for `seconds`."""
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    kept = a(leader, "POST", f"/v1/sessions/{session_a}:keepalive")
                    assert kept.status == 200, f"A's keepalive after the clock step: {kept}"
                    time.sleep(ttl_s / 4)

            def b_waits_out_its_deadline() -> None:
                sent = time.monotonic()
                waited = b(leader, "POST", "/v1/locks/clock:acquire",
                           {"session": session_b, "wait_ms": 1000})
                assert waited.status == 408, f"B's wait for A's lock: {waited}"
                assert time.monotonic() - sent < 5.0, "B's 1 s wait ended late"

            for offset_s in (3600, 0):  # an hour forward, then back
                clocks.step(leader, offset_s)
                keep_a_alive_for(3 * ttl_s)  # past the second the step takes to be read
                b_waits_out_its_deadline()
            lock = a(leader, "GET", "/v1/locks/clock").body
            assert [h["session"] for h in lock["holders"]] == [session_a], lock
        finally:
            a.close()
            b.close()


# ---- 9. A leader started with its wall clock an hour slow ---------------------------------------

def test_a_leader_started_with_a_slow_clock_ends_waits_and_lock_delays_on_time(voltlockd):
    """Waits and lock-delays end by the cell's time, the largest stamp on an op applied. A leader
    that stamped ops by its own clock, an hour behind that time, held the cell's time still: no
    wait and no lock-delay ended for an hour. Now each replica keeps the cell's time moving from
    what it has applied, and stamps by that."""
    if not steppable_clocks.available():
        pytest.skip(f"no {steppable_clocks.LIBFAKETIME} (scripts/install-deps installs it)")
    clocks = steppable_clocks.SteppableClocks(voltlockd)
    with Cell(replicas=3, name=unique_name("sl"), voltlockd=clocks.voltlockd) as cell:
        first = cell.wait_for_leader()
        slow = [r for r in range(3) if r != first]
        for r in slow:  # restarted an hour slow: each reads its wall clock as it starts
            clocks.step(r, -3600)
            cell.kill(r)
            cell.start(r)
        client = Client(cell, timeout=20.0)
        try:
            until_ok(client, [first], "PUT", "/v1/kv/slow/mark", {"value": "x"})
            op = client(first, "GET", "/v1/status").body["op"]
            for r in slow:  # each applied an op the leader stamped, before it may lead
                deadline = time.monotonic() + 10.0
                while client(r, "GET", "/v1/status").body["commit"] < op:
                    assert time.monotonic() < deadline, f"r{r} did not catch up to op {op}"
                    time.sleep(0.05)
                deadline = time.monotonic() + 5.0  # it follows the cell's time at its next tick
                while True:
                    api = client(r, "GET", "/v1/cluster").body["api"]
                    if api["cell_clock_ahead_ms"] > 3_500_000:
                        break
                    assert time.monotonic() < deadline, f"r{r}'s cell clock: {api}"
                    time.sleep(0.05)
            cell.kill(first)
            leader = cell.wait_for_leader()
            assert leader in slow

            holder = until_ok(client, [leader], "POST", "/v1/sessions",
                              {"ttl_ms": 1000, "lock_delay_ms": 1000}).body["session"]
            waiter = client(leader, "POST", "/v1/sessions", {"ttl_ms": 60000}).body["session"]
            assert client(leader, "POST", "/v1/locks/slow/lock:acquire",
                          {"session": holder}).body["granted"]
            sent = time.monotonic()
            waited = client(leader, "POST", "/v1/locks/slow/lock:acquire",
                            {"session": waiter, "wait_ms": 1000})
            assert waited.status == 408, f"the waiter's 1 s wait: {waited}"
            assert time.monotonic() - sent < 5.0, "a 1 s wait ended late"
            # The holder's session runs out (no keepalives); its lock is granted to the waiter
            # once the lock-delay after the expiry ends.
            sent = time.monotonic()
            granted = client(leader, "POST", "/v1/locks/slow/lock:acquire",
                             {"session": waiter, "wait_ms": 15000})
            assert granted.status == 200 and granted.body["granted"], granted
            assert time.monotonic() - sent < 8.0, "the lock-delay ended late"
        finally:
            client.close()


# ---- 10. A lost disk, started without --recover ---------------------------------------------

@pytest.mark.parametrize("leader_stepped_down", [False, True])
def test_a_replica_on_a_lost_disk_started_without_recover_never_starts_the_cell_anew(
        leader_stepped_down):
    """The leader stops at once, or once it stepped down for hearing no quorum. Stopped in that
    view change, it restarted and waited for a later view, which the lagging replica, alone in
    the same view change, never started: no leader for good (a CI run, 2026-11-29)."""
    with Cell(replicas=3, name=unique_name("se")) as cell:
        leader = cell.leader
        lagging, wiped = [i for i in range(3) if i != leader]
        keys = [f"edge10/{i:02d}" for i in range(30)]
        cell.partition(lagging)
        write_keys(cell, [leader], keys)  # each acknowledged by the leader and `wiped` alone
        cell.kill(wiped)
        shutil.rmtree(cell.status()["data_dirs"][wiped])
        if leader_stepped_down:
            wait_until(lambda: cell.status()["replicas"][leader]["status"] == "view_change",
                       timeout=10.0, what=f"r{leader} steps down")
        cell.stop(leader)  # graceful: its data dir keeps everything it acknowledged
        cell.heal()
        cell.start(wiped, recover=False)
        # Only the stopped leader holds the writes: the other two must not serve without it.
        assert_none_serves(cell, [lagging, wiped], seconds=3.0)
        cell.start(leader, timeout=30)
        lost = missing_keys(cell, [0, 1, 2], keys)
        assert not lost, f"{len(lost)} of 30 acknowledged writes lost, e.g. {lost[:5]}"
        counters = cell.status()["replicas"][wiped]["counters"]
        assert counters["bootstraps"] == 0 and counters["recoveries"] == 1, counters


def assert_none_serves(cell: Cell, replicas: list, seconds: float) -> None:
    """None of `replicas` knows a leader (in normal status, and hearing it) within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        states = cell.status()["replicas"]
        serving = [r for r in replicas
                   if isinstance(states[r], dict) and states[r]["leader"] is not None]
        assert not serving, (f"r{serving} in normal status without the leader: "
                             f"{[r if isinstance(r, str) else r['status'] for r in states]}")
        time.sleep(0.2)


def last_stop_line(cell: Cell, replica: int) -> str:
    """The replica's last "stopped at op" log line."""
    with open(os.path.join(cell.endpoints["state_dir"], f"r{replica}", "voltlockd.log")) as log:
        return [line for line in log if ": stopped at op " in line][-1]


def test_a_replica_on_a_lost_disk_restarted_before_it_recovered_still_holds_nothing():
    """As an operator found it (2026-11-29), snapshot durability: one follower crashed, the
    other's disk replaced and its replica started, then restarted (systemd's Restart=, a
    reboot) while it still waited to recover; then the leader stopped for maintenance and the
    crashed follower started. Before, the restarted replica claimed a state of op 0 and restarted
    the cell with the crashed one's older snapshot: the writes after that snapshot were lost."""
    with Cell(replicas=3, name=unique_name("se"), snapshot_every_ops=20) as cell:
        leader = cell.leader
        crashed, wiped = [i for i in range(3) if i != leader]
        keys = [f"edge11/{i:02d}" for i in range(60)]
        write_keys(cell, [leader], keys[:30])
        cell.kill(crashed)
        write_keys(cell, [leader], keys[30:])  # each acknowledged by the leader and `wiped`
        cell.kill(wiped)
        shutil.rmtree(cell.status()["data_dirs"][wiped])
        cell.start(wiped, recover=False)  # the leader alone runs no view: it waits
        cell.stop(wiped)
        assert "its data directory is left as it was" in last_stop_line(cell, wiped)
        cell.start(wiped, recover=False)
        cell.stop(leader)  # graceful: its data dir keeps everything it acknowledged
        assert "what it applied is in its snapshot" in last_stop_line(cell, leader)
        cell.start(crashed)
        assert_none_serves(cell, [crashed, wiped], seconds=3.0)
        cell.start(leader, timeout=30)
        lost = missing_keys(cell, [0, 1, 2], keys)
        assert not lost, f"{len(lost)} of 60 acknowledged writes lost, e.g. {lost[:5]}"


# ---- 12. A follower that hears nothing ---------------------------------------------------------

def test_a_follower_that_hears_nothing_deposes_no_leader():
    with Cell(replicas=3, name=unique_name("se")) as cell:
        leader = cell.leader
        deaf = next(i for i in range(3) if i != leader)
        view = cell.status()["replicas"][leader]["view"]
        client = Client(cell, timeout=2.0)
        failed, slowest, writes = [], 0.0, 0
        try:
            cell.partition(deaf, direction="in")
            deadline = time.monotonic() + 8.0
            while time.monotonic() < deadline:
                sent = time.monotonic()
                answer = attempt(client, leader, "PUT", f"/v1/kv/edge12/{writes % 10}",
                                 {"value": str(writes)})
                slowest = max(slowest, time.monotonic() - sent)
                if answer is None or answer.status != 200:
                    failed.append(answer)
                writes += 1
            states = cell.status()["replicas"]
        finally:
            cell.heal()
            client.close()
        assert not failed and slowest < 1.0, (
            f"{len(failed)} of {writes} writes failed while r{deaf} heard nothing, the slowest "
            f"took {slowest:.2f} s: {failed[:3]}")
        assert (states[leader]["view"], states[leader]["leader"]) == (view, leader), states[leader]
        # It lost its leader, knows none, and asks; it started no view change.
        assert (states[deaf]["status"], states[deaf]["view"], states[deaf]["leader"]) == (
            "normal", view, None), states[deaf]
        deadline = time.monotonic() + 20.0
        while True:
            states = cell.status()["replicas"]
            if (states[deaf]["leader"] == leader and states[deaf]["view"] == view and
                    states[deaf]["commit"] >= states[leader]["commit"] - 10):
                break
            assert time.monotonic() < deadline, f"healed, r{deaf} did not catch up: {states}"
            time.sleep(0.2)
