"""Deploy tier (issue 17): voltlockd as an operator installs and runs it.

- `voltlockd init-cell` and `voltlockd --check-config` from the command line;
- `cmake --install` into a DESTDIR, and the .deb CPack makes, hold what they should;
- the systemd unit passes `systemd-analyze verify` and rates 2.0 or lower in
  `systemd-analyze security --offline=true` (with and without the Electrode drop-in);
- sd_notify against a real NOTIFY_SOCKET: READY=1 only once HTTP answers, WATCHDOG=1 pings from
  the event loop, STOPPING=1 on SIGTERM, each sent by the daemon's own pid (NotifyAccess=main);
- a 3-replica cell on loopback, each replica started by the installed unit's ExecStartPre and
  ExecStart exactly as written (only %i and the /etc and /var/lib directories mapped into a
  temporary directory), serving, one replica killed -9 and started again, keeping the data.

Everything runs on loopback, as the user running the tests; nothing is installed on the host.
"""

import json
import os
import pathlib
import random
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request

import pytest

VOLTLOCKD = os.environ.get("VOLTLOCKD", "build/voltlockd")
SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
BUILD_DIR = os.environ.get("VOLTLOCK_BUILD_DIR", "build")
MAN_PAGE = os.environ.get("VOLTLOCK_MAN_PAGE") == "1"


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def port_free(port, kind):
    with socket.socket(socket.AF_INET, kind) as s:
        if kind == socket.SOCK_STREAM:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port_bases(count):
    """A UDP base and an HTTP base with `count` free ports after each (init-cell's layout)."""
    for _ in range(200):
        udp, http = random.randrange(20000, 40000), random.randrange(40000, 60000)
        if all(port_free(udp + k, socket.SOCK_DGRAM) and port_free(http + k, socket.SOCK_STREAM)
               for k in range(count)):
            return udp, http
    raise AssertionError("no free ports on 127.0.0.1")


def http(method, url, body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def answers(url):
    try:
        return http("GET", url, timeout=2)[0] == 200
    except OSError:
        return False


def init_cell(out, *extra):
    return subprocess.run([VOLTLOCKD, "init-cell", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=30)


def loopback_cell(out, tls: bool = False):
    """Three configs for 127.0.0.1 by init-cell; returns their replicas list. tls: as init-cell
    makes them by default (TLS and auth), with the files where they were written (the security
    tier runs TLS and auth cells; the unit's tests here speak plain HTTP without tokens)."""
    udp, http_base = free_port_bases(3)
    tls_flags = ["--config-dir", str(out.resolve())] if tls else ["--tls", "off", "--auth", "off"]
    done = init_cell(out, "--replicas", "3", "--hosts", "127.0.0.1,127.0.0.1,127.0.0.1",
                     "--udp-port", str(udp), "--http-port", str(http_base), *tls_flags)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "r0.json").read_text())["replicas"]


class NotifySocket:
    """The service manager's end of sd_notify: a unix datagram socket that also learns each
    sender's pid (SCM_CREDENTIALS), as systemd does to enforce NotifyAccess=main."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

    def receive(self, timeout):
        """(sender pid, {key: value}) of the next datagram, or None after `timeout` s."""
        self.sock.settimeout(timeout)
        try:
            data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            return None
        pid = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid, _, _ = struct.unpack("iII", payload[:12])
        fields = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
        return pid, fields

    def wait_for(self, key, timeout, process):
        """Every message up to and including the first carrying `key`."""
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert process.poll() is None, f"voltlockd exited ({process.returncode})"
            message = self.receive(0.2)
            if message:
                seen.append(message)
                if key in message[1]:
                    return seen
        raise AssertionError(f"no {key} within {timeout} s; got {seen}")

    def close(self):
        self.sock.close()


def stop(process, timeout=30):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


# ---- init-cell and --check-config, as an operator runs them --------------------------------


def test_init_cell_writes_configs_that_check_out_here(tmp_path):
    replicas = loopback_cell(tmp_path / "cell", tls=True)
    assert [r["udp_port"] - replicas[0]["udp_port"] for r in replicas] == [0, 1, 2]
    ids = {json.loads((tmp_path / "cell" / f"r{r}.json").read_text())["cluster_id"]
           for r in range(3)}
    assert len(ids) == 1 and ids != {0}
    for r in range(3):
        done = subprocess.run([VOLTLOCKD, "--check-config", str(tmp_path / "cell" / f"r{r}.json")],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stdout
        assert f"ok: replica {r} of 3" in done.stdout


def test_init_cell_refuses_and_writes_nothing(tmp_path):
    done = init_cell(tmp_path / "cell", "--replicas", "4", "--hosts", "10.0.0.1,10.0.0.2")
    assert done.returncode == 2
    assert "--replicas: a cell has 3, 5 or 7 replicas, not '4'" in done.stderr
    assert not (tmp_path / "cell").exists()
    first = init_cell(tmp_path / "cell", "--replicas", "3", "--hosts", "10.0.0.1,10.0.0.2,10.0.0.3")
    assert first.returncode == 0, first.stderr
    assert "systemctl enable --now voltlockd@r2" in first.stdout
    before = (tmp_path / "cell" / "r0.json").read_text()
    again = init_cell(tmp_path / "cell", "--replicas", "3", "--hosts", "10.0.0.1,10.0.0.2,10.0.0.3")
    assert again.returncode == 1 and "exists already" in again.stderr
    assert (tmp_path / "cell" / "r0.json").read_text() == before


def test_check_config_prints_one_line_per_problem_and_the_daemon_refuses_it(tmp_path):
    udp, http_base = free_port_bases(4)
    held_udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    held_udp.bind(("127.0.0.1", udp))
    held_tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held_tcp.bind(("127.0.0.1", http_base))
    held_tcp.listen()
    try:
        config = {"cluster_id": 5, "replica": 0, "electrode": "on", "interface": "vl-nosuch0",
                  "replicas": [{"ip": "127.0.0.1", "udp_port": udp + k, "http_port": http_base + k}
                               for k in range(4)]}
        config["replicas"][1]["udp_port"] = udp  # the same address as replica 0's
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(config))
        done = subprocess.run([VOLTLOCKD, "--check-config", str(path)], capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 1
        lines = done.stdout.splitlines()
        fields = [line.split(": ")[1] for line in lines]
        assert fields == ["replicas", "replicas[1].udp_port", "replicas[0].udp_port",
                          "replicas[0].http_port", "interface"], lines
        assert all(line.startswith(f"{path}: ") and "; fix: " in line for line in lines), lines
        assert "lists 4 replicas" in lines[0]
        assert f"127.0.0.1:{udp} is also replicas[0].udp_port" in lines[1]
        assert f"127.0.0.1:{udp}/udp is in use" in lines[2]
        assert f"127.0.0.1:{http_base}/tcp is in use" in lines[3]
        assert 'no interface "vl-nosuch0" on this host; fix: set interface to "lo"' in lines[4]

        # Only the host's problems left: the daemon itself refuses to start on those that keep it
        # from running; a missing interface only costs it Electrode (it says so, and runs).
        config["replicas"] = config["replicas"][:3]
        config["replicas"][1]["udp_port"] = udp + 1
        path.write_text(json.dumps(config))
        started = subprocess.run([VOLTLOCKD, "--config", str(path)], capture_output=True,
                                 text=True, timeout=30)
        assert started.returncode == 2
        assert [line.split(": ")[2] for line in started.stderr.splitlines()] == \
            ["replicas[0].udp_port", "replicas[0].http_port"], started.stderr
        # Under systemd (JOURNAL_STREAM set) each line carries the journal's error priority.
        journaled = subprocess.run([VOLTLOCKD, "--config", str(path)], capture_output=True,
                                   text=True, timeout=30,
                                   env=dict(os.environ, JOURNAL_STREAM="8:1234"))
        assert journaled.returncode == 2
        assert all(line.startswith("<3>voltlockd: ") for line in journaled.stderr.splitlines())
    finally:
        held_udp.close()
        held_tcp.close()



def test_a_file_that_is_not_json_is_named_with_where_it_stops(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{ not json")
    done = subprocess.run([VOLTLOCKD, "--check-config", str(path)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 1
    assert done.stdout == f"{path}: config: not valid JSON at line 1, column 4 (byte 4)\n"
    # The daemon says the same, on a later line: where "replicas" follows "replica": 0 without
    # a comma (the parser stops at the end of the token it could not take).
    path.write_text('{\n  "cluster_id": 1,\n  "replica": 0\n  "replicas": []\n}\n')
    done = subprocess.run([VOLTLOCKD, "--config", str(path)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert done.stderr == \
        f"voltlockd: {path}: config: not valid JSON at line 4, column 12 (byte 48)\n"
    path.write_text("")  # it stops at the end: one past the last byte
    done = subprocess.run([VOLTLOCKD, "--check-config", str(path)], capture_output=True, text=True,
                          timeout=30)
    assert done.stdout == f"{path}: config: not valid JSON at line 1, column 1 (byte 1)\n"
    path.write_text('{"cluster_id": 1e999}')  # a number no double holds: no position, but why
    done = subprocess.run([VOLTLOCKD, "--check-config", str(path)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 1
    assert done.stdout.startswith(f"{path}: config: not valid JSON: ") and "1e999" in done.stdout


def test_check_config_applies_the_options_the_daemon_would(tmp_path):
    """A sync config without data_dir runs with --data-dir (the unit passes it): the check,
    given the same options, passes it too, and refuses what the options themselves break."""
    udp, http_base = free_port_bases(1)
    path = tmp_path / "r0.json"
    path.write_text(json.dumps({"cluster_id": 5, "replica": 0, "durability": "sync",
                                "replicas": [{"ip": "127.0.0.1", "udp_port": udp,
                                              "http_port": http_base}]}))

    def check(*options):
        return subprocess.run([VOLTLOCKD, "--check-config", str(path), *options],
                              capture_output=True, text=True, timeout=30)

    alone = check()
    assert alone.returncode == 1 and "durability: sync needs a data_dir" in alone.stdout
    for options in (["--data-dir", str(tmp_path / "data")], ["--durability", "snapshot"],
                    ["--durability=snapshot"]):
        done = check(*options)
        assert done.returncode == 0 and "ok: replica 0 of 1" in done.stdout, (options, done)
    loud = check("--data-dir", str(tmp_path / "data"), "--log-level", "loud")
    assert loud.returncode == 1
    assert loud.stdout.startswith(f"{path}: log_level: 'loud' is not a level"), loud.stdout
    wrong = check("--data-dir", str(tmp_path / "data"), "--electrode", "maybe")
    assert wrong.returncode == 2 and "--electrode: must be on or off" in wrong.stderr


# ---- --help, and so the man page ------------------------------------------------------------


def help_text():
    return subprocess.run([VOLTLOCKD, "--help"], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def test_help_names_every_config_key_the_parser_accepts():
    parser = (SOURCE_DIR / "server/shell/config.cpp").read_text()
    keys = set(re.findall(r'(?:integer|string|mark_known)\(\s*"(\w+)"', parser))
    assert {"cluster_id", "replicas", "udp_port", "tls_client_ca_file", "auth_roles_file",
            "http_io_threads"} <= keys, keys  # the pattern still finds the parser's keys
    usage = help_text()
    assert [key for key in sorted(keys) if not re.search(rf"\b{key}\b", usage)] == []


def test_help_names_the_signals_the_daemon_handles():
    signals = help_text().split("\nSignals:\n")[1].split("\n\n")[0]
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        assert name in signals, signals


# ---- what gets installed -------------------------------------------------------------------

EXPECTED_FILES = [
    "usr/bin/voltlockd",
    "usr/lib/systemd/system/voltlockd@.service",
    "usr/lib/sysusers.d/voltlock.conf",
    "usr/share/voltlock/electrode.conf",
    "usr/share/voltlock/prometheus/voltlock.rules.yml",
    "usr/share/doc/voltlock/operations.md",
] + (["usr/share/man/man8/voltlockd.8"] if MAN_PAGE else [])


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`cmake --install` under a prefix of its own, so its voltlockd is the unit's ExecStart."""
    prefix = tmp_path_factory.mktemp("prefix")
    done = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return prefix


def test_install_into_destdir_puts_everything_in_place(tmp_path):
    env = dict(os.environ, DESTDIR=str(tmp_path / "root"))
    done = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", "/usr"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    root = tmp_path / "root"
    for path in EXPECTED_FILES:
        assert (root / path).is_file(), path
    assert os.access(root / "usr/bin/voltlockd", os.X_OK)
    unit = (root / "usr/lib/systemd/system/voltlockd@.service").read_text()
    assert "\nExecStart=/usr/bin/voltlockd --config /etc/voltlock/%i.json " in unit
    # The eBPF programs travel inside the binary: its skeleton's object names them.
    assert b"electrode_xdp" in (root / "usr/bin/voltlockd").read_bytes() or \
        b"xdp" in (root / "usr/bin/voltlockd").read_bytes()
    if MAN_PAGE:
        man = (root / "usr/share/man/man8/voltlockd.8").read_text()
        assert "init\\-cell" in man and "check\\-config" in man


def pointed_docs(text):
    """The docs `text` points a reader to: docs/X.md, /usr/share/doc/voltlock/X.md (as the
    install rewrites it, too), a markdown link to X.md or to an image beside the docs."""
    text = text.replace("\\-", "-")  # the man page's troff hyphens
    return set(re.findall(r"(?:\bdocs/|/share/doc/voltlock/|\]\()([\w-]+\.md|img/[\w.-]+)", text))


def test_every_doc_an_installed_file_points_to_is_installed(installed, tmp_path):
    texts = {str(path): path.read_bytes().decode(errors="ignore")
             for path in installed.rglob("*") if path.is_file()}
    texts["voltlockd --help"] = help_text()
    texts["voltlockd init-cell --help"] = init_cell(tmp_path, "--help").stdout
    done = init_cell(tmp_path / "cell", "--replicas", "3", "--hosts", "10.0.0.1,10.0.0.2,10.0.0.3")
    assert done.returncode == 0, done.stderr
    texts["voltlockd init-cell"] = done.stdout
    docs = installed / "share/doc/voltlock"
    missing = {(doc, where) for where, text in texts.items() for doc in pointed_docs(text)
               if not (docs / doc).is_file()}
    assert missing == set()
    assert {"security-tls.md", "security-auth.md", "replication.md", "leases.md"} <= \
        pointed_docs("\n".join(texts.values()))  # the pattern still finds the pointers


def test_deb_holds_the_files_and_maintainer_scripts(tmp_path):
    if not shutil.which("dpkg-shlibdeps"):
        pytest.skip("no dpkg-shlibdeps (dpkg-dev; scripts/install-deps installs it)")
    done = subprocess.run(["cpack", "-G", "DEB", "--config", f"{BUILD_DIR}/CPackConfig.cmake",
                           "-B", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    [deb] = list(tmp_path.glob("voltlock_*.deb"))
    contents = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                              check=True).stdout
    for path in EXPECTED_FILES:
        assert f" ./{path}\n" in contents, path
    depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True,
                             text=True, check=True).stdout
    assert "systemd" in depends and "librocksdb" in depends, depends
    control = tmp_path / "control"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
    assert "systemd-sysusers voltlock.conf" in (control / "postinst").read_text()


# ---- the unit, judged by systemd ---------------------------------------------------------------


def systemd_analyze():
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze (the systemd package)")
    return "systemd-analyze"


def test_unit_passes_systemd_analyze_verify(installed):
    """Every key and value, the ExecStart binary (the one installed with it) and, where man is
    there to look, the man page its Documentation= names (from the same install)."""
    unit = installed / "lib/systemd/system/voltlockd@.service"
    env = dict(os.environ, MANPATH=str(installed / "share/man"))
    check_man = MAN_PAGE and shutil.which("man") is not None
    done = subprocess.run([systemd_analyze(), "verify", f"--man={'yes' if check_man else 'no'}",
                           str(unit)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stdout + done.stderr
    if not check_man:
        print("verified without the man page: no help2man at configure time, or no man")


@pytest.mark.parametrize("electrode", [False, True], ids=["electrode-off", "electrode-drop-in"])
def test_unit_security_exposure_is_at_most_2(installed, tmp_path, electrode):
    units = tmp_path / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    shutil.copy(installed / "lib/systemd/system/voltlockd@.service", units)
    if electrode:
        (units / "voltlockd@r0.service.d").mkdir()
        shutil.copy(installed / "share/voltlock/electrode.conf", units / "voltlockd@r0.service.d")
    done = subprocess.run([systemd_analyze(), "security", "--offline=true", "--threshold=20",
                           f"--root={tmp_path}", "voltlockd@r0.service"],
                          capture_output=True, text=True, timeout=60)
    score = re.search(r"Overall exposure level for voltlockd@r0.service: (\d+\.\d)", done.stdout)
    assert score, done.stdout + done.stderr
    print(f"exposure {'with' if electrode else 'without'} Electrode: {score.group(1)}")
    assert float(score.group(1)) <= 2.0 and done.returncode == 0, done.stdout
    if electrode:
        assert "CAP_BPF" in done.stdout  # the drop-in was read: the capability shows as exposure


# ---- sd_notify and the unit's ExecStart, for real ----------------------------------------------


def test_sd_notify_ready_after_http_then_watchdog_then_stopping(tmp_path):
    replicas = loopback_cell(tmp_path / "cell")
    notify = NotifySocket(tmp_path / "notify")
    url = f"http://127.0.0.1:{replicas[0]['http_port']}/healthz"
    env = dict(os.environ, NOTIFY_SOCKET=notify.path, WATCHDOG_USEC="300000")
    process = subprocess.Popen([VOLTLOCKD, "--config", str(tmp_path / "cell/r0.json"),
                                "--data-dir", str(tmp_path / "data")], env=env,
                               stderr=subprocess.PIPE, text=True)
    try:
        messages = notify.wait_for("READY", 30, process)
        assert answers(url), "READY=1 came, but the HTTP API does not answer"
        assert [m for m in messages if "WATCHDOG" not in m[1]] == messages[-1:], messages
        pid, ready = messages[-1]
        assert pid == process.pid
        assert ready["STATUS"].startswith("r0 serving HTTP on 127.0.0.1:")

        # Pings every 150 ms (half of WATCHDOG_USEC), from the daemon itself.
        pings = []
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            message = notify.receive(0.5)
            if message:
                pings.append(message)
        assert len(pings) >= 5, pings
        assert all(fields == {"WATCHDOG": "1"} and pid == process.pid for pid, fields in pings)

        process.send_signal(signal.SIGTERM)
        assert notify.wait_for("STOPPING", 30, process)[-1][1]["STOPPING"] == "1"
        assert process.wait(timeout=30) == 0
    finally:
        stop(process)
        notify.close()


def test_no_ready_while_the_http_port_is_taken(tmp_path):
    replicas = loopback_cell(tmp_path / "cell")
    notify = NotifySocket(tmp_path / "notify")
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", replicas[0]["http_port"]))
    held.listen()
    try:
        env = dict(os.environ, NOTIFY_SOCKET=notify.path, WATCHDOG_USEC="300000")
        done = subprocess.run([VOLTLOCKD, "--config", str(tmp_path / "cell/r0.json")], env=env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2
        assert "replicas[0].http_port" in done.stderr and "is in use" in done.stderr
        assert notify.receive(0.2) is None
    finally:
        held.close()
        notify.close()


def unit_commands(installed):
    """The unit's ExecStartPre and ExecStart command lines, and its watchdog in microseconds."""
    unit = (installed / "lib/systemd/system/voltlockd@.service").read_text()

    def value(key):
        [line] = [line for line in unit.splitlines() if line.startswith(key + "=")]
        return line[len(key) + 1:]

    watchdog = re.fullmatch(r"(\d+)s", value("WatchdogSec"))
    return value("ExecStartPre"), value("ExecStart"), int(watchdog.group(1)) * 1_000_000


def test_units_exec_start_pre_checks_what_exec_start_runs(installed):
    exec_start_pre, exec_start, _ = unit_commands(installed)
    [checker, check_flag, checked, *check_options] = shlex.split(exec_start_pre)
    [daemon, config_flag, config, *options] = shlex.split(exec_start)
    assert (checker, check_flag, checked) == (daemon, "--check-config", config)
    assert config_flag == "--config" and check_options == options


def test_cell_from_the_units_exec_start_serves_and_survives_kill_9(installed, tmp_path):
    exec_start_pre, exec_start, watchdog_usec = unit_commands(installed)
    replicas = loopback_cell(tmp_path / "etc")
    (tmp_path / "var").mkdir()

    def command(line, name):
        line = line.replace("%i", name).replace("/etc/voltlock/", f"{tmp_path}/etc/") \
                   .replace("/var/lib/voltlock/", f"{tmp_path}/var/")
        argv = shlex.split(line)
        assert argv[0] == str(installed / "bin/voltlockd")
        return argv

    sockets, processes = {}, {}

    def start(r):
        name = f"r{r}"
        if r not in sockets:
            sockets[r] = NotifySocket(tmp_path / f"notify-{name}")
        env = dict(os.environ, NOTIFY_SOCKET=sockets[r].path, WATCHDOG_USEC=str(watchdog_usec))
        log = open(tmp_path / f"{name}.log", "a")
        checked = subprocess.run(command(exec_start_pre, name), stdout=log, stderr=log,
                                 timeout=30)
        assert checked.returncode == 0, (tmp_path / f"{name}.log").read_text()
        processes[r] = subprocess.Popen(command(exec_start, name), env=env, stdout=log,
                                        stderr=log)

    base = [f"http://127.0.0.1:{r['http_port']}" for r in replicas]
    try:
        for r in range(3):
            start(r)
        for r in range(3):
            sockets[r].wait_for("READY", 60, processes[r])
        for r in range(3):
            wait_for(lambda: answers(f"{base[r]}/readyz"), 60, f"r{r} /readyz")
        status, body = http("PUT", f"{base[1]}/v1/kv/deploy/answer", {"value": "42"}, timeout=30)
        assert status == 200, body
        assert http("GET", f"{base[2]}/v1/kv/deploy/answer", timeout=30)[1]["value"] == "42"

        # What Restart=on-failure does after a crash: the same command again.
        processes[2].kill()
        processes[2].wait()
        start(2)
        sockets[2].wait_for("READY", 60, processes[2])
        wait_for(lambda: answers(f"{base[2]}/readyz"), 60, "r2 /readyz after its restart")
        assert http("GET", f"{base[2]}/v1/kv/deploy/answer", timeout=30)[1]["value"] == "42"
        status, _ = http("PUT", f"{base[2]}/v1/kv/deploy/after", {"value": "1"}, timeout=30)
        assert status == 200

        # A running replica's config checks out in place (its ports are its own), as the
        # certificate rotation in docs/security-tls.md does before the SIGHUP; a second start of
        # it is still refused, naming the process that holds its ports, and the first serves on.
        checked = subprocess.run(command(exec_start_pre, "r0"), capture_output=True, text=True,
                                 timeout=30)
        assert checked.returncode == 0 and "ok: replica 0 of 3" in checked.stdout, checked.stdout
        again = subprocess.run(command(exec_start, "r0"), capture_output=True, text=True,
                               timeout=30)
        assert again.returncode == 2, again.stderr
        assert f"is in use by another process (pid {processes[0].pid})" in again.stderr, \
            again.stderr
        assert processes[0].poll() is None
        assert answers(f"{base[0]}/readyz")

        for r in range(3):
            processes[r].send_signal(signal.SIGTERM)
        for r in range(3):
            assert processes[r].wait(timeout=60) == 0, (tmp_path / f"r{r}.log").read_text()
    except BaseException:
        for r in range(3):
            print(f"--- r{r}.log\n" + (tmp_path / f"r{r}.log").read_text()[-3000:])
        raise
    finally:
        for process in processes.values():
            stop(process)
        for notify in sockets.values():
            notify.close()
