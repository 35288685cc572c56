"""The sync client against a real 3-replica cell: every method and the errors a user can meet."""
from __future__ import annotations

import concurrent.futures
import signal
import threading
import time
from typing import List, Optional

import pytest

import voltlock
from conftest import fresh, wait_until


@pytest.fixture
def client(cell):
    with voltlock.Client(cell.urls(1, 2, 0), timeout=15) as c:
        yield c


def test_the_readme_example_runs_as_written(cell, client):
    """docs/python-sdk.md's example, line by line (names under a fresh prefix)."""
    prefix = fresh("cfg") + "/"
    with client.session(ttl=10) as s:
        with s.lock(prefix + "db/primary", timeout=5) as seq:
            assert seq.valid and seq.mode == "exclusive" and seq.session == s.id
            client.put(prefix + "config/db", "10.0.0.5", sequencer=seq)
    kv = client.get(prefix + "config/db")
    assert kv is not None and kv.value == "10.0.0.5" and kv.version == 1
    assert kv.create_revision == kv.mod_revision
    rev = client.put(prefix + "config/db", "10.0.0.6", prev_revision=kv.mod_revision)
    client.put(prefix + "config/pool", "16")
    assert [(k.key, k.value) for k in client.get_prefix(prefix + "config/")] == [
        (prefix + "config/db", "10.0.0.6"), (prefix + "config/pool", "16")]
    events = []
    for ev in client.watch(prefix + "config/", prefix=True, start_revision=rev):
        events.append((ev.type, ev.key, ev.value, ev.revision))
        if len(events) == 2:
            break
    assert events[0] == ("put", prefix + "config/db", "10.0.0.6", rev)
    assert events[1][:3] == ("put", prefix + "config/pool", "16")


def test_client_reads_its_endpoints_from_the_environment(cell, monkeypatch):
    monkeypatch.setenv("VOLTLOCK_ENDPOINTS", ",".join(cell.urls()))
    with voltlock.Client() as c:
        assert c.get(fresh("nothing")) is None
    monkeypatch.delenv("VOLTLOCK_ENDPOINTS")
    with pytest.raises(ValueError):
        voltlock.Client()


def test_a_session_lives_while_kept_alive_and_its_close_releases_everything(cell, client):
    lock, key = fresh("lock"), fresh("eph")
    s = client.session(ttl=1.5, name="worker 1").open()
    try:
        with s.lock(lock):
            client.put(key, "mine", session=s)
            time.sleep(2.5)  # longer than the TTL: only the keepalives keep it
            assert s.state == voltlock.CONNECTED
            info = s.info()
            assert info["held_locks"] == [lock] and info["ephemeral_keys"] == [key]
            assert client.get(key).session == s.id
    finally:
        s.close()
    assert not s.lost.is_set() and s.state == voltlock.CLOSED  # closed, not lost
    assert client.get(key) is None
    with pytest.raises(voltlock.SessionExpired):
        s.lock(lock).acquire()
    with pytest.raises(RuntimeError):
        client.session(ttl=5).lock("x").acquire()  # never opened


def test_exclusive_and_shared_locks_and_fencing(cell, client):
    name, key = fresh("lock"), fresh("fenced")
    with client.session(ttl=10) as a, client.session(ttl=10) as b:
        a_lock = a.lock(name)
        seq = a_lock.acquire()
        assert client.check(seq) and seq.valid
        assert voltlock.Sequencer.parse(str(seq)) == seq
        assert client.check(voltlock.Sequencer.parse(str(seq)))
        with pytest.raises(voltlock.LockBusy) as busy:
            b.lock(name, timeout=0).acquire()
        assert busy.value.code == "lock_busy" and busy.value.status == 409
        started = time.monotonic()
        with pytest.raises(voltlock.WaitTimedOut):
            b.lock(name, timeout=0.5).acquire()
        assert 0.4 < time.monotonic() - started < 5
        with pytest.raises(voltlock.ModeConflict):
            a.lock(name, shared=True).acquire()
        client.put(key, "by a", sequencer=seq)
        a_lock.release()
        assert not seq.valid and not client.check(seq)
        with pytest.raises(voltlock.SequencerInvalid) as stale:
            client.put(key, "late", sequencer=seq)
        assert stale.value.code == "sequencer_invalid" and "generation" in stale.value.details
        with pytest.raises(voltlock.SequencerInvalid):
            client.delete(key, sequencer=seq)
        assert client.get(key).value == "by a"
        with a.lock(name, shared=True) as ra, b.lock(name, shared=True) as rb:
            assert ra.mode == rb.mode == "shared" and ra.generation != rb.generation
            assert client.check(ra) and client.check(rb)
            holders = client.lock_info(name)["holders"]
            assert sorted(h["session"] for h in holders) == sorted([a.id, b.id])


def test_a_waiter_gets_the_lock_when_it_is_released(cell, client):
    name = fresh("lock")
    with client.session(ttl=10) as a, client.session(ttl=10) as b:
        first = a.lock(name)
        first_seq = first.acquire()
        got: List[voltlock.Sequencer] = []
        waiter = threading.Thread(target=lambda: got.append(b.lock(name, timeout=None)
                                                            .acquire()))
        waiter.start()
        wait_until(lambda: client.lock_info(name)["waiters"], 5, "b to queue")
        first.release()
        waiter.join(10)
        assert got and got[0].session == b.id and got[0].generation > first_seq.generation


class _Interrupted(BaseException):
    """What a program's signal handler raises, as Python's own KeyboardInterrupt is."""


def test_a_wait_interrupted_by_a_signal_is_withdrawn_not_granted_later(cell, client):
    """Ctrl-C in a lock wait, in a program that goes on (a REPL, a server that catches it): the
    SDK hangs up, so the cell withdraws the wait. Before, the wait stayed in line and the lock
    was granted to the still-living session later, held with nobody knowing."""
    name = fresh("lock")
    assert threading.current_thread() is threading.main_thread()  # where signals are handled

    def interrupt(signum, frame):
        raise _Interrupted()

    with client.session(ttl=10) as a, client.session(ttl=10) as b:
        first = a.lock(name)
        first.acquire()
        previous = signal.signal(signal.SIGALRM, interrupt)
        kept = None
        try:
            signal.setitimer(signal.ITIMER_REAL, 1.0)
            started = time.monotonic()
            with pytest.raises(_Interrupted) as raised:
                b.lock(name).acquire(timeout=60)
            kept = raised.value  # kept alive, with its traceback and what that holds
            assert time.monotonic() - started < 5
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        wait_until(lambda: not client.lock_info(name)["waiters"], 5, "the wait to be withdrawn")
        first.release()
        assert client.lock_info(name)["holders"] == [], "the interrupted wait was granted"
        # The session goes on, and its next wait is an ordinary one.
        with b.lock(name, timeout=5) as seq:
            assert seq.session == b.id
        assert kept is not None


def test_contention_eight_threads_count_exactly_under_one_lock(cell, client):
    name, counter = fresh("lock"), fresh("counter")
    client.put(counter, "0")
    generations: List[tuple] = []

    def worker() -> None:
        with client.session(ttl=10) as s:
            lock = s.lock(name)
            for _ in range(50):
                with lock as seq:
                    value = int(client.get(counter).value)
                    client.put(counter, str(value + 1), sequencer=seq)
                    generations.append((value, seq.generation))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for f in [pool.submit(worker) for _ in range(8)]:
            f.result(timeout=120)
    assert client.get(counter).value == "400"
    in_order = [g for _, g in sorted(generations)]
    assert sorted(v for v, _ in generations) == list(range(400))
    assert all(a < b for a, b in zip(in_order, in_order[1:]))


def test_compare_and_set(cell, client):
    key = fresh("cas")
    rev = client.put(key, "1", prev_revision=0)
    with pytest.raises(voltlock.CasMismatch) as exists:
        client.put(key, "x", prev_revision=0)
    assert exists.value.mod_revision == rev
    rev2 = client.put(key, "2", prev_revision=rev)
    with pytest.raises(voltlock.CasMismatch) as stale:
        client.put(key, "3", prev_revision=rev)
    assert stale.value.mod_revision == rev2
    with pytest.raises(voltlock.CasMismatch):
        client.delete(key, prev_revision=rev)
    assert client.delete(key, prev_revision=rev2) == 1
    assert client.get(key) is None


def test_prefix_paging_across_many_pages(cell, client):
    prefix = fresh("page") + "/"
    keys = [f"{prefix}{i:03}" for i in range(23)]
    for k in keys:
        client.put(k, "v" * 400)  # ~3 fit in one reply datagram: pages by size, too
    assert [kv.key for kv in client.get_prefix(prefix)] == keys
    assert [kv.key for kv in client.get_prefix(prefix, page_size=5)] == keys
    assert client.delete(prefix, prefix=True) == 23
    assert list(client.get_prefix(prefix)) == []


def test_binary_values_and_stale_reads(cell, client):
    key = fresh("bin")
    rev = client.put(key, b"\x00\xffbytes")
    assert client.get(key).value == b"\x00\xffbytes"
    wait_until(lambda: client.get(key, stale=True) is not None, 5, "the replica to apply")
    assert client.get(key, stale=True).mod_revision == rev


def test_watch_streams_changes_in_order_and_close_ends_it(cell, client):
    prefix = fresh("w") + "/"
    watch = client.watch(prefix, prefix=True)
    seen: List[voltlock.WatchEvent] = []
    reader = threading.Thread(target=lambda: seen.extend(watch))
    reader.start()
    revs = [client.put(prefix + "a", "1"), client.put(prefix + "b", "2")]
    assert client.delete(prefix, prefix=True) == 2
    after_delete = client.get_revision(prefix + "a")[1]
    wait_until(lambda: len(seen) >= 4, 10, "four events")
    watch.close()
    reader.join(5)
    assert not reader.is_alive()
    assert [(e.type, e.key, e.value) for e in seen] == [
        ("put", prefix + "a", "1"), ("put", prefix + "b", "2"), ("delete", prefix + "a", None),
        ("delete", prefix + "b", None)]
    assert [e.revision for e in seen[:2]] == revs and seen[2].revision == seen[3].revision
    assert seen[3].revision <= after_delete
    assert watch.next_revision == seen[3].revision + 1


def test_close_inside_the_loop_ends_the_watch_there_and_closes_its_connection(cell, client):
    prefix = fresh("wc") + "/"
    client.put(prefix + "a", "1")
    client.put(prefix + "b", "2")
    watch = client.watch(prefix, prefix=True)
    client.delete(prefix, prefix=True)  # one revision, two events, handed out together
    seen: List[voltlock.WatchEvent] = []
    for event in watch:
        seen.append(event)
        watch.close()
    assert [(e.type, e.key) for e in seen] == [("delete", prefix + "a")]
    assert watch._connection is not None and watch._connection.sock is None


def test_a_watch_sees_the_change_made_right_after_it_was_made(cell, client):
    key = fresh("placed")
    watch = client.watch(key)
    rev = client.put(key, "1")
    timer = threading.Timer(10, watch.close)  # one that missed the put would wait for ever
    timer.start()
    try:
        event = next(watch, None)
    finally:
        timer.cancel()
        watch.close()
    assert event is not None and event.revision == rev


def test_a_watch_cut_for_reading_slowly_resumes_with_no_gap(cell, client):
    """The cell keeps 64 KiB per stream here (conftest). While nobody reads, 5,000 events of
    1.3 KB fill that and the sockets' buffers (about 0.8 MB here); the cell cuts a stream whose
    buffer stayed full for 5 s when it next has an event for it, so a put goes every 0.2 s until
    it has. A reader that stops with a few bytes unsent is cut too (StreamBuffer)."""
    def cut() -> int:
        total = 0
        for i in range(3):
            with voltlock.Client(cell.urls(i)) as one:
                total += one.cluster()["api"]["slow_readers_cut"]
        return total
    cut_before = cut()
    prefix = fresh("slow") + "/"
    watch = client.watch(prefix, prefix=True)
    value = "v" * 1300
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        written = list(pool.map(lambda i: client.put(f"{prefix}{i % 10}", value), range(5000)))
    deadline = time.monotonic() + 30
    while cut() == cut_before:
        assert time.monotonic() < deadline, "the slow reader was not cut within 30 s"
        written.append(client.put(f"{prefix}trickle", "t"))
        time.sleep(0.2)
    try:
        seen = [next(watch).revision for _ in written]
    finally:
        watch.close()
    assert seen == sorted(written)


def test_a_watch_from_before_the_history_raises_compacted(cell, client):
    """The cell keeps the newest 10,000 events: 5,000 puts and one prefix delete of them."""
    prefix = fresh("compact") + "/"
    start = client.put(prefix + "first", "x")

    def writer(worker: int) -> None:
        for i in range(250):
            client.put(f"{prefix}{worker}-{i}", "v")
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        for f in [pool.submit(writer, w) for w in range(20)]:
            f.result(timeout=120)
    assert client.delete(prefix, prefix=True) == 5001
    with pytest.raises(voltlock.Compacted) as compacted:
        next(iter(client.watch(prefix, prefix=True, start_revision=start)))
    assert compacted.value.oldest_revision > start and compacted.value.status == 410


def test_barrier_enter_and_leave(cell, client):
    name = fresh("barrier")
    sessions = [client.session(ttl=10).open() for _ in range(3)]
    try:
        with pytest.raises(voltlock.BarrierNotReady):
            sessions[0].barrier(name, 3).enter(timeout=0)
        with pytest.raises(voltlock.NotMember):
            sessions[0].barrier(name, 3).leave(timeout=0)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            entered = [pool.submit(s.barrier(name, 3).enter, 10) for s in sessions]
            revs = {f.result(timeout=15) for f in entered}
        assert len(revs) == 1  # all passed together
        with client.session(ttl=10) as late:
            with pytest.raises(voltlock.BarrierInUse):
                late.barrier(name, 3).enter(timeout=0)
            with pytest.raises(voltlock.CountMismatch):
                late.barrier(name, 4).enter(timeout=0)
        with pytest.raises(voltlock.WaitTimedOut):
            sessions[0].barrier(name, 3).leave(timeout=0.3)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            left = [pool.submit(s.barrier(name, 3).leave, 10) for s in sessions]
            assert len({f.result(timeout=15) for f in left}) == 1
    finally:
        for s in sessions:
            s.close()


def test_leader_election_recipe(cell, client):
    name = fresh("election")
    with client.session(ttl=10) as a, client.session(ttl=10) as b:
        ea, eb = a.election(name), b.election(name)
        assert ea.leader() is None
        seen: List[Optional[str]] = []
        observer = eb.observe()
        seen.append(next(observer))
        seq = ea.campaign("a:8080")
        assert ea.leader() == eb.leader() == "a:8080" and client.check(seq)
        seen.append(next(observer))
        won: List[voltlock.Sequencer] = []
        campaigner = threading.Thread(target=lambda: won.append(eb.campaign("b:8080", 10)))
        campaigner.start()
        wait_until(lambda: client.lock_info(name)["waiters"], 5, "b to campaign")
        ea.resign()
        campaigner.join(10)
        assert won and won[0].generation > seq.generation
        seen += [next(observer), next(observer)]
        observer.close()
        assert seen == [None, "a:8080", None, "b:8080"]
        assert eb.leader() == "b:8080"
    assert client.get(name) is None  # the leader's key went with its session


def test_an_election_call_has_a_time_of_its_own_beside_its_wait(cell):
    """Cut off from every replica, campaign() gives up after its wait plus its call_timeout, and
    leader() after its timeout, not after the client's 30 s: Unavailable, as a barrier's call
    does."""
    with voltlock.Client(cell.urls(), timeout=30) as client, client.session(ttl=30) as s:
        election = s.election(fresh("election"))
        for replica in cell.replicas:
            cell.partition(replica["index"], peers=["client"])
        started = time.monotonic()
        try:
            with pytest.raises(voltlock.Unavailable):
                election.campaign("me", 0, call_timeout=0.5)
            with pytest.raises(voltlock.Unavailable):
                election.leader(timeout=0.5)
            assert time.monotonic() - started < 5
        finally:
            cell.heal()
        assert election.campaign("me", 5, call_timeout=10).generation > 0
        assert election.leader(timeout=10) == "me"
        election.resign(timeout=10)


def test_bad_input_is_refused_and_changes_nothing(cell, client):
    before = client.cluster()["api"]["revision"]
    with pytest.raises(ValueError):
        client.put("", "x")
    with pytest.raises(ValueError):
        client.put("bad\x01key", "x")
    with pytest.raises(TypeError):
        client.put("k", 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.put("k", "v", sequencer="1:exclusive:1:l")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.session(ttl=0.2)
    with pytest.raises(ValueError):
        client.get_prefix("bad\x00prefix")  # at the call, not at the first page
    with pytest.raises(TypeError):
        client.get_prefix("p", page_size="10")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.watch("k", spaces=["everything"])
    with pytest.raises(voltlock.TooLarge) as large:
        client.put(fresh("big"), "x" * 2000)
    assert large.value.status == 413 and "bytes" in large.value.message
    with pytest.raises(voltlock.UnknownSession):
        client.put(fresh("eph"), "x", session=999_999_999)
    assert client.cluster()["api"]["revision"] == before
