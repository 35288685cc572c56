#!/usr/bin/env python3
"""Issue 12's HTTP library candidates side by side: libmicrohttpd 0.9.75 (what voltlockd runs)
and h2o 2.2.5 (libh2o-evloop), each serving the same minimal service the way voltlockd serves
its API (build/vl_http_candidates: one thread, one epoll loop, every write answered at the end
of the loop pass it arrived in, a watch a server-sent events stream fed by every write), driven
by the service benchmark's client (build/vl_http_load) on 127.0.0.1.

Points, each for both libraries in turn, the order alternating by round:
  put and get at 1/16/64 clients: ops/s, p50/p99, server CPU per request; puts also with the
      writes committed on a second thread (put/handoff: voltlockd's I/O-thread mode, one
      wake-up each way per batch) instead of on the HTTP thread (voltlockd's default);
  watch: N open watches while 16 clients put: the puts' ops/s, events delivered per second,
      server CPU per delivered event;
  HTTP/2 (with nghttp2's h2load, where installed: Debian's nghttp2-client): puts by h2load at
      the same client counts, one stream per connection, over HTTP/1.1 to both libraries and
      over HTTP/2 (cleartext, prior knowledge) to h2o, which speaks it; libmicrohttpd does not.

    .venv/bin/python bench/http_candidates.py [--clients 1,16,64] [--watches 100,1000]
                                              [--seconds 3] [--rounds 2] [--json out.json]

Needs no root; every server it starts is stopped at the end, also on an error or Ctrl-C.
docs/frontend.md ("The two candidates, measured") has the numbers and what they decided.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from service import cpu_seconds, stop_processes, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(REPO, "build", "vl_http_candidates")
LOAD = os.path.join(REPO, "build", "vl_http_load")
LIBRARIES = ("mhd", "h2o")
# A server variant (mhd/handoff): its writes committed on a second thread, not the HTTP one.
HANDOFF = "handoff"
PUT_CLIENTS_UNDER_WATCHES = 16
# (workload, server variant) of the request points: puts held to the end of the pass on the
# HTTP thread and handed to a second one, reads answered at once.
REQUEST_ROWS = (("put", ""), ("put", HANDOFF), ("get", ""))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def load(port: int, workload: str, clients: int, seconds: float, **extra) -> subprocess.Popen:
    argv = [LOAD, "--targets", f"127.0.0.1:{port}", "--clients", str(clients),
            "--seconds", str(seconds), "--workload", workload]
    for flag, value in extra.items():
        argv += [f"--{flag.replace('_', '-')}", str(value)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen, seconds: float) -> dict:
    out, err = proc.communicate(timeout=seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"vl_http_load failed: {err.strip()[-300:]}")
    return json.loads(out)


class Server:
    """One vl_http_candidates process for one point: a fresh server each time, so no point
    inherits another's connections or watches."""

    def __init__(self, name: str):
        library, _, mode = name.partition("/")
        self.port = free_port()
        self.proc = subprocess.Popen([SERVER, "--library", library, "--port", str(self.port)] +
                                     (["--handoff"] if mode == HANDOFF else []))
        wait_until(lambda: self.proc.poll() is not None or listening(self.port), 10,
                   f"{name} server listening")
        if self.proc.poll() is not None:
            raise RuntimeError(f"{name} server exited with {self.proc.returncode}")

    def cpu(self) -> float:
        return cpu_seconds([self.proc.pid])

    def close(self):
        stop_processes([self.proc])


def request_point(library: str, workload: str, clients: int, seconds: float) -> dict:
    server = Server(library)
    try:
        if workload == "get":  # reads of a key the server has
            result(load(server.port, "put", 1, 0.2), 0.2)
        before = server.cpu()
        point = result(load(server.port, workload, clients, seconds), seconds)
        cpu = server.cpu() - before
    finally:
        server.close()
    if point["ops"]:
        point["server_cpu_us_per_op"] = round(cpu * 1e6 / point["ops"], 2)
    return point


def watch_point(library: str, watches: int, seconds: float) -> dict:
    server = Server(library)
    try:
        watchers = load(server.port, "watch", watches, seconds + 1, watch_path="/watch")
        # The puts start once every watch is open: the watch client's clock starts then too.
        time.sleep(0.5 + watches / 5000)
        before = server.cpu()
        puts = result(load(server.port, "put", PUT_CLIENTS_UNDER_WATCHES, seconds), seconds)
        cpu = server.cpu() - before
        events = result(watchers, seconds + 1)
    finally:
        server.close()
    # Events arrive only while the puts run (the watch client's extra second has none).
    point = {"puts_per_s": puts["ops_per_s"], "put_p99_us": puts["p99_us"],
             "events": events["ops"], "events_per_s": round(events["ops"] / seconds),
             "watch_errors": events["errors"], "watches_cut": events["reconnects"]}
    if events["ops"]:
        point["server_cpu_us_per_event"] = round(cpu * 1e6 / events["ops"], 3)
    return point


def h2load_point(library: str, protocol: str, clients: int, seconds: float) -> dict:
    """Puts from h2load: one request outstanding on each of `clients` connections."""
    duration = max(1, round(seconds))  # h2load takes whole seconds
    server = Server(library)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as body:
            body.write('{"value":"v"}')
            body.flush()
            argv = ["h2load", "-D", str(duration), "-c", str(clients), "-m", "1",
                    "-d", body.name, f"http://127.0.0.1:{server.port}/v1/kv/h2load"]
            if protocol == "http/1.1":
                argv.insert(1, "--h1")
            before = server.cpu()
            done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
            cpu = server.cpu() - before
    finally:
        server.close()
    succeeded = re.search(r"requests: .* (\d+) succeeded", done.stdout)
    if done.returncode != 0 or not succeeded:
        raise RuntimeError(f"h2load failed: {(done.stderr or done.stdout).strip()[-300:]}")
    ops = int(succeeded.group(1))
    point = {"ops": ops, "ops_per_s": round(ops / duration)}
    if ops:
        point["server_cpu_us_per_op"] = round(cpu * 1e6 / ops, 2)
    return point


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--watches", default="100,1000")
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    for program in (SERVER, LOAD):
        if not os.access(program, os.X_OK):
            sys.exit(f"{program} is missing: cmake --build build --target "
                     f"{os.path.basename(program)} (vl_http_candidates needs Debian's "
                     "libh2o-evloop-dev installed before cmake runs)")
    clients = [int(c) for c in args.clients.split(",") if c]
    watches = [int(w) for w in args.watches.split(",") if w]
    h2load = shutil.which("h2load")
    if not h2load:
        print("h2load not found (Debian's nghttp2-client): no HTTP/2 points", flush=True)
    protocols = [("mhd", "http/1.1"), ("h2o", "http/1.1"), ("h2o", "h2c")]
    results = []
    for round_ in range(args.rounds):
        order = LIBRARIES if round_ % 2 == 0 else tuple(reversed(LIBRARIES))
        for workload, mode in REQUEST_ROWS:
            for n in clients:
                for library in order:
                    name = f"{library}/{mode}" if mode else library
                    point = request_point(name, workload, n, args.seconds)
                    results.append({"round": round_, "library": name, "workload": workload,
                                    "clients": n, **point})
                    print(json.dumps(results[-1]), flush=True)
        for n in watches:
            for library in order:
                point = watch_point(library, n, args.seconds)
                results.append({"round": round_, "library": library, "workload": "watch",
                                "watches": n, **point})
                print(json.dumps(results[-1]), flush=True)
        for n in clients if h2load else []:
            for library, protocol in protocols if round_ % 2 == 0 else reversed(protocols):
                point = h2load_point(library, protocol, n, args.seconds)
                results.append({"round": round_, "library": library, "workload": "h2load_put",
                                "protocol": protocol, "clients": n, **point})
                print(json.dumps(results[-1]), flush=True)

    def best(library, **where):
        points = [r for r in results if r["library"] == library and
                  all(r.get(k) == v for k, v in where.items())]
        key = "ops_per_s" if "clients" in where else "puts_per_s"
        return max(points, key=lambda r: r.get(key, 0)) if points else {}

    print("\nrequests (best of the rounds): ops/s, p99 ms, server CPU us per request")
    print(f"{'workload':12} {'clients':>7} | {'libmicrohttpd':>26} | {'h2o':>26} | h2o/mhd")
    for workload, mode in REQUEST_ROWS:
        for n in clients:
            suffix = f"/{mode}" if mode else ""
            m = best("mhd" + suffix, workload=workload, clients=n)
            h = best("h2o" + suffix, workload=workload, clients=n)
            cell = lambda p: (f"{p.get('ops_per_s', 0):>9,.0f} {p.get('p99_us', 0) / 1000:>6.2f}"
                              f" {p.get('server_cpu_us_per_op', 0):>7.2f}")
            print(f"{workload + suffix:12} {n:>7} | {cell(m):>26} | {cell(h):>26} | "
                  f"{ratio(h.get('ops_per_s'), m.get('ops_per_s'))}")
    print(f"\nwatches, {PUT_CLIENTS_UNDER_WATCHES} clients putting (best of the rounds): "
          "puts/s, events/s, server CPU us per event, watches cut")
    for n in watches:
        for library in LIBRARIES:
            p = best(library, workload="watch", watches=n)
            print(f"{n:>6} watches {library:4}: {p.get('puts_per_s', 0):>8,.0f} puts/s "
                  f"{p.get('events_per_s', 0):>12,.0f} events/s "
                  f"{p.get('server_cpu_us_per_event', 0):>7.3f} us/event "
                  f"cut {p.get('watches_cut', 0)}")
    if h2load:
        print("\nputs from h2load (best of the rounds): ops/s, server CPU us per request")
        for n in clients:
            cells = []
            for library, protocol in protocols:
                p = best(library, workload="h2load_put", protocol=protocol, clients=n)
                cells.append(f"{library} {protocol}: {p.get('ops_per_s', 0):>8,.0f} "
                             f"{p.get('server_cpu_us_per_op', 0):>6.2f}")
            print(f"{n:>3} clients | " + " | ".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
