#!/usr/bin/env python3
"""An observer: prints every event of a thread, from its start, then live, each once, in
commit order (an ordered thread subscription: any number of runs).

  python3 python/examples/observer.py THREAD [--broker tcp://127.0.0.1:7710] [--until-idle S]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import agentbus  # noqa: E402


def line(ev):
    b = ev.body
    what = b.get("delta") or b.get("message") or b.get("toolCallName") or ""
    if b["type"] == "RUN_FINISHED":
        what = (b.get("outcome") or {}).get("type", "success")
    return f"{ev.pos:>6} {ev.run}#{ev.seq:<4} {b['type']:<22} {what}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("thread")
    ap.add_argument("--broker", default=os.environ.get("AGENTBUS_BROKER", "tcp://127.0.0.1:7710"))
    ap.add_argument("--until-idle", type=float, default=None,
                    help="stop after this many seconds without an event")
    a = ap.parse_args()
    with agentbus.Subscriber(a.broker, scope="thread", thread=a.thread, ordered=True) as s:
        seen = False
        while True:
            batch = s.next_batch(a.until_idle or 1.0)
            if not batch and a.until_idle is not None and seen and s.wait_synced(0):
                break  # caught up, then idle that long
            seen = seen or bool(batch)
            for ev in batch:
                print(line(ev), flush=True)


if __name__ == "__main__":
    main()
