"""The API fuzzed by schemathesis (issue 18, docs/fuzzing.md) against a real 3-replica cell with
TLS and auth on (`scripts/cell up --tls on --auth on`), driven from the OpenAPI document the
cell serves: property-based requests, valid and invalid, to every operation, three times over:

- without a token and with wrong ones: every answer is 401 `unauthenticated` in the error shape
  of docs/api.md, and the state (digest, keys, locks, sessions, barriers) is unchanged;
- with a token whose role grants only `read` on `key:limited/`: every write, lock, barrier and
  list outside that prefix is refused (403, or 400 for a malformed request), keys, locks and
  barriers are unchanged;
- with the admin token: anything goes, but nothing is a 5xx.

Every time: each answer has a documented status, content type and body schema; every error
body has the error shape; afterwards every replica is alive and /healthz answers 200.

Bounded for CI (VL_SCHEMATHESIS_EXAMPLES examples per operation and generation mode, 10 by
default, seed VL_SCHEMATHESIS_SEED); `VL_SCHEMATHESIS_EXAMPLES=500` is the long run."""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from cell import Cell, unique_name, voltlockd_available, voltlockd_path  # noqa: E402
from cellrig.util import NamespacedConnection, entered_netns  # noqa: E402

EXAMPLES = int(os.environ.get("VL_SCHEMATHESIS_EXAMPLES", "10"))
SEED = int(os.environ.get("VL_SCHEMATHESIS_SEED", "18"))
DEADLINE_S = 20.0
LIMITED_PREFIX = "limited/"
# The operations that need a permission on a named key, lock or barrier (or on all of them, for
# a list): the limited user gets none of them outside its prefix. (Sessions need an identity
# only, and their ownership: it may close and keep alive the ones it opened; test_auth.py checks
# that it cannot touch another identity's.)
NEEDS_PERMISSION = {
    ("GET", "/v1/locks"), ("GET", "/v1/locks/{name}"), ("POST", "/v1/locks/{name}:acquire"),
    ("POST", "/v1/locks/{name}:release"), ("GET", "/v1/kv/{key}"), ("PUT", "/v1/kv/{key}"),
    ("DELETE", "/v1/kv/{key}"), ("GET", "/v1/watch/{key}"), ("GET", "/v1/barriers"),
    ("GET", "/v1/barriers/{name}"), ("POST", "/v1/barriers/{name}:enter"),
    ("POST", "/v1/barriers/{name}:leave"),
}
# No identity needed (docs/security-auth.md). /readyz asks the leader for a probe (a no-op op,
# at most one per 500 ms), so it moves the digest by design: the run that requires the digest to
# stay still leaves both out.
OPEN_PATHS = ("/healthz", "/readyz")
WATCH = "/v1/watch/{key}"  # an endless stream once it is allowed: left out where it would be


@pytest.fixture(scope="module")
def cell():
    if os.geteuid() != 0:
        pytest.skip("the API fuzz tests build network namespaces and need root")
    if not voltlockd_available():
        pytest.skip(f"voltlockd is not built ({voltlockd_path()} missing)")
    pytest.importorskip("schemathesis")
    with Cell(3, name=unique_name("fz"), tls="on", auth="on") as c:
        yield c


def request(cell, replica: int, method: str, path: str, token: str | None = None):
    r = cell.replicas[replica]
    conn = NamespacedConnection(cell.endpoints["client_namespace"], r["ip"], r["http_port"], 5.0,
                                cafile=cell.endpoints["tls_ca"])
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    try:
        return response.status, json.loads(text)
    except ValueError:
        return response.status, text


def replica_pids(cell) -> list[int]:
    with open(os.path.join(cell.endpoints["state_dir"], "cell.json")) as f:
        return [replica["process"]["pid"] for replica in json.load(f)["replicas"]]


@pytest.fixture(scope="module")
def tokens(cell) -> dict:
    """The admin token, and a random one for a user whose role reads `limited/` only; the
    token file holds their hashes and every replica reloads it (SIGHUP)."""
    made = {"admin": cell.endpoints["admin_token"], "limited": "vl_" + secrets.token_hex(32)}
    auth = cell.endpoints["auth_dir"]
    with open(os.path.join(auth, "roles"), "w") as f:
        f.write(f"limited read key:{LIMITED_PREFIX}\n")
    with open(os.path.join(auth, "tokens"), "w") as f:
        for user, role in (("admin", "admin"), ("limited", "limited")):
            f.write(f"{user} {role} {hashlib.sha256(made[user].encode()).hexdigest()}\n")
    for pid in replica_pids(cell):
        os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + DEADLINE_S
    for replica in range(3):
        # /v1/status: /v1/cluster would make the leader propose a probe op later, moving the
        # digest that the first test requires to stay still.
        while request(cell, replica, "GET", "/v1/status", made["limited"])[0] == 401:
            assert time.monotonic() < deadline, f"r{replica} did not reload the token file"
            time.sleep(0.05)
    return made


@pytest.fixture(scope="module")
def schema(cell, tokens):
    """The OpenAPI document as the cell serves it (GET /v1/openapi.json needs an identity). The
    watch is left out of the runs that may open one: its answer is an endless stream."""
    import schemathesis
    status, document = request(cell, cell.leader, "GET", "/v1/openapi.json", tokens["admin"])
    assert status == 200, document
    return schemathesis.openapi.from_dict(document)


def records(cell, token: str) -> dict:
    """Keys, locks, sessions and barriers as the admin reads them at the leader, without the
    cell's revision (a session opened elsewhere moves it). These reads go through the log."""
    def get(path):
        status, body = request(cell, cell.leader, "GET", path, token)
        assert status == 200, (path, body)
        return {k: v for k, v in body.items() if k != "revision"}
    return {"kv": get("/v1/kv/?prefix=true"), "locks": get("/v1/locks"),
            "sessions": get("/v1/sessions"), "barriers": get("/v1/barriers")}


def digest(cell, token: str) -> tuple:
    """The leader's state-machine digest and op (/v1/status, not through the log): the digest
    covers the machine's clock and last applied op, so any op applied moves it, a read too."""
    status, body = request(cell, cell.leader, "GET", "/v1/status?digest=true", token)
    assert status == 200, body
    return body["machine"]["digest"], body["op"]


def header(response, name: str) -> str:
    """A header of a schemathesis response (its headers: lower-case name -> list of values)."""
    values = response.headers.get(name.lower()) or [""]
    return values[0]


def require_error_shape(response) -> None:
    """docs/api.md: every error is {"code", "message", "details"} as JSON."""
    assert header(response, "Content-Type").startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("code"), str) and body["code"], body
    assert isinstance(body.get("message"), str), body
    assert isinstance(body.get("details"), dict), body


def require_alive(cell, token: str) -> None:
    for pid in replica_pids(cell):
        os.kill(pid, 0)  # raises ProcessLookupError if a replica died
    for replica in range(3):
        assert request(cell, replica, "GET", "/healthz")[0] == 200, f"r{replica}"
    assert request(cell, cell.leader, "GET", "/v1/status", token)[0] == 200


def fuzz(cell, schema, authorization, judge, excluded: tuple[str, ...]) -> dict:
    """Runs every operation of `schema` but the `excluded` paths against the leader over https,
    EXAMPLES valid and EXAMPLES invalid cases each, with `authorization(case)` as the
    Authorization header (None: none at all) and `judge(case, response)` on each answer, after
    the checks every run makes. Returns what failed, by kind, and the number of calls."""
    from hypothesis import HealthCheck, given, seed, settings, strategies
    from schemathesis.checks import (content_type_conformance, response_schema_conformance,
                                     status_code_conformance)
    from schemathesis.generation import GenerationMode

    r = cell.replicas[cell.leader]
    base = f"https://{r['ip']}:{r['http_port']}"
    namespace = cell.endpoints["client_namespace"]
    checks = [response_schema_conformance, status_code_conformance, content_type_conformance]
    failures = {"server_error": [], "nonconforming": [], "judged": []}
    calls = [0]
    for path in excluded:
        schema = schema.exclude(path=path)
    for result in schema.get_all_operations():
        operation = result.ok()
        cases = strategies.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                                  operation.as_strategy(GenerationMode.NEGATIVE))

        @seed(SEED)
        @settings(max_examples=2 * EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=cases)
        def run(case):
            if isinstance(case.body, dict) and isinstance(case.body.get("wait_ms"), int):
                case.body["wait_ms"] = min(case.body["wait_ms"], 300)
            case.headers = {k: v for k, v in (case.headers or {}).items()
                            if k.lower() != "authorization"}
            header = authorization(case)
            if header is not None:
                case.headers["Authorization"] = header
            with entered_netns(namespace):  # requests makes its sockets there
                response = case.call(base_url=base, timeout=20, verify=cell.endpoints["tls_ca"])
            calls[0] += 1
            where = (case.method, case.formatted_path, case.query, str(case.body)[:100],
                     response.status_code, response.text[:200])
            if response.status_code >= 500:
                failures["server_error"].append(where)
            try:
                case.validate_response(response, checks=checks)
                if response.status_code >= 400:
                    require_error_shape(response)
                judge(case, response)
            except BaseException as failure:  # a FailureGroup is not an Exception
                kind = "judged" if isinstance(failure, AssertionError) else "nonconforming"
                failures[kind].append((*where, str(failure)[:300]))

        run()
    failures["calls"] = calls[0]
    return failures


def require_clean(failures: dict, at_least_calls: int) -> None:
    assert failures["calls"] >= at_least_calls, failures["calls"]
    for kind in ("server_error", "nonconforming", "judged"):
        assert not failures[kind], (kind, len(failures[kind]), failures[kind][:5])


def test_without_a_token_or_with_a_wrong_one_every_call_is_401_and_nothing_changes(
        cell, tokens, schema):
    admin = tokens["admin"]
    before = records(cell, admin), digest(cell, admin)
    last_digit_changed = admin[:-1] + ("1" if admin[-1] == "0" else "0")
    wrong = ["Bearer vl_" + secrets.token_hex(32), "Bearer " + last_digit_changed,
             "Bearer " + admin + "x", "Bearer", "Basic YWRtaW46YWRtaW4=",
             "bearer  " + tokens["limited"].upper(), "Bearer \t"]

    def authorization(case):
        calls_so_far = authorization.count
        authorization.count += 1
        return None if calls_so_far % 2 == 0 else wrong[calls_so_far // 2 % len(wrong)]
    authorization.count = 0

    def judge(case, response):
        if response.status_code in (400, 404) and response.json()["code"] != "unauthenticated":
            return  # the target itself is malformed (bad escape, unknown route or parameter)
        assert response.status_code == 401, response.status_code
        assert response.json()["code"] == "unauthenticated"
        assert header(response, "WWW-Authenticate").startswith("Bearer")

    failures = fuzz(cell, schema, authorization, judge, excluded=OPEN_PATHS)
    require_clean(failures, at_least_calls=10 * EXAMPLES)
    assert digest(cell, admin) == before[1], "an op was applied"
    assert records(cell, admin) == before[0]
    require_alive(cell, tokens["admin"])


def test_a_token_lacking_permissions_is_refused_and_changes_no_key_lock_or_barrier(
        cell, tokens, schema):
    before = records(cell, tokens["admin"])

    def judge(case, response):
        if (case.method.upper(), case.path) not in NEEDS_PERMISSION:
            return
        name = next(iter((case.path_parameters or {}).values()), "")
        if isinstance(name, str) and name.startswith(LIMITED_PREFIX) and case.method == "GET":
            return  # its own prefix: it may read there
        assert response.status_code in (400, 403, 404), response.status_code
        if response.status_code == 403:
            assert response.json()["code"] == "permission_denied"

    failures = fuzz(cell, schema, lambda case: f"Bearer {tokens['limited']}", judge,
                    excluded=(WATCH,))
    require_clean(failures, at_least_calls=10 * EXAMPLES)
    after = records(cell, tokens["admin"])
    for part in ("kv", "locks", "barriers"):  # it may open sessions: an identity is enough
        assert after[part] == before[part], part
    require_alive(cell, tokens["admin"])


def test_the_admin_token_finds_no_server_error_and_answers_match_the_document(
        cell, tokens, schema):
    failures = fuzz(cell, schema, lambda case: f"Bearer {tokens['admin']}",
                    lambda case, response: None, excluded=(WATCH,))
    require_clean(failures, at_least_calls=10 * EXAMPLES)
    require_alive(cell, tokens["admin"])


@pytest.mark.parametrize("token", [None, "admin"])
def test_a_path_or_parameter_that_is_not_utf8_gets_an_error_not_a_dead_replica(
        cell, tokens, token):
    """Found by fuzz_request_target: the decoded path or parameter echoed in a 404 or 400 made
    the JSON serializer throw on the I/O thread, which ended the daemon: one unauthenticated
    request took a replica down."""
    bearer = tokens[token] if token else None
    for path, status in (("/v1/nope%FF", 404), ("/v1/kv/app?%C3%28=1", 400)):
        for replica in range(3):
            got, body = request(cell, replica, "GET", path, bearer)
            assert got == status, (path, replica, got, body)
            assert isinstance(body, dict) and "\ufffd" in body["message"], body
    require_alive(cell, tokens["admin"])
