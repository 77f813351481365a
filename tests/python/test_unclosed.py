"""A subscriber (or any client) that is never closed must not hang the process when it is
collected or when the interpreter exits: its sockets are closed with linger 0 and its
context released without waiting, with a ResourceWarning naming it.  Each case runs in a
child interpreter with a timeout, so a hang fails the test instead of hanging the suite.

Before the fix, pyzmq's Context finalizer (destroy, then term) waited forever in
gc.collect() for sockets of the same reference cycle whose finalizers had not run yet
(its WeakSet of sockets is already empty then), and close() waited forever in term() for
a socket the connection had made but not kept (an exception between the two)."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

PKG = os.environ.get("AGENTBUS_PY", os.path.join(ROOT, "python"))

PRELUDE = """
import asyncio, gc, sys, threading
import zmq
import agentbus
EP = sys.argv[1]

class Cycle:  # holds what it is given in a reference cycle: only the cyclic GC frees it
    def __init__(self, obj):
        self.obj, self.me = obj, self

async def synced():  # both sockets open: the command DEALER and the event SUB
    s = agentbus.AsyncSubscriber(EP, scope="all", from_now=True)
    assert await s.wait_synced(10)
    return s
"""

CASES = {
    # the subscriber's own loop is gone; the cycle is collected from another thread
    "collected in a cycle": """
async def main():
    Cycle(await synced())
asyncio.run(main())
t = threading.Thread(target=gc.collect)
t.start()
t.join()
print("collected")
""",
    # never closed, still referenced at exit
    "left at exit": """
keep = asyncio.run(synced())
print("collected")
""",
    # a blocking Subscriber collected while another loop runs in the same thread: its
    # own loop cannot run there to close it
    "blocking, collected inside a running loop": """
s = agentbus.Subscriber(EP, scope="all", from_now=True)
assert s.wait_synced(10)
Cycle(s)
del s
async def main():
    gc.collect()
asyncio.run(main())
print("collected")
""",
    # close() after a socket was made and not kept (CURVE keys the socket refuses):
    # the caller closes while it holds the exception, whose frames hold the socket
    "closed after a failed connect": """
async def main():
    pub, sec = zmq.curve_keypair()
    keys = agentbus.Keys(pub.decode(), sec.decode(), pub.decode())
    keys.secret = "not-a-key"  # changed after Keys checked it: libzmq refuses it
    s = agentbus.AsyncSubscriber(EP, scope="all", keys=keys)
    try:
        await s.next_batch(1)
    except Exception as e:
        err = e
        await s.close()
    print(type(err).__name__)
asyncio.run(main())
print("collected")
""",
}


@pytest.mark.parametrize("case", list(CASES))
def test_unclosed_subscriber_does_not_hang(broker, case):
    env = dict(os.environ, PYTHONPATH=PKG, PYTHONDONTWRITEBYTECODE="1")
    try:
        p = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c",
                            PRELUDE + CASES[case], broker.endpoint],
                           capture_output=True, text=True, env=env, timeout=30)
    except subprocess.TimeoutExpired as e:  # run() killed it
        pytest.fail(f"{case}: hung ({e.stdout!r} {e.stderr!r})")
    assert p.returncode == 0 and p.stdout.endswith("collected\n"), (p.stdout, p.stderr)
    assert "never awaited" not in p.stderr, p.stderr
    if case == "closed after a failed connect":
        assert p.stdout.startswith("InvalidArgument"), p.stdout
    elif case != "blocking, collected inside a running loop":
        assert "ResourceWarning: unclosed <agentbus.AsyncSubscriber scope all" in p.stderr, \
            p.stderr
