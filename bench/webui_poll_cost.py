#!/usr/bin/env python3
"""What the web UI's cell page costs the cell (needs root): N open tabs, each polling once a
second, on a 3-replica namespace cell. For each endpoint a tab could poll, the CPU time the
leader's and the polled follower's voltlockd spend per second, against the same cell idle, and
each poll's latency. Prints one JSON report.

    sudo VOLTLOCKD=build/voltlockd .venv/bin/python bench/webui_poll_cost.py [--tabs 10]
"""
import argparse
import json
import os
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from api import Client  # noqa: E402
from cell import Cell  # noqa: E402


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_of(cell: Cell, replica: int) -> int:
    with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
        return json.load(f)["replicas"][replica]["process"]["pid"]


def measure(cell, pids, tabs, replica, path, seconds) -> dict:
    """`tabs` threads each GET `path` at `replica` once a second for `seconds`."""
    stop = time.monotonic() + seconds
    latencies, errors = [], [0]
    lock = threading.Lock()

    def tab(offset):
        client = Client(cell)
        next_poll = time.monotonic() + offset
        while next_poll < stop:
            time.sleep(max(0.0, next_poll - time.monotonic()))
            started = time.monotonic()
            try:
                ok = client(replica, "GET", path).status == 200
            except OSError:
                ok = False
            with lock:
                latencies.append(time.monotonic() - started)
                errors[0] += not ok
            next_poll += 1.0
        client.close()

    before = {r: cpu_seconds(p) for r, p in pids.items()}
    threads = [threading.Thread(target=tab, args=(i / max(tabs, 1),)) for i in range(tabs)]
    for t in threads:
        t.start()
    if not threads:
        time.sleep(seconds)
    for t in threads:
        t.join()
    used = {f"r{r}_cpu_percent": round(100 * (cpu_seconds(p) - before[r]) / seconds, 2)
            for r, p in pids.items()}
    result = {"tabs": tabs, "replica": replica, "path": path, **used, "polls": len(latencies),
              "errors": errors[0]}
    if latencies:
        ms = sorted(x * 1000 for x in latencies)
        result.update(p50_ms=round(ms[len(ms) // 2], 2), p99_ms=round(ms[int(len(ms) * 0.99) - 1], 2))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tabs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    with Cell(replicas=3) as cell:
        leader = cell.leader
        follower = next(r for r in range(3) if r != leader)
        pids = {leader: pid_of(cell, leader), follower: pid_of(cell, follower)}
        report = {"leader": leader, "follower": follower, "runs": [
            measure(cell, pids, 0, leader, "", args.seconds),
            measure(cell, pids, args.tabs, follower, "/v1/cluster/replicas", args.seconds),
            measure(cell, pids, args.tabs, leader, "/v1/cluster/replicas", args.seconds),
            measure(cell, pids, args.tabs, leader, "/v1/cluster", args.seconds),
        ]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
