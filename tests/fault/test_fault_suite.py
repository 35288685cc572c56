"""The fault suite against real cells of 3 and 5 replicas (fault_suite.py; docs/fault-testing.md).

CI runs a short schedule of every fault kind (CI_NEMESES). Longer runs, other faults or a replay
of a schedule:

    VOLTLOCK_FAULT_SECONDS=600 VOLTLOCK_FAULT_NEMESES=all VOLTLOCK_FAULT_SEED=7 \\
        .venv/bin/python -m pytest -s tests/fault/test_fault_suite.py
"""
import os

import pytest

from fault_suite import parse_args, print_report, run

pytestmark = pytest.mark.usefixtures("voltlockd")

# CI runs these, in sync durability (fault_suite.py's default): every fault kind. Whole-cell
# restarts (power-cut, restart) were left out while a long log after the last snapshot made the
# cell change views for ever (docs/fault-testing.md, "whole-cell restarts with long logs").
CI_NEMESES = ["kill", "pause", "partition", "partition-in", "partition-out", "isolate-leader",
              "netem", "disk-loss", "power-cut", "restart", "clock-step", "clock-restart"]

SECONDS = float(os.environ.get("VOLTLOCK_FAULT_SECONDS", "40"))
NEMESES = os.environ.get("VOLTLOCK_FAULT_NEMESES", ",".join(CI_NEMESES))
SEED = os.environ.get("VOLTLOCK_FAULT_SEED")


@pytest.mark.parametrize("replicas", [3, 5])
def test_no_violation_and_the_cell_comes_back_after_every_fault(replicas):
    argv = ["--replicas", str(replicas), "--seconds", str(SECONDS), "--nemeses", NEMESES]
    if SEED is not None:
        argv += ["--seed", SEED]
    report = run(parse_args(argv))
    print_report(report)
    assert not report["errors"], report["errors"]
    assert not report["violations"], report["violations"]
    assert sum(f["count"] for f in report["faults"].values()) > 0, "no fault was injected"
    assert report["ops"]["write ok"] > 0 and report["ops"]["lock grants"] > 0
