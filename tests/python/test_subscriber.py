"""Subscriber against a real broker: the seam from a cursor, scopes, holes at a tiny
high-water mark, broker SIGKILL and restart mid-stream, callback and asyncio styles."""

import asyncio
import signal
import threading
import time

import pytest

import agentbus
from agentbus import errors
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


@pytest.mark.parametrize("ordered", [False, True], ids=["per-run", "ordered"])
def test_holes_at_a_tiny_hwm_are_filled(make_broker, ids, ordered):
    t, r = ids
    b = make_broker("--hwm", "1")
    runs = {f"{r}-{i}": 300 for i in range(4)}
    s = agentbus.Subscriber(b.endpoint, scope="thread", thread=t, rcvhwm=1, ordered=ordered)
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
    if ordered:  # commit order across the runs
        assert all(a.pos < b.pos for a, b in zip(got, got[1:]))
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
        out = [e.pos for e in s._take()]  # handed out: the cursor covers them
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
    async def go(chunks):
        s = agentbus.AsyncSubscriber("tcp://127.0.0.1:1", after_pos=10)
        s._replay = _FakeReplay(chunks)
        while s._need_sync:
            await s._sync_step()
        out = [e.pos for e in s._take()]  # handed out: the cursor covers them
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


def test_ordered_refuses_cursors_and_other_scopes():
    """The cursor of an ordered thread is after_pos (the C client's rule): cursors with it,
    or ordered with another scope, are refused naming the option."""
    with pytest.raises(errors.InvalidArgument) as ei:
        agentbus.Subscriber("tcp://127.0.0.1:1", scope="thread", thread="t", ordered=True,
                            cursors={"r": 3})
    assert ei.value.field == "cursors"
    for scope in ("all", "run"):
        with pytest.raises(errors.InvalidArgument) as ei:
            agentbus.AsyncSubscriber("tcp://127.0.0.1:1", scope=scope, thread="t", run="r",
                                     ordered=True)
        assert ei.value.field == "ordered"


def _tprev_records(stamps):
    """A live message of thread t: one record per (pos, tprev or None)."""
    from agentbus import wire
    env = wire.packb({"v": 1, "thread": "t", "run": "r", "seq": 1, "epoch": 1, "ts": 0,
                      "event": {"type": "CUSTOM", "name": "n", "value": 1}})
    pairs = []
    for pos, tprev in stamps:
        st = {"pos": pos, "time": 5}
        if tprev is not None:
            st["tprev"] = tprev
        pairs.append((wire.packb(st), env))
    return [_Frame(b"ev\x00t\x00r\x00"), _Frame(wire.pack_records(pairs))]


class _FakeReplay:
    """A replay stream that yields @p chunks (each a list made into a records frame by
    @p records: _records or _tprev_records), then ends with replay_end head_pos @p head."""

    def __init__(self, chunks, head=0, records=None):
        self.chunks, self.end = list(chunks), {"head_pos": head}
        self.records = records or _records

    async def next_chunk_ex(self):
        from agentbus import wire
        if not self.chunks:
            return None
        return wire.decode_chunk(self.records(self.chunks.pop(0))[1].bytes, True)


def _ordered_live(messages, position=10):
    """An ordered thread subscriber (cursor @p position) fed these live messages directly:
    (delivered positions, stats, whether it wants a replay, its cursor)."""
    async def go():
        s = agentbus.AsyncSubscriber("tcp://127.0.0.1:1", scope="thread", thread="t",
                                     ordered=True, after_pos=position)
        s._connected, s._need_sync = True, False
        for m in messages:
            await s._on_message(_tprev_records(m))
            if s._need_sync:
                break
        out = [e.pos for e in s._take()]  # handed out: the cursor covers them
        await s.close()
        return out, s.stats, s._need_sync, s.cursor()
    return asyncio.run(go())


def test_ordered_live_judged_by_tprev():
    """PROTOCOL.md 5: at or below the cursor a duplicate; tprev at or below it the next
    (other threads' positions in between need no replay); tprev above it a hole; without
    tprev only the cursor + 1."""
    got, st, resync, cur = _ordered_live([[(8, 5), (10, 9)], [(14, 10), (20, 14)]])
    assert got == [14, 20] and st["duplicates"] == 2 and not resync
    assert cur == {"after_pos": 20} and st["holes"] == 0
    got, st, resync, cur = _ordered_live([[(12, 10), (15, 13), (16, 15)]])
    assert got == [12] and resync and st["holes"] == 1 and cur == {"after_pos": 12}
    got, st, resync, cur = _ordered_live([[(11, None), (12, None)], [(14, None)]])
    assert got == [11, 12] and resync and st["holes"] == 1 and cur == {"after_pos": 12}


def test_ordered_heartbeat_above_the_cursor_replays():
    """The lost-tail check of an ordered thread: a heartbeat of the connected instance
    whose head_pos is above the cursor asks for a replay from it; one at it does not."""
    from agentbus import wire

    async def go(head):
        s = agentbus.AsyncSubscriber("tcp://127.0.0.1:1", scope="thread", thread="t",
                                     ordered=True, after_pos=10)
        s.conn.instance = "i-1"
        s._connected, s._need_sync = True, False
        await s._on_heartbeat(wire.packb({"op": "heartbeat", "v": 1,
                                          "instance": "i-1", "head_pos": head, "time": 5}))
        await s.close()
        return s._need_sync

    assert asyncio.run(go(10)) is False
    assert asyncio.run(go(11)) is True


def test_ordered_replay_takes_every_position_above_the_cursor():
    """An ordered thread's replay: scope thread from after_pos with no cursors; every
    event above the cursor is delivered whatever the gaps, and replay_end's head_pos
    becomes the cursor (the thread has nothing more up to it)."""
    async def go():
        s = agentbus.AsyncSubscriber("tcp://127.0.0.1:1", scope="thread", thread="t",
                                     ordered=True, after_pos=10)
        asked = {}

        async def replay(scope, **kw):
            asked.update(kw, scope=scope)
            return _FakeReplay([[(9, None), (10, None), (12, None)], [(13, None), (17, None)]],
                               30, _tprev_records)
        s.client.replay = replay
        while s._need_sync:
            await s._sync_step()
        out = [e.pos for e in s._take()]  # handed out: the cursor covers them
        await s.close()
        return out, asked, s.cursor(), s.stats

    got, asked, cur, st = asyncio.run(go())
    assert got == [12, 13, 17] and st["duplicates"] == 2 and cur == {"after_pos": 30}
    assert asked["scope"] == "thread" and asked["after_pos"] == 10 and not asked.get("cursors")


def _publish_interleaved(ep, t, runs, other):
    """Runs of thread @p t written in turns, one event each, with an event of thread
    @p other between turns, so the thread's positions are not contiguous and its runs
    interleave in commit order.  Four events a run."""
    ps = {}
    for r in runs:
        ps[r] = agentbus.Producer(ep)
        ps[r].claim(t, r)
    po = agentbus.Producer(ep)
    po.claim(other, f"{other}-{runs[0]}")
    po.publish(started(other, f"{other}-{runs[0]}"))
    for i in range(4):
        for r, p in ps.items():
            p.publish(started(t, r) if i == 0 else finished(t, r) if i == 3 else
                      {"type": "CUSTOM", "name": "n", "value": i})
            p.flush()
            po.publish({"type": "CUSTOM", "name": "o", "value": i})
            po.flush()
    for p in (*ps.values(), po):
        p.close()


def _thread_positions(ep, t):
    with agentbus.Client(ep) as c:
        return [(e.run, e.seq, e.pos) for e in c.replay("all") if e.thread == t]


def _take(s, n, timeout=20.0):
    got = s.events(n, timeout=timeout)
    assert len(got) == n, f"{len(got)} of {n}: {s.stats}"
    return got


@pytest.mark.parametrize("tprev", ["true", "false"])
def test_ordered_thread_past_max_batch_runs(make_broker, ids, tprev):
    """A thread with three times the broker's max_batch runs: the ordered subscriber
    delivers each event once in commit order, from the store, live and after a broker
    SIGKILL and restart (replay from after_pos); a new one from its cursor gets only what
    came after.  The per-run one, whose replay would name every run's cursor, raises
    TooLarge at its first replay past max_batch runs."""
    t, r = ids
    b = make_broker("--max-batch", "4", "--tprev", tprev)
    ep, other = b.endpoint, t + "-other"
    _publish_interleaved(ep, t, [f"{r}-{i}" for i in range(6)], other)
    s = agentbus.Subscriber(ep, scope="thread", thread=t, ordered=True, timeout=1.0,
                            silence=1.0, reconnect_base=0.05, reconnect_max=0.2)
    per_run = agentbus.Subscriber(ep, scope="thread", thread=t, timeout=1.0, silence=1.0,
                                  reconnect_base=0.05, reconnect_max=0.2)
    assert s.wait_synced() and per_run.wait_synced()
    _publish_interleaved(ep, t, [f"{r}-{i}" for i in range(6, 12)], other + "2")
    got = _take(s, 48)
    assert any(e.replayed for e in got) and any(not e.replayed for e in got)
    assert len(_take(per_run, 48)) == 48 and len(per_run.cursors) == 12
    b.kill()
    b.restart()
    _publish_interleaved(ep, t, [f"{r}-{i}" for i in range(12, 18)], other + "3")
    got += _take(s, 24)
    assert [(e.run, e.seq, e.pos) for e in got] == _thread_positions(ep, t)
    assert len({(e.run, e.seq) for e in got}) == 72 and s.next_batch(0.3) == []
    assert s.cursor()["after_pos"] >= got[-1].pos and s.cursors == {}
    with pytest.raises(errors.TooLarge) as ei:
        end = time.monotonic() + 20
        while time.monotonic() < end:  # live events of the new instance may come first
            per_run.next_batch(1.0)
    assert ei.value.field == "cursors"
    per_run.close()
    # a new subscriber from the persisted cursor: only what came after it
    s.close()
    _publish_interleaved(ep, t, [f"{r}-18"], other + "4")
    s2 = agentbus.Subscriber(ep, scope="thread", thread=t, ordered=True, **s.cursor())
    assert [(e.run, e.seq) for e in _take(s2, 4)] == [(f"{r}-18", i) for i in range(1, 5)]
    assert s2.next_batch(0.3) == []
    print("ordered-stats", tprev, s.stats)
    s2.close()


@pytest.mark.parametrize("tprev", ["true", "false"])
def test_ordered_live_between_other_threads(make_broker, ids, tprev):
    """Read while a thread's runs are written between other threads' events: with the
    stamps' tprev each live event is placed at once (no hole, so no replay per event);
    without it (--tprev false) a position gap is a possible hole and the replay from
    after_pos fills it.  Either way each event comes once, in commit order."""
    t, r = ids
    b = make_broker("--tprev", tprev)
    s = agentbus.Subscriber(b.endpoint, scope="thread", thread=t, ordered=True)
    assert s.wait_synced()
    w = threading.Thread(target=_publish_interleaved,
                         args=(b.endpoint, t, [f"{r}-{i}" for i in range(5)], t + "-other"))
    w.start()
    got = _take(s, 20)
    w.join()
    assert [(e.run, e.seq, e.pos) for e in got] == _thread_positions(b.endpoint, t)
    assert s.next_batch(0.3) == []
    if tprev == "true":
        assert s.stats["holes"] == 0
    print("ordered-live-stats", tprev, s.stats)
    s.close()
