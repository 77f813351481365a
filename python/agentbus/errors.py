"""Typed exceptions mirroring the wire's error codes (docs/PROTOCOL.md section 8).

Every error the broker sends is an error map: code, message, retryable, optional field and
details.  `from_wire()` turns one into the exception class of its code, keeping the map's
facts and the correlation id of the request it answered.  `retryable` is taken from the
map (it is authoritative, 8.1), not from the class.
"""

from __future__ import annotations

import builtins
from typing import Any


class AgentbusError(Exception):
    """Base of every agentbus error.

    Attributes: ``code`` (the wire code name), ``message``, ``retryable``, ``field`` (the
    path of the offending value, "" when the error is about the whole message),
    ``details`` (dict of up to 3 int/str facts), ``cid`` (the request's correlation id,
    0 when none) and, for an event's result, ``seq`` (the event's seq, else None).
    """

    code = "internal"
    default_retryable = False

    def __init__(self, message: str = "", *, retryable: bool | None = None, field: str = "",
                 details: dict[str, Any] | None = None, cid: int = 0, seq: int | None = None):
        super().__init__(message)
        self.message = message
        self.retryable = self.default_retryable if retryable is None else bool(retryable)
        self.field = field or ""
        self.details = dict(details or {})
        self.cid = cid
        self.seq = seq

    def __str__(self) -> str:
        s = f"{self.code}: {self.message}"
        if self.field:
            s += f" (at {self.field})"
        if self.details:
            s += " " + ", ".join(f"{k}={v}" for k, v in self.details.items())
        return s

    def to_wire(self) -> dict[str, Any]:
        """The error map of this error (used by a worker to answer an action call), within
        the map's byte bounds (PROTOCOL.md 8.1): message 159 bytes, field 63 (cut back to
        its last whole segment), 3 details, keys 14 bytes, string values 23 bytes; a cut
        ends on a whole UTF-8 character."""
        m: dict[str, Any] = {"code": self.code, "message": _cut(self.message, 159),
                             "retryable": self.retryable}
        field = _cut_path(self.field, 63)
        if field:
            m["field"] = field
        details = {}
        for k, v in list(self.details.items())[:3]:
            key = _cut(str(k), 14)
            if key:
                details[key] = _cut(v, 23) if isinstance(v, str) else v
        if details:
            m["details"] = details
        return m


def _cut(s: str, limit: int) -> str:
    """@p s without NULs, cut to at most @p limit bytes of UTF-8 on a character boundary."""
    b = s.replace("\0", "").encode("utf-8", "replace")
    return b[:limit].decode("utf-8", "ignore")


def _cut_path(path: str, limit: int) -> str:
    """A field path of at most @p limit bytes: a longer one is cut back to its last whole
    segment, so that it names an ancestor of the value (8.2); "" when none is left."""
    whole = path.replace("\0", "")
    cut = _cut(whole, limit)
    if cut == whole:
        return cut
    i = cut.rfind("/")
    return cut[:i] if i > 0 else ""


def _cls(name: str, code: str, retryable: bool = False, base: type = AgentbusError) -> type:
    return type(name, (base,), {"code": code, "default_retryable": retryable,
                                "__doc__": f"wire code ``{code}``"})


InvalidEnvelope = _cls("InvalidEnvelope", "invalid_envelope")
InvalidEvent = _cls("InvalidEvent", "invalid_event")
Gap = _cls("Gap", "gap")
Duplicate = _cls("Duplicate", "duplicate")
Conflict = _cls("Conflict", "conflict")
Fenced = _cls("Fenced", "fenced")
RunTerminal = _cls("RunTerminal", "run_terminal")
IncompatibleVersion = _cls("IncompatibleVersion", "incompatible_version")
Unsupported = _cls("Unsupported", "unsupported")
TooLarge = _cls("TooLarge", "too_large")
Overloaded = _cls("Overloaded", "overloaded", True)
Unavailable = _cls("Unavailable", "unavailable", True)
NotFound = _cls("NotFound", "not_found")
RequestAborted = _cls("RequestAborted", "request_aborted")
Unauthorized = _cls("Unauthorized", "unauthorized")
InvalidArgument = _cls("InvalidArgument", "invalid_argument")
InvalidConfig = _cls("InvalidConfig", "invalid_config")
OutOfMemory = _cls("OutOfMemory", "out_of_memory", True)
IoError = _cls("IoError", "io_error", True)
Corrupt = _cls("Corrupt", "corrupt")
Closed = _cls("Closed", "closed")
Internal = _cls("Internal", "internal")


class Timeout(AgentbusError, builtins.TimeoutError):
    """wire code ``timeout`` (also raised locally when no answer came in time)."""

    code = "timeout"
    default_retryable = True


BY_CODE: dict[str, type] = {c.code: c for c in (
    InvalidEnvelope, InvalidEvent, Gap, Duplicate, Conflict, Fenced, RunTerminal,
    IncompatibleVersion, Unsupported, TooLarge, Overloaded, Unavailable, NotFound,
    RequestAborted, Unauthorized, Timeout, InvalidArgument, InvalidConfig, OutOfMemory,
    IoError, Corrupt, Closed, Internal)}


def from_wire(emap: Any, cid: int = 0, seq: int | None = None) -> AgentbusError:
    """The exception for an error map received from the broker (or a worker).

    A map that is not a valid error map gives an InvalidEnvelope naming what is wrong.
    An unknown code (a later protocol version may add codes, 8.3) gives a plain
    AgentbusError whose ``code`` is that name.
    """
    if not isinstance(emap, dict):
        return InvalidEnvelope("error is not a map", field="error", cid=cid)
    code = emap.get("code")
    message = emap.get("message")
    retryable = emap.get("retryable")
    if not isinstance(code, str) or not isinstance(message, str) or not isinstance(retryable, bool):
        return InvalidEnvelope("error map lacks code, message or retryable", field="error",
                               cid=cid)
    field = emap.get("field", "")
    details = emap.get("details") or {}
    if not isinstance(field, str) or not isinstance(details, dict):
        return InvalidEnvelope("error map has a bad field or details", field="error", cid=cid)
    cls = BY_CODE.get(code)
    if cls is None:
        e = AgentbusError(message, retryable=retryable, field=field, details=details, cid=cid,
                          seq=seq)
        e.code = code
        return e
    return cls(message, retryable=retryable, field=field, details=details, cid=cid, seq=seq)
