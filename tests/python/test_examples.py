"""The examples run as their own processes: the worker agent streams, calls a tool, asks
for approval and continues after it; the observer prints the thread."""

import asyncio
import os
import signal
import subprocess
import sys

import agentbus
from conftest import ROOT

EX = os.path.join(ROOT, "python", "examples")


async def until_end(ep, t, r):
    out = []
    async with agentbus.AsyncSubscriber(ep, scope="run", thread=t, run=r) as s:
        async for ev in s:
            out.append(ev)
            if ev.type in ("RUN_FINISHED", "RUN_ERROR"):
                return out


def test_worker_agent_and_observer(broker, ids):
    t, _ = ids
    w = subprocess.Popen([sys.executable, os.path.join(EX, "worker_agent.py"), "--broker",
                          broker.endpoint, "--agent", "ex-deployer", "--name", "ex-1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert w.stdout.readline().startswith(b"serving ex-deployer as ")

        async def main():
            async with agentbus.AsyncClient(broker.endpoint) as c:
                a = await c.start_run("ex-deployer", t, {"messages": [
                    {"id": "u1", "role": "user", "content": "deploy the docs"}]}, key=t + "1")
                first = await until_end(broker.endpoint, t, a["run"])
                (intr,) = first[-1].body["outcome"]["interrupts"]
                b = await c.resume_run(t, a["run"], {intr["id"]: True}, key=t + "2")
                second = await until_end(broker.endpoint, t, b["run"])
                act = await c.invoke_action("ex-deployer", "status")
                return first, second, act

        first, second, act = asyncio.run(asyncio.wait_for(main(), 30))
        types = [e.type for e in first]
        assert "TEXT_MESSAGE_CONTENT" in types and "TOOL_CALL_RESULT" in types
        assert first[-1].body["outcome"]["type"] == "interrupt"
        assert second[-1].body["result"] == {"deployed": True}
        assert act["result"] == {"agent": "ex-deployer", "ok": True}
    finally:
        w.send_signal(signal.SIGTERM)
        assert w.wait(10) == 0
    out = subprocess.run([sys.executable, os.path.join(EX, "observer.py"), t, "--broker",
                          broker.endpoint, "--until-idle", "1.5"], capture_output=True,
                         timeout=30)
    lines = out.stdout.decode().splitlines()
    assert out.returncode == 0 and len(lines) == len(first) + len(second)
    assert "interrupt" in lines[len(first) - 1] and "RUN_STARTED" in lines[0]


def test_agentbus_demo_runs_a_python_worker(tmp_path):
    from conftest import BIN
    env = dict(os.environ, AGENTBUS_PYTHON=sys.executable)
    out = subprocess.run([BIN, "demo", "--pace", "0", "--no-color", "--data",
                          str(tmp_path / "demo"), "--python",
                          os.path.join(EX, "worker_agent.py")],
                         capture_output=True, timeout=120, env=env)
    text = (out.stdout + out.stderr).decode()
    assert out.returncode == 0, text[-3000:]
    assert "== python: OK" in text
    assert "-python/p1-deploy:" in text and "finished (interrupt)" in text
    assert "-python/p2-deploy:" in text and "agentbus demo: OK" in text
