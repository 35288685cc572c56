"""A Voltlock test cell for pytest: a thin wrapper around scripts/cell.

    from cell import Cell

    with Cell(replicas=3) as c:            # scripts/cell up; down on the way out, always
        old = c.leader
        c.kill(old)
        new = c.wait_for_leader(timeout=10)
        c.start(old)                        # restarts on its data dir (and with --recover)
        c.kill("all"); c.start("all")       # every replica crashes at once, then restarts
        c.partition(new, direction="in")
        c.netem(1, "loss 5% delay 1ms")
        c.heal()
        status, body = c.request(new, "GET", "/v1/status")   # from the client namespace
        c.exec_client("ping", "-c1", "10.77.0.10")

Every call runs scripts/cell with this cell's --name; a failing command raises CellCommandError
carrying its exit code and stderr. If the body of the `with` raises, the replicas' log tails are
printed (pytest shows them with the failure) and the state dir is kept for a look.
"""
from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import string
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "cell")

sys.path.insert(0, os.path.join(REPO, "scripts"))
from cellrig.util import NamespacedConnection, tail  # noqa: E402


def voltlockd_path() -> str:
    """The daemon the tests run: $VOLTLOCKD, else build/voltlockd."""
    return os.environ.get("VOLTLOCKD") or os.path.join(REPO, "build", "voltlockd")


def voltlockd_available() -> bool:
    path = voltlockd_path()
    return os.path.isfile(path) and os.access(path, os.X_OK)


def unique_name(prefix: str = "t") -> str:
    """A cell name no other test run uses: prefix and random characters, 7 in all."""
    alphabet = string.ascii_lowercase + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(7 - len(prefix)))


class CellCommandError(Exception):
    def __init__(self, argv: list[str], returncode: int, stdout: str, stderr: str):
        self.argv, self.returncode, self.stdout, self.stderr = argv, returncode, stdout, stderr
        super().__init__(f"{' '.join(argv[1:])} exited {returncode}:\n{stderr.strip()}")


def run_cell(*args: str, check: bool = True, timeout: float = 120,
             input: str | None = None) -> subprocess.CompletedProcess:
    """Runs scripts/cell. On timeout it is interrupted (SIGTERM) so it can clean up, not
    killed outright."""
    argv = [SCRIPT, *args]
    with subprocess.Popen(argv, stdin=subprocess.PIPE if input else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            err += f"\n(scripts/cell did not finish within {timeout:g} s)"
            raise CellCommandError(argv, -1, out, err)
    if check and proc.returncode != 0:
        raise CellCommandError(argv, proc.returncode, out, err)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def json_exchange(conn: http.client.HTTPConnection, method: str, path: str, body=None,
                  headers: dict | None = None) -> tuple[int, object, dict]:
    """One request over `conn` (closed after), `body` sent as JSON: the status, the answer's
    JSON (or its text, if it is not JSON) and its headers (names in lower case)."""
    sent = dict(headers or {})
    payload = None
    if body is not None:
        payload = json.dumps(body)
        sent["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=payload, headers=sent)
        response = conn.getresponse()
        text = response.read().decode()
        answer_headers = {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
    try:
        return response.status, json.loads(text), answer_headers
    except ValueError:
        return response.status, text, answer_headers


class Cell:
    def __init__(self, replicas: int = 3, *, name: str | None = None, electrode: str = "off",
                 loopback: bool = False, config_extra: dict | None = None,
                 voltlockd: str | None = None, log_level: str | None = None,
                 mtu: int | None = None, start: bool = True, timeout: float = 20.0,
                 keep_logs_on_error: bool = True, durability: str | None = None,
                 snapshot_every_ops: int | None = None,
                 snapshot_every_seconds: int | None = None, data_root: str | None = None,
                 in_memory: bool = False, tls: str = "off", auth: str = "off"):
        """start=False builds the network only (no daemon), for testing the rig itself.
        Every replica has a data dir unless in_memory; data_root puts replica i's at
        data_root/r<i> (a small tmpfs, say) instead of in the cell's state dir."""
        self.name = name or unique_name()
        self.replica_count = replicas
        self.electrode = electrode
        self.loopback = loopback
        self.config_extra = config_extra
        self.voltlockd = voltlockd
        self.log_level = log_level
        self.mtu = mtu
        self.start_daemons = start
        self.timeout = timeout
        self.keep_logs_on_error = keep_logs_on_error
        self.durability = durability
        self.snapshot_every_ops = snapshot_every_ops
        self.snapshot_every_seconds = snapshot_every_seconds
        self.data_root = data_root
        self.in_memory = in_memory
        self.tls = tls  # on, off, mtls (scripts/cell up --tls)
        self.auth = auth  # on, off (scripts/cell up --auth)
        self._endpoints: dict | None = None
        self._leader: int | None = None
        self._is_up = False

    # --- lifecycle ---

    def __enter__(self) -> "Cell":
        try:
            self.up()
        except BaseException:
            # `up` cleans up after itself; this covers its being interrupted or timed out.
            self.down(missing_ok=True)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        failed = exc_type is not None
        if failed and self._endpoints:
            self.print_log_tails()
        self.down(keep_logs=failed and self.keep_logs_on_error, missing_ok=True)
        return False

    def up(self) -> dict:
        args = ["up", "--name", self.name, "--replicas", str(self.replica_count),
                "--electrode", self.electrode, "--timeout", str(self.timeout)]
        if self.loopback:
            args.append("--loopback")
        if self.config_extra:
            args += ["--config-extra", json.dumps(self.config_extra)]
        if self.voltlockd:
            args += ["--voltlockd", self.voltlockd]
        if self.log_level:
            args += ["--log-level", self.log_level]
        if self.mtu:
            args += ["--mtu", str(self.mtu)]
        if self.durability:
            args += ["--durability", self.durability]
        if self.snapshot_every_ops is not None:
            args += ["--snapshot-every-ops", str(self.snapshot_every_ops)]
        if self.snapshot_every_seconds is not None:
            args += ["--snapshot-every-seconds", str(self.snapshot_every_seconds)]
        if self.data_root:
            args += ["--data-root", str(self.data_root)]
        if self.in_memory:
            args.append("--in-memory")
        if self.tls != "off":
            args += ["--tls", self.tls]
        if self.auth != "off":
            args += ["--auth", self.auth]
        if not self.start_daemons:
            args.append("--no-start")
        self._is_up = True
        done = run_cell(*args, timeout=self.timeout + 60)
        self._endpoints = json.loads(done.stdout)
        self._leader = self._endpoints["leader"]
        return self._endpoints

    def down(self, keep_logs: bool = False, missing_ok: bool = False) -> None:
        if not self._is_up:
            return
        args = ["down", "--name", self.name] + (["--keep-logs"] if keep_logs else [])
        try:
            run_cell(*args)
        except CellCommandError as e:
            if not (missing_ok and "no cell named" in e.stderr):
                raise
        self._is_up = False
        if keep_logs:
            print(f"cell {self.name}: logs kept in {self.endpoints_or_empty().get('state_dir')}",
                  file=sys.stderr)

    # --- what the cell looks like ---

    @property
    def endpoints(self) -> dict:
        if self._endpoints is None:
            raise RuntimeError(f"cell {self.name} is not up")
        return self._endpoints

    def endpoints_or_empty(self) -> dict:
        return self._endpoints or {}

    @property
    def leader(self) -> int | None:
        """The leader found by the last up or wait_for_leader (not a fresh question)."""
        return self._leader

    @property
    def replicas(self) -> list[dict]:
        return self.endpoints["replicas"]

    def namespaces(self) -> list[str]:
        e = self.endpoints
        if e["mode"] == "loopback":
            return []
        return [r["namespace"] for r in e["replicas"]] + [e["bridge_namespace"],
                                                           e["client_namespace"]]

    # --- commands ---

    def cell(self, command: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return run_cell(command, "--name", self.name, *args, **kwargs)

    # kill, stop and start take one or more replica indexes, or "all": every running replica
    # (kill, stop) or every one that is not (start). kill("all") sends the SIGKILLs back to back.

    def kill(self, *replicas) -> None:
        self.cell("kill", *map(str, replicas))

    def stop(self, *replicas) -> None:
        self.cell("stop", *map(str, replicas))

    def start(self, *replicas, wait: bool = True, timeout: float = 10.0,
              recover: bool = True) -> None:
        self.cell("start", *map(str, replicas), "--timeout", str(timeout),
                  *([] if wait else ["--no-wait"]), *([] if recover else ["--no-recover"]))

    def partition(self, replica: int, direction: str = "both",
                  peers: list | None = None) -> None:
        extra = ["--peers", ",".join(map(str, peers))] if peers is not None else []
        self.cell("partition", str(replica), "--direction", direction, *extra)

    def heal(self) -> None:
        self.cell("heal")

    def netem(self, replica: int, spec: str, direction: str = "out",
              backend: str = "auto") -> None:
        self.cell("netem", str(replica), spec, "--direction", direction, "--backend", backend)

    def status(self) -> dict:
        return json.loads(self.cell("status").stdout)

    def wait_for_leader(self, timeout: float = 20.0) -> int:
        done = self.cell("wait", "--timeout", str(timeout), timeout=timeout + 30)
        self._leader = json.loads(done.stdout)["leader"]
        return self._leader

    def exec(self, target, *argv: str, check: bool = True, timeout: float = 60,
             input: str | None = None) -> subprocess.CompletedProcess:
        """Runs argv inside a namespace: "client", "bridge" or a replica index."""
        return self.cell("exec", str(target), "--", *argv, check=check, timeout=timeout,
                         input=input)

    def exec_client(self, *argv: str, **kwargs) -> subprocess.CompletedProcess:
        return self.exec("client", *argv, **kwargs)

    def request(self, replica: int, method: str, path: str, body=None,
                timeout: float = 5.0) -> tuple[int, object]:
        """An HTTP request to a replica from the client namespace; returns (status, JSON body,
        or the text if it is not JSON)."""
        r = self.replicas[replica]
        conn = NamespacedConnection(self.endpoints["client_namespace"], r["ip"], r["http_port"],
                                    timeout)
        status, answer, _ = json_exchange(conn, method, path, body)
        return status, answer

    def print_log_tails(self, lines: int = 30) -> None:
        for r in self.endpoints_or_empty().get("replicas", []):
            print(f"--- cell {self.name} r{r['index']}: {r['log']}\n{tail(r['log'], lines)}",
                  file=sys.stderr)
