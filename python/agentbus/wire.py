"""Framing of agentbus protocol version 1 (docs/PROTOCOL.md), with no I/O.

Everything here turns Python values into frames and frames into values: headers (7.1),
event envelopes (4), broker stamps (5), records frames (1.2, 7.6), topics (6.1), the
JSON-safe check (2) and key files.  The async connection (``_aio``) and through it every
blocking class use these functions only, so the protocol is written once.

Invariants: an encoded envelope's keys come in the order of PROTOCOL.md section 4; a value
that is not JSON-safe is refused before anything is sent, with a typed error naming its
path; a malformed frame from the broker is an ``InvalidEnvelope``, never a crash.
"""

from __future__ import annotations

import math
import os
import re
import stat
import struct
import threading
from typing import Any, Iterable

import msgpack

from . import errors

VERSION = 1
VERSIONS = (1,)

# Limits a client may rely on before `welcome` (section 11 defaults).
DEFAULT_LIMITS = {
    "max_event_bytes": 1 << 20, "max_depth": 64, "max_id_bytes": 256, "max_batch": 1024,
    "max_header_bytes": 65536, "max_inflight": 8192, "max_replay_window": 64,
}
REQUIRED_LIMITS = tuple(DEFAULT_LIMITS)

INT_MIN = -(1 << 63)
UINT_MAX = (1 << 64) - 1
FIELD_UINT_MAX = (1 << 63) - 1

_U32 = struct.Struct(">I")


def packb(value: Any) -> bytes:
    """msgpack of a value already known to be JSON-safe (str as str, no bin)."""
    return msgpack.packb(value, use_bin_type=True)


def _esc(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def check_json_safe(value: Any, max_depth: int = 64, path: str = "", depth: int = 1) -> None:
    """Raise unless @p value is JSON-safe msgpack-to-be (section 2).

    dict (str keys), list/tuple, str (no lone surrogates), int in -2^63 .. 2^64-1, finite
    float, bool, None.  ``path`` is the wire field path of @p value ("" at the root);
    ``depth`` its depth (the root is 1).  InvalidEnvelope for a wrong type or value,
    TooLarge past ``max_depth``.
    """
    if depth > max_depth:
        raise errors.TooLarge(f"nested deeper than {max_depth}", field=path,
                              details={"limit": max_depth})
    t = type(value)
    if t is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise errors.InvalidEnvelope("string is not valid UTF-8 (a lone surrogate)",
                                         field=path) from None
    elif t is int:
        if value < INT_MIN or value > UINT_MAX:
            raise errors.InvalidEnvelope("integer beyond -2^63 .. 2^64-1 (not JSON-safe)",
                                         field=path)
    elif t is float:
        if not math.isfinite(value):
            raise errors.InvalidEnvelope("float is not finite (NaN or infinity)", field=path)
    elif t is dict:
        pre = path + "/" if path else ""
        child = depth + 1
        deep = child > max_depth
        for k, v in value.items():
            if type(k) is not str:
                raise errors.InvalidEnvelope(f"map key {k!r} is not a string", field=path)
            tv = type(v)
            if not deep and (tv is bool or v is None or
                             (tv is int and INT_MIN <= v <= UINT_MAX)):
                continue
            kp = pre + (_esc(k) if ("~" in k or "/" in k) else k)
            try:
                k.encode("utf-8")
            except UnicodeEncodeError:
                raise errors.InvalidEnvelope("map key is not valid UTF-8 (a lone surrogate)",
                                             field=kp) from None
            check_json_safe(v, max_depth, kp, child)
    elif t is list or t is tuple:
        pre = path + "/" if path else ""
        for i, v in enumerate(value):
            check_json_safe(v, max_depth, f"{pre}{i}", depth + 1)
    elif value is None or t is bool:
        pass
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int):
        check_json_safe(int(value), max_depth, path, depth)
    elif isinstance(value, float):
        check_json_safe(float(value), max_depth, path, depth)
    elif isinstance(value, str):
        check_json_safe(str(value), max_depth, path, depth)
    elif isinstance(value, dict):
        check_json_safe(dict(value), max_depth, path, depth)
    elif isinstance(value, (list, tuple)):
        check_json_safe(list(value), max_depth, path, depth)
    else:
        raise errors.InvalidEnvelope(f"{t.__name__} is not JSON-safe (bytes, ext and other "
                                     "types are refused)", field=path)


def check_id(value: Any, field: str, max_id_bytes: int = 256) -> str:
    """Return @p value if it is a valid id (section 3), else raise InvalidEnvelope."""
    if not isinstance(value, str):
        raise errors.InvalidEnvelope("id is not a string", field=field)
    try:
        b = value.encode("utf-8")
    except UnicodeEncodeError:
        raise errors.InvalidEnvelope("id is not valid UTF-8", field=field) from None
    if not 1 <= len(b) <= max_id_bytes:
        raise errors.InvalidEnvelope(f"id must be 1 .. {max_id_bytes} bytes", field=field)
    for ch in value:
        o = ord(ch)
        if o < 0x20 or 0x7F <= o <= 0x9F:
            raise errors.InvalidEnvelope("id holds a control character", field=field)
    return value


# -- headers -------------------------------------------------------------------------------

def encode_header(op: str, cid: int, fields: dict[str, Any] | None = None,
                  v: int | None = VERSION) -> bytes:
    """A header frame: op, v (omitted when None), cid, then @p fields in their order."""
    h: dict[str, Any] = {"op": op}
    if v is not None:
        h["v"] = v
    h["cid"] = cid
    if fields:
        for k, val in fields.items():
            if val is not None:
                h[k] = val
    return packb(h)


# -- strict decoding (section 2 "Strict messages") --------------------------------------------
#
# msgpack-python reads bin as bytes and ext as ExtType/Timestamp; section 2 allows neither.
# A negative max_bin_len/max_ext_len makes its C unpacker refuse every bin and ext value
# (the length compares above it) at no cost; checked once here, and when a build does not
# behave so the decoders look for bytes/ext values themselves (_WALK_BIN).
_STRICT_KW = {"max_bin_len": -2, "max_ext_len": -2}


def _refused(b: bytes) -> bool:
    try:
        msgpack.unpackb(b, **_STRICT_KW)
    except ValueError:
        return True
    return False


_WALK_BIN = not all(_refused(b) for b in (b"\xc4\x00", b"\xc5\x00\x00", b"\xc7\x00\x05",
                                          b"\xd4\x01\x00", b"\xd6\xff\x00\x00\x00\x01"))
if _WALK_BIN:  # pragma: no cover - a build whose lengths are unsigned
    _STRICT_KW = {}


def _unpackb(b: Any) -> Any:
    """One msgpack value, strict on types (no bin, no ext, string keys)."""
    return msgpack.unpackb(b, raw=False, strict_map_key=True, **_STRICT_KW)


class _Dup(ValueError):
    def __init__(self, key: Any):
        super().__init__(key)
        self.key = key


def _pairs(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set = set()
        for k, _ in pairs:
            if k in seen:
                raise _Dup(k)
            seen.add(k)
    return d


_MALFORMED_MP = (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError,
                 UnicodeDecodeError, TypeError)


def _unpack(frame: Any, what: str, max_depth: int = 64) -> Any:
    """The one JSON-safe msgpack value of @p frame (section 2), else InvalidEnvelope: no bin
    or ext, string keys unique in their map, valid UTF-8, finite floats, nothing after the
    value.  Depth (TooLarge past @p max_depth) is walked only when the frame is not in the
    shortest form or holds a float; a caller walks the open values itself (decode_header).
    Not the subscriber's per-event path (decode_chunk)."""
    b = frame if type(frame) is bytes else bytes(frame)
    try:
        val = _unpackb(b)
    except _MALFORMED_MP as e:
        if "max_bin_len" in str(e) or "max_ext_len" in str(e):
            try:  # read it as msgpack-python would, to name the bin or ext value's path
                _check_strict(msgpack.unpackb(b, strict_map_key=False), 1 << 30, "", 1)
            except errors.AgentbusError as x:
                raise errors.InvalidEnvelope(f"{what}: {x.message}", field=x.field) from None
            except _MALFORMED_MP:
                pass
        raise errors.InvalidEnvelope(f"{what} is not one valid msgpack value: {e}"[:159]) from None
    # Keys are unique when msgpack's reading encodes back to the same bytes (a dict has no
    # repeated key); only a frame not in the shortest form is read again, pair by pair.
    if _WALK_BIN or msgpack.packb(val, use_bin_type=True) != b:
        try:
            val = msgpack.unpackb(b, raw=False, strict_map_key=True, object_pairs_hook=_pairs,
                                  **_STRICT_KW)
        except _Dup as e:
            raise errors.InvalidEnvelope(f"{what}: key {e.key!r} appears twice in a map"[:159],
                                         field=str(e.key)) from None
        _check_strict(val, max_depth, "", 1)
    elif b"\xcb" in b or b"\xca" in b:  # maybe a float: NaN and infinities are refused
        _check_strict(val, max_depth, "", 1)
    return val


_SCALARS = (str, int, bool, type(None))


def _check_strict(value: Any, max_depth: int, path: str, depth: int) -> None:
    """What msgpack-python lets through and section 2 does not: non-finite floats, bin and
    ext values (builds without _STRICT_KW), nesting beyond @p max_depth."""
    if depth > max_depth:
        raise errors.TooLarge(f"nested deeper than {max_depth}", field=path,
                              details={"limit": max_depth})
    t = type(value)
    if t is dict:
        pre = path + "/" if path else ""
        for k, v in value.items():
            if type(v) not in _SCALARS or depth + 1 > max_depth:
                _check_strict(v, max_depth, pre + _esc(k), depth + 1)
    elif t is list:
        pre = path + "/" if path else ""
        for i, v in enumerate(value):
            _check_strict(v, max_depth, f"{pre}{i}", depth + 1)
    elif t is float:
        if not math.isfinite(value):
            raise errors.InvalidEnvelope("float is not finite (NaN or infinity)", field=path)
    elif not (t is str or t is int or t is bool or value is None):
        raise errors.InvalidEnvelope(f"{t.__name__} is not JSON-safe (no bin, no ext)",
                                     field=path)


def _map_len(b: bytes) -> int:
    """The entry count of the msgpack map at the start of @p b (-1: not a map)."""
    t = b[0]
    if 0x80 <= t <= 0x8F:
        return t & 0x0F
    if t == 0xDE and len(b) >= 3:
        return int.from_bytes(b[1:3], "big")
    if t == 0xDF and len(b) >= 5:
        return int.from_bytes(b[1:5], "big")
    return -1


# -- the field tables of the messages a client receives (sections 5, 6.3, 7, 8) -------------
#
# One checker per field type: f(value, path) raises InvalidEnvelope (TooLarge where section 8
# says so) naming the path.  A table maps a key to (required, checker); a key not in it is
# an unknown field (section 2), refused naming it.

def _bad(path: str, what: str) -> errors.InvalidEnvelope:
    return errors.InvalidEnvelope(f"{path or 'value'} {what}"[:159], field=path)


def _uint_in(lo: int, hi: int) -> Any:
    def check(v: Any, path: str) -> None:
        if type(v) is not int:
            raise _bad(path, "is not an integer")
        if not lo <= v <= hi:
            raise _bad(path, f"is out of range {lo} .. {hi}")
    return check


_uint = _uint_in(0, FIELD_UINT_MAX)
_uint1 = _uint_in(1, FIELD_UINT_MAX)
_u32 = _uint_in(0, (1 << 32) - 1)
_u32_1 = _uint_in(1, (1 << 32) - 1)
_int = _uint_in(INT_MIN, FIELD_UINT_MAX)


def _bool(v: Any, path: str) -> None:
    if type(v) is not bool:
        raise _bad(path, "is not a bool")


def _str_in(lo: int = 0, hi: int | None = None, nul: bool = True) -> Any:
    def check(v: Any, path: str) -> None:
        if type(v) is not str:
            raise _bad(path, "is not a string")
        n = len(v) if v.isascii() else len(v.encode("utf-8"))
        if n < lo:
            raise _bad(path, "is empty" if lo == 1 else f"is shorter than {lo} bytes")
        if hi is not None and n > hi:
            raise _bad(path, f"is longer than {hi} bytes")
        if not nul and "\0" in v:
            raise _bad(path, "holds a NUL")
    return check


_str = _str_in()
_str1 = _str_in(1)


def _id(v: Any, path: str) -> None:
    check_id(v, path)


def _any(v: Any, path: str) -> None:
    pass


def _map(v: Any, path: str) -> None:
    if type(v) is not dict:
        raise _bad(path, "is not a map")


def _enum(*names: str) -> Any:
    ok = frozenset(names)

    def check(v: Any, path: str) -> None:
        if type(v) is not str or v not in ok:
            raise _bad(path, "must be one of " + ", ".join(names))
    return check


def _obj(table: dict[str, tuple[bool, Any]], check: Any = None) -> Any:
    """A map of exactly the keys of @p table (required ones present, no others)."""
    def checker(v: Any, path: str) -> None:
        if type(v) is not dict:
            raise _bad(path, "is not a map")
        pre = path + "/" if path else ""
        for k, val in v.items():
            spec = table.get(k)
            if spec is None:
                raise _bad(pre + _esc(k), "is an unknown field")
            spec[1](val, pre + _esc(k))
        if len(v) < len(table):
            for k, (req, _) in table.items():
                if req and k not in v:
                    raise _bad(pre + _esc(k), "is missing (required)")
        if check is not None:
            check(v, path)
    return checker


def _list(item: Any, lo: int = 0, hi: int | None = None) -> Any:
    def check(v: Any, path: str) -> None:
        if type(v) is not list:
            raise _bad(path, "is not an array")
        if len(v) < lo or (hi is not None and len(v) > hi):
            raise _bad(path, f"must hold {lo} .. {hi} entries")
        pre = path + "/" if path else ""
        for i, x in enumerate(v):
            item(x, f"{pre}{i}")
    return check


def _error_map(v: Any, path: str) -> None:
    """An error map (8.1): a known code, message, retryable, optional field and details."""
    _ERROR(v, path)
    pre = path + "/" if path else ""
    if v["code"] not in errors.BY_CODE:
        raise _bad(pre + "code", f"is not a code of section 8.3: {v['code']!r}"[:80])
    for k, lim in (("message", 159), ("field", 63)):
        s = v.get(k, "")
        if len(s.encode("utf-8")) > lim:
            raise errors.TooLarge(f"{pre}{k} is longer than {lim} bytes", field=pre + k,
                                  details={"limit": lim})
        if "\0" in s:
            raise _bad(pre + k, "holds a NUL")
    det = v.get("details", {})
    if len(det) > 3:
        raise errors.TooLarge("more than 3 details", field=pre + "details", details={"limit": 3})
    for k, x in det.items():
        kp = f"{pre}details/{_esc(k)}"
        if not 1 <= len(k.encode("utf-8")) <= 14 or "\0" in k:
            raise _bad(kp, "is not a detail key of 1 .. 14 bytes")
        if type(x) is int:
            _int(x, kp)
        elif type(x) is str:
            if len(x.encode("utf-8")) > 23:
                raise errors.TooLarge(f"{kp} is longer than 23 bytes", field=kp,
                                      details={"limit": 23})
            if "\0" in x:
                raise _bad(kp, "holds a NUL")
        else:
            raise _bad(kp, "is not an integer or a string")


_ERROR = _obj({"code": (True, _str), "message": (True, _str), "retryable": (True, _bool),
               "field": (False, _str), "details": (False, _map)})
_RUN_STATUS = _enum("unknown", "active", "finished", "errored")
_REQ_STATE = _enum("queued", "assigned", "started", "cancelled", "ended")
_HEAD = _obj({"thread": (True, _id), "run": (True, _id), "last_seq": (True, _uint),
              "epoch": (True, _uint), "status": (True, _RUN_STATUS),
              "outcome": (False, _enum("success", "interrupt", "cancelled")),
              "last_pos": (True, _uint), "orphaned": (False, _bool)})
_HEADS = _list(_HEAD)


def _result_rule(r: dict, path: str) -> None:
    """pos iff accepted/duplicate, error iff rejected (7.4)."""
    rej = r["status"] == "rejected"
    if rej == ("pos" in r):
        raise _bad(path + "/pos", "is not allowed when rejected" if rej else
                   "is required unless the status is rejected")
    if rej != ("error" in r):
        raise _bad(path + "/error", "is required when rejected" if rej else
                   "is only allowed when the status is rejected")


_RESULT = _obj({"seq": (True, _uint), "status": (True, _enum("accepted", "duplicate", "rejected")),
                "pos": (False, _uint1), "error": (False, _error_map)}, _result_rule)
_RESULT_KEYS = ("seq", "status", "pos")


def _results(v: Any, path: str) -> None:
    """published.results: 1 .. 65536 results (the broker's max_batch bound); the common
    result {seq, status accepted/duplicate, pos} checked without the generic walk."""
    if type(v) is not list or not 1 <= len(v) <= 65536:
        raise _bad(path, "must be an array of 1 .. 65536 results")
    mx = FIELD_UINT_MAX
    for i, r in enumerate(v):
        if (type(r) is dict and len(r) == 3 and tuple(r) == _RESULT_KEYS
                and type(r["seq"]) is int and 0 <= r["seq"] <= mx and type(r["pos"]) is int
                and 1 <= r["pos"] <= mx and r["status"] in ("accepted", "duplicate")):
            continue
        _RESULT(r, f"{path}/{i}")


_LIMITS = _obj({k: (k in REQUIRED_LIMITS, _u32_1) for k in (
    "max_event_bytes", "max_depth", "max_id_bytes", "max_batch", "max_header_bytes",
    "max_inflight", "max_replay_window", "max_publish_bytes", "max_replay_bytes")})
_CAP_STATE = _enum("available", "degraded", "unavailable", "unsupported")


def _caps(v: Any, path: str) -> None:
    _map(v, path)
    for k, x in v.items():
        kp = f"{path}/{_esc(k)}"
        if not 1 <= len(k.encode("utf-8")) <= 64:
            raise _bad(kp, "is not a capability name of 1 .. 64 bytes")
        _CAP_STATE(x, kp)


def _roles(v: Any, path: str) -> None:
    _map(v, path)
    for k, x in v.items():
        if x is not True:
            _list(_str)(x, f"{path}/{_esc(k)}")


_AGENT = _obj({"name": (True, _id), "capacity": (True, _uint_in(1, 1024)),
               "actions": (False, _list(_str_in(1, 256), 0, 64))})
_ACTION = _str_in(1, 256)
_WORKER_ID = _str_in(1, 64)
_REASON = _str_in(0, 1024)

# The messages a client receives, by op: their fields besides op, v and cid (7.1).
# From PROTOCOL.md's tables (the C codec's, proto/codec_cmd.c and codec_dispatch.c).
REPLY_FIELDS: dict[str, dict[str, tuple[bool, Any]]] = {
    "welcome": {"instance": (True, _str1), "event_endpoint": (True, _str1),
                "limits": (True, _LIMITS), "caps": (True, _caps),
                "access": (False, _obj({"name": (True, _str), "roles": (True, _roles)}))},
    "claimed": {"thread": (True, _id), "run": (True, _id), "epoch": (True, _uint1),
                "last_seq": (True, _uint), "status": (True, _RUN_STATUS)},
    "published": {"results": (True, _results)},
    "heads_reply": {"head_pos": (True, _uint), "heads": (True, _HEADS)},
    "replay_chunk": {"count": (True, _uint_in(1, 1024)), "bytes": (True, _uint1)},
    "replay_end": {"head_pos": (True, _uint), "events": (True, _uint), "heads": (True, _HEADS)},
    "snapshot_reply": {"thread": (True, _id), "snapshot": (True, _map)},
    "pong": {"instance": (True, _str1), "head_pos": (True, _uint)},
    "error": {"error": (True, _error_map)},
    "heartbeat": {"instance": (True, _str1), "head_pos": (True, _uint), "time": (True, _int)},
    "served": {"worker_id": (True, _WORKER_ID), "lease_ms": (True, _u32_1)},
    "workers_reply": {"workers": (True, _list(_obj({
        "worker_id": (True, _WORKER_ID), "worker": (True, _str_in(1, 256)),
        "agents": (True, _list(_AGENT, 1, 64)), "lease_ms": (True, _u32_1),
        "idle_ms": (True, _u32), "calls": (True, _u32)}), 0, 1024))},
    "action_reply": {"agent": (True, _id), "action": (True, _ACTION),
                     "worker_id": (True, _WORKER_ID), "result": (False, _any)},
    "action_call": {"call": (True, _uint1), "agent": (True, _id), "action": (True, _ACTION),
                    "payload": (False, _any), "thread": (False, _id),
                    "timeout_ms": (True, _uint_in(1, 600000))},
    "action_ack": {"call": (True, _uint1), "delivered": (True, _bool)},
    "run_accepted": {"request": (True, _uint1), "agent": (True, _id), "thread": (True, _id),
                     "run": (True, _id), "state": (True, _REQ_STATE),
                     "position": (True, _uint), "existing": (True, _bool)},
    "assign": {"request": (True, _uint1), "agent": (True, _id), "thread": (True, _id),
               "run": (True, _id), "input": (True, _map), "epoch": (True, _uint1),
               "attempt": (True, _u32_1)},
    "declined": {"request": (True, _uint1), "state": (True, _REQ_STATE)},
    "cancel_reply": {"thread": (True, _id), "run": (True, _id),
                     "outcome": (True, _enum("dequeued", "delivered", "no_owner", "ended")),
                     "request": (False, _uint1)},
    "run_cancel": {"request": (True, _uint1), "thread": (True, _id), "run": (True, _id),
                   "epoch": (True, _uint1), "reason": (False, _REASON)},
    "abandoned": {"thread": (True, _id), "run": (True, _id), "seq": (True, _uint1),
                  "pos": (True, _uint1)},
    "requests_reply": {"requests": (True, _list(_obj({
        "request": (True, _uint1), "agent": (True, _id), "thread": (True, _id),
        "run": (True, _id), "state": (True, _REQ_STATE), "worker": (False, _str_in(1, 256)),
        "epoch": (False, _uint), "attempts": (True, _u32), "orphaned": (True, _bool),
        "created_us": (True, _int)}), 0, 1000)), "more": (True, _bool)},
    "left": {},
    "notice": {"kind": (True, _enum("orphaned")), "thread": (True, _id), "run": (True, _id),
               "request": (False, _uint1), "worker": (False, _str_in(1, 256))},
    "stats_reply": {
        "instance": (True, _str1), "version": (True, _str_in(1, 64)),
        **{k: (True, _uint) for k in (
            "uptime_ms", "head_pos", "runs_total", "runs_active", "store_bytes", "wal_bytes",
            "connections", "subscribers", "queue_events", "queue_bytes", "replays_open",
            "commits", "events", "rejected", "commits_per_s", "events_per_s",
            "commit_p50_us", "commit_p90_us", "commit_p99_us", "commit_max_us",
            "commit_window")},
        "store_known": (True, _bool), "replicas_known": (False, _bool),
        **{k: (False, _uint) for k in ("replicas", "replicas_sync", "replica_lag_bytes",
                                       "replica_lag_us")}},
    "threads_reply": {"threads": (True, _list(_obj({
        "thread": (True, _id), "runs": (True, _uint), "active": (True, _bool),
        "last_run": (True, _id), "last_pos": (True, _uint1)}), 0, 1000)),
        "next": (False, _id)},
}
_HEADER_KEYS = ("op", "v", "cid")


def decode_header(frame: Any, max_depth: int = 64) -> dict[str, Any]:
    """The header map of a frame from the broker, checked strictly (sections 2, 6.3, 7.1,
    8): its `v` first (IncompatibleVersion), then `op` (Unsupported for one a client does
    not receive), then every field against the op's table in REPLY_FIELDS: required ones
    present, each of its type and range, no other key.  `cid` is required but in a
    heartbeat (which has none); `v` but in an `error`.  A refusal is an InvalidEnvelope
    naming the field, with ``cid`` the header's when it had a valid one."""
    h = _unpack(frame, "header", max_depth)
    if type(h) is not dict:
        raise errors.InvalidEnvelope("header is not a map")
    cid = h.get("cid")
    cid = cid if type(cid) is int and 0 <= cid <= FIELD_UINT_MAX else 0
    try:
        _check_header(h)
        for k in _OPEN_VALUES.get(h["op"], ()):
            if k in h:  # the values of any shape: JSON-safe and within max_depth
                _check_strict(h[k], max_depth, k, 2)
    except errors.AgentbusError as e:
        e.cid = cid
        raise
    return h


# The fields whose value has no table (any map or value): checked for section 2 only.
_OPEN_VALUES = {"snapshot_reply": ("snapshot",), "action_reply": ("result",),
                "action_call": ("payload",), "assign": ("input",)}


def _check_header(h: dict[str, Any]) -> None:
    if "v" in h:
        v = h["v"]
        _uint(v, "v")
        if v != VERSION:
            raise errors.IncompatibleVersion(f"the broker sent v {v}", field="v",
                                             details={"ours": "1", "theirs": str(v)})
    op = h.get("op")
    if type(op) is not str:
        raise _bad("op", "is missing or not a string")
    table = REPLY_FIELDS.get(op)
    if table is None:
        raise errors.Unsupported(f"op {op!r} is not one a client receives"[:159], field="op")
    if "v" not in h and op != "error":
        raise _bad("v", "is missing (required)")
    if op == "heartbeat":
        if "cid" in h:
            raise _bad("cid", "is an unknown field (a heartbeat has no cid)")
    elif "cid" in h:
        _uint(h["cid"], "cid")
    else:
        raise _bad("cid", "is missing (required)")
    for k, val in h.items():
        spec = table.get(k)
        if spec is None:
            if k in _HEADER_KEYS:
                continue
            raise _bad(_esc(k), "is an unknown field")
        spec[1](val, _esc(k))
    for k, (req, _) in table.items():
        if req and k not in h:
            raise _bad(k, "is missing (required)")


def need(h: dict[str, Any], key: str, typ: type | tuple, op: str | None = None) -> Any:
    """h[key] checked against @p typ (bool is not an int here); InvalidEnvelope if not."""
    val = h.get(key)
    ok = isinstance(val, typ) and not (typ is int and isinstance(val, bool))
    if not ok:
        raise errors.InvalidEnvelope(
            f"{op or h.get('op')}: {key} missing or of the wrong type", field=key,
            cid=h.get("cid", 0))
    return val


# -- envelopes, stamps, records ----------------------------------------------------------------

class Event:
    """One committed event as a subscriber receives it.

    ``thread``, ``run``, ``seq``, ``epoch``, ``ts`` (producer ms), ``body`` (the AG-UI event
    dict), ``pos`` and ``time_us`` (the broker stamp), ``by`` ("broker" for an event the
    broker wrote itself, else None), ``tprev`` (live events: a position below ``pos`` with
    no event of the thread between the two, the previous event's when the broker knows
    it, section 5; None when the stamp has none, as on every replayed event and from an
    older broker), ``replayed`` (came from the store, not live) and ``raw`` (the
    envelope bytes exactly as published).
    """

    __slots__ = ("thread", "run", "seq", "epoch", "ts", "body", "pos", "time_us", "by",
                 "tprev", "replayed", "raw")

    def __init__(self, env: dict[str, Any], stamp: dict[str, Any], raw: bytes, replayed: bool):
        self.thread = env["thread"]
        self.run = env["run"]
        self.seq = env["seq"]
        self.epoch = env["epoch"]
        self.ts = env["ts"]
        self.body = env["event"]
        self.pos = stamp["pos"]
        self.time_us = stamp["time"]
        self.by = stamp.get("by")
        self.tprev = stamp.get("tprev")
        self.replayed = replayed
        self.raw = raw

    @property
    def type(self) -> str:
        return self.body.get("type", "")

    def __repr__(self) -> str:
        return (f"Event({self.thread!r}, {self.run!r}, seq={self.seq}, pos={self.pos}, "
                f"type={self.type!r})")


_ENV_KEYS = {"v", "thread", "run", "seq", "epoch", "ts", "event"}


def _env_fields(env: Any, raw: bytes) -> None:
    """Section 4 on a decoded envelope: exactly the seven keys (the map's own count too, so
    none repeated), v 1, ids valid (section 3), seq and epoch uints >= 1 (at most 2^63-1),
    ts an int64, event a map.  InvalidEnvelope naming the first bad field."""
    if type(env) is not dict:
        raise errors.InvalidEnvelope("envelope is not a map")
    if env.keys() != _ENV_KEYS:
        for k in env:
            if k not in _ENV_KEYS:
                raise _bad(_esc(k), "is an unknown field of an envelope")
        for k in ("v", "thread", "run", "seq", "epoch", "ts", "event"):
            if k not in env:
                raise _bad(k, "is missing (required)")
    if _map_len(raw) != 7:
        raise errors.InvalidEnvelope("envelope map repeats a key")
    v = env["v"]
    _uint(v, "v")
    if v != VERSION:
        raise errors.IncompatibleVersion("envelope of another version", field="v",
                                         details={"ours": "1", "theirs": str(v)})
    check_id(env["thread"], "thread")
    check_id(env["run"], "run")
    _uint1(env["seq"], "seq")
    _uint1(env["epoch"], "epoch")
    _int(env["ts"], "ts")
    _map(env["event"], "event")


def decode_envelope(raw: bytes) -> dict[str, Any]:
    """An envelope's map, strictly checked (sections 2, 3, 4); InvalidEnvelope naming the
    field if bad (IncompatibleVersion for a v other than 1)."""
    env = _unpack(raw, "envelope")
    _env_fields(env, raw if type(raw) is bytes else bytes(raw))
    _check_strict(env["event"], 64, "event", 2)
    return env


def _stamp_fields(st: Any, b: bytes) -> tuple[int, int, str | None, int | None]:
    """Section 5 on a decoded stamp: pos (uint >= 1), time (int), optional tprev (a uint
    below pos) and by ("broker"), nothing else, no key twice.  InvalidEnvelope naming the
    field."""
    if type(st) is not dict:
        raise errors.InvalidEnvelope("stamp is not a map")
    for k in st:
        if k not in _STAMP_KEYS:
            raise _bad(_esc(k), "is an unknown field of a stamp")
    if _map_len(b) != len(st):
        raise errors.InvalidEnvelope("stamp map repeats a key")
    if "pos" not in st:
        raise _bad("pos", "is missing (required)")
    if "time" not in st:
        raise _bad("time", "is missing (required)")
    pos, tm, by, tp = st["pos"], st["time"], st.get("by"), st.get("tprev")
    _uint1(pos, "pos")
    _int(tm, "time")
    if "by" in st and by != "broker":
        raise _bad("by", 'is not "broker"')
    if "tprev" in st:
        _uint(tp, "tprev")
        if tp >= pos:
            raise _bad("tprev", "is not below pos")
    return pos, tm, by, tp


_STAMP_KEYS = frozenset(("pos", "time", "tprev", "by"))


def decode_stamp(raw: bytes) -> dict[str, Any]:
    """A broker stamp (section 5), strictly checked; InvalidEnvelope naming the field."""
    b = raw if type(raw) is bytes else bytes(raw)
    if len(b) > 64:
        raise errors.TooLarge("stamp over 64 bytes", details={"limit": 64, "actual": len(b)})
    st = _unpack(b, "stamp", 2)
    _stamp_fields(st, b)
    return st
def split_records(frame: Any) -> list[tuple[bytes, bytes]]:
    """The (stamp, envelope) byte pairs of a records frame (1.2, 7.6).

    Every length is checked against what is left.  On a malformed record it raises
    InvalidEnvelope with detail ``record`` (its index) and ``good`` (the pairs before it),
    so a live receiver may use those (6.2) and a replay rejects the chunk.
    """
    buf = memoryview(frame) if not isinstance(frame, (bytes, memoryview)) else frame
    n = len(buf)
    off = 0
    out: list[tuple[bytes, bytes]] = []
    unpack = _U32.unpack_from
    while off < n:
        if off + 4 > n:
            break
        sl = unpack(buf, off)[0]
        off += 4
        if sl > 64 or off + sl + 4 > n:
            break
        stamp = bytes(buf[off:off + sl])
        off += sl
        el = unpack(buf, off)[0]
        off += 4
        if off + el > n:
            break
        out.append((stamp, bytes(buf[off:off + el])))
        off += el
    else:
        return out
    e = errors.InvalidEnvelope("records frame: a length runs past its end", field="bytes",
                               details={"record": len(out)})
    e.good = out  # type: ignore[attr-defined]
    raise e


# The stamps as this broker writes them (section 5, proto/codec.c ab_stamp_encode): the keys
# in the order pos, time, tprev, by; pos and tprev each in the smallest of uint 8/16/32/64
# (tprev also a positive fixint; never wider than pos, which it is below), time a uint 64
# (any time after 1970 + 71 minutes).  Bytes of one of these shapes are exactly that map;
# any other stamp (a fixint pos, one without tprev but with by, ...) goes through msgpack.
# _STAMPS: {"pos", "time"} (a replay's), keyed by its length.
_STAMP_TIME = b"\xa4time\xcf"
_UW = ((1, "B", 0xCC), (2, "H", 0xCD), (4, "I", 0xCE), (8, "Q", 0xCF))
# The third item reads a whole record's head at once: the stamp's length, the stamp, the
# envelope's length and its first 4 bytes (a chunk's stamps mostly have one length).
_STAMPS = {5 + 1 + w + 6 + 8: (struct.Struct(f">6s{c}6sQ").unpack_from, b"\x82\xa3pos" + bytes([m]),
                               struct.Struct(f">I6s{c}6sQII").unpack_from)
           for w, c, m in _UW}
_BY_BROKER = b"\xa2by\xa6broker"


def _stamps_tprev() -> dict[int, tuple]:
    """The live stamps, with tprev (and by "broker" or not), keyed by length << 8 | the
    format byte of pos: (unpack_from, head, the tprev key and format, tail, by, tprev
    max) where tail is b"" or the by pair."""
    t: dict[int, tuple] = {}
    for tail, by in ((b"", None), (_BY_BROKER, "broker")):
        for i, (w, c, m) in enumerate(_UW):
            head = bytes([0x83 + (by is not None)]) + b"\xa3pos" + bytes([m])
            for w2, c2, m2 in ((0, "B", None), *_UW[:i + 1]):
                post = b"\xa5tprev" + (bytes([m2]) if m2 is not None else b"")
                sl = 6 + w + 6 + 8 + len(post) + max(w2, 1) + len(tail)
                assert sl << 8 | m not in t
                t[sl << 8 | m] = (struct.Struct(f">6s{c}6sQ{len(post)}s{c2}{len(tail)}s").unpack_from,
                                  head, post, tail, by, 0x7F if m2 is None else FIELD_UINT_MAX)
    return t


_STAMPS_TPREV = _stamps_tprev()


def _stamp(b: bytes) -> tuple[int, int, str | None, int | None]:
    """(pos, time, by, tprev) of a stamp in any valid encoding; ValueError if it is not one.
    msgpack's defaults suffice here (str keys and values; a bin or ext value, or key, fails
    the checks), and a fixmap whose count is the dict's has no repeated key."""
    st = msgpack.unpackb(b)
    if type(st) is not dict or b[0] != 0x80 + len(st):
        try:  # a map 16 form, or a key repeated: the naming check
            return _stamp_fields(st, b)
        except errors.AgentbusError:
            raise ValueError from None
    pos, tm, by, tp = st["pos"], st["time"], st.get("by"), st.get("tprev")
    if (type(pos) is not int or not 0 < pos <= FIELD_UINT_MAX or type(tm) is not int
            or not INT_MIN <= tm <= FIELD_UINT_MAX
            or len(st) != 2 + (by is not None) + (tp is not None)
            or (by is not None and by != "broker")
            or (tp is not None and (type(tp) is not int or not 0 <= tp < pos))):
        raise ValueError
    return pos, tm, by, tp


_MALFORMED = (ValueError, KeyError, TypeError, IndexError, struct.error, msgpack.ExtraData,
              msgpack.FormatError, msgpack.StackError, msgpack.OutOfData, UnicodeDecodeError)

# decode_chunk() reads envelopes with one Unpacker per thread (fed one envelope at a time,
# its position telling whether bytes followed the value): the same parse as unpackb()
# without the cost of its keyword arguments or of a new Unpacker per live message.  Its
# buffer grows to the largest envelope read (max_event_bytes).
_tls = threading.local()
_ENV_HEAD = 0x87A17601  # a map of 7 whose first key is v, 1 (its first 4 bytes)
_U32x2 = struct.Struct(">II")


def _unpacker() -> Any:
    return msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=(1 << 31) - 1,
                            **_STRICT_KW)

# Ids a records frame named that check_id() accepted: most records repeat the previous
# record's thread and run, the others are looked up here before they are checked again.
_IDS_OK: set[str] = set()
_ID_BAD = re.compile("[\x00-\x1f\x7f-\x9f]").search


def _id_ok(x: Any) -> bool:
    if x in _IDS_OK:
        return True
    if type(x) is not str or not 1 <= len(x.encode("utf-8")) <= 256 or _ID_BAD(x):
        return False
    if len(_IDS_OK) >= 4096:
        _IDS_OK.clear()
    _IDS_OK.add(x)
    return True


def decode_records(frame: Any, replayed: bool) -> list[Event]:
    """The events of a records frame, each envelope and stamp checked as
    decode_envelope() and decode_stamp() do.  A malformed frame raises like
    split_records(), with the records before the bad one in ``good``."""
    return decode_chunk(frame, replayed)[0]


def decode_chunk(frame: Any, replayed: bool) -> tuple[list[Event], bool]:
    """decode_records() and whether the positions are consecutive (each record's ``pos``
    the previous one's + 1), which lets a subscriber judge the seam once per chunk.

    The hot path of every subscriber, written as one loop with no per-record calls but
    msgpack's and struct's: the frame is copied to bytes once and each stamp and envelope
    is a slice of it (one copy, the ``raw`` the event keeps).  Every record is checked
    in full here, before anything is handed out: lengths against what is left, the stamp
    a map of ``pos`` (uint >= 1), ``time`` (int), at most ``tprev`` (a uint below pos)
    and ``by`` "broker", no other key and none twice (section 5); the envelope exactly
    one msgpack map of the seven fields of section 4, none twice (v 1, ids valid as
    section 3 says, seq and epoch uints >= 1, ts an int, event a map; every uint at most
    2^63-1 and ts an int64), no bin or ext value anywhere (section 2), nothing after
    either value.  Not checked here, for speed (the broker refused them when the
    producer published, and decode_envelope() does check them): repeated keys, non-finite
    floats and depth inside the event body.  A malformed record raises InvalidEnvelope
    naming its field (``bytes`` for a length), detail ``record`` its index and ``good``
    the events before it.
    """
    buf = frame if type(frame) is bytes else bytes(frame)
    n = len(buf)
    off = 0
    out: list[Event] = []
    append = out.append
    unpack = _U32.unpack_from
    unpack2 = _U32x2.unpack_from
    new = Event.__new__
    prev = 0
    consecutive = True
    mx = FIELD_UINT_MAX
    last_th = last_ru = None
    walk = _WALK_BIN
    tprev_get = _STAMPS_TPREV.get
    stamps_get = _STAMPS.get
    s_time = _STAMP_TIME
    e_head = _ENV_HEAD
    f_all, f_head, f_sl, f_need = None, b"", -1, n + 1  # no record read at once yet
    u = getattr(_tls, "u", None)
    if u is None:
        u = _tls.u = _unpacker()
    feed, unpk, tell = u.feed, u.unpack, u.tell
    used = tell()
    try:
        while off < n:
            if off + f_need <= n:  # a record whose stamp has the previous one's shape
                sl, pre, pos, mid, tm, el, eh = f_all(buf, off)
                fast = sl == f_sl and pre == f_head and mid == s_time and 0 < pos <= mx >= tm
            else:
                fast = False
            if fast:
                e0 = off + sl + 8
                off = e0 + el
                if off > n:
                    raise ValueError
                by = tp = None
            else:
                sl, = unpack(buf, off)  # struct.error when fewer than 4 bytes are left
                s0 = off + 4
                off = s0 + sl
                el, eh = unpack2(buf, off)  # also when the stamp ran past the end (and when
                # fewer than 4 bytes follow the length: too short for any envelope)
                e0 = off + 4
                off = e0 + el
                if sl > 64 or off > n:
                    raise ValueError
                fs = stamps_get(sl)
                if fs is not None:
                    pre, pos, mid, tm = fs[0](buf, s0)
                    by = tp = None
                    if pre != fs[1] or mid != s_time or not 0 < pos <= mx or tm > mx:
                        pos, tm, by, tp = _stamp(buf[s0:s0 + sl])
                    else:  # the next record is read at once if its stamp has this shape
                        f_all, f_head, f_sl, f_need = fs[2], fs[1], sl, sl + 12
                else:
                    fs = tprev_get(sl << 8 | buf[s0 + 5])  # (sl >= 6 for every key there)
                    if fs is not None:
                        pre, pos, mid, tm, post, tp, tail = fs[0](buf, s0)
                        by = fs[4]
                        if (pre != fs[1] or mid != s_time or post != fs[2] or tail != fs[3]
                                or not tp < pos <= mx or tp > fs[5] or tm > mx):
                            pos, tm, by, tp = _stamp(buf[s0:s0 + sl])
                    else:
                        pos, tm, by, tp = _stamp(buf[s0:s0 + sl])
            raw = buf[e0:off]
            feed(raw)  # one value, no bin, no ext (_STRICT_KW), nothing after it
            env = unpk()
            used += el
            if type(env) is not dict or len(env) != 7:
                raise ValueError
            if eh != e_head or el < 4:  # else a map of 7 (none repeated), v 1 first
                v = env["v"]
                if _map_len(raw) != 7 or type(v) is not int or v != 1:
                    raise ValueError
            ev = new(Event)
            ev.thread = th = env["thread"]
            ev.run = ru = env["run"]
            ev.seq = seq = env["seq"]
            ev.epoch = ep = env["epoch"]
            ev.ts = ts = env["ts"]
            ev.body = body = env["event"]
            ev.pos = pos
            ev.time_us = tm
            ev.by = by
            ev.tprev = tp
            if (type(seq) is not int or not 0 < seq <= mx or type(ep) is not int
                    or not 0 < ep <= mx or type(body) is not dict or type(ts) is not int
                    or ts > mx):  # (msgpack has no int below -2^63, INT_MIN)
                raise ValueError
            if th != last_th:
                if not _id_ok(th):
                    raise ValueError
                last_th = th
            if ru != last_ru:
                if not _id_ok(ru):
                    raise ValueError
                last_ru = ru
            if walk:  # pragma: no cover - a msgpack build that lets bin/ext through
                _check_strict(body, 1 << 30, "event", 2)
            if pos != prev + 1:
                consecutive = prev == 0
            prev = pos
            ev.replayed = replayed
            ev.raw = raw
            append(ev)
        if tell() != used:  # bytes after an envelope's value (found again below)
            raise ValueError
    except (*_MALFORMED, errors.AgentbusError):
        _tls.u = None  # its buffer may hold the rest of a bad value
        raise _bad_record(buf, out) from None
    return out, consecutive


def _bad_record(buf: bytes, out: list[Event]) -> errors.InvalidEnvelope:
    """The error for a records frame that decode_chunk() refused: the first record that
    decode_stamp() / decode_envelope() refuse, with their error's field and message
    (``bytes`` for a length past the end), detail ``record`` its index and the events
    before it in ``good``."""
    n = len(buf)
    off = rec = 0
    field, why = "bytes", "a length runs past the end of the frame"
    u32 = _U32.unpack_from
    while off < n:
        if off + 4 > n:
            break
        sl = u32(buf, off)[0]
        s0 = off + 4
        if s0 + sl + 4 > n:
            break
        el = u32(buf, s0 + sl)[0]
        e0 = s0 + sl + 4
        if e0 + el > n:
            break
        try:
            decode_stamp(buf[s0:s0 + sl])
            decode_envelope(buf[e0:e0 + el])
        except errors.AgentbusError as x:
            field, why = x.field, x.message
            break
        off = e0 + el
        rec += 1
    else:
        rec, why = len(out), "malformed"  # not expected: these agree with the fast check
    e = errors.InvalidEnvelope(f"records frame: record {rec}: {why}"[:159], field=field,
                               details={"record": rec})
    e.good = out[:rec]  # type: ignore[attr-defined]
    return e


def pack_records(pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The inverse of split_records() (tests, tools)."""
    return b"".join(_U32.pack(len(s)) + s + _U32.pack(len(e)) + e for s, e in pairs)


def pack_batch(envelopes: list[bytes]) -> bytes:
    """The one frame of a packed publish (7.4): u32 BE length + envelope, back to back."""
    p = _U32.pack
    return b"".join(p(len(e)) + e for e in envelopes)


# -- topics ----------------------------------------------------------------------------------

def topic(thread: str | None = None, run: str | None = None) -> bytes:
    """The subscription prefix (6.1): every event, one thread, or one run."""
    t = b"ev\x00"
    if thread is None:
        return t
    t += thread.encode() + b"\x00"
    if run is None:
        return t
    return t + run.encode() + b"\x00"


HEARTBEAT_TOPIC = b"hb"


# -- keys ------------------------------------------------------------------------------------

def read_key_file(path: str, secret: bool = False) -> tuple[str, str]:
    """(public, secret) Z85 keys of a file written by ``agentbus keygen`` (secret "" for a
    public file).  InvalidArgument "PATH:LINE: what" for a malformed file, Unauthorized
    for a secret file readable by group or others, NotFound when it does not exist."""
    try:
        st = os.stat(path)
        with open(path, encoding="ascii") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise errors.NotFound(f"{path}: no such key file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise errors.IoError(f"{path}: {e}") from None
    keys: dict[str, str] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or parts[0] not in ("public-key", "secret-key") or len(parts[1]) != 40:
            raise errors.InvalidArgument(f"{path}:{i}: expected 'public-key|secret-key <40 Z85>'")
        keys[parts[0]] = parts[1]
    if "public-key" not in keys:
        raise errors.InvalidArgument(f"{path}: no public-key line")
    if "secret-key" in keys:
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise errors.Unauthorized(f"{path}: a secret key file readable by group or others")
        import zmq
        if zmq.curve_public(keys["secret-key"].encode()).decode() != keys["public-key"]:
            raise errors.InvalidArgument(f"{path}: the secret key does not match its public key")
    elif secret:
        raise errors.InvalidArgument(f"{path}: not a secret key file (NAME.key_secret)")
    return keys["public-key"], keys.get("secret-key", "")
