#!/usr/bin/env python3
"""The service benchmark (issue 12): Voltlock's HTTP/JSON API, side by side in one run with the
daemon of another build (--old, e.g. main's) and etcd 3.4 (Debian's etcd-server: 3 members on
loopback, data on tmpfs), all driven by the same closed-loop client on kept-alive connections
(build/vl_http_load): put, linearizable get, stale (serializable) get, lock+unlock uncontended,
and (Voltlock only) keepalive and a linearizable read of a held lock (lock_read), at 1/16/64/256
clients spread over the three replicas. Points are interleaved (new, old, etcd
for each workload and client count), so a noisy machine hurts all three alike. Needs root.

    sudo .venv/bin/python bench/service.py --old /work/base/voltlockd --seconds 3
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from cell import Cell  # noqa: E402

LOAD = os.path.join(REPO, "build", "vl_http_load")
# Workloads with no etcd twin here: a session's keepalive (etcd's is a gRPC stream), and a
# linearizable read of a held lock's state.
VOLTLOCK_ONLY = ("keepalive", "lock_read")


def run_load(namespace, targets, system, workload, clients, seconds) -> dict:
    argv = [LOAD, "--targets", ",".join(targets), "--clients", str(clients), "--seconds",
            str(seconds), "--workload", workload, "--system", system]
    if namespace:
        argv = ["ip", "netns", "exec", namespace] + argv
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-300:]}
    return json.loads(done.stdout)


class Etcd:
    """Three etcd members on 127.0.0.1, data on tmpfs (/dev/shm)."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="vl-bench-etcd-", dir="/dev/shm")
        self.procs = []
        self.clients = [f"127.0.0.1:{23790 + i}" for i in range(3)]

    def __enter__(self):
        cluster = ",".join(f"e{i}=http://127.0.0.1:{23800 + i}" for i in range(3))
        for i in range(3):
            log = open(os.path.join(self.root, f"e{i}.log"), "w")
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", f"e{i}", "--data-dir", os.path.join(self.root, f"e{i}"),
                 "--listen-client-urls", f"http://{self.clients[i]}",
                 "--advertise-client-urls", f"http://{self.clients[i]}",
                 "--listen-peer-urls", f"http://127.0.0.1:{23800 + i}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{23800 + i}",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new",
                 "--initial-cluster-token", "vl-bench"],
                stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.clients[0]}/health", timeout=1) as r:
                    if json.loads(r.read()).get("health") == "true":
                        return self
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"etcd did not become healthy; logs in {self.root}")

    def __exit__(self, *exc):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)
        return False


def cell_targets(cell: Cell, through: str = "all") -> list:
    return [f"{r['ip']}:{r['http_port']}" for i, r in enumerate(cell.replicas)
            if through == "all" or i != cell.leader]


def cell_pids(cell: Cell) -> list:
    with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
        return [r["process"]["pid"] for r in json.load(f)["replicas"]]


def cpu_seconds(pids) -> float:
    """utime + stime of these processes, all their threads."""
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def forwarding_counters(namespace, targets) -> dict:
    """The forwarding counters of /v1/cluster's api, summed over the replicas."""
    totals = {}
    for target in targets:
        argv = ["curl", "-s", "--max-time", "5", f"http://{target}/v1/cluster"]
        done = subprocess.run(["ip", "netns", "exec", namespace] + argv, capture_output=True,
                              text=True)
        try:
            api = json.loads(done.stdout)["api"]
        except (ValueError, KeyError):
            continue
        for name in ("forwarded", "forwarded_as_requests", "request_retransmits",
                     "request_fallbacks", "keepalives_as_requests", "reads_at_commit_point"):
            if name in api:
                totals[name] = totals.get(name, 0) + api[name]
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,16,64,256")
    parser.add_argument("--workloads", default="put,get,stale_get,lock")
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--old", help="another voltlockd to measure side by side (main's)")
    parser.add_argument("--no-etcd", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--through", choices=("all", "followers"), default="all",
                        help="spread the clients over all replicas, or over the followers only "
                             "(every op forwarded)")
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    workloads = args.workloads.split(",")

    systems = {}
    cells = []
    try:
        new = Cell(replicas=3, voltlockd=os.path.join(REPO, "build", "voltlockd"))
        new.up()
        cells.append(new)
        systems["new"] = (new.endpoints["client_namespace"], cell_targets(new, args.through),
                          "voltlock",
                          cell_pids(new))
        leader_pids = {"new": cell_pids(new)[new.leader]}
        if args.old:
            old = Cell(replicas=3, voltlockd=args.old)
            old.up()
            cells.append(old)
            systems["old"] = (old.endpoints["client_namespace"], cell_targets(old, args.through),
                              "voltlock",
                              cell_pids(old))
            leader_pids["old"] = cell_pids(old)[old.leader]
        etcd = None
        if not args.no_etcd and shutil.which("etcd"):
            etcd = Etcd().__enter__()
            systems["etcd"] = (None, etcd.clients, "etcd", [p.pid for p in etcd.procs])
        results = []
        for workload in workloads:
            for n in clients:
                row = {"workload": workload, "clients": n}
                for name, (namespace, targets, system, pids) in systems.items():
                    if system == "etcd" and workload in VOLTLOCK_ONLY:
                        continue
                    leader = [leader_pids[name]] if name in leader_pids else []
                    counted = system == "voltlock"
                    forwarding_before = forwarding_counters(namespace, targets) if counted else {}
                    cpu_before = cpu_seconds(pids)
                    leader_before = cpu_seconds(leader)
                    row[name] = run_load(namespace, targets, system, workload, n, args.seconds)
                    cpu = cpu_seconds(pids) - cpu_before
                    leader_cpu = cpu_seconds(leader) - leader_before
                    if row[name].get("ops"):  # CPU of all three servers per op, setup included
                        row[name]["server_cpu_us_per_op"] = round(cpu * 1e6 / row[name]["ops"])
                        if leader:  # and of the leader alone (the one that does not scale out)
                            row[name]["leader_cpu_us_per_op"] = round(
                                leader_cpu * 1e6 / row[name]["ops"])
                    if counted:  # how the followers' ops reached the leader in this point
                        after = forwarding_counters(namespace, targets)
                        row[name]["forwarding"] = {k: v - forwarding_before.get(k, 0)
                                                   for k, v in after.items()}
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for c in cells:
            c.down(missing_ok=True)
        if "etcd" in systems and etcd:
            etcd.__exit__(None, None, None)

    names = list(systems)
    header = "| workload | clients | " + " | ".join(
        f"{n} ops/s (p50 ms, p99 ms, CPU µs/op, leader CPU µs/op)" for n in names)
    ratios = [f"new/{n}" for n in names if n != "new"]
    print(header + " | " + " | ".join(ratios) + " |")
    print("|---|---|" + "---|" * (len(names) + len(ratios)))
    for row in results:
        cells_text = []
        for n in names:
            r = row[n]
            cells_text.append("error" if "error" in r else
                              f"{r['ops_per_s']:,.0f} ({r['p50_us'] / 1000:.2f}, "
                              f"{r['p99_us'] / 1000:.1f}, {r.get('server_cpu_us_per_op', '-')}, "
                              f"{r.get('leader_cpu_us_per_op', '-')})")
        ratio_text = []
        for n in names:
            if n == "new":
                continue
            a, b = row["new"].get("ops_per_s"), row[n].get("ops_per_s")
            ratio_text.append(f"{a / b:.2f}" if a and b else "-")
        print(f"| {row['workload']} | {row['clients']} | " + " | ".join(cells_text) + " | " +
              " | ".join(ratio_text) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
