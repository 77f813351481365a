"""One bus, two languages: the C producer (`agentbus publish`) to a Python subscriber, and
a Python producer to the C subscriber (`agentbus tail --json`), with the numbers and
strings JSON-safe msgpack allows at their edges."""

import json
import subprocess

import agentbus
from conftest import BIN, finished, started


def events(t, r, n):
    evs = [started(t, r)]
    evs.append({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
    for i in range(n - 5):
        evs.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"ünï {i} ✓"})
    evs.append({"type": "TEXT_MESSAGE_END", "messageId": "m"})
    evs.append({"type": "CUSTOM", "name": "edges", "value": {
        "u64max": (1 << 64) - 1, "i64min": -(1 << 63), "float": 1.0, "tiny": 5e-324,
        "big": 1.7976931348623157e308, "nested": [[{"k": None, "b": False}]]}})
    evs.append(finished(t, r))
    return evs


def test_c_producer_to_python_subscriber(broker, ids):
    t, r = ids
    evs = events(t, r, 200)
    with agentbus.Subscriber(broker.endpoint, scope="thread", thread=t) as s:
        assert s.wait_synced()  # live before the C producer starts
        lines = "".join(json.dumps(e) + "\n" for e in evs)
        out = subprocess.run([BIN, "publish", "--broker", broker.endpoint, "--batch", "16"],
                             input=lines.encode(), capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        got = s.events(200, timeout=20)
    assert [e.seq for e in got] == list(range(1, 201))
    assert [e.body for e in got] == evs
    edges = got[-2].body["value"]
    assert type(edges["float"]) is float and edges["u64max"] == (1 << 64) - 1
    assert any(not e.replayed for e in got)


def test_python_producer_to_c_subscriber(broker, ids):
    t, r = ids
    evs = events(t, r, 120)
    tail = subprocess.Popen([BIN, "tail", "--broker", broker.endpoint, "--thread", t,
                             "--from-start", "--json", "--count", "120", "--for", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with agentbus.Producer(broker.endpoint, batch_max=10) as p:
            p.claim(t, r)
            p.publish_many(evs)
            p.flush()
        out, err = tail.communicate(timeout=40)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert tail.returncode == 0, err
    rows = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert [x["seq"] for x in rows] == list(range(1, 121))
    assert [x["event"] for x in rows] == evs
    assert {(x["thread"], x["run"], x["epoch"]) for x in rows} == {(t, r, 2)}  # claimed
    # the C replay export of the same run agrees byte for value
    rep = subprocess.run([BIN, "replay", "--broker", broker.endpoint, "--thread", t,
                          "--run", r], capture_output=True, timeout=30)
    assert rep.returncode == 0, rep.stderr
    assert [json.loads(x)["event"] for x in rep.stdout.decode().splitlines()] == evs
