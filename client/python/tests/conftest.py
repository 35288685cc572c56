"""Fixtures for the SDK's tests against a real cell (scripts/cell, network namespaces, root).

The cell is built once per run (tests/integration/cell.py). Each test that uses `cell` runs with
the test's thread inside the cell's client namespace, so the SDK's sockets, and the threads and
event loops it starts, are there, as a client's would be; the rig's own commands (kill,
partition, ...) run from the host's namespace, where the cell was built.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from typing import Any, Iterator, List

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import replication  # noqa: E402
from cell import Cell, unique_name, voltlockd_available, voltlockd_path  # noqa: E402
from cellrig.util import entered_netns, entered_netns_fd  # noqa: E402

HOST_NETNS = os.open("/proc/self/ns/net", os.O_RDONLY)
STREAM_BUFFER_BYTES = 64 * 1024


class SdkCell(Cell):
    """A Cell whose rig commands run from the host's namespace whatever thread calls them."""

    harmed = False

    def cell(self, command: str, *args: str, **kwargs: Any):  # type: ignore[override]
        if command in ("kill", "stop", "partition", "netem"):
            self.harmed = True
        with entered_netns_fd(HOST_NETNS):
            return super().cell(command, *args, **kwargs)

    def make_whole(self) -> None:
        """Heals every partition and starts every replica that is down, then waits for a
        leader."""
        if not self.harmed:
            return
        self.heal()
        down = [i for i, r in enumerate(self.status()["replicas"]) if r == "down"]
        if down:
            self.start(*down)
        self.wait_for_leader(timeout=30)
        self.harmed = False

    def urls(self, *indexes: int) -> List[str]:
        chosen = indexes or tuple(r["index"] for r in self.replicas)
        return [self.replicas[i]["http"] for i in chosen]

    def restart(self, replica: int) -> None:
        """Starts a killed replica again and waits until the cell agrees on a leader."""
        self.start(replica)
        self.wait_for_leader(timeout=30)


@pytest.fixture(scope="session")
def cell_once() -> Iterator[SdkCell]:
    if os.geteuid() != 0:
        pytest.skip("the SDK's cell tests build network namespaces and need root")
    if not shutil.which("ip") or not shutil.which("nft"):
        pytest.skip("missing ip/nft; run scripts/install-deps")
    if not voltlockd_available():
        pytest.skip(f"voltlockd is not built ({voltlockd_path()} missing; set VOLTLOCKD)")
    # A small stream buffer (1 MiB by default), so that a watch that stops reading is cut soon.
    # VOLTLOCK_SDK_CELL_PREFIX: a prefix of its own for the cell's name (runs beside others').
    with SdkCell(replicas=3, name=unique_name(os.environ.get("VOLTLOCK_SDK_CELL_PREFIX", "py")),
                 config_extra={"http_stream_buffer_bytes": STREAM_BUFFER_BYTES}) as c:
        yield c


@pytest.fixture
def cell(cell_once: SdkCell) -> Iterator[SdkCell]:
    """The shared cell, with this test inside its client namespace. A test that harmed the cell
    (killed, partitioned) heals it before the next one starts."""
    cell_once.make_whole()
    with entered_netns(cell_once.endpoints["client_namespace"]):
        yield cell_once


# wait_until(condition, timeout, what): the cell tiers' poll (tests/integration/replication.py),
# every 50 ms: the SDK's tests time how soon a client notices a change.
wait_until = functools.partial(replication.wait_until, interval=0.05)


def fresh(prefix: str) -> str:
    """A name no other test uses."""
    return f"{prefix}-{os.urandom(4).hex()}"


def replica_pid(cell: Cell, index: int) -> int:
    """The pid of a replica's voltlockd, as the rig recorded it (for SIGSTOP / SIGCONT)."""
    with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
        return json.load(f)["replicas"][index]["process"]["pid"]


def replica_index(cell: Cell, url: str) -> int:
    return next(r["index"] for r in cell.replicas if r["http"] == url)
