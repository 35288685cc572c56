"""GET /v1/cluster/replicas (docs/api.md), which the web UI's cell page polls once a second:
every replica's /v1/status as the asked replica gets it, with a replica that is down or cut off
reported unreachable within the 0.8 s deadline, and the leader's commit-latency histogram."""
import time

import pytest

from api import call
from cell import Cell
from replication import wait_until

pytestmark = [pytest.mark.usefixtures("root"), pytest.mark.voltlockd]


def replicas_seen_by(cell: Cell, replica: int):
    answer = call(cell, replica, "GET", "/v1/cluster/replicas", timeout=5)
    assert answer.status == 200, answer
    assert answer["replica"] == replica
    return answer


def test_every_replica_is_seen_and_the_unreachable_ones_say_why():
    with Cell(replicas=3) as c:
        leader = c.leader
        followers = [r for r in range(3) if r != leader]
        answer = replicas_seen_by(c, followers[0])
        entries = answer["replicas"]
        assert [e["replica"] for e in entries] == [0, 1, 2]
        assert [e["self"] for e in entries] == [r == followers[0] for r in range(3)]
        for e in entries:
            assert e["reachable"] is True, e
            assert e["status"]["replica"] == e["replica"]
            assert e["ip"] == c.replicas[e["replica"]]["ip"]
            assert e["status"]["leader"] == leader

        # The leader's histogram counts the ops proposed there.
        before = entries[leader]["status"]["commit_latency_us"]
        for i in range(20):
            assert call(c, followers[0], "PUT", f"/v1/kv/latency/{i}", {"value": "x"}).status == 200
        after = replicas_seen_by(c, followers[0])["replicas"][leader]["status"]["commit_latency_us"]
        assert after["count"] >= before["count"] + 20
        assert sum(after["counts"]) == after["count"]
        assert len(after["counts"]) == len(after["bounds_us"]) + 1

        # Cut off: no connection within the deadline, and the answer still comes in time.
        c.partition(followers[1])
        try:
            started = time.monotonic()
            cut = replicas_seen_by(c, leader)["replicas"][followers[1]]
            assert time.monotonic() - started < 2.0
            assert cut["reachable"] is False and cut["error"], cut
            assert "status" not in cut
        finally:
            c.heal()
        wait_until(lambda: replicas_seen_by(c, leader)["replicas"][followers[1]]["reachable"],
                   timeout=10, what="the healed replica answers again")

        # Down: refused at once.
        c.kill(followers[1])
        started = time.monotonic()
        down = replicas_seen_by(c, followers[0])["replicas"][followers[1]]
        assert time.monotonic() - started < 1.0
        assert down["reachable"] is False
        assert "refused" in down["error"], down
