"""Replication on real UDP between namespaces: real voltlockd processes, killed, restarted,
partitioned and fed bad packets. vl_loadgen --verify is the oracle: every write it was told is
committed must be in the cell exactly once."""
import socket
import time

import pytest

from cell import Cell
from cellrig.util import entered_netns
from replication import BackgroundLoad, converged, run_load, statuses, wait_until

pytestmark = [pytest.mark.usefixtures("root"), pytest.mark.voltlockd]


def register_cell(replicas: int, electrode: str = "off") -> Cell:
    """A cell replicating the register machine, whose writes vl_loadgen --verify checks."""
    return Cell(replicas=replicas, electrode=electrode, config_extra={"machine": "register"})


@pytest.mark.parametrize("replicas", [3, 5])
def test_a_cell_commits_ops(replicas):
    with register_cell(replicas) as cell:
        report = run_load(cell, "--clients", "4", "--ops", "2000", "--verify")
        assert report["ops"] >= 2000 and report["verified"]
        wait_until(lambda: converged(cell), 10, "every replica to hold the same state")


def test_leader_killed_under_load_loses_no_acknowledged_op():
    with register_cell(3) as cell:
        old_leader = cell.leader
        with BackgroundLoad(cell, "--clients", "8", "--seconds", "6", "--verify") as load:
            time.sleep(2)
            cell.kill(old_leader)
            report = load.result()
        assert report["verified"], report
        new_leader = cell.wait_for_leader(timeout=10)
        assert new_leader != old_leader
        survivors = [i for i in range(3) if i != old_leader]
        assert statuses(cell)[new_leader]["view"] > 0
        # Clients carried on in the new view.
        assert run_load(cell, "--clients", "2", "--ops", "500", "--verify")["verified"]
        wait_until(lambda: converged(cell, survivors), 10, "the survivors to agree")


def test_a_killed_replica_recovers_through_the_recovery_protocol():
    with register_cell(3) as cell:
        follower = (cell.leader + 1) % 3
        run_load(cell, "--clients", "4", "--ops", "1000")
        cell.kill(follower)
        run_load(cell, "--clients", "4", "--ops", "3000", "--verify")
        cell.start(follower)  # restarts it with --recover: its memory is gone
        wait_until(lambda: converged(cell), 20, "the restarted replica to catch up")
        status = statuses(cell)[follower]
        assert status["counters"]["recoveries"] == 1
        assert status["commit"] >= 4000


def test_a_partitioned_leader_is_replaced_and_rejoins_as_a_follower():
    with register_cell(3) as cell:
        old_leader = cell.leader
        run_load(cell, "--clients", "2", "--ops", "500")
        cell.partition(old_leader)
        new_leader = cell.wait_for_leader(timeout=15)
        assert new_leader != old_leader
        run_load(cell, "--clients", "4", "--ops", "1000", "--verify", "--timeout-ms", "100")
        # Heard by nobody, the old leader stepped down and went on changing views alone
        # (docs/replication.md); healed, its later view is the one the cell agrees on.
        assert statuses(cell)[old_leader]["status"] == "view_change"
        cell.heal()
        wait_until(lambda: converged(cell), 20, "the old leader to rejoin")
        assert len({(s["view"], s["leader"]) for s in statuses(cell)}) == 1


@pytest.mark.parametrize("electrode", ["off", "on"])
def test_loss_reordering_and_duplication_slow_but_do_not_stop_or_split_the_cell(electrode):
    with register_cell(3, electrode) as cell:
        for replica in range(3):
            cell.netem(replica, "loss 5% delay 1ms 1ms reorder 25% duplicate 2%")
        report = run_load(cell, "--clients", "4", "--seconds", "5", "--verify",
                          "--timeout-ms", "50", timeout=180)
        assert report["ops"] > 100 and report["verified"], report
        cell.heal()
        wait_until(lambda: converged(cell), 20, "the replicas to agree after healing")


def test_bad_packets_from_a_client_are_counted_and_ignored():
    with register_cell(3) as cell:
        leader = cell.replicas[cell.leader]
        target = (leader["ip"], leader["udp_port"])
        garbage = b"\x00not a voltlock message at all\xff" * 4
        truncated = bytes.fromhex("564c4b31") + bytes(10)  # the magic, then too little
        header = bytearray(56)
        header[0:4] = bytes.fromhex("564c4b31")  # magic
        header[4] = 1                             # version
        header[5] = 1                             # request
        header[8:12] = (cell.endpoints["cluster_id"] + 1).to_bytes(4, "little")
        wrong_cluster = bytes(header) + bytes(16)
        lying_length = bytearray(header)
        lying_length[8:12] = cell.endpoints["cluster_id"].to_bytes(4, "little")
        lying_length[40:44] = (5000).to_bytes(4, "little")
        with entered_netns(cell.endpoints["client_namespace"]):
            sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with sender:
            for datagram in (garbage, truncated, wrong_cluster, bytes(lying_length)) * 5:
                sender.sendto(datagram, target)
        rejected = wait_until(
            lambda: (lambda r: r if r["bad_magic"] >= 5 and r["truncated"] >= 5
                     and r["wrong_cluster"] >= 5 and r["bad_length"] >= 5 else None)(
                statuses(cell)[cell.leader]["counters"]["rejected"]),
            5, "the leader to count the bad packets")
        assert rejected["bad_magic"] == 5 and rejected["truncated"] == 5
        assert run_load(cell, "--clients", "2", "--ops", "500", "--verify")["verified"]
        wait_until(lambda: converged(cell), 10, "the replicas to agree")
