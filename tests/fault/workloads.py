"""The fault suite's workloads, each a thread that records what it did for the checkers:

- RegisterWorker: reads, writes and compare-and-sets on a few keys (linearizability per key),
  a new generation of them every REGISTER_KEY_LIFETIME_S.
- LockWorker: a session with a lease, an exclusive lock, writes fenced by its sequencer, the
  lease counted by the documented rule (checks.Hold, checks.FencedWrite, checks.Grant).
- SetWorker: adds unique elements (keys) to a set; every acknowledged one must be there at the end.
- WatchWorker: one watch stream over every key of the suite, resumed at another replica from its
  last complete revision whenever it breaks.

Every key lives under PREFIX, every written value is unique (the checkers rely on it), and
nothing is retried: an unknown outcome stays unknown.
"""
from __future__ import annotations

import http.client
import json
import math
import random
import socket
import threading
import urllib.parse

from cellrig.util import NamespacedConnection
from checks import FencedWrite, Grant, Hold, WatchEvent
from clients import ReplicaClient, Recorder
from linearizability import Operation

PREFIX = "f/"
REQUEST_TIMEOUT_S = 3.0
# The registers move to fresh keys (a.0, then a.1, ...) every minute, as Jepsen's independent
# keys do: the checker's search costs more per step the longer a key's history, and an unknown
# outcome stays open to the end of it; in 600 s of every nemesis one key's 280,000 operations
# outlasted the search's budget. A minute's history of a key is checked in seconds.
REGISTER_KEY_LIFETIME_S = 60.0


class Worker(threading.Thread):
    def __init__(self, number: int, endpoints: dict, recorder: Recorder, stop: threading.Event,
                 seed: int):
        super().__init__(daemon=True, name=f"{type(self).__name__}-{number}")
        self.number = number
        self.recorder = recorder
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.client = ReplicaClient(endpoints, self.rng, REQUEST_TIMEOUT_S)
        self.error: BaseException | None = None
        self.counter = 0

    def unique(self, what: str) -> str:
        self.counter += 1
        return f"{what}-{self.number}-{self.counter}"

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.step()
        except BaseException as e:  # noqa: BLE001: the runner reports it as a failure
            self.error = e
        finally:
            self.client.close()

    def unexpected(self, what: str, answer) -> None:
        raise AssertionError(f"{self.name}: {what} answered {answer}")


class RegisterWorker(Worker):
    def __init__(self, *args, keys: list, writes: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.keys = keys
        self.ops: list = []
        self.writes = writes                  # value -> (key, revision or None); shared
        self.observed: dict = {}              # key -> (value, mod_revision) last read
        self.reads: list = []                 # (key, value, mod_revision)

    def step(self) -> None:
        call = self.recorder.now()  # a little early: an operation's interval may only widen
        key = f"{self.rng.choice(self.keys)}.{int(call // REGISTER_KEY_LIFETIME_S)}"
        kind = self.rng.choices(["read", "write", "cas"], [4, 4, 2])[0]
        path = f"/v1/kv/{PREFIX}reg/{key}"
        if kind == "read":
            answer = self.client.request("GET", path)
            ret = self.recorder.now()
            if answer.status == 200:
                value = answer.body["value"]
                self.observed[key] = (value, answer.body["mod_revision"])
                self.reads.append((f"{PREFIX}reg/{key}", value, answer.body["mod_revision"]))
            elif answer.status == 404 and answer.code() == "key_not_found":
                value = None
                self.observed[key] = (None, 0)
            elif answer.unknown:
                return
            else:
                self.unexpected("GET", answer)
            self.recorder.success(ret)
            self.ops.append(Operation(self.number, call, ret, "read", (), value, key))
            return
        value = self.unique("r")
        body = {"value": value}
        args: tuple = (value,)
        if kind == "cas":
            expected, revision = self.observed.get(key, (None, 0))
            body["prev_revision"] = revision
            args = (expected, value)
        self.writes[value] = (f"{PREFIX}reg/{key}", None)
        answer = self.client.request("PUT", path, body)
        ret = self.recorder.now()
        if answer.status == 200:
            self.writes[value] = (f"{PREFIX}reg/{key}", answer.body["revision"])
            self.observed[key] = (value, answer.body["revision"])
            output = True if kind == "cas" else None
            self.recorder.success(ret)
        elif kind == "cas" and answer.status == 409 and answer.code() == "cas_mismatch":
            output = False
            self.recorder.success(ret)
        elif answer.unknown:
            ret, output = math.inf, None
        else:
            self.unexpected("PUT", answer)
        self.ops.append(Operation(self.number, call, ret, kind, args, output, key))


class SetWorker(Worker):
    def __init__(self, *args, writes: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.acknowledged: set = set()
        self.unknown: set = set()
        self.writes = writes

    def step(self) -> None:
        element = self.unique("s")
        key = f"{PREFIX}set/{element}"
        self.writes[element] = (key, None)
        answer = self.client.request("PUT", f"/v1/kv/{key}", {"value": element})
        if answer.status == 200:
            self.acknowledged.add(element)
            self.writes[element] = (key, answer.body["revision"])
            self.recorder.success(self.recorder.now())
        elif answer.unknown:
            self.unknown.add(element)
        else:
            self.unexpected("PUT", answer)


class LockWorker(Worker):
    """Holds `lock` again and again. The lease is counted from the send time of the last
    answered keepalive (or session creation), for one TTL (docs/api.md).

    An acquire or release whose outcome is unknown may still take effect later, even seconds
    later (a forwarding replica tries the leader for up to 8 s; a request held up by a partition
    arrives when it heals). A late release would end a hold the worker had since taken again
    ("granted", held already), so after either the worker gives the session up without a word
    (the cell expires it, which frees the lock) and opens a new one: nothing it believes rests
    on a request whose fate it does not know (docs/api.md, "Sessions and leases")."""

    def __init__(self, *args, lock: str, ttl_ms: int, writes: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.lock = lock
        self.ttl_s = ttl_ms / 1000
        self.ttl_ms = ttl_ms
        self.writes = writes
        self.session: int | None = None
        self.lease_from = 0.0
        self.holds: list = []
        self.grants: list = []
        self.fenced: list = []
        self.acquires = {"granted": 0, "granted after the lease": 0, "busy": 0,
                         "unknown": 0}
        self.sessions_given_up = 0
        # (sent, received, request, replica, status, session, body): what a violation's report
        # shows of the sessions involved.
        self.trace: list = []

    def note(self, sent: float, received: float, request: str, replica: int, answer) -> None:
        self.trace.append((sent, received, request, replica, answer.status, self.session,
                           answer.body))

    def lease_end(self) -> float:
        return self.lease_from + self.ttl_s

    def step(self) -> None:
        if self.session is None or self.recorder.now() >= self.lease_end():
            self.open_session()
            return
        sent, target = self.recorder.now(), self.client.target
        answer = self.client.request("POST", f"/v1/locks/{self.lock}:acquire",
                                     {"session": self.session, "wait_ms": 1000})
        received = self.recorder.now()
        self.note(sent, received, "acquire", target, answer)
        if answer.status == 200 and answer.body.get("granted"):
            sequencer = answer.body["sequencer"]
            self.grants.append(Grant(self.lock, sequencer["generation"], received))
            if received < self.lease_end():
                self.acquires["granted"] += 1
                self.hold(sequencer, received)
            else:
                # The lease ran out while the wait was on: whether the session lives, and so
                # the grant, is unknown (a replica that was behind may answer a wait with a
                # grant the log has since ended), so this client does not stand behind it.
                self.acquires["granted after the lease"] += 1
                self.give_up_session()
        elif answer.status in (408, 409) and answer.code() in ("wait_timed_out", "lock_busy"):
            self.acquires["busy"] += 1
        elif answer.status == 404 and answer.code() == "unknown_session":
            self.session = None
        elif answer.unknown:
            # It may be granted yet, or later: not a hold, and the session is given up.
            self.acquires["unknown"] += 1
            self.give_up_session()
        else:
            self.unexpected("acquire", answer)

    def give_up_session(self) -> None:
        self.session = None
        self.sessions_given_up += 1

    def open_session(self) -> None:
        sent, target = self.recorder.now(), self.client.target
        answer = self.client.request("POST", "/v1/sessions",
                                     {"ttl_ms": self.ttl_ms, "lock_delay_ms": 0,
                                      "name": f"fault-{self.number}"})
        self.note(sent, self.recorder.now(), "create", target, answer)
        if answer.status == 201:
            self.session, self.lease_from = answer.body["session"], sent
        elif not answer.unknown:
            self.unexpected("POST /v1/sessions", answer)

    def keep_alive(self, client: ReplicaClient, released: threading.Event,
                   gone: list) -> None:
        """Until the hold ends: a keepalive every sixth of a TTL on a connection of its own,
        as an SDK's background thread sends them, whatever the holder is busy with. An answer
        renews the lease from the send time, unless the lease ran out before the answer came (a
        careful client does not start believing again). Appends the time the session was found
        gone to `gone`."""
        while not released.is_set() and not self.stop_event.is_set():
            sent, target = self.recorder.now(), client.target
            answer = client.request("POST", f"/v1/sessions/{self.session}:keepalive")
            received = self.recorder.now()
            self.note(sent, received, "keepalive", target, answer)
            if answer.status == 200:
                if received < self.lease_end():
                    self.lease_from = max(self.lease_from, sent)
            elif answer.status == 404 and answer.code() == "unknown_session":
                gone.append(received)
                return
            elif not answer.unknown:
                self.unexpected("keepalive", answer)
            if released.wait(self.ttl_s / 6):
                return

    def hold(self, sequencer: dict, granted_at: float) -> None:
        generation = sequencer["generation"]
        ends, gone = [], []               # (time, why), times the session was found gone
        released = threading.Event()
        keeper_client = ReplicaClient(self.client.endpoints,
                                      random.Random(self.rng.randrange(1 << 31)),
                                      self.client.timeout)
        keeper_client.target = self.client.target
        keeper = threading.Thread(target=self.guarded, args=(self.keep_alive, keeper_client,
                                                             released, gone),
                                  daemon=True, name=f"{self.name}-keepalive")
        keeper.start()
        # Up to two TTLs: long enough to span a fault and the new leader's expiry of the lease.
        deadline = granted_at + self.rng.uniform(0.2, 2 * self.ttl_s)
        try:
            while not self.stop_event.is_set() and self.recorder.now() < deadline:
                if gone or self.recorder.now() >= self.lease_end():
                    break
                if not self.fenced_write(sequencer):
                    ends.append((self.recorder.now(), "refused"))
                    break
                self.stop_event.wait(0.05)
        finally:
            released.set()
            ends.append((self.recorder.now(), "release"))      # the release is sent now
            keeper.join()
            keeper_client.close()
        ends += [(t, "gone") for t in gone]
        ends.append((self.lease_end(), "lease"))
        end, why = min(ends)
        self.holds.append(Hold(self.lock, self.number, sequencer["session"], generation,
                               granted_at, end, why))
        if gone:
            self.session = None
        else:
            self.release()

    def guarded(self, target, *args) -> None:
        try:
            target(*args)
        except BaseException as e:  # noqa: BLE001: the runner reports it as a failure
            self.error = e

    def fenced_write(self, sequencer: dict) -> bool:
        """A write guarded by the sequencer; False once the cell refused it (the lock is gone)."""
        value = self.unique("fence")
        key = f"{PREFIX}fence/{self.lock}"
        self.writes[value] = (key, None)
        call = self.recorder.now()
        answer = self.client.request("PUT", f"/v1/kv/{key}",
                                     {"value": value, "sequencer": sequencer})
        if answer.status == 200:
            self.writes[value] = (key, answer.body["revision"])
            self.fenced.append(FencedWrite(self.lock, self.number, sequencer["generation"], call,
                                           True, answer.body["revision"]))
            self.recorder.success(self.recorder.now())
            return True
        if answer.status == 409 and answer.code() == "sequencer_invalid":
            self.fenced.append(FencedWrite(self.lock, self.number, sequencer["generation"], call,
                                           False))
            return False
        if answer.unknown:
            self.fenced.append(FencedWrite(self.lock, self.number, sequencer["generation"], call,
                                           None))
            return True
        self.unexpected("fenced PUT", answer)

    def release(self) -> None:
        sent, target = self.recorder.now(), self.client.target
        answer = self.client.request("POST", f"/v1/locks/{self.lock}:release",
                                     {"session": self.session})
        self.note(sent, self.recorder.now(), "release", target, answer)
        if answer.status == 404 and answer.code() == "unknown_session":
            self.session = None
        elif answer.unknown:
            self.give_up_session()      # it may land after this session's next grant
        elif answer.status not in (200, 409):
            self.unexpected("release", answer)


class WatchWorker(threading.Thread):
    """Streams every event under PREFIX from revision 1, resuming at another replica after
    `last complete revision + 1` whenever a stream ends or goes quiet too long."""

    QUIET_S = 15.0      # the server sends a comment every 10 s of quiet

    def __init__(self, endpoints: dict, stop: threading.Event, seed: int):
        super().__init__(daemon=True, name="WatchWorker")
        self.endpoints = endpoints
        self.stop_event = stop
        self.rng = random.Random(seed)
        self.events: list = []
        self.covered: list = []          # [first, last] revision ranges streamed completely
        self.resumes = 0
        self.compacted_holes = 0
        self.slow_reader_cuts = 0
        self.next_revision = 1
        self.stream_start = 1            # the first revision the current stream is to cover
        self.error: BaseException | None = None
        self.conn = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.stream_once(self.rng.randrange(len(self.endpoints["replicas"])))
        except BaseException as e:  # noqa: BLE001: the runner reports it as a failure
            self.error = e

    def last_complete(self) -> int:
        return self.next_revision - 1

    def stream_once(self, replica: int) -> None:
        r = self.endpoints["replicas"][replica]
        path = (f"/v1/watch/{urllib.parse.quote(PREFIX)}?prefix=true"
                f"&start_revision={self.next_revision}")
        conn = NamespacedConnection(self.endpoints["client_namespace"], r["ip"], r["http_port"],
                                    self.QUIET_S)
        self.conn = conn
        self.stream_start = self.next_revision
        try:
            conn.request("GET", path, headers={"Accept": "text/event-stream"})
            response = conn.getresponse()
            if response.status == 410:
                self.skip_compacted(json.loads(response.read().decode()))
                return
            if response.status != 200:
                response.read()
                self.stop_event.wait(0.2)
                return
            self.read_events(response)
        except (OSError, http.client.HTTPException, socket.timeout):
            pass
        finally:
            conn.close()
            self.conn = None
            if self.last_complete() >= self.stream_start:
                self.covered.append((self.stream_start, self.last_complete()))
            else:                          # nothing came: that replica is down or cut off
                self.stop_event.wait(0.1)
            self.resumes += 1

    def skip_compacted(self, error: dict) -> None:
        """The start is older than this replica's history: go on from the oldest it has,
        leaving a hole in what the stream covers (a documented answer, not a violation)."""
        self.compacted_holes += 1
        # What streamed before the hole is covered; the hole is not, so the range ends here.
        if self.last_complete() >= self.stream_start:
            self.covered.append((self.stream_start, self.last_complete()))
        self.next_revision = max(self.next_revision, error["details"]["oldest_revision"])
        self.stream_start = self.next_revision

    def on_stream_error(self, error: dict) -> None:
        """The two errors that end a stream (docs/api.md): `compacted` leaves a hole; a reader
        that fell behind (on a busy machine this one can) is cut with `slow_reader` and resumes
        where the server says, as a client would."""
        if error["code"] == "compacted":
            self.skip_compacted(error)
            return
        if error["code"] != "slow_reader":
            raise AssertionError(f"{self.name}: the stream ended with {error}")
        resume = error["details"]["resume_revision"]
        if resume < self.next_revision:
            raise AssertionError(f"{self.name}: cut as a slow reader, told to resume from "
                                 f"{resume}, which it had (up to {self.last_complete()})")
        # Past the last id, the server had found nothing for this watch up to `resume`: those
        # revisions count as streamed, and the watch check holds the server to it.
        self.next_revision = resume
        self.slow_reader_cuts += 1

    def read_events(self, response) -> None:
        pending: list = []                 # events of the revision whose id has not come yet
        event = {"id": None, "event": "message", "data": ""}
        while not self.stop_event.is_set():
            line = response.readline()
            if not line:
                return
            line = line.decode().rstrip("\n")
            if line == "":
                if event["data"]:
                    if event["event"] == "error":
                        self.on_stream_error(json.loads(event["data"]))
                        return
                    data = json.loads(event["data"])
                    pending.append(WatchEvent(data["revision"], data["type"], data["key"],
                                              data.get("value")))
                    if event["id"] is not None:
                        self.events += pending
                        pending = []
                        self.next_revision = int(event["id"]) + 1
                event = {"id": None, "event": "message", "data": ""}
            elif not line.startswith(":"):
                field, _, value = line.partition(": ")
                if field == "data":
                    event["data"] += value
                elif field in ("id", "event"):
                    event[field] = value

    def close(self) -> None:
        conn = self.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
