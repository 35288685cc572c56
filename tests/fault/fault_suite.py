#!/usr/bin/env python3
"""Voltlock's Jepsen-style fault suite (docs/fault-testing.md): concurrent clients on registers,
locks with leases and fencing, a set and a watch stream, against a real cell while a nemesis
kills, pauses, partitions, slows, power-cuts it and steps its clocks; then every history is
checked.

    sudo .venv/bin/python tests/fault/fault_suite.py --replicas 3 --seconds 600 --nemeses all
    sudo .venv/bin/python tests/fault/fault_suite.py --seed 7 --nemeses kill,pause --json out.json

Exit status 0: no violation and the cell came back after every fault; 1: a violation; 2: the
run itself broke (a worker hit an answer the API does not define, the rig failed).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

import steppable_clocks  # noqa: E402
from cell import Cell, unique_name, voltlockd_path  # noqa: E402
from checks import (fencing_violations, overlapping_holds, set_violations,  # noqa: E402
                    watch_violations)
from clients import Recorder, ReplicaClient  # noqa: E402
from linearizability import check  # noqa: E402
from nemesis import CLOCK_KINDS, KINDS, RECOVERY_TIMEOUT_S, Nemesis  # noqa: E402
from workloads import (PREFIX, LockWorker, RegisterWorker, SetWorker,  # noqa: E402
                       WatchWorker)

REGISTER_KEYS = ["a", "b", "c", "d"]
LOCKS = ["l0", "l1"]
SETTLE_TIMEOUT_S = 60.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=3, choices=[3, 5, 7])
    p.add_argument("--seconds", type=float, default=60.0, help="how long the nemesis runs")
    p.add_argument("--seed", type=int, default=None, help="default: random, printed")
    p.add_argument("--nemeses", default="all",
                   help=f"comma-separated, or all: {','.join(KINDS)}")
    p.add_argument("--durability", choices=["sync", "snapshot"], default="sync",
                   help="power-cut needs sync: snapshot mode documents losing writes after the "
                        "last snapshot when the whole cell dies")
    p.add_argument("--electrode", choices=["on", "off"], default="off")
    p.add_argument("--snapshot-every-ops", type=int, default=None,
                   help="the replicas' snapshot_every_ops (default: the daemon's, 100,000): a "
                        "few thousand puts snapshot writes among the faults")
    p.add_argument("--register-workers", type=int, default=6)
    p.add_argument("--lock-workers", type=int, default=4)
    p.add_argument("--set-workers", type=int, default=2)
    p.add_argument("--ttl-ms", type=int, default=4000, help="lock workers' session TTL")
    p.add_argument("--json", help="write the report here as JSON too")
    args = p.parse_args(argv)
    args.nemeses = KINDS if args.nemeses == "all" else args.nemeses.split(",")
    unknown = set(args.nemeses) - set(KINDS)
    if unknown:
        p.error(f"unknown nemeses {sorted(unknown)}; known: {', '.join(KINDS)}")
    if args.durability == "snapshot" and "power-cut" in args.nemeses:
        p.error("power-cut needs --durability sync (snapshot mode may lose acknowledged writes "
                "when every replica dies at once; README)")
    clock_kinds = [k for k in CLOCK_KINDS if k in args.nemeses]
    if clock_kinds and not steppable_clocks.available():
        p.error(f"{', '.join(clock_kinds)} needs {steppable_clocks.LIBFAKETIME} "
                "(scripts/install-deps)")
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    return args


def unavailability(successes: list, faults: list, end: float) -> list:
    """Per fault, the longest stretch between its injection and the next fault's (or the end)
    in which no log operation of any client succeeded."""
    successes = sorted(successes)
    figures = []
    for i, fault in enumerate(faults):
        window_end = faults[i + 1].start if i + 1 < len(faults) else end
        inside = [s for s in successes if fault.start <= s < window_end]
        points = [fault.start] + inside + [window_end]
        figures.append(max(b - a for a, b in zip(points, points[1:])))
    return figures


def read_all(client: ReplicaClient, prefix: str) -> dict:
    """Every key under prefix -> value, read through the log page by page."""
    found, after = {}, None
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        query = "prefix=true" + (f"&after={after}" if after else "")
        answer = client.request("GET", f"/v1/kv/{prefix}?{query}")
        if answer.status != 200:
            if time.monotonic() > deadline:
                raise AssertionError(f"listing {prefix} kept failing: {answer}")
            time.sleep(0.2)
            continue
        for kv in answer.body["kvs"]:
            found[kv["key"]] = kv["value"]
        if not answer.body["more"]:
            return found
        after = answer.body["next_after"]


def lock_traces(locks: list, overlaps: list) -> list:
    """What the lock workers of the sessions named in `overlaps` sent and heard, as lines."""
    sessions = {int(s) for v in overlaps for s in re.findall(r"session (\d+)", v)}
    lines = []
    for w in locks:
        for sent, received, request, replica, status, session, body in w.trace:
            if session in sessions or (request == "create" and isinstance(body, dict)
                                       and body.get("session") in sessions):
                lines.append(f"{sent:8.3f} {received:8.3f} worker {w.number} session {session} "
                             f"{request} at r{replica}: {status} {json.dumps(body)}")
    return sorted(lines)


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    stop_workers, stop_nemesis, stop_watch = (threading.Event() for _ in range(3))
    writes: dict = {}
    report: dict = {"seed": args.seed, "replicas": args.replicas, "seconds": args.seconds,
                    "nemeses": args.nemeses, "durability": args.durability,
                    "electrode": args.electrode, "snapshot_every_ops": args.snapshot_every_ops,
                    "violations": [], "errors": []}
    clocks = (steppable_clocks.SteppableClocks(voltlockd_path())
              if set(CLOCK_KINDS) & set(args.nemeses) else None)
    with Cell(replicas=args.replicas, name=unique_name("fs"), electrode=args.electrode,
              durability=args.durability, timeout=60, snapshot_every_ops=args.snapshot_every_ops,
              voltlockd=clocks.voltlockd if clocks else None) as cell:
        recorder = Recorder(time.monotonic())
        endpoints = cell.endpoints

        def seed() -> int:
            return rng.randrange(1 << 31)

        def common(i: int) -> tuple:
            return (i, endpoints, recorder, stop_workers, seed())

        registers = [RegisterWorker(*common(i), keys=REGISTER_KEYS, writes=writes)
                     for i in range(args.register_workers)]
        sets = [SetWorker(*common(100 + i), writes=writes) for i in range(args.set_workers)]
        locks = [LockWorker(*common(200 + i), lock=LOCKS[i % len(LOCKS)], ttl_ms=args.ttl_ms,
                            writes=writes) for i in range(args.lock_workers)]
        watch = WatchWorker(endpoints, stop_watch, seed())
        nemesis = Nemesis(cell, args.nemeses, random.Random(seed()), recorder.now, stop_nemesis,
                          lease_ttl_s=args.ttl_ms / 1000, clocks=clocks)
        workers = registers + sets + locks
        for w in workers + [watch]:
            w.start()
        nemesis.start()
        stop_nemesis.wait(args.seconds)
        stop_nemesis.set()
        nemesis.join()
        nemesis.resume_all()
        end = recorder.now()
        cell_is_back = all(f.recovered is not None for f in nemesis.faults)
        if cell_is_back:
            cell.heal()
            cell_is_back = nemesis.leader(timeout=SETTLE_TIMEOUT_S) is not None
        stop_workers.set()
        for w in workers:
            w.join(timeout=30)
        lease_overlaps = overlapping_holds([h for w in locks for h in w.holds])
        if lease_overlaps:                # keep what the replicas logged of it
            report["lease_traces"] = lock_traces(locks, lease_overlaps)
        newest_write = max((rev for _, rev in writes.values() if rev is not None), default=0)
        if cell_is_back:
            final = ReplicaClient(endpoints, random.Random(seed()), 10.0)
            in_cell = read_all(final, PREFIX)
            final.close()
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while watch.last_complete() < newest_write and time.monotonic() < deadline:
                time.sleep(0.1)
        stop_watch.set()
        watch.close()
        watch.join(timeout=30)
        if not cell_is_back or lease_overlaps:    # keep what the replicas logged, for a look
            if not cell_is_back:
                cell.print_log_tails()
            report["logs"] = cell.endpoints["state_dir"]
            cell.down(keep_logs=True)

    for t in workers + [watch, nemesis]:
        if t.error is not None:
            report["errors"].append(f"{t.name}: {t.error!r}")
        elif t.is_alive():
            report["errors"].append(f"{t.name} did not stop")
    report["violations"] += nemesis.probe_failures
    for f in nemesis.faults:
        if f.recovered is None:
            report["violations"].append(f"{f.kind} of {f.target} at {f.start:.1f} s: no leader "
                                        f"within {RECOVERY_TIMEOUT_S:g} s of undoing it")
    report["unchecked"] = []
    if not cell_is_back:
        # Without a cell to read from, the final state is unknown: the set and the watch's
        # completeness cannot be checked (the lost cell is the violation reported).
        report["unchecked"] = ["set", "watch"]
        if all(f.recovered is not None for f in nemesis.faults):
            report["violations"].append(f"no leader within {SETTLE_TIMEOUT_S:g} s of the end")
    elif watch.last_complete() < newest_write:
        report["violations"].append(
            f"watch: the stream reached revision {watch.last_complete()} within "
            f"{SETTLE_TIMEOUT_S:g} s of the end, the newest acknowledged write is {newest_write}")

    ops = [op for w in registers for op in w.ops]
    for key, result in sorted(check(ops).items()):
        if result.linearizable is False:
            stuck = "; ".join(f"{o.kind}{o.args}->{o.output} by {o.client} "
                              f"[{o.call:.3f}, {o.ret:.3f}]" for o in result.stuck_at[:6])
            report["violations"].append(f"register {key}: not linearizable ({result.ops} ops); "
                                        f"none of these fits next: {stuck}")
        elif result.linearizable is None:
            report["errors"].append(f"register {key}: the linearizability search ran out of time "
                                    f"({result.ops} ops, {result.explored} steps)")
    report["violations"] += lease_overlaps
    report["violations"] += fencing_violations([f for w in locks for f in w.fenced],
                                               [g for w in locks for g in w.grants])
    acknowledged = set().union(*(w.acknowledged for w in sets)) if sets else set()
    unknown = set().union(*(w.unknown for w in sets)) if sets else set()
    if cell_is_back:
        in_set = {v for k, v in in_cell.items() if k.startswith(f"{PREFIX}set/")}
        report["violations"] += set_violations(acknowledged, unknown, in_set)
        reads = [r for w in registers for r in w.reads]
        report["violations"] += watch_violations(watch.events, watch.covered, writes, reads)

    def count(kind, outcome):
        return sum(1 for o in ops if o.kind == kind and outcome(o))
    report["ops"] = {
        "read": count("read", lambda o: True),
        "write ok": count("write", lambda o: not o.unknown),
        "write unknown": count("write", lambda o: o.unknown),
        "cas ok": count("cas", lambda o: o.output is True),
        "cas mismatch": count("cas", lambda o: o.output is False),
        "cas unknown": count("cas", lambda o: o.unknown),
        "lock grants": sum(w.acquires["granted"] for w in locks),
        "lock grants after the lease": sum(w.acquires["granted after the lease"] for w in locks),
        "lock busy": sum(w.acquires["busy"] for w in locks),
        "lock acquire unknown": sum(w.acquires["unknown"] for w in locks),
        "lock sessions given up": sum(w.sessions_given_up for w in locks),
        "fenced writes accepted": sum(1 for w in locks for f in w.fenced if f.accepted),
        "fenced writes refused": sum(1 for w in locks for f in w.fenced if f.accepted is False),
        "set adds ok": len(acknowledged),
        "set adds unknown": len(unknown),
        "watch events": len(watch.events),
        "watch resumes": watch.resumes,
        "watch compacted holes": watch.compacted_holes,
        "watch slow-reader cuts": watch.slow_reader_cuts,
    }
    figures = unavailability(recorder.successes, nemesis.faults, end)
    per_kind: dict = {}
    for fault, seconds in zip(nemesis.faults, figures):
        entry = per_kind.setdefault(fault.kind, {"count": 0, "longest_unavailable_s": 0.0})
        entry["count"] += 1
        entry["longest_unavailable_s"] = round(max(entry["longest_unavailable_s"], seconds), 2)
    report["faults"] = per_kind
    report["fault_log"] = [
        {"kind": f.kind, "target": f.target, "start": round(f.start, 2),
         "undone": round(f.undone, 2),
         "recovered": round(f.recovered, 2) if f.recovered is not None else None,
         "unavailable_s": round(s, 2)} for f, s in zip(nemesis.faults, figures)]
    return report


def print_report(report: dict, out=sys.stdout) -> None:
    print(f"fault suite: {report['replicas']} replicas, {report['seconds']:g} s, seed "
          f"{report['seed']}, durability {report['durability']}, electrode "
          f"{report['electrode']}", file=out)
    print("  operations:", file=out)
    for name, n in report.get("ops", {}).items():
        print(f"    {name:<26} {n:>7}", file=out)
    print("  faults (count, longest unavailability after it):", file=out)
    for kind, entry in sorted(report.get("faults", {}).items()):
        print(f"    {kind:<16} {entry['count']:>4}  {entry['longest_unavailable_s']:6.2f} s",
              file=out)
    if report.get("unchecked"):
        print(f"  not checked (no cell to read from): {', '.join(report['unchecked'])}", file=out)
    print(f"  violations: {len(report['violations'])}", file=out)
    for v in report["violations"]:
        print(f"    {v}", file=out)
    for e in report["errors"]:
        print(f"  error: {e}", file=out)
    if report.get("lease_traces"):
        print("  the lock clients of those sessions (sent, received, request, answer):", file=out)
        for line in report["lease_traces"]:
            print(f"    {line}", file=out)
    if report.get("logs"):
        print(f"  the replicas' logs are kept in {report['logs']}", file=out)
    print(f"  reproduce the schedule with --seed={report['seed']} "
          f"--replicas={report['replicas']} --nemeses={','.join(report['nemeses'])}", file=out)


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run(args)
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if report["errors"]:
        return 2
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
