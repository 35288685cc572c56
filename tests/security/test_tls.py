"""TLS on the API and between replicas (docs/security-tls.md), against a real 3-replica cell
made with `scripts/cell up --tls mtls`: its CA and replica certificates made by `voltlockd
init-cell`, clients required to show a certificate of the cell CA. Test certificates (another
CA, an expired one, a rotated one) are made here with `openssl`; none is committed."""
from __future__ import annotations

import http.client
import calendar
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from cell import Cell, unique_name, voltlockd_available, voltlockd_path  # noqa: E402
from cellrig.util import entered_netns  # noqa: E402

import certs  # noqa: E402

DEADLINE_S = 20.0


def lockctl_path() -> str:
    return os.environ.get("LOCKCTL") or os.path.join(REPO, "build", "lockctl")


@pytest.fixture(scope="module")
def cell():
    if os.geteuid() != 0:
        pytest.skip("the TLS tests build network namespaces and need root")
    if not voltlockd_available():
        pytest.skip(f"voltlockd is not built ({voltlockd_path()} missing)")
    if not shutil.which("openssl"):
        pytest.skip("no openssl command to make test certificates (scripts/install-deps)")
    # Snapshots every 20 ops: a replica that missed more catches up by fetching one from a
    # peer, over TLS (test_snapshot_transfer_over_tls).
    with Cell(3, name=unique_name("tls"), tls="mtls", snapshot_every_ops=20) as c:
        yield c


@pytest.fixture(scope="module")
def pki(cell, tmp_path_factory) -> dict:
    """The cell CA's files, and test certificates: a good client certificate of the cell CA,
    one of another CA, an expired one of the cell CA."""
    directory = str(tmp_path_factory.mktemp("pki"))
    tls = os.path.dirname(cell.endpoints["tls_ca"])
    cell_ca = (os.path.join(tls, "ca.pem"), os.path.join(tls, "ca-key.pem"))
    other_ca = certs.make_ca(directory, "other-ca")
    return {
        "directory": directory,
        "tls": tls,
        "cell_ca": cell_ca,
        "other_ca": other_ca,
        "client": certs.issue(directory, cell_ca, "alice"),
        "foreign_client": certs.issue(directory, other_ca, "mallory"),
        "expired_client": certs.issue(directory, cell_ca, "old-alice", expired=True),
    }


def url(replica: dict) -> str:
    return f"https://{replica['ip']}:{replica['http_port']}"


def follower_of(cell) -> int:
    return (cell.leader + 1) % len(cell.replicas)


def context(cafile: str, client: tuple[str, str] | None = None) -> ssl.SSLContext:
    tls = ssl.create_default_context(cafile=cafile)
    if client:
        tls.load_cert_chain(*client)
    return tls


def https_get(cell, replica: int, path: str, tls: ssl.SSLContext,
              headers: dict | None = None) -> tuple[int, bytes]:
    r = cell.replicas[replica]
    with entered_netns(cell.endpoints["client_namespace"]):
        conn = http.client.HTTPSConnection(r["ip"], r["http_port"], timeout=5, context=tls)
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


def refused(cell, replica: int, tls: ssl.SSLContext) -> str:
    """Why a request over `tls` got no answer; fails the test if it was answered."""
    try:
        status, _ = https_get(cell, replica, "/healthz", tls)
    except (ssl.SSLError, ConnectionError, http.client.HTTPException, OSError) as e:
        return f"{type(e).__name__}: {e}"
    pytest.fail(f"answered HTTP {status}")


def run_in_client_namespace(cell, *argv: str) -> subprocess.CompletedProcess:
    return cell.exec_client(*argv, check=False, timeout=60)


def test_sdks_through_leader_and_follower(cell, pki):
    """The Python SDK, sync and asyncio, over https with a client certificate: writes through a
    follower are forwarded to the leader over TLS (mTLS between the replicas), reads and a lock
    with a fenced write work, and the cell's status page gathers every replica over TLS."""
    follower = url(cell.replicas[follower_of(cell)])
    every = [url(r) for r in cell.replicas]
    script = f"""
import asyncio, sys
sys.path.insert(0, {os.path.join(REPO, 'client', 'python', 'src')!r})
import voltlock, voltlock.aio
tls = dict(cacert={pki['cell_ca'][0]!r}, cert={pki['client'][0]!r}, key={pki['client'][1]!r})
c = voltlock.Client([{follower!r}], **tls)
c.put("tls/a", "1")
assert c.get("tls/a").value == "1"
with c.session(ttl=5) as s, s.lock("tls/lock", timeout=5) as seq:
    c.put("tls/b", "2", sequencer=seq)
assert voltlock.Client({every!r}, **tls).get("tls/b").value == "2"
async def main():
    async with voltlock.aio.Client([{follower!r}], **tls) as a:
        await a.put("tls/c", "3")
        assert (await a.get("tls/c")).value == "3"
asyncio.run(main())
print("sdk ok")
"""
    done = run_in_client_namespace(cell, sys.executable, "-c", script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sdk ok" in done.stdout

    status, body = https_get(cell, follower_of(cell), "/v1/cluster/replicas",
                             context(pki["cell_ca"][0], pki["client"]))
    assert status == 200
    replicas = json.loads(body)["replicas"]
    assert all(r["reachable"] for r in replicas), replicas
    # The web UI is the replica's own: over https as the API is.
    status, body = https_get(cell, follower_of(cell), "/ui/",
                             context(pki["cell_ca"][0], pki["client"]))
    assert status == 200 and b"<html" in body.lower(), body[:200]


def test_a_followers_cluster_is_the_leaders_look_over_tls(cell, pki):
    """The follower asks the leader's look over TLS with its replica certificate: the leader
    answers, every member reachable. A client's X-Voltlock-Local-View (its certificate is not a
    replica's) is 400."""
    good = context(pki["cell_ca"][0], pki["client"])
    status, body = https_get(cell, follower_of(cell), "/v1/cluster", good)
    cluster = json.loads(body)
    assert status == 200 and cluster["members_seen_by"] == cell.leader, cluster
    assert all(m["reachable"] for m in cluster["members"]), cluster
    for replica in (cell.leader, follower_of(cell)):
        status, body = https_get(cell, replica, "/v1/cluster", good,
                                 {"X-Voltlock-Local-View": "1"})
        assert status == 400, body
        assert json.loads(body)["details"]["field"] == "X-Voltlock-Local-View", body


def test_lockctl(cell, pki):
    lockctl = lockctl_path()
    if not os.access(lockctl, os.X_OK):
        pytest.skip(f"lockctl is not built ({lockctl})")
    base = [lockctl, "--endpoints", url(cell.replicas[follower_of(cell)]),
            "--cacert", pki["cell_ca"][0], "--cert", pki["client"][0], "--key", pki["client"][1]]
    put = run_in_client_namespace(cell, *base, "put", "tls/lockctl", "hello")
    assert put.returncode == 0, put.stderr
    get = run_in_client_namespace(cell, *base, "get", "tls/lockctl", "-w", "json")
    assert get.returncode == 0, get.stderr
    assert "hello" in get.stdout
    # Without the client certificate the cell does not answer: unreachable (exit 3).
    anonymous = run_in_client_namespace(cell, *base[:5], "get", "tls/lockctl",
                                        "--command-timeout", "2s")
    assert anonymous.returncode == 3, anonymous.stdout + anonymous.stderr


def test_refused(cell, pki):
    """Each of these gets no answer; the same request with the right credentials does."""
    replica = follower_of(cell)
    good = context(pki["cell_ca"][0], pki["client"])
    assert https_get(cell, replica, "/healthz", good)[0] == 200

    # A server certificate the client does not trust (the client trusts another CA).
    why = refused(cell, replica, context(pki["other_ca"][0], pki["client"]))
    assert "CERTIFICATE_VERIFY_FAILED" in why, why
    # No client certificate, one of another CA, an expired one of the cell CA.
    for client in (None, pki["foreign_client"], pki["expired_client"]):
        refused(cell, replica, context(pki["cell_ca"][0], client))

    # Plaintext HTTP to the TLS port: no HTTP answer.
    r = cell.replicas[replica]
    with entered_netns(cell.endpoints["client_namespace"]):
        plain = socket.create_connection((r["ip"], r["http_port"]), timeout=5)
    with plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = plain.recv(4096)
        except ConnectionError:
            answer = b""
    assert not answer.startswith(b"HTTP/"), answer

    # The good credentials still work afterwards.
    assert https_get(cell, replica, "/healthz", good)[0] == 200


def not_after(pem_file: str) -> int:
    """The earliest notAfter of the file's certificates, in Unix seconds, as `openssl x509
    -enddate -noout` says it of each."""
    with open(pem_file) as f:
        blocks = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n?",
                            f.read(), re.S)
    ends = []
    for block in blocks:
        said = subprocess.run(["openssl", "x509", "-enddate", "-noout"], input=block,
                              capture_output=True, text=True, check=True).stdout
        date = said.strip().removeprefix("notAfter=")  # "Mar  2 05:11:52 2029 GMT"
        ends.append(calendar.timegm(time.strptime(date, "%b %d %H:%M:%S %Y %Z")))
    assert ends, f"no certificate in {pem_file}"
    return min(ends)


def tls_expiries(cell, replica: int, tls: ssl.SSLContext) -> dict[str, int]:
    """voltlock_tls_cert_expiry_timestamp_seconds in the replica's /metrics, by file."""
    status, body = https_get(cell, replica, "/metrics", tls)
    assert status == 200, body
    return {file: int(value) for file, value in re.findall(
        r'^voltlock_tls_cert_expiry_timestamp_seconds\{file="([^"]*)"\} (\S+)$',
        body.decode(), re.M)}


def test_metrics_say_when_each_tls_file_expires(cell, pki):
    """The replica's certificate and the cell CA (tls_ca_file, also tls_client_ca_file here:
    one series), each at its notAfter."""
    good = context(pki["cell_ca"][0], pki["client"])
    for index in range(len(cell.replicas)):
        files = [os.path.join(pki["tls"], name) for name in (f"r{index}.pem", "ca.pem")]
        assert tls_expiries(cell, index, good) == {file: not_after(file) for file in files}


def test_sighup_serves_a_new_certificate_to_new_connections(cell, pki):
    """A rotated certificate and key, then SIGHUP: a new connection gets the new certificate, a
    connection opened before keeps working, and the replica stays in the cell."""
    index = follower_of(cell)
    r = cell.replicas[index]
    good = context(pki["cell_ca"][0], pki["client"])
    with entered_netns(cell.endpoints["client_namespace"]):
        old = http.client.HTTPSConnection(r["ip"], r["http_port"], timeout=5, context=good)
        old.connect()
    try:
        old.request("GET", "/healthz")
        assert old.getresponse().read() is not None
        before = old.sock.getpeercert(binary_form=True)

        rotated = certs.issue(pki["directory"], pki["cell_ca"], f"r{index}-rotated", ip=r["ip"])
        # Each file replaced whole (renamed into place), as an operator's tooling should.
        for source, name in zip(rotated, (f"r{index}.pem", f"r{index}-key.pem")):
            target = os.path.join(pki["tls"], name)
            shutil.copyfile(source, target + ".new")
            os.replace(target + ".new", target)
        with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
            pid = json.load(f)["replicas"][index]["process"]["pid"]
        os.kill(pid, signal.SIGHUP)

        deadline = time.monotonic() + DEADLINE_S
        while True:
            with entered_netns(cell.endpoints["client_namespace"]):
                fresh = http.client.HTTPSConnection(r["ip"], r["http_port"], timeout=5,
                                                    context=good)
                fresh.connect()
            try:
                now = fresh.sock.getpeercert(binary_form=True)
                fresh.request("GET", "/healthz")
                assert fresh.getresponse().status == 200
            finally:
                fresh.close()
            if now != before:
                break
            assert time.monotonic() < deadline, "SIGHUP: still the old certificate"
            time.sleep(0.1)
        with open(rotated[0]) as f:
            assert ssl.DER_cert_to_PEM_cert(now).strip() == f.read().strip()

        # The connection from before the reload still answers, on its old certificate.
        old.request("GET", "/healthz")
        assert old.getresponse().status == 200
        assert old.sock.getpeercert(binary_form=True) == before
    finally:
        old.close()

    # Still a member: the cell's status through it reaches every replica.
    status, body = https_get(cell, index, "/v1/cluster/replicas", good)
    assert status == 200
    assert all(rep["reachable"] for rep in json.loads(body)["replicas"])
    # /metrics tells the new certificate's expiry (2 days: VoltlockTlsCertExpiresSoon's range).
    certificate = os.path.join(pki["tls"], f"r{index}.pem")
    assert tls_expiries(cell, index, good)[certificate] == not_after(rotated[0])
    assert not_after(rotated[0]) - time.time() < 14 * 86400

    # A reload that cannot load the files (a key that is not PEM) keeps the ones in use.
    key = os.path.join(pki["tls"], f"r{index}-key.pem")
    with open(key, "w") as f:
        f.write("not a key\n")
    os.kill(pid, signal.SIGHUP)
    with open(r["log"]) as log:
        deadline = time.monotonic() + DEADLINE_S
        while "the TLS files are not loaded" not in log.read():
            assert time.monotonic() < deadline, "SIGHUP with a broken key: nothing logged"
            time.sleep(0.1)
    assert https_get(cell, index, "/healthz", good)[0] == 200
    shutil.copyfile(rotated[1], key)


def test_snapshot_transfer_over_tls(cell, pki):
    """A follower that missed a snapshot's worth of writes fetches the snapshot from a peer over
    TLS, with its certificate as the client certificate the peer requires."""
    good = context(pki["cell_ca"][0], pki["client"])
    index = (cell.leader + 2) % len(cell.replicas)
    leader = cell.replicas[cell.leader]

    def installed() -> int:
        _, body = https_get(cell, index, "/v1/status", good)
        return json.loads(body)["counters"]["snapshots_installed"]

    cell.kill(index)
    with entered_netns(cell.endpoints["client_namespace"]):
        conn = http.client.HTTPSConnection(leader["ip"], leader["http_port"], timeout=5,
                                           context=good)
        conn.connect()
    try:
        for i in range(60):
            conn.request("PUT", f"/v1/kv/snapshot/{i}", body=json.dumps({"value": str(i)}))
            response = conn.getresponse()
            assert response.status == 200, response.read()
            response.read()
    finally:
        conn.close()
    cell.start(index)
    deadline = time.monotonic() + DEADLINE_S
    while installed() < 1:
        assert time.monotonic() < deadline, f"r{index} installed no snapshot"
        time.sleep(0.1)
    while True:
        status, body = https_get(cell, index, "/v1/kv/snapshot/59?stale=true", good)
        if status == 200:
            assert json.loads(body)["value"] == "59"
            break
        assert time.monotonic() < deadline, f"r{index} has not caught up: {status} {body!r}"
        time.sleep(0.1)


def test_check_config_names_each_tls_problem(tmp_path):
    """`voltlockd --check-config` on bad TLS files: one line per problem, with its fix."""
    if not voltlockd_available():
        pytest.skip(f"voltlockd is not built ({voltlockd_path()} missing)")
    if not shutil.which("openssl"):
        pytest.skip("no openssl command to make test certificates")
    directory = str(tmp_path)
    ca = certs.make_ca(directory, "ca")
    other_ca = certs.make_ca(directory, "other")
    good = certs.issue(directory, ca, "good", ip="127.0.0.1")
    expired = certs.issue(directory, ca, "expired", ip="127.0.0.1", expired=True)
    foreign = certs.issue(directory, other_ca, "foreign", ip="127.0.0.1")

    def check(**tls) -> str:
        config = {"cluster_id": 7, "replica": 0,
                  "replicas": [{"ip": "127.0.0.1", "udp_port": 17400 + i,
                                "http_port": 17480 + i} for i in range(3)], **tls}
        path = os.path.join(directory, "r0.json")
        with open(path, "w") as f:
            json.dump(config, f)
        done = subprocess.run([voltlockd_path(), "--check-config", path], capture_output=True,
                              text=True)
        return done.stdout

    ok = check(tls_cert_file=good[0], tls_key_file=good[1], tls_ca_file=ca[0])
    assert ": ok:" in ok, ok

    out = check(tls_cert_file=expired[0], tls_key_file=good[1], tls_ca_file=ca[0])
    assert f"tls_cert_file: {expired[0]} expired on 2020-01-02" in out, out
    assert f"tls_key_file: {good[1]} is not the key of {expired[0]}" in out, out
    assert all("; fix: " in line for line in out.splitlines()), out

    out = check(tls_cert_file=foreign[0], tls_key_file=foreign[1], tls_ca_file=ca[0])
    assert "is not trusted by tls_ca_file" in out, out

    out = check(tls_cert_file=os.path.join(directory, "missing.pem"), tls_key_file=good[1])
    assert "tls_cert_file: cannot read" in out, out

    out = check(tls_cert_file=good[0])
    assert "TLS needs both a certificate and its key" in out, out
