"""voltlock.aio against a real cell: the same behaviour as the sync client, with asyncio."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any, Awaitable, Callable, List, Optional, Tuple

import pytest

import voltlock
from conftest import fresh, replica_index, replica_pid
from voltlock import aio


async def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.05)


def run(cell, body: Callable[[aio.Client], Awaitable[None]], *replicas: int,
        timeout: float = 15) -> None:
    async def main() -> None:
        async with aio.Client(cell.urls(*replicas), timeout=timeout) as client:
            await asyncio.wait_for(body(client), 120)
    asyncio.run(main())


def test_the_readme_example_with_asyncio(cell):
    async def body(client: aio.Client) -> None:
        prefix = fresh("cfg") + "/"
        async with client.session(ttl=10) as s:
            async with s.lock(prefix + "db/primary", timeout=5) as seq:
                assert seq.valid and seq.session == s.id
                await client.put(prefix + "db", "10.0.0.5", sequencer=seq)
            assert not seq.valid
        kv = await client.get(prefix + "db")
        assert kv is not None and kv.value == "10.0.0.5"
        rev = await client.put(prefix + "db", "10.0.0.6", prev_revision=kv.mod_revision)
        await client.put(prefix + "pool", "16")
        assert [k.key async for k in client.get_prefix(prefix)] == [prefix + "db",
                                                                     prefix + "pool"]
        seen = []
        async with client.watch(prefix, prefix=True, start_revision=kv.mod_revision) as w:
            async for ev in w:
                seen.append((ev.type, ev.key, ev.value, ev.revision))
                if len(seen) == 3:
                    w.close()
        assert seen[:2] == [("put", prefix + "db", "10.0.0.5", kv.mod_revision),
                            ("put", prefix + "db", "10.0.0.6", rev)]
        assert seen[2][:3] == ("put", prefix + "pool", "16")
    run(cell, body)


def test_locks_fencing_and_their_errors(cell):
    async def body(client: aio.Client) -> None:
        name, key = fresh("lock"), fresh("fenced")
        async with client.session(ttl=10) as a, client.session(ttl=10) as b:
            lock = a.lock(name)
            seq = await lock.acquire()
            assert await client.check(voltlock.Sequencer.parse(str(seq)))
            with pytest.raises(aio.LockBusy):
                await b.lock(name, timeout=0).acquire()
            with pytest.raises(voltlock.WaitTimedOut):
                await b.lock(name, timeout=0.3).acquire()
            with pytest.raises(voltlock.ModeConflict):
                await a.lock(name, shared=True).acquire()
            b_lock = b.lock(name)
            waiter = asyncio.ensure_future(b_lock.acquire())
            await until(lambda: _waiters(client, name), 5, "b to queue")
            await client.put(key, "a", sequencer=seq)
            await lock.release()
            granted = await asyncio.wait_for(waiter, 10)
            assert granted.session == b.id and granted.generation > seq.generation
            with pytest.raises(voltlock.SequencerInvalid):
                await client.put(key, "stale", sequencer=seq)
            await b_lock.release()
            async with a.lock(name, shared=True) as ra, b.lock(name, shared=True) as rb:
                assert await client.check(ra) and await client.check(rb)
    run(cell, body)


async def _waiters(client: aio.Client, name: str) -> bool:
    return bool((await client.lock_info(name))["waiters"])


def test_contention_eight_tasks_count_exactly_under_one_lock(cell):
    async def body(client: aio.Client) -> None:
        name, counter = fresh("lock"), fresh("counter")
        await client.put(counter, "0")
        grants: List[Tuple[int, int]] = []

        async def worker() -> None:
            async with client.session(ttl=10) as s:
                lock = s.lock(name)
                for _ in range(50):
                    async with lock as seq:
                        kv = await client.get(counter)
                        assert kv is not None
                        await client.put(counter, str(int(kv.value) + 1), sequencer=seq)
                        grants.append((int(kv.value), seq.generation))
        await asyncio.gather(*(worker() for _ in range(8)))
        final = await client.get(counter)
        assert final is not None and final.value == "400"
        assert sorted(v for v, _ in grants) == list(range(400))
        in_order = [g for _, g in sorted(grants)]
        assert all(x < y for x, y in zip(in_order, in_order[1:]))
    run(cell, body)


def test_cas_paging_binary_and_bad_input(cell):
    async def body(client: aio.Client) -> None:
        key, prefix = fresh("cas"), fresh("page") + "/"
        rev = await client.put(key, b"\xff\x01", prev_revision=0)
        with pytest.raises(voltlock.CasMismatch) as cas:
            await client.put(key, "x", prev_revision=rev - 1)
        assert cas.value.mod_revision == rev
        assert (await client.get(key)).value == b"\xff\x01"  # not UTF-8: bytes
        keys = [f"{prefix}{i:02}" for i in range(12)]
        for k in keys:
            await client.put(k, "v" * 500)
        assert [kv.key async for kv in client.get_prefix(prefix)] == keys
        assert [kv.key async for kv in client.get_prefix(prefix, page_size=5)] == keys
        assert await client.delete(prefix, prefix=True) == 12
        with pytest.raises(ValueError):
            await client.put("", "x")
        with pytest.raises(TypeError):
            await client.put("k", None)  # type: ignore[arg-type]
        with pytest.raises(voltlock.TooLarge):
            await client.put(fresh("big"), "x" * 2000)
        with pytest.raises(voltlock.UnknownSession):
            await client.put(fresh("eph"), "x", session=999_999_999)
    run(cell, body)


def test_barrier_and_election(cell):
    async def body(client: aio.Client) -> None:
        name, election = fresh("barrier"), fresh("election")
        sessions = [await client.session(ttl=10).open() for _ in range(3)]
        try:
            with pytest.raises(voltlock.BarrierNotReady):
                await sessions[0].barrier(name, 3).enter(timeout=0)
            revs = await asyncio.gather(*(s.barrier(name, 3).enter(10) for s in sessions))
            assert len(set(revs)) == 1
            left = await asyncio.gather(*(s.barrier(name, 3).leave(10) for s in sessions))
            assert len(set(left)) == 1

            a, b = sessions[0].election(election), sessions[1].election(election)
            observed: List[Optional[voltlock.Value]] = []

            async def observe() -> None:
                async for leader in b.observe():
                    observed.append(leader)
                    if len(observed) == 4:
                        return
            observer = asyncio.ensure_future(observe())
            await until(lambda: observed, 5, "the observer's first answer")
            seq = await a.campaign("a")
            assert await b.leader() == "a"
            contender = asyncio.ensure_future(b.campaign("b"))
            await until(lambda: _waiters(client, election), 5, "b to campaign")
            await a.resign()
            won = await asyncio.wait_for(contender, 10)
            assert won.generation > seq.generation
            await asyncio.wait_for(observer, 10)
            assert observed == [None, "a", None, "b"]
        finally:
            for s in sessions:
                await s.close()
    run(cell, body)


def test_an_election_call_has_a_time_of_its_own_beside_its_wait_with_asyncio(cell):
    """As the sync client's: cut off from every replica, campaign() and leader() give up after
    their own time, not the client's 30 s."""
    async def body(client: aio.Client) -> None:
        loop = asyncio.get_running_loop()
        async with client.session(ttl=30) as s:
            election = s.election(fresh("election"))

            def cut_off_the_client() -> None:
                for replica in cell.replicas:
                    cell.partition(replica["index"], peers=["client"])
            await loop.run_in_executor(None, cut_off_the_client)
            started = time.monotonic()
            try:
                with pytest.raises(voltlock.Unavailable):
                    await election.campaign("me", 0, call_timeout=0.5)
                with pytest.raises(voltlock.Unavailable):
                    await election.leader(timeout=0.5)
                assert time.monotonic() - started < 5
            finally:
                await loop.run_in_executor(None, cell.heal)
            assert (await election.campaign("me", 5, call_timeout=10)).generation > 0
            assert await election.leader(timeout=10) == "me"
            await election.resign(timeout=10)
    run(cell, body, timeout=30)


def test_a_leader_kill_with_asyncio(cell):
    async def body(client: aio.Client) -> None:
        prefix = fresh("fo") + "/"
        async with client.session(ttl=5) as s:
            seq = await s.lock(fresh("lock")).acquire()
            start = await client.put(prefix + "start", "0")
            events: List[voltlock.WatchEvent] = []

            async def read() -> None:
                async with client.watch(prefix, prefix=True, start_revision=start) as w:
                    async for ev in w:
                        events.append(ev)
                        if ev.key == prefix + "end":
                            return
            reader = asyncio.ensure_future(read())
            acked: List[int] = []

            async def write(worker: int) -> None:
                for i in range(60):
                    acked.append(await client.put(f"{prefix}w/{worker}-{i:03}", "v"))
            writers = asyncio.gather(*(write(w) for w in range(4)))
            await until(lambda: len(acked) >= 20, 10, "writes before the kill")
            await asyncio.get_running_loop().run_in_executor(None, cell.kill, cell.leader)
            await asyncio.wait_for(writers, 60)
            end = await client.put(prefix + "end", "")
            await asyncio.wait_for(reader, 30)
            await until(lambda: s.state == voltlock.CONNECTED, 10, "the session renewed")
            assert seq.valid and await client.check(seq)
            kvs = [kv async for kv in client.get_prefix(prefix + "w/")]
            assert len(kvs) == 240 and all(kv.version == 1 for kv in kvs)
            watched = [e.revision for e in events]
            assert watched == [start] + sorted(kv.mod_revision for kv in kvs) + [end]
    run(cell, body, timeout=30)


def test_a_wait_at_a_stopped_replica_gets_its_grant_within_seconds_with_asyncio(cell):
    """As the sync client's test_failover: the /healthz checks leave a SIGSTOPped replica."""
    async def body(client: aio.Client) -> None:
        name = fresh("waitstop")
        async with aio.Client(cell.urls(), attempt_timeout=1) as holder_client:
            async with holder_client.session(ttl=10) as holder, \
                    client.session(ttl=10) as waiter:
                held = holder.lock(name)
                await held.acquire(0)
                waiting = client._protocol.router.current()  # the leader, after the hint
                grant = asyncio.ensure_future(waiter.lock(name).acquire(40))
                await until(lambda: _waiters(holder_client, name), 5, "the wait to start")
                pid = replica_pid(cell, replica_index(cell, waiting.url))
                cell.harmed = True
                os.kill(pid, signal.SIGSTOP)
                try:
                    await held.release()
                    released = time.monotonic()
                    seq = await asyncio.wait_for(grant, 20)
                    assert time.monotonic() - released < 10  # was the wait + 8 s
                finally:
                    os.kill(pid, signal.SIGCONT)
                assert seq.valid and await holder_client.check(seq)
                info = await holder_client.lock_info(name)
                assert [h["session"] for h in info["holders"]] == [waiter.id]
    run(cell, body, timeout=30)


async def _waiters(client: aio.Client, name: str) -> List[Any]:
    return list((await client.lock_info(name))["waiters"])


def test_the_cell_saying_the_session_is_gone_makes_it_lost(cell):
    follower = next(r["index"] for r in cell.replicas if r["index"] != cell.leader)

    async def body(client: aio.Client) -> None:
        lost: List[aio.Session] = []
        s = await client.session(ttl=1.5, grace=60, on_lost=lost.append).open()
        lock = s.lock(fresh("lock"))
        seq = await lock.acquire()
        loop = asyncio.get_running_loop()

        def cut_off_the_client() -> None:  # from every replica: it learned them all
            for replica in cell.replicas:
                cell.partition(replica["index"], peers=["client"])
        await loop.run_in_executor(None, cut_off_the_client)
        await until(lambda: not seq.valid, 5, "the lease to run out")
        assert s.state == voltlock.SUSPENDED and not s.lost.is_set()
        await until(lambda: asyncio.to_thread(_session_gone, cell, s.id), 10,
                    "the cell to expire the session")
        await loop.run_in_executor(None, cell.heal)
        await asyncio.wait_for(s.lost.wait(), 15)
        assert lost == [s] and s.state == voltlock.LOST and lock.sequencer is None
        with pytest.raises(voltlock.SessionExpired):
            await s.lock("x").acquire()
        await s.close()
    run(cell, body, follower, timeout=5)


def _session_gone(cell, session: int) -> bool:
    """Asked from the leader's own namespace, which the client's cut does not reach."""
    asked = cell.cell("exec", str(cell.leader), "curl", "-s", "-o", "/dev/null", "-w",
                      "%{http_code}", f"{cell.urls(cell.leader)[0]}/v1/sessions/{session}")
    return asked.stdout.strip() == "404"


def test_a_watch_closed_by_another_task_and_one_from_before_the_history(cell):
    async def body(client: aio.Client) -> None:
        prefix = fresh("compact") + "/"
        start = await client.put(prefix + "first", "x")
        watch = client.watch(prefix, prefix=True, start_revision=start)
        seen: List[voltlock.WatchEvent] = []

        async def read() -> None:
            async for ev in watch:
                seen.append(ev)
        reader = asyncio.ensure_future(read())
        await until(lambda: seen, 5, "the first event")
        watch.close()
        await asyncio.wait_for(reader, 5)  # close() from another task ends the iteration
        assert [e.key for e in seen] == [prefix + "first"]

        # The cell keeps the newest 10,000 events: 5,000 puts and a prefix delete of them.
        slots = asyncio.Semaphore(16)

        async def put(i: int) -> None:
            async with slots:
                await client.put(f"{prefix}{i}", "v")
        await asyncio.gather(*(put(i) for i in range(5000)))
        assert await client.delete(prefix, prefix=True) == 5001
        with pytest.raises(aio.Compacted) as compacted:
            async for _ in client.watch(prefix, prefix=True, start_revision=start):
                pass
        assert compacted.value.oldest_revision > start
    run(cell, body)


def test_a_watch_entered_with_async_with_sees_the_change_made_right_after(cell):
    async def body(client: aio.Client) -> None:
        key = fresh("placed")
        async with client.watch(key) as watch:
            rev = await client.put(key, "1")
            event = await asyncio.wait_for(watch.__anext__(), 10)
        assert event.revision == rev
    run(cell, body)


def test_a_watch_at_a_stopped_replica_moves_on_and_its_close_ends_it_at_once_with_asyncio(cell):
    """As the sync client's test_failover: `async with` places the watch at the next replica
    after attempt_timeout, and close() from another task ends a stream still opening."""
    follower = next(r["index"] for r in cell.replicas if r["index"] != cell.leader)
    others = [r["index"] for r in cell.replicas if r["index"] != follower]

    async def body(client: aio.Client) -> None:
        key = fresh("watched")
        pid = replica_pid(cell, follower)
        cell.harmed = True
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            async with client.watch(key) as watch:
                assert time.monotonic() - started < 5 and watch.next_revision is not None
                rev = await client.put(key, "1")
                assert (await asyncio.wait_for(watch.__anext__(), 10)).revision == rev

            async with aio.Client(cell.urls(follower, *others)) as stuck:
                opening = stuck.watch(key, start_revision=rev)
                reader = asyncio.ensure_future(_every_event(opening))
                await until(lambda: opening._opening is not None, 5, "the stream to be opening")
                closed_at = time.monotonic()
                opening.close()
                await asyncio.wait_for(reader, 5)
                assert time.monotonic() - closed_at < 1
        finally:
            os.kill(pid, signal.SIGCONT)
    run(cell, body, follower, *others)  # the stopped one first


async def _every_event(watch: aio.Watch) -> List[voltlock.WatchEvent]:
    return [event async for event in watch]
