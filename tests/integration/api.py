"""Talking to a cell's HTTP/JSON API from the client namespace: requests with headers, clients
that keep their connection, and server-sent event streams (docs/api.md)."""
from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
import time
import urllib.parse

from cell import Cell
from cellrig.util import NamespacedConnection


def quote(name: str) -> str:
    """A name or key as a path segment: '/' stays, everything unsafe is percent-encoded."""
    return urllib.parse.quote(name, safe="/:")


def connect(cell: Cell, replica: int, timeout: float) -> http.client.HTTPConnection:
    r = cell.replicas[replica]
    conn = NamespacedConnection(cell.endpoints["client_namespace"], r["ip"], r["http_port"],
                                timeout)
    conn.connect()
    return conn


class Response:
    def __init__(self, status: int, body, headers: dict, elapsed: float):
        self.status, self.body, self.headers, self.elapsed = status, body, headers, elapsed

    def __repr__(self) -> str:
        return f"Response({self.status}, {self.body!r})"

    def __getitem__(self, key):
        return self.body[key]


def call(cell: Cell, replica: int, method: str, path: str, body=None, headers: dict | None = None,
         timeout: float = 15.0, raw: bytes | None = None) -> Response:
    """One request on a fresh connection. `raw` sends bytes as they are (bad JSON tests)."""
    conn = connect(cell, replica, timeout)
    try:
        return send(conn, method, path, body, headers, raw)
    finally:
        conn.close()


def send(conn: http.client.HTTPConnection, method: str, path: str, body=None,
         headers: dict | None = None, raw: bytes | None = None) -> Response:
    payload = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    all_headers = {"Content-Type": "application/json"} if payload is not None else {}
    all_headers.update(headers or {})
    start = time.monotonic()
    conn.request(method, path, body=payload, headers=all_headers)
    response = conn.getresponse()
    text = response.read().decode()
    elapsed = time.monotonic() - start
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return Response(response.status, parsed, dict(response.getheaders()), elapsed)


class Client:
    """Keeps one connection per replica, reconnecting after errors (for many requests)."""

    def __init__(self, cell: Cell, timeout: float = 15.0):
        self.cell, self.timeout, self.conns = cell, timeout, {}

    def __call__(self, replica: int, method: str, path: str, body=None,
                 headers: dict | None = None) -> Response:
        conn = self.conns.get(replica)
        if conn is None:
            conn = self.conns[replica] = connect(self.cell, replica, self.timeout)
        try:
            return send(conn, method, path, body, headers)
        except (OSError, http.client.HTTPException):
            conn.close()
            del self.conns[replica]
            raise

    def close(self):
        for conn in self.conns.values():
            conn.close()


class Watch:
    """A server-sent event stream read by a thread: events() returns what arrived so far, as
    (id or None, event type, data dict). closed tells whether the stream ended."""

    def __init__(self, cell: Cell, replica: int, path: str, timeout: float = 60.0,
                 headers: dict | None = None):
        self.conn = connect(cell, replica, timeout)
        self.conn.request("GET", path, headers={"Accept": "text/event-stream", **(headers or {})})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.queue: queue.Queue = queue.Queue()
        self.received: list = []
        self.comments: list = []
        self.closed = threading.Event()
        self.error: Exception | None = None
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()
        else:
            self.body = json.loads(self.response.read().decode())
            self.closed.set()

    def _read(self):
        event = {"id": None, "event": "message", "data": ""}
        try:
            while True:
                line = self.response.readline()
                if not line:
                    break
                line = line.decode().rstrip("\n")
                if line == "":
                    if event["data"]:
                        self.queue.put((event["id"], event["event"], json.loads(event["data"])))
                    event = {"id": None, "event": "message", "data": ""}
                elif line.startswith(":"):
                    self.comments.append(line)
                else:
                    field, _, value = line.partition(": ")
                    if field == "data":
                        event["data"] += value
                    elif field in ("id", "event"):
                        event[field] = value
        except Exception as e:  # the connection died under it: that is what some tests do
            self.error = e
        finally:
            self.closed.set()

    def events(self) -> list:
        while True:
            try:
                self.received.append(self.queue.get_nowait())
            except queue.Empty:
                return self.received

    def wait_for(self, predicate, timeout: float, what: str) -> list:
        deadline = time.monotonic() + timeout
        while True:
            events = self.events()
            if predicate(events):
                return events
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; "
                                     f"got {events[-5:]}")
            time.sleep(0.05)

    def last_complete_revision(self) -> int:
        ids = [int(i) for i, _, _ in self.events() if i is not None]
        return max(ids) if ids else 0

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()
