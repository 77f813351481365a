#!/usr/bin/env python3
"""A worker agent in Python: streams a text answer, calls a tool, and asks for approval
before it "deploys" — the approval is an AG-UI interrupt the run ends with, answered by
`agentbus approve` / `Client.resume_run`, which starts the run that continues.

  python3 python/examples/worker_agent.py [--broker tcp://127.0.0.1:7710] [--agent py-deployer]
  agentbus run py-deployer --thread t1 "deploy the docs"     # then: agentbus approve ...
"""

import argparse
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import agentbus  # noqa: E402


def last_user_text(inp):
    for m in reversed(inp.get("messages", [])):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return ""


def deployer(run):
    """An ordinary function: it runs in a thread and `run`'s methods block."""
    resume = run.input.get("resume")
    if resume:  # the continuation: the approval's decision is in input.resume
        ok = all(e["status"] == "resolved" for e in resume)
        run.text(["Approved: deploying now.", " Done."] if ok else "Not approved: nothing deployed.")
        run.finish(result={"deployed": ok})
        return
    ask = last_user_text(run.input) or "deploy"
    run.text(["Planning: ", f"you asked to {ask!r}. ", "Checking the target first."])
    run.tool_call("check_target", {"target": "docs"}, result={"healthy": True, "version": 41})
    if run.cancelled:
        return  # the worker ends it RUN_FINISHED cancelled
    run.interrupt([{"id": f"approve-{run.run}", "reason": "confirmation",
                    "message": "Deploy version 42 of docs?"}])


def status(call):
    """An action handler: `agentbus invoke py-deployer status`."""
    return {"agent": call.agent, "ok": True}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--broker", default=os.environ.get("AGENTBUS_BROKER", "tcp://127.0.0.1:7710"))
    ap.add_argument("--agent", default="py-deployer")
    ap.add_argument("--name", default=None)
    a = ap.parse_args()
    w = agentbus.Worker(a.broker, name=a.name)
    w.agent(a.agent, deployer, capacity=2, actions={"status": status})
    print(f"serving {a.agent} as {w.serve()}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: w.stop_soon())
    try:
        w.run()
    except KeyboardInterrupt:
        pass
    finally:
        w.close()


if __name__ == "__main__":
    main()
