"""The cell rig itself (scripts/cell), tested without trusting it: namespaces and processes are
checked with ip(8) and /proc, and faults by the traffic that gets through.

Most tests need no daemon: `Cell(start=False)` builds the network only. The tests marked
`voltlockd` run the real daemon, and skip while it is not built.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from cell import SCRIPT, Cell, CellCommandError, run_cell, unique_name
from cellrig.state import cells_dir
from cellrig.util import entered_netns, process_start_ticks

pytestmark = pytest.mark.usefixtures("root")

HERE = os.path.dirname(os.path.abspath(__file__))


# --- probes -------------------------------------------------------------------------------------

def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return {line.split(":")[1].strip() for line in out.stdout.splitlines()}


def links_in_every_namespace() -> str:
    """`ip -all netns exec ip -o link`: every interface of every named namespace."""
    out = subprocess.run(["ip", "-all", "netns", "exec", "ip", "-o", "link"],
                         capture_output=True, text=True)
    return out.stdout


def ping_loss(cell: Cell, source, address: str, count: int = 5, interval: float = 0.05,
              wait: float = 1.0) -> float:
    """Fraction of pings from namespace `source` ("client" or an index) that got no answer."""
    done = cell.exec(source, "ping", "-q", "-n", "-c", str(count), "-i", str(interval),
                     "-W", str(wait), address, check=False, timeout=count * interval + 30)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", done.stdout)
    assert m, done.stdout + done.stderr
    return 1 - int(m.group(2)) / int(m.group(1))


def ping_rtts_ms(cell: Cell, source, address: str, count: int = 10) -> list[float]:
    done = cell.exec(source, "ping", "-n", "-c", str(count), "-i", "0.05", "-W", "2", address,
                     check=False, timeout=60)
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", done.stdout)]


def udp_socket(ns: str, address: str = "0.0.0.0", port: int = 0) -> socket.socket:
    with entered_netns(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((address, port))
    return s


def udp_delivered(src_ns: str, dst_ns: str, dst_ip: str, count: int = 20) -> int:
    """Datagrams from src_ns that reach dst_ns: a one-way probe, unlike ping."""
    rx = udp_socket(dst_ns, dst_ip, 9999)
    tx = udp_socket(src_ns)
    try:
        for i in range(count):
            tx.sendto(b"probe %d" % i, (dst_ip, 9999))
            time.sleep(0.005)
        rx.settimeout(0.5)
        got = 0
        while True:
            try:
                rx.recv(100)
                got += 1
            except socket.timeout:
                return got
    finally:
        rx.close()
        tx.close()


def ns(cell: Cell, who) -> str:
    """The namespace of "client" or of replica `who`."""
    if who == "client":
        return cell.endpoints["client_namespace"]
    return cell.replicas[who]["namespace"]


def pid_alive(pid: int) -> bool:
    """Running, not a zombie (where PID 1 does not reap, killed daemons linger as zombies)."""
    return process_start_ticks(pid) is not None


def pgrep(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


# --- building and removing cells ----------------------------------------------------------------

def test_up_builds_the_layout_and_down_leaves_nothing_behind():
    before_ns, before_links = netns_names(), root_links()
    with Cell(replicas=3, start=False) as c:
        name = c.name
        e = c.endpoints
        assert netns_names() - before_ns == {f"vl-{name}-r0", f"vl-{name}-r1", f"vl-{name}-r2",
                                             f"vl-{name}-br", f"vl-{name}-cl"}
        assert root_links() == before_links, "the rig added an interface to the root namespace"
        assert [r["ip"] for r in e["replicas"]] == ["10.77.0.10", "10.77.0.11", "10.77.0.12"]
        assert all(r["udp_port"] == 7400 and r["http_port"] == 7480 for r in e["replicas"])
        bridge = c.exec("bridge", "ip", "-o", "link").stdout
        for port in ("r0", "r1", "r2", "cl"):
            assert re.search(rf"\d+: {port}@\S+:.* master br0 ", bridge), bridge
        eth0 = c.exec(1, "ip", "-o", "addr", "show", "dev", "eth0").stdout
        assert "10.77.0.11/24" in eth0
        assert "state UP" in c.exec(1, "ip", "-o", "link", "show", "dev", "lo").stdout or \
            "LOOPBACK,UP" in c.exec(1, "ip", "-o", "link", "show", "dev", "lo").stdout
        # everyone reaches everyone
        for src in ("client", 0, 1, 2):
            for r in e["replicas"]:
                if src != r["index"]:
                    assert ping_loss(c, src, r["ip"], count=1) == 0, (src, r["ip"])
        # nothing routes out of the cell
        assert c.exec("client", "ip", "route", "get", "1.1.1.1", check=False).returncode != 0
        # a process the rig did not start, left running in a namespace, must not survive `down`
        stray = subprocess.Popen([SCRIPT, "exec", "--name", name, "client", "sleep", "300"])
        deadline = time.time() + 5
        while not subprocess.run(["ip", "netns", "pids", f"vl-{name}-cl"], capture_output=True,
                                 text=True).stdout.strip() and time.time() < deadline:
            time.sleep(0.05)
        state_dir = e["state_dir"]
    stray.wait(timeout=10)
    assert stray.returncode == -signal.SIGKILL
    assert netns_names() == before_ns
    assert f"vl-{name}" not in links_in_every_namespace()
    assert root_links() == before_links
    assert not os.path.exists(state_dir)


@pytest.mark.voltlockd
def test_down_stops_every_daemon_it_started():
    with Cell(replicas=5) as c:
        state = json.load(open(os.path.join(c.endpoints["state_dir"], "cell.json")))
        pids = [r["process"]["pid"] for r in state["replicas"]]
        assert all(pid_alive(pid) for pid in pids)
        names = c.namespaces()
    assert not any(pid_alive(pid) for pid in pids)
    assert not set(names) & netns_names()


def test_two_cells_at_once_are_isolated_from_each_other():
    with Cell(start=False) as a, Cell(start=False) as b:
        assert a.name != b.name
        assert ping_loss(a, "client", "10.77.0.10") == 0
        assert ping_loss(b, "client", "10.77.0.10") == 0
        # the same address in both; a datagram from a's client reaches a's r0, never b's
        assert udp_delivered(ns(a, "client"), ns(a, 0), "10.77.0.10") == 20
        rx_b = udp_socket(ns(b, 0), "10.77.0.10", 9999)
        rx_b.settimeout(0.3)
        try:
            udp_delivered(ns(a, "client"), ns(a, 0), "10.77.0.10")
            with pytest.raises(socket.timeout):
                rx_b.recv(100)
        finally:
            rx_b.close()
        a_names = set(a.namespaces())
    assert not a_names & netns_names()


def test_cleanup_happens_after_an_exception_inside_with():
    before = netns_names()
    with pytest.raises(RuntimeError, match="boom"):
        with Cell(start=False, keep_logs_on_error=False) as c:
            assert set(c.namespaces()) <= netns_names()
            raise RuntimeError("boom")
    assert netns_names() == before
    assert not os.path.exists(c.endpoints["state_dir"])


def test_failed_up_removes_everything_and_says_why(tmp_path):
    before = netns_names()
    crashing = tmp_path / "crashing-daemon"
    crashing.write_text("#!/bin/sh\necho 'config: replicas: pretend this is wrong' >&2\nexit 1\n")
    crashing.chmod(0o755)
    with pytest.raises(CellCommandError) as failure:
        with Cell(voltlockd=str(crashing)):
            pass
    assert failure.value.returncode == 1
    assert "exited at once" in failure.value.stderr
    assert "pretend this is wrong" in failure.value.stderr  # the log tail is in the message
    assert netns_names() == before

    mute = tmp_path / "mute-daemon"  # runs, never answers /v1/status
    mute.write_text("#!/bin/sh\nexec sleep 300\n")
    mute.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(CellCommandError) as failure:
        with Cell(voltlockd=str(mute), timeout=1.5):
            pass
    assert "no leader after 1.5 s" in failure.value.stderr
    assert time.monotonic() - started < 20
    assert netns_names() == before
    assert not [pid for pid in pgrep("^sleep 300$") if pid_alive(pid)]


def test_interrupted_up_removes_everything(tmp_path):
    before = netns_names()
    mute = tmp_path / "mute-daemon"
    mute.write_text("#!/bin/sh\nexec sleep 300\n")
    mute.chmod(0o755)
    name = unique_name("i")
    state_dir = os.path.join(cells_dir(), name)

    def building():
        return os.path.exists(state_dir)

    def starting():
        return bool(subprocess.run(["ip", "netns", "pids", f"vl-{name}-r0"], capture_output=True,
                                   text=True).stdout.strip())

    def waiting():
        if not starting():
            return False
        time.sleep(0.5)
        return True

    for moment in (building, starting, waiting):
        up = subprocess.Popen([SCRIPT, "up", "--name", name, "--replicas", "7", "--voltlockd",
                               str(mute), "--timeout", "30"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while not moment() and time.monotonic() < deadline:
            time.sleep(0.005)
        up.send_signal(signal.SIGINT)
        out, err = up.communicate(timeout=30)
        assert up.returncode == 1, (moment.__name__, err)
        assert netns_names() == before, (moment.__name__, err)
        assert not os.path.exists(state_dir)
        assert not [pid for pid in pgrep("^sleep 300$") if pid_alive(pid)]


def test_usage_errors_exit_2():
    for args in (["up", "--replicas", "4"], ["up", "--name", "much-too-long-name"],
                 ["up", "--config-extra", "not json"], ["frobnicate"]):
        assert run_cell(*args, check=False).returncode == 2, args
    with Cell(start=False) as c:
        assert c.cell("kill", "9", check=False).returncode == 2
        assert c.cell("exec", "nowhere", "true", check=False).returncode == 2
        assert c.cell("partition", "1", "--peers", "1", check=False).returncode == 2
        assert c.cell("kill", "1", check=False).returncode == 1  # valid, but nothing runs


def test_name_is_implied_only_when_one_cell_is_up():
    with Cell(start=False) as a:
        others = [x for x in json.loads(run_cell("list").stdout) if x["name"] != a.name]
        if others:
            pytest.skip("other cells are up on this machine")
        assert json.loads(run_cell("endpoints").stdout)["name"] == a.name
        with Cell(start=False):
            done = run_cell("endpoints", check=False)
            assert done.returncode == 2 and "--name" in done.stderr


# --- faults, measured by the traffic that gets through ------------------------------------------

def test_partition_both_cuts_a_replica_off_and_heal_restores_it():
    with Cell(start=False) as c:
        c.partition(0)
        assert ping_loss(c, "client", "10.77.0.10") == 1
        assert ping_loss(c, 1, "10.77.0.10") == 1
        assert ping_loss(c, 0, "10.77.0.12") == 1
        assert ping_loss(c, 1, "10.77.0.12") == 0  # the others still talk
        c.heal()
        for src in ("client", 1, 2):
            assert ping_loss(c, src, "10.77.0.10") == 0
        assert "voltlock" not in c.exec("bridge", "nft", "list", "tables").stdout


def test_partition_directions_are_one_way():
    with Cell(start=False) as c:
        r0, r1 = ns(c, 0), ns(c, 1)
        c.partition(0, direction="in")
        assert udp_delivered(r1, r0, "10.77.0.10") == 0   # towards r0: dropped
        assert udp_delivered(r0, r1, "10.77.0.11") == 20  # from r0: delivered
        c.heal()
        c.partition(0, direction="out")
        assert udp_delivered(r1, r0, "10.77.0.10") == 20
        assert udp_delivered(r0, r1, "10.77.0.11") == 0
        c.heal()
        assert udp_delivered(r1, r0, "10.77.0.10") == 20
        assert udp_delivered(r0, r1, "10.77.0.11") == 20


def test_partition_peers_splits_the_cell():
    with Cell(replicas=5, start=False) as c:
        # {0, 1} | {2, 3, 4}; the client still reaches everyone
        c.partition(0, peers=[2, 3, 4])
        c.partition(1, peers=[2, 3, 4])
        assert ping_loss(c, 0, "10.77.0.11") == 0
        assert ping_loss(c, 0, "10.77.0.12") == 1
        assert ping_loss(c, 1, "10.77.0.14") == 1
        assert ping_loss(c, 3, "10.77.0.14") == 0
        assert ping_loss(c, "client", "10.77.0.10") == 0
        assert ping_loss(c, "client", "10.77.0.14") == 0
        assert c.status()["faults"]["partitions"][0] == {"replica": 0, "direction": "both",
                                                         "peers": [2, 3, 4]}


@pytest.mark.parametrize("backend", ["auto", "emulated"])
def test_netem_delay_loss_duplicate(backend):
    with Cell(start=False) as c:
        base = ping_rtts_ms(c, "client", "10.77.0.11")
        assert base and max(base) < 10
        c.netem(1, "delay 30ms", backend=backend)
        rtts = ping_rtts_ms(c, "client", "10.77.0.11")
        assert len(rtts) >= 9 and min(rtts) >= 29, rtts  # one way: replies from r1 wait
        assert ping_rtts_ms(c, "client", "10.77.0.12") and \
            max(ping_rtts_ms(c, "client", "10.77.0.12")) < 10  # only r1 is slow

        c.netem(1, "delay 30ms", direction="both", backend=backend)
        assert min(ping_rtts_ms(c, "client", "10.77.0.11")) >= 59

        c.netem(1, "loss 50%", backend=backend)  # replaces the previous spec
        loss = ping_loss(c, "client", "10.77.0.11", count=300, interval=0.002, wait=0.5)
        assert 0.35 < loss < 0.65, loss

        c.netem(1, "duplicate 100%", backend=backend)
        done = c.exec("client", "ping", "-n", "-c", "5", "-i", "0.1", "10.77.0.11", check=False)
        assert done.stdout.count("DUP!") >= 4, done.stdout

        c.netem(1, "loss 5% delay 1ms 0.5ms reorder 25% duplicate 2%", backend=backend)
        assert ping_loss(c, "client", "10.77.0.11", count=50, interval=0.01) < 0.4

        c.heal()
        assert max(ping_rtts_ms(c, "client", "10.77.0.11")) < 10
        assert ping_loss(c, "client", "10.77.0.11", count=50, interval=0.002) == 0
        bridge = c.exec("bridge", "ip", "-o", "link").stdout
        assert " x1@" not in bridge and "ifb-r1" not in bridge
        assert re.search(r"\d+: r1@\S+:.* master br0 ", bridge), bridge
        assert c.status()["faults"] == {"partitions": [], "netem": {}}


def test_partition_and_netem_together():
    with Cell(start=False) as c:
        c.netem(2, "delay 5ms", backend="emulated")
        c.partition(2)  # must hold while the relay is spliced into r2's link
        assert ping_loss(c, "client", "10.77.0.12") == 1
        assert ping_loss(c, 0, "10.77.0.12") == 1
        c.heal()
        assert ping_loss(c, "client", "10.77.0.12") == 0


def test_netem_refuses_what_the_emulator_cannot_do():
    with Cell(start=False) as c:
        failure = c.cell("netem", "0", "delay 10ms 5ms distribution normal", "--backend",
                         "emulated", check=False)
        assert failure.returncode == 2 and "not supported" in failure.stderr
        failure = c.cell("netem", "0", "reorder 10%", "--backend", "emulated", check=False)
        assert failure.returncode == 2 and "needs a delay" in failure.stderr
        assert c.status()["faults"]["netem"] == {}
        assert ping_loss(c, "client", "10.77.0.10") == 0


# --- Electrode: XDP_TX from inside a replica's namespace (DESIGN §6, issue 4) -------------------

def compile_udp_echo(tmp_path) -> str:
    clang = shutil.which("clang")
    if not clang:
        pytest.skip("clang not installed (scripts/install-deps)")
    obj = str(tmp_path / "xdp_udp_echo.o")
    subprocess.run([clang, "-O2", "-g", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu",
                    "-c", os.path.join(HERE, "xdp_udp_echo.bpf.c"), "-o", obj], check=True)
    return obj


def udp_echo_rtt(src_ns: str, address: str, tries: int = 3) -> float | None:
    s = udp_socket(src_ns)
    s.settimeout(1.0)
    try:
        for _ in range(tries):
            started = time.monotonic()
            s.sendto(b"echo?", (address, 9))
            try:
                data, peer = s.recvfrom(100)
                if data == b"echo?" and peer == (address, 9):
                    return time.monotonic() - started
            except socket.timeout:
                pass
        return None
    finally:
        s.close()


@pytest.mark.parametrize("electrode", ["off", "on"])
def test_xdp_tx_from_a_replica_arrives_only_with_electrode_on(tmp_path, electrode):
    obj = compile_udp_echo(tmp_path)
    with Cell(start=False, electrode=electrode) as c:
        c.exec(0, "ip", "link", "set", "dev", "eth0", "xdpdrv", "obj", obj, "sec", "xdp")
        rtt = udp_echo_rtt(ns(c, "client"), "10.77.0.10")
        if electrode == "off":
            assert rtt is None, "XDP_TX was delivered without a program on the bridge-side peer"
            return
        assert rtt is not None
        # faults apply to XDP_TX frames too: they are caught on the bridge side
        c.netem(0, "delay 40ms")
        slow = udp_echo_rtt(ns(c, "client"), "10.77.0.10")
        assert slow is not None and slow >= 0.039
        c.heal()
        c.partition(0, direction="out")
        assert udp_echo_rtt(ns(c, "client"), "10.77.0.10") is None


def test_electrode_attaches_xdp_pass_to_the_bridge_side_peers():
    with Cell(start=False, electrode="on") as c:
        for i in range(3):
            assert "prog/xdp" in c.exec("bridge", "ip", "-d", "link", "show", f"r{i}").stdout
        assert "prog/xdp" not in c.exec("bridge", "ip", "-d", "link", "show", "cl").stdout


# --- the process side --------------------------------------------------------------------------

@pytest.mark.voltlockd
def test_kill_stop_start_and_wait():
    with Cell(replicas=5) as c:
        first = c.leader
        assert first is not None
        c.kill(first)
        assert c.status()["replicas"][first] == "down"
        second = c.wait_for_leader(timeout=10)
        assert second != first
        c.stop((second + 1) % 5)
        assert c.wait_for_leader(timeout=10) == second
        c.start(first)
        c.start((second + 1) % 5)
        assert "--recover" in open(c.replicas[first]["log"]).read()
        statuses = c.status()["replicas"]
        assert all(isinstance(s, dict) for s in statuses)
        assert c.wait_for_leader(timeout=10) is not None
        assert all(s["status"] == "normal" for s in c.status()["replicas"])


@pytest.mark.voltlockd
def test_wait_ignores_a_partitioned_leader_and_needs_a_majority():
    with Cell(replicas=3) as c:
        old = c.leader
        old_view = c.status()["replicas"][old]["view"]
        c.partition(old)
        new = c.wait_for_leader(timeout=10)
        assert new != old
        # the cut-off replica is still seen by `status` (asked from inside its namespace): it
        # knows nothing of the new view
        assert c.status()["replicas"][old]["view"] == old_view
        c.heal()
        new = c.wait_for_leader(timeout=10)
        assert all(s["status"] == "normal" for s in c.status()["replicas"])
        others = [i for i in range(3) if i != new]
        c.kill(others[0])
        c.kill(others[1])
        with pytest.raises(CellCommandError, match="a leader needs 2"):
            c.wait_for_leader(timeout=1)


@pytest.mark.voltlockd
def test_request_reaches_replicas_from_the_client_namespace():
    with Cell() as c:
        status, body = c.request(1, "GET", "/v1/status")
        assert status == 200 and body["replica"] == 1


# --- with the real daemon -----------------------------------------------------------------------

@pytest.mark.voltlockd
@pytest.mark.parametrize("replicas", [3, 5, 7])
def test_real_cell_elects_a_leader(replicas):
    with Cell(replicas=replicas) as c:
        assert c.leader is not None
        statuses = c.status()["replicas"]
        assert all(s["status"] == "normal" and s["leader"] == c.leader for s in statuses)


@pytest.mark.voltlockd
def test_real_cell_survives_leader_crash_and_recovers_it():
    with Cell(replicas=3) as c:
        old = c.leader
        c.kill(old)
        new = c.wait_for_leader(timeout=20)
        assert new != old
        c.start(old)
        c.wait_for_leader(timeout=20)
        assert c.status()["replicas"][old]["status"] == "normal"


@pytest.mark.voltlockd
def test_real_cell_stops_cleanly_on_sigterm():
    with Cell(replicas=3) as c:
        follower = (c.leader + 1) % 3
        c.stop(follower)  # fails if the daemon needs SIGKILL
        c.start(follower)
        c.wait_for_leader(timeout=20)


@pytest.mark.voltlockd
def test_real_cell_elects_a_new_leader_when_the_leader_is_partitioned():
    with Cell(replicas=5) as c:
        old = c.leader
        c.partition(old)
        new = c.wait_for_leader(timeout=20)
        assert new != old
        c.heal()
        c.wait_for_leader(timeout=20)


@pytest.mark.voltlockd
def test_real_cell_under_netem():
    with Cell(replicas=3) as c:
        for i in range(3):
            c.netem(i, "loss 5% delay 1ms 0.5ms reorder 25% duplicate 2%", direction="both")
        assert c.wait_for_leader(timeout=20) is not None
        c.heal()


@pytest.mark.voltlockd
def test_real_cell_with_electrode_on():
    with Cell(replicas=3, electrode="on") as c:
        assert c.leader is not None
        old = c.leader
        c.kill(old)
        assert c.wait_for_leader(timeout=20) != old
