#!/usr/bin/env python3
"""What the Python SDK costs over raw HTTP: put, and lock+unlock, with 1 client (sequential,
latency) and 16 clients (threads, throughput), the sync SDK side by side with the same requests
sent over raw keep-alive http.client connections, in one run, rounds alternating. Needs root
(a 3-replica namespace cell) and the SDK installed (scripts/install-deps; pip install
client/python). Prints one JSON report.

    sudo VOLTLOCKD=build/voltlockd .venv/bin/python bench/python_sdk_overhead.py [--ops 1000]
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import socket
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from cell import Cell  # noqa: E402
from cellrig.util import entered_netns  # noqa: E402

import voltlock  # noqa: E402


class Raw:
    """The same requests the SDK sends (JSON bodies, idempotency headers), on one kept-alive
    http.client connection to the leader, with no retry, no parsing beyond json.loads."""

    def __init__(self, host: str, port: int):
        self.connection = http.client.HTTPConnection(host, port, timeout=10)
        self.connect()
        self.client_id = random.randint(1, 2**63 - 1)
        self.number = 0

    def connect(self):
        self.connection.connect()
        self.connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, method: str, path: str, body=None) -> dict:
        self.number += 1
        headers = {"Accept": "application/json", "X-Voltlock-Client-Id": str(self.client_id),
                   "X-Voltlock-Request-Number": str(self.number)}
        payload = None
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        try:
            self.connection.request(method, path, body=payload, headers=headers)
            response = self.connection.getresponse()
        except (ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed the kept connection: once more on a new one, as the SDK does.
            self.connection.close()
            self.connect()
            self.connection.request(method, path, body=payload, headers=headers)
            response = self.connection.getresponse()
        answer = json.loads(response.read())
        assert response.status in (200, 201), answer
        return answer

    def close(self):
        self.connection.close()


def raw_worker(leader, op: str, worker: int, ops: int) -> list:
    raw = Raw(leader["ip"], leader["http_port"])
    samples = []
    try:
        session = raw.call("POST", "/v1/sessions", {"ttl_ms": 30000})["session"]
        for i in range(ops):
            start = time.perf_counter()
            if op == "put":
                raw.call("PUT", f"/v1/kv/bench/raw/{worker}/{i}", {"value": "v"})
            else:
                path = f"/v1/locks/bench/raw/{worker}"
                raw.call("POST", path + ":acquire",
                         {"session": session, "mode": "exclusive", "wait_ms": 3_600_000})
                raw.call("POST", path + ":release", {"session": session})
            samples.append(time.perf_counter() - start)
        raw.call("DELETE", f"/v1/sessions/{session}")
    finally:
        raw.close()
    return samples


def sdk_worker(client: voltlock.Client, op: str, worker: int, ops: int) -> list:
    samples = []
    with client.session(ttl=30) as s:
        lock = s.lock(f"bench/sdk/{worker}")
        for i in range(ops):
            start = time.perf_counter()
            if op == "put":
                client.put(f"bench/sdk/{worker}/{i}", "v")
            else:
                lock.acquire()
                lock.release()
            samples.append(time.perf_counter() - start)
    return samples


def run_round(kind: str, op: str, clients: int, ops: int, leader, urls) -> dict:
    sdk = voltlock.Client(urls) if kind == "sdk" else None
    try:
        if sdk is not None:
            sdk.put("bench/warm", "v")  # learns the leader, as a running application has
        started, cpu_started = time.perf_counter(), time.process_time()
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            futures = [pool.submit(sdk_worker, sdk, op, w, ops) if sdk is not None
                       else pool.submit(raw_worker, leader, op, w, ops) for w in range(clients)]
            samples = [s for f in futures for s in f.result()]
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        if sdk is not None:
            sdk.close()
    us = sorted(s * 1e6 for s in samples)
    return {"p50_us": us[len(us) // 2], "mean_us": statistics.mean(us),
            "ops_per_s": len(samples) / elapsed, "client_cpu_us_per_op": cpu / len(samples) * 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=1000, help="operations per client per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each, alternating")
    args = parser.parse_args()
    report = {"ops_per_client_per_round": args.ops, "rounds": args.rounds, "results": []}
    with Cell(replicas=3) as cell:
        leader = cell.replicas[cell.leader]
        urls = [r["http"] for r in cell.replicas]
        with entered_netns(cell.endpoints["client_namespace"]):
            for op in ("put", "lock+unlock"):
                for clients in (1, 16):
                    ops = args.ops if clients == 1 else max(1, args.ops // 4)
                    rounds = {"raw": [], "sdk": []}
                    for _ in range(args.rounds):
                        for kind in ("raw", "sdk"):
                            rounds[kind].append(run_round(kind, op, clients, ops, leader, urls))
                    # Best of the rounds (as timeit does): on a shared machine the other
                    # load only ever adds time, so the best round is the closest to the cost.
                    row = {"op": op, "clients": clients}
                    for kind, results in rounds.items():
                        row[kind] = {k: round(best(r[k] for r in results))
                                     for k, best in (("p50_us", min), ("mean_us", min),
                                                     ("ops_per_s", max),
                                                     ("client_cpu_us_per_op", min))}
                    for k, label in (("p50_us", "p50"), ("client_cpu_us_per_op", "cpu"),
                                     ("ops_per_s", "throughput")):
                        ratio = row["sdk"][k] / row["raw"][k]
                        row[f"sdk_over_raw_{label}"] = round(1 / ratio if k == "ops_per_s"
                                                             else ratio, 2)
                    report["results"].append(row)
                    print(json.dumps(row), file=sys.stderr)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
