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
import stat
import struct
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


def _unpack(frame: Any, what: str) -> Any:
    try:
        return msgpack.unpackb(frame, raw=False, strict_map_key=True, use_list=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError,
            UnicodeDecodeError, TypeError) as e:
        raise errors.InvalidEnvelope(f"{what} is not one valid msgpack value: {e}"[:159]) from None


def decode_header(frame: Any) -> dict[str, Any]:
    """The header map of a frame from the broker; InvalidEnvelope if it is not one."""
    h = _unpack(frame, "header")
    if not isinstance(h, dict):
        raise errors.InvalidEnvelope("header is not a map")
    if not isinstance(h.get("op"), str):
        raise errors.InvalidEnvelope("header has no op", field="op")
    cid = h.get("cid", 0)
    if type(cid) is not int or cid < 0:
        raise errors.InvalidEnvelope("header cid is not a uint", field="cid")
    v = h.get("v")
    if v is not None and v != VERSION:
        raise errors.IncompatibleVersion(f"the broker sent v {v}", field="v",
                                         details={"ours": "1", "theirs": str(v)})
    return h


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


def decode_envelope(raw: bytes) -> dict[str, Any]:
    """An envelope's map, its header fields checked (section 4); InvalidEnvelope if bad."""
    env = _unpack(raw, "envelope")
    if not isinstance(env, dict) or env.keys() != _ENV_KEYS:
        raise errors.InvalidEnvelope("envelope is not a map of the seven fields of section 4")
    if env["v"] != VERSION:
        raise errors.IncompatibleVersion("envelope of another version", field="v")
    for k in ("seq", "epoch"):
        if type(env[k]) is not int or env[k] < 1:
            raise errors.InvalidEnvelope(f"envelope {k} is not a uint >= 1", field=k)
    if type(env["thread"]) is not str or type(env["run"]) is not str:
        raise errors.InvalidEnvelope("envelope ids are not strings", field="thread")
    if type(env["event"]) is not dict:
        raise errors.InvalidEnvelope("envelope event is not a map", field="event")
    return env


def decode_stamp(raw: bytes) -> dict[str, Any]:
    """A broker stamp (section 5); InvalidEnvelope if it is not one."""
    st = _unpack(raw, "stamp")
    if (not isinstance(st, dict) or type(st.get("pos")) is not int or st["pos"] < 1
            or type(st.get("time")) is not int):
        raise errors.InvalidEnvelope("stamp lacks pos or time")
    by = st.get("by")
    if by is not None and by != "broker":
        raise errors.InvalidEnvelope("stamp by is not \"broker\"", field="by")
    tp = st.get("tprev", 0)
    if "tprev" in st and (type(tp) is not int or tp < 0 or tp >= st["pos"]):
        raise errors.InvalidEnvelope("stamp tprev is not a uint below pos", field="tprev")
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


# The stamp as this broker writes it (section 5): {"pos": uint, "time": int} with pos in
# the smallest of uint 8/16/32/64 and time a uint 64, keyed by its length.  Bytes of one
# of these shapes are exactly that map; any other stamp goes through msgpack.
_STAMP_TIME = b"\xa4time\xcf"
_STAMPS = {5 + 1 + w + 6 + 8: (struct.Struct(f">6s{c}6sQ").unpack_from, b"\x82\xa3pos" + bytes([m]))
           for w, c, m in ((1, "B", 0xCC), (2, "H", 0xCD), (4, "I", 0xCE), (8, "Q", 0xCF))}


def _stamp(b: bytes) -> tuple[int, int, str | None, int | None]:
    """(pos, time, by, tprev) of a stamp in any valid encoding; ValueError if it is not one."""
    st = msgpack.unpackb(b)
    if type(st) is not dict:
        raise ValueError
    pos, tm, by, tp = st["pos"], st["time"], st.get("by"), st.get("tprev")
    if (type(pos) is not int or pos < 1 or type(tm) is not int
            or len(st) != 2 + (by is not None) + (tp is not None)
            or (by is not None and by != "broker")
            or (tp is not None and (type(tp) is not int or tp < 0 or tp >= pos))):
        raise ValueError
    return pos, tm, by, tp


_MALFORMED = (ValueError, KeyError, TypeError, struct.error, msgpack.ExtraData,
              msgpack.FormatError, msgpack.StackError, UnicodeDecodeError)


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
    a map of ``pos`` (uint >= 1), ``time`` (int) and at most ``by`` "broker", the
    envelope exactly one msgpack map of the seven fields of section 4 (v 1, ids strings,
    seq and epoch uints >= 1, ts an int, event a map), nothing after either value.
    """
    buf = frame if type(frame) is bytes else bytes(frame)
    n = len(buf)
    off = 0
    out: list[Event] = []
    append = out.append
    unpack = _U32.unpack_from
    unp = msgpack.unpackb
    new = Event.__new__
    prev = 0
    consecutive = True
    try:
        while off < n:
            sl, = unpack(buf, off)  # struct.error when fewer than 4 bytes are left
            s0 = off + 4
            off = s0 + sl
            el, = unpack(buf, off)  # also when the stamp ran past the end
            e0 = off + 4
            off = e0 + el
            if sl > 64 or off > n:
                raise ValueError
            fs = _STAMPS.get(sl)
            if fs is not None:
                pre, pos, mid, tm = fs[0](buf, s0)
                by = tp = None
                if pre != fs[1] or mid != _STAMP_TIME or pos < 1:
                    pos, tm, by, tp = _stamp(buf[s0:s0 + sl])
            else:
                pos, tm, by, tp = _stamp(buf[s0:s0 + sl])
            raw = buf[e0:off]
            env = unp(raw)
            if type(env) is not dict or len(env) != 7 or env["v"] != VERSION:
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
            if (type(seq) is not int or seq < 1 or type(ep) is not int or ep < 1
                    or type(body) is not dict or type(th) is not str or type(ru) is not str
                    or type(ts) is not int):
                raise ValueError
            if pos != prev + 1:
                consecutive = prev == 0
            prev = pos
            ev.replayed = replayed
            ev.raw = raw
            append(ev)
    except _MALFORMED:
        e = errors.InvalidEnvelope("records frame: a malformed record", field="bytes",
                                   details={"record": len(out)})
        e.good = out  # type: ignore[attr-defined]
        raise e from None
    return out, consecutive


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
