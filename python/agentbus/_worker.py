"""AsyncWorker: serve agents (docs/PROTOCOL.md 7.10-7.13).  Each agent has a handler, an
ordinary function or an ``async def``, that gets the run's ``RunAgentInput`` and an
emitter for its events (a ``Run``); its action ids have handlers of their own.

The worker's connection reads everything that arrives (its reader task, ``_conn``) and
never blocks on one reply: ``assign``, ``run_cancel`` and ``action_call`` (cid 0) go to a
queue the worker loop serves; each run and each call is a task of its own.  An ordinary
handler runs in a thread; its emitter hands each event to the loop and waits for it.

The lease (7.10): the loop sends a ``ping`` whenever nothing was sent for a third of the
lease.  A ``pong`` of another broker instance, or a reconnect, sends ``serve`` again (the
registration is not stored by the broker).  ``stop()`` sends ``leave``.

Runs: the assignment's epoch publishes the run (no claim, 7.12).  The first event emitted
is preceded by ``RUN_STARTED`` echoing the input, unless the handler emitted one; a handler
that returns without ending the run ends it (``RUN_FINISHED``, outcome ``cancelled`` after
a ``run_cancel``), one that raises ends it with ``RUN_ERROR``, one that raises ``Decline``
before starting declines the assignment.  A run whose publish is refused ``fenced`` (the
lease lapsed and another worker has it) stops: the exception reaches the handler.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import uuid
from typing import Any, Callable

from . import errors, wire
from ._conn import AsyncConnection, Keys, backoff_delay
from ._producer import AsyncProducer


class Decline(Exception):
    """Raise from a run handler before its first event to give the assignment back."""


def _is_async(fn: Callable) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))


class AsyncRun:
    """An assigned run and its emitter (asyncio).  Attributes: request, agent, thread,
    run, input (the RunAgentInput), epoch, attempt, cancelled, cancel_reason."""

    def __init__(self, worker: "AsyncWorker", a: dict[str, Any]):
        self.worker = worker
        self.request = a["request"]
        self.agent = a["agent"]
        self.thread = a["thread"]
        self.run = a["run"]
        self.input = a["input"]
        self.epoch = a["epoch"]
        self.attempt = a["attempt"]
        self.cancelled = False
        self.cancel_reason = ""
        self._cancel_ev = asyncio.Event()
        self.started = False
        self.ended = False
        self.producer = AsyncProducer(conn=worker.conn, batch_max=64)
        self.producer.assigned(self.thread, self.run, self.epoch)
        self._n = 0

    def _id(self, kind: str) -> str:
        self._n += 1
        return f"{kind}-{self.run}-{self._n}"

    async def emit(self, event: dict[str, Any], flush: bool = True) -> int:
        """Publish one AG-UI event of this run (acknowledged before it returns unless
        @p flush is False); returns its seq.  Starts the run first if needed."""
        if self.ended:
            raise errors.RunTerminal("the run already ended", field="event/type")
        t = event.get("type")
        if not self.started and t not in ("RUN_STARTED", "RUN_ERROR"):
            await self.start()
        if t == "RUN_STARTED":
            self.started = True
        if t in ("RUN_FINISHED", "RUN_ERROR"):
            self.ended = True
        seq = await self.producer.publish(event)
        if flush or self.ended:
            await self.producer.flush()
        return seq

    async def start(self) -> int:
        """``RUN_STARTED`` echoing the input (SEQUENCER.md rule 7 checks it)."""
        return await self.emit({"type": "RUN_STARTED", "threadId": self.thread,
                                "runId": self.run, "protocolVersion": "1.0",
                                "input": self.input})

    async def text(self, content: str | list[str], message_id: str | None = None) -> str:
        """An assistant text message: START, one CONTENT per chunk, END; its id."""
        mid = message_id or self._id("msg")
        await self.emit({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"},
                        flush=False)
        for chunk in [content] if isinstance(content, str) else content:
            await self.emit({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": chunk})
        await self.emit({"type": "TEXT_MESSAGE_END", "messageId": mid})
        return mid

    async def tool_call(self, name: str, args: Any, result: Any = None,
                        tool_call_id: str | None = None) -> str:
        """A tool call (START, ARGS as JSON text, END) and, when @p result is given, its
        TOOL_CALL_RESULT; the tool call's id."""
        import json
        tid = tool_call_id or self._id("tool")
        await self.emit({"type": "TOOL_CALL_START", "toolCallId": tid, "toolCallName": name},
                        flush=False)
        await self.emit({"type": "TOOL_CALL_ARGS", "toolCallId": tid,
                         "delta": args if isinstance(args, str) else json.dumps(args)},
                        flush=False)
        await self.emit({"type": "TOOL_CALL_END", "toolCallId": tid})
        if result is not None:
            await self.emit({"type": "TOOL_CALL_RESULT", "messageId": self._id("msg"),
                             "toolCallId": tid, "role": "tool",
                             "content": result if isinstance(result, str) else json.dumps(result)})
        return tid

    async def finish(self, result: Any = None) -> int:
        """``RUN_FINISHED`` (success)."""
        ev: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": self.thread, "runId": self.run}
        if result is not None:
            ev["result"] = result
        return await self.emit(ev)

    async def interrupt(self, interrupts: list[dict[str, Any]]) -> int:
        """End the run asking for decisions: ``RUN_FINISHED`` with outcome ``interrupt``
        (each interrupt a map with at least ``id`` and ``reason``).  A controller answers
        with ``Client.resume_run``, which queues the run that continues."""
        return await self.emit({"type": "RUN_FINISHED", "threadId": self.thread,
                                "runId": self.run,
                                "outcome": {"type": "interrupt", "interrupts": interrupts}})

    async def finish_cancelled(self) -> int:
        return await self.emit({"type": "RUN_FINISHED", "threadId": self.thread,
                                "runId": self.run, "outcome": {"type": "cancelled"}})

    async def error(self, message: str, code: str | None = None) -> int:
        ev: dict[str, Any] = {"type": "RUN_ERROR", "message": message[:1000]}
        if code:
            ev["code"] = code
        return await self.emit(ev)

    async def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Wait for a ``run_cancel`` (True) or @p timeout seconds (False)."""
        try:
            await asyncio.wait_for(self._cancel_ev.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def _cancel(self, reason: str) -> None:
        self.cancelled = True
        self.cancel_reason = reason
        self._cancel_ev.set()


class SyncRun:
    """The emitter of an ordinary (blocking) handler: the same methods as AsyncRun,
    each run on the worker's loop and waited for from the handler's thread."""

    def __init__(self, arun: AsyncRun, loop: asyncio.AbstractEventLoop):
        self._a = arun
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._a, name)
        if inspect.iscoroutinefunction(attr):
            def call(*a: Any, **kw: Any) -> Any:
                return asyncio.run_coroutine_threadsafe(attr(*a, **kw), self._loop).result()
            return call
        return attr


class ActionCall:
    """An ``action_call`` (7.11): agent, action, payload, thread, timeout_ms, call."""

    def __init__(self, h: dict[str, Any]):
        self.call = h["call"]
        self.agent = h.get("agent")
        self.action = h.get("action")
        self.payload = h.get("payload")
        self.thread = h.get("thread")
        self.timeout_ms = h.get("timeout_ms")


class AsyncWorker:
    """A worker (asyncio): ``agent()`` registers handlers, ``run()`` serves until
    ``stop()``.  ``name`` defaults to ``<host>/<pid>`` (stable per process, 7.12)."""

    def __init__(self, endpoint: str | None = None, *, name: str | None = None,
                 lease_ms: int | None = None, keys: Keys | None = None,
                 timeout: float = 5.0, client_name: str | None = None):
        self.conn = AsyncConnection(endpoint, keys=keys, timeout=timeout,
                                    client_name=client_name)
        self.name = name or f"{socket.gethostname()}/{os.getpid()}"
        self.lease_ms_asked = lease_ms
        self.lease_ms = lease_ms or 10000
        self.worker_id = ""
        self._agents: dict[str, dict[str, Any]] = {}
        self._inbox: asyncio.Queue | None = None
        self._runs: dict[tuple[str, str], AsyncRun] = {}
        self._tasks: set[asyncio.Task] = set()
        self._stop: asyncio.Event | None = None
        self._served_instance = ""
        self.stats = {"assigned": 0, "declined": 0, "cancels": 0, "calls": 0,
                      "call_errors": 0, "undelivered": 0, "pings": 0, "reserved": 0,
                      "runs_ok": 0, "runs_failed": 0}
        self.errors: list[BaseException] = []  # run handlers' failures (bounded to 64)

    def agent(self, name: str, handler: Callable | None = None, *, capacity: int = 1,
              actions: dict[str, Callable] | None = None) -> Callable:
        """Serve agent @p name with @p handler(run) (usable as a decorator);
        @p actions maps action ids to handler(call) -> result."""
        wire.check_id(name, "agents/name")

        def reg(fn: Callable | None) -> Callable | None:
            a = self._agents.setdefault(name, {"capacity": capacity, "actions": {}})
            a["capacity"] = capacity
            a["handler"] = fn
            a["actions"].update(actions or {})
            return fn
        if handler is None and actions is None:
            return reg  # type: ignore[return-value]
        reg(handler)
        return handler  # type: ignore[return-value]

    def action(self, agent: str, action_id: str) -> Callable:
        """Decorator: @worker.action("planner", "approve") def approve(call): ..."""
        def reg(fn: Callable) -> Callable:
            self._agents.setdefault(agent, {"capacity": 1, "actions": {}, "handler": None})
            self._agents[agent]["actions"][action_id] = fn
            return fn
        return reg

    # -- registration -------------------------------------------------------------------------

    async def serve(self) -> str:
        """Connect if needed and register (``serve``); the worker_id."""
        if not self._agents:
            raise errors.InvalidArgument("a worker with no agent")
        if self._inbox is None:
            self._inbox = asyncio.Queue()
            self._stop = asyncio.Event()
            self.conn.on_unsolicited = lambda h, rest: self._inbox.put_nowait(h)
            self.conn.after_connect.append(self._serve)
        if self.conn.welcome is None:
            await self.conn.connect()  # runs _serve
        else:
            await self._serve()
        return self.worker_id

    async def _serve(self) -> None:
        agents = [{"name": n, "capacity": a["capacity"], "actions": sorted(a["actions"])}
                  for n, a in self._agents.items()]
        h = await self.conn.request("serve", {"worker": self.name[:256], "agents": agents,
                                              "lease_ms": self.lease_ms_asked})
        if h["op"] != "served":
            raise errors.InvalidEnvelope(f"serve: got {h['op']}", field="op")
        self.worker_id = wire.need(h, "worker_id", str)
        self.lease_ms = wire.need(h, "lease_ms", int)
        if self._served_instance:
            self.stats["reserved"] += 1
        self._served_instance = self.conn.instance

    # -- the loop -------------------------------------------------------------------------------

    async def run(self, timeout: float | None = None) -> None:
        """Serve (``serve()`` first if needed) until ``stop()`` or @p timeout seconds."""
        if not self.worker_id:
            await self.serve()
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        failures = 0
        while not self._stop.is_set():  # type: ignore[union-attr]
            now = loop.time()
            if end is not None and now >= end:
                break
            third = self.lease_ms / 3000
            wait = max(0.0, self.conn.last_send + third - now)
            if end is not None:
                wait = min(wait, end - now)
            try:
                h = await asyncio.wait_for(self._inbox.get(), wait)  # type: ignore[union-attr]
            except asyncio.TimeoutError:
                h = None
            if h is not None:
                if h["op"] != "_stop":
                    self._dispatch(h)
                continue
            if loop.time() - self.conn.last_send >= third:
                try:
                    await self._keepalive()
                    failures = 0
                except errors.AgentbusError as e:
                    if not e.retryable and not isinstance(e, errors.Closed):
                        raise
                    failures += 1
                    await asyncio.sleep(backoff_delay(failures, 0.2, 5.0))
                    try:
                        await self.conn.connect()  # serves again
                    except errors.AgentbusError:
                        pass

    async def _keepalive(self) -> None:
        self.stats["pings"] += 1
        h = await self.conn.request("ping")
        if h.get("instance") != self._served_instance:
            await self.conn.connect()  # a restarted broker forgot us: hello and serve again

    async def stop(self, wait: float = 5.0) -> None:
        """Stop serving: ``leave`` (what was assigned and not started goes back to the
        queue at once), wait up to @p wait seconds for running handlers, close."""
        if self._stop is not None:
            self._stop.set()
            self._inbox.put_nowait({"op": "_stop"})  # wakes run()
        if self.worker_id:
            try:
                await self.conn.request("leave", timeout=0.5)
            except errors.AgentbusError:
                pass
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=wait)
        for t in self._tasks:
            t.cancel()
        await self.conn.close()

    def _spawn(self, coro: Any) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _dispatch(self, h: dict[str, Any]) -> None:
        op = h["op"]
        if op == "assign":
            self.stats["assigned"] += 1
            self._spawn(self._run_assignment(h))
        elif op == "run_cancel":
            self.stats["cancels"] += 1
            r = self._runs.get((h.get("thread"), h.get("run")))
            if r is not None and r.epoch == h.get("epoch", r.epoch):
                r._cancel(h.get("reason", ""))
        elif op == "action_call":
            self.stats["calls"] += 1
            self._spawn(self._answer_call(h))

    def _note(self, e: BaseException) -> None:
        if len(self.errors) < 64:
            self.errors.append(e)

    async def _run_assignment(self, h: dict[str, Any]) -> None:
        try:
            for k in ("request", "epoch", "attempt"):
                wire.need(h, k, int)
            for k in ("agent", "thread", "run"):
                wire.need(h, k, str)
            wire.need(h, "input", dict)
        except errors.AgentbusError as e:
            self._note(e)
            return
        a = self._agents.get(h["agent"])
        if a is None or a.get("handler") is None:
            await self._decline(h, "this worker has no handler for the agent")
            return
        run = AsyncRun(self, h)
        self._runs[(run.thread, run.run)] = run
        try:
            fn = a["handler"]
            if _is_async(fn):
                await fn(run)
            else:
                await asyncio.to_thread(fn, SyncRun(run, asyncio.get_running_loop()))
            if not run.ended:
                if run.cancelled:
                    await run.finish_cancelled()
                else:
                    await run.finish()
            self.stats["runs_ok"] += 1
        except Decline as d:
            if run.started:
                await self._end_with_error(run, f"declined after starting: {d}")
            else:
                await self._decline(h, str(d))
        except errors.Fenced as e:
            self.stats["runs_failed"] += 1
            self._note(e)  # another worker owns the run now: nothing more to publish
        except Exception as e:  # the handler failed: the run ends with RUN_ERROR
            self.stats["runs_failed"] += 1
            self._note(e)
            await self._end_with_error(run, f"{type(e).__name__}: {e}")
        finally:
            self._runs.pop((run.thread, run.run), None)

    async def _end_with_error(self, run: AsyncRun, message: str) -> None:
        if run.ended or run.producer._failed is not None:
            return
        try:
            await run.error(message, code="worker.handler_failed")
        except errors.AgentbusError as e:
            self._note(e)

    async def _decline(self, h: dict[str, Any], reason: str) -> None:
        self.stats["declined"] += 1
        try:
            await self.conn.request("decline", {"request": h["request"], "epoch": h["epoch"],
                                                "reason": errors._cut(reason, 1024)})
        except errors.AgentbusError as e:
            self._note(e)

    async def _answer_call(self, h: dict[str, Any]) -> None:
        try:
            call = ActionCall(h)
            wire.need(h, "call", int)
        except (errors.AgentbusError, KeyError) as e:
            self._note(e)
            return
        a = self._agents.get(call.agent or "", {})
        fn = a.get("actions", {}).get(call.action)
        fields: dict[str, Any] = {"call": call.call}
        try:
            if fn is None:
                raise errors.Unsupported(f"this worker has no action {call.action!r}",
                                         field="action")
            res = await fn(call) if _is_async(fn) else await asyncio.to_thread(fn, call)
            if res is not None:
                wire.check_json_safe(res, self.conn.limits["max_depth"] - 1, "result")
                fields["result"] = res
        except errors.AgentbusError as e:
            self.stats["call_errors"] += 1
            fields["error"] = e.to_wire()
        except Exception as e:
            self.stats["call_errors"] += 1
            fields["error"] = errors.Internal(f"{type(e).__name__}: {e}"[:159]).to_wire()
        try:
            ack = await self.conn.request("action_result", fields)
            if ack.get("delivered") is False:
                self.stats["undelivered"] += 1
        except errors.AgentbusError as e:
            self._note(e)


def new_key() -> str:
    """A fresh idempotency key for start_run/resume_run."""
    return uuid.uuid4().hex
