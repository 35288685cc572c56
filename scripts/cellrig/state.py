"""What the rig remembers about a cell between commands: one directory per cell.

    $VOLTLOCK_CELLS_DIR (default /tmp/voltlock-cells, or /tmp/voltlock-cells-UID when not root)
      .lock                 held while a command changes any cell
      <name>/cell.json      the record below, rewritten atomically after every change
      <name>/r<i>/          replica i's working directory: config.json, voltlockd.log
      <name>/r<i>/data/     replica i's data dir (DIR/r<i> instead with `up --data-root DIR`)
      <name>/linkemu-r<i>.log   the emulated netem relay's log, when one ran

cell.json holds the layout (namespaces, addresses, ports), each replica's data dir and whether
the rig made it, the processes the rig started (pid and start time), the faults in force, and the
leader found by the last `up` or `wait`. The options of `up` that shape the configs (durability
and the rest of config_extra, data_root) are kept too.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import string

from .util import CellError, UsageError

NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")
NAME_RULE = "1 to 8 characters, a-z and 0-9, starting with a letter"


def cells_dir() -> str:
    default = "/tmp/voltlock-cells" if os.geteuid() == 0 else f"/tmp/voltlock-cells-{os.geteuid()}"
    return os.environ.get("VOLTLOCK_CELLS_DIR") or default


def cell_dir(name: str) -> str:
    return os.path.join(cells_dir(), name)


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise UsageError(f"cell name {name!r}: use {NAME_RULE}")
    return name


def random_name() -> str:
    return secrets.choice(string.ascii_lowercase) + "".join(
        secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))


def known_cells() -> list[str]:
    try:
        entries = sorted(os.listdir(cells_dir()))
    except FileNotFoundError:
        return []
    return [e for e in entries
            if NAME_RE.match(e) and os.path.exists(os.path.join(cells_dir(), e, "cell.json"))]


def resolve_name(name: str | None) -> str:
    """--name if given; else the only cell there is."""
    if name:
        return check_name(name)
    cells = known_cells()
    if len(cells) == 1:
        return cells[0]
    if not cells:
        raise CellError(f"no cell is up (looked in {cells_dir()}); start one with "
                        "`scripts/cell up`")
    raise UsageError(f"{len(cells)} cells are up ({', '.join(cells)}); say which with --name")


@contextlib.contextmanager
def rig_lock():
    """Serialises commands that change cells, so two `up`s cannot take the same name and a
    `heal` cannot race a `partition`. Waiting for a leader happens outside the lock."""
    os.makedirs(cells_dir(), exist_ok=True)
    with open(os.path.join(cells_dir(), ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Cell:
    """The record of one cell (cell.json), as a dict with a few named accessors."""

    def __init__(self, data: dict):
        self.data = data

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def dir(self) -> str:
        return self.data["state_dir"]

    @property
    def loopback(self) -> bool:
        return self.data["mode"] == "loopback"

    @property
    def replicas(self) -> list[dict]:
        return self.data["replicas"]

    @property
    def durability(self) -> str | None:
        """snapshot or sync; None for a cell made with --in-memory (no data dirs)."""
        if not any(r.get("data_dir") for r in self.replicas):
            return None
        return (self.data.get("config_extra") or {}).get("durability")

    @property
    def faults(self) -> dict:
        return self.data.setdefault("faults", {"partitions": [], "netem": {}})

    def replica(self, index: int) -> dict:
        if not 0 <= index < len(self.replicas):
            raise UsageError(f"cell {self.name} has replicas 0..{len(self.replicas) - 1}, "
                             f"not {index}")
        return self.replicas[index]

    def save(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        path = os.path.join(self.dir, "cell.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.data, f, indent=2)
            f.write("\n")
        os.replace(path + ".tmp", path)

    @staticmethod
    def load(name: str) -> "Cell":
        path = os.path.join(cell_dir(name), "cell.json")
        try:
            with open(path) as f:
                return Cell(json.load(f))
        except FileNotFoundError:
            others = known_cells()
            hint = f"cells that are up: {', '.join(others)}" if others else "no cell is up"
            raise CellError(f"no cell named {name} ({path} is missing); {hint}")

    def endpoints(self) -> dict:
        """What `up` and `endpoints` print: enough for a client or a test to reach the cell."""
        keys = ("index", "namespace", "ip", "udp_port", "http_port", "http", "log", "data_dir")
        return {
            "name": self.name,
            "mode": self.data["mode"],
            "cluster_id": self.data["cluster_id"],
            "replication_key_file": self.data.get("replication_key_file"),
            "electrode": self.data["electrode"],
            "durability": self.durability,
            "replicas": [{k: r.get(k) for k in keys} for r in self.replicas],
            "client_namespace": self.data["client_namespace"],
            "bridge_namespace": self.data["bridge_namespace"],
            "leader": self.data.get("leader"),
            "state_dir": self.dir,
            # `up --tls on`: the cell CA's certificate, for clients (cacert=, --cacert)
            "tls_ca": os.path.join(self.data["tls"], "ca.pem") if self.data.get("tls") else None,
            # `up --auth on`: the admin token (a test cell's), and the token and roles files
            "admin_token": self.data.get("admin_token"),
            "auth_dir": self.data.get("auth"),
        }
