#!/usr/bin/env python3
"""agentbus bench for the Python package (docs/PERFORMANCE.md "Python").

  python3 python/bench.py [--bin build-rel/agentbus] [--seconds 5] [--durability process]

Starts one broker (its own data directory, loopback ports) and measures, each row beside a
C-client figure taken on the same broker in the same run:

  ingest   events/s acknowledged from one Python Producer (256-byte envelopes, runs of
           10,000 events, batches of 1024);  C: `agentbus publish --batch 1024` of the same
           events as JSON Lines (one C producer; its own figure includes parsing JSON)
           and `agentbus bench ingest --broker` (4 C producer threads)
  live     events/s delivered live to one Python Subscriber (scope all) while
           `agentbus bench ingest --broker` publishes;  C: that ingest's own figure
  live1    events/s delivered live to one Python Subscriber (scope all) while one C
           producer, `agentbus publish --batch 1024`, publishes a run of 300,000 events
           at its own pace (near the target rate, not a flood of four);  C: that
           publisher's own figure.  Delivered >= published means the subscriber kept up
  paced    events/s delivered live to one Python Subscriber (scope all) while
           `agentbus bench ingest --broker --rate R` publishes R events/s (--paced R,
           default 120,000: above the 100,000 target);  C: that ingest's own figure.  No
           holes and nothing replayed means the subscriber kept up live at that rate
  store    events/s delivered to one Python Subscriber catching up from position 0 (the
           store: replay chunks of 1024);  C: `agentbus replay --all` of the same events
           (one C client; its figure includes writing them as JSON Lines)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))

import agentbus  # noqa: E402
from conftest import Broker  # noqa: E402  (the test suite's broker child helper)

PAD = 256


def run_events(t: str, r: str, n: int) -> list[dict]:
    """A run of n events whose CONTENT envelopes are about PAD bytes."""
    evs = [{"type": "RUN_STARTED", "threadId": t, "runId": r, "protocolVersion": "1.0"},
           {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}]
    # envelope overhead around the delta of a CONTENT event in this run: measured below
    delta = "x" * PAD
    p = agentbus.AsyncProducer("tcp://127.0.0.1:1")
    p._use(t, r, 1, 0)
    over = len(p.encode({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": ""}))
    delta = "x" * max(1, PAD - over - 2)
    evs += [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": delta}] * (n - 4)
    evs += [{"type": "TEXT_MESSAGE_END", "messageId": "m"},
            {"type": "RUN_FINISHED", "threadId": t, "runId": r}]
    return evs


def py_ingest(ep: str, seconds: float) -> tuple[int, float]:
    n_run = 10000
    done = 0
    t0 = time.perf_counter()
    k = 0
    with agentbus.Producer(ep, batch_max=1024) as p:
        while time.perf_counter() - t0 < seconds:
            t, r = "bench-py", f"py-ingest-{os.getpid()}-{k}"
            k += 1
            p.claim(t, r)
            for e in run_events(t, r, n_run):
                p.publish(e)
            p.flush(30)
            done += n_run
    return done, time.perf_counter() - t0


def c_publish(bin_: str, ep: str, n: int, lines: bytes | None = None) -> float:
    if lines is None:
        lines = c_lines(n, f"c-publish-{os.getpid()}")
    t0 = time.perf_counter()
    out = subprocess.run([bin_, "publish", "--broker", ep, "--batch", "1024", "--timeout",
                          "30000"], input=lines, capture_output=True, check=True)
    wall = time.perf_counter() - t0
    m = re.search(rb"in (\d+) ms", out.stdout)
    return n / (int(m.group(1)) / 1000) if m else n / wall


def c_lines(n: int, run: str) -> bytes:
    """A run of @p n events as JSON Lines for `agentbus publish`."""
    return "".join(json.dumps(e) + "\n" for e in run_events("bench-c", run, n)).encode()


def c_bench_ingest(bin_: str, ep: str, seconds: float, rate: float = 0) -> str:
    cmd = [bin_, "bench", "ingest", "--broker", ep, "--seconds", str(seconds)]
    if rate > 0:
        cmd += ["--rate", str(int(rate))]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=seconds * 4 + 60)
    return out.stdout.decode().strip()


def py_live(bin_: str, ep: str, seconds: float, producer=None) -> tuple[int, float, dict, str]:
    """Delivered events/s from the first event to the last while @p producer (default:
    the 4-thread C ingest for @p seconds) runs in a thread; its result string beside."""
    s = agentbus.Subscriber(ep, scope="all", from_now=True)
    assert s.wait_synced(10)
    res: dict = {}
    if producer is None:
        producer = lambda: c_bench_ingest(bin_, ep, seconds)  # noqa: E731
    th = threading.Thread(target=lambda: res.setdefault("c", producer()))
    th.start()
    n, first, last = 0, None, None
    while th.is_alive() or n == 0:
        b = s.next_batch(0.5)
        if b:
            now = time.perf_counter()
            first = first or now
            last = now
            n += len(b)
    while True:  # drain what the ingest committed
        b = s.next_batch(1.0)
        if not b:
            break
        n += len(b)
        last = time.perf_counter()
    th.join()
    stats = dict(s.stats)
    s.close()
    return n, (last - first) if first else 0.0, stats, res.get("c", "")


def py_store(ep: str, upto_pos: int) -> tuple[int, float]:
    s = agentbus.Subscriber(ep, scope="all", after_pos=0, window=16)
    n = 0
    t0 = time.perf_counter()
    while s.position < upto_pos:
        n += len(s.next_batch(2.0))
    dt = time.perf_counter() - t0
    s.close()
    return n, dt


def c_replay_all(bin_: str, ep: str) -> tuple[int, float]:
    """`agentbus replay --all` (the C subscriber library's replay, JSON Lines out)."""
    t0 = time.perf_counter()
    out = subprocess.run([bin_, "replay", "--broker", ep, "--all"], capture_output=True,
                         check=True, timeout=600)
    dt = time.perf_counter() - t0
    return out.stdout.count(b"\n"), dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(HERE), "build-rel", "agentbus"))
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--durability", default="process", choices=["process", "fsync"])
    ap.add_argument("--paced", type=float, default=120000.0,
                    help="events/s of the paced row's C producers (0: skip the row)")
    a = ap.parse_args()
    import conftest
    conftest.BIN = a.bin
    with tempfile.TemporaryDirectory(prefix="abpy-bench-") as d:
        b = Broker(d, ["--durability", a.durability]).start()
        try:
            n, dt = py_ingest(b.endpoint, a.seconds)
            print(f"ingest  python, 1 producer:        {n / dt:12,.0f} events/s acked "
                  f"({n} events in {dt:.2f} s)")
            print(f"ingest  C agentbus publish, 1 producer: {c_publish(a.bin, b.endpoint, 100000):9,.0f}"
                  " events/s acked (100000 events, JSON Lines in)")
            n, dt, st, cline = py_live(a.bin, b.endpoint, a.seconds)
            print(f"live    python, 1 subscriber:      {n / dt if dt else 0:12,.0f} events/s "
                  f"delivered ({n} events in {dt:.2f} s; live {st['live']}, replayed "
                  f"{st['replayed']}, holes {st['holes']}, replays {st['replays']}, "
                  f"connects {st['reconnects']}, silences {st['silences']}, failures {st['failures']})")
            print(f"live    the C publisher meanwhile: {cline}")
            lines = c_lines(300000, f"c-live1-{os.getpid()}")
            n, dt, st, rate = py_live(a.bin, b.endpoint, a.seconds,
                                      lambda: c_publish(a.bin, b.endpoint, 300000, lines))
            print(f"live1   python, 1 subscriber:      {n / dt if dt else 0:12,.0f} events/s "
                  f"delivered ({n} events in {dt:.2f} s; live {st['live']}, replayed "
                  f"{st['replayed']}, holes {st['holes']}, replays {st['replays']})")
            print(f"live1   C agentbus publish meanwhile, 1 producer: {rate:9,.0f} events/s acked "
                  "(300000 events, JSON Lines in)")
            if a.paced > 0:
                n, dt, st, cline = py_live(a.bin, b.endpoint, a.seconds,
                                           lambda: c_bench_ingest(a.bin, b.endpoint, a.seconds,
                                                                  a.paced))
                print(f"paced   python, 1 subscriber:      {n / dt if dt else 0:12,.0f} events/s "
                      f"delivered ({n} events in {dt:.2f} s; live {st['live']}, replayed "
                      f"{st['replayed']}, holes {st['holes']}, replays {st['replays']})")
                print(f"paced   the C publisher meanwhile (--rate {a.paced:.0f}): "
                      f"{cline.splitlines()[0] if cline else ''}")
            with agentbus.Client(b.endpoint) as c:
                head = c.ping()["head_pos"]
            n, dt = py_store(b.endpoint, head)
            print(f"store   python, 1 subscriber:      {n / dt:12,.0f} events/s delivered "
                  f"({n} events in {dt:.2f} s)")
            n, dt = c_replay_all(a.bin, b.endpoint)
            print(f"store   C agentbus replay --all (JSON out): {n / dt:9,.0f} events/s "
                  f"({n} events in {dt:.2f} s, wall clock)")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
