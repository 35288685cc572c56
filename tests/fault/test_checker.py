"""The fault suite's checkers on histories whose answer is known, so that each of them can fail:
linearizable and non-linearizable register histories (with unknown outcomes), and the lease,
fencing, set and watch checks."""
import math
import random

import pytest

from checks import (FencedWrite, Grant, Hold, WatchEvent, fencing_violations, overlapping_holds,
                    set_violations, watch_violations)
from linearizability import Operation, check, check_single

INF = math.inf


def w(client, call, ret, value, key="k"):
    return Operation(client, call, ret, "write", (value,), None, key)


def r(client, call, ret, value, key="k"):
    return Operation(client, call, ret, "read", (), value, key)


def cas(client, call, ret, expected, new, ok, key="k"):
    return Operation(client, call, ret, "cas", (expected, new), ok, key)


LINEARIZABLE = {
    "empty read": [r(1, 0, 1, None)],
    "write then read": [w(1, 0, 1, "a"), r(2, 2, 3, "a")],
    "read overlapping a write sees the new value": [w(1, 0, 3, "a"), r(2, 1, 2, "a")],
    "read overlapping a write sees the old value": [w(1, 0, 1, "a"), w(1, 2, 5, "b"),
                                                    r(2, 3, 4, "a")],
    "two concurrent writes, reads agree on the order": [
        w(1, 0, 5, "a"), w(2, 0, 5, "b"), r(3, 6, 7, "a"), r(4, 8, 9, "a")],
    "cas from what was read": [w(1, 0, 1, "a"), cas(2, 2, 3, "a", "b", True), r(3, 4, 5, "b")],
    "cas mismatch leaves the value": [w(1, 0, 1, "a"), cas(2, 2, 3, "x", "b", False),
                                      r(3, 4, 5, "a")],
    "create with cas on absent": [cas(1, 0, 1, None, "a", True), r(2, 2, 3, "a")],
    "unknown write that took effect": [w(1, 0, INF, "a"), r(2, 5, 6, "a")],
    "unknown write that never took effect": [w(1, 0, INF, "a"), r(2, 5, 6, None)],
    "unknown write applied late, after a later read": [w(1, 0, INF, "a"), r(2, 5, 6, None),
                                                       r(2, 7, 8, "a")],
    "unknown cas that applied": [w(1, 0, 1, "a"), cas(2, 2, INF, "a", "b", None),
                                 r(3, 9, 10, "b")],
    "the many interleavings of concurrent cas": [
        w(1, 0, 1, "a"), cas(2, 2, 6, "a", "b", True), cas(3, 2, 6, "b", "c", True),
        cas(4, 2, 6, "c", "d", True), r(5, 7, 8, "d")],
}

NOT_LINEARIZABLE = {
    "read of a value nobody wrote": [w(1, 0, 1, "a"), r(2, 2, 3, "z")],
    "stale read after two writes": [w(1, 0, 1, "a"), w(1, 2, 3, "b"), r(2, 4, 5, "a")],
    "read from the future": [r(2, 0, 1, "a"), w(1, 2, 3, "a")],
    "reads disagree on the order of two writes": [
        w(1, 0, 5, "a"), w(2, 0, 5, "b"), r(3, 6, 7, "a"), r(4, 8, 9, "b")],
    "cas succeeds although the value differs": [w(1, 0, 1, "a"), cas(2, 2, 3, "x", "b", True)],
    "cas fails although the value matches": [w(1, 0, 1, "a"), cas(2, 2, 3, "a", "b", False)],
    "two cas from the same value both succeed": [
        w(1, 0, 1, "a"), cas(2, 2, 5, "a", "b", True), cas(3, 2, 5, "a", "c", True)],
    "lost acknowledged write": [w(1, 0, 1, "a"), w(2, 2, 3, "b"), r(3, 10, 11, None)],
    "an unknown write cannot explain a value it did not write": [
        w(1, 0, 1, "a"), w(2, 2, INF, "b"), r(3, 5, 6, "c")],
    "value going back after an unknown write was seen": [
        w(1, 0, 1, "a"), w(2, 2, INF, "b"), r(3, 5, 6, "b"), r(3, 7, 8, "a")],
}


@pytest.mark.parametrize("name", sorted(LINEARIZABLE))
def test_linearizable_histories_pass(name):
    assert check_single(LINEARIZABLE[name]).linearizable is True


@pytest.mark.parametrize("name", sorted(NOT_LINEARIZABLE))
def test_non_linearizable_histories_fail(name):
    result = check_single(NOT_LINEARIZABLE[name])
    assert result.linearizable is False
    assert result.stuck_at


def test_keys_are_checked_one_by_one():
    ops = [w(1, 0, 1, "a", key="x"), r(2, 2, 3, "a", key="x"),
           w(1, 0, 1, "b", key="y"), r(2, 2, 3, None, key="y")]
    results = check(ops)
    assert results["x"].linearizable is True
    assert results["y"].linearizable is False


def test_a_failed_cas_explained_only_by_an_unobserved_unknown_write():
    ops = [w(1, 0, 1, "a"), w(2, 2, INF, "b"), cas(3, 3, 4, "a", "c", False),
           w(1, 5, 6, "d"), r(3, 7, 8, "d")]
    assert check(ops)["k"].linearizable is True
    ops[1] = w(2, 9, INF, "b")          # called after the cas: it cannot explain it
    assert check(ops)["k"].linearizable is False


def test_hundreds_of_unknown_writes_of_a_dead_cell_are_checked_quickly():
    """Clients of a cell that is down send write after write without an answer: their values
    are never observed, so the checker treats them as one kind and does not try every subset."""
    ops = [w(1, 0, 1, "a"), r(2, 2, 3, "a")]
    ops += [w(c, 4 + i * 0.01, INF, f"lost-{c}-{i}") for i in range(100) for c in range(3, 9)]
    ops += [cas(2, 5, 6, "a", "b", False), r(2, 10, 11, "lost-3-7")]
    result = check(ops, budget_s=20)["k"]
    assert result.linearizable is True
    ops.append(r(2, 12, 13, "a"))       # back to a value overwritten for good
    assert check(ops, budget_s=20)["k"].linearizable is False


def simulated_history(seed: int, clients: int = 5, ops_per_client: int = 40) -> list:
    """A history made by running operations on a real register at random instants inside
    random call/return intervals: linearizable by construction. Some outcomes are dropped
    (unknown), as a client that timed out would."""
    rng = random.Random(seed)
    value, ops, counter = None, [], 0
    events = []
    for c in range(clients):
        t = rng.random()
        for _ in range(ops_per_client):
            call = t + rng.random()
            point = call + rng.random()
            ret = point + rng.random()
            events.append((point, c, call, ret))
            t = ret
    for point, c, call, ret in sorted(events):
        kind = rng.choice(["read", "write", "cas"])
        if kind == "read":
            op = r(c, call, ret, value)
        elif kind == "write":
            counter += 1
            op = w(c, call, ret, f"v{counter}")
            value = op.args[0]
        else:
            counter += 1
            expected = value if rng.random() < 0.6 else "nope"
            op = cas(c, call, ret, expected, f"v{counter}", expected == value)
            if expected == value:
                value = op.args[1]
        if op.kind != "read" and rng.random() < 0.05:
            op.ret, op.output = INF, None
        ops.append(op)
    return ops


@pytest.mark.parametrize("seed", range(20))
def test_random_linearizable_histories_pass(seed):
    assert check_single(simulated_history(seed)).linearizable is True


@pytest.mark.parametrize("seed", range(20))
def test_the_same_histories_ending_in_a_stale_read_fail(seed):
    """After everything, a write completes and then a read returns a value an acknowledged
    operation wrote earlier: only an operation with an unknown outcome could still change the
    value, and none of them wrote that one."""
    ops = simulated_history(seed)
    end = max(o.ret for o in ops if not o.unknown)
    known_values = [o.args[-1] for o in sorted(ops, key=lambda o: o.ret)
                    if not o.unknown and o.kind != "read" and (o.kind == "write" or o.output)]
    ops += [w(0, end + 1, end + 2, "last"), r(0, end + 3, end + 4, known_values[-1])]
    assert check_single(ops).linearizable is False
    ops[-1].output = "last"
    assert check_single(ops).linearizable is True


# ---- Locks, fencing, the set, the watch -------------------------------------------------------

def test_holds_that_touch_do_not_overlap():
    holds = [Hold("l", 1, 10, 1, 0.0, 4.0), Hold("l", 2, 11, 2, 4.0, 6.0)]
    assert overlapping_holds(holds) == []


def test_two_holders_at_once_are_found():
    holds = [Hold("l", 1, 10, 1, 0.0, 5.94, "refused"), Hold("l", 2, 11, 2, 4.44, 6.0),
             Hold("other", 3, 12, 1, 4.5, 5.0)]
    violations = overlapping_holds(holds)
    assert len(violations) == 1 and "1.500 s of two holders" in violations[0]
    assert "until 5.940 (then: refused)" in violations[0]     # what ended the first hold


def test_a_hold_that_outlasts_the_next_one_is_still_compared():
    holds = [Hold("l", 1, 10, 1, 0.0, 10.0), Hold("l", 1, 10, 1, 1.0, 2.0),
             Hold("l", 2, 11, 2, 5.0, 6.0)]
    assert len(overlapping_holds(holds)) == 1


def test_a_grant_received_after_the_lease_ran_out_is_no_hold():
    """Session 10's lease ran out at 11.7; a replica that was behind answered its wait with
    generation 1 at 12.8, after generation 2 had gone to session 11 (fault_suite, seed
    1581562614 at 5 replicas)."""
    holds = [Hold("l", 2, 11, 2, 11.8, 15.5, "release"), Hold("l", 1, 10, 1, 12.8, 11.7)]
    assert overlapping_holds(holds) == []
    holds[1].end = 12.9                   # had the lease lasted past the grant, it is two holders
    assert len(overlapping_holds(holds)) == 1


def test_fencing_in_order_passes_and_a_stale_accepted_write_fails():
    grants = [Grant("l", 1, 0.0), Grant("l", 2, 5.0)]
    good = [FencedWrite("l", 1, 1, 1.0, True, 10), FencedWrite("l", 1, 1, 6.0, False),
            FencedWrite("l", 2, 2, 6.0, True, 12)]
    assert fencing_violations(good, grants) == []
    stale = good + [FencedWrite("l", 1, 1, 7.0, True, 13)]
    violations = fencing_violations(stale, grants)
    assert any("stale holder" in v for v in violations)
    assert any("after one with generation 2" in v for v in violations)


def test_set_loses_nothing_acknowledged():
    assert set_violations({"a", "b"}, {"c"}, {"a", "b"}) == []
    assert set_violations({"a", "b"}, {"c"}, {"a", "b", "c"}) == []
    assert "missing" in set_violations({"a", "b"}, set(), {"a"})[0]
    assert "nobody added" in set_violations({"a"}, set(), {"a", "z"})[0]


def test_watch_in_order_with_everything_passes():
    writes = {"1": ("k", 3), "2": ("k", 5), "3": ("j", None)}
    events = [WatchEvent(3, "put", "k", "1"), WatchEvent(5, "put", "k", "2"),
              WatchEvent(6, "put", "j", "3")]
    assert watch_violations(events, [(1, 6)], writes, [("k", "2", 5)]) == []


@pytest.mark.parametrize("events, reads, expected", [
    ([WatchEvent(5, "put", "k", "2"), WatchEvent(3, "put", "k", "1")], [], "out of order"),
    ([WatchEvent(3, "put", "k", "1"), WatchEvent(3, "put", "k", "1"),
      WatchEvent(5, "put", "k", "2")], [], "twice"),
    ([WatchEvent(5, "put", "k", "2")], [], "missing from the stream"),
    ([WatchEvent(3, "put", "k", "1"), WatchEvent(5, "put", "k", "2"),
      WatchEvent(6, "put", "k", "zz")], [], "nobody wrote"),
    ([WatchEvent(3, "put", "k", "1"), WatchEvent(5, "put", "k", "2")], [("k", "9", 4)],
     "a read saw"),
])
def test_watch_faults_are_found(events, reads, expected):
    writes = {"1": ("k", 3), "2": ("k", 5), "9": ("k", None)}
    violations = watch_violations(events, [(1, 6)], writes, reads)
    assert any(expected in v for v in violations), violations


def test_watch_holes_left_by_compaction_are_not_gaps():
    writes = {"1": ("k", 3), "2": ("k", 5)}
    assert watch_violations([WatchEvent(5, "put", "k", "2")], [(5, 6)], writes, []) == []
