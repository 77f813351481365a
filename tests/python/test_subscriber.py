"""Subscriber against a real broker: the seam from a cursor, scopes, holes at a tiny
high-water mark, broker SIGKILL and restart mid-stream, callback and asyncio styles."""

import asyncio
import signal
import threading
import time

import agentbus
from conftest import finished, started, text_events


def publish_run(ep, t, r, n, finish=True, batch_max=256):
    with agentbus.Producer(ep, batch_max=batch_max) as p:
        p.claim(t, r)
        p.publish(started(t, r))
        for e in text_events(n - (2 if finish else 1)):
            p.publish(e)
        if finish:
            p.publish(finished(t, r))
        p.flush(10)


def exact(evs, runs):
    """Every run's events 1..n exactly once, in order (runs: run -> n)."""
    per = {}
    for e in evs:
        per.setdefault(e.run, []).append(e.seq)
    return per == {r: list(range(1, n + 1)) for r, n in runs.items()}


def test_seam_from_cursor_then_live(broker, ids):
    t, r = ids
    p = agentbus.Producer(broker.endpoint)
    p.claim(t, r)
    p.publish(started(t, r))
    p.publish({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
    for i in range(48):
        p.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": str(i)})
    p.flush()
    s = agentbus.Subscriber(broker.endpoint, scope="thread", thread=t, cursors={r: 20})
    got = s.events(30)
    assert [e.seq for e in got] == list(range(21, 51)) and all(e.replayed for e in got)
    for i in range(50):
        p.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": str(i)})
    p.flush()
    got = s.events(50)
    assert [e.seq for e in got] == list(range(51, 101))
    assert any(not e.replayed for e in got)
    assert s.next_batch(0.2) == []  # nothing twice
    assert s.cursor() == {"cursors": {r: 100}}
    s.close()
    # a new subscriber from the persisted cursor gets only what came after it
    p.publish({"type": "TEXT_MESSAGE_END", "messageId": "m"})
    p.flush()
    s2 = agentbus.Subscriber(broker.endpoint, scope="run", thread=t, run=r, after_seq=100)
    (e,) = s2.events(1)
    assert e.seq == 101 and e.type == "TEXT_MESSAGE_END"
    s2.close()
    p.close()


def test_scope_all_and_from_now(broker, ids):
    t, r = ids
    publish_run(broker.endpoint, t, r + "a", 10)
    with agentbus.Client(broker.endpoint) as c:
        head = c.ping()["head_pos"]
    s = agentbus.Subscriber(broker.endpoint, scope="all", from_now=True)
    assert s.wait_synced() and s.next_batch(0.1) == []
    publish_run(broker.endpoint, t, r + "b", 10)
    got = s.events(10)
    assert [e.run for e in got] == [r + "b"] * 10
    assert [e.pos for e in got] == list(range(head + 1, head + 11))
    s.close()
    s = agentbus.Subscriber(broker.endpoint, scope="all", after_pos=head - 3)
    got = s.events(13)
    assert [e.pos for e in got] == list(range(head - 2, head + 11))
    s.close()


def test_holes_at_a_tiny_hwm_are_filled(make_broker, ids):
    t, r = ids
    b = make_broker("--hwm", "1")
    runs = {f"{r}-{i}": 300 for i in range(4)}
    s = agentbus.Subscriber(b.endpoint, scope="thread", thread=t, rcvhwm=1)
    assert s.wait_synced()
    th = [threading.Thread(target=publish_run, args=(b.endpoint, t, run, n, True, 8))
          for run, n in runs.items()]
    for x in th:
        x.start()
    got = []
    while len(got) < 1200:
        batch = s.next_batch(5)
        assert batch, "stalled"
        got.extend(batch)
    for x in th:
        x.join()
    assert exact(got, runs)
    assert s.next_batch(0.3) == []
    assert s.stats["live"] + s.stats["replayed"] == 1200
    print("hole-stats", s.stats)
    s.close()


def test_broker_sigkill_and_restart_mid_stream(make_broker, ids):
    t, r = ids
    b = make_broker()
    s = agentbus.Subscriber(b.endpoint, scope="all", timeout=1.0, silence=1.0,
                            reconnect_base=0.05, reconnect_max=0.2)
    publish_run(b.endpoint, t, r + "1", 100)
    assert [e.seq for e in s.events(100)] == list(range(1, 101))
    old = b.instance
    b.kill()
    assert s.next_batch(0.3) == []
    b.restart()
    assert b.instance != old
    publish_run(b.endpoint, t, r + "2", 100)
    got = s.events(100, timeout=20)
    assert [(e.run, e.seq) for e in got] == [(r + "2", i) for i in range(1, 101)]
    # the new instance's events may come through the SUB that reconnected by itself
    # before its first heartbeat is read; that heartbeat then makes it hello again
    end = time.monotonic() + 10
    while s.stats["restarts"] + s.stats["silences"] == 0 and time.monotonic() < end:
        assert s.next_batch(0.2) == []
    assert s.stats["reconnects"] >= 2
    assert s.next_batch(0.3) == []
    s.close()


def test_frozen_broker_then_resumed(make_broker, ids):
    t, r = ids
    b = make_broker()
    s = agentbus.Subscriber(b.endpoint, scope="run", thread=t, run=r, timeout=0.5,
                            silence=0.5, reconnect_base=0.05, reconnect_max=0.2)
    assert s.next_batch(0.2) == []
    b.signal(signal.SIGSTOP)
    try:
        end = time.monotonic() + 15  # silence (0.5 s), then hellos that time out
        while s.stats["failures"] == 0 and time.monotonic() < end:
            assert s.next_batch(0.2) == []
        assert s.stats["backoff_ms"] > 0 and not s._a.connected
    finally:
        b.signal(signal.SIGCONT)
    publish_run(b.endpoint, t, r, 20)
    assert [e.seq for e in s.events(20, timeout=15)] == list(range(1, 21))
    s.close()


def test_callback_style(broker, ids):
    t, r = ids
    publish_run(broker.endpoint, t, r, 12)
    seen = []
    with agentbus.Subscriber(broker.endpoint, scope="run", thread=t, run=r) as s:
        s.run(lambda e: seen.append(e.seq) or e.type == "RUN_FINISHED", timeout=10)
    assert seen == list(range(1, 13))


def test_asyncio_subscriber_and_producer(broker, ids):
    t, r = ids

    async def main():
        async with agentbus.AsyncProducer(broker.endpoint) as p:
            await p.claim(t, r)
            await p.publish(started(t, r))
            for e in text_events(8):
                await p.publish(e)
            await p.publish(finished(t, r))
            await p.flush()
        out = []
        async with agentbus.AsyncSubscriber(broker.endpoint, scope="thread", thread=t) as s:
            async for ev in s:
                out.append((ev.seq, ev.type))
                if ev.type == "RUN_FINISHED":
                    break
        return out

    out = asyncio.run(asyncio.wait_for(main(), 20))
    assert [s for s, _ in out] == list(range(1, 11))
    assert out[0][1] == "RUN_STARTED" and out[-1][1] == "RUN_FINISHED"


class _Frame:
    """What the subscriber reads of a zmq.Frame."""

    def __init__(self, b: bytes):
        self.bytes, self.buffer = b, memoryview(b)


def _records(positions, bad_last=False):
    from agentbus import wire
    env = wire.packb({"v": 1, "thread": "t", "run": "r", "seq": 1, "epoch": 1, "ts": 0,
                      "event": {"type": "CUSTOM", "name": "n", "value": 1}})
    pairs = [(wire.packb({"pos": p, "time": 5}), env) for p in positions]
    if bad_last:
        pairs[-1] = (pairs[-1][0], env[:-1])
    return [_Frame(b"ev\x00t\x00r\x00"), _Frame(wire.pack_records(pairs))]


def _live(positions_list, position=10):
    """An AsyncSubscriber (scope all, cursor @p position) fed these live messages
    directly: (delivered positions, stats, whether it wants a replay)."""
    async def go():
        s = agentbus.AsyncSubscriber("tcp://127.0.0.1:1", after_pos=position)
        s._connected, s._need_sync = True, False
        for m in positions_list:
            await s._on_message(_records(*m) if isinstance(m, tuple) else _records(m))
            if s._need_sync:
                break
        out = [e.pos for e in s._ready]
        await s.close()
        return out, s.stats, s._need_sync, s.position
    return asyncio.run(go())


def test_live_seam_per_message_matches_per_event_rules():
    # duplicates at the start of a consecutive message, then the rest delivered
    got, st, resync, pos = _live([[8, 9, 10, 11, 12], [13, 14]])
    assert got == [11, 12, 13, 14] and st["duplicates"] == 3 and not resync and pos == 14
    assert st["live"] == st["delivered"] == 4
    # all duplicates: nothing delivered, cursor unchanged
    got, st, resync, pos = _live([[9, 10]])
    assert got == [] and st["duplicates"] == 2 and not resync and pos == 10
    # a consecutive message past the cursor + 1: a hole, nothing of it delivered
    got, st, resync, pos = _live([[11], [13, 14, 15]])
    assert got == [11] and resync and st["holes"] == 1 and pos == 11
    # not consecutive: judged per event, delivered up to the hole
    got, st, resync, pos = _live([[11, 12, 14, 15]])
    assert got == [11, 12] and resync and st["holes"] == 1 and pos == 12
    # a malformed last record: the ones before it are used, then a hole
    got, st, resync, pos = _live([([11, 12, 13], True)])
    assert got == [11, 12] and resync and st["holes"] == 1 and pos == 12


def test_replay_seam_per_chunk_matches_per_event_rules():
    from agentbus import wire

    class FakeReplay:
        def __init__(self, chunks):
            self.chunks, self.end = list(chunks), {"head_pos": 0}

        async def next_chunk_ex(self):
            if not self.chunks:
                return None
            return wire.decode_chunk(_records(self.chunks.pop(0))[1].bytes, True)

    async def go(chunks):
        s = agentbus.AsyncSubscriber("tcp://127.0.0.1:1", after_pos=10)
        s._replay = FakeReplay(chunks)
        while s._need_sync:
            await s._sync_step()
        out = [e.pos for e in s._ready]
        await s.close()
        return out, s.stats, s.position

    got, st, pos = asyncio.run(go([[9, 10, 11, 12], [13, 14]]))
    assert got == [11, 12, 13, 14] and st["duplicates"] == 2 and pos == 14
    assert st["replayed"] == st["delivered"] == 4
    # positions may skip in a replay: not consecutive, judged per event
    got, st, pos = asyncio.run(go([[10, 12, 15], [15, 16]]))
    assert got == [12, 15, 16] and st["duplicates"] == 2 and pos == 16



def test_live_stamps_carry_tprev(broker, ids):
    """Live events of two threads written in turns, read from a raw SUB that a heartbeat
    proved subscribed (PROTOCOL.md 6.2): every live stamp's tprev is the previous event of
    its thread (section 5), the events of a thread's first publish excepted (a bound:
    the module's broker has seen other tests' events)."""
    import zmq

    from agentbus import wire
    t, r = ids
    u = t + "-other"
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    for th in (t, u):
        sub.setsockopt(zmq.SUBSCRIBE, wire.topic(th))
    sub.setsockopt(zmq.SUBSCRIBE, wire.HEARTBEAT_TOPIC)
    sub.connect(f"tcp://127.0.0.1:{broker.ev_port}")
    assert sub.poll(5000) and sub.recv_multipart()[0] == wire.HEARTBEAT_TOPIC
    ps = {}
    for th in (t, u):
        ps[th] = agentbus.Producer(broker.endpoint)
        ps[th].claim(th, r)
    for i in range(7):
        for th in (t, u):
            ev = started(th, r) if i == 0 else {"type": "CUSTOM", "name": "n", "value": i}
            ps[th].publish(ev)
            ps[th].flush()
    for pr in ps.values():
        pr.close()
    got = []
    while len(got) < 14:
        assert sub.poll(5000), f"only {len(got)} of 14 live events"
        topic, frame = sub.recv_multipart()
        if topic != wire.HEARTBEAT_TOPIC:
            got += wire.decode_records(frame, False)
    sub.close()
    last = {}
    for e in got:
        assert e.tprev is not None and e.tprev < e.pos
        if e.thread in last:
            assert e.tprev == last[e.thread]
        last[e.thread] = e.pos
    # a replayed stamp has none
    with agentbus.Client(broker.endpoint) as c:
        evs = list(c.replay("thread", thread=t, cursors={}))
    assert len(evs) == 7 and all(e.tprev is None for e in evs)
