"""The sync client through failures of a real cell: a leader killed with -9, a replica cut off
with its client, no quorum."""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, List, Tuple

import pytest

import voltlock
from conftest import fresh, replica_index, replica_pid, wait_until


def test_a_leader_kill_keeps_the_session_lock_and_watch_and_applies_each_write_once(cell):
    prefix = fresh("fo") + "/"
    client = voltlock.Client(cell.urls(), timeout=30)
    with client.session(ttl=5) as s:
        seq = s.lock(fresh("lock")).acquire()
        start = client.put(prefix + "start", "0")
        assert client._protocol.router.current().url == cell.urls(cell.leader)[0]
        watch = client.watch(prefix, prefix=True, start_revision=start)
        events: List[voltlock.WatchEvent] = []

        def read() -> None:
            for event in watch:
                events.append(event)
                if event.key == prefix + "end":
                    return
        reader = threading.Thread(target=read)
        reader.start()
        acked: List[Tuple[int, int]] = []
        stop = threading.Event()

        def write() -> None:
            i = 0
            while not stop.is_set():
                acked.append((i, client.put(f"{prefix}w/{i:04}", str(i))))
                i += 1
        writer = threading.Thread(target=write)
        writer.start()
        wait_until(lambda: len(acked) >= 20, 10, "writes before the kill")
        cell.kill(cell.leader)
        at_kill = len(acked)
        wait_until(lambda: len(acked) >= at_kill + 20, 30, "writes after the kill")
        stop.set()
        writer.join(30)
        end = client.put(prefix + "end", "")
        reader.join(30)
        watch.close()
        assert not reader.is_alive(), "the watch did not resume after the leader's death"

        # The session and its lock survived, with the same grant.
        wait_until(lambda: s.state == voltlock.CONNECTED, 10, "the session to be renewed")
        assert seq.valid and client.check(seq)
        holders = client.lock_info(seq.lock)["holders"]
        assert [(h["session"], h["generation"]) for h in holders] == [(s.id, seq.generation)]

        # Every write applied once (version 1), every acknowledged one is there, and the watch
        # saw each change once, in order, with no revision missing in between.
        kvs = {kv.key: kv for kv in client.get_prefix(prefix + "w/")}
        assert all(kv.version == 1 for kv in kvs.values())
        assert {f"{prefix}w/{i:04}" for i, _ in acked} <= set(kvs)
        assert all(kvs[f"{prefix}w/{i:04}"].mod_revision == rev for i, rev in acked)
        watched = [e.key for e in events]
        assert len(watched) == len(set(watched))
        assert watched == [prefix + "start"] + sorted(kvs) + [prefix + "end"]
        assert events[-1].revision == end
        revisions = [e.revision for e in events]
        assert revisions == sorted(revisions)
        writes = sorted(kv.mod_revision for kv in kvs.values())
        assert revisions[1:-1] == writes
    client.close()


def test_a_session_cut_off_is_lost_and_its_sequencer_is_fenced(cell):
    follower = next(r["index"] for r in cell.replicas if r["index"] != cell.leader)
    others = [r["index"] for r in cell.replicas if r["index"] != follower]
    name, key = fresh("lock"), fresh("fenced")
    lost = threading.Event()
    lock_lost: List[voltlock.Sequencer] = []
    cut_off = voltlock.Client(cell.urls(follower), timeout=5)
    outside = voltlock.Client(cell.urls(*others), timeout=15)
    s = cut_off.session(ttl=2, grace=1, on_lost=lambda _: lost.set()).open()
    with pytest.raises(voltlock.SessionExpired):
        with s.lock(name, on_lost=lock_lost.append) as seq:
            cut_off.put(key, "held", sequencer=seq)
            # The client learned the other replicas from the cell: cut it off from all of them.
            for replica in cell.replicas:
                cell.partition(replica["index"], peers=["client"])
            cut_at = time.monotonic()
            wait_until(lambda: not seq.valid, 5, "the sequencer to stop being valid")
            # At most the TTL after the last renewal sent (which was before the cut), with
            # room for a loaded machine's scheduling.
            assert time.monotonic() - cut_at <= 3.5
            wait_until(lost.is_set, 10, "the session to be lost")
    assert lock_lost == [seq] and s.lost.is_set() and s.state == voltlock.LOST
    with pytest.raises(voltlock.SessionExpired):
        s.lock(name).acquire()
    cell.heal()
    # The cell ended the session too (without keepalives its lease ran out): the old
    # sequencer no longer fences anything.
    wait_until(lambda: not outside.check(seq), 10, "the cell to expire the session")
    with pytest.raises(voltlock.SequencerInvalid):
        outside.put(key, "stale writer", sequencer=seq)
    assert outside.get(key).value == "held"
    s.close()
    cut_off.close()
    outside.close()


def test_without_a_quorum_a_call_ends_in_unavailable_in_its_time(cell):
    followers = [r["index"] for r in cell.replicas if r["index"] != cell.leader]
    client = voltlock.Client(cell.urls(), timeout=10)
    key = fresh("noquorum")
    client.put(key, "before")
    cell.kill(*followers)
    started = time.monotonic()
    with pytest.raises(voltlock.Unavailable) as unavailable:
        client.put(key, "during", timeout=2)
    assert time.monotonic() - started < 4
    assert unavailable.value.code == "unavailable" and "may still apply" in str(unavailable.value)
    cell.start(*followers)
    cell.wait_for_leader(timeout=30)
    assert client.get(key).value in ("before", "during")  # the outcome was unknown, not lost
    client.close()


def test_a_stopped_leader_is_left_behind_and_the_session_survives(cell):
    """SIGSTOP, not a kill: the leader's sockets stay open and say nothing, so only timeouts
    move the client on."""
    pid = replica_pid(cell, cell.leader)
    client = voltlock.Client(cell.urls(), timeout=20)
    key = fresh("stopped")
    with client.session(ttl=3) as s:
        seq = s.lock(fresh("lock")).acquire()
        client.put(key, "before", sequencer=seq)
        cell.harmed = True
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            client.put(key, "during", sequencer=seq)
            # The stopped leader is left after attempt_timeout (3 s), then a view change.
            assert time.monotonic() - started < 8
            wait_until(lambda: s.state == voltlock.CONNECTED and seq.valid, 15,
                       "the session to be renewed by the new leader")
            assert client.check(seq) and client.get(key).value == "during"
        finally:
            os.kill(pid, signal.SIGCONT)
    client.close()


def check_a_waiter_gets_its_grant(cell, ttl: float, harm: Callable[[int], None],
                                  undo: Callable[[int], None], within: float) -> None:
    """A waiter waits at the replica its client talks to (the leader, after the hint); `harm`
    (given that replica's index) cuts it off or stops it; the holder releases: the waiter learns
    of its grant within `within` s, its place in line kept, and the cell says it holds it."""
    name = fresh("harmed-wait")
    holder_client = voltlock.Client(cell.urls(), attempt_timeout=1)
    waiter_client = voltlock.Client(cell.urls())
    with holder_client.session(ttl=ttl) as holder, waiter_client.session(ttl=ttl) as waiter:
        held = holder.lock(name)
        held.acquire(0)
        waiting = replica_index(cell, waiter_client._protocol.router.current().url)
        got: List[voltlock.Sequencer] = []
        thread = threading.Thread(target=lambda: got.append(waiter.lock(name).acquire(40)))
        thread.start()
        wait_until(lambda: holder_client.lock_info(name)["waiters"], 5, "the wait to start")
        harm(waiting)
        try:
            held.release()
            released = time.monotonic()
            thread.join(within + 10)
            assert got, "the waiter did not learn of its grant"
            assert time.monotonic() - released < within  # was the wait + 8 s (48 s)
        finally:
            undo(waiting)
        assert got[0].valid and holder_client.check(got[0])
        assert [h["session"] for h in holder_client.lock_info(name)["holders"]] == [waiter.id]
    holder_client.close()
    waiter_client.close()


def test_a_wait_at_a_replica_cut_off_from_the_client_gets_its_grant_within_seconds(cell):
    """The cell grants the lock to a waiter whose replica can no longer reach it: the silent
    connection is given up within seconds (its probes unanswered) and the same request, asked
    again at another replica, finds the grant."""
    check_a_waiter_gets_its_grant(cell, 5, lambda r: cell.partition(r, peers=["client"]),
                                  lambda r: None, within=8)


def test_a_wait_at_a_stopped_replica_gets_its_grant_within_seconds(cell):
    """SIGSTOP: the replica's kernel still answers TCP keepalive, so only the client's /healthz
    checks see it gone. The wait is left there and asked again elsewhere, where the grant is;
    its connection stays open, so the replica, running again, withdraws nothing."""
    def stop(replica: int) -> None:
        cell.harmed = True
        os.kill(replica_pid(cell, replica), signal.SIGSTOP)
    check_a_waiter_gets_its_grant(
        cell, 10, stop, lambda r: os.kill(replica_pid(cell, r), signal.SIGCONT), within=10)


def test_a_client_given_one_replica_fails_over_to_the_replicas_it_learned(cell):
    follower = next(r["index"] for r in cell.replicas if r["index"] != cell.leader)
    client = voltlock.Client(cell.urls(follower), timeout=10)
    key = fresh("one")
    client.put(key, "1")
    assert len(client._protocol.router.endpoints) == 3
    cell.kill(follower)
    assert client.put(key, "2") > 0 and client.get(key).value == "2"
    client.close()


def test_a_watch_at_a_stopped_replica_moves_on_and_its_close_ends_it_at_once(cell):
    """SIGSTOP: the replica's kernel accepts the connection and nothing answers. The cell sends
    a watch's headers at once, so the replica gets attempt_timeout (3 s) and the watch is
    placed at the next one (it was 25 s, and then not placed); and close() from another thread
    ends an iteration whose stream is still being opened there (it waited for the headers)."""
    follower = next(r["index"] for r in cell.replicas if r["index"] != cell.leader)
    others = [r["index"] for r in cell.replicas if r["index"] != follower]
    pid = replica_pid(cell, follower)
    client = voltlock.Client(cell.urls(follower, *others))  # the stopped one first
    stuck = voltlock.Client(cell.urls(follower, *others))
    key = fresh("watched")
    stuck.get(key)  # a kept connection to the replica about to stop, as a client that used it has
    cell.harmed = True
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with client.watch(key) as watch:
            assert time.monotonic() - started < 5 and watch.next_revision is not None
            rev = client.put(key, "1")
            assert next(watch).revision == rev  # placed before the put: the change is seen

        opening = stuck.watch(key, start_revision=rev)  # opened by the first next()
        raised: List[BaseException] = []

        def read_all() -> None:
            try:
                list(opening)
            except BaseException as e:  # whatever it is, the test fails on it
                raised.append(e)
        reader = threading.Thread(target=read_all)
        reader.start()
        wait_until(lambda: opening._connection is not None, 5, "the stream to be opening")
        closed_at = time.monotonic()
        opening.close()
        reader.join(10)
        assert not reader.is_alive() and time.monotonic() - closed_at < 2
        assert raised == []
    finally:
        os.kill(pid, signal.SIGCONT)
    client.close()
    stuck.close()


def test_a_short_session_survives_its_leader_cut_off_from_everything(cell):
    """TTL 3 s: a keepalive gives up within a third of the TTL, so the one sent to the cut-off
    leader is left in time for the next to reach the replica the cell makes leader (in about
    1.5 s): the session is not lost, and its lock stands. (Its lease may lapse for a moment on
    a loaded machine, so `seq.valid` is checked only at the end.)"""
    client = voltlock.Client(cell.urls(), timeout=20)
    lost = threading.Event()
    with client.session(ttl=3, on_lost=lambda _: lost.set()) as s:
        seq = s.lock(fresh("lock")).acquire()
        assert client._protocol.router.current().url == cell.urls(cell.leader)[0]
        cell.partition(cell.leader)
        # Three TTLs: the session would be lost long before (its grace is one TTL).
        assert not lost.wait(3 * s.ttl)
        wait_until(lambda: s.state == voltlock.CONNECTED and seq.valid, 10, "the lease renewed")
        assert client.check(seq)
        holders = client.lock_info(seq.lock)["holders"]
        assert [(h["session"], h["generation"]) for h in holders] == [(s.id, seq.generation)]
    client.close()
