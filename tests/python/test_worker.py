"""Workers against a real broker: dispatch to an async and an ordinary handler, cancel,
resume with explicit decisions, actions (results and typed errors), lease loss."""

import asyncio
import threading
import time

import pytest

import agentbus
from agentbus import errors


def run(coro, t=30):
    return asyncio.run(asyncio.wait_for(coro, t))


async def until_end(ep, thread, run_id):
    """The run's events up to its terminal one (subscribed, each once)."""
    out = []
    async with agentbus.AsyncSubscriber(ep, scope="run", thread=thread, run=run_id) as s:
        async for ev in s:
            out.append(ev)
            if ev.type in ("RUN_FINISHED", "RUN_ERROR"):
                return out


async def serving(w):
    await w.serve()
    return asyncio.get_running_loop().create_task(w.run())


def test_dispatch_to_async_and_ordinary_handlers(broker, ids):
    t, _ = ids
    seen = {}

    async def streamer(r):
        seen["async"] = (r.input, r.attempt, r.epoch)
        await r.text(["hel", "lo"])
        await r.tool_call("search", {"q": "x"}, result={"hits": 0})

    def blocking(r):  # an ordinary function: runs in a thread
        seen["sync"] = r.input["messages"]
        r.text("from a thread")
        r.finish(result={"ok": True})

    async def main():
        w = agentbus.AsyncWorker(broker.endpoint, name="py-dispatch")
        w.agent("py-stream", streamer, capacity=2)
        w.agent("py-block", blocking)
        task = await serving(w)
        async with agentbus.AsyncClient(broker.endpoint) as c:
            msgs = [{"id": "u1", "role": "user", "content": "hi"}]
            a = await c.start_run("py-stream", t, {"messages": msgs}, key=t + "k1")
            again = await c.start_run("py-stream", t, {"messages": []}, key=t + "k1")
            assert again["existing"] and again["request"] == a["request"] and again["run"] == a["run"]
            ev1 = await until_end(broker.endpoint, t, a["run"])
            b = await c.start_run("py-block", t, {"messages": msgs}, key=t + "k2")
            ev2 = await until_end(broker.endpoint, t, b["run"])
            workers = await c.workers()
        await w.stop()
        await task
        return a, ev1, ev2, workers, w

    a, ev1, ev2, workers, w = run(main())
    assert [e.type for e in ev1] == [
        "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
        "TOOL_CALL_RESULT", "RUN_FINISHED"]
    inp, attempt, epoch = seen["async"]
    assert inp["threadId"] == t and inp["runId"] == a["run"] and attempt == 1
    assert ev1[0].body["input"] == inp and all(e.epoch == epoch for e in ev1)
    assert seen["sync"][0]["content"] == "hi"
    assert ev2[-1].body.get("result") == {"ok": True}
    assert any(x["worker"] == "py-dispatch" for x in workers)
    assert w.stats["runs_ok"] == 2 and not w.errors


def test_decline_with_a_long_multibyte_reason_gives_the_request_back(broker, ids):
    """A reason over 1024 bytes is cut to 1024 bytes of UTF-8 (not 1024 characters, which
    the broker refused as too long: the request then stayed with a worker that gave it up)."""
    t, _ = ids
    tries = []

    async def declines(r):
        tries.append(r.attempt)
        raise agentbus.Decline("\u00e9" * 1000)  # 2,000 bytes

    async def main():
        w = agentbus.AsyncWorker(broker.endpoint, name="py-decliner")
        w.agent("py-decline", declines)
        task = await serving(w)
        async with agentbus.AsyncClient(broker.endpoint) as c:
            a = await c.start_run("py-decline", t, {"messages": []}, key=t + "k")
            for _ in range(300):
                got = (await c.requests(agent="py-decline", state="queued"))["requests"]
                if w.stats["declined"] and any(q["request"] == a["request"] for q in got):
                    break
                await asyncio.sleep(0.02)
        await w.stop()
        await task
        return a, got, w

    a, got, w = run(main())
    assert tries and w.stats["declined"] >= 1 and not w.errors, w.errors
    assert any(q["request"] == a["request"] for q in got), got


@pytest.mark.parametrize("style", ["async", "sync"])
def test_cancel_reaches_the_handler(broker, ids, style):
    t, _ = ids
    got = {}

    async def ah(r):
        await r.start()
        got["cancelled"] = await r.wait_cancelled(15)

    def sh(r):
        r.start()
        got["cancelled"] = r.wait_cancelled(15)

    async def main():
        w = agentbus.AsyncWorker(broker.endpoint, name=f"py-cancel-{style}")
        w.agent(f"py-cancel-{style}", ah if style == "async" else sh)
        task = await serving(w)
        async with agentbus.AsyncClient(broker.endpoint) as c:
            a = await c.start_run(f"py-cancel-{style}", t, key=t + "k")
            async with agentbus.AsyncSubscriber(broker.endpoint, scope="run", thread=t,
                                                run=a["run"]) as s:
                first = await s.__anext__()
                assert first.type == "RUN_STARTED"
                rep = await c.cancel_run(t, a["run"], reason="enough")
                last = await s.__anext__()
        await w.stop()
        await task
        return rep, last

    rep, last = run(main())
    assert rep["outcome"] == "delivered"
    assert got["cancelled"] is True
    assert last.type == "RUN_FINISHED" and last.body["outcome"] == {"type": "cancelled"}


def test_resume_with_explicit_decisions(broker, ids):
    t, _ = ids
    resumes = []

    async def h(r):
        if not r.input.get("resume"):
            await r.start()
            await r.interrupt([{"id": "int-1", "reason": "confirm"},
                               {"id": "int-2", "reason": "confirm"}])
            return
        resumes.append(r.input["resume"])
        await r.finish()

    async def main():
        w = agentbus.AsyncWorker(broker.endpoint, name="py-resume")
        w.agent("py-resume", h)
        task = await serving(w)
        async with agentbus.AsyncClient(broker.endpoint) as c:
            a = await c.start_run("py-resume", t, key=t + "k")
            ev = await until_end(broker.endpoint, t, a["run"])
            assert ev[-1].body["outcome"]["type"] == "interrupt"
            with pytest.raises(errors.Conflict) as ei:
                await c.resume_run(t, a["run"], {"int-1": True}, key=t + "bad")
            assert ei.value.details.get("interruptId") == "int-2"
            b = await c.resume_run(t, a["run"], {"int-1": ("resolved", {"ok": 1}),
                                                 "int-2": False}, key=t + "r")
            assert b["run"] != a["run"] and not b["existing"]
            ev2 = await until_end(broker.endpoint, t, b["run"])
        await w.stop()
        await task
        return ev2

    ev2 = run(main())
    assert ev2[-1].type == "RUN_FINISHED"
    assert resumes == [[{"interruptId": "int-1", "status": "resolved", "payload": {"ok": 1}},
                        {"interruptId": "int-2", "status": "cancelled"}]]


def test_actions_results_and_errors(broker, ids):
    t, _ = ids

    def approve(call):
        return {"approved": call.payload["id"], "thread": call.thread}

    async def refuse(call):
        raise errors.Conflict("already decided", field="payload/id", details={"id": 7})

    async def main():
        w = agentbus.AsyncWorker(broker.endpoint, name="py-actions")
        w.agent("py-act", actions={"approve": approve, "refuse": refuse})
        task = await serving(w)
        async with agentbus.AsyncClient(broker.endpoint) as c:
            rep = await c.invoke_action("py-act", "approve", {"id": "tc-1"}, thread=t)
            with pytest.raises(errors.Conflict) as ei:
                await c.invoke_action("py-act", "refuse", {})
            with pytest.raises(errors.Unsupported):
                await c.invoke_action("py-act", "never-served")
        await w.stop()
        await task
        return rep, ei.value, w

    rep, err, w = run(main())
    assert rep["result"] == {"approved": "tc-1", "thread": t} and rep["worker_id"] == w.worker_id
    assert err.field == "payload/id" and err.details == {"id": 7} and err.message == "already decided"
    assert w.stats["calls"] == 2 and w.stats["call_errors"] == 1


def test_lease_loss_hands_the_run_to_another_worker(broker, ids):
    t, _ = ids
    attempts = []

    async def h(r):
        attempts.append((r.attempt, r.epoch))
        if r.attempt == 1:
            # a stuck worker: its loop sends nothing (no ping) until its 1 s lease has
            # lapsed and the run went to the other worker (bounded)
            end = time.monotonic() + 20
            while len(attempts) < 2 and time.monotonic() < end:
                time.sleep(0.01)
        await r.start()
        await r.finish()

    # w1 runs on a loop of its own (a blocking Worker in a thread), so its stuck handler
    # stops only its pings; w2 registers once w1 holds the assignment.
    w1 = agentbus.Worker(broker.endpoint, name="py-lease-1", lease_ms=1000)
    w1.agent("py-lease", h)
    w1.serve()
    th = threading.Thread(target=w1.run, kwargs={"timeout": 8})
    th.start()

    async def main():
        async with agentbus.AsyncClient(broker.endpoint) as c:
            a = await c.start_run("py-lease", t, key=t + "k")
            while not attempts:
                await asyncio.sleep(0.01)
            w2 = agentbus.AsyncWorker(broker.endpoint, name="py-lease-2", lease_ms=1000)
            w2.agent("py-lease", h)
            t2 = await serving(w2)
            ev = await until_end(broker.endpoint, t, a["run"])
        await w2.stop()
        await t2
        return ev

    ev = run(main())
    w1.stop_soon()
    th.join(15)
    w1.close()
    assert [a for a, _ in attempts] == [1, 2]
    e2 = attempts[1][1]
    assert attempts[0][1] < e2 and all(e.epoch == e2 for e in ev)
    assert [e.type for e in ev] == ["RUN_STARTED", "RUN_FINISHED"]
    assert any(isinstance(e, errors.Fenced) for e in w1.errors)


def test_lease_kept_while_idle_and_served_again_after_a_restart(make_broker):
    b = make_broker()

    async def main():
        w = agentbus.AsyncWorker(b.endpoint, name="py-keep", lease_ms=1000, timeout=0.5)
        w.agent("py-keep", actions={"hi": lambda call: "hi"})
        task = await serving(w)
        loop = asyncio.get_running_loop()
        async with agentbus.AsyncClient(b.endpoint) as c:
            end = loop.time() + 2.5  # past two leases with nothing but the worker's pings
            while loop.time() < end:
                (me,) = [x for x in await c.workers() if x["worker"] == "py-keep"]
                assert me["idle_ms"] < me["lease_ms"]
                await asyncio.sleep(0.25)
            assert (await c.invoke_action("py-keep", "hi"))["result"] == "hi"
        pings = w.stats["pings"]
        b.kill()
        b.restart()
        async with agentbus.AsyncClient(b.endpoint) as c:
            end = loop.time() + 15
            while True:  # unsupported until the worker has served the new instance
                try:
                    rep = await c.invoke_action("py-keep", "hi", timeout_ms=1000)
                    break
                except (errors.Unsupported, errors.Unavailable):
                    assert loop.time() < end
                    await asyncio.sleep(0.1)
        await w.stop()
        await task
        return pings, rep, w

    pings, rep, w = run(main(), 40)
    assert pings >= 3 and rep["result"] == "hi" and w.stats["reserved"] >= 1


def test_orphaned_run_listed_and_abandoned(broker, ids):
    t, _ = ids
    forever = []

    async def h(r):
        await r.start()
        forever.append(asyncio.get_running_loop().create_future())
        await forever[0]  # never resolved: the worker leaves with the run started

    async def main():
        w = agentbus.AsyncWorker(broker.endpoint, name="py-orphan")
        w.agent("py-orphan", h)
        task = await serving(w)
        async with agentbus.AsyncClient(broker.endpoint) as c:
            a = await c.start_run("py-orphan", t, key=t + "k")
            async with agentbus.AsyncSubscriber(broker.endpoint, scope="run", thread=t,
                                                run=a["run"]) as s:
                assert (await s.__anext__()).type == "RUN_STARTED"
                await w.stop(wait=0.1)  # leave: a started run is orphaned
                await task
                reqs = (await c.requests(agent="py-orphan"))["requests"]
                rep = await c.cancel_run(t, a["run"])
                ab = await c.abandon_run(t, a["run"], reason="the worker left")
                last = await s.__anext__()
                _, (head,) = await c.heads([(t, a["run"])])
        return reqs, rep, ab, last, head

    reqs, rep, ab, last, head = run(main())
    assert [(x["state"], x["orphaned"]) for x in reqs] == [("started", True)]
    assert rep["outcome"] == "no_owner"
    assert ab["seq"] == 2 and ab["pos"] == last.pos
    assert last.type == "RUN_ERROR" and last.by == "broker"
    assert last.body["code"] == "agentbus.abandoned" and last.body["message"] == "the worker left"
    assert head.status == "errored"
