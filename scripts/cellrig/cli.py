"""scripts/cell: build a Voltlock test cell out of network namespaces and run voltlockd in it.

One command for people, tests and benchmarks. Every command prints JSON on stdout (if it prints
anything) and talks to people on stderr. Exit codes: 0 ok, 1 operation failed, 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import time

from . import faults, replicas, topology, util
from .state import (Cell, cell_dir, check_name, known_cells, random_name,
                    resolve_name, rig_lock)
from .util import (CellError, ProcessRef, UsageError, netns_list, port_is_free, say,
                   signals_held, terminate)

EPILOG = """\
examples:
  scripts/cell up --replicas 3                 # prints endpoints as JSON
  scripts/cell exec client curl -s http://10.77.0.10:7480/v1/status
  scripts/cell partition 0                     # cut r0 off; `heal` undoes it
  scripts/cell netem 1 "loss 5% delay 1ms 0.5ms reorder 25% duplicate 2%"
  scripts/cell kill 2 && scripts/cell start 2  # crash, then restart on its data dir
  scripts/cell kill all && scripts/cell start all   # every replica crashes at once (power cut)
  scripts/cell up --durability sync --data-root /mnt/tiny   # data dirs /mnt/tiny/r<i>
  scripts/cell down

Cells live in network namespaces vl-<name>-r<i>, vl-<name>-br (bridge), vl-<name>-cl (client);
their state (configs, logs, pids) in $VOLTLOCK_CELLS_DIR (default /tmp/voltlock-cells), and
replica i's data dir in <state dir>/r<i>/data (or --data-root DIR/r<i>). The data dirs outlive
kill, stop and start; `down` removes them (never DIR itself).
kill, stop and start take several replicas (kill 0 2) or `all`: for kill and stop, every
replica that is running; for start, every replica that is not.
--name may be left out whenever exactly one cell is up.
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # SIGTERM and SIGHUP interrupt like Ctrl-C, so an interrupted `up` cleans up after itself
    # (also when started in the background, where the shell leaves SIGINT ignored).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, util.interrupt)
    if argv[:1] == ["_linkemu"]:
        return _linkemu(argv[1:])
    command = argv[0] if argv else ""
    try:
        args = parser().parse_args(argv)
        return args.func(args) or 0
    except CellError as e:
        print(f"cell {command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"cell {command}: interrupted", file=sys.stderr)
        return 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/cell", description=__doc__.split("\n\n")[0],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = argparse.ArgumentParser(add_help=False)
    named.add_argument("--name", help="the cell (implied when exactly one is up)")

    def command(name, func, help, parents=(named,)):
        c = sub.add_parser(name, help=help, description=help, parents=list(parents))
        c.set_defaults(func=func)
        return c

    c = command("up", cmd_up, "build a cell, start voltlockd in it, wait for a leader, print "
                "its endpoints")
    c.add_argument("--replicas", type=int, choices=(1, 3, 5, 7), default=3)
    c.add_argument("--electrode", choices=("on", "off"), default="off")
    c.add_argument("--tls", choices=("on", "off", "mtls"), default="off",
                   help="TLS on the API and between replicas, with a cell CA and certificates "
                        "made by `voltlockd init-cell` (3, 5 or 7 replicas); endpoints then "
                        "carry tls_ca, the CA's certificate for clients. mtls: clients must "
                        "also present a certificate of the cell CA")
    c.add_argument("--auth", choices=("on", "off"), default="off",
                   help="bearer-token auth on the API (docs/security-auth.md): an admin token "
                        "made here (in the endpoints JSON as admin_token, and used by the rig), "
                        "a token file and an empty roles file in <state dir>/auth")
    c.add_argument("--loopback", action="store_true",
                   help="no namespaces: replicas on 127.0.0.1, udp 7400+i, http 7480+i (no root "
                   "needed; partition and netem unavailable)")
    c.add_argument("--config-extra", metavar="JSON",
                   help="fields merged into every replica's config, e.g. '{\"tick_ms\": 5}'")
    c.add_argument("--durability", choices=("snapshot", "sync"),
                   help="config field durability of every replica (default snapshot)")
    c.add_argument("--snapshot-every-ops", type=whole_number, metavar="N",
                   help="config field snapshot_every_ops (default: the daemon's)")
    c.add_argument("--snapshot-every-seconds", type=whole_number, metavar="S",
                   help="config field snapshot_every_seconds (default: the daemon's)")
    c.add_argument("--data-root", metavar="DIR",
                   help="replica i's data dir is DIR/r<i> (DIR must exist; down removes the "
                   "r<i> only), not <state dir>/r<i>/data")
    c.add_argument("--in-memory", action="store_true",
                   help="no data dirs: replicas keep their state in memory only and a "
                   "restarted one recovers from the others (VR recovery)")
    c.add_argument("--voltlockd", metavar="PATH",
                   help="the daemon (default $VOLTLOCKD, else build/voltlockd)")
    c.add_argument("--log-level", choices=("trace", "debug", "info", "warn", "error"),
                   default="info")
    c.add_argument("--mtu", type=int, default=1500,
                   help="veth and bridge MTU; max_message_bytes follows (MTU - 28)")
    c.add_argument("--cluster-id", type=int, help="default: random")
    c.add_argument("--replication-key", choices=("on", "off"), default="on",
                   help="on (default): a fresh key in <state dir>/cell.key authenticates every "
                   "replication datagram (docs/security.md); off: no key, the checksum only")
    c.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for a leader")
    c.add_argument("--no-start", action="store_true",
                   help="build the network and write the configs, start no daemon")
    c.add_argument("--no-wait", action="store_true", help="start the daemons, do not wait")
    c.add_argument("--keep-logs", action="store_true",
                   help="if up fails, keep the state dir (configs and logs) and the data "
                   "dirs")

    c = command("down", cmd_down, "stop every process of the cell and remove its namespaces")
    c.add_argument("--keep-logs", action="store_true",
                   help="keep the state dir and the data dirs")
    c.add_argument("--all", action="store_true",
                   help="every cell, and any vl-* namespaces the rig made and lost track of")

    command("status", cmd_status, "each replica's /v1/status, or \"down\"")
    command("endpoints", cmd_endpoints, "print the endpoints JSON again")
    command("list", cmd_list, "the cells that are up", parents=())

    c = command("wait", cmd_wait, "wait until the connected majority agrees on a leader; print "
                "{leader, view}")
    c.add_argument("--timeout", type=float, default=20.0)

    for name, func, what in (
            ("kill", cmd_kill, "SIGKILL replicas R..., back to back (all: every running one)"),
            ("stop", cmd_stop, "SIGTERM replicas R... and wait for them to exit (all: every "
             "running one)")):
        c = command(name, func, what)
        c.add_argument("replicas", nargs="+", metavar="R", help="replica indexes, or all")
    c = command("start", cmd_start, "restart replicas R... on their data dirs, with --recover "
                "(which only a replica with no state uses: VR recovery); all: every one that is "
                "not running")
    c.add_argument("replicas", nargs="+", metavar="R", help="replica indexes, or all")
    c.add_argument("--no-recover", action="store_true",
                   help="start as systemd does, without --recover: a replica with no state then "
                        "starts a new cell only if every other one answers that the cell "
                        "committed nothing")
    c.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for their /v1/status to answer")
    c.add_argument("--no-wait", action="store_true")

    c = command("partition", cmd_partition, "cut replica R off (undo with heal)")
    c.add_argument("replica", type=int, metavar="R")
    c.add_argument("--direction", choices=("both", "in", "out"), default="both",
                   help="in: drop traffic towards R; out: drop traffic from R (default both)")
    c.add_argument("--peers", metavar="LIST",
                   help="cut only these, e.g. 2,3,client (default: every other replica and "
                   "the client)")

    command("heal", cmd_heal, "undo every partition and netem")

    c = command("netem", cmd_netem, "impair replica R's link with a tc netem spec")
    c.add_argument("replica", type=int, metavar="R")
    c.add_argument("spec", help='e.g. "loss 5%% delay 1ms 0.5ms reorder 25%% duplicate 2%%"')
    c.add_argument("--direction", choices=("out", "in", "both"), default="out",
                   help="out: traffic from R, like netem on R's eth0 (default); in: traffic "
                   "towards R")
    c.add_argument("--backend", choices=("auto", "tc", "emulated"), default="auto",
                   help="tc netem if the kernel has it (auto), or the relay that emulates it")

    c = command("exec", cmd_exec, "run a command inside a namespace of the cell")
    c.add_argument("target", help="client, bridge, or a replica index")
    c.add_argument("argv", nargs=argparse.REMAINDER, metavar="CMD...")
    return p


def whole_number(text: str) -> int:
    """0 or more; the daemon checks the range and says what 0 means."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: must be 0 or more")
    return value


# --- up / down ----------------------------------------------------------------------------------

# The persistence options of `up`, as the config fields they set.
PERSISTENCE_FIELDS = {"durability": "--durability", "snapshot_every_ops": "--snapshot-every-ops",
                      "snapshot_every_seconds": "--snapshot-every-seconds"}


def persistence_config(args, config_extra: dict) -> dict:
    """config_extra with the persistence options folded in: they are config fields like any
    other, so they travel in config_extra (kept in cell.json, written into every config). A
    field set both ways is refused rather than one silently winning."""
    if "data_dir" in config_extra:
        raise UsageError("--config-extra: data_dir differs per replica; use --data-root DIR "
                         "(replica i gets DIR/r<i>)")
    given = {field: getattr(args, option[2:].replace("-", "_"))
             for field, option in PERSISTENCE_FIELDS.items()}
    given = {field: value for field, value in given.items() if value is not None}
    if args.in_memory:
        clash = [PERSISTENCE_FIELDS[f] for f in given] + (["--data-root"] if args.data_root
                                                          else [])
        clash += [f"--config-extra {f}" for f in PERSISTENCE_FIELDS if f in config_extra]
        if clash:
            raise UsageError(f"--in-memory: no data dirs, so no {', '.join(clash)}")
        return config_extra
    for field, value in given.items():
        if field in config_extra and config_extra[field] != value:
            raise UsageError(f"{PERSISTENCE_FIELDS[field]} {value} and --config-extra "
                             f"{field}={json.dumps(config_extra[field])}: say it once")
    merged = {**config_extra, **given}
    merged.setdefault("durability", "snapshot")
    return merged


def check_data_root(path: str | None) -> str | None:
    if path is None:
        return None
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise UsageError(f"--data-root {path}: no such directory (make or mount it first; "
                         "the rig makes only the r<i> inside)")
    return path


def new_cell(args, name: str, binary: str | None, config_extra: dict,
             data_root: str | None) -> Cell:
    loopback = args.loopback
    names = topology.namespace_names(name, args.replicas)
    state_dir = cell_dir(name)
    members = []
    for i in range(args.replicas):
        address = "127.0.0.1" if loopback else topology.replica_ip(i)
        udp = replicas.UDP_PORT + (i if loopback else 0)
        http = replicas.HTTP_PORT + (i if loopback else 0)
        scheme = "http" if args.tls == "off" else "https"
        rdir = os.path.join(state_dir, f"r{i}")
        data_dir = (None if args.in_memory else os.path.join(data_root, f"r{i}") if data_root
                    else os.path.join(rdir, "data"))
        members.append({
            "index": i, "namespace": None if loopback else names["replicas"][i],
            "ip": address, "udp_port": udp, "http_port": http, "http": f"{scheme}://{address}:{http}",
            "dir": rdir, "config": os.path.join(rdir, "config.json"),
            "log": os.path.join(rdir, "voltlockd.log"), "data_dir": data_dir,
            "data_dir_made": False, "process": None,
        })
    return Cell({
        "name": name, "mode": "loopback" if loopback else "netns",
        "cluster_id": args.cluster_id or 1000 + secrets.randbelow(9000),
        "replication_key_file": (os.path.join(state_dir, "cell.key")
                                 if args.replication_key == "on" else None),
        "electrode": args.electrode, "mtu": args.mtu, "log_level": args.log_level,
        "voltlockd": binary, "config_extra": config_extra, "data_root": data_root,
        "tls": None if args.tls == "off" else os.path.join(state_dir, "tls"),
        "tls_clients_need_certificates": args.tls == "mtls",
        "auth": None if args.auth == "off" else os.path.join(state_dir, "auth"),
        "admin_token": None if args.auth == "off" else "vl_" + secrets.token_hex(32),
        "bridge_namespace": None if loopback else names["bridge"],
        "client_namespace": None if loopback else names["client"],
        "state_dir": state_dir, "replicas": members, "leader": None,
        "faults": {"partitions": [], "netem": {}}, "created": time.strftime("%F %T"),
    })


def cmd_up(args) -> int:
    name = check_name(args.name) if args.name else random_name()
    if not 1280 <= args.mtu <= 9000:
        raise UsageError("--mtu: from 1280 to 9000")
    config_extra = {}
    if args.config_extra:
        try:
            config_extra = json.loads(args.config_extra)
        except json.JSONDecodeError as e:
            raise UsageError(f"--config-extra: not JSON ({e})")
        if not isinstance(config_extra, dict):
            raise UsageError("--config-extra: must be a JSON object")
    config_extra = persistence_config(args, config_extra)
    data_root = check_data_root(args.data_root)
    binary = None if args.no_start else replicas.resolve_binary(args.voltlockd)
    if args.tls != "off":
        if args.replicas == 1:
            raise UsageError("--tls on: the cell generator makes 3, 5 or 7 replicas' "
                             "certificates; use --replicas 3")
    generator = replicas.resolve_binary(args.voltlockd) if args.tls != "off" else None
    if args.loopback:
        say("loopback mode: replicas on 127.0.0.1 (udp 7400+i, http 7480+i), no namespaces; "
            "partition and netem are unavailable")
    else:
        if os.geteuid() != 0:
            raise CellError("network namespaces need root; run as root, or use --loopback")
        missing = [tool for tool in ("ip", "ethtool") if not shutil.which(tool)]
        if missing:
            raise CellError(f"{', '.join(missing)} not found; run scripts/install-deps")

    cell = None
    try:
        with rig_lock():
            if os.path.exists(cell_dir(name)):
                raise CellError(f"{cell_dir(name)} exists: a cell named {name} is up, or its logs "
                                f"were kept; `scripts/cell down --name {name}` or remove it")
            if not args.loopback and topology.existing_namespaces(name):
                raise CellError(f"namespaces of a cell named {name} exist; "
                                f"`scripts/cell down --name {name}` removes them")
            cell = new_cell(args, name, binary, config_extra, data_root)
            cell.save()
            if args.loopback:
                _check_loopback_ports(cell)
            else:
                topology.build(cell)
                if args.electrode == "on":
                    topology.attach_bridge_side_xdp_pass(cell)
            replicas.make_data_dirs(cell)
            if cell.data.get("tls"):
                replicas.make_tls_files(cell, generator)
            if cell.data.get("auth"):
                replicas.make_auth_files(cell)
            replicas.write_configs(cell)
            if not args.no_start:
                replicas.start_all(cell)
        if not (args.no_start or args.no_wait):
            agreed = replicas.wait_for_leader(cell, args.timeout)
            cell.data["leader"] = agreed["leader"]
            cell.save()
    except BaseException:
        if cell is not None:
            with signals_held(), rig_lock():
                _teardown(cell.name, cell, keep_logs=args.keep_logs)
            say(f"removed everything `up` had created for cell {name}"
                + (f"; logs kept in {cell.dir}" if args.keep_logs else ""))
        raise
    said = (f"leader r{cell.data['leader']}" if cell.data["leader"] is not None
            else "no daemon started" if args.no_start else "not waiting for a leader")
    say(f"cell {name} is up: {len(cell.replicas)} replicas, {said}")
    print(json.dumps(cell.endpoints(), indent=2))
    return 0


def _check_loopback_ports(cell) -> None:
    for r in cell.replicas:
        for port, kind in ((r["udp_port"], socket.SOCK_DGRAM),
                           (r["http_port"], socket.SOCK_STREAM)):
            if not port_is_free("127.0.0.1", port, kind):
                raise CellError(f"127.0.0.1:{port} is taken (another loopback cell?); loopback "
                                "cells use fixed ports, so only one can run at a time")


def _teardown(name: str, cell: Cell | None, keep_logs: bool) -> None:
    """Stops the daemons (SIGTERM, then SIGKILL), the netem relays, anything else running in
    the namespaces, deletes the namespaces, and removes the data dirs the rig made and the state
    dir unless keep_logs. Checks every process the rig started is gone, by pid and by
    `ip netns pids`."""
    problems = []
    if cell is not None:
        relays = [ProcessRef.from_json(rec.get("process")) for rec in cell.faults["netem"].values()]
        terminate([r for r in relays if r], 2.0)
        killed = replicas.stop_all(cell)
        if killed:
            say("needed SIGKILL (did not exit within "
                f"{replicas.STOP_GRACE_S:g} s of SIGTERM): "
                + ", ".join(f"r{i}" for i in killed))
        still = [r["index"] for r in cell.replicas if replicas.running(r)]
        if still:
            problems.append("still running: " + ", ".join(f"r{i}" for i in still))
    if cell is None or not cell.loopback:
        try:
            topology.destroy(name)
        except CellError as e:
            problems.append(str(e))
    state_dir = cell_dir(name)
    if cell is not None and not keep_logs:
        problems += replicas.remove_data_dirs(cell)
    if keep_logs:
        if os.path.exists(os.path.join(state_dir, "cell.json")):
            os.replace(os.path.join(state_dir, "cell.json"),
                       os.path.join(state_dir, "cell.down.json"))
    else:
        shutil.rmtree(state_dir, ignore_errors=True)
    if problems:
        raise CellError("; ".join(problems))


def cmd_down(args) -> int:
    if args.all:
        names = set(known_cells())
        names |= {ns.split("-")[1] for ns in _rig_namespaces()}
        if not names:
            say("no cells")
        failed = []
        with signals_held(), rig_lock():
            for name in sorted(names):
                cell = Cell.load(name) if name in known_cells() else None
                try:
                    _teardown(name, cell, args.keep_logs)
                    say(f"cell {name} is down")
                except CellError as e:
                    failed.append(f"{name}: {e}")
        if failed:
            raise CellError("; ".join(failed))
        return 0
    name = resolve_name(args.name)
    cell = Cell.load(name) if name in known_cells() else None
    if cell is None:
        if os.geteuid() != 0 or not topology.existing_namespaces(name):
            Cell.load(name)  # raises: no such cell
        say(f"cell {name} has no state dir; removing its namespaces")
    with signals_held(), rig_lock():
        _teardown(name, cell, args.keep_logs)
    say(f"cell {name} is down" + (f"; logs kept in {cell_dir(name)}" if args.keep_logs else ""))
    return 0


def _rig_namespaces() -> list[str]:
    if os.geteuid() != 0:
        return []
    pattern = re.compile(r"^vl-[a-z][a-z0-9]{0,7}-(br|cl|r\d+)$")
    return [ns for ns in netns_list() if pattern.match(ns)]


# --- looking at a cell --------------------------------------------------------------------------

def load(args) -> Cell:
    return Cell.load(resolve_name(args.name))


def cmd_endpoints(args) -> int:
    print(json.dumps(load(args).endpoints(), indent=2))
    return 0


def cmd_list(args) -> int:
    cells = []
    for name in known_cells():
        cell = Cell.load(name)
        cells.append({"name": name, "mode": cell.data["mode"], "replicas": len(cell.replicas),
                      "running": sum(replicas.running(r) for r in cell.replicas),
                      "leader": cell.data.get("leader"), "state_dir": cell.dir,
                      "durability": cell.durability,
                      "data_dirs": [r.get("data_dir") for r in cell.replicas]})
    print(json.dumps(cells, indent=2))
    return 0


def cmd_status(args) -> int:
    cell = load(args)
    print(json.dumps({
        "name": cell.name,
        "replicas": [replicas.status_of(cell, r["index"]) for r in cell.replicas],
        "leader": cell.data.get("leader"),
        "faults": cell.faults,
        "durability": cell.durability,
        "data_dirs": [r.get("data_dir") for r in cell.replicas],
    }, indent=2))
    return 0


def cmd_wait(args) -> int:
    cell = load(args)
    agreed = replicas.wait_for_leader(cell, args.timeout)
    with rig_lock():
        cell = load(args)
        cell.data["leader"] = agreed["leader"]
        cell.save()
    print(json.dumps(agreed))
    return 0


# --- replicas -----------------------------------------------------------------------------------

def targets(cell: Cell, words: list[str], running: bool) -> list[int]:
    """The replicas named by R... or `all`. `all` means those that are running (for kill and
    stop, running=True) or not running (for start); an index given by number must be in that
    state, checked for every one before any is acted on."""
    if "all" in words:
        if len(words) > 1:
            raise UsageError("`all` stands alone, not with replica indexes")
        chosen = [r["index"] for r in cell.replicas if replicas.running(r) == running]
        if not chosen:
            raise CellError(f"no replica of cell {cell.name} is running" if running
                            else f"every replica of cell {cell.name} is running")
        return chosen
    chosen = []
    for word in words:
        if not word.isdigit():
            raise UsageError(f"replica {word!r}: use indexes (0 1 2) or all")
        index = int(word)
        cell.replica(index)  # raises UsageError when out of range
        if index not in chosen:
            chosen.append(index)
    wrong = [i for i in chosen if replicas.running(cell.replica(i)) != running]
    if wrong:
        names = ", ".join(f"r{i}" for i in wrong)
        one = len(wrong) == 1
        if running:
            raise CellError(f"{names} {'is' if one else 'are'} not running"
                            + ("" if len(chosen) == 1 else "; did nothing"))
        pids = ", ".join(str(cell.replica(i)["process"]["pid"]) for i in wrong)
        raise CellError(f"{names} {'is' if one else 'are'} already running (pid{'' if one else 's'}"
                        f" {pids})" + ("" if len(chosen) == 1 else "; started none"))
    return chosen


def cmd_kill(args) -> int:
    with rig_lock():
        cell = load(args)
        replicas.kill(cell, targets(cell, args.replicas, running=True))
    return 0


def cmd_stop(args) -> int:
    with rig_lock():
        cell = load(args)
        replicas.stop(cell, targets(cell, args.replicas, running=True))
    return 0


def cmd_start(args) -> int:
    with rig_lock():
        cell = load(args)
        indexes = targets(cell, args.replicas, running=False)
        for index in indexes:
            replicas.start(cell, index, recover=not args.no_recover)
    if not args.no_wait:
        replicas.wait_answering(cell, indexes, args.timeout)
    return 0


# --- faults -------------------------------------------------------------------------------------

def cmd_partition(args) -> int:
    with rig_lock():
        cell = load(args)
        faults.partition(cell, args.replica, args.direction, faults.parse_peers(cell, args.peers))
    return 0


def cmd_heal(args) -> int:
    with rig_lock():
        faults.heal(load(args))
    return 0


def cmd_netem(args) -> int:
    with rig_lock():
        faults.netem(load(args), args.replica, args.spec, args.direction, args.backend)
    return 0


def cmd_exec(args) -> int:
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise UsageError("exec: which command? e.g. scripts/cell exec client ping -c1 10.77.0.10")
    cell = load(args)
    target = args.target
    if target in ("client", "cl"):
        ns = cell.data["client_namespace"]
    elif target in ("bridge", "br"):
        ns = cell.data["bridge_namespace"]
        if ns is None:
            raise CellError("a --loopback cell has no bridge namespace")
    elif target.isdigit():
        ns = cell.replica(int(target))["namespace"]
    else:
        raise UsageError(f"exec: target {target!r}: use client, bridge or a replica index")
    sys.stdout.flush()
    full = ["ip", "netns", "exec", ns, *argv] if ns else argv
    try:
        os.execvp(full[0], full)
    except OSError as e:
        raise CellError(f"exec {full[0]}: {e.strerror}")


# --- the netem relay, run by faults.py inside the bridge namespace ------------------------------

def _linkemu(argv: list[str]) -> int:
    from . import linkemu
    p = argparse.ArgumentParser(prog="scripts/cell _linkemu")
    p.add_argument("--replica-port", required=True)
    p.add_argument("--bridge-port", required=True)
    p.add_argument("--ready-file", required=True)
    p.add_argument("--in", dest="spec_in", default="")
    p.add_argument("--out", dest="spec_out", default="")
    try:
        return linkemu.main(p.parse_args(argv))
    except KeyboardInterrupt:
        return 0
