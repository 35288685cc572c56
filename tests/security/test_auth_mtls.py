"""Auth with client certificates (docs/security-auth.md): a cell with `--tls mtls --auth on`,
where a certificate's CN is the identity. Certificates are made here with `openssl`."""
from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import ssl
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from cell import (Cell, json_exchange, unique_name, voltlockd_available,  # noqa: E402
                  voltlockd_path)
from cellrig.util import entered_netns  # noqa: E402

import certs  # noqa: E402

DEADLINE_S = 20.0


@pytest.fixture(scope="module")
def cell():
    if os.geteuid() != 0:
        pytest.skip("the auth tests build network namespaces and need root")
    if not voltlockd_available():
        pytest.skip(f"voltlockd is not built ({voltlockd_path()} missing)")
    if not shutil.which("openssl"):
        pytest.skip("no openssl command to make test certificates (scripts/install-deps)")
    with Cell(3, name=unique_name("amtls"), tls="mtls", auth="on") as c:
        yield c


@pytest.fixture(scope="module")
def clients(cell, tmp_path_factory) -> dict:
    """alice (listed, certificate only, role app-writer) and mallory (a good certificate, not
    listed); the files reloaded on every replica."""
    directory = str(tmp_path_factory.mktemp("pki"))
    tls = os.path.dirname(cell.endpoints["tls_ca"])
    ca = (os.path.join(tls, "ca.pem"), os.path.join(tls, "ca-key.pem"))
    auth = cell.endpoints["auth_dir"]
    with open(os.path.join(auth, "roles"), "w") as f:
        f.write("app-writer read,write key:app/\n")
    with open(os.path.join(auth, "tokens"), "a") as f:
        f.write("alice app-writer -\n")
    with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
        for replica in json.load(f)["replicas"]:
            os.kill(replica["process"]["pid"], signal.SIGHUP)
    made = {"ca": ca[0], "alice": certs.issue(directory, ca, "alice"),
            "mallory": certs.issue(directory, ca, "mallory"),
            "replica": (os.path.join(tls, "r1.pem"), os.path.join(tls, "r1-key.pem"))}
    deadline = time.monotonic() + DEADLINE_S
    for replica in range(3):
        while request(cell, replica, made, "alice", "GET", "/v1/kv/app/none")[0] == 403:
            assert time.monotonic() < deadline, f"r{replica} did not reload the auth files"
            time.sleep(0.05)
    return made


def request(cell, replica: int, made: dict, who: str, method: str, path: str, body=None):
    tls = ssl.create_default_context(cafile=made["ca"])
    tls.load_cert_chain(*made[who])
    r = cell.replicas[replica]
    with entered_netns(cell.endpoints["client_namespace"]):
        conn = http.client.HTTPSConnection(r["ip"], r["http_port"], timeout=5, context=tls)
        status, answer, _ = json_exchange(conn, method, path, body)
    return status, answer


def test_a_certificate_is_an_identity(cell, clients):
    follower = (cell.leader + 1) % 3
    for replica in (cell.leader, follower):
        status, body = request(cell, replica, clients, "alice", "PUT", f"/v1/kv/app/{replica}",
                               {"value": "1"})
        assert status == 200, body
        status, body = request(cell, replica, clients, "alice", "PUT", "/v1/kv/other/x",
                               {"value": "1"})
        assert status == 403 and body["details"]["user"] == "alice", body
        status, body = request(cell, replica, clients, "mallory", "GET", "/v1/kv/app/0")
        assert status == 403 and body["details"]["user"] == "mallory", body
        assert request(cell, replica, clients, "mallory", "GET", "/v1/cluster")[0] == 200


def test_a_session_opened_through_a_follower_is_the_clients(cell, clients):
    """The follower forwards over its own (peer) certificate, naming the client."""
    follower = (cell.leader + 1) % 3
    status, created = request(cell, follower, clients, "alice", "POST", "/v1/sessions",
                              {"ttl_ms": 10000})
    assert status == 201, created
    session = created["session"]
    status, body = request(cell, cell.leader, clients, "alice", "GET", f"/v1/sessions/{session}")
    assert status == 200 and body["owner"] == "alice", body
    status, body = request(cell, cell.leader, clients, "mallory", "DELETE",
                           f"/v1/sessions/{session}")
    assert status == 403, body
    assert request(cell, cell.leader, clients, "alice", "DELETE",
                   f"/v1/sessions/{session}")[0] == 200


def test_the_snapshot_endpoint_serves_replicas_only(cell, clients):
    for who in ("alice", "mallory"):
        status, body = request(cell, cell.leader, clients, who, "GET", "/v1/internal/snapshot")
        assert status == 403 and body["code"] == "permission_denied", body
    status, _ = request(cell, cell.leader, clients, "replica", "GET", "/v1/internal/snapshot")
    assert status in (200, 404)  # 404 no_snapshot: none taken yet; either way, not refused
