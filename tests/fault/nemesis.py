"""The fault suite's nemesis: faults injected into a running cell through scripts/cell (kill,
stop, start, partition, netem, heal) and SIGSTOP/SIGCONT of a replica's process, one at a time:
inject, hold, undo, wait until the cell has a leader again.

Each kind, and what it does to the leader L (or a replica chosen at random):
    kill            kill -9 L, restart it on its data dir
    pause           SIGSTOP L, then SIGCONT
    partition       cut L off from every peer and the client, both directions
    partition-in    drop traffic towards L only (one-way)
    partition-out   drop traffic from L only (one-way)
    isolate-leader  cut L off from its peers only, for a lease TTL + 2-4 s: clients still reach
                    it (issue 11, case 1)
    netem           delay, jitter (so reordering), loss, duplication and corruption (bits
                    flipped in a packet, which the receiver's tag check, in XDP or in user
                    space, must drop) on a random replica's link, both directions
    disk-loss       kill -9 a random replica, remove its data directory, start it on a new
                    one as systemd does (no --recover); undone once it is back in normal status
    power-cut       kill -9 every replica at once, start them all (durability sync only)
    restart         stop every replica gracefully (SIGTERM), start them all
    clock-step      step L's wall clock an hour forward or back, then back to the true time
                    (the cell's daemons run under libfaketime: steppable_clocks.py)
    clock-restart   restart every replica (SIGTERM) with its wall clock an hour fast or slow,
                    then again with the true time; after each restart, a probe: a 1 s wait for
                    a held lock must end within WAIT_PROBE_BOUND_S (a leader that stamped ops
                    behind the cell's time held every wait and lock-delay still)
"""
from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import threading
import time
from dataclasses import dataclass

from cell import Cell, CellCommandError
from cellrig.util import ProcessRef
from steppable_clocks import SteppableClocks

KINDS = ["kill", "pause", "partition", "partition-in", "partition-out", "isolate-leader",
         "netem", "disk-loss", "power-cut", "restart", "clock-step", "clock-restart"]
CLOCK_KINDS = ["clock-step", "clock-restart"]  # need the daemons under libfaketime

RECOVERY_TIMEOUT_S = 60.0
WAIT_PROBE_BOUND_S = 5.0


@dataclass
class Fault:
    kind: str
    target: str
    start: float          # injected
    undone: float = 0.0   # healed, restarted, resumed
    recovered: float | None = None   # a leader again; None: the cell did not come back


class Nemesis(threading.Thread):
    def __init__(self, cell: Cell, kinds: list, rng: random.Random, clock, stop: threading.Event,
                 lease_ttl_s: float, clocks: SteppableClocks | None = None,
                 hold_s: tuple = (2.0, 3.5), quiet_s: tuple = (1.0, 3.0)):
        super().__init__(daemon=True, name="Nemesis")
        self.cell = cell
        self.kinds = kinds
        self.rng = rng
        self.clock = clock
        self.stop_event = stop
        self.clocks = clocks  # needed by CLOCK_KINDS
        self.hold_s, self.quiet_s = hold_s, quiet_s
        # A deposed leader matters to leases only if it stays cut off until the new leader has
        # expired the sessions it kept alive: a TTL after the view change.
        self.isolation_s = (lease_ttl_s + 2.0, lease_ttl_s + 4.0)
        self.faults: list = []
        self.probe_failures: list = []  # clock-restart's wait probes, as violations
        self.error: BaseException | None = None
        self.paused: set = set()

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.rng.uniform(*self.quiet_s)):
                self.inject(self.rng.choice(self.kinds))
                if self.faults[-1].recovered is None:
                    return
        except BaseException as e:  # noqa: BLE001: the runner reports it as a failure
            self.error = e
        finally:
            self.resume_all()

    def inject(self, kind: str) -> None:
        leader = self.leader()
        if leader is None:
            leader = self.rng.randrange(self.cell.replica_count)
        others = [i for i in range(self.cell.replica_count) if i != leader]
        fault = Fault(kind, f"r{leader}", self.clock())
        self.faults.append(fault)
        hold = self.rng.uniform(*self.hold_s)
        if kind == "kill":
            self.cell.kill(leader)
            time.sleep(hold)
            self.cell.start(leader, timeout=30)
        elif kind == "pause":
            self.signal(leader, signal.SIGSTOP)
            time.sleep(hold)
            self.signal(leader, signal.SIGCONT)
        elif kind in ("partition", "partition-in", "partition-out"):
            direction = {"partition": "both", "partition-in": "in", "partition-out": "out"}[kind]
            self.cell.partition(leader, direction=direction)
            time.sleep(hold)
            self.cell.heal()
        elif kind == "isolate-leader":
            self.cell.partition(leader, peers=others)
            time.sleep(self.rng.uniform(*self.isolation_s))
            self.cell.heal()
        elif kind == "netem":
            victim = self.rng.randrange(self.cell.replica_count)
            fault.target = f"r{victim}"
            delay, loss = self.rng.choice([10, 30, 80]), self.rng.choice([1, 5, 20])
            duplicate = self.rng.choice([0, 5, 25])
            corrupt = self.rng.choice([0, 2, 10])
            spec = (f"delay {delay}ms {delay // 2}ms loss {loss}% duplicate {duplicate}%"
                    f" corrupt {corrupt}%")
            self.cell.netem(victim, spec, direction="both")
            fault.target += " " + spec
            time.sleep(hold)
            self.cell.heal()
        elif kind == "disk-loss":
            victim = self.rng.randrange(self.cell.replica_count)
            fault.target = f"r{victim}"
            self.cell.kill(victim)
            shutil.rmtree(self.cell.status()["data_dirs"][victim])
            time.sleep(hold)
            self.cell.start(victim, timeout=30, recover=False)
            # Recovering, it is down still: the next fault would be a second one at once.
            if not self.in_normal_status(victim, RECOVERY_TIMEOUT_S):
                fault.undone = self.clock()
                return
        elif kind == "power-cut":
            fault.target = "all"
            self.cell.kill("all")
            time.sleep(min(hold, 1.0))
            self.cell.start("all", timeout=30)
        elif kind == "restart":
            fault.target = "all"
            self.cell.stop("all")
            self.cell.start("all", timeout=30)
        elif kind == "clock-step":
            offset_s = self.rng.choice([-3600, 3600])
            fault.target += f" {offset_s:+d} s"
            self.clocks.step(leader, offset_s)
            time.sleep(hold)
            self.clocks.step(leader, 0)
        elif kind == "clock-restart":
            offset_s = self.rng.choice([-3600, 3600])
            fault.target = f"all {offset_s:+d} s"
            for offset in (offset_s, 0):  # a new daemon reads its clock as it starts
                for r in range(self.cell.replica_count):
                    self.clocks.step(r, offset)
                self.cell.stop("all")
                self.cell.start("all", timeout=30)
                self.probe_wait(f"{kind} of {fault.target}", f"clocks {offset:+d} s")
        else:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
        fault.undone = self.clock()
        if self.leader(timeout=RECOVERY_TIMEOUT_S) is not None:
            fault.recovered = self.clock()

    def probe_wait(self, fault: str, stage: str) -> None:
        """With a leader again: one session holds the lock nemesis/probe, another waits 1 s for
        it, which must end in 408 within WAIT_PROBE_BOUND_S; a failure is a violation."""
        leader = self.leader(timeout=RECOVERY_TIMEOUT_S)
        if leader is None:
            return  # the fault's recovery check reports it
        sessions = [self.call_until(leader, "POST", "/v1/sessions", {"ttl_ms": 30000}, (201,))
                    ["session"] for _ in range(2)]
        try:
            holder, waiter = sessions
            granted = self.call_until(leader, "POST", "/v1/locks/nemesis/probe:acquire",
                                      {"session": holder}, (200,))
            if not granted["granted"]:
                raise AssertionError(f"the probe's lock is not free: {granted}")
            sent = time.monotonic()
            try:
                status, body = self.cell.request(leader, "POST", "/v1/locks/nemesis/probe:acquire",
                                                 {"session": waiter, "wait_ms": 1000},
                                                 timeout=WAIT_PROBE_BOUND_S)
            except (OSError, http.client.HTTPException) as e:  # a timeout
                status, body = None, repr(e)
            took = time.monotonic() - sent
            if status != 408 or took > WAIT_PROBE_BOUND_S:
                self.probe_failures.append(
                    f"{fault}, {stage}: a 1 s wait for a held lock at r{leader} ended after "
                    f"{took:.1f} s with {status} {body}")
        finally:
            for session in sessions:
                self.call_until(leader, "DELETE", f"/v1/sessions/{session}", None, (200, 404))

    def call_until(self, replica: int, method: str, path: str, body, ok: tuple) -> dict:
        """The request again (a 503 or no answer while the cell settles) until its status is
        in `ok`, for up to RECOVERY_TIMEOUT_S; only for requests that may apply twice."""
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while True:
            try:
                status, answer = self.cell.request(replica, method, path, body)
                if status in ok:
                    return answer
            except (OSError, http.client.HTTPException) as e:
                status, answer = None, repr(e)
            if time.monotonic() > deadline:
                raise AssertionError(f"{method} {path} at r{replica}: {status} {answer}")
            time.sleep(0.1)

    def in_normal_status(self, replica: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.cell.status()["replicas"][replica]
            if isinstance(status, dict) and status["status"] == "normal":
                return True
            time.sleep(0.2)
        return False

    def leader(self, timeout: float = 5.0) -> int | None:
        try:
            return self.cell.wait_for_leader(timeout=timeout)
        except CellCommandError:
            return None

    def signal(self, replica: int, signum: int) -> None:
        """SIGSTOP/SIGCONT the replica's daemon: its pid from the rig's record, checked
        against the start time recorded with it (never a recycled pid)."""
        path = os.path.join(self.cell.endpoints["state_dir"], "cell.json")
        with open(path) as f:
            record = json.load(f)
        ref = ProcessRef.from_json(record["replicas"][replica].get("process"))
        if ref is None or not ref.alive():
            raise AssertionError(f"r{replica} is not running: cannot send it {signum}")
        os.kill(ref.pid, signum)
        if signum == signal.SIGSTOP:
            self.paused.add(ref)
        else:
            self.paused.discard(ref)

    def resume_all(self) -> None:
        for ref in list(self.paused):
            if ref.alive():
                os.kill(ref.pid, signal.SIGCONT)
        self.paused.clear()
