"""voltlock: the Python SDK of the Voltlock lock and configuration service.

    import voltlock

    client = voltlock.Client(["http://10.77.0.10:7480", "http://10.77.0.11:7480"])
    with client.session(ttl=10) as s:
        with s.lock("db/primary", timeout=5) as seq:
            client.put("config/db", "10.0.0.5", sequencer=seq)

The asyncio twin is :mod:`voltlock.aio`, with the same names.
"""
from ._protocol import CLOSED, CONNECTED, LOST, SUSPENDED
from ._sync import Barrier, Client, Election, Lock, Session, Watch
from .errors import (BadJson, BadRequest, BarrierInUse, BarrierNotFound, BarrierNotReady,
                     CasMismatch, Compacted, Conflict, CountMismatch, Error, InvalidArgument,
                     KeyNotFound, LockBusy, ModeConflict, NotFound, NotHeld, NotLeader,
                     NotLockService, NotMember, PermissionDenied, QuotaExceeded,
                     RequestNumberReused, RequestNumberStale, SequencerInvalid, SessionExpired,
                     TooLarge, Unauthenticated, Unavailable, UnknownField, UnknownSession,
                     WaitOutcomeUnknown, WaitTimedOut, WaitWithdrawn)
from .models import EXCLUSIVE, SHARED, KeyValue, Sequencer, Value, WatchEvent

__version__ = "0.1.0"

__all__ = [
    "Client", "Session", "Lock", "Barrier", "Election", "Watch",
    "KeyValue", "Sequencer", "WatchEvent", "Value", "EXCLUSIVE", "SHARED",
    "CONNECTED", "SUSPENDED", "LOST", "CLOSED",
    "Error", "BadRequest", "BadJson", "UnknownField", "InvalidArgument", "NotFound",
    "UnknownSession", "SessionExpired", "KeyNotFound", "BarrierNotFound", "WaitTimedOut",
    "Conflict", "CasMismatch", "SequencerInvalid", "LockBusy", "BarrierNotReady",
    "ModeConflict", "NotHeld", "NotMember", "CountMismatch", "BarrierInUse", "WaitWithdrawn",
    "RequestNumberReused", "RequestNumberStale", "Compacted", "TooLarge", "NotLockService",
    "QuotaExceeded", "Unauthenticated", "PermissionDenied", "Unavailable", "NotLeader",
    "WaitOutcomeUnknown",
]
