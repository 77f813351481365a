"""AsyncClient: the queries and control calls of docs/PROTOCOL.md on one connection —
heads (7.5), replay with credit (7.6), snapshot (7.8), ping (7.9), workers (7.10),
invoke_action (7.11), start_run (7.12), cancel_run (7.13), resume_run (7.14), requests
(7.15), abandon_run (7.17), threads (7.19).

Invariants: a replay grants credit for every chunk it receives, also after it was
abandoned or cancelled (7.6.1 rule 3), and never reuses a cid; its unread chunks are
bounded by the window it granted; a chunk that does not parse ends the replay with
InvalidEnvelope (and a ``cancel``), delivering none of its events.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator

from . import errors, wire
from ._conn import AsyncConnection, Keys


@dataclass
class Head:
    """The state of one run (7.1 "head")."""

    thread: str
    run: str
    last_seq: int
    epoch: int
    status: str
    last_pos: int
    outcome: str | None = None
    orphaned: bool = False

    @classmethod
    def from_wire(cls, m: dict[str, Any]) -> "Head":
        return cls(m["thread"], m["run"], m["last_seq"], m["epoch"], m["status"],
                   m["last_pos"], m.get("outcome"), bool(m.get("orphaned", False)))

    @property
    def terminal(self) -> bool:
        return self.status in ("finished", "errored")


class Replay:
    """An async iterator over the events of one ``replay`` (7.6), credit kept up.

    After it is exhausted, ``end`` holds the ``replay_end`` header and ``heads`` its heads.
    ``next_chunk()`` gives the events of one chunk at a time (None at the end).
    """

    def __init__(self, conn: AsyncConnection, fields: dict[str, Any], window: int,
                 timeout: float | None):
        self.conn = conn
        self.fields = fields
        self.window = max(1, min(window, conn.limits["max_replay_window"]))
        self.timeout = timeout
        self.cid = 0
        self.end: dict[str, Any] | None = None
        self.heads: list[Head] = []
        self.events = 0
        self._stream = None
        self._pending: list[wire.Event] = []
        self._done = False

    async def start(self) -> "Replay":
        self.cid = self.conn.next_cid()
        self._stream = self.conn.open_stream(self.cid)
        f = dict(self.fields)
        f["window"] = self.window
        try:
            await self.conn.send("replay", f, cid=self.cid)
        except BaseException:
            self.conn.close_stream(self.cid)
            raise
        return self

    async def next_chunk(self) -> list[wire.Event] | None:
        """The events of the next chunk, or None once ``replay_end`` came."""
        c = await self.next_chunk_ex()
        return None if c is None else c[0]

    async def next_chunk_ex(self) -> tuple[list[wire.Event], bool] | None:
        """next_chunk() with wire.decode_chunk()'s "positions consecutive" flag."""
        if self._done:
            return None
        t = self.conn.timeout if self.timeout is None else self.timeout
        try:
            item = await asyncio.wait_for(self._stream.q.get(), t)
        except asyncio.TimeoutError:
            await self._abandon()
            raise errors.Timeout(f"no replay chunk within {t:g} s", cid=self.cid) from None
        if isinstance(item, BaseException):
            self._finish()
            raise item
        h, rest = item
        if h["op"] == "replay_end":
            self._finish()
            self.end = h
            self.heads = [Head.from_wire(m) for m in wire.need(h, "heads", list)]
            return None
        if h["op"] != "replay_chunk":
            await self._abandon()
            raise errors.InvalidEnvelope(f"unexpected {h['op']} in a replay", field="op",
                                         cid=self.cid)
        await self.conn.send("credit", {"chunks": 1}, cid=self.cid)
        try:
            if len(rest) != 1:
                raise errors.InvalidEnvelope("replay_chunk without exactly one records frame",
                                             field="count")
            frame = rest[0].buffer
            if len(frame) != wire.need(h, "bytes", int):
                raise errors.InvalidEnvelope("records frame is not `bytes` long", field="bytes")
            evs, consecutive = wire.decode_chunk(frame, True)
            if len(evs) != wire.need(h, "count", int):
                raise errors.InvalidEnvelope("records frame does not hold `count` records",
                                             field="count")
        except errors.AgentbusError as e:
            e.cid = self.cid
            await self._abandon()
            raise
        self.events += len(evs)
        return evs, consecutive

    def _finish(self) -> None:
        self._done = True
        self.conn.close_stream(self.cid)

    async def _abandon(self) -> None:
        """Cancel the replay; its later chunks are credited by a drain task, so the
        broker's session is released (7.6.1 rule 3)."""
        if self._done:
            return
        self._done = True
        try:
            await self.conn.send("cancel", cid=self.cid)
        except errors.AgentbusError:
            self.conn.close_stream(self.cid)
            return
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while True:
                item = await asyncio.wait_for(self._stream.q.get(), self.conn.timeout)
                if isinstance(item, BaseException) or item[0]["op"] != "replay_chunk":
                    return
                await self.conn.send("credit", {"chunks": 1}, cid=self.cid)
        except (asyncio.TimeoutError, errors.AgentbusError):
            return
        finally:
            self.conn.close_stream(self.cid)

    async def aclose(self) -> None:
        await self._abandon()

    def __aiter__(self) -> AsyncIterator[wire.Event]:
        return self

    async def __anext__(self) -> wire.Event:
        while not self._pending:
            chunk = await self.next_chunk()
            if chunk is None:
                raise StopAsyncIteration
            self._pending = chunk
            self._pending.reverse()
        return self._pending.pop()


def _resume_entries(resume: Any) -> list[dict[str, Any]]:
    """ResumeEntry maps from a list of them, or from {interruptId: decision}, a decision
    being "resolved" / "cancelled", True / False, or a (status, payload) pair."""
    if isinstance(resume, dict):
        out = []
        for iid, d in resume.items():
            payload = None
            if isinstance(d, tuple):
                d, payload = d
            status = {True: "resolved", False: "cancelled"}.get(d, d) if isinstance(d, bool) else d
            if status not in ("resolved", "cancelled"):
                raise errors.InvalidArgument(f"decision for {iid} is neither resolved nor "
                                             "cancelled", field=f"resume/{iid}")
            e = {"interruptId": iid, "status": status}
            if payload is not None:
                e["payload"] = payload
            out.append(e)
        return out
    return list(resume)


class AsyncClient:
    """Queries and control calls of a bus (asyncio).  ``await AsyncClient.open(...)``
    or ``async with AsyncClient(...) as c``; every call raises the typed error of its
    answer (agentbus.errors) and Timeout when none came within ``timeout`` seconds."""

    def __init__(self, endpoint: str | None = None, *, keys: Keys | None = None,
                 timeout: float = 5.0, client_name: str | None = None,
                 conn: AsyncConnection | None = None):
        self.conn = conn or AsyncConnection(endpoint, keys=keys, timeout=timeout,
                                            client_name=client_name)

    @classmethod
    async def open(cls, endpoint: str | None = None, **kw: Any) -> "AsyncClient":
        c = cls(endpoint, **kw)
        await c.conn.connect()
        return c

    async def __aenter__(self) -> "AsyncClient":
        if self.conn.welcome is None:
            await self.conn.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self.conn.close()

    @property
    def limits(self) -> dict[str, int]:
        return self.conn.limits

    @property
    def caps(self) -> dict[str, str]:
        return self.conn.caps

    @property
    def access(self) -> dict[str, Any] | None:
        """What this connection's key may do, from welcome (PROTOCOL.md 7.2 ``access``):
        ``{"name": ..., "roles": {role: True | [prefix, ...]}}``; None from a broker
        without keys (everyone may do everything)."""
        w = self.conn.welcome or {}
        a = w.get("access")
        return a if isinstance(a, dict) else None

    @property
    def instance(self) -> str:
        return self.conn.instance

    def stats(self) -> dict[str, int]:
        """The connection's counters: requests, replies, errors, dropped answers,
        unsolicited messages, connects, timeouts."""
        s = self.conn.stats
        return {"requests": s.requests, "replies": s.replies, "errors": s.errors,
                "dropped": s.dropped, "unsolicited": s.unsolicited, "connects": s.connects,
                "timeouts": s.timeouts, **s.extra}

    async def _req(self, op: str, fields: dict[str, Any] | None = None, expect: str = "",
                   timeout: float | None = None) -> dict[str, Any]:
        h = await self.conn.request(op, fields, timeout=timeout)
        if expect and h["op"] != expect:
            raise errors.InvalidEnvelope(f"{op}: expected {expect}, got {h['op']}", field="op")
        return h

    async def ping(self) -> dict[str, Any]:
        """``pong``: {"instance", "head_pos"}."""
        h = await self._req("ping", None, "pong")
        return {"instance": wire.need(h, "instance", str), "head_pos": wire.need(h, "head_pos", int)}

    async def heads(self, runs: list[tuple[str, str]] | None = None, *,
                    thread: str | None = None) -> tuple[int, list[Head]]:
        """(head_pos, heads) of the given (thread, run) pairs, or of every run of a thread."""
        if (runs is None) == (thread is None):
            raise errors.InvalidArgument("heads: give runs or thread, not both")
        f = ({"thread": thread} if thread is not None else
             {"runs": [{"thread": t, "run": r} for t, r in runs]})
        h = await self._req("heads", f, "heads_reply")
        return wire.need(h, "head_pos", int), [Head.from_wire(m) for m in wire.need(h, "heads", list)]

    async def head(self, thread: str, run: str) -> Head:
        return (await self.heads([(thread, run)]))[1][0]

    async def replay(self, scope: str = "all", *, thread: str | None = None,
                     run: str | None = None, after_seq: int = 0,
                     cursors: dict[str, int] | None = None, after_pos: int = 0,
                     window: int = 8, chunk_events: int | None = None,
                     window_bytes: int | None = None, timeout: float | None = None) -> Replay:
        """Start a replay (7.6) of scope "run" (thread, run, after_seq), "thread" (thread,
        cursors run -> last seq, and only the events above @p after_pos when it is not 0:
        with no cursors, the thread after that position) or "all" (after_pos); iterate
        it for its events.  The broker refuses a thread replay with more cursors than
        its ``max_batch`` (TooLarge)."""
        f: dict[str, Any] = {"scope": scope}
        if scope == "run":
            f.update(thread=thread, run=run, after_seq=after_seq)
        elif scope == "thread":
            f.update(thread=thread, cursors=dict(cursors or {}))
            if after_pos:  # sent only when used: a broker before it refuses the key (7.6)
                f["after_pos"] = after_pos
        elif scope == "all":
            f["after_pos"] = after_pos
        else:
            raise errors.InvalidArgument(f"unknown replay scope {scope!r}", field="scope")
        if chunk_events is not None:
            f["chunk_events"] = chunk_events
        if window_bytes is not None:
            f["window_bytes"] = window_bytes
        return await Replay(self.conn, f, window, timeout).start()

    async def snapshot(self, thread: str) -> dict[str, Any]:
        """The thread's snapshot document (7.8, docs/REDUCER.md)."""
        h = await self._req("snapshot", {"thread": thread}, "snapshot_reply")
        return wire.need(h, "snapshot", dict)

    async def workers(self) -> list[dict[str, Any]]:
        return wire.need(await self._req("workers", None, "workers_reply"), "workers", list)

    async def invoke_action(self, agent: str, action: str, payload: Any = None, *,
                            thread: str | None = None, timeout_ms: int | None = None) -> dict:
        """Call an action on a worker (7.11); returns the ``action_reply`` ({"result",
        "worker_id", ...}); the worker's own error is raised as its typed exception."""
        if payload is not None:
            wire.check_json_safe(payload, self.limits["max_depth"] - 1, "payload")
        f = {"agent": agent, "action": action, "payload": payload, "thread": thread,
             "timeout_ms": timeout_ms}
        t = (timeout_ms or 30000) / 1000 + self.conn.timeout
        return await self._req("invoke_action", f, "action_reply", timeout=t)

    async def start_run(self, agent: str, thread: str, input: dict[str, Any] | None = None, *,
                        key: str, run: str | None = None, if_busy: str | None = None) -> dict:
        """Ask for a run of @p agent (7.12); the ``run_accepted`` answer (request, run,
        state, position, existing).  The same @p key always names the same request."""
        inp = dict(input or {})
        inp.setdefault("messages", [])
        f = {"agent": agent, "thread": thread, "run": run, "input": inp, "key": key,
             "if_busy": if_busy}
        return await self._req("start_run", f, "run_accepted")

    async def cancel_run(self, thread: str, run: str, reason: str | None = None) -> dict:
        """Cancel a run (7.13): ``outcome`` dequeued, delivered, no_owner or ended."""
        return await self._req("cancel_run", {"thread": thread, "run": run, "reason": reason},
                               "cancel_reply")

    async def resume_run(self, thread: str, run: str, resume: Any, *, key: str,
                         agent: str | None = None, new_run: str | None = None,
                         input: dict[str, Any] | None = None) -> dict:
        """Answer every pending interrupt of an interrupted run and queue the run that
        continues it (7.14).  @p resume: ResumeEntry maps, or {interruptId: decision}."""
        f = {"thread": thread, "run": run, "resume": _resume_entries(resume), "key": key,
             "agent": agent, "new_run": new_run, "input": input}
        return await self._req("resume_run", f, "run_accepted")

    async def abandon_run(self, thread: str, run: str, reason: str | None = None) -> dict:
        """End an orphaned run with the broker's RUN_ERROR (7.17): {"seq", "pos", ...}."""
        return await self._req("abandon_run", {"thread": thread, "run": run, "reason": reason},
                               "abandoned")

    async def requests(self, *, state: str | None = None, agent: str | None = None,
                       after: int | None = None, limit: int | None = None) -> dict:
        """Dispatched requests (7.15): {"requests": [...], "more": bool}."""
        return await self._req("requests", {"state": state, "agent": agent, "after": after,
                                            "limit": limit}, "requests_reply")

    async def threads(self, *, after: str | None = None, prefix: str | None = None,
                      limit: int | None = None) -> dict:
        """One page of the threads with stored events, in byte order of their ids (7.19):
        {"threads": [{"thread", "runs", "active", "last_run", "last_pos"}...], "next": id}
        ("next" only while more may follow: pass it as @p after)."""
        return await self._req("threads", {"after": after, "prefix": prefix, "limit": limit},
                               "threads_reply")
