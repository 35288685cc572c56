"""A linearizability checker for per-key register histories (Wing & Gong's search with Lowe's
memoisation, as in knossos and porcupine), checked one key at a time: a history is
linearizable iff each key's sub-history is (Herlihy & Wing's locality; P-compositionality).

An operation whose outcome the client never learned (a timeout, a reset connection, a 503 after
a write) has return time infinity: it may take effect at any point after its call, or never.
Its output is None and the model accepts it in every state.

The register model follows the KV API (docs/api.md): every written value is unique, so a
`prev_revision` compare-and-set is a compare on the value that revision wrote (None: absent).

    ops = [Operation(client=1, call=0.0, ret=1.0, kind="write", args=("a",)),
           Operation(client=2, call=0.5, ret=2.0, kind="read", output="a")]
    check(ops).linearizable      # True
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass
class Operation:
    client: int
    call: float
    ret: float                 # math.inf: the outcome is unknown
    kind: str                  # "read", "write", "cas"
    args: tuple = ()           # write: (value,); cas: (expected value or None, new value)
    output: object = None      # read: the value (None: absent); cas: True/False; unknown: None
    key: str = ""

    @property
    def unknown(self) -> bool:
        return self.ret == math.inf


def register_step(state, op: Operation):
    """(accepted, next state) of one register operation applied to `state` (the value, or
    None while the key is absent)."""
    if op.kind == "read":
        if op.unknown:
            return True, state
        return op.output == state, state
    if op.kind == "write":
        return True, op.args[0]
    if op.kind == "cas":
        expected, new = op.args
        matches = state == expected
        if op.unknown:                 # it applied if it could; if not, it changed nothing
            return True, new if matches else state
        if op.output:
            return matches, new
        return not matches, state
    raise ValueError(f"unknown operation kind {op.kind!r}")


@dataclass
class Result:
    linearizable: bool | None      # None: the search ran out of time
    ops: int
    explored: int = 0
    # For a violation: the operations that could not be placed, at the deepest point reached.
    stuck_at: list = field(default_factory=list)


class _Entry:
    __slots__ = ("op_id", "is_call", "time", "match", "prev", "next")

    def __init__(self, op_id: int, is_call: bool, time_: float):
        self.op_id, self.is_call, self.time = op_id, is_call, time_
        self.match = self.prev = self.next = None


def _entries(ops: list) -> _Entry:
    """A doubly linked list of call and return events in time order, behind a sentinel head.
    At equal times calls come first: the operations then count as concurrent, which never
    makes a linearizable history look like a violation."""
    events = []
    for i, op in enumerate(ops):
        call, ret = _Entry(i, True, op.call), _Entry(i, False, op.ret)
        call.match = ret
        events += [call, ret]
    events.sort(key=lambda e: (e.time, 0 if e.is_call else 1))
    head = _Entry(-1, False, -math.inf)
    prev = head
    for e in events:
        prev.next, e.prev = e, prev
        prev = e
    return head


def _lift(entry: _Entry) -> None:
    """Takes a call and its return out of the list."""
    entry.prev.next = entry.next
    if entry.next:
        entry.next.prev = entry.prev
    ret = entry.match
    ret.prev.next = ret.next
    if ret.next:
        ret.next.prev = ret.prev


def _unlift(entry: _Entry) -> None:
    ret = entry.match
    ret.prev.next = ret
    if ret.next:
        ret.next.prev = ret
    entry.prev.next = entry
    if entry.next:
        entry.next.prev = entry


def _interchangeable_groups(ops: list) -> list:
    """For each operation, its place in a group of interchangeable ones, or None. Operations
    with unknown outcomes and equal kind and arguments have the same effect, the same return
    (infinity), and differ only in when they were called: linearizing them in call order loses
    no linearization (swap two and both still follow their calls), and keeps the search from
    trying every subset of them. Returns (group, index in it) per operation."""
    groups: dict = {}
    for i in sorted(range(len(ops)), key=lambda i: ops[i].call):
        if ops[i].unknown:
            groups.setdefault((ops[i].kind, ops[i].args), []).append(i)
    places: list = [None] * len(ops)
    for number, members in enumerate(groups.values()):
        if len(members) > 1:
            for index, i in enumerate(members):
                places[i] = (number, index)
    return places


def check_single(ops: list, step=register_step, initial=None,
                 budget_s: float = 30.0) -> Result:
    """Wing & Gong's search: take the earliest calls in turn as the next linearization point
    while the model accepts them; a return event reached means the last choice was wrong, so
    backtrack. Lowe's cache skips a (set linearized, state) pair already explored."""
    if not ops:
        return Result(True, 0)
    head = _entries(ops)
    places = _interchangeable_groups(ops)
    linearized_in_group: dict = {}
    state = initial
    linearized = 0
    seen = set()
    stack = []
    entry = head.next
    explored = 0
    deepest, stuck_at = -1, []
    deadline = time.monotonic() + budget_s
    while head.next is not None:
        explored += 1
        if explored % 4096 == 0 and time.monotonic() > deadline:
            return Result(None, len(ops), explored)
        if entry.is_call:
            op = ops[entry.op_id]
            place = places[entry.op_id]
            if place is not None and linearized_in_group.get(place[0], 0) != place[1]:
                entry = entry.next          # an earlier-called twin goes first
                continue
            accepted, next_state = step(state, op)
            if accepted:
                next_linearized = linearized | (1 << entry.op_id)
                if (next_linearized, next_state) not in seen:
                    seen.add((next_linearized, next_state))
                    stack.append((entry, state))
                    state, linearized = next_state, next_linearized
                    if place is not None:
                        linearized_in_group[place[0]] = place[1] + 1
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:
            if len(stack) > deepest:
                deepest = len(stack)
                stuck_at = _pending_calls(head, ops, entry)
            if not stack:
                return Result(False, len(ops), explored, stuck_at)
            entry, state = stack.pop()
            linearized &= ~(1 << entry.op_id)
            if places[entry.op_id] is not None:
                linearized_in_group[places[entry.op_id][0]] = places[entry.op_id][1]
            _unlift(entry)
            entry = entry.next
    return Result(True, len(ops), explored)


def _pending_calls(head: _Entry, ops: list, until: _Entry) -> list:
    """The operations whose calls precede `until` and are not linearized yet: at a violation,
    those none of which fits next."""
    pending, e = [], head.next
    while e is not None and e is not until:
        if e.is_call:
            pending.append(ops[e.op_id])
        e = e.next
    if until is not None and not until.is_call:
        pending.append(ops[until.op_id])
    return pending


UNOBSERVED = "<a value nobody observed>"


def with_unobserved_values_merged(ops: list) -> list:
    """The same history, the values that unknown operations wrote and nobody observed (no read
    returned them, no compare-and-set expected them) replaced by one symbol. Such values are
    interchangeable in the model, so this changes no answer; it lets twins form (above)."""
    observed = {op.output for op in ops if op.kind == "read"}
    observed |= {op.args[0] for op in ops if op.kind == "cas"}
    merged = []
    for op in ops:
        if op.unknown and op.kind in ("write", "cas") and op.args[-1] not in observed:
            op = Operation(op.client, op.call, op.ret, op.kind, op.args[:-1] + (UNOBSERVED,),
                           op.output, op.key)
        merged.append(op)
    return merged


def check(ops: list, budget_s: float = 30.0) -> dict:
    """Checks each key's operations on its own; returns {key: Result}."""
    by_key: dict = {}
    for op in ops:
        if not (op.kind == "read" and op.unknown):   # a read with no answer constrains nothing
            by_key.setdefault(op.key, []).append(op)
    return {key: check_single(with_unobserved_values_merged(key_ops), budget_s=budget_s)
            for key, key_ops in by_key.items()}
