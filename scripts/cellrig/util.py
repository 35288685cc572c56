"""OS helpers for the cell rig: commands, network namespaces, processes, HTTP inside a namespace.

Everything here is mechanism; what a cell is and how it is built lives in the other modules.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import http.client
import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"


class CellError(Exception):
    """An operation failed (exit code 1). The message is for a person and says what to do."""

    exit_code = 1


class UsageError(CellError):
    """The command line asks for something that cannot mean anything (exit code 2)."""

    exit_code = 2


def say(message: str) -> None:
    """Progress and warnings go to stderr; stdout carries only the JSON a command prints."""
    print(f"cell: {message}", file=sys.stderr, flush=True)


# --- commands ---------------------------------------------------------------------------------

def run(argv: list[str], check: bool = True, input: str | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise CellError(f"{argv[0]}: not found; scripts/install-deps installs what the rig needs")
    except subprocess.TimeoutExpired:
        raise CellError(f"{shlex.join(argv)}: no answer after {timeout:g} s")
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise CellError(f"{shlex.join(argv)}: {detail}")
    return done


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return run(["ip", *(["-n", ns] if ns else []), *args], check=check)


def tc(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return run(["tc", *(["-n", ns] if ns else []), *args], check=check)


def in_netns_argv(ns: str | None, argv: list[str]) -> list[str]:
    """argv run inside namespace ns (unchanged for ns None, the loopback mode)."""
    return ["ip", "netns", "exec", ns, *argv] if ns else list(argv)


# --- network namespaces -----------------------------------------------------------------------

def netns_list() -> list[str]:
    """Names of the named network namespaces (`ip netns list`, first word of each line)."""
    out = ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(ns: str) -> list[int]:
    done = ip("netns", "pids", ns, check=False)
    return [int(word) for word in done.stdout.split() if word.isdigit()]


_libc = None


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(fd, CLONE_NEWNET)
        return
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered_netns_fd(fd: int):
    """Runs the body with this thread in the network namespace open at fd (threads it starts
    stay there), then brings the thread home."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            _setns(fd)  # inside the try: an interrupt just after it still brings the thread home
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def run_in_netns(ns: str | None, work: Callable[[], T]) -> T:
    """work() on a thread of its own inside namespace ns (None: here); its result, or its
    exception. The rig's own visits go this way: Python raises a KeyboardInterrupt only in the
    main thread, where it could land between entered_netns's steps and leave the rig in a
    cell's namespace, among the "leftover processes" that the cleanup kills."""
    if ns is None:
        return work()
    outcome: dict = {}

    def visit() -> None:
        try:
            with entered_netns(ns):
                outcome["result"] = work()
        except BaseException as e:  # handed to the caller
            outcome["error"] = e

    thread = threading.Thread(target=visit, name=f"in {ns}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


@contextlib.contextmanager
def entered_netns(ns: str | None):
    """Runs the body with this thread in namespace ns. Sockets created inside stay in ns after
    the thread returns home, which is how the rig talks HTTP from the client namespace without
    a subprocess. ns None (loopback mode) changes nothing."""
    if ns is None:
        yield
        return
    try:
        target = os.open(os.path.join(NETNS_RUN_DIR, ns), os.O_RDONLY)
    except FileNotFoundError:
        raise CellError(f"network namespace {ns} does not exist")
    try:
        with entered_netns_fd(target):
            yield
    finally:
        os.close(target)


def write_sysctl(ns: str, key: str, value: str) -> bool:
    """Sets net.* sysctl `key` inside ns; /proc/sys/net follows the opener's namespace.
    Returns False when the kernel has no such setting."""
    path = "/proc/sys/" + key.replace(".", "/")

    def write() -> bool:
        try:
            with open(path, "w") as f:
                f.write(value)
        except FileNotFoundError:
            return False
        return True

    return run_in_netns(ns, write)


# --- HTTP ---------------------------------------------------------------------------------------

class NamespacedConnection(http.client.HTTPConnection):
    """An HTTP connection whose socket is always made inside namespace `namespace` (None: this
    one), also when http.client reconnects by itself after the server closed a kept connection:
    a reconnect from the caller's own namespace would reach whatever has that address there,
    outside the cell."""

    def __init__(self, namespace: str | None, host: str, port: int, timeout: float,
                 cafile: str | None = None, certfile: str | None = None,
                 keyfile: str | None = None):
        super().__init__(host, port, timeout=timeout)
        self.namespace = namespace
        # A cell with TLS on (`up --tls on|mtls`): https, the replica checked against the cell's
        # CA; with mtls, certfile/keyfile is the client certificate shown.
        self.tls = ssl.create_default_context(cafile=cafile) if cafile else None
        if self.tls and certfile:
            self.tls.load_cert_chain(certfile, keyfile)

    def connect(self):
        self.sock = run_in_netns(self.namespace, lambda: socket.create_connection(
            (self.host, self.port), self.timeout))
        # http.client sends headers and body in two writes: without this, Nagle and the
        # server's delayed ACK add 40 ms to every request after the first on a kept connection.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls:
            self.sock = self.tls.wrap_socket(self.sock, server_hostname=self.host)


def http_get_json(ns: str | None, host: str, port: int, path: str, timeout: float = 1.0,
                  tls: dict | None = None, token: str | None = None):
    """GET http://host:port/path (https when tls gives NamespacedConnection's cafile, and
    certfile/keyfile; with `Authorization: Bearer token` when given) from inside namespace ns
    and decode the JSON body.
    Raises OSError (connection) or ValueError (not JSON / not 200)."""
    conn = NamespacedConnection(ns, host, port, timeout, **(tls or {}))
    try:
        headers = {"Connection": "close"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise ValueError(f"HTTP {response.status}: {body[:200]!r}")
    return json.loads(body)


def port_is_free(host: str, port: int, kind: int) -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        if kind == socket.SOCK_STREAM:  # as servers do, so TIME_WAIT leftovers do not count
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# --- processes ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessRef:
    """A process the rig started, identified by pid and start time so a reused pid is never
    mistaken for it. (Cells outlive the command that started them, so the rig cannot use
    waitpid; and where PID 1 does not reap, a dead daemon stays a zombie: that counts as dead.)"""

    pid: int
    start_ticks: int

    @staticmethod
    def of(pid: int) -> "ProcessRef | None":
        ticks = process_start_ticks(pid)
        return ProcessRef(pid, ticks) if ticks is not None else None

    def alive(self) -> bool:
        _reap(self.pid)
        return process_start_ticks(self.pid) == self.start_ticks

    def to_json(self) -> dict:
        return {"pid": self.pid, "start_ticks": self.start_ticks}

    @staticmethod
    def from_json(data: dict | None) -> "ProcessRef | None":
        return ProcessRef(data["pid"], data["start_ticks"]) if data else None


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the third (the state) on; None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(")") + 2:].split()  # the command name may contain spaces


def process_start_ticks(pid: int) -> int | None:
    """Start time of a live process (field 22 of /proc/PID/stat); None if gone or a zombie."""
    fields = stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def own_lineage() -> set[int]:
    """This process and its ancestors: a caller that entered a cell's namespace (a test inside
    entered_netns running `scripts/cell down`) shows up among that namespace's processes."""
    lineage = set()
    pid = os.getpid()
    while pid > 0 and pid not in lineage:
        lineage.add(pid)
        fields = stat_fields(pid)
        if fields is None:
            break
        pid = int(fields[1])  # the parent
    return lineage


def _reap(pid: int) -> None:
    """Collects the exit status if pid happens to be our own child (started by this command)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def wait_gone(refs: list[ProcessRef], timeout: float) -> list[ProcessRef]:
    """Waits up to timeout for every process to exit; returns those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [ref for ref in refs if ref.alive()]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def send_signal(ref: ProcessRef, sig: int) -> bool:
    if not ref.alive():
        return False
    try:
        os.kill(ref.pid, sig)
    except ProcessLookupError:
        return False
    return True


def terminate(refs: list[ProcessRef], grace: float) -> list[ProcessRef]:
    """SIGTERM, wait up to grace seconds, then SIGKILL. Returns the processes that needed
    SIGKILL. Raises if anything survives SIGKILL (it would keep a namespace alive)."""
    for ref in refs:
        send_signal(ref, signal.SIGTERM)
    stubborn = wait_gone(refs, grace)
    for ref in stubborn:
        send_signal(ref, signal.SIGKILL)
    left = wait_gone(stubborn, 5.0)
    if left:
        raise CellError("still running after SIGKILL: pids " + ", ".join(str(r.pid) for r in left))
    return stubborn


def kill_pids(pids: list[int], timeout: float = 5.0) -> None:
    """SIGKILL processes known only by pid (found in a namespace, not started by the rig)."""
    refs = [ref for ref in (ProcessRef.of(pid) for pid in pids) if ref]
    for ref in refs:
        send_signal(ref, signal.SIGKILL)
    left = wait_gone(refs, timeout)
    if left:
        raise CellError("still running after SIGKILL: pids " + ", ".join(str(r.pid) for r in left))


_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

_interrupted = False


def interrupt(signum, frame) -> None:
    """The handler of Ctrl-C, SIGTERM and SIGHUP: a KeyboardInterrupt, and remembered. Python
    prints and drops an exception raised while it runs a finalizer (a Popen's __del__), so an
    interrupt can be lost; the loops that wait for replicas call raise_if_interrupted()."""
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    if _interrupted:
        raise KeyboardInterrupt


@contextlib.contextmanager
def signals_held():
    """Defers Ctrl-C, SIGTERM and SIGHUP over the body: used while starting a process and
    recording it, and while cleaning up, so an interrupt cannot leave half of either behind.
    A process started inside must pass preexec_fn=unblock_signals (the mask is inherited).
    Nests: the mask before it comes back, so an inner hold does not end an outer one."""
    # Blocking inside the try: Python runs a handler for a signal that came just before the
    # block when pthread_sigmask returns, and the mask must come back then too.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def unblock_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD_SIGNALS)


def tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"({path}: {os.strerror(e.errno or errno.EIO)})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"
