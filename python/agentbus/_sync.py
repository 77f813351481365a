"""The blocking API: thin wrappers that run the asyncio implementation (``_conn``,
``_client``, ``_producer``, ``_subscriber``, ``_worker``) on a private event loop in the
caller's thread.  Nothing of the protocol is written here.

Each blocking object owns one loop and is used from one thread at a time.  The hot paths
avoid a loop turn per event: ``Producer.publish`` encodes and queues without the loop and
runs it only when a batch is due; ``Subscriber`` iteration runs the loop only when the
subscriber's queue (filled a whole message or chunk of events per turn) is empty.  Do not
use these classes inside a running event loop: use the Async* classes there.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterator

from . import wire
from ._client import AsyncClient, Replay
from ._producer import AsyncProducer
from ._subscriber import AsyncSubscriber
from ._worker import AsyncWorker


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.run_until_complete(asyncio.sleep(0))
            self.loop.close()


class _Blocking:
    """Common part: a loop, the wrapped async object, context manager, close()."""

    _a: Any

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._l.loop.is_closed():
            return
        self._l.run(self._a.close())
        self._l.close()

    def __del__(self) -> None:
        """Collected without close(): close it on its loop, unless a loop runs in this
        thread (its own cannot run inside another): then only the loop is closed, and
        the async object's finalizer closes its sockets without a loop."""
        l = getattr(self, "_l", None)
        if l is None or l.loop.is_closed():
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop running here: the usual case
            try:
                self.close()
            except Exception:  # noqa: BLE001 - a finalizer
                pass
            return
        try:
            l.loop.close()
        except Exception:  # noqa: BLE001 - a finalizer
            pass


class SyncReplay:
    """Blocking iteration over a replay's events; ``end`` / ``heads`` once exhausted."""

    def __init__(self, l: _Loop, r: Replay):
        self._l, self._r = l, r
        self._buf: list[wire.Event] = []

    @property
    def end(self) -> dict[str, Any] | None:
        return self._r.end

    @property
    def heads(self) -> list:
        return self._r.heads

    def chunks(self) -> Iterator[list[wire.Event]]:
        while True:
            c = self._l.run(self._r.next_chunk())
            if c is None:
                return
            yield c

    def __iter__(self) -> Iterator[wire.Event]:
        for c in self.chunks():
            yield from c

    def close(self) -> None:
        self._l.run(self._r.aclose())


class Client(_Blocking):
    """Queries and control calls (blocking); the same methods as AsyncClient."""

    def __init__(self, endpoint: str | None = None, **kw: Any):
        self._l = _Loop()
        self._a = AsyncClient(endpoint, **kw)
        try:
            self._l.run(self._a.conn.connect())
        except BaseException:
            self.close()
            raise

    limits = property(lambda self: self._a.limits)
    caps = property(lambda self: self._a.caps)
    instance = property(lambda self: self._a.instance)
    access = property(lambda self: self._a.access)

    def stats(self) -> dict[str, int]:
        return self._a.stats()

    def replay(self, scope: str = "all", **kw: Any) -> SyncReplay:
        return SyncReplay(self._l, self._l.run(self._a.replay(scope, **kw)))

    def __getattr__(self, name: str) -> Any:
        fn = getattr(AsyncClient, name, None)
        if fn is None or name.startswith("_") or not asyncio.iscoroutinefunction(fn):
            raise AttributeError(name)
        bound = getattr(self._a, name)
        return lambda *a, **kw: self._l.run(bound(*a, **kw))


class Producer(_Blocking):
    """Publishes one claimed run (blocking); see AsyncProducer for the options."""

    def __init__(self, endpoint: str | None = None, **kw: Any):
        self._l = _Loop()
        self._a = AsyncProducer(endpoint, **kw)
        try:
            self._l.run(self._a.conn.connect())
        except BaseException:
            self.close()
            raise

    def claim(self, thread: str, run: str) -> dict[str, Any]:
        return self._l.run(self._a.claim(thread, run))

    def publish(self, event: dict[str, Any]) -> int:
        seq, pump = self._a._queue(event)
        if pump:
            self._l.run(self._a._pump(full_only=True))
        return seq

    def publish_many(self, events: list[dict[str, Any]]) -> int:
        seq = 0
        for e in events:
            seq = self.publish(e)
        return seq

    def flush(self, timeout: float | None = None) -> int:
        return self._l.run(self._a.flush(timeout))

    def assigned(self, thread: str, run: str, epoch: int, last_seq: int = 0) -> None:
        self._a.assigned(thread, run, epoch, last_seq)

    def __getattr__(self, name: str) -> Any:
        if name in ("epoch", "next_seq", "acked_seq", "outbox", "outbox_bytes", "stats",
                    "thread", "run", "conn", "encode"):
            return getattr(self._a, name)
        raise AttributeError(name)


class Subscriber(_Blocking):
    """The exactly-once subscriber (blocking): iterate it, or next_batch(), or run(cb);
    the same options as AsyncSubscriber (``ordered=True``: a thread in commit order)."""

    def __init__(self, endpoint: str | None = None, **kw: Any):
        self._l = _Loop()
        try:
            self._a = AsyncSubscriber(endpoint, **kw)
        except BaseException:
            self._l.close()  # refused options: no loop left open
            raise

    # Events are taken from the async subscriber's queue one at a time, each handed out
    # (its cursor advanced) as it is returned: nothing buffered here, so cursor() never
    # covers an event the application has not been given.

    def next_batch(self, timeout: float = 1.0) -> list[wire.Event]:
        """The events deliverable now (see AsyncSubscriber.next_batch); cursor() covers
        the whole batch once this returns."""
        a = self._a
        if not a._ready:
            self._l.run(a._wait_ready(timeout))
        return a._take()

    def __iter__(self) -> Iterator[wire.Event]:
        a = self._a
        ready, hand = a._ready, a._hand
        while True:
            if not ready:
                self._l.run(a._wait_ready(1.0))
                continue
            ev = ready.popleft()
            hand(ev)
            yield ev

    def events(self, n: int, timeout: float = 10.0) -> list[wire.Event]:
        """Exactly @p n events (fewer only when @p timeout seconds passed); the ones past
        @p n stay queued, not handed out."""
        a = self._a
        out: list[wire.Event] = []
        end = self._l.loop.time() + timeout
        while len(out) < n:
            if a._ready:
                out.extend(a._take(n - len(out)))
                continue
            left = end - self._l.loop.time()
            if left <= 0:
                break
            self._l.run(a._wait_ready(min(left, 1.0)))
        return out

    def run(self, callback: Callable[[wire.Event], Any], timeout: float | None = None) -> None:
        """Call @p callback with each event until it returns True or @p timeout passes.
        The cursor covers an event from just before its callback runs; after a True the
        rest stay queued for the next call or iteration."""
        import time
        a = self._a
        ready, hand = a._ready, a._hand
        end = None if timeout is None else time.monotonic() + timeout
        while end is None or time.monotonic() < end:
            left = 1.0 if end is None else max(0.0, min(1.0, end - time.monotonic()))
            if not ready:
                self._l.run(a._wait_ready(left))
            while ready:
                ev = ready.popleft()
                hand(ev)
                if callback(ev) is True:
                    return

    def cursor(self) -> dict[str, Any]:
        return self._a.cursor()

    def wait_synced(self, timeout: float = 10.0, max_ready: int = 4096) -> bool:
        """Connected and caught up: what follows is live (see AsyncSubscriber)."""
        return self._l.run(self._a.wait_synced(timeout, max_ready))

    position = property(lambda self: self._a.position)
    cursors = property(lambda self: self._a.cursors)
    ordered = property(lambda self: self._a.ordered)
    stats = property(lambda self: self._a.stats)


class Worker(_Blocking):
    """A worker (blocking): register with ``agent()``/``action()``, then ``run()``.
    Handlers may be ordinary functions (they get a SyncRun) or ``async def``."""

    def __init__(self, endpoint: str | None = None, **kw: Any):
        self._l = _Loop()
        self._a = AsyncWorker(endpoint, **kw)

    def agent(self, *a: Any, **kw: Any) -> Any:
        return self._a.agent(*a, **kw)

    def action(self, *a: Any, **kw: Any) -> Any:
        return self._a.action(*a, **kw)

    def serve(self) -> str:
        return self._l.run(self._a.serve())

    def run(self, timeout: float | None = None) -> None:
        self._l.run(self._a.run(timeout))

    def stop_soon(self) -> None:
        """Make a run() in another thread return soon (thread-safe)."""
        if self._a._stop is not None and not self._l.loop.is_closed():
            self._l.loop.call_soon_threadsafe(self._a._stop.set)
            self._l.loop.call_soon_threadsafe(self._a._inbox.put_nowait, {"op": "_stop"})

    def close(self) -> None:
        if self._l.loop.is_closed():
            return
        self._l.run(self._a.stop())
        self._l.close()

    worker_id = property(lambda self: self._a.worker_id)
    stats = property(lambda self: self._a.stats)
    errors = property(lambda self: self._a.errors)
