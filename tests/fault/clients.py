"""The fault suite's clients: each keeps an HTTP connection per replica (made inside the cell's
client namespace) and turns every answer into an outcome the checkers understand: a definite
answer, or unknown (a timeout, a broken connection, a 503: the request may still apply)."""
from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time

from cellrig.util import NamespacedConnection

UNKNOWN = "unknown"


class Answer:
    def __init__(self, status: int | str, body):
        self.status, self.body = status, body

    @property
    def unknown(self) -> bool:
        return self.status == UNKNOWN or self.status == 503

    def code(self) -> str | None:
        return self.body.get("code") if isinstance(self.body, dict) else None

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.body!r})"


class ReplicaClient:
    """Sends requests to one replica at a time, keeping the connection; after an unknown outcome
    it moves to another replica at random and backs off (50 ms, doubling up to 1 s, until an
    answer comes), as a client of a cell would. The back-off happens before request() returns,
    so the times callers take around a request that was answered are not stretched by it."""

    BACKOFF_S = (0.05, 1.0)

    def __init__(self, endpoints: dict, rng: random.Random, timeout: float):
        self.endpoints = endpoints
        self.namespace = endpoints["client_namespace"]
        self.replicas = endpoints["replicas"]
        self.rng = rng
        self.timeout = timeout
        self.conns: dict = {}
        self.target = rng.randrange(len(self.replicas))
        self.backoff_s = 0.0

    def request(self, method: str, path: str, body=None, replica: int | None = None) -> Answer:
        target = self.target if replica is None else replica
        try:
            conn = self.conns.get(target)
            if conn is None:
                r = self.replicas[target]
                conn = NamespacedConnection(self.namespace, r["ip"], r["http_port"], self.timeout)
                self.conns[target] = conn
            payload = json.dumps(body) if body is not None else None
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            text = response.read().decode()
            try:
                answer = Answer(response.status, json.loads(text))
            except ValueError:
                answer = Answer(response.status, text)
        except (OSError, http.client.HTTPException, socket.timeout):
            self._drop(target)
            answer = Answer(UNKNOWN, None)
        if answer.unknown:
            if replica is None:
                self.target = self.rng.randrange(len(self.replicas))
            low, high = self.BACKOFF_S
            self.backoff_s = min(high, max(low, 2 * self.backoff_s))
            time.sleep(self.backoff_s)
        else:
            self.backoff_s = 0.0
        return answer

    def _drop(self, target: int) -> None:
        conn = self.conns.pop(target, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for target in list(self.conns):
            self._drop(target)


class Recorder:
    """Completion times of successful log operations, from every worker: what the
    unavailability figures are computed from."""

    def __init__(self, origin: float):
        self.origin = origin
        self.lock = threading.Lock()
        self.successes: list = []

    def now(self) -> float:
        return time.monotonic() - self.origin

    def success(self, at: float) -> None:
        with self.lock:
            self.successes.append(at)
