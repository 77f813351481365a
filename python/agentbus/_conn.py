"""The asyncio connection to a broker's command endpoint: the one implementation of the
request/answer side of the protocol (docs/PROTOCOL.md 1.1, 7, 9), which every class of the
package, blocking or not, runs on.

One DEALER socket; a reader task receives every message and routes it by ``cid``
(7.1): a single-answer request resolves its future, a stream (``replay``) fills its
bounded queue, and a ``cid`` 0 message that is not a request's (``assign``, ``run_cancel``,
``action_call``) goes to ``on_unsolicited`` (a worker) or is dropped (an unsolicited
``pong``, 7.6.2).  Answers nobody waits for any more (a request that timed out) are
dropped and counted.

Invariants: ``hello`` is the first message of every socket, and nothing else is sent on
it before ``welcome`` came; cids grow from 1 and are never reused on a connection; every
wait is bounded by a timeout; memory is bounded (one future per outstanding request, a
replay's queue by the window it granted).
"""

from __future__ import annotations

import asyncio
import os
import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import zmq
import zmq.asyncio

from . import __version__, errors, wire


@dataclass
class Keys:
    """CURVE keys of a client (PROTOCOL.md 1): its own pair and the broker's public key,
    each a 40-character Z85 string."""

    public: str
    secret: str
    server: str

    def __post_init__(self) -> None:
        """Refuse (InvalidArgument naming the field) a key that is not 40 characters of
        Z85 encoding 32 bytes, and a secret key whose public key is not ``public``: libzmq
        would refuse the first with a bare ZMQError when a socket is made, and the second
        would only fail the handshake, as an unknown key does (a Timeout)."""
        for name in ("public", "secret", "server"):
            _check_z85(name, getattr(self, name))
        try:
            derived = zmq.curve_public(self.secret.encode()).decode()
        except zmq.ZMQError as e:
            raise errors.Unsupported(f"CURVE keys need libzmq with CURVE: {e}") from None
        if derived != self.public:
            raise errors.InvalidArgument("the secret key does not match its public key",
                                         field="secret")

    @classmethod
    def from_files(cls, key_file: str, server_key_file: str) -> "Keys":
        """From ``agentbus keygen`` files: this client's NAME.key_secret and broker.key."""
        pub, sec = wire.read_key_file(key_file, secret=True)
        srv, _ = wire.read_key_file(server_key_file)
        return cls(pub, sec, srv)

    @classmethod
    def from_env(cls) -> "Keys | None":
        """From AGENTBUS_KEY / AGENTBUS_SERVER_KEY (the C client's variables), or None."""
        k, s = os.environ.get("AGENTBUS_KEY"), os.environ.get("AGENTBUS_SERVER_KEY")
        if not k and not s:
            return None
        if not (k and s):
            raise errors.InvalidArgument("AGENTBUS_KEY and AGENTBUS_SERVER_KEY go together")
        return cls.from_files(k, s)

    def apply(self, sock: zmq.Socket) -> None:
        try:
            sock.curve_serverkey = self.server.encode()
            sock.curve_publickey = self.public.encode()
            sock.curve_secretkey = self.secret.encode()
        except zmq.ZMQError as e:  # keys changed after they were checked
            raise errors.InvalidArgument(f"CURVE keys refused by libzmq: {e}",
                                         field="keys") from None


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def _check_z85(name: str, key: Any) -> None:
    """A CURVE key as PROTOCOL.md 1 writes it: 40 Z85 characters, each group of five the
    base-85 digits of a 32-bit number."""
    if type(key) is not str or len(key) != 40 or any(ch not in _Z85 for ch in key):
        raise errors.InvalidArgument(f"{name} key must be 40 characters of Z85, not "
                                     f"{key!r:.60}", field=name)
    for i in range(0, 40, 5):
        v = 0
        for ch in key[i:i + 5]:
            v = v * 85 + _Z85.index(ch)
        if v >= 1 << 32:
            raise errors.InvalidArgument(f"{name} key is not Z85: group {i // 5 + 1} is over "
                                         "2^32 - 1", field=name)


class _Context(zmq.asyncio.Context):
    """The context a connection owns, which never blocks when it is released or collected.

    pyzmq's own finalizer (``Context.__del__``: ``destroy()``) closes the sockets it knows
    of through a WeakSet and then terminates the context, which waits until every socket of
    it is closed.  When an unclosed client is collected as a reference cycle, the weak
    references to its sockets are cleared before any finalizer runs, and the context's may
    run before the sockets' own: ``term()`` then waits for them forever, in ``gc.collect()``
    (a hung test, thread or interpreter).  This context holds its open sockets strongly, so
    ``release()`` and its finalizer close them (linger 0: nothing queued is waited for)
    before it terminates."""

    _open: set  # the sockets not closed yet (declared: pyzmq takes other attributes as options)

    def __init__(self) -> None:
        super().__init__()
        self._open = set()

    def _add_socket(self, socket: Any) -> None:
        super()._add_socket(socket)
        self._open.add(socket)

    def _rm_socket(self, socket: Any) -> None:
        super()._rm_socket(socket)
        held = getattr(self, "_open", None)  # None in a context half torn down
        if held is not None:
            held.discard(socket)

    def _close_sockets(self) -> None:
        for s in list(getattr(self, "_open", None) or ()):
            try:
                s.close(0)
            except Exception:  # noqa: BLE001 - a finalizer: close the others all the same
                pass

    def release(self) -> None:
        """Close every socket still open (linger 0), then terminate: never waits."""
        self._close_sockets()
        if not self.closed:
            self.term()

    def __del__(self) -> None:
        if not self.closed:
            self._close_sockets()  # then pyzmq's own (its warning, destroy(): nothing open)
        super().__del__()


def _warn_unclosed(obj: Any) -> None:
    """The ResourceWarning of an object collected without close() (as asyncio and zmq
    objects warn); quiet while the interpreter shuts down."""
    try:
        warnings.warn(f"unclosed {obj!r}", ResourceWarning, stacklevel=3, source=obj)
    except Exception:  # noqa: BLE001 - warnings half torn down at exit
        pass


def _default_endpoint() -> str:
    return os.environ.get("AGENTBUS_BROKER", "tcp://127.0.0.1:7710")


def backoff_delay(failures: int, base: float, cap: float) -> float:
    """The wait after @p failures failed attempts in a row (>= 1): uniform in [c/2, c],
    c = min(cap, base * 2^(failures-1)) (PROTOCOL.md 6.3, 14.3)."""
    c = min(cap, base * (2 ** max(0, failures - 1)))
    return random.uniform(c / 2, c)


@dataclass
class Stats:
    """Counters of a connection (``Client.stats()``)."""

    requests: int = 0
    replies: int = 0
    errors: int = 0
    dropped: int = 0  # answers nobody waited for any more, and malformed frames
    unsolicited: int = 0
    connects: int = 0
    timeouts: int = 0
    extra: dict[str, int] = field(default_factory=dict)


class _Stream:
    """The queue of a streaming request (a replay): items are (header, frames) or an
    exception; bounded by the chunks the client granted."""

    def __init__(self) -> None:
        self.q: asyncio.Queue = asyncio.Queue()


class AsyncConnection:
    """A command-endpoint connection (``hello``/``welcome`` done by ``connect()``).

    ``endpoint`` defaults to $AGENTBUS_BROKER, else tcp://127.0.0.1:7710; ``keys`` a
    ``Keys`` (default: from $AGENTBUS_KEY/$AGENTBUS_SERVER_KEY, else no CURVE);
    ``timeout`` (seconds) bounds connecting and every request.
    """

    def __init__(self, endpoint: str | None = None, *, keys: Keys | None = None,
                 timeout: float = 5.0, client_name: str | None = None,
                 context: zmq.asyncio.Context | None = None):
        self.endpoint = endpoint or _default_endpoint()
        self.keys = keys if keys is not None else Keys.from_env()
        self.timeout = timeout
        self.client_name = client_name or f"agentbus-py/{__version__}"
        self._own_ctx = context is None
        self.ctx = context or _Context()
        self.sock: zmq.asyncio.Socket | None = None
        self._reader: asyncio.Task | None = None
        self._cid = 0
        self._waiting: dict[int, asyncio.Future | _Stream] = {}
        self.on_unsolicited: Callable[[dict, list], None] | None = None
        self.on_idle_pong: Callable[[dict], None] | None = None
        self.after_connect: list[Callable[[], Any]] = []  # coroutine functions (a worker's serve)
        self.welcome: dict[str, Any] | None = None
        self.version = wire.VERSION
        self.limits: dict[str, int] = dict(wire.DEFAULT_LIMITS)
        self.caps: dict[str, str] = {}
        self.instance = ""
        self.event_endpoint = ""
        self.stats = Stats()
        self.last_send = 0.0
        self.closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    def _open(self) -> None:
        s = self.ctx.socket(zmq.DEALER)
        s.linger = 0
        if self.keys is not None:
            self.keys.apply(s)
        s.connect(self.endpoint)
        self.sock = s
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read_loop(s))

    def _drop_socket(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        if self.sock is not None:
            self.sock.close(0)
            self.sock = None
        exc = errors.Closed("connection closed or replaced")
        for w in list(self._waiting.values()):
            self._fail(w, exc)
        self._waiting.clear()

    async def connect(self) -> dict[str, Any]:
        """Open a socket (a fresh one if one was open) and negotiate: ``hello`` with the
        versions spoken, ``welcome`` with the chosen version, limits and capabilities.
        Raises Timeout when nothing answers within ``timeout`` (an unreachable broker,
        or CURVE keys it refused: PROTOCOL.md 1), IncompatibleVersion etc. as sent."""
        if self.closed:
            raise errors.Closed("connection closed")
        self._drop_socket()
        self._open()
        self.stats.connects += 1
        h = await self.request("hello", {"versions": list(wire.VERSIONS),
                                         "client": self.client_name[:256]}, v=None,
                               what="welcome (broker unreachable, or it refused our keys)")
        if h["op"] != "welcome":
            raise errors.InvalidEnvelope(f"expected welcome, got {h['op']}", field="op")
        self._take_welcome(h)
        for fn in self.after_connect:
            await fn()
        return h

    def _take_welcome(self, h: dict[str, Any]) -> None:
        v = wire.need(h, "v", int)
        if v not in wire.VERSIONS:
            raise errors.IncompatibleVersion(f"welcome chose v {v}", field="v")
        lim = wire.need(h, "limits", dict)
        for k in wire.REQUIRED_LIMITS:
            if type(lim.get(k)) is not int or lim[k] < 1:
                raise errors.InvalidEnvelope("welcome lacks a limit", field=f"limits/{k}")
        self.limits = dict(lim)
        # An older broker sends no max_publish_bytes: keep a publish within 2 x max_event_bytes.
        self.limits.setdefault("max_publish_bytes", 2 * lim["max_event_bytes"])
        self.limits.setdefault("max_replay_bytes", 2 << 20)
        self.caps = dict(wire.need(h, "caps", dict))
        self.instance = wire.need(h, "instance", str)
        self.event_endpoint = wire.need(h, "event_endpoint", str)
        self.version = v
        self.welcome = h

    def cap(self, name: str) -> str:
        """The state of a broker capability (10): "available", "degraded", "unavailable",
        "unsupported" or "unknown" (omitted by the broker)."""
        return self.caps.get(name, "unknown")

    async def close(self) -> None:
        self.closed = True
        self._drop_socket()
        if self._own_ctx:
            self.ctx.release()  # never waits: any socket of it still open is closed first

    def __repr__(self) -> str:
        return f"<agentbus.AsyncConnection {self.endpoint}>"

    def _release(self) -> None:
        """close() without a loop, for a finalizer: the sockets closed (linger 0), the
        context released; the reader task and the waiting futures are left alone (they
        belong to a loop that may be gone, or run in another thread)."""
        self.closed = True
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close(0)
        if self._own_ctx:
            self.ctx.release()

    def __del__(self) -> None:
        if getattr(self, "closed", True):
            return
        _warn_unclosed(self)
        try:
            self._release()
        except Exception:  # noqa: BLE001 - a finalizer, maybe at interpreter exit
            pass

    # -- sending and receiving --------------------------------------------------------------

    def next_cid(self) -> int:
        self._cid += 1
        return self._cid

    async def send(self, op: str, fields: dict[str, Any] | None = None,
                   frames: list[bytes] | tuple = (), cid: int | None = None,
                   v: int | None = -1) -> int:
        """Send one request without waiting; returns its cid."""
        if self.sock is None:
            raise errors.Closed("not connected")
        cid = self.next_cid() if cid is None else cid
        hdr = wire.encode_header(op, cid, fields, self.version if v == -1 else v)
        if len(hdr) > self.limits["max_header_bytes"]:
            raise errors.TooLarge(f"{op} header of {len(hdr)} bytes",
                                  details={"limit": self.limits["max_header_bytes"],
                                           "actual": len(hdr)})
        await self.sock.send_multipart([hdr, *frames], copy=len(frames) == 0)
        self.stats.requests += 1
        self.last_send = asyncio.get_running_loop().time()
        return cid

    def expect(self, cid: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiting[cid] = fut
        return fut

    async def wait(self, cid: int, fut: asyncio.Future, timeout: float | None, what: str) -> dict:
        t = self.timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(fut, t)
        except asyncio.TimeoutError:
            self.stats.timeouts += 1
            raise errors.Timeout(f"no {what} within {t:g} s", cid=cid) from None
        finally:
            if self._waiting.get(cid) is fut:
                del self._waiting[cid]

    async def request(self, op: str, fields: dict[str, Any] | None = None,
                      frames: list[bytes] | tuple = (), timeout: float | None = None,
                      v: int | None = -1, what: str | None = None) -> dict[str, Any]:
        """Send a request and return its answer's header; an ``error`` answer raises its
        typed exception (with the cid), no answer in time raises Timeout."""
        cid = self.next_cid()
        fut = self.expect(cid)
        try:
            await self.send(op, fields, frames, cid=cid, v=v)
        except BaseException:
            self._waiting.pop(cid, None)
            raise
        return await self.wait(cid, fut, timeout, what or f"answer to {op}")

    def open_stream(self, cid: int) -> _Stream:
        st = _Stream()
        self._waiting[cid] = st
        return st

    def close_stream(self, cid: int) -> None:
        self._waiting.pop(cid, None)

    @staticmethod
    def _fail(w: Any, exc: BaseException) -> None:
        if isinstance(w, _Stream):
            w.q.put_nowait(exc)
        elif not w.done():
            w.set_exception(exc)

    async def _read_loop(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            try:
                frames = await sock.recv_multipart(copy=False)
            except (asyncio.CancelledError, zmq.ZMQError):
                return
            try:
                h = wire.decode_header(frames[0].buffer)
            except errors.AgentbusError as e:
                # A header the strict decoder refuses (PROTOCOL.md 2): when it had a valid
                # cid of a waiting request, that request fails with the error (naming the
                # field) rather than timing out; otherwise it is dropped and counted.
                w = self._waiting.get(e.cid) if e.cid else None
                if w is None:
                    self.stats.dropped += 1
                    continue
                self.stats.errors += 1
                if not isinstance(w, _Stream):
                    del self._waiting[e.cid]
                self._fail(w, e)
                continue
            self._route(h, frames[1:])

    def _route(self, h: dict[str, Any], rest: list) -> None:
        cid = h["cid"]
        w = self._waiting.get(cid) if cid else None
        if w is None:
            if cid == 0 and h["op"] in ("assign", "run_cancel", "action_call"):
                self.stats.unsolicited += 1
                if self.on_unsolicited is not None:
                    self.on_unsolicited(h, rest)
                    return
            elif cid == 0 and h["op"] == "pong" and self.on_idle_pong is not None:
                self.on_idle_pong(h)
                return
            self.stats.dropped += 1
            return
        if h["op"] == "error":
            self.stats.errors += 1
            item: Any = errors.from_wire(h.get("error"), cid)
        else:
            self.stats.replies += 1
            item = (h, rest)
        if isinstance(w, _Stream):
            w.q.put_nowait(item)
            return
        self._waiting.pop(cid, None)
        if w.done():
            return
        if isinstance(item, BaseException):
            w.set_exception(item)
        else:
            w.set_result(h)
