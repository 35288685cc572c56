"""voltlockd replicas: their configs, their processes, and asking them who leads.

The daemon's contract (what this module relies on):
    voltlockd --config FILE [--log-level L] [--electrode on|off] [--recover]
    logs on stderr; SIGTERM -> clean exit within about a second;
    GET /v1/status -> {"replica", "status": normal|view_change|recovering, "view", "leader", ...}
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from . import faults
from .topology import REPO
from .util import (CellError, ProcessRef, http_get_json, in_netns_argv, say, send_signal,
                   signals_held, tail, terminate, unblock_signals, wait_gone)

UDP_PORT = 7400
HTTP_PORT = 7480
STOP_GRACE_S = 5.0  # the contract says ~1 s; past this the daemon is killed and `stop` fails


def resolve_binary(path: str | None) -> str:
    path = path or os.environ.get("VOLTLOCKD") or os.path.join(REPO, "build", "voltlockd")
    path = os.path.abspath(path)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise CellError(f"voltlockd not found at {path}: build it (cmake --build build) or "
                        "point --voltlockd / $VOLTLOCKD at it")
    return path


def config_for(cell, index: int) -> dict:
    data = cell.data
    config = {
        "cluster_id": data["cluster_id"],
        "replica": index,
        "replicas": [{"ip": r["ip"], "udp_port": r["udp_port"], "http_port": r["http_port"]}
                     for r in cell.replicas],
        "interface": "lo" if cell.loopback else "eth0",
        "max_message_bytes": data["mtu"] - 28,  # IPv4 20 + UDP 8
        "tick_ms": 10,
        "heartbeat_ticks": 5,
        "view_change_timeout_ticks": 30,
        "retransmit_ticks": 4,
        "electrode": data["electrode"],
    }
    config.update(data.get("config_extra") or {})
    return config


def write_configs(cell) -> None:
    for replica in cell.replicas:
        os.makedirs(replica["dir"], exist_ok=True)
        with open(replica["config"], "w") as f:
            json.dump(config_for(cell, replica["index"]), f, indent=2)
            f.write("\n")


def process(replica: dict) -> ProcessRef | None:
    return ProcessRef.from_json(replica.get("process"))


def running(replica: dict) -> bool:
    ref = process(replica)
    return bool(ref and ref.alive())


def start(cell, index: int, recover: bool) -> None:
    """Starts replica index in its namespace, stderr and stdout appended to its log. The process
    is in its own session so it outlives this command and a Ctrl-C in the user's terminal."""
    replica = cell.replica(index)
    if running(replica):
        raise CellError(f"r{index} is already running (pid {replica['process']['pid']})")
    if not cell.data["voltlockd"]:  # a cell made with `up --no-start`
        cell.data["voltlockd"] = resolve_binary(None)
    binary = cell.data["voltlockd"]
    argv = [binary, "--config", replica["config"], "--log-level", cell.data["log_level"],
            "--electrode", cell.data["electrode"]]
    if recover:
        argv.append("--recover")
    argv = in_netns_argv(replica["namespace"], argv)  # `ip netns exec` execs: same pid
    with open(replica["log"], "ab") as log, signals_held():
        log.write(f"=== scripts/cell: {' '.join(argv)} ({time.strftime('%F %T')})\n".encode())
        log.flush()
        child = subprocess.Popen(argv, cwd=replica["dir"], stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                 preexec_fn=unblock_signals)
        ref = ProcessRef.of(child.pid)
        if ref is not None:
            replica["process"] = ref.to_json()
            cell.save()
    if ref is None:
        raise CellError(f"r{index}: {binary} exited at once; log {replica['log']}:\n"
                        + tail(replica["log"]))


def start_all(cell) -> None:
    for replica in cell.replicas:
        start(cell, replica["index"], recover=False)
    # A daemon that rejects its config exits within moments; say so now, not after a timeout.
    time.sleep(0.2)
    dead = [r for r in cell.replicas if not running(r)]
    if dead:
        raise CellError("; ".join(f"r{r['index']} exited at once" for r in dead) + "\n"
                        + logs_report(cell, [r["index"] for r in dead]))


def kill(cell, index: int) -> None:
    replica = cell.replica(index)
    ref = process(replica)
    if not (ref and send_signal(ref, signal.SIGKILL)):
        raise CellError(f"r{index} is not running")
    if wait_gone([ref], 5.0):
        raise CellError(f"r{index} (pid {ref.pid}) survived SIGKILL")


def stop(cell, index: int) -> None:
    """SIGTERM and wait. A daemon that needs SIGKILL broke its contract: `stop` fails."""
    replica = cell.replica(index)
    ref = process(replica)
    if not (ref and ref.alive()):
        raise CellError(f"r{index} is not running")
    started = time.monotonic()
    if terminate([ref], STOP_GRACE_S):
        raise CellError(f"r{index} (pid {ref.pid}) did not exit within {STOP_GRACE_S:g} s of "
                        f"SIGTERM and was killed; log {replica['log']}:\n" + tail(replica["log"]))
    say(f"r{index} exited {time.monotonic() - started:.2f} s after SIGTERM")


def stop_all(cell) -> list[int]:
    """Stops every replica the rig started; returns the indexes that needed SIGKILL."""
    refs = {r["index"]: process(r) for r in cell.replicas}
    live = {i: ref for i, ref in refs.items() if ref and ref.alive()}
    killed = terminate(list(live.values()), STOP_GRACE_S)
    return [i for i, ref in live.items() if ref in killed]


# --- status -------------------------------------------------------------------------------------

def query(cell, index: int, from_ns: str | None, timeout: float = 1.0) -> dict:
    replica = cell.replica(index)
    return http_get_json(from_ns, replica["ip"], replica["http_port"], "/v1/status", timeout)


def status_of(cell, index: int):
    """/v1/status of replica index, asked from its own namespace so partitions and netem do not
    hide it; "down" when its process is not running; an error string when it does not answer."""
    replica = cell.replica(index)
    if not running(replica):
        return "down"
    try:
        return query(cell, index, replica["namespace"])
    except (OSError, ValueError) as e:
        return f"not answering: {e}"


def wait_for_leader(cell, timeout: float) -> dict:
    """Waits until the replicas that can form a majority agree: each running replica in the
    majority side of any partition reports status normal, the same view and the same leader, and
    the leader is one of them. Replicas cut off by a partition are not asked (an isolated
    replica keeps its old view forever). Asks from the client namespace unless the client is cut
    off from a replica, then from the replica's own namespace. Returns {"leader", "view"}."""
    n = len(cell.replicas)
    majority = n // 2 + 1
    deadline = time.monotonic() + timeout
    seen: dict[int, object] = {}
    while True:
        group = faults.majority_group(cell)
        live = [i for i in sorted(group or ()) if running(cell.replica(i))]
        problem = None
        if group is None:
            problem = "no majority of replicas can reach each other (partitions in force)"
        elif len(live) < majority:
            problem = (f"only {len(live)} of the {n} replicas are running and connected "
                       f"({', '.join(f'r{i}' for i in live) or 'none'}); a leader needs "
                       f"{majority}")
        if problem and time.monotonic() >= deadline:
            raise CellError(f"no leader: {problem}")
        if not problem:
            seen = {}
            for i in live:
                via = (cell.data["client_namespace"] if faults.client_reaches(cell, i)
                       else cell.replica(i)["namespace"])
                try:
                    seen[i] = query(cell, i, via)
                except (OSError, ValueError) as e:
                    seen[i] = f"not answering: {e}"
            agreed = _agreement(seen)
            if agreed is not None and agreed["leader"] in live:
                return agreed
        if time.monotonic() >= deadline:
            lines = [f"  r{i}: {json.dumps(s) if isinstance(s, dict) else s}"
                     for i, s in sorted(seen.items())]
            raise CellError(f"no leader after {timeout:g} s: "
                            + (problem or "the running replicas do not agree") + "\n"
                            + "\n".join(lines) + "\n" + logs_report(cell, sorted(seen)))
        time.sleep(0.1)


def _agreement(seen: dict) -> dict | None:
    statuses = list(seen.values())
    if not statuses or not all(isinstance(s, dict) for s in statuses):
        return None
    if any(s.get("status") != "normal" for s in statuses):
        return None
    views = {s.get("view") for s in statuses}
    leaders = {s.get("leader") for s in statuses}
    if len(views) != 1 or len(leaders) != 1:
        return None
    return {"leader": leaders.pop(), "view": views.pop()}


def logs_report(cell, indexes: list[int], lines: int = 15) -> str:
    parts = []
    for i in indexes:
        replica = cell.replica(i)
        parts.append(f"--- r{i} log ({replica['log']}), last {lines} lines:\n"
                     + tail(replica["log"], lines))
    return "\n".join(parts)
