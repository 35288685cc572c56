"""Authentication and authorization on the API (docs/security-auth.md), against a real
3-replica cell made with `scripts/cell up --auth on`. The users, their tokens (random, made
here; none is committed) and roles are written by the test into the cell's token and roles
files, then every replica reloads them on SIGHUP."""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from cell import (Cell, json_exchange, unique_name, voltlockd_available,  # noqa: E402
                  voltlockd_path)
from cellrig.util import NamespacedConnection  # noqa: E402

DEADLINE_S = 20.0

ROLES = """\
app-reader read,watch key:app/
app-writer read,write key:app/
app-writer lock lock:app/
app-writer lock barrier:app/
app-writer read lock:app/
"""
USERS = {"reader": "app-reader", "writer": "app-writer", "writer2": "app-writer"}


def lockctl_path() -> str:
    return os.environ.get("LOCKCTL") or os.path.join(REPO, "build", "lockctl")


def sighup_all(cell) -> None:
    with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
        for replica in json.load(f)["replicas"]:
            os.kill(replica["process"]["pid"], signal.SIGHUP)


@pytest.fixture(scope="module")
def cell():
    if os.geteuid() != 0:
        pytest.skip("the auth tests build network namespaces and need root")
    if not voltlockd_available():
        pytest.skip(f"voltlockd is not built ({voltlockd_path()} missing)")
    with Cell(3, name=unique_name("auth"), auth="on") as c:
        yield c


@pytest.fixture(scope="module")
def tokens(cell) -> dict:
    """Random tokens for the test's users, in the cell's files (hashed), reloaded everywhere."""
    made = {"admin": cell.endpoints["admin_token"]}
    auth = cell.endpoints["auth_dir"]
    lines = [f"admin admin {hashlib.sha256(made['admin'].encode()).hexdigest()}"]
    for user, role in USERS.items():
        made[user] = "vl_" + secrets.token_hex(32)
        lines.append(f"{user} {role} {hashlib.sha256(made[user].encode()).hexdigest()}")
    with open(os.path.join(auth, "roles"), "w") as f:
        f.write(ROLES)
    with open(os.path.join(auth, "tokens"), "w") as f:
        f.write("\n".join(lines) + "\n")
    sighup_all(cell)
    deadline = time.monotonic() + DEADLINE_S
    for replica in range(3):  # every replica knows the new users
        while request(cell, replica, "GET", "/v1/kv/app/x", token=made["reader"])[0] == 401:
            assert time.monotonic() < deadline, f"r{replica} did not reload the token file"
            time.sleep(0.05)
    return made


def request(cell, replica: int, method: str, path: str, body=None, token: str | None = None,
            headers: dict | None = None) -> tuple[int, object, dict]:
    r = cell.replicas[replica]
    conn = NamespacedConnection(cell.endpoints["client_namespace"], r["ip"], r["http_port"], 5.0)
    sent = dict(headers or {})
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return json_exchange(conn, method, path, body, sent)


def follower_of(cell) -> int:
    return (cell.leader + 1) % 3


def state(cell, token: str) -> dict:
    """What the refused requests must not have changed."""
    def get(path):
        status, body, _ = request(cell, cell.leader, "GET", path, token=token)
        assert status == 200, body
        return body
    return {"kv": get("/v1/kv/?prefix=true"), "locks": get("/v1/locks"),
            "sessions": get("/v1/sessions"), "barriers": get("/v1/barriers")}


def every_endpoint(session: int) -> list[tuple[str, str, object]]:
    return [
        ("POST", "/v1/sessions", {"ttl_ms": 10000}),
        ("POST", f"/v1/sessions/{session}:keepalive", None),
        ("DELETE", f"/v1/sessions/{session}", None),
        ("GET", "/v1/sessions", None),
        ("GET", f"/v1/sessions/{session}", None),
        ("POST", "/v1/locks/app/l:acquire", {"session": session, "wait_ms": 0}),
        ("POST", "/v1/locks/app/l:release", {"session": session}),
        ("GET", "/v1/locks", None),
        ("GET", "/v1/locks/app/l", None),
        ("POST", "/v1/sequencers:check",
         {"sequencer": {"lock": "app/l", "mode": "exclusive", "generation": 1,
                        "session": session}}),
        ("GET", "/v1/kv/app/k", None),
        ("GET", "/v1/kv/app/?prefix=true", None),
        ("PUT", "/v1/kv/app/k", {"value": "changed"}),
        ("DELETE", "/v1/kv/app/k", None),
        ("DELETE", "/v1/kv/?prefix=true", None),
        ("GET", "/v1/watch/app/k", None),
        ("POST", "/v1/barriers/app/b:enter", {"session": session, "count": 2, "wait_ms": 0}),
        ("POST", "/v1/barriers/app/b:leave", {"session": session, "wait_ms": 0}),
        ("GET", "/v1/barriers", None),
        ("GET", "/v1/cluster", None),
        ("GET", "/v1/cluster/replicas", None),
        ("GET", "/v1/status", None),
        ("GET", "/metrics", None),
        ("GET", "/v1/openapi.json", None),
        ("GET", "/v1/internal/snapshot", None),
    ]


def test_open_endpoints_need_no_credentials(cell):
    for path in ("/healthz", "/readyz", "/ui/"):
        status, _, _ = request(cell, cell.leader, "GET", path)
        assert status == 200, path


def test_every_endpoint_refuses_no_token_and_a_wrong_token(cell, tokens):
    admin = tokens["admin"]
    status, body, _ = request(cell, cell.leader, "PUT", "/v1/kv/app/k", {"value": "v"}, admin)
    assert status == 200, body
    status, created, _ = request(cell, cell.leader, "POST", "/v1/sessions", {"ttl_ms": 30000},
                                 admin)
    session = created["session"]
    assert request(cell, cell.leader, "POST", "/v1/locks/app/l:acquire",
                   {"session": session}, admin)[0] == 200
    before = state(cell, admin)
    wrong = "vl_" + secrets.token_hex(32)
    for replica in (cell.leader, follower_of(cell)):
        for method, path, body in every_endpoint(session):
            for token, headers in ((None, None), (wrong, None),
                                   (None, {"Authorization": f"Basic {admin}"})):
                status, answer, got = request(cell, replica, method, path, body, token, headers)
                assert status == 401, (method, path, token, answer)
                assert answer["code"] == "unauthenticated", answer
                assert set(answer) == {"code", "message", "details"}
                assert got.get("www-authenticate", "").startswith("Bearer"), got
    assert state(cell, admin) == before
    request(cell, cell.leader, "DELETE", f"/v1/sessions/{session}", token=admin)


def test_cluster_says_auth_is_on(cell, tokens):
    status, body, _ = request(cell, follower_of(cell), "GET", "/v1/cluster",
                              token=tokens["reader"])
    assert status == 200 and body["auth"] == "on"


def test_a_followers_cluster_is_the_leaders_look_and_clients_may_not_ask_for_a_local_one(
        cell, tokens):
    """The follower asks the leader's look with X-Voltlock-Local-View and the cell's signature
    (no client certificate here): the leader answers, every member reachable. A client's
    X-Voltlock-Local-View is 400, whatever its token."""
    status, body, _ = request(cell, follower_of(cell), "GET", "/v1/cluster",
                              token=tokens["reader"])
    assert status == 200 and body["members_seen_by"] == cell.leader, body
    assert all(m["reachable"] for m in body["members"]), body
    for replica in (cell.leader, follower_of(cell)):
        status, body, _ = request(cell, replica, "GET", "/v1/cluster", token=tokens["admin"],
                                  headers={"X-Voltlock-Local-View": "1"})
        assert status == 400 and body["details"]["field"] == "X-Voltlock-Local-View", body


def test_roles_allow_and_deny(cell, tokens):
    admin, reader, writer = tokens["admin"], tokens["reader"], tokens["writer"]
    follower = follower_of(cell)
    for replica in (cell.leader, follower):
        status, body, _ = request(cell, replica, "PUT", f"/v1/kv/app/w{replica}", {"value": "1"},
                                  writer)
        assert status == 200, body
        status, body, _ = request(cell, replica, "GET", f"/v1/kv/app/w{replica}", token=reader)
        assert status == 200 and body["value"] == "1", body
    request(cell, cell.leader, "PUT", "/v1/kv/other/k", {"value": "secret"}, admin)
    before = state(cell, admin)
    denied = [
        (reader, "PUT", "/v1/kv/app/k", {"value": "x"}, "write", "app/k"),
        (reader, "DELETE", "/v1/kv/app/?prefix=true", None, "write", "app/"),
        (writer, "GET", "/v1/kv/other/k", None, "read", "other/k"),
        (writer, "GET", "/v1/kv/?prefix=true", None, "read", ""),
        (writer, "PUT", "/v1/kv/other/k", {"value": "x"}, "write", "other/k"),
        (writer, "DELETE", "/v1/kv/?prefix=true", None, "write", ""),
        (writer, "GET", "/v1/watch/app/k", None, "watch", "app/k"),
        (reader, "GET", "/v1/watch/app/?prefix=true&spaces=lock", None, "watch", ""),
        (reader, "GET", "/v1/locks", None, "read", ""),
        (writer, "GET", "/v1/locks", None, "read", ""),
        (reader, "POST", "/v1/locks/app/l:acquire", {"session": 1}, "lock", "app/l"),
        (writer, "POST", "/v1/locks/other/l:acquire", {"session": 1}, "lock", "other/l"),
        (writer, "POST", "/v1/barriers/other/b:enter", {"session": 1, "count": 2}, "lock",
         "other/b"),
        (reader, "GET", "/v1/barriers", None, "read", ""),
    ]
    for replica in (cell.leader, follower):
        for token, method, path, body, permission, prefix in denied:
            status, answer, _ = request(cell, replica, method, path, body, token)
            assert status == 403, (method, path, answer)
            assert answer["code"] == "permission_denied", answer
            assert answer["details"]["permission"] == permission, answer
            assert answer["details"]["prefix"] == prefix, answer
            assert permission in answer["message"] and repr(prefix) in answer["message"]
    assert state(cell, admin) == before
    # The writer's locks and barriers under app/, through a follower.
    status, created, _ = request(cell, follower, "POST", "/v1/sessions", {"ttl_ms": 10000}, writer)
    assert status == 201, created
    session = created["session"]
    status, body, _ = request(cell, follower, "POST", "/v1/locks/app/job:acquire",
                              {"session": session}, writer)
    assert status == 200 and body["granted"], body
    status, body, _ = request(cell, follower, "GET", "/v1/locks/app/job", token=writer)
    assert status == 200 and body["holders"], body
    status, body, _ = request(cell, follower, "POST", "/v1/locks/app/job:release",
                              {"session": session}, writer)
    assert status == 200 and body["released"], body
    assert request(cell, follower, "DELETE", f"/v1/sessions/{session}", token=writer)[0] == 200


def test_internal_snapshot_refuses_clients(cell, tokens):
    for user in ("reader", "writer"):
        status, answer, _ = request(cell, cell.leader, "GET", "/v1/internal/snapshot",
                                    token=tokens[user])
        assert status == 403 and answer["code"] == "permission_denied", answer
    status, _, _ = request(cell, cell.leader, "GET", "/v1/internal/snapshot",
                           token=tokens["admin"])
    assert status in (200, 404)  # 404 no_snapshot: none taken yet; either way, not refused


def test_revoked_token_stops_working(cell, tokens):
    auth = cell.endpoints["auth_dir"]
    path = os.path.join(auth, "tokens")
    with open(path) as f:
        original = f.read()
    revoked = "".join(line + "\n" for line in original.splitlines()
                      if not line.startswith("writer2 "))
    try:
        assert request(cell, cell.leader, "GET", "/v1/kv/app/x", token=tokens["writer2"])[0] != 401
        with open(path, "w") as f:
            f.write(revoked)
        sighup_all(cell)
        deadline = time.monotonic() + DEADLINE_S
        for replica in range(3):
            while request(cell, replica, "GET", "/v1/kv/app/x", token=tokens["writer2"])[0] != 401:
                assert time.monotonic() < deadline, f"r{replica} still takes the revoked token"
                time.sleep(0.05)
        # A token file others can read is refused on reload: the old tables stay.
        os.chmod(path, 0o644)
        sighup_all(cell)
        time.sleep(0.5)
        assert request(cell, cell.leader, "GET", "/v1/kv/app/x", token=tokens["reader"])[0] != 401
    finally:
        os.chmod(path, 0o600)
        with open(path, "w") as f:
            f.write(original)
        sighup_all(cell)
    deadline = time.monotonic() + DEADLINE_S
    for replica in range(3):
        while request(cell, replica, "GET", "/v1/kv/app/x", token=tokens["writer2"])[0] == 401:
            assert time.monotonic() < deadline, f"r{replica} did not take writer2 back"
            time.sleep(0.05)


def test_sdks_with_a_token(cell, tokens):
    follower = cell.replicas[follower_of(cell)]["http"]
    every = [r["http"] for r in cell.replicas]
    script = f"""
import asyncio, sys
sys.path.insert(0, {os.path.join(REPO, 'client', 'python', 'src')!r})
import voltlock, voltlock.aio
c = voltlock.Client([{follower!r}], token={tokens['writer']!r})
c.put("app/sdk", "1")
assert c.get("app/sdk").value == "1"
with c.session(ttl=5) as s, s.lock("app/sdk-lock", timeout=5) as seq:
    c.put("app/sdk2", "2", sequencer=seq)
try:
    voltlock.Client({every!r}).get("app/sdk")
    raise SystemExit("no token: not refused")
except voltlock.errors.Unauthenticated:
    pass
try:
    voltlock.Client({every!r}, token={tokens['reader']!r}).put("app/sdk", "x")
    raise SystemExit("reader wrote")
except voltlock.errors.PermissionDenied as e:
    assert e.details["permission"] == "write", e.details
async def main():
    async with voltlock.aio.Client([{follower!r}], token={tokens['writer']!r}) as a:
        await a.put("app/aio", "3")
        assert (await a.get("app/aio")).value == "3"
        try:
            await a.get("other/k")
            raise SystemExit("aio: read outside app/")
        except voltlock.errors.PermissionDenied:
            pass
asyncio.run(main())
print("sdk ok")
"""
    done = cell.exec_client(sys.executable, "-c", script, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sdk ok" in done.stdout


def test_lockctl_with_a_token(cell, tokens):
    lockctl = lockctl_path()
    if not os.access(lockctl, os.X_OK):
        pytest.skip(f"lockctl is not built ({lockctl})")
    base = [lockctl, "--endpoints", cell.replicas[follower_of(cell)]["http"]]
    put = cell.exec_client(*base, "--token", tokens["writer"], "put", "app/ctl", "hi",
                           check=False)
    assert put.returncode == 0, put.stderr
    got = cell.exec_client(*base, "--user", f"reader:{tokens['reader']}", "get", "app/ctl",
                           "-w", "json", check=False)
    assert got.returncode == 0 and json.loads(got.stdout)["kvs"][0]["value"] == "hi", got
    anonymous = cell.exec_client(*base, "get", "app/ctl", check=False)
    assert anonymous.returncode == 5 and "unauthenticated" in anonymous.stderr, anonymous
    denied = cell.exec_client(*base, "--token", tokens["reader"], "put", "app/ctl", "x",
                              check=False)
    assert denied.returncode == 5 and "permission_denied" in denied.stderr, denied
    from_env = cell.exec_client("env", f"VOLTLOCK_TOKEN={tokens['reader']}", *base, "get",
                                "app/ctl", check=False)
    assert from_env.returncode == 0, from_env.stderr


def test_check_config_names_bad_auth_files(cell, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("admin admin nothex\n")
    tokens.chmod(0o600)
    roles = tmp_path / "roles"
    roles.write_text("bad-role fly key:app/\n")
    with open(os.path.join(cell.endpoints["state_dir"], "r0", "config.json")) as f:
        config = json.load(f)
    config["auth_token_file"] = str(tokens)
    config["auth_roles_file"] = str(roles)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    done = subprocess.run([voltlockd_path(), "--check-config", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "'fly' is not a permission" in done.stdout, done.stdout
    roles.write_text("app-admin admin key:app/\n")
    done = subprocess.run([voltlockd_path(), "--check-config", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "admin is granted on * only" in done.stdout, done.stdout
    roles.write_text(ROLES)
    done = subprocess.run([voltlockd_path(), "--check-config", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "64 hex digits" in done.stdout, done.stdout
    tokens.write_text(f"admin admin {hashlib.sha256(b'x').hexdigest()}\n")
    tokens.chmod(0o644)
    done = subprocess.run([voltlockd_path(), "--check-config", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "chmod 600" in done.stdout, done.stdout
    tokens.unlink()
    done = subprocess.run([voltlockd_path(), "--check-config", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "No such file or directory" in done.stdout, done.stdout


def test_sessions_belong_to_who_opened_them(cell, tokens):
    writer, other, admin = tokens["writer"], tokens["writer2"], tokens["admin"]
    follower = follower_of(cell)
    status, created, _ = request(cell, follower, "POST", "/v1/sessions", {"ttl_ms": 30000}, writer)
    assert status == 201, created
    session = created["session"]
    status, body, _ = request(cell, follower, "POST", "/v1/locks/app/owned:acquire",
                              {"session": session}, writer)
    assert status == 200, body
    status, body, _ = request(cell, cell.leader, "GET", f"/v1/sessions/{session}", token=admin)
    assert body["owner"] == "writer", body
    deadline = time.monotonic() + DEADLINE_S  # the follower applies the create too
    while request(cell, follower, "GET", f"/v1/sessions/{session}?stale=true",
                  token=admin)[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    before = state(cell, admin)
    foreign = [
        ("POST", f"/v1/sessions/{session}:keepalive", None),
        ("DELETE", f"/v1/sessions/{session}", None),
        ("POST", "/v1/locks/app/owned:release", {"session": session}),
        ("POST", "/v1/locks/app/other:acquire", {"session": session, "wait_ms": 0}),
        ("PUT", "/v1/kv/app/ephemeral", {"value": "x", "session": session}),
        ("POST", "/v1/barriers/app/b:enter", {"session": session, "count": 2, "wait_ms": 0}),
    ]
    for replica in (cell.leader, follower):
        for method, path, body in foreign:
            status, answer, _ = request(cell, replica, method, path, body, other)
            assert status == 403, (replica, method, path, answer)
            assert answer["code"] == "permission_denied" and "another identity" in answer["message"]
    after = state(cell, admin)
    # Keepalives of the owner may move lease fields in between; what matters is unchanged.
    assert after["kv"] == before["kv"] and after["locks"] == before["locks"]
    assert [s["session"] for s in after["sessions"]["sessions"]] == \
        [s["session"] for s in before["sessions"]["sessions"]]
    # The owner, and an admin, may.
    assert request(cell, follower, "POST", f"/v1/sessions/{session}:keepalive", None,
                   writer)[0] == 200
    assert request(cell, cell.leader, "POST", f"/v1/sessions/{session}:keepalive", None,
                   admin)[0] == 200
    status, body, _ = request(cell, follower, "POST", "/v1/locks/app/owned:release",
                              {"session": session}, writer)
    assert status == 200 and body["released"], body
    assert request(cell, follower, "DELETE", f"/v1/sessions/{session}", None, admin)[0] == 200
