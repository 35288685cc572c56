"""Replicas whose wall clock a test can step, as `date -s` or NTP's `makestep` would: every
voltlockd of the cell runs under Debian's libfaketime (`libfaketime`), which offsets its
CLOCK_REALTIME alone (not CLOCK_MONOTONIC) by what a file of its replica says, read again every
second. Give `voltlockd` to the Cell; `step` sets a replica's offset from the true time.

From the shell (tests/browser/run): `steppable_clocks.py DIR VOLTLOCKD [REPLICA=OFFSET_S ...]`
writes the wrapper to DIR/voltlockd and each replica's offset; DIR is the caller's to remove.
Exits 1 without libfaketime."""
import os
import sys
import tempfile

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

# The replica is named by the directory of its --config (scripts/cell: <state dir>/r<i>/).
WRAPPER = """#!/bin/sh
for arg; do [ "$previous" = --config ] && replica=$(basename "$(dirname "$arg")"); previous=$arg; done
offset={offsets}/$replica
[ -f "$offset" ] || echo +0 > "$offset"
export LD_PRELOAD={library} DONT_FAKE_MONOTONIC=1 FAKETIME_CACHE_DURATION=1
export FAKETIME_TIMESTAMP_FILE=$offset
exec {voltlockd} "$@"
"""


def available() -> bool:
    return os.path.exists(LIBFAKETIME)


class SteppableClocks:
    def __init__(self, voltlockd: str, directory: str | None = None):
        """The wrapper and the offsets go to `directory`, or to one of their own, removed with
        this object: keep it until the cell is down."""
        if directory is None:
            self._directory = tempfile.TemporaryDirectory(prefix="vl-clocks-")
            directory = self._directory.name
        self.directory = directory
        self.voltlockd = os.path.join(self.directory, "voltlockd")
        with open(self.voltlockd, "w") as f:
            f.write(WRAPPER.format(library=LIBFAKETIME, offsets=self.directory,
                                   voltlockd=voltlockd))
        os.chmod(self.voltlockd, 0o755)

    def step(self, replica: int, offset_s: int) -> None:
        """r<replica>'s wall clock reads the true time + offset_s from within a second on."""
        with open(os.path.join(self.directory, f"r{replica}"), "w") as f:
            f.write(f"{offset_s:+d}\n")


if __name__ == "__main__":
    if not available():
        sys.exit(f"steppable_clocks: no {LIBFAKETIME} (scripts/install-deps installs it)")
    clocks = SteppableClocks(sys.argv[2], directory=sys.argv[1])
    for setting in sys.argv[3:]:
        replica, offset_s = setting.split("=")
        clocks.step(int(replica), int(offset_s))
