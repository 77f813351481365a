"""The package's framing against the byte-exact examples of PROTOCOL.md section 13 and the
JSON-safe rules of section 2 (no broker needed)."""

import math
import os
import re

import msgpack
import pytest

import agentbus
from agentbus import errors, wire
from conftest import ROOT

PROTOCOL = open(os.path.join(ROOT, "docs", "PROTOCOL.md")).read()


def spec_hex(after: str) -> bytes:
    """The first long hex line of PROTOCOL.md after the heading @p after."""
    sec = PROTOCOL[PROTOCOL.index(after):]
    return bytes.fromhex(re.search(r"^([0-9a-f]{40,})$", sec, re.M).group(1))


ENV_13_1 = spec_hex("### 13.1")


def test_envelope_bytes_are_the_spec_example():
    p = agentbus.AsyncProducer("tcp://127.0.0.1:1")
    p._use("t1", "r1", 1, 0)
    env = p.encode({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1",
                    "protocolVersion": "1.0"})
    # the ts differs: compare with the spec's bytes with our ts put in its place
    want = msgpack.unpackb(ENV_13_1)
    got = msgpack.unpackb(env)
    assert list(got) == list(want)  # same keys, same order
    want["ts"] = got["ts"]
    assert env == msgpack.packb(want)
    assert wire.decode_envelope(ENV_13_1)["seq"] == 1


def test_hello_bytes_are_the_spec_example():
    hello = wire.encode_header("hello", 1, {"versions": [1], "client": "demo"}, v=None)
    assert hello == spec_hex("### 13.2")


def test_packed_publish_header_and_frame():
    hdr = wire.encode_header("publish", 8, {"count": 1, "packed": True})
    assert hdr == spec_hex("### 13.4")
    frame = wire.pack_batch([ENV_13_1])
    assert frame[:4] == bytes.fromhex("0000006e") and frame[4:] == ENV_13_1


def test_replay_chunk_records_frame():
    sec = PROTOCOL[PROTOCOL.index("### 13.3"):]
    hexes = re.findall(r"^([0-9a-f]{40,})$", sec, re.M)
    header, records_head = bytes.fromhex(hexes[0]), bytes.fromhex(hexes[1])
    assert wire.decode_header(header)["bytes"] == 138
    frame = records_head + ENV_13_1
    (ev,) = wire.decode_records(frame, True)
    assert (ev.pos, ev.time_us, ev.seq, ev.run, ev.raw) == (42, 1700000000000123, 1, "r1", ENV_13_1)
    assert wire.pack_records([(records_head[4:24], ENV_13_1)]) == frame


def test_records_frame_truncated_keeps_whole_records():
    one = spec_hex("### 13.3")  # header hex first; build the frame instead
    rec = wire.pack_records([(wire.packb({"pos": 1, "time": 5}), ENV_13_1)])
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_records(rec + rec[:-1], False)
    assert ei.value.details["record"] == 1 and [e.pos for e in ei.value.good] == [1]
    bad_stamp = wire.pack_records([(wire.packb({"pos": 0, "time": 5}), ENV_13_1)])
    with pytest.raises(errors.InvalidEnvelope):
        wire.decode_records(bad_stamp, False)
    bad_env = wire.pack_records([(wire.packb({"pos": 1, "time": 5}), ENV_13_1[:-1])])
    with pytest.raises(errors.InvalidEnvelope):
        wire.decode_records(bad_env, False)
    assert one


@pytest.mark.parametrize("value,code,field", [
    ({"a": float("nan")}, "invalid_envelope", "a"),
    ({"a": [1, float("inf")]}, "invalid_envelope", "a/1"),
    ({"a": 1 << 64}, "invalid_envelope", "a"),
    ({"a": -(1 << 63) - 1}, "invalid_envelope", "a"),
    ({"a": b"bytes"}, "invalid_envelope", "a"),
    ({1: "x"}, "invalid_envelope", ""),
    ({"a/b": {"c~": set()}}, "invalid_envelope", "a~1b/c~0"),
    ({"s": "\ud800"}, "invalid_envelope", "s"),
])
def test_json_safe_refusals(value, code, field):
    with pytest.raises(errors.AgentbusError) as ei:
        wire.check_json_safe(value)
    assert ei.value.code == code and ei.value.field == field


def test_json_safe_accepts_the_edges():
    wire.check_json_safe({"u": (1 << 64) - 1, "i": -(1 << 63), "f": 1.5, "n": None,
                          "b": True, "l": [[], {}], "t": (1, 2), "s": "é"})
    deep = 0
    for _ in range(63):
        deep = [deep]
    wire.check_json_safe(deep)  # depth 64
    with pytest.raises(errors.TooLarge):
        wire.check_json_safe([deep])
    assert math.isfinite(1.0)


def test_error_map_to_typed_exception():
    e = errors.from_wire({"code": "gap", "message": "m", "retryable": False, "field": "seq",
                          "details": {"expected_seq": 3}}, cid=7)
    assert isinstance(e, errors.Gap) and e.cid == 7 and e.details == {"expected_seq": 3}
    e = errors.from_wire({"code": "unauthorized", "message": "no", "retryable": False})
    assert isinstance(e, errors.Unauthorized) and not e.retryable
    e = errors.from_wire({"code": "overloaded", "message": "x", "retryable": False})
    assert isinstance(e, errors.Overloaded) and e.retryable is False  # the map decides
    e = errors.from_wire({"code": "new_code", "message": "x", "retryable": True})
    assert type(e) is errors.AgentbusError and e.code == "new_code" and e.retryable
    assert isinstance(errors.from_wire({"code": 1}), errors.InvalidEnvelope)
    assert isinstance(errors.Timeout("x"), TimeoutError)


def test_every_code_of_the_spec_has_a_class():
    table = PROTOCOL[PROTOCOL.index("### 8.3 Codes"):PROTOCOL.index("## 9. Version")]
    codes = re.findall(r"^\| `([a-z_]+)` \|", table, re.M)
    assert len(codes) >= 23
    assert sorted(codes) == sorted(errors.BY_CODE)


def test_topics():
    assert wire.topic("a", "r1") == bytes.fromhex("6576006100723100")
    assert wire.topic("a") == b"ev\x00a\x00" and wire.topic() == b"ev\x00"


def test_version_follows_the_project():
    cm = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    assert re.search(r"project\(agentbus VERSION ([0-9.]+)", cm).group(1) == agentbus.__version__
    toml = open(os.path.join(ROOT, "python", "pyproject.toml")).read()
    assert f'version = "{agentbus.__version__}"' in toml


def test_decode_header_refusals():
    with pytest.raises(errors.InvalidEnvelope):
        wire.decode_header(b"\x91\x01")  # an array
    with pytest.raises(errors.InvalidEnvelope):
        wire.decode_header(msgpack.packb({"op": "x", "cid": 1}) + b"\x00")  # trailing byte
    with pytest.raises(errors.IncompatibleVersion):
        wire.decode_header(msgpack.packb({"op": "pong", "v": 2, "cid": 1}))


def _envelope(seq: int = 1, **over) -> bytes:
    env = {"v": 1, "thread": "t1", "run": "r1", "seq": seq, "epoch": 1, "ts": 5,
           "event": {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}}
    env.update(over)
    return msgpack.packb(env)


def _frame(stamps, env: bytes = ENV_13_1) -> bytes:
    return wire.pack_records([(s if isinstance(s, bytes) else msgpack.packb(s), env)
                              for s in stamps])


# Stamps in every width of pos (fixint, uint 8/16/32/64), the broker's time (uint 64) and
# others (int 64, small): the decoder's fixed-shape path and msgpack agree on each.
STAMP_CASES = [
    {"pos": 1, "time": 1700000000000123},
    {"pos": 200, "time": 1700000000000123},
    {"pos": 40000, "time": 1700000000000123},
    {"pos": 70000, "time": 1700000000000123},
    {"pos": 1 << 40, "time": 1700000000000123},
    {"pos": (1 << 63) - 1, "time": (1 << 63) - 1},  # a uint field stops at 2^63-1 (2)
    {"pos": 70000, "time": -(1 << 63)},
    {"pos": 70000, "time": -5},
    {"pos": 70000, "time": 7},
    {"time": 1700000000000123, "pos": 70000},
    {"pos": 70000, "time": 1700000000000123, "by": "broker"},
    {"pos": 70000, "time": 1700000000000123, "tprev": 0},
    {"pos": 70000, "time": 1700000000000123, "tprev": 69999},
    {"tprev": 5, "pos": 9, "time": 1, "by": "broker"},
]


@pytest.mark.parametrize("stamp", STAMP_CASES)
def test_stamp_shapes_decode_as_msgpack_does(stamp):
    (ev,) = wire.decode_records(_frame([stamp]), False)
    assert (ev.pos, ev.time_us, ev.by) == (stamp["pos"], stamp["time"], stamp.get("by"))
    assert ev.tprev == stamp.get("tprev")  # None: absent (replays, older brokers)
    assert wire.decode_stamp(msgpack.packb(stamp)).get("tprev") == stamp.get("tprev")


# The live stamps as the broker writes them (pos, time, tprev[, by]): every width of pos,
# every width of tprev up to it (fixint too), by "broker" or not - the fixed-shape path of
# decode_chunk() and msgpack agree; a tprev at or above pos, or out of its format, refused.
TPREV_CASES = [(pos, tp, by) for pos in (200, 40000, 70000, 1 << 40, (1 << 63) - 1)
               for tp in (0, 5, 127, 128, 199, 255, 256, 39999, 65535, 65536, 69999, 1 << 33,
                          (1 << 40) - 1, (1 << 63) - 2)
               if tp < pos for by in (False, True)]


def test_stamp_tprev_shapes_decode_as_msgpack_does():
    for pos, tp, by in TPREV_CASES:
        st = {"pos": pos, "time": 1700000000000123, "tprev": tp}
        if by:
            st["by"] = "broker"
        (ev,) = wire.decode_records(_frame([st]), False)
        assert (ev.pos, ev.time_us, ev.tprev, ev.by) == (pos, st["time"], tp,
                                                         "broker" if by else None), st
        raw = msgpack.packb(st)  # the broker's shape: the same bytes as msgpack's here
        bad = raw.replace(b"\xa5tprev", b"\xa5tprex")
        with pytest.raises(errors.InvalidEnvelope):
            wire.decode_records(_frame([bad]), False)
        with pytest.raises(errors.InvalidEnvelope):  # tprev not below pos, same shape
            wire.decode_records(_frame([{**st, "tprev": pos}]), False)
        if by:
            with pytest.raises(errors.InvalidEnvelope):
                wire.decode_records(_frame([raw.replace(b"broker", b"brokex")]), False)


def test_stamp_tprev_fixed_shape_out_of_range():
    """The bytes of a fixed shape whose values break section 5: pos or time past 2^63-1, a
    tprev byte that is not a positive fixint."""
    t = b"\xa4time" + T64
    for st in (b"\x83\xa3pos" + _u(0xCF, 8, 1 << 63) + t + b"\xa5tprev" + _u(0xCC, 1, 3),
               b"\x83\xa3pos" + _u(0xCE, 4, 9) + b"\xa4time" + _u(0xCF, 8, 1 << 63)
               + b"\xa5tprev\x03",
               b"\x83\xa3pos" + _u(0xCE, 4, 900) + t + b"\xa5tprev\xff",  # fixint -1
               b"\x83\xa3pos" + _u(0xCE, 4, 900) + t + b"\xa5tprev\xc3",  # true
               b"\x84\xa3pos" + _u(0xCE, 4, 900) + t + b"\xa5tprev\x03\xa2by\xa6brokex"):
        with pytest.raises(errors.InvalidEnvelope):
            wire.decode_records(_frame([st]), False)


def _u(marker: int, width: int, value: int) -> bytes:
    return bytes([marker]) + value.to_bytes(width, "big")


T64 = _u(0xCF, 8, 1700000000000123)


@pytest.mark.parametrize("stamp", [
    b"\x82\xa3pos" + _u(0xCC, 1, 0) + b"\xa4time" + T64,  # pos 0, each width
    b"\x82\xa3pos" + _u(0xCD, 2, 0) + b"\xa4time" + T64,
    b"\x82\xa3pos" + _u(0xCE, 4, 0) + b"\xa4time" + T64,
    b"\x82\xa3pos" + _u(0xCF, 8, 0) + b"\xa4time" + T64,
    b"\x82\xa3pos" + _u(0xCE, 4, 9) + b"\xa4tim\xa0" + T64,  # a near-miss key, same length
    b"\x82\xa3pos" + _u(0xCE, 4, 9) + b"\xa4time\xc3" + bytes(8),  # time true + junk
    b"\x82\xa3pos" + _u(0xCE, 4, 9) + b"\xa4time" + T64 + b"\xc0",  # trailing byte
    b"\x81\xa3pos" + _u(0xCE, 4, 9) + b"\xa4time" + T64,  # a map of 1 + extra data
    msgpack.packb({"pos": 9, "time": 1.5}),
    msgpack.packb({"pos": 9}),
    msgpack.packb({"pos": True, "time": 5}),
    msgpack.packb({"pos": 9, "time": 5, "by": "producer"}),
    msgpack.packb({"pos": 9, "time": 5, "by": None}),
    msgpack.packb({"pos": 9, "time": 5, "extra": 1}),
    msgpack.packb({"pos": 9, "time": 5, "tprev": 9}),  # tprev below pos only
    msgpack.packb({"pos": 9, "time": 5, "tprev": -1}),
    msgpack.packb({"pos": 9, "time": 5, "tprev": None}),
    msgpack.packb({"pos": 9, "time": 5, "tprev": "3"}),
    msgpack.packb([9, 5]),
    msgpack.packb({"pos": 9, "time": 5, "p": "x" * 60}),  # above 64 bytes
])
def test_malformed_stamps_are_typed_errors(stamp):
    good = msgpack.packb({"pos": 70000, "time": 5})
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_records(_frame([good, stamp]), False)
    assert ei.value.details["record"] == 1 and len(ei.value.good) == 1


@pytest.mark.parametrize("env", [
    _envelope(ts=1.5), _envelope(ts=None), _envelope(seq=0), _envelope(epoch=True),
    _envelope(thread=7), _envelope(event=[1]), _envelope(v=2), _envelope() + b"\xc0",
    _envelope()[:-1], msgpack.packb([1, 2, 3, 4, 5, 6, 7]), b"\xc1",
])
def test_malformed_envelopes_are_typed_errors(env):
    good = {"pos": 70000, "time": 5}
    frame = wire.pack_records([(msgpack.packb(good), _envelope()),
                               (msgpack.packb({"pos": 70001, "time": 5}), env)])
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_records(frame, True)
    assert ei.value.details["record"] == 1 and [e.pos for e in ei.value.good] == [70000]


@pytest.mark.parametrize("positions,consecutive", [
    ([7], True), ([70000, 70001, 70002], True), ([1, 2], True), ([5, 7, 8], False),
    ([5, 6, 8], False), ([5, 5], False), ([6, 5], False), ([1, 3, 4, 5], False),
])
def test_decode_chunk_says_whether_positions_are_consecutive(positions, consecutive):
    evs, cons = wire.decode_chunk(_frame([{"pos": p, "time": 5} for p in positions]), False)
    assert [e.pos for e in evs] == positions and cons is consecutive
    assert wire.decode_chunk(b"", False) == ([], True)


def test_envelope_shapes_decode_as_msgpack_does():
    """Every record equals msgpack's reading of its envelope, whichever way it is read:
    seq, epoch and ts in each width, runs alternating, keys in another order, a longer
    str header for the same thread, and ts negative or a signed int."""
    envs = []
    for i, n in enumerate([1, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32,
                           (1 << 63) - 1]):
        envs.append(_envelope(seq=n, epoch=n, ts=n))
        envs.append(_envelope(seq=i + 1, run="r2", thread="t2"))
        envs.append(_envelope(seq=i + 1, run="r3"))  # same thread, the run's last byte
    envs.append(_envelope(ts=-1))
    envs.append(_envelope(ts=-(1 << 40)))
    reordered = msgpack.unpackb(_envelope(seq=9))
    envs.append(msgpack.packb(dict(reversed(list(reordered.items())))))
    envs.append(b"\x87\xa1v\x01\xa6thread\xd9\x02t1" + _envelope(seq=3)[14:])  # str 8 header
    envs.append(b"\x87\xa1v\x01\xa6thread\xa2t1\xa3run\xa2r1\xa3seq\xd0\x05"  # int 8 seq
                + _envelope(seq=5)[_envelope(seq=5).index(b"\xa5epoch"):])
    frame = wire.pack_records([(msgpack.packb({"pos": k + 1, "time": 5}), e)
                               for k, e in enumerate(envs)])
    evs = wire.decode_records(frame, False)
    assert len(evs) == len(envs)
    for ev, raw in zip(evs, envs):
        want = msgpack.unpackb(raw)
        assert (ev.thread, ev.run, ev.seq, ev.epoch, ev.ts, ev.body, ev.raw) == (
            want["thread"], want["run"], want["seq"], want["epoch"], want["ts"],
            want["event"], raw)


@pytest.mark.parametrize("tail", [
    b"\xa3seq\x01\xa5epoch\x01\xa2ts\x05\xa5event\x80\xc0",  # a byte after the event map
    b"\xa3seq\x01\xa5epoch\x01\xa2ts\x05\xa5event",  # no event map
    b"\xa3seq\x01\xa5epoch\x01\xa2ts\x05\xa5event\x81\xa1a",  # event map cut short
    b"\xa3seq\x01\xa5epoch\x01\xa2ts\x05\xa5evenu\x80",  # a wrong key, same length
    b"\xa3seq\x01\xa5epoch\x01\xa2ts\x05\xa5event\x90",  # event an array
    b"\xa3seq\x00\xa5epoch\x01\xa2ts\x05\xa5event\x80",  # seq 0
    b"\xa3seq\x01\xa5epoch\xcd\x00",  # cut inside epoch
    b"\xa3seq\xcf\x00\x00",  # cut inside seq
    b"\xa3seq\x01\xa5epoch\x01\xa2ts\xcb" + bytes(8) + b"\xa5event\x80",  # ts a float
])
def test_malformed_envelope_tails_after_a_good_record_are_typed_errors(tail):
    head = b"\x87\xa1v\x01\xa6thread\xa2t1\xa3run\xa2r1"
    frame = wire.pack_records([(msgpack.packb({"pos": 1, "time": 5}), _envelope()),
                               (msgpack.packb({"pos": 2, "time": 5}), head + tail)])
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_records(frame, False)
    assert ei.value.details["record"] == 1 and [e.pos for e in ei.value.good] == [1]


def test_error_map_within_its_byte_bounds():
    """A worker's error map stays within PROTOCOL.md 8.1's bytes whatever the text: a cut
    ends on a whole UTF-8 character, a field path is cut back to a whole segment."""
    field = "/".join(["seg%02d" % i for i in range(20)])  # 119 bytes
    e = errors.Internal("é" * 200, field=field,
                        details={"k" * 20: "v" * 40, "n": 5, "ünï": "ō" * 30, "x": 1})
    w = e.to_wire()
    msg = w["message"].encode()
    assert len(msg) <= 159 and w["message"] == "é" * (len(msg) // 2)  # whole characters
    f = w["field"]
    assert len(f.encode()) <= 63 and field.startswith(f) and field[len(f)] == "/"
    assert len(w["details"]) == 3  # the first three
    for k, v in w["details"].items():
        assert 1 <= len(k.encode()) <= 14
        assert not isinstance(v, str) or len(v.encode()) <= 23
    assert w["details"]["n"] == 5 and w["details"]["k" * 14] == "v" * 23
    assert w["details"]["ünï"] == "ō" * 11  # 22 bytes: a twelfth would not fit 23
    # short ones are sent as they are
    e = errors.Conflict("short", field="event/seq", details={"seq": 3})
    assert e.to_wire() == {"code": "conflict", "message": "short", "retryable": False,
                           "field": "event/seq", "details": {"seq": 3}}


def test_chunk_of_mixed_stamp_shapes():
    """decode_chunk() reads a record at once when its stamp has the previous one's shape:
    shapes that change (widths, tprev, by, a slow-path one) and a same-length stamp of
    another shape decode as each alone does; a bad one after good ones of its shape is
    refused at its index; a short last record after a long stamp is read."""
    T = 1700000000000123
    seq = [{"pos": 300, "time": T}, {"pos": 301, "time": T}, {"pos": 1 << 40, "time": T},
           {"pos": 1 << 40 | 1, "time": T}, {"pos": 70000, "time": T, "tprev": 5},
           {"pos": 70001, "time": T}, {"pos": 70002, "time": 5}, {"pos": 70003, "time": T},
           {"pos": 200, "time": T, "tprev": 3},  # 28 bytes, the length of a uint 64 pos
           {"pos": 1 << 40 | 2, "time": T}, {"pos": 1 << 40 | 3, "time": T, "by": "broker"},
           {"pos": 9, "time": T}]
    evs, _ = wire.decode_chunk(_frame(seq), False)
    assert [(e.pos, e.time_us, e.tprev, e.by) for e in evs] == [
        (s["pos"], s["time"], s.get("tprev"), s.get("by")) for s in seq]
    bad = b"\x82\xa3pos" + _u(0xCD, 2, 0) + b"\xa4time" + T64  # pos 0, the shape of 300
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_chunk(_frame(seq[:2] + [bad] + seq[2:]), False)
    assert ei.value.details["record"] == 2 and len(ei.value.good) == 2
    small = msgpack.packb({"v": 1, "thread": "t", "run": "r", "seq": 1, "epoch": 1, "ts": 0,
                           "event": {}})
    long_stamp = {"pos": 1 << 40, "time": T, "tprev": (1 << 40) - 1, "by": "broker"}
    frame = wire.pack_records([(msgpack.packb(long_stamp), ENV_13_1),
                               (msgpack.packb({"pos": (1 << 40) + 1, "time": T}), small)])
    assert [e.pos for e in wire.decode_chunk(frame, False)[0]] == [1 << 40, (1 << 40) + 1]
