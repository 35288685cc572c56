"""Driving and inspecting a replication cell: closed-loop UDP clients (build/vl_loadgen) run in
the cell's client namespace, and the replicas' /v1/status."""
import json
import os
import subprocess
import time

from cell import REPO, Cell

LOADGEN = os.environ.get("VL_LOADGEN") or os.path.join(REPO, "build", "vl_loadgen")


def loadgen_argv(cell: Cell, *args: str) -> list[str]:
    config = os.path.join(cell.endpoints["state_dir"], "r0", "config.json")
    namespace = cell.endpoints["client_namespace"]
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    return prefix + [LOADGEN, "--config", config, "--json", *args]


def run_load(cell: Cell, *args: str, timeout: float = 120) -> dict:
    """Runs vl_loadgen to the end and returns its report; fails the test on a violation."""
    done = subprocess.run(loadgen_argv(cell, *args), capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"vl_loadgen failed ({done.returncode}): {done.stdout}{done.stderr}"
    return json.loads(done.stdout)


class BackgroundLoad:
    """vl_loadgen running while a test breaks the cell; result() waits for its report."""

    def __init__(self, cell: Cell, *args: str):
        self.process = subprocess.Popen(loadgen_argv(cell, *args), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)

    def result(self, timeout: float = 120) -> dict:
        out, err = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, f"vl_loadgen failed: {out}{err}"
        return json.loads(out)

    def __enter__(self) -> "BackgroundLoad":
        return self

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def statuses(cell: Cell) -> list:
    """Each replica's /v1/status, or "down"."""
    return cell.status()["replicas"]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def converged(cell: Cell, replicas=None):
    """True once the given replicas (default all) are normal in one view, with equal op and
    commit numbers and the same state machine digest: no divergence."""
    every = statuses(cell)
    chosen = [every[i] for i in (replicas if replicas is not None else range(len(every)))]
    if any(s == "down" or s["status"] != "normal" for s in chosen):
        return False
    keys = {(s["view"], s["op"], s["commit"], s["machine"]["digest"]) for s in chosen}
    return len(keys) == 1 and all(s["op"] == s["commit"] for s in chosen)
