"""Statements of PROTOCOL.md checked against the real broker from the raw wire, the way a
client written from the page relies on them."""

import asyncio

import pytest

import agentbus
from agentbus import errors, wire
from conftest import started


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def raw(broker):
    c = agentbus.AsyncConnection(broker.endpoint)
    await c.connect()
    return c


def refusal(coro):
    async def go():
        with pytest.raises(errors.AgentbusError) as ei:
            await coro
        return ei.value
    return go()


def test_ping_before_hello_is_answered(broker):
    async def main():
        c = agentbus.AsyncConnection(broker.endpoint)
        c._open()  # a socket, no hello (1.1: the broker answers anyway)
        h = await c.request("ping")
        await c.close()
        return h
    h = run(main())
    assert h["op"] == "pong" and h["instance"] == broker.instance


def test_field_named_refusals(broker, ids):
    t, r = ids

    async def main():
        c = await raw(broker)
        out = {
            "heads_both": await refusal(c.request("heads", {"runs": [{"thread": t, "run": r}],
                                                            "thread": t})),
            "heads_none": await refusal(c.request("heads")),
            # thread scope's optional after_pos (PROTOCOL.md 7.6) must be a uint
            "thread_after_pos": await refusal(c.request("replay", {
                "scope": "thread", "window": 1, "thread": t, "cursors": {}, "after_pos": "0"})),
            "window_0": await refusal(c.request("replay", {"scope": "all", "window": 0,
                                                           "after_pos": 0})),
            "window_big": await refusal(c.request("replay", {"scope": "all", "window": 65,
                                                             "after_pos": 0})),
            "lease": await refusal(c.request("serve", {"worker": "w", "lease_ms": 999,
                                                       "agents": [{"name": "a", "capacity": 1}]})),
            "capacity0": await refusal(c.request("serve", {"worker": "w", "agents": [
                {"name": "a", "capacity": 0}]})),
            "decline": await refusal(c.request("decline", {"request": 987654, "epoch": 1})),
            "abandon": await refusal(c.request("abandon_run", {"thread": t, "run": r})),
            "bad_id": await refusal(c.request("claim", {"thread": "a\x01b", "run": r})),
            "unknown_field": await refusal(c.request("ping", {"extra": 1})),
        }
        await c.close()
        return out

    e = run(main())
    want = {
        "heads_both": ("invalid_envelope", "thread"), "heads_none": ("invalid_envelope", "runs"),
        "thread_after_pos": ("invalid_envelope", "after_pos"),
        "window_0": ("invalid_envelope", "window"), "window_big": ("too_large", "window"),
        "lease": ("invalid_envelope", "lease_ms"),
        "capacity0": ("invalid_envelope", "agents/0/capacity"),
        "decline": ("not_found", "id"), "abandon": ("not_found", "run"),
        "bad_id": ("invalid_envelope", "thread"), "unknown_field": ("invalid_envelope", "extra"),
    }
    assert {k: (v.code, v.field) for k, v in e.items()} == want


def test_credit_and_cancel_of_no_replay_and_a_cancelled_stream(broker, ids):
    t, r = ids
    with agentbus.Producer(broker.endpoint) as p:
        p.claim(t, r)
        p.publish(started(t, r))
        p.flush()

    async def main():
        c = await raw(broker)
        # credit naming no replay: not_found, field cid, with that cid (7.6.3)
        cid = c.next_cid()
        fut = c.expect(cid)
        await c.send("credit", {"chunks": 1}, cid=cid)
        e1 = await refusal(c.wait(cid, fut, 5, "error"))
        # a replay cancelled before it ends: its stream ends request_aborted (7.6.2)
        rp = await agentbus.AsyncClient(conn=c).replay("run", thread=t, run=r, window=1,
                                                       chunk_events=1)
        await c.send("cancel", cid=rp.cid)
        items = []
        while True:
            item = await asyncio.wait_for(rp._stream.q.get(), 5)
            items.append(item)
            if isinstance(item, BaseException) or item[0]["op"] == "replay_end":
                break
            await c.send("credit", {"chunks": 1}, cid=rp.cid)
        await c.close()
        return e1, cid, items[-1]

    e1, cid, last = run(main())
    assert (e1.code, e1.field, e1.cid) == ("not_found", "cid", cid)
    # either the cancel came first (request_aborted) or the one-event run ended before it
    assert (isinstance(last, errors.RequestAborted) or
            (isinstance(last, tuple) and last[0]["op"] == "replay_end"))


def test_packed_publish_framing_refusals(broker, ids):
    t, r = ids

    async def main():
        c = await raw(broker)
        p = agentbus.AsyncProducer(conn=c)
        await p.claim(t, r)
        env = p.encode(started(t, r))
        frame = wire.pack_batch([env])
        out = [await refusal(c.request("publish", {"count": 1, "packed": True},
                                       [frame + b"\x00"])),
               await refusal(c.request("publish", {"count": 2, "packed": True}, [frame])),
               await refusal(c.request("publish", {"count": 1, "packed": True},
                                       [frame, frame]))]
        await c.close()
        return out

    trailing, short, frames = run(main())
    assert (trailing.code, trailing.field) == ("invalid_envelope", "packed")
    assert (short.code, short.field, short.details.get("envelopes")) == ("invalid_envelope", "count", 1)
    assert (frames.code, frames.field, frames.details.get("frames")) == ("invalid_envelope", "packed", 2)


def test_action_result_with_both_and_leave(broker):
    async def main():
        c = await raw(broker)
        await c.request("serve", {"worker": "spec-w", "agents": [
            {"name": "spec-a", "capacity": 1, "actions": ["x"]}]})
        e = await refusal(c.request("action_result", {"call": 1, "result": 1, "error": {
            "code": "internal", "message": "m", "retryable": False}}))
        left = await c.request("leave")
        await c.close()
        return e, left
    e, left = run(main())
    assert (e.code, e.field) == ("invalid_envelope", "error")
    assert left["op"] == "left"
