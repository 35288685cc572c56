"""Authenticated replication on a real cell (docs/security.md "Authenticated replication").

A cell made by scripts/cell has a replication key (its state dir's cell.key). From the client
namespace, a test plays the attacker who can reach the replication port and spoof a replica's
address (a raw socket, IP_HDRINCL), but has no key:

- forged messages (the dangerous ones: a Prepare that would be logged and acknowledged, a
  PrepareOK that would count towards a quorum, a StartViewChange that would depose the leader,
  a follower's Requests that the leader would propose),
  signed with a wrong key or checksummed as in a cell without one: refused, counted by reason in
  /metrics (and, with Electrode on, dropped by XDP and counted by the kernel), the cell
  unaffected;
- genuine datagrams with one bit flipped: the same;
- genuine datagrams recorded off the bridge and replayed: VR's messages are idempotent by view and
  op, so the cell absorbs them: same state on every replica, no view change, writes still work;
  replayed again after a view change, the core ignores them as stale_view and they change nothing;
- a replica started with another key cannot join; given the cell's key again, it does;
- the documented key rotation, replica by replica, keeps the cell serving and ends with the old
  key refused.

Run with Electrode on and off. The label is `security` (scripts/test -L security).
"""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from cell import SCRIPT, Cell, unique_name
from replication import wait_until

pytestmark = [pytest.mark.usefixtures("voltlockd"), pytest.mark.voltlockd]

# ---- The wire (bpf/include/voltlock/wire.h), enough to forge and to flip -------------------

HEADER = struct.Struct("<IBBHIBBHQQQIIQ")
MAGIC = 0x314B4C56
TAG_OFFSET = 48
PREPARE, PREPARE_OK, START_VIEW_CHANGE, REQUESTS = 3, 4, 6, 16
FLAG_KERNEL_ACK = 1 << 2
ENTRY = struct.Struct("<QQQH")
MASK = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK


def siphash24(key: bytes, data: bytes) -> int:
    """The reference SipHash-2-4, as the kernel and voltlockd compute the tag."""
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D,
         k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(n):
        for _ in range(n):
            v[0] = (v[0] + v[1]) & MASK; v[1] = _rotl(v[1], 13) ^ v[0]; v[0] = _rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & MASK; v[3] = _rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & MASK; v[3] = _rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & MASK; v[1] = _rotl(v[1], 17) ^ v[2]; v[2] = _rotl(v[2], 32)

    def absorb(m):
        v[3] ^= m
        rounds(2)
        v[0] ^= m

    full = len(data) // 8 * 8
    for i in range(0, full, 8):
        absorb(struct.unpack_from("<Q", data, i)[0])
    absorb(int.from_bytes(data[full:], "little") | ((len(data) & 0xFF) << 56))
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def read_key(path: str) -> bytes:
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    return bytes.fromhex(lines[0])


def message(cluster: int, msg_type: int, replica: int, view: int, op: int = 0, commit: int = 0,
            body: bytes = b"", batch: int = 0, flags: int = 0, key: bytes | None = None) -> bytes:
    """A datagram as encode() makes it, tagged with `key` (None: a wrong random key)."""
    header = HEADER.pack(MAGIC, 1, msg_type, flags, cluster, replica, 0, batch, view, op, commit,
                         len(body), 0, 0)
    untagged = header + body
    tag = siphash24(key if key is not None else os.urandom(16), untagged)
    return untagged[:TAG_OFFSET] + struct.pack("<Q", tag) + untagged[TAG_OFFSET + 8:]


def flip_bit(datagram: bytes, bit: int) -> bytes:
    out = bytearray(datagram)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


# ---- The attacker in the client namespace ---------------------------------------------------

SENDER = r"""
import json, socket, struct, sys
packets = json.load(sys.stdin)
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for p in packets:
    payload = bytes.fromhex(p["payload"])
    udp = struct.pack("!HHHH", p["sport"], p["dport"], 8 + len(payload), 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(payload), 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(p["src"]), socket.inet_aton(p["dst"]))
    s.sendto(ip + udp + payload, (p["dst"], 0))
print(len(packets))
"""

RECORDER = r"""
import socket, struct, sys, time
port, want_type, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((port, 0))
s.settimeout(1.0)
got, deadline = [], time.time() + 20
while len(got) < count and time.time() < deadline:
    try:
        frame = s.recv(65535)
    except socket.timeout:
        continue
    if len(frame) < 42 + 56 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        continue
    if struct.unpack("!H", frame[36:38])[0] != 7400 or frame[42 + 5] != want_type:
        continue
    src = socket.inet_ntoa(frame[26:30]); dst = socket.inet_ntoa(frame[30:34])
    got.append(f"{src} {dst} {frame[42:].hex()}")
print("\n".join(got))
"""


def spoof(c: Cell, packets: list[tuple[str, str, bytes]]) -> None:
    """Sends each (source ip, destination ip, payload) from the client namespace, as UDP from
    source:7400 to destination:7400."""
    doc = [{"src": src, "dst": dst, "sport": 7400, "dport": 7400, "payload": payload.hex()}
           for src, dst, payload in packets]
    done = c.exec_client(sys.executable, "-c", SENDER, input=json.dumps(doc))
    assert done.stdout.strip() == str(len(packets))


def status(c: Cell, r: int) -> dict:
    code, body = c.request(r, "GET", "/v1/status?digest=true")
    assert code == 200, body
    return body


def metrics(c: Cell, r: int) -> str:
    code, body = c.request(r, "GET", "/metrics")
    assert code == 200
    return body


def metric(text: str, name: str, **labels) -> int:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line_start = f"{name}{{{want}}} " if want else f"{name} "
    for line in text.splitlines():
        if line.startswith(line_start):
            return int(float(line.split()[-1]))
    return 0


def put(c: Cell, r: int, key: str, value: str) -> None:
    code, body = c.request(r, "PUT", f"/v1/kv/{key}", {"value": value}, timeout=10)
    assert code == 200, body


def converged(c: Cell) -> bool:
    """Every replica normal, in one view, applied to one op, with one state digest."""
    statuses = [status(c, r["index"]) for r in c.replicas]
    return (all(s["status"] == "normal" for s in statuses)
            and len({(s["view"], s["commit"], s["machine"]["digest"]) for s in statuses}) == 1)


def rejected(c: Cell, r: int, reason: str) -> int:
    return status(c, r)["counters"]["rejected"][reason]


def kernel(c: Cell, r: int, counter: str) -> int:
    return status(c, r)["counters"].get("kernel", {}).get(counter, 0)


# ---- The tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("electrode", ["off", "on"])
def test_forged_flipped_and_replayed_datagrams_leave_the_cell_unaffected(electrode):
    with Cell(replicas=3, name=unique_name("sr"), electrode=electrode, timeout=30) as c:
        endpoints = c.endpoints
        key = read_key(endpoints["replication_key_file"])
        cluster = endpoints["cluster_id"]
        leader = c.wait_for_leader()
        follower = (leader + 1) % 3
        ip = {r["index"]: r["ip"] for r in c.replicas}
        put(c, leader, "before", "1")
        wait_until(lambda: converged(c), 20, "the cell to converge")
        before = status(c, leader)
        view, op, commit = before["view"], before["op"], before["commit"]

        # Forged: the next Prepare (to be logged and fast-acknowledged), a PrepareOK for the
        # leader's next op, a StartViewChange that would start a view change, and a follower's
        # Requests (two ops the leader would propose).
        entry = ENTRY.pack(int(time.time() * 1000), 77, 1, 5) + b"forge"
        requests = struct.pack("<H", 2) + b"".join(
            struct.pack("<QQH", client, 1, 5) + b"forge" for client in (78, 79))
        forged = [
            (ip[leader], ip[follower],
             message(cluster, PREPARE, leader, view, op + 1, commit, entry, batch=1)),
            (ip[follower], ip[leader],
             message(cluster, PREPARE_OK, follower, view, op + 1, flags=FLAG_KERNEL_ACK)),
            (ip[leader], ip[follower], message(cluster, START_VIEW_CHANGE, leader, view + 1)),
            (ip[follower], ip[leader], message(cluster, REQUESTS, follower, view, body=requests)),
        ]
        # Bit flips of genuinely signed ones: in the op, the view, the tag, the body.
        genuine = message(cluster, PREPARE, leader, view, op + 1, commit, entry, batch=1,
                          key=key)
        flipped = [(ip[leader], ip[follower], flip_bit(genuine, bit))
                   for bit in (24 * 8, 16 * 8 + 40, TAG_OFFSET * 8 + 7, 8 * len(genuine) - 1)]
        genuine_svc = message(cluster, START_VIEW_CHANGE, leader, view + 1, key=key)
        flipped.append((ip[leader], ip[follower], flip_bit(genuine_svc, 16 * 8 + 2)))

        metrics_before = {r: metrics(c, r) for r in (leader, follower)}
        appended_before = kernel(c, follower, "fa_appended")
        completed_before = kernel(c, leader, "q_complete")
        spoof(c, forged + flipped)

        # Refused by user space (Electrode off) or dropped by the kernel (on), and counted.
        # The Requests goes up to the leader's process (XDP passes it), which refuses it.
        wait_until(lambda: rejected(c, leader, "bad_mac") >= 1,
                   20, "the leader to refuse the forged Requests")
        if electrode == "on":
            # Prepare and PrepareOK die in XDP; the StartViewChanges go up and die in decode.
            wait_until(lambda: kernel(c, follower, "xdp_bad_mac") >= 5,
                       20, "the follower's kernel to drop the forged Prepares")
            wait_until(lambda: kernel(c, leader, "xdp_bad_mac") >= 1,
                       20, "the leader's kernel to drop the forged PrepareOK")
            wait_until(lambda: rejected(c, follower, "bad_mac") >= 2,
                       20, "the follower to refuse the StartViewChanges")
            after = metrics(c, follower)
            assert (metric(after, "voltlock_kernel_total", counter="xdp_bad_mac")
                    >= metric(metrics_before[follower], "voltlock_kernel_total",
                              counter="xdp_bad_mac") + 5)
            assert kernel(c, follower, "fa_appended") == appended_before, \
                "the kernel appended a forged Prepare"
            assert kernel(c, leader, "q_complete") == completed_before, \
                "a forged PrepareOK completed a quorum"
        else:
            wait_until(lambda: rejected(c, follower, "bad_mac") >= 7,
                       20, "the follower to refuse every forged and flipped datagram")
            wait_until(lambda: rejected(c, leader, "bad_mac") >= 2,
                       20, "the leader to refuse the forged PrepareOK and Requests")
        after = metrics(c, follower)
        assert (metric(after, "voltlock_rejected_total", reason="bad_mac")
                >= metric(metrics_before[follower], "voltlock_rejected_total", reason="bad_mac")
                + (2 if electrode == "on" else 7))

        # Nothing moved: same view, same log, no op 'forge' anywhere.
        now = status(c, follower)
        assert now["view"] == view and now["status"] == "normal"
        assert now["op"] == op, "a forged Prepare or Requests was logged"
        assert status(c, leader)["op"] == op, "the leader proposed a forged Requests"

        # Replayed: genuine Prepares recorded off the bridge while the cell works, sent again
        # (from the leader's address) after it moved on; and a genuine stale-view message.
        recorder = subprocess.Popen(
            [SCRIPT, "exec", "--name", c.name, "bridge", "--", sys.executable, "-c", RECORDER, f"r{follower}", str(PREPARE), "3"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 20
            n = 0
            while recorder.poll() is None and time.monotonic() < deadline:
                put(c, leader, f"k{n}", str(n))
                n += 1
                time.sleep(0.05)
            out, err = recorder.communicate(timeout=30)
        finally:
            if recorder.poll() is None:
                recorder.kill()
        recorded = [line.split() for line in out.splitlines() if line.strip()]
        assert recorded, f"no Prepare recorded on the bridge: {err}"
        put(c, leader, "after", "2")
        wait_until(lambda: converged(c), 20, "the cell to converge")
        replays = [(src, dst, bytes.fromhex(payload)) for src, dst, payload in recorded] * 3
        replays.append((ip[leader], ip[follower],
                        message(cluster, START_VIEW_CHANGE, leader, view, key=key)))
        spoof(c, replays)
        put(c, leader, "after-replay", "3")
        wait_until(lambda: converged(c), 20, "the cell to converge after the replays")
        assert status(c, follower)["view"] == view, "a replay started a view change"
        for k in range(n):
            code, body = c.request(follower, "GET", f"/v1/kv/k{k}")
            assert code == 200 and body["value"] == str(k) and body["version"] == 1, body
        code, body = c.request(follower, "GET", "/v1/kv/after-replay")
        assert code == 200 and body["value"] == "3"

        # After a view change the recorded Prepares are of an older view: replayed, they are
        # ignored by the core as stale_view, and counted under that reason.
        c.kill(leader)
        c.wait_for_leader(timeout=30)
        c.start(leader)
        wait_until(lambda: converged(c) and status(c, follower)["view"] > view,
                   30, "the cell to converge in a new view")
        stale_before = status(c, follower)["counters"]["ignored"]["stale_view"]
        digest_before = status(c, follower)["machine"]["digest"]
        spoof(c, [(src, dst, bytes.fromhex(payload)) for src, dst, payload in recorded])
        wait_until(lambda: status(c, follower)["counters"]["ignored"]["stale_view"]
                   >= stale_before + len(recorded),
                   20,
                   "the stale replays to be counted")
        assert status(c, follower)["machine"]["digest"] == digest_before
        m = metrics(c, follower)
        assert metric(m, "voltlock_ignored_total", reason="stale_view") >= stale_before + len(recorded)


def test_a_replica_with_another_key_cannot_join():
    with Cell(replicas=3, name=unique_name("sk"), timeout=30) as c:
        leader = c.wait_for_leader()
        outsider = (leader + 2) % 3
        config_path = os.path.join(c.endpoints["state_dir"], f"r{outsider}", "config.json")
        c.stop(outsider)
        with open(config_path) as f:
            config = json.load(f)
        right_key = config["replication_key_file"]
        wrong_key = os.path.join(c.endpoints["state_dir"], "wrong.key")
        fd = os.open(wrong_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(16).hex() + "\n")
        config["replication_key_file"] = wrong_key
        with open(config_path, "w") as f:
            json.dump(config, f)
        put(c, leader, "while-away", "1")
        c.start(outsider)

        # It hears the others and they hear it, and both sides refuse every datagram.
        wait_until(lambda: rejected(c, outsider, "bad_mac") >= 5,
                   20, "the outsider to refuse the cell's datagrams")
        wait_until(lambda: rejected(c, leader, "bad_mac") >= 1,
                   20, "the leader to refuse the outsider's")
        time.sleep(1.0)  # what it would need to recover, several times over
        assert status(c, outsider)["status"] != "normal", "it joined with another key"
        # Each side says why in its log, naming the sender, once a minute per sender (the
        # outsider has sent many datagrams by now).
        for r, sender in ((leader, outsider), (outsider, leader)):
            peer = c.replicas[sender]
            warning = (f"datagrams from {peer['ip']}:{peer['udp_port']} (r{sender}) fail the "
                       "cell key's MAC")
            with open(c.replicas[r]["log"], errors="replace") as f:
                warned = [line for line in f if warning in line]
            assert len(warned) == 1, f"r{r} warned {len(warned)} times of {warning!r}"
            assert "another cell.key" in warned[0] and "docs/security.md" in warned[0]
        assert status(c, leader)["status"] == "normal"
        put(c, leader, "still-serving", "1")

        # Given the cell's key, it recovers and catches up.
        c.stop(outsider)
        config["replication_key_file"] = right_key
        with open(config_path, "w") as f:
            json.dump(config, f)
        c.start(outsider)
        wait_until(lambda: converged(c), 30, "the outsider to join")
        code, body = c.request(outsider, "GET", "/v1/kv/still-serving?stale=true")
        assert code == 200 and body["value"] == "1"


def test_key_rotation_replica_by_replica_keeps_the_cell_serving():
    """docs/security.md's rotation: (old, new), then (new, old), then (new), one replica at a
    time; the cell serves throughout and ends on the new key alone."""
    with Cell(replicas=3, name=unique_name("sr"), timeout=30) as c:
        state_dir = c.endpoints["state_dir"]
        with open(c.endpoints["replication_key_file"]) as f:
            old = [line.strip() for line in f if line.strip() and not line.startswith("#")][0]
        new = os.urandom(16).hex()
        c.wait_for_leader()
        for step, keys in enumerate(([old, new], [new, old], [new])):
            for r in range(3):
                key_file = os.path.join(state_dir, f"r{r}", f"step{step}.key")
                fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write("\n".join(keys) + "\n")
                config_path = os.path.join(state_dir, f"r{r}", "config.json")
                with open(config_path) as f:
                    config = json.load(f)
                config["replication_key_file"] = key_file
                c.stop(r)
                with open(config_path, "w") as f:
                    json.dump(config, f)
                c.start(r)
                wait_until(lambda: converged(c), 30, f"step {step}: r{r} back in the cell")
                put(c, (r + 1) % 3, f"rotation-{step}-{r}", "ok")
        # The new key alone now: a datagram signed with the old one is refused everywhere.
        leader = c.wait_for_leader()
        ip = {m["index"]: m["ip"] for m in c.replicas}
        follower = (leader + 1) % 3
        before = rejected(c, follower, "bad_mac")
        spoof(c, [(ip[leader], ip[follower],
                   message(c.endpoints["cluster_id"], START_VIEW_CHANGE, leader,
                           status(c, leader)["view"] + 1, key=bytes.fromhex(old)))])
        wait_until(lambda: rejected(c, follower, "bad_mac") > before,
                   20, "the old key to be refused")
        wait_until(lambda: converged(c), 20, "the cell to converge")
        for step in range(3):
            for r in range(3):
                code, body = c.request(r, "GET", f"/v1/kv/rotation-{step}-{r}?stale=true")
                assert code == 200 and body["value"] == "ok", body
