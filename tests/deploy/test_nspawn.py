"""The units for real (issue 17): systemd boots in a container, the .deb is installed, and a
3-replica cell runs as voltlockd@r0..r2 from configs init-cell wrote.

Behind a flag, as it takes minutes the first time (VOLTLOCK_NSPAWN=1; needs root,
systemd-nspawn from systemd-container, and debootstrap). The container's root is made once by
debootstrap from Debian's packages and cached (VOLTLOCK_NSPAWN_ROOTFS, default
/var/tmp/voltlock-nspawn/bookworm); each run boots a throwaway copy of it (--ephemeral) with a
network namespace of its own (--private-network: only its loopback), so nothing reaches the host.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from test_deploy import BUILD_DIR, VOLTLOCKD, init_cell, wait_for

ROOTFS = Path(os.environ.get("VOLTLOCK_NSPAWN_ROOTFS", "/var/tmp/voltlock-nspawn/bookworm"))
MIRROR = "http://deb.debian.org/debian"

pytestmark = pytest.mark.skipif(
    os.environ.get("VOLTLOCK_NSPAWN") != "1",
    reason="the systemd-nspawn boot takes minutes: run with VOLTLOCK_NSPAWN=1 (root)")


def run(*argv, timeout=600, check=True):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def nspawn(*args):
    """systemd-nspawn in a mount namespace of its own with a tmpfs on /run/systemd/nspawn: without
    systemd as PID 1 the host's /run is no tmpfs, and nspawn refuses to clean up its propagation
    directory there. Without systemd there is no bus either: --register=no --keep-unit. Nothing
    of this reaches the host's mounts."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mkdir -p /run/systemd/nspawn && mount -t tmpfs tmpfs /run/systemd/nspawn && '
            'exec "$@"', "sh", "systemd-nspawn", "-q", "--register=no", "--keep-unit", *args]


def runtime_packages(deb):
    """The Debian packages the .deb depends on, by name (first of any alternatives)."""
    depends = run("dpkg-deb", "-f", str(deb), "Depends").stdout
    return [re.sub(r"\s*\(.*\)", "", item.split("|")[0]).strip() for item in depends.split(",")]


def prepared_rootfs(deb):
    """The cached root: Debian by debootstrap, with systemd and the .deb's dependencies."""
    if not ROOTFS.exists():
        partial = ROOTFS.with_name(ROOTFS.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        run("debootstrap", "--variant=minbase",
            "--include=systemd,systemd-sysv,dbus,iproute2,curl,ca-certificates",
            "bookworm", str(partial), MIRROR, timeout=1800)
        partial.rename(ROOTFS)
    missing = [p for p in runtime_packages(deb)
               if run(*nspawn("-D", str(ROOTFS), "dpkg-query", "-W", p),
                      check=False).returncode != 0]
    if missing:
        run(*nspawn("-D", str(ROOTFS), "apt-get", "install", "-y", "-q",
                    "--no-install-recommends", *missing), timeout=1800)
    return ROOTFS


# Writes keys load/1, load/2, ... until /tmp/stop-writer exists, each to the first replica that
# acknowledges it (trying them in turn, up to 100 rounds 0.1 s apart: a client's retries), and
# keeps "<keys written> <attempts that failed> <keys given up on>" in /tmp/writer-progress.
WRITER = r"""#!/bin/sh
n=0; retries=0; failed=0
while [ ! -e /tmp/stop-writer ]; do
  n=$((n + 1)); ok=0; round=0
  while [ $ok = 0 ] && [ $round -lt 100 ]; do
    for port in $PORTS; do
      if curl -sf -m 5 -XPUT "http://127.0.0.1:$port/v1/kv/load/$n" -d "{\"value\": \"$n\"}" \
          >/dev/null; then ok=1; break; fi
      retries=$((retries + 1))
    done
    round=$((round + 1)); [ $ok = 1 ] || sleep 0.1
  done
  [ $ok = 1 ] || failed=$((failed + 1))
  echo "$n $retries $failed" > /tmp/writer-progress
done
"""

# Counts the keys load/1..load/N whose value is not N, reading at one replica.
CHECKER = r"""#!/bin/sh
missing=0
for i in $(seq 1 "$N"); do
  curl -sf "http://127.0.0.1:$PORT/v1/kv/load/$i" | grep -q "\"value\":\"$i\"" ||
    missing=$((missing + 1))
done
echo $missing
"""


class Container:
    """A booted, throwaway copy of the root; commands run inside through nsenter."""

    def __init__(self, rootfs, share, log, *nspawn_args):
        self.name = f"vl-deploy-{uuid.uuid4().hex[:8]}"
        self.log = open(log, "w")
        self.process = subprocess.Popen(
            nspawn("--ephemeral", "-D", str(rootfs), "--boot", "--private-network",
                   f"--machine={self.name}", f"--bind-ro={share}:/mnt/voltlock",
                   "--console=passive", *nspawn_args),
            stdout=self.log, stderr=subprocess.STDOUT)
        self.leader = wait_for(self._init_pid, 60, "the container's init")
        wait_for(lambda: self.sh("systemctl is-system-running", check=False).stdout.strip()
                 in ("running", "degraded"), 120, "the container's systemd to finish booting")

    def _init_pid(self):
        assert self.process.poll() is None, "systemd-nspawn exited"
        out = run("ps", "-e", "-o", "pid=,ppid=,comm=").stdout.split("\n")
        children = {}
        for line in out:
            fields = line.split()
            if len(fields) == 3:
                children.setdefault(int(fields[1]), []).append((int(fields[0]), fields[2]))
        pending = [self.process.pid]
        while pending:
            for pid, comm in children.get(pending.pop(), []):
                if comm == "systemd":
                    return pid
                pending.append(pid)
        return None

    def sh(self, command, check=True, timeout=120):
        return run("nsenter", "-t", str(self.leader), "-a", "/bin/sh", "-c", command,
                   check=check, timeout=timeout)

    def close(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # nspawn: an orderly poweroff
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def package(tmp_path):
    """(the directory shared with the container, the .deb in it)"""
    if os.geteuid() != 0:
        pytest.skip("systemd-nspawn needs root")
    for tool in ("systemd-nspawn", "debootstrap", "nsenter", "dpkg-deb"):
        if not shutil.which(tool):
            pytest.skip(f"no {tool} (apt-get install systemd-container debootstrap)")
    share = tmp_path / "share"
    share.mkdir()
    run("cpack", "-G", "DEB", "--config", f"{BUILD_DIR}/CPackConfig.cmake", "-B", str(share))
    [deb] = list(share.glob("voltlock_*.deb"))
    return share, deb


def test_cell_under_systemd_in_a_booted_container(tmp_path):
    share, deb = package(tmp_path)
    # The unit under systemd, over plain HTTP (the security tier runs TLS cells).
    done = init_cell(share / "cell", "--replicas", "3", "--hosts", "127.0.0.1,127.0.0.1,127.0.0.1",
                     "--tls", "off", "--auth", "off")
    assert done.returncode == 0, done.stderr
    replicas = json.loads((share / "cell/r0.json").read_text())["replicas"]
    rootfs = prepared_rootfs(deb)

    container = Container(rootfs, share, tmp_path / "console.log")
    try:
        c = container
        c.sh(f"dpkg -i /mnt/voltlock/{deb.name}")
        assert c.sh("id -u voltlock").stdout.strip().isdigit()
        # init-cell's own instructions, as an operator would paste them (the key file too).
        installs = [line.strip().replace(str(share / "cell"), "/mnt/voltlock/cell")
                    for line in done.stdout.splitlines() if line.startswith("    install ")]
        assert len(installs) == 6, done.stdout
        for line in installs:
            c.sh(line)
        for r in range(3):
            c.sh(f"voltlockd --check-config /etc/voltlock/r{r}.json")
        # A config that cannot run here: the unit's ExecStartPre (--check-config) refuses it,
        # every problem a line at error priority in the journal.
        bad = json.loads((share / "cell/r0.json").read_text())
        bad.update(electrode="on", interface="eth9")
        (share / "bad.json").write_text(json.dumps(bad))
        c.sh("install -m 0640 -g voltlock /mnt/voltlock/bad.json /etc/voltlock/bad.json")

        # Returns once each replica said READY=1: its HTTP API answers.
        c.sh("systemctl start voltlockd@r0 voltlockd@r1 voltlockd@r2", timeout=180)
        for r in range(3):
            assert c.sh(f"systemctl is-active voltlockd@r{r}").stdout.strip() == "active"
            assert c.sh(f"curl -sf http://127.0.0.1:{replicas[r]['http_port']}/healthz",
                        check=False).returncode == 0
        assert c.sh("systemctl start voltlockd@bad", check=False).returncode != 0
        refused = c.sh("journalctl -u voltlockd@bad --no-pager -p err -o cat").stdout
        assert "/etc/voltlock/bad.json: replicas[0].udp_port: 127.0.0.1:7400/udp is in use" \
            in refused, refused
        assert '/etc/voltlock/bad.json: interface: no interface "eth9" on this host' in refused
        url = [f"http://127.0.0.1:{r['http_port']}" for r in replicas]
        for r in range(3):
            wait_for(lambda: c.sh(f"curl -sf {url[r]}/readyz", check=False).returncode == 0, 60,
                     f"r{r} ready")
        c.sh(f"curl -sf -XPUT {url[0]}/v1/kv/deploy/answer -d '{{\"value\": \"42\"}}'")
        journal = c.sh("journalctl -u voltlockd@r1 --no-pager").stdout
        assert "replica 1 of 3" in journal, journal
        assert c.sh("stat -c %U:%a /var/lib/voltlock/r1").stdout.strip() == "voltlock:700"

        # kill -9: systemd restarts it (Restart=on-failure), and it keeps the cell's data.
        c.sh("systemctl kill -s KILL voltlockd@r1")
        wait_for(lambda: c.sh("systemctl show -p NRestarts --value voltlockd@r1").stdout.strip()
                 == "1" and c.sh("systemctl is-active voltlockd@r1", check=False).stdout.strip()
                 == "active", 60, "systemd to restart r1")
        wait_for(lambda: c.sh(f"curl -sf {url[1]}/readyz", check=False).returncode == 0, 60,
                 "r1 ready after its restart")
        value = json.loads(c.sh(f"curl -sf {url[1]}/v1/kv/deploy/answer").stdout)["value"]
        assert value == "42"
        print(c.sh("systemctl status --no-pager -n 3 voltlockd@r1").stdout)

        # A rolling restart under load: one replica at a time, each back in normal status before
        # the next; the writer may retry (at another replica) but gives up on no key.
        (share / "writer.sh").write_text(WRITER)
        (share / "checker.sh").write_text(CHECKER)
        ports = " ".join(str(r["http_port"]) for r in replicas)
        writer = subprocess.Popen(["nsenter", "-t", str(c.leader), "-a", "/usr/bin/env",
                                   f"PORTS={ports}", "/bin/sh", "/mnt/voltlock/writer.sh"])

        def progress():
            text = c.sh("cat /tmp/writer-progress 2>/dev/null", check=False).stdout.split()
            return [int(x) for x in text] if len(text) == 3 else [0, 0, 0]

        try:
            wait_for(lambda: progress()[0] >= 20, 60, "the writer to write 20 keys")
            for r in (1, 2, 0):  # followers first, the leader (r0) last
                c.sh(f"systemctl restart voltlockd@r{r}", timeout=300)
                wait_for(lambda: c.sh(f"curl -sf {url[r]}/readyz", check=False).returncode == 0,
                         60, f"r{r} ready after its restart")
                written = progress()[0]
                wait_for(lambda: progress()[0] >= written + 10, 60, "the writer to go on")
        finally:
            c.sh("touch /tmp/stop-writer")
            writer.wait(timeout=600)
        written, retries, failed = progress()
        print(f"rolling restart under load: {written} keys written, {retries} failed attempts "
              f"retried, {failed} keys given up on")
        assert failed == 0
        missing = c.sh(f"N={written} PORT={replicas[2]['http_port']} sh /mnt/voltlock/checker.sh",
                       timeout=600).stdout.strip()
        assert missing == "0", f"{missing} of {written} acknowledged keys are missing"

        c.sh("systemctl stop voltlockd@r0 voltlockd@r1 voltlockd@r2", timeout=300)
        for r in range(3):
            assert c.sh(f"systemctl is-active voltlockd@r{r}", check=False).stdout.strip() == \
                "inactive"
    except BaseException:
        print(container.sh("journalctl -u 'voltlockd@*' --no-pager | tail -60",
                           check=False).stdout)
        raise
    finally:
        container.close()


def test_electrode_drop_in_grants_what_the_fast_paths_need_and_the_unit_alone_does_not(tmp_path):
    """r0 runs Electrode on lo with the drop-in, as the voltlock user with its three capabilities;
    r1 asks for Electrode without the drop-in and is refused by the kernel, running VR in user
    space; r2 runs without. (One XDP program per interface: on lo only one replica can have it.)
    nspawn's own seccomp filter keeps bpf() from the container unless told otherwise."""
    share, deb = package(tmp_path)
    rootfs = prepared_rootfs(deb)
    container = Container(rootfs, share, tmp_path / "console.log",
                          "--capability=CAP_BPF,CAP_NET_ADMIN,CAP_PERFMON",
                          "--system-call-filter=bpf perf_event_open")
    try:
        c = container
        c.sh(f"dpkg -i /mnt/voltlock/{deb.name}")
        # init-cell as installed: it names the drop-in where the package put it.
        printed = c.sh("voltlockd init-cell --replicas 3 --hosts 127.0.0.1,127.0.0.1,127.0.0.1 "
                       "--electrode on --interface lo --tls off --auth off --out /root/cell").stdout
        assert "cp /usr/share/voltlock/electrode.conf /etc/systemd/system/voltlockd@r0.service.d/" \
            in printed, printed
        c.sh("""sed -i 's/"electrode": "on"/"electrode": "off"/' /root/cell/r2.json""")
        for r in range(3):
            c.sh(f"install -m 0640 -g voltlock /root/cell/r{r}.json /etc/voltlock/r{r}.json")
        c.sh("install -m 0600 -o voltlock -g voltlock /root/cell/cell.key /etc/voltlock/cell.key")
        c.sh("mkdir -p /etc/systemd/system/voltlockd@r0.service.d && cp "
             "/usr/share/voltlock/electrode.conf /etc/systemd/system/voltlockd@r0.service.d/ && "
             "systemctl daemon-reload")
        c.sh("systemctl start voltlockd@r0 voltlockd@r1 voltlockd@r2", timeout=180)

        status = json.loads(c.sh("curl -sf http://127.0.0.1:7480/v1/status").stdout)
        assert status["electrode"]["interface"] == "lo", status["electrode"]
        pid = c.sh("systemctl show -p MainPID --value voltlockd@r0").stdout.strip()
        assert c.sh(f"stat -c %U /proc/{pid}").stdout.strip() == "voltlock"
        effective = c.sh(f"grep CapEff /proc/{pid}/status").stdout.split()[1]
        assert int(effective, 16) == (1 << 12) | (1 << 38) | (1 << 39)  # NET_ADMIN PERFMON BPF
        assert "electrode on lo" in c.sh("journalctl -u voltlockd@r0 --no-pager").stdout
        # Each line's level is its journal priority: the refusal is a warning, the start info.
        r1 = c.sh("journalctl -u voltlockd@r1 --no-pager -p warning").stdout
        assert "Operation not permitted; VR runs in user space" in r1, r1
        assert "replica 1 of 3" not in r1, r1
        assert "replica 1 of 3" in c.sh("journalctl -u voltlockd@r1 --no-pager -p info").stdout
        wait_for(lambda: c.sh("curl -sf http://127.0.0.1:7480/readyz", check=False).returncode
                 == 0, 60, "r0 ready")
        c.sh("""curl -sf -XPUT http://127.0.0.1:7480/v1/kv/fast -d '{"value": "path"}'""")
        value = json.loads(c.sh("curl -sf http://127.0.0.1:7482/v1/kv/fast").stdout)["value"]
        assert value == "path"
        c.sh("systemctl stop voltlockd@r0 voltlockd@r1 voltlockd@r2", timeout=300)
    except BaseException:
        print(container.sh("journalctl -u 'voltlockd@*' --no-pager | tail -60",
                           check=False).stdout)
        raise
    finally:
        container.close()
