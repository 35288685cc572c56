"""Exceptions: one class per error code of the Voltlock API, all under :class:`Error`.

Every error the cell answers is ``{"code", "message", "details"}``; the exception raised for it
carries the three (and the HTTP status). Bad arguments never reach the cell: they raise
``ValueError`` or ``TypeError`` before anything is sent.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type


class Error(Exception):
    """Any error answered by the cell (or the SDK's own `Unavailable` when none answered)."""

    code: str = "error"

    def __init__(self, message: str, *, code: Optional[str] = None,
                 details: Optional[Mapping[str, Any]] = None, status: int = 0) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details: Dict[str, Any] = dict(details or {})
        self.status = status

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


# --- 400 ---
class BadRequest(Error):
    """The cell refused the request as malformed (400)."""

    code = "bad_request"


class BadJson(BadRequest):
    code = "bad_json"


class UnknownField(BadRequest):
    code = "unknown_field"


class InvalidArgument(BadRequest):
    code = "invalid_argument"


# --- 404 ---
class NotFound(Error):
    """No such endpoint (404 `not_found`); the base of the other 404s."""

    code = "not_found"


class UnknownSession(NotFound):
    """The session does not exist (any more)."""

    code = "unknown_session"


class SessionExpired(UnknownSession):
    """The session this object stands for is lost: it expired, was closed, or the client could
    not renew its lease in time. Its locks are gone; nothing more can be done with it."""


class KeyNotFound(NotFound):
    code = "key_not_found"


class BarrierNotFound(NotFound):
    code = "barrier_not_found"


# --- 408 ---
class WaitTimedOut(Error):
    """A lock or barrier wait reached its timeout; the wait is gone."""

    code = "wait_timed_out"


# --- 409 ---
class Conflict(Error):
    """The request conflicts with the cell's state (409); nothing changed."""

    code = "conflict"


class CasMismatch(Conflict):
    """Compare-and-set failed: ``details["mod_revision"]`` is the key's actual one (0: absent)."""

    code = "cas_mismatch"

    @property
    def mod_revision(self) -> int:
        return int(self.details.get("mod_revision", 0))


class SequencerInvalid(Conflict):
    """A fenced write with a sequencer that no longer stands; ``details["generation"]`` is the
    lock's latest generation."""

    code = "sequencer_invalid"


class LockBusy(Conflict):
    """A try-once acquire (``timeout=0``) found the lock taken or under lock-delay."""

    code = "lock_busy"


class BarrierNotReady(Conflict):
    code = "barrier_not_ready"


class ModeConflict(Conflict):
    code = "mode_conflict"


class NotHeld(Conflict):
    code = "not_held"


class NotMember(Conflict):
    code = "not_member"


class CountMismatch(Conflict):
    code = "count_mismatch"


class BarrierInUse(Conflict):
    code = "barrier_in_use"


class WaitWithdrawn(Conflict):
    code = "wait_withdrawn"


class RequestNumberReused(Conflict):
    code = "request_number_reused"


class RequestNumberStale(Conflict):
    code = "request_number_stale"


# --- 410, 413, 501 ---
class Compacted(Error):
    """A watch asked for history the cell no longer keeps. Read the current state and watch from
    its revision + 1; :attr:`oldest_revision` is the oldest start that works."""

    code = "compacted"

    @property
    def oldest_revision(self) -> int:
        return int(self.details.get("oldest_revision", 0))


class TooLarge(Error):
    """The value or request does not fit in one replication datagram (the message names the
    limit)."""

    code = "too_large"


class NotLockService(Error):
    code = "not_lock_service"


class QuotaExceeded(Error):
    """The cell's records reached its ``quota_bytes``: puts, new sessions, acquires and barrier
    entries are refused until keys are deleted or sessions closed. ``details`` has
    ``stored_bytes`` and ``quota_bytes``."""

    code = "quota_exceeded"


# --- 401, 403: auth (docs/security-auth.md) ---
class Unauthenticated(Error):
    """No credentials, or a token the cell does not know (revoked or mistyped): pass
    ``token=`` (or set ``VOLTLOCK_TOKEN``)."""

    code = "unauthenticated"


class PermissionDenied(Error):
    """The identity's roles lack the permission on that name; ``details`` says which
    (``permission``, ``resource``, ``prefix``), or the session belongs to another identity."""

    code = "permission_denied"


# --- 503 (and the SDK's own: no replica answered in time) ---
class Unavailable(Error):
    """No replica could answer in time (no leader with a quorum, or none reachable). For a write
    the outcome is unknown: retrying the same call is safe only through the SDK, which does it
    with the same idempotency pair."""

    code = "unavailable"


class NotLeader(Unavailable):
    code = "not_leader"


class WaitOutcomeUnknown(Unavailable):
    code = "wait_outcome_unknown"


__all__ = ["Error", "BadRequest", "BadJson", "UnknownField", "InvalidArgument", "NotFound",
           "UnknownSession", "SessionExpired", "KeyNotFound", "BarrierNotFound", "WaitTimedOut",
           "Conflict", "CasMismatch", "SequencerInvalid", "LockBusy", "BarrierNotReady",
           "ModeConflict", "NotHeld", "NotMember", "CountMismatch", "BarrierInUse",
           "WaitWithdrawn", "RequestNumberReused", "RequestNumberStale", "Compacted", "TooLarge",
           "NotLockService", "QuotaExceeded", "Unauthenticated", "PermissionDenied",
           "Unavailable", "NotLeader", "WaitOutcomeUnknown"]

ERROR_CLASSES: Dict[str, Type[Error]] = {
    cls.code: cls
    for cls in (BadJson, UnknownField, InvalidArgument, NotFound, UnknownSession, KeyNotFound,
                BarrierNotFound, WaitTimedOut, CasMismatch, SequencerInvalid, LockBusy,
                BarrierNotReady, ModeConflict, NotHeld, NotMember, CountMismatch, BarrierInUse,
                WaitWithdrawn, RequestNumberReused, RequestNumberStale, Compacted, TooLarge,
                Unauthenticated, PermissionDenied,
                NotLockService, QuotaExceeded, Unavailable, NotLeader, WaitOutcomeUnknown)
}
ERROR_CLASSES["malformed"] = BadRequest


def error_from_body(status: int, body: Any) -> Error:
    """The exception for an error answer: its class chosen by ``code``; an unknown code (a newer
    server) still gives an :class:`Error` carrying that code."""
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        code = body["code"]
        message = str(body.get("message", ""))
        details = body.get("details") if isinstance(body.get("details"), dict) else {}
        return ERROR_CLASSES.get(code, Error)(message, code=code, details=details, status=status)
    return Error(f"HTTP {status} without a Voltlock error body: {str(body)[:200]!r}",
                 code=f"http_{status}", status=status)
