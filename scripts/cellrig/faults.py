"""Faults: partitions and netem, all applied in the bridge namespace, never inside a replica.

Why the bridge side: with Electrode on, a replica answers Prepares with XDP_TX from its eth0.
Those frames never pass eth0's qdisc or the replica's netfilter hooks; the first place they can
be caught is the bridge-side veth peer. So every fault sits there:

  partition  nftables, table `bridge voltlock`, forward hook: drop by bridge port in / out.
             `in` drops frames towards the replica, `out` frames from it. --peers limits the cut
             to some peers (replica indexes or `client`), which makes split-brain layouts.
             ARP is let through: a one-way cut must stay one-way (otherwise the side that can
             still send loses its neighbour entry within a minute and stops too), and after
             `heal` every neighbour entry is still valid, so traffic resumes at once.
  netem      tc netem where the kernel has it (sch_netem): `in` on the egress qdisc of r<i>,
             `out` on an ifb fed by r<i>'s ingress. Where the kernel lacks sch_netem, the same
             spec is emulated by a relay process (linkemu.py) spliced into replica i's link:
             r<i> leaves the bridge; a veth pair x<i>/y<i> takes its place (x<i> on the bridge)
             and the relay copies frames r<i> <-> y<i>, dropping, delaying, reordering,
             duplicating and corrupting them as the spec says.
  heal       removes every partition and every netem.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import time

from .topology import BRIDGE, bridge_port
from .util import (CellError, ProcessRef, UsageError, ip, run, say, signals_held, tail, tc,
                   terminate, unblock_signals)

CLIENT = "client"
NFT_TABLE = "voltlock"


def _refuse_loopback(cell, what: str) -> None:
    if cell.loopback:
        raise CellError(f"{what} needs a cell in network namespaces; cell {cell.name} runs in "
                        "--loopback mode, where every replica shares 127.0.0.1")


# --- partitions ---------------------------------------------------------------------------------

def parse_peers(cell, text: str | None) -> list | None:
    """`--peers 0,2,client` -> [0, 2, "client"]; None means every other replica and the client."""
    if text is None:
        return None
    peers: list = []
    for word in text.split(","):
        word = word.strip()
        if word in (CLIENT, "cl"):
            peers.append(CLIENT)
        elif word.isdigit():
            cell.replica(int(word))
            peers.append(int(word))
        else:
            raise UsageError(f"--peers: {word!r} is neither a replica index nor 'client'")
    return peers


def partition(cell, index: int, direction: str, peers: list | None) -> None:
    _refuse_loopback(cell, "partition")
    cell.replica(index)
    if peers is not None and index in peers:
        raise UsageError(f"--peers: r{index} cannot be cut off from itself")
    cell.faults["partitions"].append({"replica": index, "direction": direction, "peers": peers})
    _apply_partitions(cell)
    cell.save()


def cut_links(cell) -> set[tuple]:
    """Every (from, to) pair whose frames the partitions drop; nodes are indexes or "client"."""
    nodes = [r["index"] for r in cell.replicas] + [CLIENT]
    cuts = set()
    for p in cell.faults["partitions"]:
        r = p["replica"]
        peers = p["peers"] if p["peers"] is not None else [n for n in nodes if n != r]
        for peer in peers:
            if p["direction"] in ("in", "both"):
                cuts.add((peer, r))
            if p["direction"] in ("out", "both"):
                cuts.add((r, peer))
    return cuts


def majority_group(cell) -> set[int] | None:
    """The replicas that can exchange messages both ways with a majority of the cell (the
    connected component, over links not cut in either direction, that holds a majority);
    None when no such side exists."""
    cuts = cut_links(cell)
    indexes = [r["index"] for r in cell.replicas]
    unvisited = set(indexes)
    while unvisited:
        component, frontier = set(), [unvisited.pop()]
        while frontier:
            a = frontier.pop()
            component.add(a)
            for b in list(unvisited):
                if (a, b) not in cuts and (b, a) not in cuts:
                    unvisited.discard(b)
                    frontier.append(b)
        if len(component) > len(indexes) // 2:
            return component
    return None


def client_reaches(cell, index: int) -> bool:
    cuts = cut_links(cell)
    return (CLIENT, index) not in cuts and (index, CLIENT) not in cuts


def _ports(node) -> list[str]:
    """Bridge ports a node's frames can use: r<i>, or x<i> while emulated netem is spliced in."""
    return ["cl"] if node == CLIENT else [bridge_port(node), f"x{node}"]


def _nft_set(names: list[str]) -> str:
    return "{ " + ", ".join(f'"{n}"' for n in names) + " }"


def _apply_partitions(cell) -> None:
    """Rewrites the whole table in one nft transaction (creating it first so delete works)."""
    nodes = [r["index"] for r in cell.replicas] + [CLIENT]
    rules = []
    for p in cell.faults["partitions"]:
        r = p["replica"]
        peers = p["peers"] if p["peers"] is not None else [n for n in nodes if n != r]
        mine = _nft_set(_ports(r))
        theirs = _nft_set([port for peer in peers for port in _ports(peer)])
        label = f"partition r{r} {p['direction']}" + (
            f" peers {','.join(map(str, p['peers']))}" if p["peers"] is not None else "")
        if p["direction"] in ("in", "both"):
            rules.append(f'iifname {theirs} oifname {mine} ether type != arp drop '
                         f'comment "{label}"')
        if p["direction"] in ("out", "both"):
            rules.append(f'iifname {mine} oifname {theirs} ether type != arp drop '
                         f'comment "{label}"')
    script = [f"table bridge {NFT_TABLE}", f"delete table bridge {NFT_TABLE}"]
    if rules:
        script += [f"table bridge {NFT_TABLE} {{",
                   "  chain forward {",
                   "    type filter hook forward priority 0; policy accept;",
                   *[f"    {rule}" for rule in rules],
                   "  }",
                   "}"]
    _nft(cell, "\n".join(script) + "\n")


def _nft(cell, script: str) -> None:
    if not shutil.which("nft"):
        raise CellError("partitions need nftables (`nft`); run scripts/install-deps")
    run(["ip", "netns", "exec", cell.data["bridge_namespace"], "nft", "-f", "-"], input=script)


# --- netem --------------------------------------------------------------------------------------

def netem(cell, index: int, spec: str, direction: str, backend: str) -> None:
    _refuse_loopback(cell, "netem")
    cell.replica(index)
    if not spec.strip():
        raise UsageError("netem: empty spec; e.g. \"loss 5% delay 1ms 0.5ms\"")
    key = str(index)
    if key in cell.faults["netem"]:
        _undo_netem(cell, index, cell.faults["netem"].pop(key))
        cell.save()
    if backend == "auto":
        backend = "tc" if kernel_has_netem(cell) else "emulated"
    if backend == "tc":
        record = _tc_netem(cell, index, spec, direction)
    else:
        record = _emulated_netem(cell, index, spec, direction)
    cell.faults["netem"][key] = record
    cell.save()


def kernel_has_netem(cell) -> bool:
    if "kernel_has_netem" not in cell.data:
        ns = cell.data["bridge_namespace"]
        done = tc("qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms", ns=ns,
                  check=False)
        if done.returncode == 0:
            tc("qdisc", "del", "dev", "lo", "root", ns=ns, check=False)
        cell.data["kernel_has_netem"] = done.returncode == 0
        if done.returncode != 0:
            say("this kernel has no sch_netem (CONFIG_NET_SCH_NETEM); netem is emulated by a "
                "relay process in the bridge namespace (scripts/cellrig/linkemu.py)")
    return cell.data["kernel_has_netem"]


def _ifb(index: int) -> str:
    return f"ifb-r{index}"


def _tc_netem(cell, index: int, spec: str, direction: str) -> dict:
    ns = cell.data["bridge_namespace"]
    port = bridge_port(index)
    words = shlex.split(spec)
    record = {"spec": spec, "direction": direction, "backend": "tc"}
    try:
        if direction in ("in", "both"):
            tc("qdisc", "replace", "dev", port, "root", "netem", *words, ns=ns)
        if direction in ("out", "both"):
            ifb = _ifb(index)
            ip("link", "add", ifb, "mtu", str(cell.data["mtu"]), "type", "ifb", ns=ns)
            ip("link", "set", ifb, "up", ns=ns)
            tc("qdisc", "replace", "dev", ifb, "root", "netem", *words, ns=ns)
            tc("qdisc", "add", "dev", port, "handle", "ffff:", "ingress", ns=ns)
            tc("filter", "add", "dev", port, "parent", "ffff:", "protocol", "all", "u32",
               "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb,
               ns=ns)
    except CellError as e:
        _undo_netem(cell, index, record)
        if "kind is unknown" in str(e):
            raise CellError("this kernel has no sch_netem (CONFIG_NET_SCH_NETEM); use "
                            "--backend auto or emulated")
        raise
    return record


def _emulated_netem(cell, index: int, spec: str, direction: str) -> dict:
    from . import linkemu
    linkemu.Impairment.parse(spec)  # refuse what the emulator cannot do before touching links
    ns = cell.data["bridge_namespace"]
    port, splice, relay_side = bridge_port(index), f"x{index}", f"y{index}"
    mtu = str(cell.data["mtu"])
    log = os.path.join(cell.dir, f"linkemu-r{index}.log")
    ready = os.path.join(cell.dir, f"linkemu-r{index}.ready")
    record = {"spec": spec, "direction": direction, "backend": "emulated", "log": log}
    try:
        ip("link", "add", splice, "mtu", mtu, "type", "veth", "peer", "name", relay_side,
           "mtu", mtu, ns=ns)
        # The relay reads frames from sockets and must get them as they were on the wire.
        for dev in (port, splice, relay_side):
            run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, "gro", "off"], check=False)
        ip("link", "set", relay_side, "up", ns=ns)
        ip("link", "set", port, "nomaster", ns=ns)
        ip("link", "set", splice, "master", BRIDGE, "up", ns=ns)
        if os.path.exists(ready):
            os.unlink(ready)
        argv = [sys.executable, os.path.join(os.path.dirname(os.path.dirname(
                    os.path.abspath(__file__))), "cell"), "_linkemu",
                "--replica-port", port, "--bridge-port", relay_side, "--ready-file", ready,
                "--in", spec if direction in ("in", "both") else "",
                "--out", spec if direction in ("out", "both") else ""]
        with open(log, "ab") as out, signals_held():
            child = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=unblock_signals)
            ref = ProcessRef.of(child.pid)
            if ref:
                record["process"] = ref.to_json()
                cell.faults["netem"][str(index)] = record
                cell.save()
        deadline = time.monotonic() + 5
        while not os.path.exists(ready):
            if child.poll() is not None or time.monotonic() > deadline:
                raise CellError(f"netem relay for r{index} did not start; {log}:\n" + tail(log))
            time.sleep(0.02)
    except BaseException:
        _undo_netem(cell, index, record)
        cell.faults["netem"].pop(str(index), None)
        cell.save()
        raise
    return record


def _undo_netem(cell, index: int, record: dict) -> None:
    ns = cell.data["bridge_namespace"]
    port = bridge_port(index)
    if record["backend"] == "tc":
        tc("qdisc", "del", "dev", port, "root", ns=ns, check=False)
        tc("qdisc", "del", "dev", port, "ingress", ns=ns, check=False)
        ip("link", "del", _ifb(index), ns=ns, check=False)
        return
    ref = ProcessRef.from_json(record.get("process"))
    if ref:
        terminate([ref], 2.0)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(cell.dir, f"linkemu-r{index}.ready"))
    ip("link", "del", f"x{index}", ns=ns, check=False)  # takes y<i> with it
    ip("link", "set", port, "master", BRIDGE, "up", ns=ns)


def heal(cell) -> None:
    """Undoes every partition and every netem. Safe to run when nothing is in force."""
    _refuse_loopback(cell, "heal")
    for key, record in sorted(cell.faults["netem"].items()):
        _undo_netem(cell, int(key), record)
    cell.faults["netem"] = {}
    if cell.faults["partitions"]:
        cell.faults["partitions"] = []
        _apply_partitions(cell)
    else:
        # Nothing recorded, but clear the table anyway in case a command died half-way.
        run(["ip", "netns", "exec", cell.data["bridge_namespace"], "nft", "delete", "table",
             "bridge", NFT_TABLE], check=False)
    cell.save()
