"""AsyncSubscriber: every event of a run, a thread or the whole bus after a cursor, each
exactly once and in order, live after a replay (docs/PROTOCOL.md 6.2 "Clone pattern",
6.3, 7.7).

The seam: the SUB subscribes to the scope's topic first and to ``hb`` after it, and the
first heartbeat proves the event subscription active (6.2 step 1).  Live events received
before that heartbeat were committed before the replay that follows reads the store, so
they are in it and are dropped.  Then ``replay`` from the cursor; live messages arriving
meanwhile wait in the SUB's queue (bounded by its receive high-water mark: ZeroMQ drops
whole messages past it, which the hole rule below catches).  After ``replay_end`` each live
event is judged: at or below the cursor a duplicate (dropped), the next one delivered,
further ahead a hole: nothing past it is delivered and the subscriber replays from its
cursor again.  Per run by seq (scopes run and thread), globally by pos (scope all).

An ordered thread (``ordered=True``, scope thread) follows its thread in commit order with
one cursor, ``after_pos`` P: every event of the thread up to P was handed out.  A live event
at or below P is a duplicate; one whose stamp's ``tprev`` is at or below P is the next (the
thread has nothing between ``tprev`` and ``pos``, PROTOCOL.md 5), a ``tprev`` above P is a
hole; without ``tprev`` (an older broker, ``--tprev false``) only ``pos`` = P + 1 is the
next.  Its replay is scope thread with ``after_pos`` P and no cursors (7.6), and every
event of it above P is delivered; ``replay_end``'s ``head_pos`` then raises P (the replay
sent everything of the thread up to it).  It keeps no per-run state, so a thread with any
number of runs works; the unordered thread scope keeps one cursor per run and its replay
names them all, which the broker refuses past ``max_batch`` runs (TooLarge, not retried).

Also replays when a heartbeat says more was committed than it knows of (a lost tail: for
scope all and an ordered thread, ``head_pos`` above its position — for an ordered thread
one replay per heartbeat while other threads commit, which the broker answers from its
thread index, as the C client does; for run and thread, ``heads`` showing a run ahead of
its cursor), and reconnects (new ``hello``, new SUB) on a new broker instance or on
``silence`` seconds without any message from the event endpoint, waiting between failed
attempts as 6.3 says (uniform in [c/2, c], c = min(reconnect_max, reconnect_base *
2^(n-1))), the wait reset only once the new connection worked (a heartbeat of its
instance, or a completed replay).

Two cursors: the judged one (``_cur`` / ``_pos``), which the rules above and every replay
use, covers the events queued in ``_ready`` too; the public one (``cursors`` / ``position``,
what ``cursor()`` returns) covers exactly the events handed to the application, the one
being handed out included (it advances just before the event is returned or given to a
callback, as the C client's, client/sub_sync.c), never one still queued: a crash after
saving it loses nothing.

Invariants: the public cursor advances as an event is handed out and never covers a queued
one; positions handed out by scope all and an ordered thread only grow; memory is bounded
by the SUB's high-water mark, one replay window and one live message, plus, for an
unordered thread, one cursor per run seen in each of the two maps (at most the broker's
``max_batch``, past which its replay raises TooLarge), for an ordered thread at most one
pending ``head_pos`` per queued event.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, AsyncIterator, Awaitable, Callable

import zmq

from . import errors, wire
from ._client import AsyncClient, Replay
from ._conn import AsyncConnection, Keys, _warn_unclosed, backoff_delay
from ._msgpack import FIELD_UINT_MAX


class AsyncSubscriber:
    """Subscriber of scope "run" (thread, run, after_seq), "thread" (thread, cursors run ->
    last seq; or, with ``ordered=True``, after_pos: the thread in commit order, for any
    number of runs) or "all" (after_pos); ``from_now=True`` starts at the broker's present
    instead.  Iterate it (``async for ev in sub``), call ``next_batch()``, or ``run(cb)``.
    """

    def __init__(self, endpoint: str | None = None, *, scope: str = "all",
                 thread: str | None = None, run: str | None = None,
                 after_seq: int | None = None, cursors: dict[str, int] | None = None,
                 after_pos: int | None = None, ordered: bool = False,
                 from_now: bool = False, keys: Keys | None = None,
                 timeout: float = 5.0, silence: float = 3.0, reconnect_base: float = 0.2,
                 reconnect_max: float = 5.0, window: int = 8, chunk_events: int = 1024,
                 rcvhwm: int | None = None, client_name: str | None = None):
        self._closed = True  # nothing to release until the connection exists
        if scope not in ("run", "thread", "all"):
            raise errors.InvalidArgument(f"unknown scope {scope!r}", field="scope")
        if scope != "all" and not thread or scope == "run" and not run:
            raise errors.InvalidArgument("scope run needs thread and run, thread a thread")
        if reconnect_base <= 0 or reconnect_max <= 0:
            raise errors.InvalidArgument("reconnect delays must be positive")
        if ordered and scope != "thread":
            raise errors.InvalidArgument("ordered is for scope thread", field="ordered")
        _check_cursor(scope, ordered, from_now, after_seq, cursors, after_pos)
        after_seq, after_pos = after_seq or 0, after_pos or 0
        self.conn = AsyncConnection(endpoint, keys=keys, timeout=timeout,
                                    client_name=client_name)
        self.client = AsyncClient(conn=self.conn)
        self.scope, self.thread, self.run_id = scope, thread, run
        # Two cursors.  The judged one (_cur per run, _pos by position) covers every event
        # judged and queued in _ready: the seam and the replays go from it.  The public
        # one (cursors, position; what cursor() returns) covers exactly the events handed
        # to the application, so a saved cursor never passes an event still queued here.
        self.cursors: dict[str, int] = dict(cursors or {})
        if scope == "run":
            self.cursors = {run: after_seq}  # type: ignore[dict-item]
        self._cur: dict[str, int] = dict(self.cursors)
        self.ordered = ordered
        self.position = after_pos  # scope all, ordered thread: the cursor handed out
        self._pos = after_pos
        self._taken = 0  # events handed out so far
        # ordered thread: (events handed out, head_pos) -- a replay_end's head_pos raises
        # the public cursor once every event queued before that replay ended is handed out
        # (at most one entry per event in _ready)
        self._raises: deque[tuple[int, int]] = deque()
        self._from_now = from_now
        self.silence = silence
        self.reconnect_base = min(reconnect_base, reconnect_max)
        self.reconnect_max = reconnect_max
        self.window = window
        self.chunk_events = chunk_events
        self.rcvhwm = rcvhwm
        self._sub: Any = None
        self._connected = False
        self._need_sync = True
        self._replay: Replay | None = None
        self._failures = 0
        self._next_attempt = 0.0
        self._last_heard = 0.0
        self._head_seen = 0
        self._ready: deque[wire.Event] = deque()
        self._closed = False
        self.stats = {"delivered": 0, "replays": 0, "holes": 0, "duplicates": 0,
                      "reconnects": 0, "live": 0, "replayed": 0, "backoff_ms": 0,
                      "silences": 0, "restarts": 0, "failures": 0}

    async def __aenter__(self) -> "AsyncSubscriber":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        self._close_sub()
        await self.conn.close()

    def __repr__(self) -> str:
        what = {"run": f" {self.thread}/{self.run_id}", "thread": f" {self.thread}"}
        return (f"<agentbus.AsyncSubscriber scope {self.scope}{what.get(self.scope, '')} "
                f"{self.conn.endpoint}>")

    def __del__(self) -> None:
        """Collected without close(): warn (ResourceWarning) and close both sockets with
        linger 0 and release the context, without the loop (it may be gone, or run in
        another thread) and without waiting for anything."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        _warn_unclosed(self)
        try:
            self._close_sub()
            self.conn._release()
        except Exception:  # noqa: BLE001 - a finalizer, maybe at interpreter exit
            pass

    @property
    def connected(self) -> bool:
        return self._connected

    # -- public driving --------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[wire.Event]:
        return self

    async def __anext__(self) -> wire.Event:
        while not self._ready:
            if self._closed:
                raise StopAsyncIteration
            await self._step(self._loop().time() + 3600)
        ev = self._ready.popleft()
        self._hand(ev)
        return ev

    async def next_batch(self, timeout: float = 1.0) -> list[wire.Event]:
        """The events deliverable now, waiting up to @p timeout seconds for some (an empty
        list then).  At most one live message's or replay chunk's events at a time.  The
        batch counts as handed out: cursor() covers all of it once this returns."""
        await self._wait_ready(timeout)
        return self._take()

    async def _wait_ready(self, timeout: float) -> bool:
        """Work until an event waits in _ready (True) or @p timeout seconds passed."""
        deadline = self._loop().time() + timeout
        while not self._ready:
            if not await self._step(deadline):
                return False
        return True

    def _hand(self, ev: wire.Event) -> None:
        """@p ev (just taken from _ready) goes to the application: the public cursor covers
        it from now on, and nothing after it."""
        self._taken += 1
        if self._by_pos:
            self.position = ev.pos
            if self._raises:
                self._raise_to()
        else:
            self.cursors[ev.run] = ev.seq
            if ev.pos > self.position:
                self.position = ev.pos

    def _take(self, n: int | None = None) -> list[wire.Event]:
        """Hand out the first @p n events of _ready (all of them by default)."""
        r = self._ready
        if n is None or n >= len(r):
            out = list(r)
            r.clear()
        else:
            out = [r.popleft() for _ in range(n)]
        if not out:
            return out
        self._taken += len(out)
        if self._by_pos:
            self.position = out[-1].pos
            if self._raises:
                self._raise_to()
        else:
            cur, top = self.cursors, self.position
            for ev in out:
                cur[ev.run] = ev.seq
                if ev.pos > top:
                    top = ev.pos
            self.position = top
        return out

    def _raise_to(self) -> None:
        """Ordered thread: apply the replay_end head_pos whose events are all handed out."""
        while self._raises and self._raises[0][0] <= self._taken:
            head = self._raises.popleft()[1]
            if head > self.position:
                self.position = head

    async def wait_synced(self, timeout: float = 10.0, max_ready: int = 4096) -> bool:
        """Connect and catch up (the replay to ``replay_end``) without handing anything
        out: True once live delivery goes on from here; False after @p timeout, or as soon
        as @p max_ready replayed events wait to be taken (memory stays bounded: take them
        with next_batch() and call it again)."""
        deadline = self._loop().time() + timeout
        while not self._connected or self._need_sync:
            if len(self._ready) >= max_ready or not await self._step(deadline):
                return False
        return True

    async def run(self, callback: Callable[[wire.Event], Any],
                  timeout: float | None = None) -> None:
        """Call @p callback (a function or ``async def``) with each event, in order,
        until it returns True or @p timeout seconds passed.  The cursor covers an event
        from just before its callback runs; after a True the events not given to the
        callback yet stay queued (the next call or iteration hands them out)."""
        loop = self._loop()
        end = None if timeout is None else loop.time() + timeout
        ready = self._ready
        while end is None or loop.time() < end:
            left = 1.0 if end is None else max(0.0, end - loop.time())
            if not ready:
                await self._wait_ready(min(1.0, left))
            while ready:
                ev = ready.popleft()
                self._hand(ev)
                r = callback(ev)
                if isinstance(r, Awaitable):
                    r = await r
                if r is True:
                    return

    def cursor(self) -> dict[str, Any]:
        """What to persist: {"cursors": run -> last seq} (run, thread) or {"after_pos"}
        (all, ordered thread).  It covers exactly the events handed to the application
        (by iteration, next_batch(), run()), the last one included, and none still queued
        here: a subscriber made from it gets exactly the events after them."""
        if self._by_pos:
            return {"after_pos": self.position}
        return {"cursors": dict(self.cursors)}

    # -- the state machine -----------------------------------------------------------------------

    @property
    def _by_pos(self) -> bool:
        """Judged by commit position against ``position`` (scope all, ordered thread)."""
        return self.scope == "all" or self.ordered

    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    async def _step(self, deadline: float) -> bool:
        """Make progress; False when @p deadline passed without anything to do."""
        now = self._loop().time()
        if now >= deadline:
            return False
        if not self._connected:
            if now < self._next_attempt:
                await asyncio.sleep(min(self._next_attempt, deadline) - now)
                return self._loop().time() < deadline
            try:
                await self._connect()
            except errors.AgentbusError as e:
                if not e.retryable and not isinstance(e, errors.Closed):
                    raise
                self._failed_attempt()
            return True
        if self._need_sync:
            try:
                await self._sync_step()
            except errors.AgentbusError as e:
                if not e.retryable and not isinstance(e, errors.Closed):
                    raise
                self._replay = None
                self._failed_attempt()
                if isinstance(e, (errors.Timeout, errors.Closed)):
                    self._disconnect()
            return True
        await self._live_step(deadline)
        return True

    def _failed_attempt(self) -> None:
        self.stats["failures"] += 1
        self._failures += 1
        d = backoff_delay(self._failures, self.reconnect_base, self.reconnect_max)
        self.stats["backoff_ms"] = int(d * 1000)
        self._next_attempt = self._loop().time() + d

    def _worked(self) -> None:
        self._failures = 0
        self.stats["backoff_ms"] = 0

    def _close_sub(self) -> None:
        if self._sub is not None:
            self._sub.close(0)
            self._sub = None

    def _disconnect(self) -> None:
        self._connected = False
        self._close_sub()
        if self._replay is not None:
            self._replay = None

    async def _connect(self) -> None:
        self.stats["reconnects"] += 1
        self._close_sub()
        await self.conn.connect()
        sub = self.conn.ctx.socket(zmq.SUB)
        sub.linger = 0
        if self.rcvhwm is not None:
            sub.rcvhwm = self.rcvhwm
        if self.conn.keys is not None:
            self.conn.keys.apply(sub)
        sub.connect(self.conn.event_endpoint)
        self._sub = sub
        # The event topic first, then hb: a heartbeat proves the first active (6.2).
        sub.subscribe(wire.topic(self.thread if self.scope != "all" else None,
                                 self.run_id if self.scope == "run" else None))
        sub.subscribe(wire.HEARTBEAT_TOPIC)
        await self._first_heartbeat()
        if self._from_now:
            await self._cursor_from_now()
            self._from_now = False
        self._connected = True
        self._need_sync = True
        self._last_heard = self._loop().time()

    async def _first_heartbeat(self) -> None:
        loop = self._loop()
        end = loop.time() + max(self.conn.timeout, self.silence)
        while True:
            left = end - loop.time()
            if left <= 0 or not await self._sub.poll(int(left * 1000) + 1):
                raise errors.Timeout("no heartbeat on the event endpoint")
            frames = await self._sub.recv_multipart()
            if frames[0] == wire.HEARTBEAT_TOPIC and len(frames) == 2:
                try:  # a heartbeat that breaks the rules (PROTOCOL.md 2, 6.3) is ignored
                    hb = wire.decode_header(frames[1])
                except errors.AgentbusError:
                    continue
                if hb.get("instance") != self.conn.instance:
                    raise errors.Unavailable("heartbeat of another broker instance")
                self._head_seen = 0
                return
            # a live event before it: committed before the coming replay reads (dropped)

    async def _cursor_from_now(self) -> None:
        # before anything was judged (nothing queued): both cursors start there
        if self._by_pos:
            self._pos = self.position = (await self.client.ping())["head_pos"]
        elif self.scope == "run":
            h = await self.client.head(self.thread, self.run_id)  # type: ignore[arg-type]
            self._cur[self.run_id] = self.cursors[self.run_id] = h.last_seq  # type: ignore[index]
        else:
            _, heads = await self.client.heads(thread=self.thread)
            for h in heads:
                self._cur[h.run] = self.cursors[h.run] = h.last_seq

    async def _sync_step(self) -> None:
        if self._replay is None:
            self.stats["replays"] += 1
            if self.scope == "all":
                self._replay = await self.client.replay("all", after_pos=self._pos,
                                                        window=self.window,
                                                        chunk_events=self.chunk_events)
            elif self.scope == "run":
                self._replay = await self.client.replay(
                    "run", thread=self.thread, run=self.run_id,
                    after_seq=self._cur[self.run_id], window=self.window,  # type: ignore[index]
                    chunk_events=self.chunk_events)
            elif self.ordered:
                self._replay = await self.client.replay("thread", thread=self.thread,
                                                        after_pos=self._pos,
                                                        window=self.window,
                                                        chunk_events=self.chunk_events)
            else:
                if len(self._cur) > self.conn.limits["max_batch"]:
                    raise errors.TooLarge("thread cursor map above max_batch runs",
                                          field="cursors")
                self._replay = await self.client.replay("thread", thread=self.thread,
                                                        cursors=self._cur, window=self.window,
                                                        chunk_events=self.chunk_events)
        chunk = await self._replay.next_chunk_ex()
        if chunk is None:
            end = self._replay.end or {}
            self._head_seen = max(self._head_seen, end.get("head_pos", 0))
            if self.ordered:  # everything of the thread up to head_pos was sent
                self._raise(end.get("head_pos", 0))
            self._replay = None
            self._need_sync = False
            self._worked()
            self._last_heard = self._loop().time()  # the broker answered: not silent
            return
        evs, consecutive = chunk
        if self._by_pos and consecutive and evs:
            # one judgement for the chunk: positions p, p+1, ... (the usual case)
            skip = max(0, min(len(evs), self._pos - evs[0].pos + 1))
            self._deliver(evs, skip, "replayed")
            return
        for ev in evs:
            if self._by_pos:  # commit order: any position above the cursor is the next
                if ev.pos <= self._pos:
                    self.stats["duplicates"] += 1
                    continue
                self._pos = ev.pos
            else:
                last = self._cur.get(ev.run, 0)
                if ev.seq <= last:
                    self.stats["duplicates"] += 1
                    continue
                if ev.seq != last + 1:
                    raise errors.Corrupt(f"replay skipped from seq {last} to {ev.seq} in run "
                                         f"{ev.run}", field="seq")
                self._cur[ev.run] = ev.seq
                if ev.pos > self._pos:
                    self._pos = ev.pos
            self.stats["delivered"] += 1
            self.stats["replayed"] += 1
            self._ready.append(ev)

    def _raise(self, head: int) -> None:
        """Ordered thread: the thread has nothing more up to @p head than what was judged;
        the public cursor follows once the events queued now are handed out."""
        if head <= self._pos:
            return
        self._pos = head
        mark = self._taken + len(self._ready)
        if mark == self._taken:
            self.position = max(self.position, head)
        elif self._raises and self._raises[-1][0] == mark:
            self._raises[-1] = (mark, head)
        else:
            self._raises.append((mark, head))

    def _deliver(self, evs: list[wire.Event], skip: int, kind: str) -> None:
        """Scope all, ordered thread: queue @p evs (consecutive positions) to be handed out
        after their first @p skip, which are at or below the cursor (duplicates)."""
        took = len(evs) - skip
        self.stats["duplicates"] += skip
        if took <= 0:
            return
        self._pos = evs[-1].pos
        self.stats["delivered"] += took
        self.stats[kind] += took
        self._ready.extend(evs[skip:] if skip else evs)

    async def _live_step(self, deadline: float) -> None:
        loop = self._loop()
        now = loop.time()
        silent_at = self._last_heard + self.silence
        wait = max(0.0, min(deadline, silent_at) - now)
        if not await self._sub.poll(int(wait * 1000) + (1 if wait > 0 else 0)):
            if loop.time() >= silent_at:
                self.stats["silences"] += 1
                self._disconnect()  # silence: the first attempt after a working one is at once
            return
        # handle what is queued without waiting again (up to a bound, for fairness)
        for _ in range(64):
            try:
                frames = await self._sub.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            # Anything from the event endpoint shows the broker alive: silence is counted
            # from the last message, so a subscriber behind a flood (its heartbeats late
            # in its queue) does not reconnect for nothing.
            self._last_heard = loop.time()
            await self._on_message(frames)
            if self._need_sync or not self._connected or len(self._ready) >= 2048:
                return

    async def _on_message(self, frames: list) -> None:
        t = frames[0].bytes
        if t == wire.HEARTBEAT_TOPIC:
            if len(frames) == 2:
                await self._on_heartbeat(frames[1].bytes)
            return
        if len(frames) != 2 or not t.startswith(b"ev\x00"):
            return  # a notice (6.4) or something this client does not understand
        try:
            evs, consecutive = wire.decode_chunk(frames[1].buffer, False)
            bad = False
        except errors.AgentbusError as e:
            evs = getattr(e, "good", [])  # the records before the bad one may be used (6.2)
            consecutive, bad = False, True
        if self.scope == "all" and consecutive and evs:
            # one judgement for the message: positions p, p+1, ...; the first one past
            # the cursor must be the cursor + 1, else it is a hole
            skip = self._pos - evs[0].pos + 1
            if skip < 0:
                self._hole()
                return
            self._deliver(evs, min(skip, len(evs)), "live")
            return
        for ev in evs:
            if not self._judge(ev):
                return
        if bad:
            self._hole()

    def _judge(self, ev: wire.Event) -> bool:
        """Deliver @p ev if it is the next; False (and replay) at a hole."""
        if self.scope == "all":
            if ev.pos <= self._pos:
                self.stats["duplicates"] += 1
                return True
            if ev.pos != self._pos + 1:
                self._hole()
                return False
            self._pos = ev.pos
        elif self.ordered:
            if ev.thread != self.thread:
                return True
            if ev.pos <= self._pos:
                self.stats["duplicates"] += 1
                return True
            if not self._follows(ev):
                self._hole()
                return False
            self._pos = ev.pos
        else:
            if ev.thread != self.thread or (self.scope == "run" and ev.run != self.run_id):
                return True
            last = self._cur.get(ev.run, 0)
            if ev.seq <= last:
                self.stats["duplicates"] += 1
                return True
            if ev.seq != last + 1:
                self._hole()
                return False
            self._cur[ev.run] = ev.seq
            if ev.pos > self._pos:
                self._pos = ev.pos
        self.stats["delivered"] += 1
        self.stats["live"] += 1
        self._ready.append(ev)
        return True

    def _follows(self, ev: wire.Event) -> bool:
        """Ordered thread: nothing of the thread can lie between the cursor and live @p ev
        (above the cursor): its ``tprev`` is at or below the cursor, or, without one, it
        is at the cursor + 1."""
        if ev.tprev is not None:
            return ev.tprev <= self._pos
        return ev.pos == self._pos + 1

    def _hole(self) -> None:
        self.stats["holes"] += 1
        self._need_sync = True

    async def _on_heartbeat(self, raw: bytes) -> None:
        try:
            hb = wire.decode_header(raw)
            inst, head = hb["instance"], hb["head_pos"]
        except (errors.AgentbusError, KeyError):
            return
        if inst != self.conn.instance:
            self.stats["restarts"] += 1
            self._disconnect()  # a restarted broker: hello again, replay from the cursor
            self._next_attempt = 0.0
            return
        self._last_heard = self._loop().time()
        self._worked()
        # Every event committed before this heartbeat was sent was published before it
        # on the same socket, so what is missing by now was dropped (a lost tail, 6.3).
        if self.scope == "all":
            if head > self._pos:
                self._hole()
            return
        if self.ordered:
            if head > self._pos:
                self._need_sync = True  # replay after the cursor; its head_pos raises it
            return
        if head > self._head_seen:
            await self._check_heads(head)

    async def _check_heads(self, head: int) -> None:
        """A run or thread subscriber's lost-tail check: a run ahead of its cursor in
        ``heads`` after a heartbeat is a hole."""
        try:
            if self.scope == "run":
                pos, heads = await self.client.heads([(self.thread, self.run_id)])  # type: ignore[list-item]
            else:
                pos, heads = await self.client.heads(thread=self.thread)
        except errors.AgentbusError:
            return
        ahead = [h for h in heads
                 if h.last_seq > self._cur.get(h.run, 0) and h.last_pos <= head]
        if ahead:
            self._hole()
        else:
            self._head_seen = max(self._head_seen, head)


def _check_cursor(scope: str, ordered: bool, from_now: bool, after_seq: Any, cursors: Any,
                  after_pos: Any) -> None:
    """Refuse (InvalidArgument naming the option) a cursor of the wrong type or range, and
    one another scope takes: each scope resumes from its own (scope run ``after_seq``, an
    unordered thread ``cursors``, an ordered thread and scope all ``after_pos``;
    ``from_now`` reads it from the broker), so an option of another one would be ignored,
    and a subscriber made from a saved cursor would start over instead of resuming.  An
    empty ``cursors`` map is no cursor (as the C client's ``ncursors`` 0)."""
    for name, v in (("after_seq", after_seq), ("after_pos", after_pos)):
        if v is not None and (type(v) is not int or not 0 <= v <= FIELD_UINT_MAX):
            raise errors.InvalidArgument(f"{name} must be an int in 0 .. 2^63-1, not {v!r}",
                                         field=name)
    if cursors is not None:
        if not isinstance(cursors, dict):
            raise errors.InvalidArgument("cursors must be a dict run -> last seq, not "
                                         f"{type(cursors).__name__}", field="cursors")
        for r, v in cursors.items():
            if type(r) is not str or not r:
                raise errors.InvalidArgument(f"cursors key {r!r} is not a run id",
                                             field="cursors")
            if type(v) is not int or not 0 <= v <= FIELD_UINT_MAX:
                raise errors.InvalidArgument(f"cursor {v!r} of run {r!r} must be an int in "
                                             "0 .. 2^63-1", field=f"cursors/{r}")
    takes = {"run": "after_seq", "all": "after_pos"}.get(scope) or (
        "after_pos" if ordered else "cursors")
    what = f"scope {scope}" if scope != "thread" else (
        "an ordered thread" if ordered else "an unordered thread")
    given = [n for n, v in (("after_seq", after_seq), ("cursors", cursors or None),
                            ("after_pos", after_pos)) if v is not None]
    for name in given:
        if name != takes:
            hint = (" (from a saved cursor() c: after_seq=c['cursors'][run])"
                    if scope == "run" and name == "cursors" else "")
            raise errors.InvalidArgument(f"{what} resumes from {takes}, not {name}{hint}",
                                         field=name)
        if from_now:
            raise errors.InvalidArgument(f"from_now reads the cursor from the broker: "
                                         f"{name} would be ignored", field="from_now")
