"""Electrode on real veths (DESIGN.md §3, docs/electrode.md): the eBPF fast paths run in cells of
3, 5 and 7 replicas, and every failure test of the slow path holds with them on. The kernel's own
counters prove which fast path ran."""
import time

import pytest

from cell import Cell
from replication import BackgroundLoad, converged, run_load, statuses, wait_until

pytestmark = [pytest.mark.usefixtures("root"), pytest.mark.voltlockd]


def electrode_cell(replicas: int, **extra) -> Cell:
    return Cell(replicas=replicas, electrode="on", config_extra={"machine": "register", **extra})


def kernel_counters(cell: Cell, replica: int) -> dict:
    return statuses(cell)[replica]["electrode"]["counters"]


def fast_path_totals(cell: Cell) -> dict:
    """Per fast path, how often it acted, summed over the cell."""
    totals = {"fast_acks": 0, "quorums": 0, "clones": 0}
    for status in statuses(cell):
        if status == "down":
            continue
        counters = status["electrode"]["counters"]
        totals["fast_acks"] += counters.get("fa_appended", 0)
        totals["quorums"] += counters.get("q_complete", 0)
        totals["clones"] += counters.get("tc_clones", 0)
    return totals


@pytest.mark.parametrize("replicas", [3, 5, 7])
def test_every_fast_path_runs(replicas):
    with electrode_cell(replicas) as cell:
        report = run_load(cell, "--clients", "8", "--seconds", "2", "--verify")
        assert report["verified"]
        # The leader now: a view change under the load's first burst (5 replicas and the load on
        # 2 cores) hands the rest of the run to another, and the first may have had no time to
        # resolve its peers and clone anything. So the leaders' paths are summed over the cell.
        leader = cell.wait_for_leader()
        assert statuses(cell)[leader]["electrode"]["xdp_mode"] in ("native", "generic")
        totals = fast_path_totals(cell)
        assert totals["quorums"] > 0               # quorums counted in a leader's XDP
        assert totals["clones"] > 0                # Prepares cloned at a leader's TC egress
        for follower in range(replicas):
            if follower != leader:                 # Prepares acknowledged in followers' XDP
                assert kernel_counters(cell, follower)["fa_appended"] > 0
        wait_until(lambda: converged(cell), 10, "every replica to hold the same state")


def test_leader_killed_under_load_and_the_fast_path_resumes_in_the_new_view():
    with electrode_cell(3) as cell:
        old_leader = cell.leader
        with BackgroundLoad(cell, "--clients", "8", "--seconds", "6", "--verify") as load:
            time.sleep(2)
            cell.kill(old_leader)
            report = load.result()
        assert report["verified"], report
        new_leader = cell.wait_for_leader(timeout=10)
        survivors = [r for r in range(3) if r != old_leader]
        before = fast_path_totals(cell)
        assert run_load(cell, "--clients", "4", "--ops", "3000", "--verify")["verified"]
        after = fast_path_totals(cell)
        # The original Electrode code left the fast path off after a view change.
        assert after["quorums"] > before["quorums"]
        assert after["fast_acks"] > before["fast_acks"]
        follower = next(r for r in survivors if r != new_leader)
        kernel = statuses(cell)[follower]["electrode"]["kernel_fast_ack"]
        assert kernel["view"] == statuses(cell)[new_leader]["view"]
        wait_until(lambda: converged(cell, survivors), 10, "the survivors to agree")


def test_mixed_op_sizes_with_the_fast_paths_on():
    with electrode_cell(3) as cell:
        report = run_load(cell, "--clients", "8", "--ops", "4000", "--payload-bytes", "1-1300",
                          "--verify")
        assert report["verified"]
        assert kernel_counters(cell, cell.leader)["q_complete"] > 0
        wait_until(lambda: converged(cell), 10, "every replica to hold the same state")


def test_a_lost_quorum_ack_does_not_stall_a_closed_loop_client():
    with electrode_cell(3) as cell:
        leader = cell.replicas[cell.leader]
        # After the leader's XDP marked an ack as completing a quorum, and before the socket:
        # netfilter in the leader's namespace drops a third of the marked ones (flags sit 6
        # bytes into the UDP payload, little-endian; VL_FLAG_QUORUM is bit 1).
        ruleset = """
            table inet vltest {
                chain input {
                    type filter hook input priority 0;
                    udp dport 7400 @th,112,16 & 0x0200 == 0x0200 numgen random mod 3 == 0 counter drop
                }
            }
        """
        cell.exec(cell.leader, "nft", "-f", "-", input=ruleset)
        report = run_load(cell, "--clients", "1", "--seconds", "4", "--verify", "--timeout-ms",
                          "500")
        dropped = cell.exec(cell.leader, "nft", "list", "table", "inet", "vltest").stdout
        assert "packets 0 " not in dropped, "the rule never dropped a marked ack"
        assert report["verified"]
        assert report["ops"] > 200, report  # kept going; each loss costs about one tick
        assert report["retries"] == 0, report  # recovered inside the cell, not by the client
        assert leader["index"] == cell.leader


def test_without_the_kernel_the_same_binary_runs_vr_in_user_space():
    with electrode_cell(3, interface="vl-nonexistent") as cell:
        assert run_load(cell, "--clients", "4", "--ops", "1000", "--verify")["verified"]
        log = open(cell.replicas[0]["log"]).read()
        assert "VR runs in user space" in log and "vl-nonexistent" in log
        assert statuses(cell)[0]["electrode"] == {"mode": "off"}
