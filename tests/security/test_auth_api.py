"""Users, roles and tokens through the API (docs/security-auth.md, "Users, roles and tokens
through the API"): replicated through the log, so every replica enforces them once it has applied
the op. Against a real 3-replica cell with `--auth on`, durability `snapshot` and a snapshot
every 20 ops: the admin (the bootstrap token of the file) makes roles, users and tokens; they
work at every replica; a revoked or expired token is 401 at every replica; a non-admin gets 403
and bad input 400, and neither changes anything; the tables survive a restart of the whole cell
from its snapshots (the log is not durable with `snapshot`, so only the snapshot has them)."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, HERE)
from cell import Cell, unique_name, voltlockd_available, voltlockd_path  # noqa: E402
from replication import wait_until  # noqa: E402
from test_auth import request  # noqa: E402
from cellrig.util import NamespacedConnection  # noqa: E402

DEADLINE_S = 30.0
REPLICAS = 3


@pytest.fixture(scope="module")
def cell():
    if os.geteuid() != 0:
        pytest.skip("the auth tests build network namespaces and need root")
    if not voltlockd_available():
        pytest.skip(f"voltlockd is not built ({voltlockd_path()} missing)")
    with Cell(REPLICAS, name=unique_name("authapi"), auth="on", durability="snapshot",
              snapshot_every_ops=20) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cell) -> str:
    return cell.endpoints["admin_token"]


def call(cell, replica, method, path, body=None, token=None):
    status, answer, _ = request(cell, replica, method, path, body=body, token=token)
    return status, answer


def tables(cell, admin) -> dict:
    """Every table as the leader has it (linearizable reads)."""
    found = {}
    for table in ("roles", "users", "tokens"):
        status, body = call(cell, cell.leader, "GET", f"/v1/auth/{table}", token=admin)
        assert status == 200, body
        found[table] = body[table]
        found["auth_revision"] = body["auth_revision"]
    return found


def setup_user(cell, admin, user: str, prefix: str, ttl_s: int | None = None) -> dict:
    """A role read,write on key:<prefix>, a user with it, and a token: the 201 body."""
    status, body = call(cell, cell.leader, "PUT", f"/v1/auth/roles/{user}-rw",
                        {"grants": [{"permissions": ["read", "write"],
                                     "resource": f"key:{prefix}"}]}, admin)
    assert status == 200, body
    status, body = call(cell, cell.leader, "PUT", f"/v1/auth/users/{user}",
                        {"roles": [f"{user}-rw"]}, admin)
    assert status == 200, body
    request_body = {"user": user} if ttl_s is None else {"user": user, "ttl_s": ttl_s}
    # Through a follower: the op is forwarded to the leader like any other.
    status, created = call(cell, (cell.leader + 1) % REPLICAS, "POST", "/v1/auth/tokens",
                           request_body, admin)
    assert status == 201, created
    assert re.fullmatch(r"vl_[0-9a-f]{64}", created["token"]), created
    return created


def works_everywhere(cell, token: str, key: str) -> None:
    for replica in range(REPLICAS):
        wait_until(lambda: call(cell, replica, "PUT", f"/v1/kv/{key}", {"value": "v"},
                                token)[0] == 200,
                   DEADLINE_S, f"r{replica} to accept the new token", interval=0.05)


def refused_everywhere(cell, token: str, key: str) -> None:
    for replica in range(REPLICAS):
        wait_until(lambda: call(cell, replica, "GET", f"/v1/kv/{key}", token=token)[0] == 401,
                   DEADLINE_S, f"r{replica} to refuse the token", interval=0.05)


def test_a_token_made_by_the_admin_works_on_every_replica_until_revoked(cell, admin):
    created = setup_user(cell, admin, "alice", "alice/")
    token = created["token"]
    works_everywhere(cell, token, "alice/x")
    for replica in range(REPLICAS):
        status, body = call(cell, replica, "PUT", "/v1/kv/bob/x", {"value": "v"}, token)
        assert status == 403 and body["details"]["prefix"] == "bob/x", body
    # Listings never show the token, only its id.
    status, listed = call(cell, cell.leader, "GET", "/v1/auth/tokens", token=admin)
    assert status == 200 and token not in json.dumps(listed), listed
    mine = next(t for t in listed["tokens"] if t["id"] == created["id"])
    assert mine["user"] == "alice" and mine["expires_ms"] is None, mine
    status, user = call(cell, cell.leader, "GET", "/v1/auth/users/alice", token=admin)
    assert status == 200 and user["roles"] == ["alice-rw"] and user["tokens"] == [created["id"]]

    status, body = call(cell, cell.leader, "DELETE", f"/v1/auth/tokens/{created['id']}",
                        token=admin)
    assert status == 200, body
    refused_everywhere(cell, token, "alice/x")
    status, body = call(cell, cell.leader, "GET", "/v1/kv/alice/x", token=token)
    assert body["code"] == "unauthenticated", body
    # Revoked twice: the token is gone.
    status, body = call(cell, cell.leader, "DELETE", f"/v1/auth/tokens/{created['id']}",
                        token=admin)
    assert status == 404 and body["code"] == "not_found", body


def open_watch(cell, replica: int, path: str, token: str):
    """A watch stream's response, its head read (200), with a 15 s read timeout."""
    r = cell.replicas[replica]
    conn = NamespacedConnection(cell.endpoints["client_namespace"], r["ip"], r["http_port"], 15.0)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    assert response.status == 200, response.read()
    return response


def read_until_error(response) -> tuple[list[str], dict]:
    """The event types a stream sent, until its `error` event: (types, the error's data). The
    stream's heartbeats keep it alive: a watch never cut fails at the deadline."""
    types, event = [], None
    deadline = time.monotonic() + DEADLINE_S
    while True:
        assert time.monotonic() < deadline, f"no error event within {DEADLINE_S} s: {types}"
        line = response.fp.readline()
        assert line, f"the stream ended without an error event, after {types}"
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: "):]
            types.append(event)
        elif line.startswith("data: ") and event == "error":
            return types, json.loads(line[len("data: "):])


def test_a_revoked_token_s_open_watch_is_cut_on_every_replica(cell, admin):
    """Revoking a token refuses new requests, and also ends the watches it opened: what a watch
    sends after the revocation would be data the identity may no longer read."""
    created = setup_user(cell, admin, "gwen", "gwen/")
    token = created["token"]
    works_everywhere(cell, token, "gwen/x")
    status, body = call(cell, cell.leader, "PUT", "/v1/auth/roles/gwen-rw",
                        {"grants": [{"permissions": ["read", "write", "watch"],
                                     "resource": "key:gwen/"}]}, admin)
    assert status == 200, body
    watches = []
    for replica in range(REPLICAS):
        wait_until(lambda: call(cell, replica, "GET", "/v1/kv/gwen/x", token=token)[0] == 200,
                   DEADLINE_S, f"r{replica} to grant the watch", interval=0.05)
        watches.append(open_watch(cell, replica, "/v1/watch/gwen/?prefix=true", token))
    status, body = call(cell, cell.leader, "DELETE", f"/v1/auth/tokens/{created['id']}",
                        token=admin)
    assert status == 200, body
    status, body = call(cell, cell.leader, "PUT", "/v1/kv/gwen/after", {"value": "secret"}, admin)
    assert status == 200, body
    for replica, response in enumerate(watches):
        types, error = read_until_error(response)
        assert error["code"] == "unauthenticated", (replica, error)
        assert "put" not in types, (replica, types)  # nothing after the revocation
    status, cluster = call(cell, cell.leader, "GET", "/v1/cluster", token=admin)
    assert status == 200 and cluster["api"]["watches_unauthorized_cut"] >= 1, cluster


def test_a_token_request_retried_after_its_answer_was_lost_is_409_not_a_dead_token(cell, admin):
    """The same client id and request number again (a client that never heard the first answer):
    VR's client table answers with the first attempt's result, whose secret was shown only in
    that answer. The retry must not hand out a second secret that no replica holds."""
    setup_user(cell, admin, "frank", "frank/")
    identity = {"X-Voltlock-Client-Id": str(secrets.randbits(62) + 1),
                "X-Voltlock-Request-Number": "1"}
    before = {t["id"] for t in tables(cell, admin)["tokens"]}
    follower = (cell.leader + 1) % REPLICAS
    status, first, _ = request(cell, follower, "POST", "/v1/auth/tokens", body={"user": "frank"},
                               token=admin, headers=identity)
    assert status == 201, first
    for replica in (follower, cell.leader):
        status, again, _ = request(cell, replica, "POST", "/v1/auth/tokens",
                                   body={"user": "frank"}, token=admin, headers=identity)
        assert status == 409 and again["code"] == "request_number_reused", again
        assert "token" not in again, again
    after = {t["id"] for t in tables(cell, admin)["tokens"]}
    assert after - before == {first["id"]}, (before, after)
    works_everywhere(cell, first["token"], "frank/x")


def test_an_expired_token_is_401_on_every_replica(cell, admin):
    created = setup_user(cell, admin, "carol", "carol/", ttl_s=3)
    status, listed = call(cell, cell.leader, "GET", "/v1/auth/tokens", token=admin)
    mine = next(t for t in listed["tokens"] if t["id"] == created["id"])
    assert mine["expires_ms"] - mine["created_ms"] == 3000, mine
    works_everywhere(cell, created["token"], "carol/x")
    refused_everywhere(cell, created["token"], "carol/x")
    status, body = call(cell, cell.leader, "GET", "/v1/kv/carol/x", token=created["token"])
    assert status == 401 and "expired" in body["message"], body


def test_a_non_admin_gets_403_and_changes_nothing(cell, admin):
    token = setup_user(cell, admin, "dave", "dave/")["token"]
    works_everywhere(cell, token, "dave/x")
    before = tables(cell, admin)
    for method, path, body in [
            ("PUT", "/v1/auth/roles/mine", {"grants": [{"permissions": ["admin"],
                                                        "resource": "*"}]}),
            ("PUT", "/v1/auth/users/dave", {"roles": ["admin"]}),
            ("DELETE", "/v1/auth/users/alice", None),
            ("POST", "/v1/auth/tokens", {"user": "dave"}),
            ("DELETE", "/v1/auth/tokens/0123456789abcdef", None),
            ("GET", "/v1/auth/users", None),
            ("GET", "/v1/auth/roles/dave-rw", None),
            ("GET", "/v1/auth/tokens", None)]:
        for replica in range(REPLICAS):
            status, answer = call(cell, replica, method, path, body, token)
            assert status == 403 and answer["code"] == "permission_denied", (path, answer)
            assert answer["details"]["permission"] == "admin", answer
            status, answer = call(cell, replica, method, path, body, None)
            assert status == 401, (path, answer)
    assert tables(cell, admin) == before


def test_bad_input_is_400_and_changes_nothing(cell, admin):
    erin = setup_user(cell, admin, "erin", "erin/")
    before = tables(cell, admin)
    role = "/v1/auth/roles/r"
    cases = [
        ("PUT", role, "not json", "bad_json"),
        ("PUT", role, {"grants": [], "extra": 1}, "unknown_field"),
        ("PUT", role, {}, "invalid_argument"),
        ("PUT", role, {"grants": "read"}, "invalid_argument"),
        ("PUT", role, {"grants": [{"permissions": ["fly"], "resource": "key:a"}]},
         "invalid_argument"),
        ("PUT", role, {"grants": [{"permissions": [], "resource": "key:a"}]},
         "invalid_argument"),
        ("PUT", role, {"grants": [{"permissions": ["read"], "resource": "file:a"}]},
         "invalid_argument"),
        ("PUT", role, {"grants": [{"permissions": ["read"]}]}, "invalid_argument"),
        # admin is the whole cell: on a prefix it would grant nothing.
        ("PUT", role, {"grants": [{"permissions": ["admin"], "resource": "key:app/"}]},
         "invalid_argument"),
        ("PUT", role, {"grants": [{"permissions": ["read", "admin"], "resource": "key:"}]},
         "invalid_argument"),
        ("PUT", role, {"grants": [{"permissions": ["read"], "resource": "*", "x": 1}]},
         "unknown_field"),
        ("PUT", role, {"grants": [{"permissions": ["read"], "resource": "*"}] * 33},
         "invalid_argument"),
        ("PUT", "/v1/auth/roles/admin", {"grants": []}, "invalid_argument"),
        ("DELETE", "/v1/auth/roles/admin", None, "invalid_argument"),
        ("PUT", "/v1/auth/users/" + "u" * 65, {"roles": []}, "invalid_argument"),
        ("PUT", "/v1/auth/users/u%0A", {"roles": []}, "invalid_argument"),
        ("PUT", "/v1/auth/users/u", {"roles": "erin-rw"}, "invalid_argument"),
        ("PUT", "/v1/auth/users/u", {"roles": [1]}, "invalid_argument"),
        ("POST", "/v1/auth/tokens", {}, "invalid_argument"),
        ("POST", "/v1/auth/tokens", {"user": "erin", "ttl_s": -1}, "invalid_argument"),
        ("POST", "/v1/auth/tokens", {"user": "erin", "ttl_s": "60"}, "invalid_argument"),
        ("POST", "/v1/auth/tokens", {"user": "erin", "ttl_s": 1.5}, "invalid_argument"),
        ("POST", "/v1/auth/tokens", {"user": "erin", "ttl": 60}, "unknown_field"),
        ("DELETE", "/v1/auth/tokens/not-an-id", None, "invalid_argument"),
        # A delete takes no fields: a body with any is refused, not ignored.
        ("DELETE", "/v1/auth/users/erin", {"force": True}, "unknown_field"),
        ("DELETE", "/v1/auth/roles/erin-rw", "not json", "bad_json"),
        ("DELETE", f"/v1/auth/tokens/{erin['id']}", {"x": 1}, "unknown_field"),
    ]
    for replica in (cell.leader, (cell.leader + 1) % REPLICAS):
        for method, path, body, code in cases:
            if body == "not json":
                status, answer = raw(cell, replica, method, path, "{not json", admin)
            else:
                status, answer = call(cell, replica, method, path, body, admin)
            assert status == 400 and answer["code"] == code, (method, path, body, answer)
            assert set(answer) == {"code", "message", "details"}, answer
    # Names that do not exist: 404, nothing changes either.
    for method, path, body in [("PUT", "/v1/auth/users/u", {"roles": ["nope"]}),
                               ("POST", "/v1/auth/tokens", {"user": "nobody"}),
                               ("DELETE", "/v1/auth/users/nobody", None),
                               ("DELETE", "/v1/auth/roles/nope", None),
                               ("GET", "/v1/auth/roles/nope", None)]:
        status, answer = call(cell, cell.leader, method, path, body, admin)
        assert status == 404 and answer["code"] == "not_found", (path, answer)
    assert tables(cell, admin) == before


def raw(cell, replica, method, path, text, token):
    r = cell.replicas[replica]
    conn = NamespacedConnection(cell.endpoints["client_namespace"], r["ip"], r["http_port"], 5.0)
    try:
        conn.request(method, path, body=text, headers={"Authorization": f"Bearer {token}",
                                                       "Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read().decode())
    finally:
        conn.close()


def snapshots_written(cell, replica: int) -> list[int]:
    with open(cell.replicas[replica]["log"], errors="replace") as f:
        return [int(op) for op in re.findall(r"snapshot of op (\d+) written", f.read())]


def test_the_tables_survive_a_restart_of_the_whole_cell_from_its_snapshots(cell, admin):
    created = setup_user(cell, admin, "frank", "frank/")
    works_everywhere(cell, created["token"], "frank/x")
    before = tables(cell, admin)
    status, leader_status = call(cell, cell.leader, "GET", "/v1/status", token=admin)
    assert status == 200, leader_status
    commit = leader_status["commit"]
    # Writes until every replica has written a snapshot that holds the auth ops.
    written = 0

    def snapshotted():
        nonlocal written
        if all(max(snapshots_written(cell, i), default=0) >= commit for i in range(REPLICAS)):
            return True
        status, body = call(cell, cell.leader, "PUT", f"/v1/kv/frank/fill{written}",
                            {"value": "x"}, created["token"])
        assert status == 200, body
        written += 1
        return False
    wait_until(snapshotted, 60, "a snapshot after the auth ops on every replica", interval=0.05)

    cell.kill("all")
    cell.start("all", timeout=20)
    cell.wait_for_leader(timeout=30)
    assert wait_until(lambda: call(cell, cell.leader, "GET", "/v1/auth/users",
                                   token=admin)[0] == 200, DEADLINE_S,
                      "the restarted cell to serve", interval=0.05)
    assert tables(cell, admin) == before
    works_everywhere(cell, created["token"], "frank/after")
    for replica in range(REPLICAS):
        status, body = call(cell, replica, "GET", "/v1/kv/alice/x", token=created["token"])
        assert status == 403, body


def peer_auth_header(cell, replica: int, method: str, target: str, sent_ms: int | None = None,
                     nonce: str | None = None) -> str:
    """X-Voltlock-Peer-Auth as replica `replica` signs it (shell/peer_auth.h), from the cell's
    replication key file."""
    with open(os.path.join(cell.endpoints["state_dir"], "cell.key")) as f:
        key = bytes.fromhex(next(line.strip() for line in f
                                 if line.strip() and not line.startswith("#")))
    with open(os.path.join(cell.endpoints["state_dir"], f"r{replica}", "config.json")) as f:
        cluster_id = json.load(f)["cluster_id"]
    sent_ms = int(time.time() * 1000) if sent_ms is None else sent_ms
    nonce = nonce or secrets.token_hex(16)
    text = (f"voltlock-peer-auth v1\n{cluster_id}\nr{replica}\n{method}\n{target}\n{sent_ms}\n"
            f"{nonce}")
    tag = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    return f"r{replica} {sent_ms} {nonce} {tag}"


def peer_get(cell, to: int, target: str, header: str | None) -> int:
    r = cell.replicas[to]
    conn = NamespacedConnection(cell.endpoints["client_namespace"], r["ip"], r["http_port"], 5.0)
    try:
        conn.request("GET", target, headers={"X-Voltlock-Peer-Auth": header} if header else {})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_peers_fetch_snapshots_by_the_cell_key_and_nothing_else(cell):
    """The restart above already needed it: replicas behind the snapshot fetched it from a peer
    over plain HTTP with auth on. Here the header's checks, from the client namespace."""
    leader = cell.leader
    target = "/v1/internal/snapshot?offset=0&op=0"
    good = peer_auth_header(cell, 1, "GET", target)
    assert peer_get(cell, leader, target, good) in (200, 409)  # 409: another op is served
    assert peer_get(cell, leader, target, good) == 401  # replayed
    assert peer_get(cell, leader, target, None) == 401
    # Another path, a bit flipped, an old time, another replica's name: refused.
    assert peer_get(cell, leader, "/v1/kv/x", peer_auth_header(cell, 1, "GET", "/v1/kv/x")) == 401
    forged = peer_auth_header(cell, 1, "GET", target)
    forged = forged[:-1] + ("0" if forged[-1] != "0" else "1")
    assert peer_get(cell, leader, target, forged) == 401
    old = peer_auth_header(cell, 1, "GET", target, sent_ms=int(time.time() * 1000) - 120_000)
    assert peer_get(cell, leader, target, old) == 401
    moved = peer_auth_header(cell, 1, "GET", target).replace("r1 ", "r2 ", 1)
    assert peer_get(cell, leader, target, moved) == 401


def put_as_forwarded(cell, to: int, target: str, admin: str, signature: str) -> int:
    """A PUT carrying the header a follower forwards with, signed, and the client's token."""
    r = cell.replicas[to]
    conn = NamespacedConnection(cell.endpoints["client_namespace"], r["ip"], r["http_port"], 5.0)
    try:
        conn.request("PUT", target, body=json.dumps({"value": "x"}),
                     headers={"X-Voltlock-Peer-Auth": signature, "X-Voltlock-Forwarded": "1",
                              "Authorization": f"Bearer {admin}",
                              "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_a_forwarded_request_is_a_peers_by_its_mac_whatever_its_time(cell, admin):
    """A follower signs what it forwards over HTTP with the cell's key, which makes the headers
    only replicas send believed. The leader checks the MAC alone there, not the time (a
    follower's clock may be far off, as at boot) nor the nonce (the signature grants nothing a
    replay of the client's request would not); a snapshot fetch must be fresh (above). A bad MAC
    leaves the header a client's: 400."""
    leader = cell.leader
    target = "/v1/kv/forwarded/signed"
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    signed = peer_auth_header(cell, 1, "PUT", target, sent_ms=an_hour_ago)
    assert put_as_forwarded(cell, leader, target, admin, signed) == 200
    assert put_as_forwarded(cell, leader, target, admin, signed) == 200  # the same again
    forged = signed[:-1] + ("0" if signed[-1] != "0" else "1")
    assert put_as_forwarded(cell, leader, target, admin, forged) == 400


def test_the_python_sdk_manages_users_roles_and_tokens(cell, admin):
    every = [r["http"] for r in cell.replicas]
    script = f"""
import asyncio, sys
sys.path.insert(0, {os.path.join(REPO, 'client', 'python', 'src')!r})
import voltlock, voltlock.aio
c = voltlock.Client({every!r}, token={admin!r})
c.put_role("sdk-rw", [{{"permissions": ["read", "write"], "resource": "key:sdk/"}}])
c.put_user("sdk", ["sdk-rw"])
made = c.create_token("sdk", ttl=600)
assert made["user"] == "sdk" and made["token"].startswith("vl_"), made
assert any(r["name"] == "sdk-rw" for r in c.roles())
assert any(u["name"] == "sdk" and u["tokens"] == [made["id"]] for u in c.users())
assert made["token"] not in repr(c.tokens())
user = voltlock.Client({every!r}, token=made["token"])
user.put("sdk/k", "1")
try:
    user.put_user("sdk", ["admin"])
    raise SystemExit("a non-admin changed its roles")
except voltlock.errors.PermissionDenied:
    pass
try:
    c.put_user("sdk", ["no-such-role"])
    raise SystemExit("an unknown role was accepted")
except voltlock.errors.NotFound:
    pass
async def main():
    async with voltlock.aio.Client({every!r}, token={admin!r}) as a:
        await a.revoke_token(made["id"])
        assert made["id"] not in [t["id"] for t in await a.tokens()]
        await a.delete_user("sdk")
        await a.delete_role("sdk-rw")
        assert not any(r["name"] == "sdk-rw" for r in await a.roles())
asyncio.run(main())
print("sdk ok")
"""
    done = cell.exec_client(sys.executable, "-c", script, check=False, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sdk ok" in done.stdout
