"""scripts/cell --loopback: a cell on 127.0.0.1 without namespaces, for machines without root.
Runs as any user."""
import subprocess

import pytest

from cell import Cell


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


@pytest.mark.voltlockd
def test_loopback_mode_runs_without_namespaces():
    before = netns_names()
    with Cell(loopback=True) as c:
        e = c.endpoints
        assert e["mode"] == "loopback" and netns_names() == before
        assert e["client_namespace"] is None
        assert [(r["ip"], r["udp_port"], r["http_port"]) for r in e["replicas"]] == \
            [("127.0.0.1", 7400 + i, 7480 + i) for i in range(3)]
        status, body = c.request(2, "GET", "/v1/status")
        assert status == 200 and body["replica"] == 2
        failure = c.cell("partition", "0", check=False)
        assert failure.returncode == 1 and "--loopback" in failure.stderr
        assert c.cell("netem", "0", "loss 1%", check=False).returncode == 1
        c.kill(c.leader)
        assert c.wait_for_leader(timeout=10) is not None
        assert c.exec_client("true").returncode == 0  # runs in the current namespace
