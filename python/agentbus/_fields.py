"""The field tables of the messages a client receives (PROTOCOL.md sections 5, 6.3, 7, 8)
and the strict check of a header frame from the broker (``decode_header``).

What it holds: one checker per field type (``_uint``, ``_str``, ``_id``, ``_obj``,
``_list``, ``_error_map`` ...), ``REPLY_FIELDS`` (by op, the fields of every message a
client receives besides op, v and cid) and ``decode_header``.  ``wire`` re-exports
``decode_header`` and ``REPLY_FIELDS``, and uses the checkers for envelopes and stamps.

Invariants: a checker is f(value, path) -> None that raises InvalidEnvelope (TooLarge
where section 8 says so) naming the field path; a table maps a key to (required,
checker) and a key not in it is an unknown field (section 2), refused naming it; a
header is checked version first (IncompatibleVersion), then op (Unsupported for one a
client does not receive), then every field.  No I/O; imports only ``errors`` and
``_msgpack``.
"""

from __future__ import annotations

from typing import Any

from . import errors
from ._msgpack import (FIELD_UINT_MAX, INT_MIN, REQUIRED_LIMITS, VERSION, _check_strict, _esc,
                       _unpack, check_id)


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
