"""Client calls and the raw wire against a real broker: negotiation and refusals, heads,
snapshot, replay scopes with credit and cancel, publish results (duplicate, gap, a
whole-request refusal) as typed errors."""

import asyncio

import pytest

import agentbus
from agentbus import errors, wire
from conftest import finished, started, text_events


def fill(ep, t, r, n):
    with agentbus.Producer(ep) as p:
        p.claim(t, r)
        p.publish_many([started(t, r)] + text_events(n - 2) + [finished(t, r)])
        p.flush()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_welcome_limits_caps_and_ping(broker):
    with agentbus.Client(broker.endpoint) as c:
        assert c.instance == broker.instance
        assert c.limits["max_batch"] == 1024 and c.limits["max_depth"] == 64
        assert c.caps["publish"] == "available"
        assert c.ping()["instance"] == broker.instance
        assert c.stats()["connects"] == 1 and c.stats()["replies"] >= 2


def test_version_and_op_refusals(broker):
    async def main():
        conn = agentbus.AsyncConnection(broker.endpoint)
        await conn.connect()
        with pytest.raises(errors.IncompatibleVersion) as ei:
            await conn.request("hello", {"versions": [7]}, v=None)
        assert ei.value.field == "versions" and ei.value.details["ours"] == "1"
        with pytest.raises(errors.Unsupported) as ei:
            await conn.request("frobnicate")
        assert ei.value.field == "op" and ei.value.cid > 0
        await conn.close()
    run(main())


def test_heads_and_snapshot(broker, ids):
    t, r = ids
    fill(broker.endpoint, t, r, 6)
    with agentbus.Client(broker.endpoint) as c:
        pos, heads = c.heads([(t, r), (t, "never")])
        assert [h.status for h in heads] == ["finished", "unknown"]
        assert heads[0].last_seq == 6 and heads[0].outcome == "success" and heads[0].terminal
        assert heads[0].last_pos <= pos
        _, by_thread = c.heads(thread=t)
        assert [h.run for h in by_thread] == [r]
        snap = c.snapshot(t)
        assert snap["threadId"] == t and snap["checkpoint"]["runs"] == {r: 6}
        with pytest.raises(errors.NotFound) as ei:
            c.snapshot(t + "-none")
        assert ei.value.field == "thread" and not ei.value.retryable


def test_threads_pages(broker, ids):
    t, r = ids
    for k in ("b", "a", "\u00e9"):
        fill(broker.endpoint, t + "-" + k, r, 4)
    with agentbus.Client(broker.endpoint) as c:
        assert c.caps["threads"] == "available"
        page = c.threads(prefix=t + "-", limit=2)
        assert [x["thread"] for x in page["threads"]] == [t + "-a", t + "-b"]
        assert page["next"] == t + "-b"
        assert page["threads"][0]["runs"] == 1 and page["threads"][0]["active"] is False
        assert page["threads"][0]["last_run"] == r and page["threads"][0]["last_pos"] >= 4
        rest = c.threads(prefix=t + "-", after=page["next"])
        assert [x["thread"] for x in rest["threads"]] == [t + "-\u00e9"] and "next" not in rest
        with pytest.raises(errors.TooLarge) as ei:
            c.threads(limit=1001)
        assert ei.value.field == "limit"


def test_replay_scopes_and_credit(broker, ids):
    t, r = ids
    fill(broker.endpoint, t, r, 100)
    fill(broker.endpoint, t, r + "b", 5)
    with agentbus.Client(broker.endpoint) as c:
        rp = c.replay("run", thread=t, run=r, after_seq=0, window=1, chunk_events=10)
        chunks = list(rp.chunks())
        assert [len(ch) for ch in chunks] == [10] * 10
        assert rp.end["events"] == 100 and rp.heads[0].last_seq == 100
        rp = c.replay("thread", thread=t, cursors={r: 98})
        assert [(e.run, e.seq) for e in rp] == [(r, 99), (r, 100)] + [(r + "b", i) for i in range(1, 6)]
        assert {h.run for h in rp.heads} == {r, r + "b"}
        last = rp.end["head_pos"]
        assert [e.pos for e in c.replay("all", after_pos=last - 2)] == [last - 1, last]


def test_cancelled_replays_release_their_slots(broker, ids):
    t, r = ids
    fill(broker.endpoint, t, r, 300)

    async def main():
        async with agentbus.AsyncClient(broker.endpoint) as c:
            for _ in range(12):  # more than --replays-per-connection (8)
                rp = await c.replay("run", thread=t, run=r, window=2, chunk_events=5)
                assert len(await rp.next_chunk()) == 5
                await rp.aclose()
            await asyncio.sleep(0)  # let the drains credit what is left
            rp = await c.replay("run", thread=t, run=r, window=4)
            return [e.seq async for e in rp]
    assert run(main()) == list(range(1, 301))


def test_publish_results_on_the_wire(broker, ids):
    t, r = ids

    async def main():
        conn = agentbus.AsyncConnection(broker.endpoint)
        await conn.connect()
        p = agentbus.AsyncProducer(conn=conn)
        await p.claim(t, r)
        env1 = p.encode(started(t, r))
        h = await conn.request("publish", {"count": 1}, [env1])
        (res,) = h["results"]
        assert res["status"] == "accepted"
        h = await conn.request("publish", {"count": 1}, [env1])  # the same bytes again
        assert h["results"][0] == {"seq": 1, "status": "duplicate", "pos": res["pos"]}
        p.next_seq = 5
        h = await conn.request("publish", {"count": 1}, [p.encode(text_events(3)[0])])
        err = errors.from_wire(h["results"][0]["error"])
        assert isinstance(err, errors.Gap) and err.details["expected_seq"] == 2
        with pytest.raises(errors.InvalidEnvelope) as ei:
            await conn.request("publish", {"count": 2}, [env1])  # one frame for two
        assert ei.value.field == "count" and ei.value.details["frames"] == 1
        await conn.close()
    run(main())


def test_unreachable_broker_times_out():
    from conftest import free_port
    with pytest.raises(errors.Timeout) as ei:
        agentbus.Client(f"tcp://127.0.0.1:{free_port()}", timeout=0.3)
    assert ei.value.retryable


def test_records_of_a_live_message_are_events(broker, ids):
    t, r = ids
    fill(broker.endpoint, t, r, 3)
    with agentbus.Client(broker.endpoint) as c:
        evs = list(c.replay("run", thread=t, run=r))
    assert all(isinstance(e, wire.Event) and e.thread == t for e in evs)
    assert wire.decode_envelope(evs[0].raw)["event"] == started(t, r)
