#!/usr/bin/env python3
"""The issue 12 flood goals, measured against a 3-replica cell of this build (needs root):

  (a) N watches (10,000) on one replica, each of which must see every event, while honest clients
      put: the put throughput against the same put load without the watches (goal >= 90%).
      Two shapes (--watch-keys): `prefix`, every watch on the prefix the honest clients write
      (each put is N deliveries); `own`, each watch on a key of its own (an application
      watching its config), whose value a config writer changes once during the load (each put
      of the honest clients concerns no watch, each of the writer's one);
  (b) 10,000 idle connections and (c) 1,000 slowloris connections (one header byte a second,
      reconnecting when cut) on the leader, while honest clients put there and /healthz is
      probed on a fresh connection every 50 ms: the honest clients' p50/p99 (goal p99 < 50 ms)
      and /healthz's (goal under 10 ms), each against the same load with no flood.

    sudo .venv/bin/python bench/floods.py [--watches 10000] [--idle 10000] [--slowloris 1000]
                                          [--watch-keys prefix,own] [--seconds 5] [--clients 16]
                                          [--raise-limits] [--json out.json]

Honest clients are build/vl_http_load (closed loop, kept-alive connections). The process's open
file limit is raised to its hard limit (and the hard limit to what the floods need, as root).
The cell runs with voltlockd's default connection and stream limits, which these floods fit;
--raise-limits sets them above bigger ones.
"""
import argparse
import http.client
import json
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from cell import Cell  # noqa: E402
from cellrig.util import entered_netns  # noqa: E402

LOAD = os.path.join(REPO, "build", "vl_http_load")


def raise_file_limit(needed: int):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(hard, needed)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
    except (ValueError, PermissionError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect_many(cell: Cell, replica: int, count: int) -> list:
    r = cell.replicas[replica]
    socks = []
    with entered_netns(cell.endpoints["client_namespace"]):
        for _ in range(count):
            sock = socket.create_connection((r["ip"], r["http_port"]), timeout=10)
            socks.append(sock)
    return socks


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def honest_puts(cell: Cell, replica: int, clients: int, seconds: float) -> dict:
    r = cell.replicas[replica]
    argv = ["ip", "netns", "exec", cell.endpoints["client_namespace"], LOAD, "--targets",
            f"{r['ip']}:{r['http_port']}", "--clients", str(clients), "--seconds", str(seconds),
            "--workload", "put"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-300:]}
    return json.loads(done.stdout)


class HealthProbe:
    """/healthz and /readyz on a fresh connection each, every 50 ms, on a thread."""

    def __init__(self, cell: Cell, replica: int):
        self.cell, self.replica = cell, replica
        self.times = {"/healthz": [], "/readyz": []}
        self.failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        r = self.cell.replicas[self.replica]
        while not self.stop.is_set():
            for path in self.times:
                try:
                    with entered_netns(self.cell.endpoints["client_namespace"]):
                        sock = socket.create_connection((r["ip"], r["http_port"]), timeout=5)
                    start = time.monotonic()
                    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                 .encode())
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = sock.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    self.times[path].append(time.monotonic() - start)
                    if not data.startswith(b"HTTP/1.1 200"):
                        self.failures += 1
                    sock.close()
                except OSError:
                    self.failures += 1
            self.stop.wait(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def summary(self) -> dict:
        out = {"failures": self.failures}
        for path, times in self.times.items():
            name = path.strip("/")
            out[name] = {"samples": len(times),
                         "p50_ms": round(1000 * statistics.median(times), 2) if times else None,
                         "p99_ms": round(1000 * percentile(times, 0.99), 2) if times else None,
                         "max_ms": round(1000 * max(times), 2) if times else None}
        return out


class ConfigWriter:
    """Puts `own_key(i)` for i = 0, 1, ... once each, on one kept-alive connection, on a thread,
    until every key is written or it is stopped: the revision of each write, by key index."""

    def __init__(self, cell: Cell, replica: int, count: int):
        self.cell, self.replica, self.count = cell, replica, count
        self.revisions = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        r = self.cell.replicas[self.replica]
        with entered_netns(self.cell.endpoints["client_namespace"]):
            conn = http.client.HTTPConnection(r["ip"], r["http_port"], timeout=10)
            conn.connect()
        for i in range(self.count):
            if self.stop.is_set():
                break
            conn.request("PUT", "/v1/kv/" + own_key(i), body=json.dumps({"value": str(i)}))
            response = conn.getresponse()
            body = json.loads(response.read())
            if response.status == 200:
                self.revisions[i] = body["revision"]
        conn.close()


def own_key(i: int) -> str:
    return f"app/{i}/config"


def measured(cell, replica, clients, seconds, config_keys=0) -> dict:
    """The honest clients' puts and the health probes; with `config_keys`, a ConfigWriter of
    that many keys alongside (its writes' revisions in "config_writes")."""
    writer = ConfigWriter(cell, replica, config_keys)
    with HealthProbe(cell, replica) as probe:
        if config_keys:
            writer.thread.start()
        puts = honest_puts(cell, replica, clients, seconds)
        writer.stop.set()
        if config_keys:
            writer.thread.join()
    result = {"puts": puts, "health": probe.summary()}
    if config_keys:
        result["config_writes"] = writer.revisions
    return result


# ---- (a) watches -------------------------------------------------------------------------------

class Watches:
    """`count` watch streams, read on a thread: of the prefix the honest clients write (bench/),
    or each of its own key (own_key(i)); the last event id each stream saw and how many events."""

    def __init__(self, cell: Cell, replica: int, count: int, start_revision: int, own: bool):
        self.socks = connect_many(cell, replica, count)
        self.last_id = [0] * count
        self.events = [0] * count
        self.ended = [False] * count
        self.tails = [b""] * count
        self.raw = [b""] * count
        self.in_body = [False] * count
        self.out_of_order = [False] * count
        self.selector = selectors.DefaultSelector()
        for i, sock in enumerate(self.socks):
            target = (f"/v1/watch/{own_key(i)}?" if own else "/v1/watch/bench/?prefix=true&")
            sock.sendall((f"GET {target}start_revision={start_revision} HTTP/1.1\r\n"
                          "Host: x\r\nAccept: text/event-stream\r\n\r\n").encode())
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, i)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        while not self.stop.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                i = key.data
                try:
                    data = key.fileobj.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.ended[i] = True
                    self.selector.unregister(key.fileobj)
                    continue
                text = self.tails[i] + self.dechunk(i, data)
                lines = text.split(b"\n")
                self.tails[i] = lines.pop()
                for line in lines:
                    if line.startswith(b"id: "):
                        event_id = int(line[4:].strip())
                        if event_id <= self.last_id[i]:
                            self.out_of_order[i] = True
                        self.events[i] += 1
                        self.last_id[i] = event_id
                    elif line.startswith(b"event: error"):
                        self.ended[i] = True

    def dechunk(self, i: int, data: bytes) -> bytes:
        """The stream's payload in `data` (after the response head; chunked encoding)."""
        raw = self.raw[i] + data
        out = b""
        if not self.in_body[i]:
            head_end = raw.find(b"\r\n\r\n")
            if head_end < 0:
                self.raw[i] = raw
                return b""
            self.in_body[i] = True
            raw = raw[head_end + 4:]
        while True:
            size_end = raw.find(b"\r\n")
            if size_end < 0:
                break
            size = int(raw[:size_end].split(b";")[0], 16)
            if len(raw) < size_end + 2 + size + 2:
                break
            out += raw[size_end + 2:size_end + 2 + size]
            raw = raw[size_end + 2 + size + 2:]
        self.raw[i] = raw
        return out

    def close(self):
        self.stop.set()
        self.thread.join()
        for sock in self.socks:
            sock.close()


def revision(cell: Cell, replica: int) -> int:
    return cell_json(cell, replica)["api"]["revision"]


def cell_json(cell: Cell, replica: int) -> dict:
    status, body = cell.request(replica, "GET", "/v1/cluster")
    return body


def flood_watches(cell, replica, count, clients, seconds, own: bool) -> dict:
    start = revision(cell, replica) + 1
    opened = time.monotonic()
    watches = Watches(cell, replica, count, start, own)
    try:
        # Every stream open and answered before the puts begin: the steady state is measured,
        # not the opening of the connections.
        open_deadline = time.monotonic() + 120
        while time.monotonic() < open_deadline and not all(
                answered or ended for answered, ended in zip(watches.in_body, watches.ended)):
            time.sleep(0.2)
        open_s = time.monotonic() - opened
        result = measured(cell, replica, clients, seconds, config_keys=count if own else 0)
        final = revision(cell, replica)
        if own:  # stream i sees exactly the writer's put of its key, if there was one
            writes = result["config_writes"]
            expected = [(1, writes[i]) if i in writes else (0, 0) for i in range(count)]
        else:
            expected = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
                (last >= final if not own else last >= expected[i][1]) or ended
                for i, (last, ended) in enumerate(zip(watches.last_id, watches.ended))):
            time.sleep(0.5)
        if not own:
            # Every put under bench/ is one event; other revisions (the leader's no-ops) are
            # not events of this prefix, so "every event" is: the same count as the stream that
            # saw the most, in order, up to the last put's revision.
            expected = [(max(watches.events), max(watches.last_id))] * count
        complete = sum(1 for i in range(count)
                       if (watches.events[i], watches.last_id[i]) == expected[i]
                       and not watches.out_of_order[i])
        result["watches"] = {"count": count, "keys": "own" if own else "prefix",
                             "opened_in_s": round(open_s, 1),
                             "events": sum(e for e, _ in expected),
                             "final_revision": final, "saw_every_event": complete,
                             "cut_or_ended": sum(watches.ended),
                             "caught_up_in_s": round(time.monotonic() - (deadline - 120), 1)}
        result.pop("config_writes", None)
    finally:
        watches.close()
    return result


# ---- (b) idle, (c) slowloris ---------------------------------------------------------------------

def flood_idle(cell, replica, count, clients, seconds) -> dict:
    socks = connect_many(cell, replica, count)
    try:
        result = measured(cell, replica, clients, seconds)
        result["connections"] = cell_json(cell, replica)["api"]["connections"]
    finally:
        for sock in socks:
            sock.close()
    return result


class Slowloris:
    """`count` connections each sending one header byte a second; a cut one is replaced."""

    def __init__(self, cell: Cell, replica: int, count: int):
        self.cell, self.replica, self.count = cell, replica, count
        self.socks = connect_many(cell, replica, count)
        for sock in self.socks:
            sock.sendall(b"GET /v1/kv/x HTTP/1.1\r\nHost: x\r\n")
        self.reconnects = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(1.0):
            for i, sock in enumerate(self.socks):
                try:
                    sock.send(b"X")
                except OSError:
                    sock.close()
                    self.socks[i] = connect_many(self.cell, self.replica, 1)[0]
                    self.socks[i].sendall(b"GET /v1/kv/x HTTP/1.1\r\nHost: x\r\n")
                    self.reconnects += 1

    def close(self):
        self.stop.set()
        self.thread.join()
        for sock in self.socks:
            sock.close()


def flood_slowloris(cell, replica, count, clients, seconds) -> dict:
    attack = Slowloris(cell, replica, count)
    try:
        result = measured(cell, replica, clients, seconds)
        result["slowloris_reconnects"] = attack.reconnects
    finally:
        attack.close()
    return result


def verdict(met: bool) -> str:
    return "MET" if met else "NOT MET"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watches", type=int, default=10_000)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--slowloris", type=int, default=1_000)
    parser.add_argument("--watch-keys", default="prefix,own",
                        help="the watches' shapes, comma-separated: prefix, own (see above)")
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--io-threads", type=int, choices=(0, 1),
                        help="the cell's http_io_threads (default: voltlockd's)")
    parser.add_argument("--voltlockd", default=os.path.join(REPO, "build", "voltlockd"),
                        help="the daemon to flood (default: this build's)")
    parser.add_argument("--raise-limits", action="store_true",
                        help="set the cell's connection and stream limits above the floods "
                             "(needed past 10,000 watches, or 11,000 idle connections)")
    parser.add_argument("--json", help="write every number here too")
    args = parser.parse_args()
    raise_file_limit(args.watches + args.idle + args.slowloris + 4096)
    # The floods fit voltlockd's default limits; bigger ones get limits to match.
    extra = {}
    if args.raise_limits:
        limit = max(args.watches, args.idle) + args.slowloris + 1000
        extra = {"http_max_connections": limit, "http_max_connections_per_address": limit,
                 "http_max_streams": args.watches + 1000}
    if args.io_threads is not None:
        extra["http_io_threads"] = args.io_threads
    report = {}
    with Cell(replicas=3, voltlockd=args.voltlockd, config_extra=extra) as cell:
        leader = cell.leader
        watched = next(r for r in range(3) if r != leader)
        # (a) the watches on a follower, the puts through it: the events it applies go out to
        # every stream while it forwards the puts.
        for shape in args.watch_keys.split(","):
            own = shape == "own"
            config_keys = args.watches if own else 0
            report[f"watch_baseline_{shape}"] = measured(cell, watched, args.clients,
                                                         args.seconds, config_keys)
            report[f"watch_baseline_{shape}"].pop("config_writes", None)
            report[f"watches_{shape}"] = flood_watches(cell, watched, args.watches, args.clients,
                                                       args.seconds, own)
        report["baseline"] = measured(cell, leader, args.clients, args.seconds)
        report["idle"] = flood_idle(cell, leader, args.idle, args.clients, args.seconds)
        report["slowloris"] = flood_slowloris(cell, leader, args.slowloris, args.clients,
                                              args.seconds)

    for shape in args.watch_keys.split(","):
        base = report[f"watch_baseline_{shape}"]["puts"]["ops_per_s"]
        with_watches = report[f"watches_{shape}"]["puts"]["ops_per_s"]
        w = report[f"watches_{shape}"]["watches"]
        ratio = with_watches / base if base else 0
        print(f"(a) {w['count']} watches, {shape} keys: puts {with_watches} ops/s vs {base} "
              f"without ({ratio:.0%}; goal >= 90%: {verdict(ratio >= 0.9)}); "
              f"{w['saw_every_event']} of {w['count']} saw every event of theirs "
              f"({w['events']} in all; {verdict(w['saw_every_event'] == w['count'])}), "
              f"{w['cut_or_ended']} cut")
    for name in ("baseline", "idle", "slowloris"):
        puts, health = report[name]["puts"], report[name]["health"]
        p99_ms = puts.get("p99_us", 0) / 1000
        healthz = health["healthz"]
        label = {"baseline": "no flood", "idle": f"(b) {args.idle} idle",
                 "slowloris": f"(c) {args.slowloris} slowloris"}[name]
        print(f"{label}: puts {puts.get('ops_per_s')} ops/s, p50 {puts.get('p50_us', 0) / 1000:.1f}"
              f" ms, p99 {p99_ms:.1f} ms (goal < 50 ms: {verdict(p99_ms < 50)}); /healthz p50 "
              f"{healthz['p50_ms']} ms, p99 {healthz['p99_ms']} ms, max {healthz['max_ms']} ms "
              f"(goal < 10 ms: {verdict((healthz['p99_ms'] or 1e9) < 10)}); /readyz p99 "
              f"{health['readyz']['p99_ms']} ms; probe failures {health['failures']}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
