#!/usr/bin/env python3
"""Runs the clib cell tests: builds a 3-replica cell (scripts/cell, network namespaces), runs each
test binary given in its client namespace, and tears the cell down whatever happens.

    run_in_cell.py [--example FENCED_WRITE] [--env NAME=VALUE]... [--snapshot-every-ops N]
                   [--auth] BINARY... [-- ARGS]

--example runs client/c/examples/fenced_write.c's program once, as a user would; --env adds to
each binary's environment (the lockctl tier passes LOCKCTL=path this way);
--snapshot-every-ops makes the replicas write snapshots that often (lockctl snapshot save's test);
--auth builds the cell with auth on (`scripts/cell up --auth on`) and gives each binary the admin
token in VL_TEST_ADMIN_TOKEN (the auth tests of libvoltlock and lockctl).

Needs root and voltlockd ($VOLTLOCKD, else build/voltlockd); without them it says why and exits
77, which ctest counts as skipped."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from cell import SCRIPT, Cell, unique_name, voltlockd_available, voltlockd_path  # noqa: E402

SKIP = 77


def main() -> int:
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    example = None
    extra_env = {}
    snapshot_every_ops = None
    auth = "off"
    while argv[:1] in (["--example"], ["--env"], ["--snapshot-every-ops"], ["--auth"]):
        if argv[0] == "--auth":
            auth = "on"
            argv = argv[1:]
            continue
        if argv[0] == "--example":
            example = argv[1]
        elif argv[0] == "--snapshot-every-ops":
            snapshot_every_ops = int(argv[1])
        else:
            name, _, value = argv[1].partition("=")
            extra_env[name] = value
        argv = argv[2:]
    if os.geteuid() != 0:
        print("clib cell tests: skipped, they build network namespaces and need root")
        return SKIP
    if not voltlockd_available():
        print(f"clib cell tests: skipped, {voltlockd_path()} is not built")
        return SKIP
    failed = 0
    with Cell(replicas=3, name=unique_name("c"), snapshot_every_ops=snapshot_every_ops,
              auth=auth) as cell:
        endpoints = ",".join(r["http"] for r in cell.replicas)
        if auth == "on":
            extra_env["VL_TEST_ADMIN_TOKEN"] = cell.endpoints["admin_token"]
        for binary in argv:
            run = os.path.basename(binary)
            env = {
                "VL_TEST_ENDPOINTS": endpoints,
                "VL_TEST_CELL": cell.name,
                "VL_TEST_CELL_SCRIPT": SCRIPT,
                "VL_TEST_CELL_STATE": cell.endpoints["state_dir"],
                "VL_TEST_RUN": f"{run}-{os.getpid()}",
                "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
                "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
                **extra_env,
            }
            command = ["env", *[f"{k}={v}" for k, v in env.items()], binary, *extra]
            print(f"== {run} in {cell.name}'s client namespace", flush=True)
            done = cell.exec_client(*command, check=False, timeout=600)
            sys.stdout.write(done.stdout)
            sys.stdout.write(done.stderr)
            if done.returncode != 0:
                print(f"== {run} exited {done.returncode}")
                failed += 1
            # The next binary starts on a cell with every replica up and a leader.
            cell.heal()
            cell.cell("start", "all", check=False)  # fails harmlessly when all are running
            cell.wait_for_leader(timeout=30)
        if example:
            done = cell.exec_client("env", f"VOLTLOCK_ENDPOINTS={endpoints}", example,
                                    "example/lock", "example/config", "10.0.0.5", check=False)
            sys.stdout.write(done.stdout + done.stderr)
            if done.returncode != 0 or "wrote example/config" not in done.stdout:
                print(f"== the example exited {done.returncode}")
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
