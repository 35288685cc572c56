#!/usr/bin/env python3
"""What TLS costs on the API (docs/security-tls.md): a plain cell and a TLS cell (`scripts/cell
up --tls on`), side by side in one run, alternating batches of kept-alive PUTs to the leader,
kept-alive PUTs through a follower (forwarded to the leader over the replicas' own HTTPS), and
new connections (a handshake and GET /healthz). Needs root (namespaces):

    sudo .venv/bin/python bench/tls_overhead.py [ROUNDS]
"""
import http.client
import os
import socket
import ssl
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from cell import Cell, unique_name  # noqa: E402
from cellrig.util import entered_netns  # noqa: E402

PUTS_PER_BATCH = 300
CONNECTIONS_PER_BATCH = 100


def connect(cell, replica: int, tls: ssl.SSLContext | None) -> http.client.HTTPConnection:
    r = cell.replicas[replica]
    with entered_netns(cell.endpoints["client_namespace"]):
        connection = (http.client.HTTPSConnection(r["ip"], r["http_port"], timeout=5, context=tls)
                      if tls else http.client.HTTPConnection(r["ip"], r["http_port"], timeout=5))
        connection.connect()
    # As the SDKs do: without it, a request right after the handshake waits for the server's
    # delayed ACK of the client's last handshake flight (Nagle), 40 ms.
    connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection


def microseconds_per_put(cell, replica: int, tls: ssl.SSLContext | None) -> float:
    connection = connect(cell, replica, tls)
    started = time.perf_counter()
    for k in range(PUTS_PER_BATCH):
        connection.request("PUT", f"/v1/kv/bench/{k}", body=b'{"value":"x"}')
        connection.getresponse().read()
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed / PUTS_PER_BATCH * 1e6


def microseconds_per_connection(cell, replica: int, tls: ssl.SSLContext | None) -> float:
    started = time.perf_counter()
    for _ in range(CONNECTIONS_PER_BATCH):
        connection = connect(cell, replica, tls)
        connection.request("GET", "/healthz")
        connection.getresponse().read()
        connection.close()
    return (time.perf_counter() - started) / CONNECTIONS_PER_BATCH * 1e6


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with Cell(3, name=unique_name("bp"), in_memory=True) as plain, \
            Cell(3, name=unique_name("bt"), in_memory=True, tls="on") as secure:
        cells = {"plain": (plain, None),
                 "tls": (secure, ssl.create_default_context(cafile=secure.endpoints["tls_ca"]))}
        results: dict[str, list[float]] = {}
        for _ in range(rounds):
            for name, (cell, tls) in cells.items():
                leader = cell.leader
                follower = (leader + 1) % len(cell.replicas)
                for what, value in (
                        ("put at the leader", microseconds_per_put(cell, leader, tls)),
                        ("put via a follower", microseconds_per_put(cell, follower, tls)),
                        ("new connection", microseconds_per_connection(cell, follower, tls))):
                    results.setdefault(f"{what}, {name}", []).append(value)
        for label, values in results.items():
            rounds_text = ", ".join(f"{v:.0f}" for v in values)
            print(f"{label:28s} median {statistics.median(values):7.0f} us  ({rounds_text})")


if __name__ == "__main__":
    main()
