"""The saved cursor covers exactly the events handed to the application (python/README.md
"The cursor"): by iteration (the event just returned included), next_batch() (the whole
batch), events(n) and run(cb) (the event given to the callback included), never an event
the subscriber has judged and queued but not handed out yet.  So a subscriber made from a
cursor saved in the middle of a message or replay chunk gets exactly the rest.

Each scope (run, unordered thread, ordered thread, all) is read from the store (one replay
chunk holds every event, so all of them are queued at the first one handed out) and live
(one publish request of many events, so one live message)."""

import asyncio

import pytest

import agentbus
from conftest import finished, started, text_events

SCOPES = ["run", "thread", "ordered", "all"]
MID = 7  # a cursor saved after this many events: inside the first message or chunk


def publish_run(ep, t, r, n):
    with agentbus.Producer(ep) as p:  # one publish request: one live message
        p.claim(t, r)
        p.publish(started(t, r))
        for e in text_events(n - 2):
            p.publish(e)
        p.publish(finished(t, r))
        p.flush(10)


def publish_all(ep, t, r):
    """Runs A and B of thread @p t (15 events each), then 5 events of another thread (so
    the head is past the thread's last event).  The (run, seq) an all-scope subscriber
    gets, in commit order, per scope."""
    publish_run(ep, t, r + "-a", 15)
    publish_run(ep, t, r + "-b", 15)
    publish_run(ep, t + "-o", r + "-o", 5)
    a = [(r + "-a", i) for i in range(1, 16)]
    b = [(r + "-b", i) for i in range(1, 16)]
    return {"run": a, "thread": a + b, "ordered": a + b,
            "all": a + b + [(r + "-o", i) for i in range(1, 6)]}


def sub_kw(scope, t, r, after_pos, cursor=None):
    """Options of a subscriber of @p scope, from @p cursor (a saved cursor()) if given."""
    if scope == "run":
        kw = {"scope": "run", "thread": t, "run": r + "-a"}
        if cursor is not None:
            kw["after_seq"] = cursor["cursors"][r + "-a"]
        return kw
    if scope == "thread":
        return {"scope": "thread", "thread": t, "cursors": (cursor or {}).get("cursors")}
    pos = after_pos if cursor is None else cursor["after_pos"]
    if scope == "ordered":
        return {"scope": "thread", "thread": t, "ordered": True, "after_pos": pos}
    return {"scope": "all", "after_pos": pos}


def check_cursors(scope, steps):
    """@p steps: (event, cursor(), position, cursors) read right after the event was handed
    out, in the order handed out; None for an event handed out inside a batch (not read).
    Each cursor covers exactly the events handed out so far."""
    per_run: dict = {}
    for i, (ev, cur, position, cursors) in enumerate(steps):
        per_run[ev.run] = ev.seq
        if cur is None:
            continue
        if scope in ("run", "thread"):
            assert cur == {"cursors": per_run}, (i, ev.run, ev.seq, cur)
            assert cursors == per_run and position == ev.pos, i
        elif scope == "all":
            assert cur == {"after_pos": ev.pos}, (i, ev.pos, cur)
            assert position == ev.pos, i
        else:
            # ordered: every event of the thread up to the cursor was handed out, none after
            # it (a replay_end's head_pos may raise it past the last event handed out)
            p = cur["after_pos"]
            assert p == position and p >= ev.pos, (i, ev.pos, cur)
            if i + 1 < len(steps):
                assert p < steps[i + 1][0].pos, (i, ev.pos, cur, steps[i + 1][0].pos)


def step(s, ev):
    return ev, s.cursor(), s.position, dict(s.cursors)


def batch_steps(s, batch):
    """A batch handed out at once: its cursor read after its last event."""
    return [(ev, None, None, None) for ev in batch[:-1]] + [step(s, batch[-1])]


def resume(ep, scope, t, r, head, cursor, rest):
    """A new subscriber from @p cursor gets exactly @p rest, then nothing."""
    with agentbus.Subscriber(ep, **sub_kw(scope, t, r, head, cursor)) as s:
        got = s.events(len(rest), timeout=10)
        assert [(e.run, e.seq) for e in got] == rest
        assert s.next_batch(0.3) == []


def head_pos(ep):
    with agentbus.Client(ep) as c:
        return c.ping()["head_pos"]


@pytest.mark.parametrize("source", ["replay", "live"])
@pytest.mark.parametrize("scope", SCOPES)
def test_iteration_cursor_is_the_event_handed_out(broker, ids, scope, source):
    """The README's `for ev in s: save(s.cursor())`, one event at a time."""
    t, r = ids
    ep, head = broker.endpoint, head_pos(broker.endpoint)
    if source == "replay":
        want = publish_all(ep, t, r)[scope]
    with agentbus.Subscriber(ep, **sub_kw(scope, t, r, head)) as s:
        if source == "live":
            assert s.wait_synced()
            want = publish_all(ep, t, r)[scope]
        steps, saved = [], None
        for ev in s:
            steps.append(step(s, ev))
            if len(steps) == MID:
                saved = s.cursor()
            if len(steps) == len(want):
                break
        assert [(e.run, e.seq) for e, *_ in steps] == want
        check_cursors(scope, steps)
        assert s.next_batch(0.3) == []
    resume(ep, scope, t, r, head, saved, want[MID:])


@pytest.mark.parametrize("scope", SCOPES)
def test_events_and_run_hand_out_only_what_they_return(broker, ids, scope):
    """events(n) hands out n events, the rest stay queued (not in the cursor); run(cb)
    covers the event given to the callback while it runs, and after the callback's True
    the next events come next (none lost)."""
    t, r = ids
    ep, head = broker.endpoint, head_pos(broker.endpoint)
    want = publish_all(ep, t, r)[scope]
    with agentbus.Subscriber(ep, **sub_kw(scope, t, r, head)) as s:
        steps = batch_steps(s, s.events(3))

        def cb(ev):
            steps.append(step(s, ev))
            return len(steps) == MID
        s.run(cb, timeout=10)
        saved = s.cursor()
        rest = s.events(len(want) - MID)
        assert rest
        steps += batch_steps(s, rest)
        assert [(e.run, e.seq) for e, *_ in steps] == want
        check_cursors(scope, steps)
        assert s.next_batch(0.3) == []
    resume(ep, scope, t, r, head, saved, want[MID:])


@pytest.mark.parametrize("source", ["replay", "live"])
@pytest.mark.parametrize("scope", SCOPES)
def test_async_cursor_is_the_event_handed_out(broker, ids, scope, source):
    """AsyncSubscriber: `async for` hands out one event at a time; run(cb) covers the
    event given to the callback; a next_batch() batch counts as handed out."""
    t, r = ids
    ep, head = broker.endpoint, head_pos(broker.endpoint)

    async def main():
        # the blocking producer runs a loop of its own: in a thread of its own here
        if source == "replay":
            want = (await asyncio.to_thread(publish_all, ep, t, r))[scope]
        async with agentbus.AsyncSubscriber(ep, **sub_kw(scope, t, r, head)) as s:
            if source == "live":
                assert await s.wait_synced()
                want = (await asyncio.to_thread(publish_all, ep, t, r))[scope]
            steps, saved = [], None
            async for ev in s:
                steps.append(step(s, ev))
                if len(steps) == MID:
                    saved = s.cursor()
                if len(steps) == MID + 3:
                    break

            async def cb(ev):
                steps.append(step(s, ev))
                return len(steps) == MID + 5
            await s.run(cb, timeout=10)
            while len(steps) < len(want):
                batch = await s.next_batch(5)
                assert batch, len(steps)
                steps += batch_steps(s, batch)
            assert [(e.run, e.seq) for e, *_ in steps] == want
            check_cursors(scope, steps)
            assert await s.next_batch(0.3) == []
        return want, saved

    want, saved = asyncio.run(asyncio.wait_for(main(), 30))
    resume(ep, scope, t, r, head, saved, want[MID:])


def test_ordered_replay_end_raises_the_cursor_once_its_events_are_handed_out():
    """An ordered thread's replay_end head_pos (the thread has nothing more up to it)
    raises the cursor only when every event queued before it is handed out; events
    queued after it (a second replay) come after it."""
    from test_subscriber import _FakeReplay, _tprev_records

    async def go():
        s = agentbus.AsyncSubscriber("tcp://127.0.0.1:1", scope="thread", thread="t",
                                     ordered=True, after_pos=10)
        replays = [_FakeReplay([[(12, None), (13, None)], [(17, None)]], 30, _tprev_records),
                   _FakeReplay([[(31, None), (35, None)]], 40, _tprev_records)]

        async def replay(scope, **kw):
            return replays.pop(0)
        s.client.replay = replay
        s._connected = True
        for _ in range(2):
            s._need_sync = True
            while s._need_sync:
                await s._sync_step()
        seen = [s.cursor()["after_pos"]]  # nothing handed out yet
        for _ in range(3):
            ev = await s.__anext__()
            seen.append((ev.pos, s.cursor()["after_pos"], s.position))
        batch = await s.next_batch(0)
        seen.append(([e.pos for e in batch], s.cursor()["after_pos"]))
        await s.close()
        return seen

    assert asyncio.run(go()) == [10, (12, 12, 12), (13, 13, 13), (17, 30, 30),
                                 ([31, 35], 40)]


# Each scope resumes from its own cursor: scope run after_seq, an unordered thread cursors,
# an ordered thread and scope all after_pos.  Another scope's option would be ignored (a
# run subscriber given cursors={run: 41} started at seq 1 again), so it is refused naming it.
OTHER_SCOPES_CURSOR = [
    ({"scope": "run", "run": "r", "cursors": {"r": 41}}, "cursors"),
    ({"scope": "run", "run": "r", "after_pos": 7}, "after_pos"),
    ({"scope": "thread", "after_seq": 41}, "after_seq"),
    ({"scope": "thread", "after_pos": 7}, "after_pos"),
    ({"scope": "thread", "ordered": True, "after_seq": 41}, "after_seq"),
    ({"scope": "thread", "ordered": True, "cursors": {"r": 41}}, "cursors"),
    ({"scope": "all", "cursors": {"r": 41}}, "cursors"),
    ({"scope": "all", "after_seq": 41}, "after_seq"),
    ({"scope": "run", "run": "r", "after_seq": 41, "from_now": True}, "from_now"),
    ({"scope": "thread", "cursors": {"r": 41}, "from_now": True}, "from_now"),
    ({"scope": "all", "after_pos": 7, "from_now": True}, "from_now"),
]


@pytest.mark.parametrize("kw,field", OTHER_SCOPES_CURSOR)
def test_a_cursor_the_scope_does_not_take_is_refused(kw, field):
    for cls in (agentbus.Subscriber, agentbus.AsyncSubscriber):
        with pytest.raises(agentbus.errors.InvalidArgument) as ei:
            cls("tcp://127.0.0.1:1", thread="t", **kw)
        assert ei.value.field == field, (cls, ei.value)


BAD_CURSORS = [
    ({"scope": "run", "run": "r", "after_seq": "41"}, "after_seq"),
    ({"scope": "run", "run": "r", "after_seq": -1}, "after_seq"),
    ({"scope": "all", "after_pos": 1 << 63}, "after_pos"),
    ({"scope": "all", "after_pos": True}, "after_pos"),
    ({"scope": "thread", "cursors": [("r", 41)]}, "cursors"),
    ({"scope": "thread", "cursors": {"r": 4.0}}, "cursors/r"),
    ({"scope": "thread", "cursors": {"": 4}}, "cursors"),
]


@pytest.mark.parametrize("kw,field", BAD_CURSORS)
def test_a_cursor_of_the_wrong_type_or_range_is_refused(kw, field):
    with pytest.raises(agentbus.errors.InvalidArgument) as ei:
        agentbus.AsyncSubscriber("tcp://127.0.0.1:1", thread="t", **kw)
    assert ei.value.field == field


def test_each_scope_takes_its_own_cursor_and_an_empty_map():
    """What the README passes: a run's after_seq, a thread's cursors (an empty map is no
    cursor, with ordered too, as the C client's ncursors 0), a position."""
    for kw in ({"scope": "run", "run": "r", "after_seq": 41},
               {"scope": "thread", "cursors": {"r": 41}},
               {"scope": "thread", "ordered": True, "after_pos": 7, "cursors": {}},
               {"scope": "all", "after_pos": 7}, {"scope": "run", "run": "r", "cursors": {}},
               {"scope": "thread", "from_now": True}):
        s = agentbus.Subscriber("tcp://127.0.0.1:1", thread="t", **kw)
        assert s.cursor() in ({"cursors": {"r": 41}}, {"after_pos": 7}, {"cursors": {"r": 0}},
                              {"cursors": {}}), kw
        s.close()
