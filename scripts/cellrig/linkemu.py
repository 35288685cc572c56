"""netem without sch_netem: a relay spliced into one replica's link (see faults.py).

Used only where the kernel lacks sch_netem. It reads every frame arriving on the replica's
bridge-side veth (r<i>) and on the spliced-in veth (y<i>) through packet sockets, and sends it
out of the other one after applying the spec, so it sees exactly what tc netem on that link
would, XDP_TX frames included. The spec is netem's own syntax, a subset:

    loss [random] P%            drop
    delay T [JITTER]            hold each frame T +- JITTER (uniform), so jitter reorders too
    reorder P%                  P% of frames skip the delay (netem's meaning; needs delay)
    duplicate P%                send a second copy
    corrupt P%                  flip one random bit past the Ethernet header
    limit N                     at most N frames held; more are dropped (netem default 1000)

Times as tc writes them (1ms, 500us, 0.5ms, 1s; a bare number is microseconds); percentages
with or without %. Correlations, distributions, rate, slot and gap are refused: the emulator
would silently do something else. Throughput is that of one Python process (tens of thousands
of frames per second), enough for fault tests; benchmarks should not run through it.
"""
from __future__ import annotations

import heapq
import random
import re
import select
import signal
import socket
import sys
import time

from .util import UsageError

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
ETH_HEADER_BYTES = 14

_TIME_UNITS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3,
               "us": 1e-6, "usec": 1e-6, "usecs": 1e-6, "ns": 1e-9, "nsec": 1e-9,
               "nsecs": 1e-9, "": 1e-6}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"


def parse_time(word: str) -> float:
    m = re.fullmatch(_NUMBER + r"([a-z]*)", word)
    if not m or m.group(2) not in _TIME_UNITS:
        raise UsageError(f"netem: {word!r} is not a time (e.g. 1ms, 500us, 0.5ms)")
    return float(m.group(1)) * _TIME_UNITS[m.group(2)]


def is_percent(word: str) -> bool:
    return re.fullmatch(_NUMBER + "%?", word) is not None


def parse_percent(word: str) -> float:
    if not is_percent(word):
        raise UsageError(f"netem: {word!r} is not a percentage (e.g. 5%)")
    value = float(word.rstrip("%")) / 100
    if value > 1:
        raise UsageError(f"netem: {word} is more than 100%")
    return value


class Impairment:
    """One direction's netem spec, and what it does to each frame."""

    def __init__(self):
        self.loss = 0.0
        self.delay_s = 0.0
        self.jitter_s = 0.0
        self.reorder = 0.0
        self.duplicate = 0.0
        self.corrupt = 0.0
        self.limit = 1000

    @staticmethod
    def parse(spec: str) -> "Impairment":
        imp = Impairment()
        words = spec.split()
        i = 0

        def take_correlation() -> None:
            nonlocal i
            if i < len(words) and is_percent(words[i]):
                if parse_percent(words[i]) != 0:
                    raise UsageError(f"netem: correlation ({words[i]}) is not supported by the "
                                     "emulated netem (this kernel has no sch_netem)")
                i += 1

        def need(what: str) -> str:
            nonlocal i
            if i >= len(words):
                raise UsageError(f"netem: {words[i - 1]} needs {what}")
            i += 1
            return words[i - 1]

        while i < len(words):
            word = words[i]
            i += 1
            if word == "loss":
                if i < len(words) and words[i] == "random":
                    i += 1
                imp.loss = parse_percent(need("a percentage"))
                take_correlation()
            elif word == "delay":
                imp.delay_s = parse_time(need("a time"))
                if i < len(words) and re.match(r"^[\d.]", words[i]) and not is_percent(words[i]):
                    imp.jitter_s = parse_time(words[i])
                    i += 1
                    take_correlation()
            elif word in ("reorder", "duplicate", "corrupt"):
                setattr(imp, word, parse_percent(need("a percentage")))
                take_correlation()
            elif word == "limit":
                value = need("a frame count")
                if not value.isdigit():
                    raise UsageError(f"netem: limit {value!r} is not a frame count")
                imp.limit = int(value)
            else:
                raise UsageError(f"netem: {word!r} is not supported by the emulated netem (this "
                                 "kernel has no sch_netem); supported: loss, delay, reorder, "
                                 "duplicate, corrupt, limit")
        if imp.reorder and not imp.delay_s:
            raise UsageError("netem: reorder needs a delay (the reordered frames are the ones "
                             "that skip it)")
        return imp

    def schedule(self, frame: bytes, now: float, held: int, rng: random.Random):
        """(send_at, frame) for each copy of frame that goes out; none if it is lost."""
        if held >= self.limit or (self.loss and rng.random() < self.loss):
            return []
        copies = 2 if self.duplicate and rng.random() < self.duplicate else 1
        out = []
        for _ in range(copies):
            data = frame
            if self.corrupt and rng.random() < self.corrupt and len(frame) > ETH_HEADER_BYTES:
                bit = rng.randrange(ETH_HEADER_BYTES * 8, len(frame) * 8)
                flipped = bytearray(frame)
                flipped[bit // 8] ^= 1 << (bit % 8)
                data = bytes(flipped)
            if self.reorder and rng.random() < self.reorder:
                at = now
            else:
                at = now + max(0.0, self.delay_s + rng.uniform(-self.jitter_s, self.jitter_s))
            out.append((at, data))
        return out


def packet_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    try:
        s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)  # our own sends (Linux 4.20+)
    except OSError:
        pass
    s.setblocking(False)
    return s


def relay(replica_port: str, bridge_port: str, spec_in: str, spec_out: str,
          ready_file: str) -> int:
    towards_replica = Impairment.parse(spec_in)
    from_replica = Impairment.parse(spec_out)
    to_bridge_sock, to_replica_sock = packet_socket(bridge_port), packet_socket(replica_port)
    # frames read on one socket leave through the other
    routes = {to_replica_sock: (to_bridge_sock, from_replica),
              to_bridge_sock: (to_replica_sock, towards_replica)}
    counts = {"in": 0, "out": 0, "sent": 0, "dropped": 0, "send_errors": 0}
    direction = {to_replica_sock: "out", to_bridge_sock: "in"}
    rng = random.Random()
    stopping = False

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    print(f"linkemu: {replica_port} <-> {bridge_port}; in (towards the replica): "
          f"{spec_in or 'none'}; out (from the replica): {spec_out or 'none'}", flush=True)
    open(ready_file, "w").close()
    held: list = []  # heap of (send_at, sequence, socket, frame)
    sequence = 0
    while not stopping:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else 0.5
        try:
            readable, _, _ = select.select(list(routes), [], [], timeout)
        except InterruptedError:
            continue
        now = time.monotonic()
        for sock in readable:
            out_sock, impairment = routes[sock]
            for _ in range(256):
                try:
                    frame, address = sock.recvfrom(65536)
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING:
                    continue
                counts[direction[sock]] += 1
                copies = impairment.schedule(frame, now, len(held), rng)
                if not copies:
                    counts["dropped"] += 1
                for at, data in copies:
                    heapq.heappush(held, (at, sequence, out_sock, data))
                    sequence += 1
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, _, out_sock, data = heapq.heappop(held)
            try:
                out_sock.send(data)
                counts["sent"] += 1
            except OSError:
                counts["send_errors"] += 1
    print("linkemu: stopped; frames " + ", ".join(f"{k} {v}" for k, v in counts.items()),
          flush=True)
    return 0


def main(args) -> int:
    return relay(args.replica_port, args.bridge_port, args.spec_in, args.spec_out,
                 args.ready_file)


if __name__ == "__main__":
    sys.exit("run through `scripts/cell _linkemu`")
