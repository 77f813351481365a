"""PROTOCOL.md section 2 "Strict messages" on what the package receives from the broker:
each rule refused by the wire decoders with InvalidEnvelope naming the field (no broker
needed; the rest of the suite shows that every frame a real broker sends still decodes),
and that a real broker refuses at publish what the subscriber's decoder leaves to it."""

import asyncio

import msgpack
import pytest

import agentbus
from agentbus import errors, wire

BIG = 1 << 63  # one above the largest uint/int field value


def _envelope(**over) -> dict:
    env = {"v": 1, "thread": "t1", "run": "r1", "seq": 1, "epoch": 1, "ts": 5,
           "event": {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}}
    env.update(over)
    return env


def _chunk_error(stamp: bytes, env: bytes) -> errors.InvalidEnvelope:
    good = (msgpack.packb({"pos": 1, "time": 5}), msgpack.packb(_envelope()))
    frame = wire.pack_records([good, (stamp, env)])
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_chunk(frame, False)
    assert ei.value.details["record"] == 1 and [e.pos for e in ei.value.good] == [1]
    return ei.value


# -- envelopes (section 4): decode_envelope() and the subscriber's decode_chunk() ----------

ENV_BAD = [
    (msgpack.packb(_envelope(seq=BIG)), "seq"),
    (msgpack.packb(_envelope(epoch=BIG)), "epoch"),
    (msgpack.packb(_envelope(ts=BIG)), "ts"),
    (msgpack.packb(_envelope(thread="")), "thread"),
    (msgpack.packb(_envelope(run="")), "run"),
    (msgpack.packb(_envelope(thread="a\x01b")), "thread"),
    (msgpack.packb(_envelope(run="r" * 257)), "run"),
    (msgpack.packb(_envelope(v=True)), "v"),
    (msgpack.packb({**_envelope(), "extra": 1}), "extra"),
    # the event's body holding a bin or an ext value (section 2: no bin, no ext)
    (msgpack.packb(_envelope(event={"type": "CUSTOM", "value": b"\x00"}), use_bin_type=True),
     "event"),
    (msgpack.packb(_envelope(event={"type": "CUSTOM", "value": msgpack.ExtType(5, b"x")})),
     "event"),
    (msgpack.packb(_envelope(event={"type": "CUSTOM", "value": msgpack.Timestamp(1)})),
     "event"),
]


@pytest.mark.parametrize("raw,field", ENV_BAD)
def test_envelope_refused_naming_the_field(raw, field):
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_envelope(raw)
    assert ei.value.field.startswith(field)
    e = _chunk_error(msgpack.packb({"pos": 2, "time": 5}), raw)
    assert e.field.startswith(field)


def test_envelope_with_a_key_twice_is_refused():
    """Seven entries of which one key twice: msgpack-python keeps the last one."""
    body = msgpack.packb(_envelope())
    # {"v":1, "v":1, thread, run, seq, epoch, ts, event}: map of 8, 7 distinct keys
    raw = b"\x88\xa1v\x01" + body[1:]
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_envelope(raw)
    assert ei.value.field == "v"
    _chunk_error(msgpack.packb({"pos": 2, "time": 5}), raw)


def test_envelope_body_nan_and_repeated_key_refused_by_decode_envelope():
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_envelope(msgpack.packb(_envelope(event={"type": "X", "n": float("nan")})))
    assert ei.value.field == "event/n"
    raw = msgpack.packb(_envelope(event={"type": "X", "a": 1}))
    raw = raw.replace(b"\x82\xa4type\xa1X\xa1a\x01", b"\x82\xa1a\x00\xa1a\x01")
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_envelope(raw)
    assert ei.value.field == "event/a"  # its path, as the broker names it (was the bare key)
    nested = msgpack.packb(_envelope(event={"type": "X", "x": [1, {"~": 1, "b": 2}]}))
    nested = nested.replace(b"\xa1b\x02", b"\xa1~\x02")
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_envelope(nested)
    assert ei.value.field == "event/x/1/~0"


def _custom_body(value: bytes, extra: bytes = b"") -> bytes:
    """The msgpack of {"type": "CUSTOM", "name": "n", "value": <value>} + @p extra pairs."""
    p = msgpack.packb
    return (bytes([0x83 + (1 if extra else 0)]) + p("type") + p("CUSTOM") + p("name") + p("n")
            + p("value") + value + extra)


BODY_NOT_RECHECKED = [  # what decode_chunk() does not look for inside the event body
    ("a key twice", _custom_body(b"\x01", msgpack.packb("value") + b"\x02"), "invalid_envelope"),
    ("NaN", _custom_body(b"\xcb\x7f\xf8" + bytes(6)), "invalid_envelope"),
    ("infinity (float 32)", _custom_body(b"\xca\x7f\x80\x00\x00"), "invalid_envelope"),
    ("depth 70", _custom_body(b"\x91" * 66 + b"\x01"), "too_large"),
]


@pytest.mark.parametrize("what,body,code", BODY_NOT_RECHECKED)
def test_the_broker_refuses_the_bodies_decode_chunk_does_not_recheck(broker, what, body, code):
    """decode_chunk() (every event a subscriber receives) leaves a key twice, NaN and depth
    inside the event body to the broker (python/README.md "Subscriber"): the envelope is
    the producer's bytes, never rewritten (PROTOCOL.md 4), and the broker refuses such a
    body at publish.  This is that premise, against a real broker: if it failed, the
    decoder would have to check the body again.  decode_envelope() checks it (above)."""
    t = r = "strict-body-" + what.replace(" ", "-")

    async def go():
        async with agentbus.AsyncProducer(broker.endpoint) as p:
            await p.claim(t, r)
            await p.publish({"type": "RUN_STARTED", "threadId": t, "runId": r,
                             "protocolVersion": "1.0"})
            await p.flush()
            env = p.encode({"type": "CUSTOM", "name": "n", "value": 1})
            good = _custom_body(b"\x01")
            assert env.endswith(b"\xa5event" + good)
            env = env[:-len(good)] + body
            return env, (await p.conn.request("publish", {"count": 1}, [env]))["results"]

    env, (res,) = asyncio.run(go())
    assert res["status"] == "rejected" and res["error"]["code"] == code, res
    assert res["error"]["field"].startswith("event/value"), res
    with pytest.raises(errors.AgentbusError):  # the full check, off the hot path
        wire.decode_envelope(env)


# -- stamps (section 5) -------------------------------------------------------------------

STAMP_BAD = [
    ({"pos": BIG, "time": 5}, "pos"),
    ({"pos": 9, "time": BIG}, "time"),
    ({"pos": 9, "time": 5, "tprev": BIG}, "tprev"),
    ({"pos": 9, "time": 5, "extra": 1}, "extra"),
    ({"pos": 9, "time": 5, "by": b"broker"}, "by"),
]


@pytest.mark.parametrize("stamp,field", STAMP_BAD)
def test_stamp_refused_naming_the_field(stamp, field):
    raw = msgpack.packb(stamp, use_bin_type=True)
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_stamp(raw)
    assert ei.value.field == field
    assert _chunk_error(raw, msgpack.packb(_envelope())).field == field


def test_stamp_with_a_key_twice_is_refused():
    raw = b"\x83\xa3pos\x09\xa4time\x05\xa3pos\x0a"  # pos twice: msgpack keeps 10
    with pytest.raises(errors.InvalidEnvelope):
        wire.decode_stamp(raw)
    _chunk_error(raw, msgpack.packb(_envelope()))


def test_stamp_of_the_broker_fast_path_out_of_range():
    """The fixed-shape path: pos and time as uint 64 above 2^63-1."""
    t64 = b"\xcf" + (1700000000000123).to_bytes(8, "big")
    for raw, field in ((b"\x82\xa3pos\xcf" + BIG.to_bytes(8, "big") + b"\xa4time" + t64, "pos"),
                       (b"\x82\xa3pos\xce" + (9).to_bytes(4, "big") + b"\xa4time\xcf"
                        + BIG.to_bytes(8, "big"), "time")):
        assert _chunk_error(raw, msgpack.packb(_envelope())).field == field


# -- headers (section 7.1), heartbeats (6.3), replies (7) ----------------------------------

def _hdr(op="pong", **fields) -> dict:
    h = {"op": op, "v": 1, "cid": 3}
    h.update(fields)
    return {k: v for k, v in h.items() if v is not None}


PONG = {"instance": "i-1", "head_pos": 5}
HB = {"op": "heartbeat", "v": 1, "instance": "i-1", "head_pos": 5, "time": 7}
HEAD = {"thread": "t", "run": "r", "last_seq": 1, "epoch": 1, "status": "active",
        "last_pos": 3}

HEADER_BAD = [
    (_hdr(cid=None, **PONG), "cid"),  # a reply without cid (it read as 0)
    (_hdr(cid=BIG, **PONG), "cid"),
    (_hdr(v=None, **PONG), "v"),
    (_hdr(op=None, **PONG), "op"),
    (_hdr(**PONG, extra=1), "extra"),  # an unknown field
    (_hdr(instance="i-1"), "head_pos"),  # a required one missing
    (_hdr(instance="", head_pos=5), "instance"),
    (_hdr(instance="i", head_pos=BIG), "head_pos"),
    (_hdr(instance="i", head_pos=-1), "head_pos"),
    ({**HB, "cid": 0}, "cid"),  # a heartbeat has no cid
    ({**HB, "extra": 1}, "extra"),
    ({k: v for k, v in HB.items() if k != "time"}, "time"),
    ({**HB, "v": None}, "v"),
    (_hdr("claimed", thread="", run="r", epoch=1, last_seq=0, status="unknown"), "thread"),
    (_hdr("claimed", thread="t", run="r", epoch=0, last_seq=0, status="unknown"), "epoch"),
    (_hdr("claimed", thread="t", run="r", epoch=1, last_seq=0, status="gone"), "status"),
    (_hdr("heads_reply", head_pos=1, heads=[{**HEAD, "x": 1}]), "heads/0/x"),
    (_hdr("heads_reply", head_pos=1, heads=[{**HEAD, "run": ""}]), "heads/0/run"),
    (_hdr("published", results=[{"seq": 1, "status": "accepted", "pos": BIG}]),
     "results/0/pos"),
    (_hdr("published", results=[{"seq": 1, "status": "accepted", "pos": 2, "x": 1}]),
     "results/0/x"),
    (_hdr("published", results=[{"seq": 1, "status": "accepted"}]), "results/0/pos"),
    (_hdr("published", results=[{"seq": 1, "status": "rejected", "error": {
        "code": "gap", "message": "m", "retryable": False, "extra": 1}}]),
     "results/0/error/extra"),
    (_hdr("error", error={"code": "no_such_code", "message": "m", "retryable": False}),
     "error/code"),
    (_hdr("replay_chunk", count=1, bytes=10, more=1), "more"),
    (_hdr("replay_end", head_pos=1, events=0, heads=[], extra=True), "extra"),
    (_hdr("welcome", instance="i", event_endpoint="tcp://x", caps={},
          limits={**wire.DEFAULT_LIMITS, "max_other": 1}), "limits/max_other"),
    (_hdr("stats_reply", instance="i"), "version"),
    (_hdr("left", extra=1), "extra"),
    (_hdr("nonesuch"), "op"),
]


@pytest.mark.parametrize("h,field", HEADER_BAD)
def test_header_refused_naming_the_field(h, field):
    with pytest.raises((errors.InvalidEnvelope, errors.Unsupported)) as ei:
        wire.decode_header(msgpack.packb(h))
    assert ei.value.field == field
    if type(h.get("cid")) is int and h["cid"] < BIG and h.get("op") != "heartbeat":
        assert ei.value.cid == h["cid"]  # so the waiting request gets it (_conn)


@pytest.mark.parametrize("raw,field", [
    (msgpack.packb({"op": "pong", "v": 1, "cid": 3, "instance": b"i", "head_pos": 5},
                   use_bin_type=True), None),  # bin
    (msgpack.packb({"op": "pong", "v": 1, "cid": 3, "instance": msgpack.ExtType(1, b"i"),
                    "head_pos": 5}), None),  # ext
    (b"\x85\xa2op\xa4pong\xa1v\x01\xa3cid\x03\xa8instance\xa1i\xa3cid\x04", "cid"),  # key twice
    (msgpack.packb({"op": "snapshot_reply", "v": 1, "cid": 3, "thread": "t",
                    "snapshot": {"x": float("inf")}}), "snapshot/x"),  # not finite
])
def test_header_not_json_safe_refused(raw, field):
    with pytest.raises(errors.InvalidEnvelope) as ei:
        wire.decode_header(raw)
    if field:
        assert ei.value.field == field


def test_good_headers_still_decode():
    """Forward compatibility only where PROTOCOL.md allows it: a welcome without the two
    later limits (7.2), a stats_reply without its optional fields (7.18), an error with no
    v (7.1), a capability of a name this client does not know (10)."""
    lim = dict(wire.DEFAULT_LIMITS)
    for h in (HB, _hdr(**PONG), _hdr(cid=0, **PONG),
              _hdr("welcome", instance="i", event_endpoint="tcp://x", limits=lim,
                   caps={"someday": "available"}),
              _hdr("welcome", instance="i", event_endpoint="tcp://x", caps={},
                   limits={**lim, "max_publish_bytes": 5, "max_replay_bytes": 9},
                   access={"name": "k", "roles": {"admin": True, "observe": ["a/"]}}),
              _hdr("error", v=None, error={"code": "gap", "message": "m", "retryable": False,
                                           "field": "seq", "details": {"expected_seq": 3}}),
              _hdr("published", results=[{"seq": 1, "status": "accepted", "pos": 2},
                                         {"seq": 2, "status": "rejected", "error": {
                                             "code": "gap", "message": "m",
                                             "retryable": False}}]),
              _hdr("heads_reply", head_pos=1, heads=[HEAD, {**HEAD, "status": "finished",
                                                            "outcome": "success"}]),
              _hdr("snapshot_reply", thread="t", snapshot={"a": [1.5, {"b": None}]}),
              _hdr("left")):
        assert wire.decode_header(msgpack.packb(h)) == h


# -- a refused message in the client: the waiting request fails, a bad heartbeat is ignored --

class _FakeBroker:
    """A ROUTER (command endpoint) and a PUB (event endpoint) on loopback: welcome to
    hello, then @p pong(cid) (header bytes) to every ping; @p heartbeats (frames) published
    over and over until stopped."""

    def __init__(self, pong=None, heartbeats=()):
        import threading
        import zmq
        self.ctx = zmq.Context()
        self.rt = self.ctx.socket(zmq.ROUTER)
        self.pub = self.ctx.socket(zmq.PUB)
        for s in (self.rt, self.pub):
            s.linger = 0
        self.endpoint = f"tcp://127.0.0.1:{self.rt.bind_to_random_port('tcp://127.0.0.1')}"
        self.events = f"tcp://127.0.0.1:{self.pub.bind_to_random_port('tcp://127.0.0.1')}"
        self.pong, self.heartbeats, self.stop = pong, list(heartbeats), False
        self.th = threading.Thread(target=self.loop)
        self.th.start()

    def loop(self):
        lim = dict(wire.DEFAULT_LIMITS)
        while not self.stop:
            for hb in self.heartbeats:
                self.pub.send_multipart([wire.HEARTBEAT_TOPIC, hb])
            if not self.rt.poll(20):
                continue
            ident, hdr, *_ = self.rt.recv_multipart()
            h = msgpack.unpackb(hdr)
            if h["op"] == "hello":
                self.rt.send_multipart([ident, msgpack.packb({
                    "op": "welcome", "v": 1, "cid": h["cid"], "instance": "i-1",
                    "event_endpoint": self.events, "limits": lim, "caps": {}})])
            elif h["op"] == "ping" and self.pong is not None:
                self.rt.send_multipart([ident, self.pong(h["cid"])])

    def close(self):
        self.stop = True
        self.th.join()
        self.rt.close(0)
        self.pub.close(0)
        self.ctx.term()


def _ping_with(pong, timeout=3.0):
    import asyncio
    import time
    import agentbus
    fb = _FakeBroker(pong)

    async def go():
        c = agentbus.AsyncConnection(fb.endpoint, timeout=timeout)
        try:
            await c.connect()
            t0 = time.monotonic()
            try:
                await c.request("ping")
            except errors.AgentbusError as e:
                return e, time.monotonic() - t0, c.stats, dict(c._waiting)
            return None, time.monotonic() - t0, c.stats, dict(c._waiting)
        finally:
            await c.close()
    try:
        return asyncio.run(go())
    finally:
        fb.close()


def test_a_reply_refused_by_the_decoder_fails_its_request():
    """A reply header with the cid of a waiting request that the strict decoder refuses
    (an unknown field, a missing one, a uint out of range) fails that request with the
    decoder's error naming the field, at once: not a Timeout after the whole wait."""
    for extra, field in (({"bogus": 1}, "bogus"), ({"head_pos": BIG}, "head_pos"),
                         ({"head_pos": None}, "head_pos")):
        def pong(cid, extra=extra):
            return msgpack.packb({"op": "pong", "v": 1, "cid": cid, "instance": "i-1",
                                  "head_pos": 3, **extra})
        e, took, stats, waiting = _ping_with(pong)
        assert isinstance(e, errors.InvalidEnvelope), e
        assert e.field == field and e.cid == 2 and took < 2.0
        assert stats.errors == 1 and stats.dropped == 0 and not waiting


def test_a_refused_reply_without_a_valid_cid_is_dropped():
    """Without a valid cid (absent, or out of range) nobody is waiting for it: dropped and
    counted, the request times out."""
    for pong in (lambda cid: msgpack.packb({"op": "pong", "v": 1, "instance": "i-1",
                                            "head_pos": 3}),
                 lambda cid: msgpack.packb({"op": "pong", "v": 1, "cid": BIG,
                                            "instance": "i-1", "head_pos": 3})):
        e, took, stats, waiting = _ping_with(pong, timeout=0.5)
        assert isinstance(e, errors.Timeout), e
        assert stats.dropped >= 1 and stats.errors == 0


def test_first_heartbeat_skips_heartbeats_that_break_the_rules():
    """Connecting waits for a heartbeat of the instance (6.2): one that is not msgpack, of
    another version, or breaks the strict rules (a cid, an unknown field) is ignored, not
    raised out of connect; the good one that follows is taken."""
    import asyncio
    import agentbus
    good = msgpack.packb({"op": "heartbeat", "v": 1, "instance": "i-1", "head_pos": 0,
                          "time": 5})
    bad = [b"\xc1", msgpack.packb([1]),
           msgpack.packb({"op": "heartbeat", "v": 2, "instance": "i-1", "head_pos": 0,
                          "time": 5}),
           msgpack.packb({"op": "heartbeat", "v": 1, "cid": 0, "instance": "i-1",
                          "head_pos": 0, "time": 5}),
           msgpack.packb({"op": "heartbeat", "v": 1, "instance": "i-1", "head_pos": 0,
                          "time": 5, "extra": 1})]

    for b in bad:
        fb = _FakeBroker(heartbeats=[b])

        async def go(fb=fb):
            s = agentbus.AsyncSubscriber(fb.endpoint, after_pos=0, timeout=0.6,
                                         silence=0.6)
            try:
                await s._connect()
                return "connected"
            except errors.AgentbusError as e:
                return e
            finally:
                await s.close()
        try:
            got = asyncio.run(go())
        finally:
            fb.close()
        assert isinstance(got, errors.Timeout), (b, got)  # ignored until the wait ends
        fb = _FakeBroker(heartbeats=[b, good])
        try:
            assert asyncio.run(go(fb)) == "connected", b
        finally:
            fb.close()
