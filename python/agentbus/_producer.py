"""AsyncProducer: claim a run and publish its AG-UI events (docs/PROTOCOL.md 7.3, 7.4).

Each event (a dict) is checked JSON-safe (section 2: string keys, integers within
-2^63 .. 2^64-1, finite floats, no bytes, depth), wrapped in an envelope with the next seq
and the claim's epoch, encoded once, and kept in the outbox until the broker acknowledged
it.  Batches stay within the broker's announced ``max_batch`` and ``max_publish_bytes``
and go packed when ``packedPublish`` is announced.

Invariants:
- the outbox holds the encoded envelopes of seq ``acked + 1 .. next_seq - 1``: the batch
  in flight (at most ``max_publish_bytes`` of envelopes) and the events not yet sent, fewer
  than a batch by count (``batch_max``) and by bytes (``max_publish_bytes``) whenever a
  publish returns — a publish that fills a batch either way waits for the answer to the
  one in flight and sends it, so the outbox holds less than two batches' bytes then
  (one envelope more while that publish waits), and about ``outbox_max`` events at most;
- a resent event has the same bytes, so a commit whose answer was lost comes back
  ``duplicate``, never ``conflict``;
- at most one ``publish`` request is outstanding;
- after a non-retryable rejection (fenced, conflict, run_terminal, invalid_event, ...) the
  producer is failed: that error is raised by every later call.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from itertools import islice
from typing import Any

from . import errors, wire
from ._conn import AsyncConnection, Keys, backoff_delay


class AsyncProducer:
    """Publishes the events of one claimed run at a time (asyncio).

    Options: ``batch_max`` events per publish (default 256, at most the broker's
    max_batch), ``outbox_max`` unacknowledged events (default 4096), ``max_retries`` in a
    row of a retryable failure (8) with backoff from ``backoff_base`` (0.01 s) doubling to
    ``backoff_max`` (1 s), ``timeout`` per request (seconds).
    """

    def __init__(self, endpoint: str | None = None, *, keys: Keys | None = None,
                 timeout: float = 5.0, client_name: str | None = None,
                 conn: AsyncConnection | None = None, batch_max: int = 256,
                 outbox_max: int = 4096, max_retries: int = 8, backoff_base: float = 0.01,
                 backoff_max: float = 1.0):
        self.conn = conn or AsyncConnection(endpoint, keys=keys, timeout=timeout,
                                            client_name=client_name)
        self._own_conn = conn is None
        self.batch_max = batch_max
        self.outbox_max = max(1, outbox_max)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.thread = ""
        self.run = ""
        self.epoch = 0
        self.next_seq = 1
        self.acked_seq = 0
        self._outbox: deque[bytes] = deque()  # envelopes of acked_seq+1 ..
        self._outbox_bytes = 0  # their total length
        self._unsent = 1  # first seq not sent in the current pass
        self._unsent_bytes = 0  # the total length of the envelopes from _unsent on
        self._inflight: tuple[int, asyncio.Future, int, int] | None = None  # cid, fut, first, n
        self._failed: errors.AgentbusError | None = None
        self._retries = 0
        self.stats = {"published": 0, "acked": 0, "duplicates": 0, "retries": 0, "gaps": 0,
                      "batches": 0, "outbox_peak": 0, "outbox_peak_bytes": 0,
                      "reconnects": 0}

    @classmethod
    async def open(cls, endpoint: str | None = None, **kw: Any) -> "AsyncProducer":
        p = cls(endpoint, **kw)
        await p.conn.connect()
        return p

    async def __aenter__(self) -> "AsyncProducer":
        if self.conn.welcome is None:
            await self.conn.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_conn:
            await self.conn.close()

    @property
    def outbox(self) -> int:
        return len(self._outbox)

    @property
    def outbox_bytes(self) -> int:
        """The bytes of the envelopes in the outbox (not yet acknowledged)."""
        return self._outbox_bytes

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise self._failed

    # -- claiming ------------------------------------------------------------------------------

    async def claim(self, thread: str, run: str) -> dict[str, Any]:
        """Claim a run (7.3): a new epoch fencing earlier writers; numbering continues
        at the run's last committed seq + 1.  Returns {"epoch", "last_seq", "status"}."""
        self._check_usable()
        if self._outbox:
            raise errors.InvalidArgument("claim with unacknowledged events (flush first)")
        wire.check_id(thread, "thread", self.conn.limits["max_id_bytes"])
        wire.check_id(run, "run", self.conn.limits["max_id_bytes"])
        h = await self.conn.request("claim", {"thread": thread, "run": run})
        if h["op"] != "claimed":
            raise errors.InvalidEnvelope(f"claim: got {h['op']}", field="op")
        self._use(thread, run, wire.need(h, "epoch", int), wire.need(h, "last_seq", int))
        return {"epoch": self.epoch, "last_seq": h["last_seq"], "status": h.get("status")}

    def assigned(self, thread: str, run: str, epoch: int, last_seq: int = 0) -> None:
        """Publish a run with an epoch granted elsewhere (a worker's ``assign``, 7.12)."""
        self._check_usable()
        if self._outbox:
            raise errors.InvalidArgument("assigned with unacknowledged events (flush first)")
        self._use(thread, run, epoch, last_seq)

    def _use(self, thread: str, run: str, epoch: int, last_seq: int) -> None:
        self.thread, self.run, self.epoch = thread, run, epoch
        self.next_seq = self._unsent = last_seq + 1
        self.acked_seq = last_seq
        self._outbox_bytes = self._unsent_bytes = 0  # the outbox is empty
        self._tpl = (b"\x87\xa1v" + wire.packb(self.conn.version) +
                     b"\xa6thread" + wire.packb(thread) + b"\xa3run" + wire.packb(run) +
                     b"\xa3seq")
        self._epoch_b = b"\xa5epoch" + wire.packb(epoch) + b"\xa2ts"

    # -- publishing ----------------------------------------------------------------------------

    def encode(self, event: dict[str, Any]) -> bytes:
        """The envelope of @p event as the next seq (not queued); raises the local
        rejection (InvalidEnvelope/InvalidEvent/TooLarge) naming the field."""
        if not self.epoch:
            raise errors.InvalidArgument("publish before claim")
        if type(event) is not dict:
            raise errors.InvalidEnvelope("event is not a dict", field="event")
        lim = self.conn.limits
        wire.check_json_safe(event, lim["max_depth"], "event", 2)
        t = event.get("type")
        if not isinstance(t, str) or not t:
            raise errors.InvalidEvent("event has no type", field="event/type")
        if t in ("RUN_STARTED", "RUN_FINISHED"):
            for k, want in (("threadId", self.thread), ("runId", self.run)):
                if event.get(k) != want:
                    raise errors.InvalidEvent(f"{t} {k} {event.get(k)!r} is not the claimed "
                                              f"{want!r}", field=f"event/{k}")
        try:
            body = wire.packb(event)
        except (UnicodeEncodeError, OverflowError, TypeError, ValueError) as e:
            raise errors.InvalidEnvelope(f"event is not JSON-safe: {e}"[:159],
                                         field="event") from None
        env = (self._tpl + wire.packb(self.next_seq) + self._epoch_b +
               wire.packb(int(time.time() * 1000)) + b"\xa5event" + body)
        if len(env) > lim["max_event_bytes"]:
            raise errors.TooLarge(f"envelope of {len(env)} bytes", details={
                "limit": lim["max_event_bytes"], "actual": len(env)})
        return env

    async def publish(self, event: dict[str, Any]) -> int:
        """Queue @p event as the run's next seq and return that seq.  When a batch is full
        (by count or by ``max_publish_bytes``) it waits for the answer to the previous one
        (one request outstanding) and sends it, so the outbox holds less than two batches
        by count and by bytes (and about ``outbox_max`` events at most)."""
        seq, pump = self._queue(event)
        if pump:
            await self._pump(full_only=True)
        return seq

    async def publish_many(self, events: list[dict[str, Any]]) -> int:
        """publish() each; returns the last seq."""
        seq = 0
        for e in events:
            seq = await self.publish(e)
        return seq

    def _batch_limit(self) -> int:
        return max(1, min(self.batch_max, self.conn.limits["max_batch"], self.outbox_max))

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything pending and wait until all of it is acknowledged (or raise:
        Timeout after @p timeout seconds, default the connection's, or the failure).
        Returns the last acknowledged seq."""
        self._check_usable()
        t = self.conn.timeout if timeout is None else timeout
        try:
            await asyncio.wait_for(self._drain(), t)
        except asyncio.TimeoutError:
            raise errors.Timeout(f"events up to seq {self.next_seq - 1} not all acknowledged "
                                 f"within {t:g} s") from None
        return self.acked_seq

    async def _drain(self) -> None:
        while self._outbox or self._inflight:
            await self._pump(full_only=False)

    async def _pump(self, full_only: bool) -> None:
        """One step: settle the outstanding request (wait for its answer), then send the
        next batch — only a full one when @p full_only, unless the outbox is full.  With
        @p full_only it steps again while the unsent envelopes reach ``max_publish_bytes``
        (a full batch by bytes), so what a publish leaves unsent stays below it."""
        budget = self.conn.limits["max_publish_bytes"]
        while True:
            lim = self._batch_limit()
            if self._inflight is not None:
                await self._settle()
            pending = self.next_seq - self._unsent
            if self._inflight is None and pending > 0 and (
                    not full_only or pending >= lim or len(self._outbox) >= self.outbox_max
                    or self._unsent_bytes >= budget):
                await self._send_batch(lim)
            if not full_only or self._unsent_bytes < budget:
                return

    def _queue(self, event: dict[str, Any]) -> tuple[int, bool]:
        """Encode and queue @p event; (its seq, whether a pump is due)."""
        self._check_usable()
        env = self.encode(event)
        seq = self.next_seq
        self._outbox.append(env)
        self._outbox_bytes += len(env)
        self._unsent_bytes += len(env)
        self.next_seq += 1
        self.stats["published"] += 1
        n = len(self._outbox)
        if n > self.stats["outbox_peak"]:
            self.stats["outbox_peak"] = n
        if self._outbox_bytes > self.stats["outbox_peak_bytes"]:
            self.stats["outbox_peak_bytes"] = self._outbox_bytes
        return seq, (self.next_seq - self._unsent >= self._batch_limit() or n >= self.outbox_max
                     or self._unsent_bytes >= self.conn.limits["max_publish_bytes"])

    async def _send_batch(self, lim: int) -> None:
        first = self._unsent
        idx = first - self.acked_seq - 1
        packed = self.conn.cap("packedPublish") in ("available", "degraded")
        budget = self.conn.limits["max_publish_bytes"]
        envs: list[bytes] = []
        used = raw = 0
        for i in range(idx, min(len(self._outbox), idx + lim)):
            e = self._outbox[i]
            cost = len(e) + (4 if packed else 0)
            if envs and used + cost > budget:
                break
            envs.append(e)
            used += cost
            raw += len(e)
        fields: dict[str, Any] = {"count": len(envs)}
        frames = [wire.pack_batch(envs)] if packed else envs
        if packed:
            fields["packed"] = True
        cid = self.conn.next_cid()
        fut = self.conn.expect(cid)
        try:
            await self.conn.send("publish", fields, frames, cid=cid)
        except errors.AgentbusError:
            self.conn.close_stream(cid)
            raise
        self._unsent = first + len(envs)
        self._unsent_bytes -= raw
        self._inflight = (cid, fut, first, len(envs))
        self.stats["batches"] += 1

    async def _settle(self) -> None:
        cid, fut, first, n = self._inflight  # type: ignore[misc]
        if fut.cancelled():  # an earlier flush gave up waiting: its answer will not be taken
            self._inflight = None
            await self._retry(first, errors.Timeout("no published answer (an earlier wait "
                                                    "gave up on it)", cid=cid))
            return
        try:
            h = await self.conn.wait(cid, fut, None, "published")
        except errors.AgentbusError as e:
            self._inflight = None
            if isinstance(e, errors.Closed) and self.conn.closed:
                raise
            if not e.retryable and not isinstance(e, errors.Closed):
                self._fail(e)  # refused whole, not to be repeated unchanged (8.1)
            await self._retry(first, e)
            return
        self._inflight = None
        results = wire.need(h, "results", list)
        if len(results) != n:
            self._fail(errors.InvalidEnvelope(f"published holds {len(results)} results for "
                                              f"{n} events", field="results"))
        for i, r in enumerate(results):
            seq = first + i
            st = r.get("status") if isinstance(r, dict) else None
            if st in ("accepted", "duplicate"):
                self._ack(seq)
                if st == "duplicate":
                    self.stats["duplicates"] += 1
                continue
            err = errors.from_wire(r.get("error") if isinstance(r, dict) else None, cid, seq)
            if isinstance(err, errors.Gap):
                exp = err.details.get("expected_seq")
                if type(exp) is not int or exp > seq or exp < self.acked_seq + 1:
                    self._fail(err)
                self.stats["gaps"] += 1
                while self.acked_seq + 1 < exp and self._outbox:
                    self._ack(self.acked_seq + 1)  # committed before: it leaves the outbox
                self._rewind(exp)
                return
            if err.retryable:
                await self._retry(seq, err)
                return
            self._fail(err)
        self._retries = 0

    def _ack(self, seq: int) -> None:
        if seq == self.acked_seq + 1 and self._outbox:
            self._outbox_bytes -= len(self._outbox.popleft())
            self.acked_seq = seq
            self.stats["acked"] += 1

    def _rewind(self, seq: int) -> None:
        """Send again from @p seq (at least the first unacknowledged one): ``_unsent`` and
        the bytes from it on, summed again (only after a gap or a failure)."""
        self._unsent = max(seq, self.acked_seq + 1)
        idx = self._unsent - self.acked_seq - 1
        self._unsent_bytes = sum(len(e) for e in islice(self._outbox, idx, None))

    async def _retry(self, from_seq: int, err: errors.AgentbusError) -> None:
        """A retryable failure: back off, and resend from @p from_seq.  A request with no
        answer (a timeout) reconnects first: the broker may have restarted.  One whose
        socket was replaced meanwhile (Closed: the connection reconnected for another
        user of it, a worker) is resent on the new socket as it is."""
        self._retries += 1
        self.stats["retries"] += 1
        self._rewind(from_seq)
        if self._retries > self.max_retries:
            self._retries = 0
            err.seq = from_seq
            raise err
        await asyncio.sleep(backoff_delay(self._retries, self.backoff_base, self.backoff_max))
        if isinstance(err, errors.Timeout):
            self.stats["reconnects"] += 1
            try:
                await self.conn.connect()
            except errors.AgentbusError as e:
                if not e.retryable:
                    raise
                # the next retry reconnects again

    def _fail(self, err: errors.AgentbusError) -> None:
        self._failed = err
        raise err
