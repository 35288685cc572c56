#!/usr/bin/env python3
"""Latency and throughput of the HTTP/JSON API on a 3-replica namespace cell (needs root):
sequential requests on one kept-alive connection, at the leader and through a follower
(forwarded), and a closed loop of concurrent writers. Prints one JSON report.

    sudo VOLTLOCKD=build/voltlockd .venv/bin/python bench/api_latency.py [--requests 1000]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from api import Client  # noqa: E402
from cell import Cell  # noqa: E402


def percentiles(samples_s: list) -> dict:
    us = sorted(s * 1e6 for s in samples_s)
    return {"p50_us": round(us[len(us) // 2]), "p99_us": round(us[int(len(us) * 0.99) - 1]),
            "mean_us": round(statistics.mean(us))}


def sequential(cell, replica, method, path, body, n) -> dict:
    client = Client(cell)
    samples = []
    try:
        for i in range(n):
            start = time.perf_counter()
            r = client(replica, method, path.format(i=i), body)
            samples.append(time.perf_counter() - start)
            assert r.status in (200, 201), r
    finally:
        client.close()
    return percentiles(samples)


def throughput(cell, replica, clients, seconds) -> dict:
    deadline = time.monotonic() + seconds

    def loop(worker):
        client = Client(cell)
        done = 0
        try:
            while time.monotonic() < deadline:
                r = client(replica, "PUT", f"/v1/kv/bench/{worker}/{done}", {"value": "v"})
                assert r.status == 200, r
                done += 1
        finally:
            client.close()
        return done

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        total = sum(pool.map(loop, range(clients)))
    return {"clients": clients, "seconds": seconds, "puts_per_s": round(total / seconds)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    with Cell(replicas=3) as cell:
        leader = cell.leader
        follower = (leader + 1) % 3
        n = args.requests
        sid = Client(cell)(leader, "POST", "/v1/sessions", {"ttl_ms": 60_000})["session"]
        report = {
            "put_at_leader": sequential(cell, leader, "PUT", "/v1/kv/a/{i}", {"value": "x"}, n),
            "put_via_follower": sequential(cell, follower, "PUT", "/v1/kv/b/{i}",
                                           {"value": "x"}, n),
            "get_at_leader": sequential(cell, leader, "GET", "/v1/kv/a/1", None, n),
            "get_stale_at_follower": sequential(cell, follower, "GET", "/v1/kv/a/1?stale=true",
                                                None, n),
            "keepalive_at_leader": sequential(cell, leader, "POST",
                                              f"/v1/sessions/{sid}:keepalive", None, n),
            "acquire_at_leader": sequential(cell, leader, "POST",
                                                    "/v1/locks/l{i}:acquire",
                                                    {"session": sid}, n),
            "throughput_at_leader": throughput(cell, leader, 16, 5),
        }
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
