"""The rules of section 2 and 3 for single msgpack values, shared by ``wire`` and ``_fields``.

What it holds: the protocol constants (VERSION, the default and required limits, the
integer bounds), packing (``packb``), the JSON-safe check of a value a client sends
(``check_json_safe``), the id check (``check_id``, section 3), JSON-pointer escaping of a
key (``_esc``) and the strict unpacking of one frame from the broker (``_unpack``,
``_check_strict``, ``_map_len``).  ``wire`` re-exports the public names; import them from
there.

Invariants: no I/O and no import of another agentbus module but ``errors`` (so ``wire``
and ``_fields`` both import it without a cycle); a value refused is a typed
``AgentbusError`` naming its path (InvalidEnvelope, TooLarge past a depth), never a crash;
``_unpack`` returns exactly one value with no bin or ext, string keys unique in their map,
valid UTF-8 and finite floats.
"""

from __future__ import annotations

import math
from typing import Any

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
            path = _dup_path(b)
            raise errors.InvalidEnvelope(f"{what}: key {e.key!r} appears twice in a map"[:159],
                                         field=path) from None
        _check_strict(val, max_depth, "", 1)
    elif b"\xcb" in b or b"\xca" in b:  # maybe a float: NaN and infinities are refused
        _check_strict(val, max_depth, "", 1)
    return val


class _Pairs(list):
    """A map read pair by pair, repeats kept (for naming where a key repeats)."""


def _dup_path(b: bytes) -> str:
    """The path (section 8.2) of the first key that repeats in a map of @p b, maps taken in
    the order they end, as _pairs() meets them; an error path only."""
    def walk(v: Any, path: str) -> str | None:
        pre = path + "/" if path else ""
        if type(v) is _Pairs:
            for k, x in v:
                got = walk(x, pre + _esc(k))
                if got is not None:
                    return got
            seen: set = set()
            for k, _ in v:
                if k in seen:
                    return pre + _esc(k)
                seen.add(k)
        elif type(v) is list:
            for i, x in enumerate(v):
                got = walk(x, f"{pre}{i}")
                if got is not None:
                    return got
        return None
    try:
        val = msgpack.unpackb(b, raw=False, strict_map_key=True, object_pairs_hook=_Pairs,
                              **_STRICT_KW)
    except _MALFORMED_MP:
        return ""
    return walk(val, "") or ""


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
