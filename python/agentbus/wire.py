"""Framing of agentbus protocol version 1 (docs/PROTOCOL.md), with no I/O.

Everything here turns Python values into frames and frames into values: headers (7.1),
event envelopes (4), broker stamps (5), records frames (1.2, 7.6), topics (6.1), the
JSON-safe check (2) and key files.  The async connection (``_conn``) and through it every
blocking class use these functions only, so the protocol is written once.  Two modules
below it hold parts and are re-exported here, so ``wire`` stays the one import: ``_msgpack``
(the constants, packb, check_json_safe, check_id and the strict unpacking of section 2) and
``_fields`` (the field tables of the messages a client receives and decode_header).

Invariants: an encoded envelope's keys come in the order of PROTOCOL.md section 4; a value
that is not JSON-safe is refused before anything is sent, with a typed error naming its
path; a malformed frame from the broker is an ``InvalidEnvelope``, never a crash.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import threading
from typing import Any, Iterable

import msgpack

from . import errors
from ._fields import _bad, _int, _map, _uint, _uint1
from ._fields import REPLY_FIELDS, decode_header  # noqa: F401 - re-exported
from ._msgpack import (FIELD_UINT_MAX, INT_MIN, VERSION, _STRICT_KW, _WALK_BIN, _check_strict,
                       _esc, _map_len, _unpack, check_id, packb)
from ._msgpack import (DEFAULT_LIMITS, REQUIRED_LIMITS, UINT_MAX, VERSIONS,  # noqa: F401
                       check_json_safe)  # re-exported: wire is where clients import them

_U32 = struct.Struct(">I")


# -- headers -------------------------------------------------------------------------------
#
# decode_header, and the table of every message a client receives it checks, are in _fields.

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
    either value.  Not checked here: a key twice, a non-finite float and depth *inside
    the event body*.  Not an oversight: the body is the producer's bytes, which the broker
    never rewrites (PROTOCOL.md 4) and refused at publish if it broke any of these (it
    parses every envelope it accepts in full, section 2; its own events it encodes
    itself), so walking each body again would look, on every event, for what cannot be
    there -- at about 75 % more per event (1.6 -> 2.9 us for a 300-byte event in replay
    chunks, python/README.md "Subscriber").  test_strict.py holds the broker to that
    premise; decode_envelope() checks the body in full.  A malformed record raises
    InvalidEnvelope naming its field (``bytes`` for a length), detail ``record`` its index
    and ``good`` the events before it.
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
