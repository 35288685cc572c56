#!/usr/bin/env python3
"""The service benchmark (issue 12): Voltlock's HTTP/JSON API with Electrode off and on, side by
side in one run with etcd 3.4 (Debian's etcd-server) and ZooKeeper 3.8 (Debian's zookeeper), each
3 members on loopback with data on tmpfs, all driven by the same closed-loop discipline: N
clients, each one kept-alive connection (a ZooKeeper session) with one op outstanding, one
client thread (build/vl_http_load for Voltlock and etcd, build/vl_zk_load for ZooKeeper).

Workloads (one op; docs/benchmarks-service.md has each system's requests): put, get
(linearizable), stale_get, lock (acquire + release, uncontended), lock_one (acquire + release,
every client on one lock), at 1/16/64/256 clients, with the clients spread over all members
(--at all), all on the leader (--at leader) or spread over the followers (--at followers).
Points are interleaved (every system for one workload and client count, then the next), so a
noisy machine hurts all alike. In the same run, before any service starts, the replication
benchmark (bench/run replication, Electrode off and on) at the same client counts, so the
report can compare the API with the log under it. Ends with the issue's goals, MET or NOT MET.

Voltlock's cells run in network namespaces on a bridge (as the replication benchmark's, and as
Electrode needs), and one more with Electrode off on 127.0.0.1 (voltlock-off-lo), the path etcd
and ZooKeeper take: between namespaces every packet crosses two veth pairs and the bridge, which
the sender pays for, so that column is the like-for-like one against them.

    sudo python3 bench/service.py                      # everything (about 19 min)
    sudo python3 bench/service.py --smoke              # Voltlock only, 1 s points
    sudo python3 bench/service.py --at all --workloads put,get --clients 64

Needs root (network namespaces). Like scripts/start, it first installs what it needs
(scripts/install-deps --bench: etcd, ZooKeeper and its C client from Debian) and builds what it
runs (Release, in build/); --no-install measures the build there as it is. Every process,
namespace and tmpfs directory it makes is removed at the end, also on Ctrl-C, SIGTERM or an
error.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from cell import Cell  # noqa: E402

BUILD = os.path.join(REPO, "build")
HTTP_LOAD = os.path.join(BUILD, "vl_http_load")
ZK_LOAD = os.path.join(BUILD, "vl_zk_load")
ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
WORKLOADS = ("put", "get", "stale_get", "lock", "lock_one")
# Workloads only Voltlock runs (--workloads names them; not in the default): a session's
# keepalive (etcd's is a gRPC stream) and a linearizable read of a held lock's state.
VOLTLOCK_ONLY = ("keepalive", "lock_read")
PLACEMENTS = ("all", "leader", "followers")
DEFAULT_IO_THREADS = 0  # voltlockd's http_io_threads (server/shell/config.h)
NETWORKS = ("netns", "loopback")
LOOPBACK_SUFFIX = "-lo"  # a cell on 127.0.0.1, like etcd's and ZooKeeper's members


class Stopped(Exception):
    """SIGTERM or SIGHUP: unwind like Ctrl-C so every finally block cleans up."""


def install_and_build(peers: bool, zookeeper: bool) -> None:
    """As scripts/start does: Debian's packages (with --bench, the peers), then the programs
    this benchmark runs, in Release like scripts/test, so that a fresh clone measures as is."""
    install = [os.path.join(REPO, "scripts", "install-deps")] + (["--bench"] if peers else [])
    subprocess.run(install, check=True)
    subprocess.run(["cmake", "-S", REPO, "-B", BUILD, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
                   check=True, stdout=subprocess.DEVNULL)
    targets = ["voltlockd", "vl_http_load", "vl_loadgen", "vl_udp_floor"]
    subprocess.run(["cmake", "--build", BUILD, "--target", *targets,
                    *(["vl_zk_load"] if zookeeper else [])], check=True)


def stop_on_signal(signum, frame):
    raise Stopped(signal.Signals(signum).name)


def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not happen in {timeout:.0f} s")


def cpu_seconds(pids) -> float:
    """utime + stime of these processes, all their threads, and of the children they reaped
    (voltlockd encodes its snapshots in a forked child)."""
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")
    return total


def busy_cpus(seconds: float) -> float:
    """How many CPUs' worth of time the whole machine spent busy over the next `seconds`."""
    def sample():
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait
    total_before, idle_before = sample()
    time.sleep(seconds)
    total_after, idle_after = sample()
    total = max(total_after - total_before, 1)
    return (os.cpu_count() or 1) * (1 - (idle_after - idle_before) / total)


def wait_for_quiet(timeout: float = 10.0) -> float:
    """Waits (at most `timeout`) until the machine is nearly idle: a point must not pay for the
    work the one before it left behind (a cell's snapshots, etcd's compaction). Returns how
    long it waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout and busy_cpus(0.25) > 0.15:
        pass
    return round(time.monotonic() - started, 2)


def stop_processes(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class System:
    """One measured service: its members' addresses, their pids and which one leads."""

    def __init__(self, name: str, kind: str, members: list, pids: list, leader: int,
                 namespace: str | None = None):
        self.name, self.kind, self.members, self.pids = name, kind, members, pids
        self.leader, self.namespace = leader, namespace

    def targets(self, at: str) -> list:
        if at == "leader":
            return [self.members[self.leader]]
        if at == "followers":
            return [m for i, m in enumerate(self.members) if i != self.leader]
        return self.members

    def load_argv(self, workload: str, targets: list, clients: int, seconds: float,
                  lock_name: str) -> list:
        program = ZK_LOAD if self.kind == "zookeeper" else HTTP_LOAD
        argv = [program, "--targets", ",".join(targets), "--clients", str(clients),
                "--seconds", str(seconds), "--workload", workload, "--lock-name", lock_name]
        if self.kind != "zookeeper":
            argv += ["--system", self.kind]
        if self.namespace:
            argv = ["ip", "netns", "exec", self.namespace] + argv
        return argv

    def measure(self, workload: str, at: str, clients: int, seconds: float,
                lock_name: str) -> dict:
        argv = self.load_argv(workload, self.targets(at), clients, seconds, lock_name)
        leader_pid = [self.pids[self.leader]]
        settled_s = wait_for_quiet()
        cpu_before, leader_before = cpu_seconds(self.pids), cpu_seconds(leader_pid)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
        cpu = cpu_seconds(self.pids) - cpu_before
        leader_cpu = cpu_seconds(leader_pid) - leader_before
        if done.returncode != 0:
            return {"error": (done.stderr.strip() or done.stdout.strip())[-300:]}
        point = json.loads(done.stdout)
        point["settled_s"] = settled_s  # waited for a quiet machine first
        if point["ops"]:  # CPU of all members per op (their setup included), and the leader's
            point["cpu_us_per_op"] = round(cpu * 1e6 / point["ops"], 1)
            point["leader_cpu_us_per_op"] = round(leader_cpu * 1e6 / point["ops"], 1)
        return point


def voltlock_system(name: str, cell: Cell) -> System:
    with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
        pids = [r["process"]["pid"] for r in json.load(f)["replicas"]]
    members = [f"{r['ip']}:{r['http_port']}" for r in cell.replicas]
    return System(name, "voltlock", members, pids, cell.leader,
                  cell.endpoints["client_namespace"])


class Etcd:
    """Three etcd members on 127.0.0.1, data on tmpfs (/dev/shm)."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="vl-bench-etcd-", dir="/dev/shm")
        self.procs = []
        self.clients = [f"127.0.0.1:{23790 + i}" for i in range(3)]

    def restart(self) -> System:
        """A new cluster on empty data directories. etcd 3.4's contended lock stalls after a
        point with 256 waiters (16 clients on a fresh name: 159 ops/s before, 0-1 after, with
        every lease revoked; 1 client is not affected), so each lock_one point gets a new one."""
        stop_processes(self.procs)
        self.procs = []
        for name in os.listdir(self.root):
            shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)
        return self.start()

    def start(self) -> System:
        cluster = ",".join(f"e{i}=http://127.0.0.1:{23800 + i}" for i in range(3))
        for i in range(3):
            with open(os.path.join(self.root, f"e{i}.log"), "w") as log:
                self.procs.append(subprocess.Popen(
                    ["etcd", "--name", f"e{i}", "--data-dir", os.path.join(self.root, f"e{i}"),
                     "--listen-client-urls", f"http://{self.clients[i]}",
                     "--advertise-client-urls", f"http://{self.clients[i]}",
                     "--listen-peer-urls", f"http://127.0.0.1:{23800 + i}",
                     "--initial-advertise-peer-urls", f"http://127.0.0.1:{23800 + i}",
                     "--initial-cluster", cluster, "--initial-cluster-state", "new",
                     "--initial-cluster-token", "vl-bench"],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        leader = wait_until(self.leader, 30, f"etcd electing a leader (logs in {self.root})")
        return System("etcd", "etcd", self.clients, [p.pid for p in self.procs], leader - 1)

    def leader(self) -> int:
        """1 + the index of the member that says it leads (0: none yet)."""
        for i, address in enumerate(self.clients):
            try:
                request = urllib.request.Request(f"http://{address}/v3/maintenance/status",
                                                 data=b"{}", method="POST")
                with urllib.request.urlopen(request, timeout=1) as r:
                    status = json.loads(r.read())
            except OSError:
                continue
            if status.get("leader") and status["leader"] == status["header"]["member_id"]:
                return i + 1
        return 0

    def stop(self) -> None:
        stop_processes(self.procs)
        shutil.rmtree(self.root, ignore_errors=True)


class ZooKeeper:
    """Three ZooKeeper 3.8 servers (Debian's package) on 127.0.0.1, data on tmpfs (/dev/shm)."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="vl-bench-zk-", dir="/dev/shm")
        self.procs = []
        self.clients = [f"127.0.0.1:{21810 + i}" for i in range(3)]

    def start(self) -> System:
        servers = "".join(f"server.{i + 1}=127.0.0.1:{28880 + i}:{38880 + i}\n"
                          for i in range(3))
        for i in range(3):
            data = os.path.join(self.root, f"z{i}")
            os.makedirs(data)
            with open(os.path.join(data, "myid"), "w") as f:
                f.write(f"{i + 1}\n")
            config = os.path.join(self.root, f"z{i}.cfg")
            with open(config, "w") as f:
                # maxClientCnxns=0: 256 sessions from one address (the default allows 60).
                f.write(f"tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={data}\n"
                        f"clientPort={21810 + i}\nclientPortAddress=127.0.0.1\n"
                        "maxClientCnxns=0\nadmin.enableServer=false\n"
                        "4lw.commands.whitelist=srvr\n" + servers)
            with open(os.path.join(self.root, f"z{i}.log"), "w") as log:
                self.procs.append(subprocess.Popen(
                    ["java", "-Xms256m", "-Xmx512m", "-cp", ZK_CLASSPATH,
                     f"-Dzookeeper.log.dir={self.root}", "-Dzookeeper.root.logger=WARN,CONSOLE",
                     ZK_MAIN, config],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        leader = wait_until(self.leader, 60, f"ZooKeeper electing a leader (logs in {self.root})")
        return System("zookeeper", "zookeeper", self.clients, [p.pid for p in self.procs],
                      leader - 1)

    def mode(self, address: str) -> str:
        host, port = address.split(":")
        try:
            with socket.create_connection((host, int(port)), timeout=1) as s:
                s.sendall(b"srvr")
                answer = b""
                while chunk := s.recv(4096):
                    answer += chunk
        except OSError:
            return ""
        for line in answer.decode(errors="replace").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def leader(self) -> int:
        """1 + the index of the leader once every server serves (0: not yet)."""
        modes = [self.mode(a) for a in self.clients]
        if all(m in ("leader", "follower") for m in modes) and "leader" in modes:
            return modes.index("leader") + 1
        return 0

    def stop(self) -> None:
        stop_processes(self.procs)
        shutil.rmtree(self.root, ignore_errors=True)


def replication_bench(clients: list, seconds: float) -> dict:
    """bench/run replication at 3 replicas, Electrode off and on: {(mode, clients): point}."""
    with tempfile.NamedTemporaryFile(prefix="vl-bench-replication-", suffix=".json") as out, \
            tempfile.TemporaryFile(mode="w+") as errors:
        child = subprocess.Popen(
            [sys.executable, os.path.join(REPO, "bench", "run"), "replication", "--replicas", "3",
             "--clients", ",".join(map(str, clients)), "--seconds", str(seconds),
             "--modes", "off,on", "--json", out.name],
            stdout=subprocess.DEVNULL, stderr=errors, text=True, start_new_session=True)
        try:
            child.wait()
        except BaseException:
            # Interrupted: let bench/run take its cell down (its finally runs on SIGINT).
            child.send_signal(signal.SIGINT)
            child.wait(timeout=120)
            raise
        if child.returncode != 0:
            errors.seek(0)
            print(f"service: the replication benchmark failed:\n{errors.read()[-2000:]}",
                  file=sys.stderr)
            return {}
        with open(out.name) as f:
            runs = json.load(f)["runs"]
    return {(r["mode"], r["clients"]): r for r in runs}


# ---- the report ---------------------------------------------------------------------------

def fmt_ops(point: dict | None) -> str:
    if not point:
        return "-"
    return "error" if "error" in point else f"{point['ops_per_s']:,.0f}"


def ratio(a: dict | None, b: dict | None) -> float | None:
    if a and b and a.get("ops_per_s") and b.get("ops_per_s"):
        return a["ops_per_s"] / b["ops_per_s"]
    return None


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def report_table(results: list, names: list) -> list:
    voltlocks = [n for n in names if n.startswith("voltlock")]
    lines = ["| at | workload | clients | system | ops/s | p50 ms | p99 ms | CPU µs/op (all) | "
             "leader CPU µs/op | errors | vs etcd | vs ZooKeeper |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in results:
        for name in names:
            p = row.get(name)
            if not p:
                continue
            if "error" in p:
                lines.append(f"| {row['at']} | {row['workload']} | {row['clients']} | {name} | "
                             f"error: {p['error'][:80]} |||||||")
                continue
            vs = ["", ""]
            if name in voltlocks:
                vs = [fmt_ratio(ratio(p, row.get("etcd"))),
                      fmt_ratio(ratio(p, row.get("zookeeper")))]
            lines.append(
                f"| {row['at']} | {row['workload']} | {row['clients']} | {name} | "
                f"{fmt_ops(p)} | {p['p50_us'] / 1000:.2f} | {p['p99_us'] / 1000:.2f} | "
                f"{p.get('cpu_us_per_op', '-')} | {p.get('leader_cpu_us_per_op', '-')} | "
                f"{p['errors']} | {vs[0]} | {vs[1]} |")
    return lines


def goals(results: list, names: list, replication: dict) -> list:
    """The issue's goals, line by line, for each Voltlock column (clients spread over all)."""
    point = {(r["at"], r["workload"], r["clients"], n): r[n] for r in results for n in names
             if n in r and "error" not in r[n]}
    lines = []

    def verdict(ok: bool | None, text: str) -> None:
        mark = "NOT MEASURED" if ok is None else "MET" if ok else "NOT MET"
        lines.append(f"- {mark}: {text}")

    def get(name, workload, clients, at="all"):
        return point.get((at, workload, clients, name))

    for name in (n for n in names if n.startswith("voltlock")):
        mode = "on" if name.endswith("-on") else "off"
        where = "on 127.0.0.1" if name.endswith(LOOPBACK_SUFFIX) else "in network namespaces"
        lines.append(f"\n{name} (Electrode {mode}, {where}), clients spread over the replicas:")
        for workload in ("put", "get"):
            v = get(name, workload, 64)
            for other, times in (("etcd", 5), ("zookeeper", 3)):
                o = get(other, workload, 64)
                if not (v and o):
                    verdict(None, f"{workload} at 64 clients vs {other}")
                    continue
                r = v["ops_per_s"] / o["ops_per_s"]
                verdict(r >= times and v["p99_us"] <= o["p99_us"],
                        f"{workload} at 64 clients >= {times}x {other} with p99 at most theirs: "
                        f"{v['ops_per_s']:,.0f} vs {o['ops_per_s']:,.0f} ops/s = {r:.2f}x, "
                        f"p99 {v['p99_us'] / 1000:.2f} vs {o['p99_us'] / 1000:.2f} ms")
        v = get(name, "lock", 64)
        for other, times in (("etcd", 10), ("zookeeper", 5)):
            o = get(other, "lock", 64)
            if not (v and o):
                verdict(None, f"lock+unlock at 64 clients vs {other}")
                continue
            r = v["ops_per_s"] / o["ops_per_s"]
            verdict(r >= times, f"lock+unlock at 64 clients >= {times}x {other}: "
                                f"{v['ops_per_s']:,.0f} vs {o['ops_per_s']:,.0f} ops/s = {r:.2f}x")
        clients = sorted({c for (_, w, c, n) in point if n == name and w == "put"})
        for c in clients:
            v, rep = get(name, "put", c), replication.get((mode, c))
            if not rep:
                verdict(None, f"put at {c} clients >= half the replication benchmark")
                continue
            verdict(v["ops_per_s"] >= rep["ops_per_second"] / 2,
                    f"put at {c} clients >= half the replication benchmark's ops/s: "
                    f"{v['ops_per_s']:,.0f} vs {rep['ops_per_second']:,.0f} "
                    f"({v['ops_per_s'] / rep['ops_per_second']:.2f}x)")
        v, rep = get(name, "put", 1), replication.get((mode, 1))
        if v and rep:
            verdict(v["p50_us"] <= 2 * rep["p50_us"],
                    f"1-client put p50 within 2x the replication benchmark's commit latency: "
                    f"{v['p50_us']} vs {rep['p50_us']} µs ({v['p50_us'] / rep['p50_us']:.1f}x)")
        else:
            verdict(None, "1-client put latency vs the replication benchmark")
        v = get(name, "put", 64)
        if v and "leader_cpu_us_per_op" in v:
            verdict(v["leader_cpu_us_per_op"] <= 15,
                    f"leader CPU per put at 64 clients <= 15 µs: {v['leader_cpu_us_per_op']} µs")
        else:
            verdict(None, "leader CPU per put at 64 clients")

    lines.append("\nElectrode on/off at the API vs in the replication benchmark (put, spread):")
    clients = sorted({c for (_, w, c, n) in point if n == "voltlock-on" and w == "put"})
    for c in clients:
        api = ratio(get("voltlock-on", "put", c), get("voltlock-off", "put", c))
        on, off = replication.get(("on", c)), replication.get(("off", c))
        if api is None or not (on and off):
            verdict(None, f"Electrode on/off ratio at {c} clients")
            continue
        rep = on["ops_per_second"] / off["ops_per_second"]
        verdict(abs(api / rep - 1) <= 0.10,
                f"on/off ratio at {c} clients within 10% of the replication benchmark's: "
                f"API {api:.2f}, replication {rep:.2f} ({(api / rep - 1) * 100:+.0f}%)")
    return lines


def replication_lines(replication: dict) -> list:
    if not replication:
        return []
    lines = ["| Electrode | clients | ops/s | p50 µs | p99 µs | leader CPU µs/op |",
             "|---|---|---|---|---|---|"]
    for (mode, clients), r in sorted(replication.items()):
        lines.append(f"| {mode} | {clients} | {r['ops_per_second']:,} | {r['p50_us']} | "
                     f"{r['p99_us']} | {r['leader_cpu_us_per_op']} |")
    return lines


def summary_table(results: list, names: list) -> list:
    """ops/s of every system per point, and each Voltlock column's ratios, one row a point."""
    voltlocks = [n for n in names if n.startswith("voltlock")]
    others = [n for n in names if n in ("etcd", "zookeeper")]
    ratio_names = [f"{v} / {o}" for v in voltlocks for o in others]
    lines = ["| at | workload | clients | " + " | ".join(names) + " | " +
             " | ".join(ratio_names) + " |",
             "|---|---|---|" + "---|" * (len(names) + len(ratio_names))]
    for row in results:
        ratios = [fmt_ratio(ratio(row.get(v), row.get(o))) for v in voltlocks for o in others]
        lines.append(f"| {row['at']} | {row['workload']} | {row['clients']} | " +
                     " | ".join(fmt_ops(row.get(n)) for n in names) + " | " +
                     " | ".join(ratios) + " |")
    return lines


def print_report(run: dict) -> None:
    names, results = run["systems"], run["results"]
    replication = {(r["mode"], r["clients"]): r for r in run["replication"]}
    before, after = run["load_before"], run["load_after"]
    print(f"\nService benchmark, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(run['started']))}, "
          f"{run['seconds']:g} s points; load average "
          f"{before[0]:.2f} / {before[1]:.2f} / {before[2]:.2f} at the start, "
          f"{after[0]:.2f} / {after[1]:.2f} / {after[2]:.2f} at the end")
    for note in run["notes"]:
        print(f"Note: {note}")
    print("\nops/s, and Voltlock's ratios:\n")
    print("\n".join(summary_table(results, names)))
    print("\nEvery point:\n")
    print("\n".join(report_table(results, names)))
    if replication:
        print("\nReplication benchmark (bench/run replication, 3 replicas, same run):\n")
        print("\n".join(replication_lines(replication)))
    print("\nGoals (issue 12):")
    print("\n".join(goals(results, names, replication)))


# ---- the run ------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,16,64,256")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--at", default="all,leader",
                        help="where the clients connect, a list of: all (spread over the "
                             "members), leader, followers (every Voltlock op forwarded)")
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--electrode", default="off,on",
                        help="Voltlock cells to measure: off, on or off,on")
    parser.add_argument("--network", default="netns,loopback",
                        help="where Voltlock's cells run, a list of: netns (namespaces on a "
                             "bridge, as the replication benchmark; Electrode needs it), loopback "
                             "(127.0.0.1, as etcd and ZooKeeper; Electrode off only)")
    parser.add_argument("--io-threads", default=str(DEFAULT_IO_THREADS),
                        help="http_io_threads of the Voltlock cells, a list (0: HTTP on the "
                             "replica's loop); a cell whose value is not voltlockd's default is "
                             "named with -ioN")
    parser.add_argument("--old", help="another voltlockd to measure side by side (main's): "
                        "in network namespaces with Electrode off, beside voltlock-off")
    parser.add_argument("--no-etcd", action="store_true")
    parser.add_argument("--no-zookeeper", action="store_true")
    parser.add_argument("--no-replication", action="store_true",
                        help="skip the replication benchmark (and the goals that need it)")
    parser.add_argument("--smoke", action="store_true",
                        help="a quick check: Voltlock (Electrode off) only, 1 s points, 1 and 16 "
                             "clients, spread, no replication benchmark")
    parser.add_argument("--no-install", action="store_true",
                        help="install nothing, build nothing: measure the build in build/ as it "
                             "is (a column is skipped if its programs are missing)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--report", metavar="JSON",
                        help="measure nothing: print the report of a run saved with --json")
    args = parser.parse_args()
    if args.report:
        with open(args.report) as f:
            print_report(json.load(f))
        return 0
    if args.smoke:
        args.seconds, args.clients, args.at, args.electrode = 1, "1,16", "all", "off"
        args.network = "netns"
        args.no_etcd = args.no_zookeeper = args.no_replication = True
    clients = [int(c) for c in args.clients.split(",")]
    workloads = args.workloads.split(",")
    placements = args.at.split(",")
    modes = args.electrode.split(",")
    networks = args.network.split(",")
    io_threads = [int(n) for n in args.io_threads.split(",")]
    for value, allowed, what in ((workloads, WORKLOADS + VOLTLOCK_ONLY, "workload"),
                                 (placements, PLACEMENTS, "--at"),
                                 (modes, ("off", "on"), "--electrode"),
                                 (networks, NETWORKS, "--network")):
        if bad := [v for v in value if v not in allowed]:
            parser.error(f"unknown {what} {', '.join(bad)} (one of {', '.join(allowed)})")
    if "loopback" in networks and len(io_threads) > 1:
        parser.error("a loopback cell's ports are fixed, so --network loopback takes one "
                     "--io-threads value (--network netns for more)")
    if args.old and ("netns" not in networks or "off" not in modes):
        parser.error("--old runs in network namespaces with Electrode off (a loopback cell's "
                     "ports are fixed, so it cannot sit beside voltlock-off-lo): compare it "
                     "with --network netns --electrode off")
    if os.geteuid() != 0:
        parser.error("needs root (network namespaces): sudo python3 bench/service.py")
    if not args.no_install:
        install_and_build(peers=not (args.no_etcd and args.no_zookeeper),
                          zookeeper=not args.no_zookeeper)
    if not os.path.exists(HTTP_LOAD):
        parser.error(f"{HTTP_LOAD} is missing: run without --no-install, which builds it")
    notes = []
    if not args.no_etcd and not shutil.which("etcd"):
        args.no_etcd = True
        notes.append("etcd column skipped: no etcd binary (run without --no-install, which "
                     "installs Debian's etcd-server)")
    if not args.no_zookeeper and not (os.path.exists(ZK_LOAD) and shutil.which("java") and
                                      os.path.exists("/usr/share/java/zookeeper.jar")):
        args.no_zookeeper = True
        notes.append("ZooKeeper column skipped: needs Debian's zookeeper and libzookeeper-st-dev "
                     "and build/vl_zk_load (run without --no-install, which installs and builds "
                     "them)")
    for note in notes:
        print(f"service: {note}", file=sys.stderr)

    # Ctrl-C raises KeyboardInterrupt even where the shell started us with SIGINT ignored (a
    # background job); SIGTERM and SIGHUP unwind the same way.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGHUP, stop_on_signal)
    started = time.time()
    load_before = os.getloadavg()
    replication = {}
    if not args.no_replication:
        print("service: the replication benchmark (bench/run replication) ...", file=sys.stderr,
              flush=True)
        replication = replication_bench(clients, args.seconds)

    systems, cells, services, results, data_roots = [], [], [], [], []
    try:
        daemon = os.path.join(BUILD, "voltlockd")
        io_suffix = {io: "" if io == DEFAULT_IO_THREADS else f"-io{io}" for io in io_threads}
        cell_kinds = [(f"voltlock-{mode}{io_suffix[io]}", mode, daemon, io, False)
                      for mode in modes for io in io_threads if "netns" in networks]
        if "loopback" in networks and "off" in modes:  # Electrode cannot run on lo
            cell_kinds += [(f"voltlock-off{io_suffix[io]}{LOOPBACK_SUFFIX}", "off", daemon, io,
                            True) for io in io_threads]
        if args.old:
            cell_kinds.append(("old", "off", args.old, DEFAULT_IO_THREADS, False))
        for name, mode, daemon, io, loopback in cell_kinds:
            data_roots.append(tempfile.mkdtemp(prefix="vl-bench-cell-", dir="/dev/shm"))
            extra = {} if io == DEFAULT_IO_THREADS else {"http_io_threads": io}
            cell = Cell(replicas=3, electrode=mode, voltlockd=daemon, data_root=data_roots[-1],
                        config_extra=extra, loopback=loopback)
            cells.append(cell)
            cell.up()
            systems.append(voltlock_system(name, cell))
        for wanted, service in ((not args.no_etcd, Etcd), (not args.no_zookeeper, ZooKeeper)):
            if wanted:
                services.append(service())
                systems.append(services[-1].start())
        point_number = 0
        print("service: warming up (1 s of every workload at 16 clients on each system) ...",
              file=sys.stderr, flush=True)
        for workload in workloads:  # JIT for ZooKeeper, caches and allocators for all
            for system in systems:
                if workload in VOLTLOCK_ONLY and system.kind != "voltlock":
                    continue
                point_number += 1
                system.measure(workload, "all", 16, 1, f"bench-lock-one-{point_number}")
        for at in placements:
            for workload in workloads:
                for n in clients:
                    row = {"at": at, "workload": workload, "clients": n}
                    for index, system in enumerate(systems):
                        if workload in VOLTLOCK_ONLY and system.kind != "voltlock":
                            continue
                        if workload == "lock_one" and system.kind == "etcd":
                            etcd = next(s for s in services if isinstance(s, Etcd))
                            systems[index] = system = etcd.restart()
                        point_number += 1  # a fresh contended lock per point: none left held
                        row[system.name] = system.measure(workload, at, n, args.seconds,
                                                          f"bench-lock-one-{point_number}")
                    results.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the cleanup
        for cell in cells:
            cell.down(missing_ok=True)
        for service in services:
            service.stop()
        for root in data_roots:
            shutil.rmtree(root, ignore_errors=True)

    run = {"started": started, "seconds": args.seconds, "notes": notes,
           "load_before": load_before, "load_after": os.getloadavg(),
           "systems": [s.name for s in systems], "results": results,
           "replication": [dict(r, mode=m, clients=c) for (m, c), r in replication.items()]}
    print_report(run)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(run, f, indent=1)
    names = run["systems"]
    # A point that failed, or answered errors, fails the run.
    bad = [(row["workload"], row["clients"], n) for row in results for n in names if n in row
           if "error" in row[n] or row[n].get("errors") or not row[n].get("ops")]
    if bad:
        print(f"\nservice: points with errors or no ops: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, Stopped) as stopped:
        sys.exit(f"service: stopped ({str(stopped) or 'SIGINT'}); what it started is gone")
