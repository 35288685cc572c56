"""Unit tests of the sans-I/O core (voltlock._protocol): plans are driven by a scripted cell and
a fake clock, so every retry, failover and parsing rule is checked without a socket."""
from __future__ import annotations

import json
import math
import random
import ssl
from typing import Any, Callable, List, Optional

import pytest

import voltlock
from voltlock import _protocol as p
from voltlock import errors
from voltlock._tls import client_context

EPS = ["http://10.0.0.1:7480", "http://10.0.0.2:7480", "http://10.0.0.3:7480"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reply(status: int, body: Any, **headers: str) -> p.Reply:
    return p.Reply(status, {k.replace("_", "-").lower(): v for k, v in headers.items()},
                   json.dumps(body).encode())


def error(status: int, code: str, **details: Any) -> p.Reply:
    return reply(status, {"code": code, "message": f"{code} happened", "details": details})


def drive(plan: p.Plan[Any], respond: Callable[[p.Attempt], p.Outcome], clock: FakeClock,
          attempts: Optional[List[p.Attempt]] = None, per_attempt: float = 0.01) -> Any:
    """Runs a plan: every Attempt is answered by `respond` and costs `per_attempt` seconds;
    Sleeps move the clock."""
    try:
        step = next(plan)
        while True:
            if isinstance(step, p.Sleep):
                assert step.seconds >= 0
                clock.now += step.seconds
                step = plan.send(None)
            else:
                if attempts is not None:
                    attempts.append(step)
                clock.now += per_attempt
                step = plan.send(respond(step))
    except StopIteration as done:
        return done.value


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


CLUSTER = {"members": [{"replica": i, "ip": f"10.0.0.{i + 1}", "http_port": 7480, "role": "x"}
                       for i in range(3)]}


@pytest.fixture
def proto(clock: FakeClock) -> p.Protocol:
    """A client of EPS that has read the member list already (the cell's are EPS)."""
    made = p.Protocol(EPS, timeout=5.0, clock=clock, rng=random.Random(7))
    assert made.router.take_member_question()
    made.router.learn_members(CLUSTER)
    return made


SEQUENCER_JSON = {"lock": "x", "mode": "exclusive", "generation": 3, "session": 1}


def headers_of(attempt: p.Attempt) -> dict:
    return dict(attempt.headers)


def test_a_write_carries_an_identity_and_retries_it_unchanged_at_the_next_replica(proto, clock):
    attempts: List[p.Attempt] = []
    outcomes = iter([p.Failure("connection refused"), error(503, "unavailable"),
                     reply(200, {"revision": 9, "prev_mod_revision": 0, "create_revision": 9,
                                 "version": 1})])
    rev = drive(proto.put("k", "v", prev_revision=None, sequencer=None, session=None,
                          timeout=None), lambda a: next(outcomes), clock, attempts)
    assert rev == 9
    assert [a.endpoint.url for a in attempts] == EPS
    pairs = {(headers_of(a)["X-Voltlock-Client-Id"], headers_of(a)["X-Voltlock-Request-Number"])
             for a in attempts}
    assert len(pairs) == 1
    assert json.loads(attempts[0].body) == {"value": "v"}
    assert attempts[0].method == "PUT" and attempts[0].target == "/v1/kv/k"
    # A replica silent for attempt_timeout (3 s) is left for the next; connecting gets 1 s.
    assert attempts[0].read_timeout == 3.0 and attempts[0].connect_timeout == 1.0


def test_the_next_write_takes_the_next_number_and_reads_carry_no_identity(proto, clock):
    ok = lambda a: reply(200, {"revision": 1, "deleted": 0, "key": "k", "value": "v",
                               "create_revision": 1, "mod_revision": 1, "version": 1})
    attempts: List[p.Attempt] = []
    drive(proto.delete("k", prefix=False, prev_revision=None, sequencer=None, timeout=None),
          ok, clock, attempts)
    drive(proto.delete("k", prefix=False, prev_revision=None, sequencer=None, timeout=None),
          ok, clock, attempts)
    drive(proto.get("k", None), ok, clock, attempts)
    first, second, read = (headers_of(a) for a in attempts)
    assert first["X-Voltlock-Client-Id"] == second["X-Voltlock-Client-Id"]
    assert int(second["X-Voltlock-Request-Number"]) == int(first["X-Voltlock-Request-Number"]) + 1
    assert "X-Voltlock-Client-Id" not in read


def test_concurrent_calls_borrow_identities_of_their_own():
    pool = p.IdentityPool(random.Random(1))
    a, b = pool.take(), pool.take()
    assert a[0] != b[0]
    pool.give_back(a)
    again = pool.take()
    assert again == (a[0], a[1] + 1)


def test_every_replica_failing_backs_off_then_gives_up_with_unavailable(proto, clock):
    attempts: List[p.Attempt] = []
    start = clock.now
    with pytest.raises(voltlock.Unavailable) as raised:
        drive(proto.put("k", "v", prev_revision=None, sequencer=None, session=None, timeout=2),
              lambda a: p.Failure("connection refused"), clock, attempts)
    assert "may still apply" in raised.value.message
    assert 2.0 <= clock.now - start < 2.2
    assert len(attempts) > len(EPS)  # it went round more than once, with pauses in between
    assert all(a.read_timeout <= 2.0 for a in attempts)


def test_errors_map_to_their_class_with_code_message_and_details(proto, clock):
    for status, code, cls in [(409, "cas_mismatch", voltlock.CasMismatch),
                              (409, "sequencer_invalid", voltlock.SequencerInvalid),
                              (409, "lock_busy", voltlock.LockBusy),
                              (409, "barrier_not_ready", voltlock.BarrierNotReady),
                              (409, "mode_conflict", voltlock.ModeConflict),
                              (409, "not_held", voltlock.NotHeld),
                              (409, "not_member", voltlock.NotMember),
                              (409, "count_mismatch", voltlock.CountMismatch),
                              (409, "barrier_in_use", voltlock.BarrierInUse),
                              (409, "wait_withdrawn", voltlock.WaitWithdrawn),
                              (409, "request_number_reused", voltlock.RequestNumberReused),
                              (409, "request_number_stale", voltlock.RequestNumberStale),
                              (404, "unknown_session", voltlock.UnknownSession),
                              (404, "barrier_not_found", voltlock.BarrierNotFound),
                              (404, "not_found", voltlock.NotFound),
                              (408, "wait_timed_out", voltlock.WaitTimedOut),
                              (410, "compacted", voltlock.Compacted),
                              (413, "too_large", voltlock.TooLarge),
                              (400, "bad_json", voltlock.BadJson),
                              (400, "unknown_field", voltlock.UnknownField),
                              (400, "invalid_argument", voltlock.InvalidArgument),
                              (501, "not_lock_service", voltlock.NotLockService),
                              (507, "quota_exceeded", voltlock.QuotaExceeded),
                              (418, "a_newer_code", voltlock.Error)]:
        with pytest.raises(cls) as raised:
            drive(proto.check(voltlock.Sequencer("l", "exclusive", 3, 1), None),
                  lambda a: error(status, code, generation=4), clock)
        e = raised.value
        assert isinstance(e, voltlock.Error)
        assert (e.code, e.message, e.details, e.status) == (code, f"{code} happened",
                                                            {"generation": 4}, status)


def test_a_leader_hint_is_followed_once_the_member_list_is_known(clock):
    proto = p.Protocol(EPS, clock=clock, token="t0k")
    attempts: List[p.Attempt] = []

    def cell(a: p.Attempt) -> p.Reply:
        if a.target == "/v1/cluster":
            return reply(200, CLUSTER)
        return reply(200, {"valid": True}, x_voltlock_leader="2")
    assert drive(proto.check(voltlock.Sequencer("l", "shared", 3, 1), None), cell, clock,
                 attempts) is True
    assert [a.target for a in attempts] == ["/v1/sequencers:check", "/v1/cluster"]
    assert headers_of(attempts[1])["Authorization"] == "Bearer t0k"
    drive(proto.check(voltlock.Sequencer("l", "shared", 3, 1), None), cell, clock, attempts)
    assert attempts[-1].endpoint.url == EPS[2]
    assert [a.target for a in attempts].count("/v1/cluster") == 1


def test_a_client_given_one_replica_learns_the_others_and_fails_over_to_them(clock):
    """The member list is read after the first answer, whoever gave it (a leader names no
    leader), and the replicas the client was not given join its list."""
    proto = p.Protocol(EPS[1:2], clock=clock)
    attempts: List[p.Attempt] = []
    alive = {EPS[1]}

    def cell(a: p.Attempt) -> p.Outcome:
        if a.endpoint.url not in alive:
            return p.Failure("connect: ConnectionRefusedError")
        if a.target == "/v1/cluster":
            return reply(200, CLUSTER)
        return reply(200, {"valid": True})
    check = lambda: proto.check(voltlock.Sequencer("l", "shared", 3, 1), None)
    drive(check(), cell, clock, attempts)
    assert [a.target for a in attempts] == ["/v1/sequencers:check", "/v1/cluster"]
    assert [e.url for e in proto.router.endpoints] == [EPS[1], EPS[0], EPS[2]]
    alive = {EPS[2]}  # the one replica given died; the other two are up
    attempts.clear()
    assert drive(check(), cell, clock, attempts) is True
    assert [a.endpoint.url for a in attempts] == [EPS[1], EPS[0], EPS[2]]


def test_a_lock_wait_asks_again_in_server_sized_steps(proto, clock):
    bodies: List[dict] = []
    outcomes = iter([error(408, "wait_timed_out"), error(408, "wait_timed_out"),
                     reply(200, {"granted": True, "revision": 5, "sequencer": {
                         "lock": "a/b", "mode": "shared", "generation": 3, "session": 2}})])

    def cell(a: p.Attempt) -> p.Reply:
        bodies.append(json.loads(a.body))
        assert a.read_timeout == 3.0 + 3600 + p.WAIT_OUTCOME_MARGIN  # the wait is not silence
        clock.now += 3600  # each step waits its hour
        return next(outcomes)
    seq = drive(proto.acquire("a/b", 2, True, None, None), cell, clock)
    assert seq["generation"] == 3
    assert [b["wait_ms"] for b in bodies] == [p.MAX_WAIT_MS] * 3
    assert bodies[0] == {"session": 2, "mode": "shared", "wait_ms": p.MAX_WAIT_MS}


def test_a_bounded_wait_ends_in_wait_timed_out_and_zero_tries_once(proto, clock):
    seen: List[dict] = []

    def cell(a: p.Attempt) -> p.Reply:
        seen.append(json.loads(a.body))
        clock.now += seen[-1]["wait_ms"] / 1000
        return error(408, "wait_timed_out") if seen[-1]["wait_ms"] else error(409, "lock_busy")
    with pytest.raises(voltlock.WaitTimedOut):
        drive(proto.acquire("x", 1, False, 1.5, None), cell, clock)
    assert seen[-1]["wait_ms"] in (1490, 1500) and len(seen) == 1
    with pytest.raises(voltlock.LockBusy):
        drive(proto.acquire("x", 1, False, 0, None), cell, clock)
    assert seen[-1]["wait_ms"] == 0


def test_a_wait_of_inf_waits_for_ever_as_none_does(proto, clock):
    waits: List[int] = []

    def cell(a: p.Attempt) -> p.Reply:
        waits.append(json.loads(a.body)["wait_ms"])
        clock.now += 3600
        return error(408, "wait_timed_out") if len(waits) < 3 else reply(200, {
            "granted": True, "revision": 5, "sequencer": SEQUENCER_JSON})
    assert drive(proto.acquire("x", 1, False, math.inf, None), cell, clock)["generation"] == 3
    assert waits == [p.MAX_WAIT_MS] * 3
    core = p.SessionCore(3, None, clock, lambda: None)
    assert p.LockCore(core, "x", shared=False, timeout=math.inf, on_lost=None).timeout is None
    for what, make in [("ttl", lambda: p.SessionCore(math.inf, None, clock, lambda: None)),
                       ("grace", lambda: p.SessionCore(3, math.inf, clock, lambda: None)),
                       ("timeout", lambda: p.Protocol(EPS, timeout=math.inf)),
                       ("connect_timeout", lambda: p.Protocol(EPS, connect_timeout=math.inf)),
                       ("attempt_timeout", lambda: p.Protocol(EPS, attempt_timeout=math.nan))]:
        with pytest.raises(ValueError, match=f"^{what} must be a finite number"):
            make()


@pytest.mark.parametrize("wait", [0, 2])
def test_a_wait_nothing_holds_ends_in_its_time_and_the_margin_is_only_for_a_held_one(
        proto, clock, wait):
    """With no replica reachable, a try-once (0) or a wait that never reached the cell ends
    after the wait and the call's timeout, not WAIT_OUTCOME_MARGIN later; a wait the cell
    holds may be answered up to the margin past that."""
    for call in (lambda: proto.acquire("x", 1, False, wait, 3),
                 lambda: proto.barrier_enter("b", 1, 2, wait, 3)):
        start = clock.now
        with pytest.raises(voltlock.Unavailable):
            drive(call(), lambda a: p.Failure("connect: ConnectionRefusedError"), clock)
        assert wait + 3 <= clock.now - start < wait + 3.2
    attempts: List[p.Attempt] = []
    grant = reply(200, {"granted": True, "revision": 5, "sequencer": SEQUENCER_JSON})
    drive(proto.acquire("x", 1, False, wait, 3), lambda a: grant, clock, attempts, per_attempt=0)
    if wait:  # the cell may still say how the wait ended up to the margin past the call's time
        assert attempts[0].held and attempts[0].read_timeout == wait + 3 + p.WAIT_OUTCOME_MARGIN
    else:
        assert not attempts[0].held and attempts[0].read_timeout == 3.0


def test_a_wait_whose_outcome_the_cell_did_not_see_in_time_is_asked_again(proto, clock):
    """The cell answers a held wait 503 wait_outcome_unknown up to 5 s past its end (a leader
    change): the same request again, within the margin, finds how the wait ended."""
    answers = iter([(p.WAIT_OUTCOME_MARGIN + 2,
                     reply(503, {"code": "wait_outcome_unknown", "message": "ask again",
                                 "details": {}})),
                    (0.01, reply(200, {"granted": True, "revision": 5,
                                       "sequencer": SEQUENCER_JSON}))])

    def respond(attempt: p.Attempt) -> p.Outcome:
        took, answer = next(answers)
        clock.now += took
        return answer

    assert drive(proto.acquire("x", 1, False, 2, 1), respond, clock) == SEQUENCER_JSON


def test_held_requests_share_a_replicas_health_check_and_close_what_they_left_in_time(
        monkeypatch):
    now = [100.0]
    monkeypatch.setattr(p.time, "monotonic", lambda: now[0])
    held: p.HeldRequests[str] = p.HeldRequests()
    a, b = p.Endpoint("http://a:1", "a", 1), p.Endpoint("http://b:1", "b", 1)
    assert not held.answered_lately(a)
    held.answered(a)
    now[0] += p.HELD_CHECK_INTERVAL_S / 2
    assert held.answered_lately(a) and not held.answered_lately(b)
    now[0] += p.HELD_CHECK_INTERVAL_S
    assert not held.answered_lately(a)  # asked again, not trusted for ever
    held.leave("soon", 5)
    held.leave("later", 60)
    assert held.to_close() == []
    now[0] += 5
    assert held.to_close() == ["soon"] and held.to_close() == []
    assert held.to_close(everything=True) == ["later"] and held.to_close(everything=True) == []


@pytest.mark.parametrize("make, exc", [
    (lambda pr: pr.put("", "v", prev_revision=None, sequencer=None, session=None,
                       timeout=None), ValueError),
    (lambda pr: pr.put("a\nb", "v", prev_revision=None, sequencer=None, session=None,
                       timeout=None), ValueError),
    (lambda pr: pr.put("k" * 513, "v", prev_revision=None, sequencer=None, session=None,
                       timeout=None), ValueError),
    (lambda pr: pr.put("k", 5, prev_revision=None, sequencer=None, session=None,
                       timeout=None), TypeError),
    (lambda pr: pr.put("k", "v", prev_revision=-1, sequencer=None, session=None,
                       timeout=None), ValueError),
    (lambda pr: pr.put("k", "v", prev_revision=True, sequencer=None, session=None,
                       timeout=None), TypeError),
    (lambda pr: pr.put("k", "v", prev_revision=None, sequencer="1:exclusive:1:x",
                       session=None, timeout=None), TypeError),
    (lambda pr: pr.put(b"k", "v", prev_revision=None, sequencer=None, session=None,
                       timeout=None), TypeError),
    (lambda pr: pr.create_session(0.5, 0, "", None), ValueError),
    (lambda pr: pr.create_session(10, 61, "", None), ValueError),
    (lambda pr: pr.create_session(10, 0, "n" * 129, None), ValueError),
    (lambda pr: pr.create_session("10", 0, "", None), TypeError),
    (lambda pr: pr.acquire("x", 1, False, -1, None), ValueError),
    (lambda pr: pr.barrier_enter("b", 1, 0, None, None), ValueError),
    (lambda pr: pr.barrier_enter("b", 1, 1025, None, None), ValueError),
    (lambda pr: pr.delete("k", prefix=True, prev_revision=3, sequencer=None, timeout=None),
     ValueError),
    (lambda pr: pr.get("k", -1), ValueError),
    (lambda pr: pr.get("k", 0), ValueError),  # a call's timeout: 0 would never try
    (lambda pr: pr.put("k", "a\udc80b", prev_revision=None, sequencer=None, session=None,
                       timeout=None), ValueError),  # a lone surrogate: not text
    (lambda pr: pr.put("a\udc80b", "v", prev_revision=None, sequencer=None, session=None,
                       timeout=None), ValueError),
    (lambda pr: pr.create_token("u", 0.5, None), ValueError),
    (lambda pr: pr.create_token("u", 1.5, None), ValueError),
    (lambda pr: pr.delete("k", prefix="no", prev_revision=None, sequencer=None, timeout=None),
     TypeError),
    # A falsy thing where a Sequencer goes is no sequencer, not an unfenced delete.
    *[(lambda pr, falsy=falsy: pr.delete("k", prefix=False, prev_revision=None,
                                         sequencer=falsy, timeout=None), TypeError)
      for falsy in ("", 0, False, [], {})],
    # No time is infinite or NaN, except a wait's (for ever, as None).
    (lambda pr: pr.create_session(math.inf, 0, "", None), ValueError),
    (lambda pr: pr.create_session(math.nan, 0, "", None), ValueError),
    (lambda pr: pr.create_session(10, math.inf, "", None), ValueError),
    (lambda pr: pr.get("k", math.inf), ValueError),
    (lambda pr: pr.get("k", math.nan), ValueError),
    (lambda pr: pr.acquire("x", 1, False, math.nan, None), ValueError),
    (lambda pr: pr.acquire("x", 1, False, None, math.inf), ValueError),
    (lambda pr: pr.create_token("u", math.inf, None), ValueError),
    # Nor past MAX_SECONDS (a float would overflow on the way to milliseconds).
    (lambda pr: pr.create_session(1e308, 0, "", None), ValueError),
    (lambda pr: pr.create_session(10**400, 0, "", None), ValueError),
    (lambda pr: pr.acquire("x", 1, False, 1e308, None), ValueError),
    (lambda pr: pr.get("k", 10**400), ValueError),
])
def test_bad_arguments_raise_before_anything_is_sent(proto, clock, make, exc):
    sent: List[p.Attempt] = []
    with pytest.raises(exc):
        drive(make(proto), lambda a: pytest.fail("nothing may be sent"), clock, sent)
    assert sent == []


def test_a_body_over_the_cells_request_limit_raises_too_large_before_sending(proto, clock):
    sent: List[p.Attempt] = []
    with pytest.raises(voltlock.TooLarge) as raised:
        drive(proto.put("k", "x" * p.MAX_REQUEST_BODY_BYTES, prev_revision=None,
                        sequencer=None, session=None, timeout=None),
              lambda a: pytest.fail("nothing may be sent"), clock, sent)
    assert sent == [] and raised.value.status == 413
    assert raised.value.details["limit_bytes"] == 1 << 20
    assert "may still apply" not in str(raised.value)
    # The identity the call would have used was not taken: the next write gets the first number.
    drive(proto.put("k", "v", prev_revision=None, sequencer=None, session=None, timeout=None),
          lambda a: reply(200, {"revision": 1}), clock, sent)
    assert headers_of(sent[0])["X-Voltlock-Request-Number"] == "1"


def test_only_a_wait_asks_for_its_connection_to_be_probed(proto, clock):
    attempts: List[p.Attempt] = []
    grant = reply(200, {"granted": True, "revision": 5, "sequencer": {
        "lock": "a", "mode": "exclusive", "generation": 3, "session": 2}})
    drive(proto.acquire("a", 2, False, 40, None), lambda a: grant, clock, attempts)
    drive(proto.acquire("a", 2, False, 0, None), lambda a: grant, clock, attempts)  # try once
    drive(proto.release("a", 2, None), lambda a: reply(200, {}), clock, attempts)
    assert [a.held for a in attempts] == [True, False, False]


def test_a_tls_failure_that_no_retry_cures_is_raised_at_once(proto, clock):
    attempts: List[p.Attempt] = []
    unverified = ssl.SSLCertVerificationError(1, "certificate verify failed")
    with pytest.raises(ssl.SSLCertVerificationError, match="cacert"):
        drive(proto.get("k", None),
              lambda a: p.connect_failure(a.endpoint, unverified), clock, attempts)
    assert len(attempts) == 1
    # At an address learned from the cell (a certificate may name only the names given), it is
    # a replica failing like any other.
    learned = p.Protocol(EPS[:1], timeout=5.0, clock=clock)
    assert learned.router.take_member_question()
    learned.router.learn_members(CLUSTER)
    learned.router.failed(learned.router.current())
    attempts.clear()
    outcome = lambda a: (p.connect_failure(a.endpoint, unverified)
                         if a.endpoint.url != EPS[0] else reply(200, {"value": "v", "key": "k",
                         "create_revision": 1, "mod_revision": 1, "version": 1}))
    assert drive(learned.get("k", None), outcome, clock, attempts)[0].value == "v"
    assert [a.endpoint.url for a in attempts] == [EPS[1], EPS[2], EPS[0]]
    refused = p.connect_failure(proto.router.current(), ConnectionRefusedError(111, "refused"))
    assert refused.permanent is None


def test_bad_endpoints_and_settings_are_refused():
    for bad in ([], ["ftp://x:1"], ["http://x:1/path"], ["http://x:notaport"], [5]):
        with pytest.raises((ValueError, TypeError)):
            p.Protocol(bad)
    for setting in ("timeout", "connect_timeout", "attempt_timeout"):
        with pytest.raises(ValueError, match=setting):
            p.Protocol(EPS, **{setting: 0})
    assert [e.url for e in p.Router("10.0.0.1:1, http://10.0.0.2:2").endpoints] == [
        "http://10.0.0.1:1", "http://10.0.0.2:2"]
    secure = p.Router("https://10.0.0.1:1, https://10.0.0.2").endpoints
    assert [(e.url, e.tls) for e in secure] == [("https://10.0.0.1:1", True),
                                                ("https://10.0.0.2:443", True)]


def test_tls_options_are_checked():
    plain = p.Router("http://10.0.0.1:1").endpoints
    secure = p.Router("https://10.0.0.1:1").endpoints
    assert client_context(plain, ssl_context=None, cacert=None, cert=None, key=None) is None
    with pytest.raises(ValueError, match="no endpoint is https"):
        client_context(plain, ssl_context=None, cacert="ca.pem", cert=None, key=None)
    with pytest.raises(ValueError, match="key without cert"):
        client_context(secure, ssl_context=None, cacert=None, cert=None, key="k.pem")
    given = ssl.create_default_context()
    assert client_context(secure, ssl_context=given, cacert=None, cert=None, key=None) is given
    with pytest.raises(ValueError, match="not both"):
        client_context(secure, ssl_context=given, cacert="ca.pem", cert=None, key=None)
    made = client_context(secure, ssl_context=None, cacert=None, cert=None, key=None)
    assert made is not None and made.minimum_version == ssl.TLSVersion.TLSv1_2
    assert made.verify_mode == ssl.CERT_REQUIRED and made.check_hostname


def test_names_are_percent_encoded_but_slash_and_colon_stay(proto, clock):
    attempts: List[p.Attempt] = []
    drive(proto.get("a b/c:d%é", None), lambda a: error(404, "key_not_found", revision=4),
          clock, attempts)
    assert attempts[0].target == "/v1/kv/a%20b/c:d%25%C3%A9"


def test_a_missing_key_is_none_with_the_revision(proto, clock):
    assert drive(proto.get("k", None), lambda a: error(404, "key_not_found", revision=4),
                 clock) == (None, 4)


def test_binary_values_go_as_base64_and_come_back_as_bytes(proto, clock):
    attempts: List[p.Attempt] = []
    drive(proto.put("k", b"\xff\x00", prev_revision=0, sequencer=None, session=3, timeout=None),
          lambda a: reply(200, {"revision": 2}), clock, attempts)
    assert json.loads(attempts[0].body) == {"value": "/wA=", "encoding": "base64",
                                            "prev_revision": 0, "session": 3}
    kv, _ = drive(proto.get("k", None), lambda a: reply(200, {
        "key": "k", "value": "/wA=", "encoding": "base64", "create_revision": 2,
        "mod_revision": 2, "version": 1, "revision": 2}), clock)
    assert kv.value == b"\xff\x00"


def test_the_prefix_pager_follows_next_after(proto, clock):
    pages = {None: {"kvs": [kv("p/a"), kv("p/b")], "more": True, "next_after": "p/b"},
             "p/b": {"kvs": [kv("p/c")], "more": False}}
    targets: List[str] = []

    def cell(a: p.Attempt) -> p.Reply:
        targets.append(a.target)
        after = dict(__import__("urllib.parse").parse.parse_qsl(a.target.split("?")[1]))
        return reply(200, {**pages[after.get("after")], "revision": 7})
    pager = p.PrefixPager(proto, "p/", 2, None)
    keys = []
    while not pager.done:
        keys += [k.key for k in drive(pager.next_page(), cell, clock)]
    assert keys == ["p/a", "p/b", "p/c"]
    assert targets == ["/v1/kv/p/?prefix=true&limit=2",
                       "/v1/kv/p/?prefix=true&after=p%2Fb&limit=2"]


def kv(key: str) -> dict:
    return {"key": key, "value": "v", "create_revision": 1, "mod_revision": 1, "version": 1}


def test_the_lease_runs_from_the_keepalive_sent_then_suspends_then_is_lost():
    lease = p.Lease(ttl=9, grace=9, now=100)
    assert lease.holds(108.9) and lease.next_keepalive(100) == 3
    lease.renewed(sent_at=103)
    lease.failed()  # the next one failed: try again soon, not a third of a TTL later
    assert lease.holds(111.9) and lease.next_keepalive(107) == 0.2
    assert not lease.holds(112)
    assert lease.state == p.SUSPENDED and lease.next_keepalive(112) <= 0.2
    lease.renewed(sent_at=112.5)  # a new leader's grace period saved it
    assert lease.holds(121)
    assert lease.poll(121.5) == p.SUSPENDED and lease.poll(130.5) == p.LOST
    lease.renewed(sent_at=131)
    assert lease.state == p.LOST and not lease.holds(131)


def test_sequencers_round_trip_through_text():
    seq = voltlock.Sequencer("db/primary:x", "shared", 17, 4)
    assert str(seq) == "4:shared:17:db/primary:x"
    assert voltlock.Sequencer.parse(str(seq)) == seq
    for bad in ("", "4:shared:17", "4:both:17:x", "x:shared:1:l", "0:shared:1:l", "1:shared:1:"):
        with pytest.raises(ValueError):
            voltlock.Sequencer.parse(bad)
    with pytest.raises(RuntimeError):
        seq.valid  # a parsed sequencer: only the cell knows


def sse(*blocks: str) -> bytes:
    return "".join(b + "\n\n" for b in blocks).encode()


def put_event(rev: int, key: str, value: str) -> str:
    return "event: put\ndata: " + json.dumps({"revision": rev, "type": "put", "key": key,
                                               "value": value, "prev_revision": 0,
                                               "session": 0, "cause": "request"})


def test_a_watch_hands_out_whole_revisions_and_resumes_after_the_last(proto):
    watch = p.WatchStream(proto, "cfg/", prefix=True, start_revision=None, spaces=None)
    first = watch.attempt()
    assert first.stream and first.target == "/v1/watch/cfg/?prefix=true"
    stream = sse("retry: 1000\n: watching from revision 12", put_event(12, "cfg/a", "1"),
                 put_event(13, "cfg/b", "2"), put_event(13, "cfg/c", "3") + "\nid: 13",
                 put_event(14, "cfg/d", "4"))
    # Fed a byte at a time, it yields revision 12 only at revision 13's id: 12 carried none.
    got = [e for i in range(len(stream)) for e in watch.feed(stream[i:i + 1])]
    assert [(e.revision, e.key) for e in got] == [(12, "cfg/a"), (13, "cfg/b"), (13, "cfg/c")]
    assert watch.next_revision == 14
    assert watch.dropped("reset") == 0.0  # the next replica at once
    again = watch.attempt()
    assert again.endpoint.url == EPS[1]
    assert again.target == "/v1/watch/cfg/?prefix=true&start_revision=14"
    # The half-seen revision 14 comes again whole; nothing before it does.
    got = watch.feed(sse(put_event(13, "cfg/c", "3") + "\nid: 13", put_event(14, "cfg/d", "4"),
                         put_event(14, "cfg/e", "5") + "\nid: 14"))
    assert [(e.revision, e.key) for e in got] == [(14, "cfg/d"), (14, "cfg/e")]


def test_a_slow_reader_cut_by_the_cell_is_reopened_after_its_last_revision(proto):
    watch = p.WatchStream(proto, "cfg/", prefix=True, start_revision=12, spaces=None)
    watch.attempt()
    body = json.dumps({"code": "slow_reader", "message": "fell behind",
                       "details": {"resume_revision": 13}})
    got = watch.feed(sse(put_event(12, "cfg/a", "1") + "\nid: 12", put_event(13, "cfg/b", "2"),
                         f"event: error\ndata: {body}"))
    assert [e.revision for e in got] == [12]
    assert watch.cut and watch.next_revision == 13
    again = watch.attempt()
    assert not watch.cut
    assert again.target == "/v1/watch/cfg/?prefix=true&start_revision=13"


def test_a_watch_without_a_start_resumes_where_the_stream_began(proto):
    watch = p.WatchStream(proto, "k", prefix=False, start_revision=None, spaces=["kv", "lock"])
    assert watch.attempt().target == "/v1/watch/k?spaces=kv%2Clock"
    assert watch.feed(b"retry: 1000\n: watching from revision 40\n\n") == []
    assert watch.next_revision == 40


def test_compaction_raises_compacted_with_the_oldest_revision(proto):
    watch = p.WatchStream(proto, "k", prefix=False, start_revision=3, spaces=None)
    watch.attempt()
    with pytest.raises(voltlock.Compacted) as before:
        watch.refused(error(410, "compacted", oldest_revision=900, start_revision=3))
    assert before.value.oldest_revision == 900
    body = json.dumps({"code": "compacted", "message": "fell behind",
                       "details": {"oldest_revision": 950}})
    with pytest.raises(voltlock.Compacted) as during:
        watch.feed(sse(f"event: error\ndata: {body}"))
    assert during.value.oldest_revision == 950
    assert watch.refused(error(503, "unavailable")) >= 0  # a 503 is tried elsewhere
    with pytest.raises(ValueError):
        p.WatchStream(proto, "k", prefix=False, start_revision=None, spaces=["nope"])


def test_error_bodies_that_are_not_voltlock_errors_still_raise_error():
    e = errors.error_from_body(502, "<html>bad gateway</html>")
    assert type(e) is voltlock.Error and e.code == "http_502" and e.status == 502


def test_a_lost_session_is_announced_once_then_its_locks_then_its_callbacks(clock):
    told: List[str] = []
    core = p.SessionCore(3, 1, clock, lambda: told.append("announce"))
    with pytest.raises(RuntimeError):
        core.check_usable()  # not open yet
    core.opened(7, clock.now)
    core.on_lost(lambda: told.append("session callback"))
    lock = p.LockCore(core, "l", shared=False, timeout=None,
                      on_lost=lambda seq: told.append(f"lock {seq.generation}"))
    seq = lock.granted({"lock": "l", "mode": "exclusive", "generation": 5, "session": 7})
    assert seq.valid and lock.lost_while_held() is None
    clock.now += 3  # the lease ran out unrenewed: suspended, not lost
    assert not seq.valid and core.state() == p.SUSPENDED
    assert "renew" in str(lock.lost_while_held())
    core.check_usable()  # still usable: a keepalive may yet get through
    clock.now += 1  # the grace period too
    core.check_lost()
    core.lose("again")
    assert told == ["announce", "lock 5", "session callback"]
    assert lock.sequencer is None and not seq.valid and not lock.releasing()
    with pytest.raises(voltlock.SessionExpired):
        core.check_usable()
    late: List[str] = []
    core.on_lost(lambda: late.append("at once"))
    assert late == ["at once"]


def test_a_grant_that_comes_while_the_lease_is_suspended_waits_for_a_keepalive(clock):
    """A replica that was behind may answer a wait with a grant the log has since ended (the
    session expired): the grant counts only once the session is known to live."""
    grant = {"lock": "l", "mode": "exclusive", "generation": 7, "session": 7}

    def answered() -> p.Plan[Any]:
        return grant
        yield  # a plan that needs nothing done

    core = p.SessionCore(4, 2, clock, lambda: None)
    core.opened(7, clock.now)
    at_once = p.LockCore(core, "k", shared=False, timeout=None, on_lost=None)
    with pytest.raises(StopIteration):  # within the lease: at once
        next(at_once.acquire(answered()))
    lock = p.LockCore(core, "l", shared=False, timeout=None, on_lost=None)
    clock.now += 5  # the lease ran out while the wait was on
    plan = lock.acquire(answered())
    assert isinstance(next(plan), p.Sleep) and lock.sequencer is None
    core.renewed(clock.now)  # a keepalive got through: the session, and so the grant, stands
    with pytest.raises(StopIteration) as done:
        plan.send(None)
    assert done.value.value.generation == 7 and done.value.value.valid

    lost = p.SessionCore(4, 2, clock, lambda: None)
    lost.opened(7, clock.now)
    lock = p.LockCore(lost, "l", shared=False, timeout=None, on_lost=None)
    clock.now += 5
    plan = lock.acquire(answered())
    assert isinstance(next(plan), p.Sleep)
    clock.now += 2  # no keepalive got through for the grace period either: lost
    with pytest.raises(voltlock.SessionExpired):
        plan.send(None)
    assert lock.sequencer is None


def test_lock_objects_of_one_session_for_one_name_see_one_grant(clock):
    """The cell gives a session one grant per lock: acquiring it again returns that grant, and
    one release ends it, whichever lock object asked."""
    told: List[str] = []
    core = p.SessionCore(10, None, clock, lambda: None)
    core.opened(3, clock.now)
    grant = {"lock": "n", "mode": "exclusive", "generation": 8, "session": 3}
    outer = p.LockCore(core, "n", shared=False, timeout=None, on_lost=lambda s: told.append("o"))
    inner = p.LockCore(core, "n", shared=False, timeout=None, on_lost=lambda s: told.append("i"))
    other = p.LockCore(core, "m", shared=False, timeout=None, on_lost=None)
    outer_seq, inner_seq = outer.granted(grant), inner.granted(grant)
    other.granted({**grant, "lock": "m", "generation": 9})
    assert inner.releasing()  # the cell is asked
    assert not outer_seq.valid and not inner_seq.valid and outer.sequencer is None
    assert not outer.releasing()  # nothing left to release
    assert outer.lost_while_held() is None  # released by its own session: nothing was lost
    assert other.sequencer is not None and other.sequencer.valid
    outer.granted({**grant, "generation": 10})
    inner.granted({**grant, "generation": 10})
    core.lose("expired")
    assert told == ["o", "i"]


def test_a_closed_session_tells_the_locks_it_held_but_not_its_callbacks(clock):
    told: List[str] = []
    core = p.SessionCore(10, None, clock, lambda: told.append("announce"))
    core.opened(3, clock.now)
    core.on_lost(lambda: told.append("session callback"))
    held = p.LockCore(core, "a", shared=True, timeout=None, on_lost=lambda s: told.append("a"))
    released = p.LockCore(core, "b", shared=True, timeout=None,
                          on_lost=lambda s: told.append("b"))
    held.granted({"lock": "a", "mode": "shared", "generation": 1, "session": 3})
    released.granted({"lock": "b", "mode": "shared", "generation": 2, "session": 3})
    assert released.releasing()  # the cell is asked to release it
    core.close()
    # A clean close is not a loss: nothing announced (no `lost` event), no session callback.
    assert told == ["a"]
    assert core.state() == p.CLOSED and core.ended() and not core.lost()
    with pytest.raises(voltlock.SessionExpired, match="closed"):
        core.check_usable()
    core.on_lost(lambda: told.append("late callback"))
    core.lose("a keepalive that was on its way")
    assert told == ["a"] and core.state() == p.CLOSED
    assert core.expired(voltlock.UnknownSession("gone")).code == "unknown_session"
