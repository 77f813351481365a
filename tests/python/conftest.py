"""pytest fixtures: real `agentbus broker` processes on loopback ports picked here.

AGENTBUS_BIN names the binary (ctest passes the build's; default build-test/agentbus);
AGENTBUS_PY names the package directory (default python/).  Every broker a test starts
is stopped by its pid (SIGTERM, then SIGKILL after a bounded wait) when the test ends.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("AGENTBUS_PY", os.path.join(ROOT, "python")))
BIN = os.environ.get("AGENTBUS_BIN", os.path.join(ROOT, "build-test", "agentbus"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """The broker could not bind a port it was given (restart())."""


def _port_of(line: str, key: str) -> int:
    word = next(w for w in line.split() if w.startswith(key + "="))
    return int(word.rsplit(":", 1)[1])


class Broker:
    """One broker child on a data directory; restart() keeps directory and ports.

    The first start lets the broker pick its ports (tcp://127.0.0.1:*) and reads them from
    its ready line: a port picked here and bound later could be taken in between, for
    instance as the local port of another test's outgoing connection. A restart binds the
    same ports again, and tries again for a while if one is still taken."""

    def __init__(self, data: str, extra: list[str] | None = None):
        self.data = data
        self.extra = list(extra or [])
        self.cmd_port = self.ev_port = 0  # known after the first start
        self.endpoint = ""
        self.proc: subprocess.Popen | None = None
        self.instance = ""
        self.log = os.path.join(data, "broker.log")

    def start(self, timeout: float = 10.0) -> "Broker":
        end = time.monotonic() + timeout
        while True:
            try:
                return self._start_once(end, timeout)
            except PortTaken:
                if time.monotonic() > end:
                    raise
                time.sleep(0.1)

    def _start_once(self, end: float, timeout: float) -> "Broker":
        cmd = f"tcp://127.0.0.1:{self.cmd_port or '*'}"
        ev = f"tcp://127.0.0.1:{self.ev_port or '*'}"
        argv = [BIN, "broker", "--data", self.data, "--cmd", cmd, "--events", ev,
                "--durability", "process", *self.extra]
        with open(self.log, "ab") as log:
            since = log.tell()  # this start's part of the log
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
        buf = b""
        while b"\n" not in buf:
            left = end - time.monotonic()
            r, _, _ = select.select([self.proc.stdout], [], [], max(0, left))
            if not r:
                self.kill()
                raise RuntimeError(f"broker not ready within {timeout}s: {self.tail()}")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                self.proc.wait(10)
                self._close()
                with open(self.log, "rb") as f:
                    f.seek(since)
                    said = f.read().decode(errors="replace")
                if self.cmd_port and "Address already in use" in said:
                    raise PortTaken(said)
                raise RuntimeError(f"broker exited: {self.tail()}")
            buf += chunk
        line = buf.split(b"\n")[0].decode()
        assert line.startswith("agentbus broker ready "), line
        self.instance = line.rsplit("instance=", 1)[1]
        self.cmd_port, self.ev_port = _port_of(line, "cmd"), _port_of(line, "events")
        self.endpoint = f"tcp://127.0.0.1:{self.cmd_port}"
        return self

    def tail(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(10)
        self._close()
        return rc

    def kill(self) -> None:
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait(10)
        self._close()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        self.proc = None

    def restart(self) -> "Broker":
        return self.start()


@pytest.fixture
def make_broker():
    """make_broker(*extra_args, data=None) -> a started Broker, stopped after the test."""
    made: list[Broker] = []
    dirs: list[tempfile.TemporaryDirectory] = []

    def make(*extra: str, data: str | None = None) -> Broker:
        if data is None:
            d = tempfile.TemporaryDirectory(prefix="abpy-")
            dirs.append(d)
            data = d.name
        b = Broker(data, list(extra))
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.stop()
    for d in dirs:
        d.cleanup()


@pytest.fixture(scope="module")
def broker():
    """A broker shared by the tests of a module (each test uses its own thread ids)."""
    d = tempfile.TemporaryDirectory(prefix="abpy-")
    b = Broker(d.name).start()
    yield b
    b.stop()
    d.cleanup()


_n = [0]


@pytest.fixture
def ids(request):
    """Unique (thread, run) ids for a test."""
    _n[0] += 1
    base = f"{request.node.name}-{os.getpid()}-{_n[0]}"
    return f"t-{base}", f"r-{base}"


def started(thread: str, run: str, **extra) -> dict:
    return {"type": "RUN_STARTED", "threadId": thread, "runId": run, "protocolVersion": "1.0",
            **extra}


def finished(thread: str, run: str, **extra) -> dict:
    return {"type": "RUN_FINISHED", "threadId": thread, "runId": run, **extra}


def text_events(n: int, mid: str = "m1", size: int = 10) -> list[dict]:
    """A text message of n events: START, n-2 CONTENT, END (n >= 3)."""
    out = [{"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"}]
    for i in range(n - 2):
        out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid,
                    "delta": (f"{i:06d}" + "x" * size)[:max(size, 1)]})
    out.append({"type": "TEXT_MESSAGE_END", "messageId": mid})
    return out
