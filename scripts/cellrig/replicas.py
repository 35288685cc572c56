"""voltlockd replicas: their configs, their data dirs, their processes, and asking them who leads.

The daemon's contract (what this module relies on):
    voltlockd --config FILE [--log-level L] [--electrode on|off] [--recover]
    config "data_dir": the replica's data directory; it restarts from the state there by itself,
    so --recover matters only to a replica with no state (in memory, or a new, empty data dir);
    config "durability" (snapshot|sync), "snapshot_every_ops", "snapshot_every_seconds";
    logs on stderr; SIGTERM -> clean exit within about a second;
    GET /v1/status -> {"replica", "status": normal|view_change|recovering, "view", "leader", ...}

Data dirs: the rig makes each one itself (so it knows which it made), never reuses one that
exists, and removes only those it made, at `down`. Nothing between up and down touches them:
a replica killed, stopped and started again finds its data where it left it.
"""
from __future__ import annotations

import hashlib
import json
import secrets
import os
import shutil
import signal
import subprocess
import time

from . import faults
from .topology import REPO
from .util import (CellError, ProcessRef, http_get_json, in_netns_argv, raise_if_interrupted,
                   say, signals_held, tail, terminate, unblock_signals, wait_gone)

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


def tls_client(cell) -> dict | None:
    """How the rig speaks to a cell made with `up --tls on|mtls` (NamespacedConnection's TLS
    arguments): trusting the cell CA, and under mtls showing replica 0's certificate, which is
    a client certificate of the cell CA too. None: plain HTTP."""
    tls = cell.data.get("tls")
    if not tls:
        return None
    client = {"cafile": os.path.join(tls, "ca.pem")}
    if cell.data.get("tls_clients_need_certificates"):
        client.update(certfile=os.path.join(tls, "r0.pem"),
                      keyfile=os.path.join(tls, "r0-key.pem"))
    return client


def make_tls_files(cell, binary: str) -> None:
    """`up --tls on`: the cell CA and a certificate per replica for its address, made by the
    cell generator as a production cell's are (`voltlockd init-cell`, into <state dir>/tls;
    its configs there are not used)."""
    tls = cell.data["tls"]
    hosts = ",".join(r["ip"] for r in cell.replicas)
    made = subprocess.run([binary, "init-cell", "--replicas", str(len(cell.replicas)),
                           "--hosts", hosts, "--out", tls, "--tls", "on", "--auth", "off",
                           "--cluster-id", str(cell.data["cluster_id"])],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise CellError(f"voltlockd init-cell (TLS files): {made.stderr.strip()}")


def make_auth_files(cell) -> None:
    """`up --auth on`: <state dir>/auth/tokens (mode 0600) with one user, admin, holding the
    cell's admin token (hashed), and an empty roles file; tests add users and roles and SIGHUP."""
    auth = cell.data["auth"]
    os.makedirs(auth, exist_ok=True)
    digest = hashlib.sha256(cell.data["admin_token"].encode()).hexdigest()
    tokens = os.path.join(auth, "tokens")
    with open(os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(f"admin admin {digest}\n")
    with open(os.path.join(auth, "roles"), "w") as f:
        f.write("# role permission[,permission...] resource\n")


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
    if data.get("tls"):
        config.update({"tls_cert_file": os.path.join(data["tls"], f"r{index}.pem"),
                       "tls_key_file": os.path.join(data["tls"], f"r{index}-key.pem"),
                       "tls_ca_file": os.path.join(data["tls"], "ca.pem")})
        if data.get("tls_clients_need_certificates"):
            config["tls_client_ca_file"] = os.path.join(data["tls"], "ca.pem")
    if data.get("replication_key_file"):
        config["replication_key_file"] = data["replication_key_file"]
    if data.get("auth"):
        config.update({"auth_token_file": os.path.join(data["auth"], "tokens"),
                       "auth_roles_file": os.path.join(data["auth"], "roles")})
    config.update(data.get("config_extra") or {})
    data_dir = cell.replica(index).get("data_dir")
    if data_dir:  # per replica, so never in config_extra (cli.py refuses it there)
        config["data_dir"] = data_dir
    return config


def write_replication_key(cell) -> None:
    """The cell's replication key (docs/security.md): 128 random bits, one file for every
    replica, readable by its owner only, as `voltlockd init-cell` writes it."""
    path = cell.data.get("replication_key_file")
    if not path or os.path.exists(path):
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# Voltlock replication key of a scripts/cell test cell\n")
        f.write(secrets.token_hex(16) + "\n")


def write_configs(cell) -> None:
    write_replication_key(cell)
    for replica in cell.replicas:
        os.makedirs(replica["dir"], exist_ok=True)
        with open(replica["config"], "w") as f:
            json.dump(config_for(cell, replica["index"]), f, indent=2)
            f.write("\n")


def make_data_dirs(cell) -> None:
    """Makes every replica's data dir (a cell made with --in-memory has none). One that exists
    already is refused, not reused: it would hold another cell's state, and `down` would then
    remove what the rig did not make. Each is marked data_dir_made as soon as it exists, so an
    interrupted `up` removes exactly what it made."""
    for replica in cell.replicas:
        path = replica.get("data_dir")
        if not path:
            continue
        # The replica's own dir, for the default <state dir>/r<i>/data; a --data-root must
        # exist already (never made here, so never left behind by `down`).
        os.makedirs(replica["dir"], exist_ok=True)
        with signals_held():
            try:
                os.mkdir(path)
            except FileExistsError:
                raise CellError(f"r{replica['index']}: data dir {path} exists (left by another "
                                "cell?); remove it, or choose another --data-root")
            except OSError as e:
                raise CellError(f"r{replica['index']}: cannot make data dir {path}: "
                                f"{e.strerror}")
            replica["data_dir_made"] = True
    cell.save()


def remove_data_dirs(cell) -> list[str]:
    """Removes the data dirs the rig made (never a --data-root itself, never one it did not
    make); returns what could not be removed. The daemons must be gone first."""
    problems = []
    for replica in cell.replicas:
        path = replica.get("data_dir")
        if not (path and replica.get("data_dir_made")):
            continue
        # Guard against a hand-edited cell.json: the rig only ever makes .../r<i> and .../data.
        if os.path.basename(path) not in (f"r{replica['index']}", "data"):
            problems.append(f"not removing {path}: not a data dir the rig makes")
            continue
        failed = []
        shutil.rmtree(path, onerror=lambda _f, p, e: failed.append(f"{p}: {e[1]}"))
        if failed and os.path.exists(path):
            problems.append(f"r{replica['index']}: could not remove data dir {path} "
                            f"({failed[0]})")
        else:
            replica["data_dir_made"] = False
    return problems


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


def kill(cell, indexes: list[int]) -> None:
    """SIGKILL to every replica in indexes, back to back in one loop, the closest the rig gets to
    a simultaneous crash (a power cut). Refuses before signalling any if one is not running."""
    refs = {i: process(cell.replica(i)) for i in indexes}
    down = [i for i, ref in refs.items() if not (ref and ref.alive())]
    if down:
        raise CellError(_not_running(down) + ("; killed none" if len(indexes) > 1 else ""))
    for ref in refs.values():
        try:
            os.kill(ref.pid, signal.SIGKILL)
        except ProcessLookupError:  # died by itself since alive() above; it is down either way
            pass
    left = wait_gone(list(refs.values()), 5.0)
    if left:
        raise CellError(", ".join(f"r{i} (pid {ref.pid})" for i, ref in refs.items()
                                  if ref in left) + " survived SIGKILL")


def stop(cell, indexes: list[int]) -> None:
    """SIGTERM to every replica in indexes, then wait. A daemon that needs SIGKILL broke its
    contract: `stop` fails."""
    refs = {i: process(cell.replica(i)) for i in indexes}
    down = [i for i, ref in refs.items() if not (ref and ref.alive())]
    if down:
        raise CellError(_not_running(down) + ("; stopped none" if len(indexes) > 1 else ""))
    started = time.monotonic()
    killed = terminate(list(refs.values()), STOP_GRACE_S)
    if killed:
        bad = [i for i, ref in refs.items() if ref in killed]
        raise CellError(", ".join(f"r{i} (pid {refs[i].pid})" for i in bad)
                        + f" did not exit within {STOP_GRACE_S:g} s of SIGTERM and "
                        + ("was" if len(bad) == 1 else "were") + " killed\n"
                        + logs_report(cell, bad))
    say(f"{_names(indexes)} exited {time.monotonic() - started:.2f} s after SIGTERM")


def _names(indexes: list[int]) -> str:
    return ", ".join(f"r{i}" for i in indexes)


def _not_running(indexes: list[int]) -> str:
    return f"{_names(indexes)} {'is' if len(indexes) == 1 else 'are'} not running"


def wait_answering(cell, indexes: list[int], timeout: float) -> None:
    """Waits until every replica in indexes answers /v1/status (asked from its own namespace);
    fails as soon as one exits."""
    deadline = time.monotonic() + timeout
    pending = list(indexes)
    errors: dict[int, str] = {}
    while pending:
        raise_if_interrupted()
        for i in list(pending):
            replica = cell.replica(i)
            if not running(replica):
                raise CellError(f"r{i} exited; " + logs_report(cell, [i]))
            try:
                query(cell, i, replica["namespace"])
                pending.remove(i)
            except (OSError, ValueError) as e:
                errors[i] = str(e)
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise CellError(f"{_names(pending)} {'runs' if len(pending) == 1 else 'run'} but "
                            f"/v1/status did not answer within {timeout:g} s ("
                            + "; ".join(f"r{i}: {errors[i]}" for i in pending) + ")\n"
                            + logs_report(cell, pending))
        time.sleep(0.05)


def stop_all(cell) -> list[int]:
    """Stops every replica the rig started; returns the indexes that needed SIGKILL."""
    refs = {r["index"]: process(r) for r in cell.replicas}
    live = {i: ref for i, ref in refs.items() if ref and ref.alive()}
    killed = terminate(list(live.values()), STOP_GRACE_S)
    return [i for i, ref in live.items() if ref in killed]


# --- status -------------------------------------------------------------------------------------

def query(cell, index: int, from_ns: str | None, timeout: float = 1.0,
          digest: bool = False) -> dict:
    """digest: with the state machine's digest, which the replica computes over its whole state
    on its event loop (fine in a test cell; tests compare replicas by it)."""
    replica = cell.replica(index)
    path = "/v1/status?digest=true" if digest else "/v1/status"
    return http_get_json(from_ns, replica["ip"], replica["http_port"], path, timeout,
                         tls=tls_client(cell), token=cell.data.get("admin_token"))


def status_of(cell, index: int):
    """/v1/status of replica index, asked from its own namespace so partitions and netem do not
    hide it; "down" when its process is not running; an error string when it does not answer."""
    replica = cell.replica(index)
    if not running(replica):
        return "down"
    try:
        return query(cell, index, replica["namespace"], digest=True)
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
        raise_if_interrupted()
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
