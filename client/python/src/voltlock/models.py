"""The values the SDK hands out: keys, sequencers, watch events, session information."""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Union

#: A value is text (UTF-8) or bytes; the cell keeps bytes and says which it is.
Value = Union[str, bytes]

EXCLUSIVE = "exclusive"
SHARED = "shared"


def decode_value(obj: Mapping[str, Any]) -> Optional[Value]:
    """The ``value`` of a key or event: bytes when the cell sent it as base64, else text."""
    value = obj.get("value")
    if value is None:
        return None
    if obj.get("encoding") == "base64":
        return base64.b64decode(value)
    return str(value)


@dataclass(frozen=True)
class KeyValue:
    """One key as the cell holds it. ``session`` is the owning session of an ephemeral key."""

    key: str
    value: Value
    create_revision: int
    mod_revision: int
    version: int
    session: int = 0

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "KeyValue":
        value = decode_value(obj)
        return cls(key=str(obj["key"]), value=value if value is not None else "",
                   create_revision=int(obj["create_revision"]),
                   mod_revision=int(obj["mod_revision"]), version=int(obj["version"]),
                   session=int(obj.get("session", 0)))


@dataclass(frozen=True)
class Sequencer:
    """A lock grant and its fencing token. Hand it to a server that checks it
    (``client.check(seq)``, or a fenced ``put(..., sequencer=seq)``); ``str(seq)`` and
    :meth:`parse` round-trip it through text for another process.

    A sequencer handed out by a lock of this client also knows locally whether it still stands
    (:attr:`valid`): false once the lock is released or its session is lost, or while the
    session's lease could not be renewed in time."""

    lock: str
    mode: str
    generation: int
    session: int
    _valid_check: Optional[Callable[[], bool]] = field(default=None, compare=False, repr=False,
                                                        hash=False)

    @property
    def valid(self) -> bool:
        """Whether this client still knows the grant to stand. Only for sequencers that a lock of
        this client returned; a parsed one has no local knowledge: ask ``client.check(seq)``."""
        if self._valid_check is None:
            raise RuntimeError("this sequencer was not granted to this client; "
                               "ask the cell with client.check(seq)")
        return self._valid_check()

    def to_json(self) -> Dict[str, Any]:
        return {"lock": self.lock, "mode": self.mode, "generation": self.generation,
                "session": self.session}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any],
                  valid_check: Optional[Callable[[], bool]] = None) -> "Sequencer":
        return cls(lock=str(obj["lock"]), mode=str(obj["mode"]),
                   generation=int(obj["generation"]), session=int(obj["session"]),
                   _valid_check=valid_check)

    def __str__(self) -> str:
        # The lock name goes last: it may contain ':' and '/'.
        return f"{self.session}:{self.mode}:{self.generation}:{self.lock}"

    @classmethod
    def parse(cls, text: str) -> "Sequencer":
        """The sequencer ``str(seq)`` wrote. Raises ValueError for anything else."""
        if not isinstance(text, str):
            raise TypeError(f"Sequencer.parse takes a str, not {type(text).__name__}")
        parts = text.split(":", 3)
        if len(parts) != 4 or parts[1] not in (EXCLUSIVE, SHARED) or not parts[3]:
            raise ValueError(f"not a sequencer: {text!r} (expected session:mode:generation:lock)")
        try:
            session, generation = int(parts[0]), int(parts[2])
        except ValueError:
            raise ValueError(f"not a sequencer: {text!r} (session and generation are numbers)")
        if session < 1 or generation < 1:
            raise ValueError(f"not a sequencer: {text!r} (session and generation are >= 1)")
        return cls(lock=parts[3], mode=parts[1], generation=generation, session=session)


@dataclass(frozen=True)
class WatchEvent:
    """One change. ``type`` is ``put`` or ``delete`` for keys (and ``session_expire``,
    ``lock_grant``, ... with the other ``spaces``); ``value`` is None for a delete.
    ``raw`` is the event as the cell sent it (``mode``, ``generation``, ...)."""

    type: str
    key: str
    value: Optional[Value]
    revision: int
    prev_revision: int
    session: int
    cause: str
    raw: Mapping[str, Any] = field(compare=False, repr=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "WatchEvent":
        return cls(type=str(obj.get("type", "")), key=str(obj.get("key", "")),
                   value=decode_value(obj), revision=int(obj["revision"]),
                   prev_revision=int(obj.get("prev_revision", 0)),
                   session=int(obj.get("session", 0)), cause=str(obj.get("cause", "")), raw=obj)
