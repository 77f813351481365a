"""Producer against a real broker: round trip, fencing, handover while publishing,
conflict, terminal, local checks, restart, SIGKILL mid-stream; gap and overloaded
handling against a scripted broker (a real one does not produce them on demand)."""

import signal
import threading

import msgpack
import pytest
import zmq

import agentbus
from agentbus import errors, wire
from conftest import finished, started, text_events


def read_run(ep, thread, run):
    with agentbus.Client(ep) as c:
        return list(c.replay("run", thread=thread, run=run))


def test_round_trip_bytes_and_seqs(broker, ids):
    t, r = ids
    with agentbus.Producer(broker.endpoint, batch_max=7) as p:
        # a first claim is epoch 2: 1 is the implicit epoch of a writer that never claims
        assert p.claim(t, r) == {"epoch": 2, "last_seq": 0, "status": "unknown"}
        sent = [started(t, r)] + text_events(30) + [finished(t, r)]
        seqs = [p.publish(e) for e in sent]
        assert seqs == list(range(1, 33))
        assert p.flush() == 32
        assert p.stats["batches"] >= 5 and p.outbox == 0
    evs = read_run(broker.endpoint, t, r)
    assert [e.seq for e in evs] == seqs
    assert [e.body for e in evs] == sent
    assert all(e.epoch == 2 and not e.by for e in evs)
    assert [e.pos for e in evs] == sorted(e.pos for e in evs)


def test_second_claim_fences_the_first(broker, ids):
    t, r = ids
    p1 = agentbus.Producer(broker.endpoint)
    p1.claim(t, r)
    p1.publish(started(t, r))
    p1.flush()
    p2 = agentbus.Producer(broker.endpoint)
    assert p2.claim(t, r)["epoch"] == 3
    p1.publish(text_events(3)[0])
    with pytest.raises(errors.Fenced) as ei:
        p1.flush()
    assert ei.value.seq == 2 and ei.value.details.get("epoch") == 3
    with pytest.raises(errors.Fenced):  # failed state: every later call
        p1.publish(text_events(3)[1])
    assert p2.publish(text_events(3)[0]) == 2
    p2.flush()
    assert [e.epoch for e in read_run(broker.endpoint, t, r)] == [2, 3]
    p1.close()
    p2.close()


def test_handover_while_publishing(broker, ids):
    t, r = ids
    p1 = agentbus.Producer(broker.endpoint, batch_max=16)
    p1.claim(t, r)
    p1.publish(started(t, r))
    p1.publish({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
    p1.flush()
    claimed = threading.Event()
    out = {}

    def first():
        try:
            i = 0
            while True:
                p1.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"a{i}"})
                i += 1
                if i == 200:
                    claimed.wait(10)
                if i % 16 == 0:
                    p1.flush()
        except errors.Fenced as e:
            out["fenced"] = e

    th = threading.Thread(target=first)
    th.start()
    p2 = agentbus.Producer(broker.endpoint)
    while read_run(broker.endpoint, t, r)[-1].seq < 50:  # wait for p1 to be mid-stream
        pass
    c = p2.claim(t, r)
    claimed.set()
    th.join(20)
    assert not th.is_alive() and isinstance(out.get("fenced"), errors.Fenced)
    for i in range(5):
        p2.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"b{i}"})
    p2.publish({"type": "TEXT_MESSAGE_END", "messageId": "m"})
    p2.publish(finished(t, r))
    p2.flush()
    evs = read_run(broker.endpoint, t, r)
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    epochs = [e.epoch for e in evs]
    assert epochs == sorted(epochs) and set(epochs) == {2, 3}
    assert epochs.index(3) == c["last_seq"]  # p2 continued right after what p1 committed
    p1.close()
    p2.close()


def test_conflict_and_terminal(broker, ids):
    t, r = ids
    p = agentbus.Producer(broker.endpoint)
    c = p.claim(t, r)
    p.publish(started(t, r))
    p.publish(finished(t, r))
    p.flush()
    p.publish({"type": "RUN_STARTED", "threadId": t, "runId": r, "protocolVersion": "1.0"})
    with pytest.raises(errors.RunTerminal) as ei:
        p.flush()
    assert ei.value.seq == 3
    p.close()
    q = agentbus.Producer(broker.endpoint)
    e = q.claim(t, r)["epoch"]
    assert e == c["epoch"] + 1
    q.assigned(t, r, e, last_seq=1)  # renumber: seq 2 again, other bytes
    q.publish(finished(t, r, result="other"))
    with pytest.raises(errors.Conflict) as ei:
        q.flush()
    assert ei.value.field == "seq" and ei.value.seq == 2
    q.close()


def test_local_checks_use_no_seq(broker, ids):
    t, r = ids
    with agentbus.Producer(broker.endpoint) as p:
        p.claim(t, r)
        bad = [({"type": "CUSTOM", "name": "x", "value": float("nan")}, "event/value"),
               ({"type": "CUSTOM", "name": "x", "value": 1 << 70}, "event/value"),
               ({"type": "CUSTOM", "name": "x", "value": {"b": b"\x00"}}, "event/value/b"),
               ({"type": "RUN_STARTED", "threadId": t, "runId": "other"}, "event/runId")]
        for ev, field in bad:
            with pytest.raises(errors.AgentbusError) as ei:
                p.publish(ev)
            assert ei.value.field == field
        with pytest.raises(errors.TooLarge):
            p.publish({"type": "CUSTOM", "name": "x", "value": "y" * (2 << 20)})
        assert p.next_seq == 1
        assert p.publish(started(t, r)) == 1
        assert p.flush() == 1


def test_claim_again_continues(broker, ids):
    t, r = ids
    with agentbus.Producer(broker.endpoint) as p:
        p.claim(t, r)
        p.publish_many([started(t, r)] + text_events(4))
        p.flush()
    with agentbus.Producer(broker.endpoint) as p:
        assert p.claim(t, r) == {"epoch": 3, "last_seq": 5, "status": "active"}
        assert p.publish(finished(t, r)) == 6
        p.flush()


def test_outbox_stays_bounded(broker, ids):
    t, r = ids
    with agentbus.Producer(broker.endpoint, batch_max=32, outbox_max=40) as p:
        p.claim(t, r)
        p.publish_many([started(t, r)] + text_events(500))
        assert p.stats["outbox_peak"] <= 64
        p.flush()
        assert p.acked_seq == 501 and p.stats["acked"] == 501


def test_sigkill_and_restart_mid_stream(make_broker, ids):
    t, r = ids
    b = make_broker()
    n = 1200
    evs = [started(t, r)] + text_events(n - 2) + [finished(t, r)]
    with agentbus.Producer(b.endpoint, timeout=1.0, batch_max=100, backoff_max=0.2) as p:
        p.claim(t, r)
        for e in evs[:400]:
            p.publish(e)  # 300 answered, 100 in flight
        p.flush()
        b.signal(signal.SIGSTOP)  # the next batch reaches a broker that answers nothing
        for e in evs[400:550]:
            p.publish(e)
        b.kill()
        b.restart()
        for e in evs[550:]:
            p.publish(e)
        assert p.flush(timeout=20) == n
        assert p.stats["retries"] >= 1 and p.stats["reconnects"] >= 1
    got = read_run(b.endpoint, t, r)
    assert [e.seq for e in got] == list(range(1, n + 1))
    assert [e.body for e in got] == evs


def test_no_broker_times_out():
    from conftest import free_port
    with pytest.raises(errors.Timeout):
        agentbus.Producer(f"tcp://127.0.0.1:{free_port()}", timeout=0.3)


class FakeBroker:
    """A ROUTER that answers hello, claim and publishes from a script of results."""

    def __init__(self, script, limits=None):
        self.limits = dict(limits or {})
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.script = list(script)
        self.firsts = []
        self.stop = False
        self.th = threading.Thread(target=self.loop)
        self.th.start()

    def reply(self, ident, h):
        self.sock.send_multipart([ident, msgpack.packb(h)])

    def loop(self):
        lim = dict(wire.DEFAULT_LIMITS, max_publish_bytes=1 << 24, max_replay_bytes=1 << 21)
        lim.update(self.limits)
        while not self.stop:
            if not self.sock.poll(50):
                continue
            ident, hdr, *rest = self.sock.recv_multipart()
            h = msgpack.unpackb(hdr)
            base = {"v": 1, "cid": h["cid"]}
            if h["op"] == "hello":
                self.reply(ident, {"op": "welcome", **base, "instance": "fake",
                                   "event_endpoint": "tcp://127.0.0.1:1", "limits": lim,
                                   "caps": {"packedPublish": "available"}})
            elif h["op"] == "claim":
                self.reply(ident, {"op": "claimed", **base, "thread": h["thread"],
                                   "run": h["run"], "epoch": 1, "last_seq": 0,
                                   "status": "unknown"})
            elif h["op"] == "publish":
                frame = rest[0]
                seqs = []
                off = 0
                while off < len(frame):
                    ln = int.from_bytes(frame[off:off + 4], "big")
                    seqs.append(msgpack.unpackb(frame[off + 4:off + 4 + ln])["seq"])
                    off += 4 + ln
                self.firsts.append(seqs[0])
                step = self.script.pop(0) if self.script else "ok"
                if step == "silent":  # no answer at all
                    continue
                if step == "too_large":  # refused whole, not retryable
                    self.reply(ident, {"op": "error", **base, "error": {
                        "code": "too_large", "message": "big", "retryable": False,
                        "details": {"limit": 1}}})
                    continue
                if step == "overloaded":
                    self.reply(ident, {"op": "error", **base, "error": {
                        "code": "overloaded", "message": "full", "retryable": True,
                        "details": {"limit": 1}}})
                    continue
                res = []
                for s in seqs:
                    if step == "gap" and s == 3:  # as if 3 had not arrived: resend from 3
                        res.append({"seq": s, "status": "rejected", "error": {
                            "code": "gap", "message": "gap", "retryable": False,
                            "field": "seq", "details": {"expected_seq": 3}}})
                        break
                    res.append({"seq": s, "status": "duplicate" if step == "dup" else "accepted",
                                "pos": s})
                while len(res) < len(seqs):
                    s = seqs[len(res)]
                    res.append({"seq": s, "status": "rejected", "error": {
                        "code": "gap", "message": "earlier", "retryable": False}})
                self.reply(ident, {"op": "published", **base, "results": res})
        self.sock.close(0)
        self.ctx.term()

    def close(self):
        self.stop = True
        self.th.join(5)


def test_overloaded_retried_and_gap_resent_from_expected_seq():
    fb = FakeBroker(["overloaded", "gap", "ok", "dup"])
    try:
        with agentbus.Producer(fb.endpoint, batch_max=10, backoff_base=0.001) as p:
            p.claim("t", "r")
            p.publish_many([started("t", "r")] + text_events(5))
            assert p.flush() == 6
            assert p.stats["retries"] == 1 and p.stats["gaps"] == 1
            p.publish_many(text_events(3))  # answered duplicate: acknowledged all the same
            assert p.flush() == 9 and p.stats["duplicates"] == 3 and p.outbox == 0
        assert fb.firsts == [1, 1, 3, 7]  # retried whole, resent from expected_seq 3
    finally:
        fb.close()


def test_refused_whole_publish_fails_the_producer():
    """A publish refused whole and not retryable is not sent again (PROTOCOL 8.1): the
    producer fails with that error, which every later call raises."""
    fb = FakeBroker(["too_large"])
    try:
        with agentbus.Producer(fb.endpoint, batch_max=10, backoff_base=0.001) as p:
            p.claim("t", "r")
            p.publish_many([started("t", "r")] + text_events(2))
            with pytest.raises(errors.TooLarge):
                p.flush()
            with pytest.raises(errors.TooLarge):
                p.publish(text_events(1)[0])
            assert p.stats["retries"] == 0
        assert fb.firsts == [1]  # sent once
    finally:
        fb.close()


def test_flush_that_timed_out_can_be_flushed_again():
    """A flush that gave up waiting leaves the producer usable: the next one resends what
    was not answered and returns once it is acknowledged."""
    fb = FakeBroker(["silent", "ok"])
    try:
        with agentbus.Producer(fb.endpoint, batch_max=10, backoff_base=0.001, timeout=5) as p:
            p.claim("t", "r")
            p.publish_many([started("t", "r")] + text_events(2))
            with pytest.raises(errors.Timeout):
                p.flush(0.2)
            assert p.flush() == 3 and p.outbox == 0
        assert fb.firsts == [1, 1]  # the unanswered publish, sent again
    finally:
        fb.close()


def test_batches_split_at_the_announced_limits(make_broker, ids):
    t, r = ids
    b = make_broker("--max-event-bytes", "1024", "--max-publish-bytes", "2048")
    with agentbus.Producer(b.endpoint, batch_max=1024) as p:
        assert p.conn.limits["max_publish_bytes"] == 2048
        p.claim(t, r)
        with pytest.raises(errors.TooLarge):  # above the announced max_event_bytes
            p.publish({"type": "CUSTOM", "name": "x", "value": "y" * 1100})
        p.publish(started(t, r))
        p.publish({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
        for i in range(100):
            p.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "z" * 300})
        p.flush()
        assert p.acked_seq == 102 and p.stats["batches"] >= 102 * 300 // 2048


def test_outbox_bounded_in_bytes(make_broker, ids):
    """Events of 3 KB where a publish holds 8 KB: a batch is full by bytes long before it
    is by count (256), and a publish then waits for the batch in flight and sends, so the
    outbox stays below two batches' bytes (2 x max_publish_bytes) after every publish."""
    t, r = ids
    budget = 8192
    b = make_broker("--max-event-bytes", "4096", "--max-publish-bytes", str(budget))
    sent = [started(t, r), {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}]
    sent += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"{i:04d}" + "z" * 3000}
             for i in range(120)]
    with agentbus.Producer(b.endpoint, batch_max=256) as p:
        assert p.conn.limits["max_publish_bytes"] == budget
        p.claim(t, r)
        for e in sent:
            p.publish(e)
            held = sum(len(env) for env in p._a._outbox)
            assert held == p.outbox_bytes and held < 2 * budget, (p.next_seq, held)
        assert p.stats["outbox_peak_bytes"] < 2 * budget + 4096  # + the event being queued
        assert p.flush() == len(sent) and p.outbox == p.outbox_bytes == 0
    assert [e.body for e in read_run(b.endpoint, t, r)] == sent


def test_outbox_bytes_bound_holds_after_a_retry():
    """A retry sends again from the first unacknowledged event, so more than a batch's
    bytes can be unsent at once: the publish that finds them sends batches until less
    than max_publish_bytes is left unsent, and the outbox stays below two batches' bytes.
    Envelopes of about 300 bytes, 1000 to a publish: three fit in one (packed)."""
    fb = FakeBroker(["ok", "overloaded"], {"max_publish_bytes": 1000})
    try:
        with agentbus.Producer(fb.endpoint, batch_max=256, backoff_base=0.001) as p:
            p.claim("t", "r")
            p.publish(started("t", "r"))
            p.flush()
            for i in range(20):
                p.publish({"type": "CUSTOM", "name": "n", "value": f"{i:03d}" + "v" * 220})
                assert p.outbox_bytes < 2 * 1000, (i, p.outbox_bytes)
            assert p.flush() == 21 and p.stats["retries"] == 1 and p.outbox_bytes == 0
    finally:
        fb.close()
