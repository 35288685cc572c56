"""The fault suite's checks other than linearizability: one holder at a time by the documented
lease rule, fencing, the set workload and the watch stream. Each takes plain records and returns
a list of violations (strings); an empty list means the check passed.

The lease rule (docs/leases.md, "The client's lease"; docs/api.md): a client counts its lease
from when it *sent* the keepalive (or the request that created the session) that was answered,
for one TTL on its own clock.
A client holds an exclusive lock from when it received the grant until it sends the release,
learns that its session is gone, or its lease runs out, whichever is first. A grant received
after the lease ran out is no hold at all (a replica that was behind may answer a wait with a
grant the log has since ended, the session having expired).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Hold:
    lock: str
    client: int
    session: int
    generation: int
    start: float          # the grant was received
    end: float            # release sent, session found gone, or the lease ran out
    ended_by: str = "lease"   # which of those came first: lease, release, gone, refused


@dataclass
class FencedWrite:
    lock: str
    client: int
    generation: int
    call: float
    accepted: bool | None     # None: the outcome is unknown
    revision: int = 0         # of an accepted write


@dataclass
class Grant:
    lock: str
    generation: int
    received: float


def overlapping_holds(holds: list) -> list:
    """Two clients holding one exclusive lock at the same moment."""
    violations = []
    by_lock: dict = {}
    for h in holds:
        if h.end > h.start:
            by_lock.setdefault(h.lock, []).append(h)
    for lock, hs in by_lock.items():
        hs = sorted(hs, key=lambda h: h.start)
        latest_end = None          # the hold that reaches furthest so far
        for h in hs:
            if latest_end and latest_end.end > h.start and latest_end.session != h.session:
                violations.append(
                    f"lock {lock}: session {latest_end.session} (generation "
                    f"{latest_end.generation}) held it until {latest_end.end:.3f} (then: "
                    f"{latest_end.ended_by}), session {h.session} was granted it (generation "
                    f"{h.generation}) at "
                    f"{h.start:.3f}: {latest_end.end - h.start:.3f} s of two holders")
            if latest_end is None or h.end > latest_end.end:
                latest_end = h
    return violations


def fencing_violations(writes: list, grants: list) -> list:
    """Writes guarded by a sequencer: accepted ones carry non-decreasing generations in revision
    order, and none is accepted from a holder whose generation was superseded by a grant the
    cell had already announced when the write was sent."""
    violations = []
    accepted = sorted((w for w in writes if w.accepted), key=lambda w: w.revision)
    by_lock: dict = {}
    for w in accepted:
        previous = by_lock.get(w.lock)
        if previous and w.generation < previous.generation:
            violations.append(
                f"lock {w.lock}: a write with generation {w.generation} accepted at revision "
                f"{w.revision}, after one with generation {previous.generation} at revision "
                f"{previous.revision}")
        if not previous or w.generation >= previous.generation:
            by_lock[w.lock] = w
    for w in accepted:
        newer = [g for g in grants
                 if g.lock == w.lock and g.generation > w.generation and g.received < w.call]
        if newer:
            g = min(newer, key=lambda g: g.received)
            violations.append(
                f"lock {w.lock}: a write by a stale holder (generation {w.generation}) sent at "
                f"{w.call:.3f} was accepted (revision {w.revision}); generation {g.generation} "
                f"had been granted at {g.received:.3f}")
    return violations


def set_violations(acknowledged: set, unknown: set, final: set) -> list:
    """Every acknowledged add is present at the end; nothing is there that nobody added."""
    violations = []
    lost = sorted(acknowledged - final)
    if lost:
        violations.append(f"set: {len(lost)} acknowledged adds missing at the end, e.g. {lost[:5]}")
    phantom = sorted(final - acknowledged - unknown)
    if phantom:
        violations.append(f"set: {len(phantom)} elements nobody added, e.g. {phantom[:5]}")
    return violations


@dataclass
class WatchEvent:
    revision: int
    type: str             # "put" or "delete"
    key: str
    value: str | None


def watch_violations(events: list, covered: list, writes: dict, reads: list) -> list:
    """The watch stream against what clients did.

    events: WatchEvent in the order received, over every resumed stream.
    covered: (first, last) revision ranges the streams covered completely (a resume that was
        answered `compacted` leaves a hole between two ranges).
    writes: value -> (key, revision): every value a client wrote, revision None if the outcome
        of the write is unknown (values are unique).
    reads: (key, value, mod_revision) of reads that succeeded.
    """
    violations = []

    def is_covered(revision: int) -> bool:
        return any(first <= revision <= last for first, last in covered)

    seen: dict = {}
    last_revision = 0
    for e in events:
        if e.revision < last_revision:
            violations.append(f"watch: revision {e.revision} after {last_revision}: out of order")
        last_revision = max(last_revision, e.revision)
        if (e.revision, e.key) in seen:
            violations.append(f"watch: {e.key} at revision {e.revision} delivered twice")
        seen[(e.revision, e.key)] = e
        if e.type == "put":
            written = writes.get(e.value)
            if written is None or written[0] != e.key:
                violations.append(f"watch: {e.key}={e.value!r} at revision {e.revision}: "
                                  "nobody wrote that")
            elif written[1] is not None and written[1] != e.revision:
                violations.append(f"watch: {e.key}={e.value!r} at revision {e.revision}, but "
                                  f"the write was acknowledged with revision {written[1]}")
    for value, (key, revision) in writes.items():
        if revision is not None and is_covered(revision):
            e = seen.get((revision, key))
            if e is None or e.value != value:
                violations.append(f"watch: the acknowledged write {key}={value!r} at revision "
                                  f"{revision} is missing from the stream")
    for key, value, mod_revision in reads:
        if value is not None and is_covered(mod_revision):
            e = seen.get((mod_revision, key))
            if e is None or e.value != value:
                violations.append(f"watch: a read saw {key}={value!r} at revision "
                                  f"{mod_revision}; the stream has {e}")
    return violations
