"""CURVE keys (PROTOCOL.md 1): a listed key connects, publishes and subscribes; an unknown
key and no key are refused inside the handshake (no welcome: a Timeout); key files."""

import os
import subprocess

import pytest
import zmq

import agentbus
from agentbus import errors, wire
from conftest import BIN, finished, started

pytestmark = pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")


def keygen(d, name):
    subprocess.run([BIN, "keygen", name, "--dir", d], check=True, capture_output=True)
    return os.path.join(d, name + ".key_secret")


@pytest.fixture
def curve(make_broker, tmp_path):
    kd, other = tmp_path / "keys", tmp_path / "other"
    kd.mkdir()
    other.mkdir()
    keygen(str(kd), "broker")
    alice = keygen(str(kd), "alice")
    mallory = keygen(str(other), "mallory")
    b = make_broker("--keys", str(kd))
    return b, agentbus.Keys.from_files(alice, str(kd / "broker.key")), \
        agentbus.Keys.from_files(mallory, str(kd / "broker.key"))


def test_listed_key_publishes_and_subscribes(curve, ids):
    b, alice, _ = curve
    t, r = ids
    with agentbus.Producer(b.endpoint, keys=alice) as p:
        p.claim(t, r)
        p.publish(started(t, r))
        p.publish(finished(t, r))
        p.flush()
    with agentbus.Subscriber(b.endpoint, keys=alice, scope="run", thread=t, run=r) as s:
        assert [e.seq for e in s.events(2)] == [1, 2]


def test_unknown_key_and_no_key_are_refused(curve):
    b, _, mallory = curve
    with pytest.raises(errors.Timeout):
        agentbus.Client(b.endpoint, keys=mallory, timeout=0.5)
    os.environ.pop("AGENTBUS_KEY", None)
    with pytest.raises(errors.Timeout):
        agentbus.Client(b.endpoint, timeout=0.5)


def test_keys_from_the_environment(curve, monkeypatch, tmp_path):
    b, alice, _ = curve
    kd = tmp_path / "keys"
    monkeypatch.setenv("AGENTBUS_KEY", str(kd / "alice.key_secret"))
    monkeypatch.setenv("AGENTBUS_SERVER_KEY", str(kd / "broker.key"))
    with agentbus.Client(b.endpoint, timeout=2) as c:
        assert c.ping()["instance"] == b.instance


def test_key_file_refusals(tmp_path):
    sec = keygen(str(tmp_path), "k")
    pub, s = wire.read_key_file(sec)
    assert len(pub) == 40 and len(s) == 40
    assert wire.read_key_file(str(tmp_path / "k.key")) == (pub, "")
    os.chmod(sec, 0o640)
    with pytest.raises(errors.Unauthorized):
        wire.read_key_file(sec)
    bad = tmp_path / "bad.key"
    bad.write_text("# comment\npublic-key short\n")
    with pytest.raises(errors.InvalidArgument) as ei:
        wire.read_key_file(str(bad))
    assert f"{bad}:2:" in ei.value.message
    with pytest.raises(errors.InvalidArgument):
        wire.read_key_file(str(tmp_path / "k.key"), secret=True)
    with pytest.raises(errors.NotFound):
        wire.read_key_file(str(tmp_path / "none.key"))


@pytest.fixture
def acl(make_broker, tmp_path):
    """A broker with an access file: alice publishes and observes threads "a", bob observes."""
    kd = tmp_path / "keys"
    kd.mkdir()
    keygen(str(kd), "broker")
    alice, bob = keygen(str(kd), "alice"), keygen(str(kd), "bob")
    (kd / "access").write_text("alice alice.key publish:a observe:a\nbob bob.key observe\n")
    b = make_broker("--keys", str(kd))
    server = str(kd / "broker.key")
    return b, agentbus.Keys.from_files(alice, server), agentbus.Keys.from_files(bob, server)


def test_unauthorized_outside_the_prefixes(acl):
    b, alice, bob = acl
    with agentbus.Client(b.endpoint, keys=alice, timeout=2) as c:
        assert c.access == {"name": "alice", "roles": {"publish": ["a"], "observe": ["a"]}}
        with pytest.raises(errors.Unauthorized) as ei:
            c.snapshot("b-thread")
        assert ei.value.field == "thread" and not ei.value.retryable
        assert ei.value.details.get("role") == "observe"
    with agentbus.Producer(b.endpoint, keys=alice) as p:
        p.claim("a-1", "r1")  # inside its prefix
        with pytest.raises(errors.Unauthorized):
            p.claim("b-1", "r1")
    with agentbus.Client(b.endpoint, keys=bob, timeout=2) as c:
        assert c.access == {"name": "bob", "roles": {"observe": True}}
        with pytest.raises(errors.Unauthorized):
            c.start_run("agent", "a-1", key="k-1")


@pytest.mark.parametrize("field,bad", [
    ("public", "short"),
    ("secret", "x" * 39 + "~"),      # ~ is not a Z85 character
    ("server", "#" * 40),             # every group over 2^32 - 1
    ("secret", None),
])
def test_malformed_keys_refused_naming_the_field(field, bad):
    """A key that is not 40 characters of Z85 is refused when Keys is made, naming it
    (before: a bare ZMQError when the first socket was made, or a handshake that timed
    out); so is a secret key whose public key is another."""
    pub, sec = (k.decode() for k in zmq.curve_keypair())
    good = {"public": pub, "secret": sec, "server": pub}
    good[field] = bad
    with pytest.raises(errors.InvalidArgument) as e:
        agentbus.Keys(**good)
    assert e.value.field == field


def test_secret_key_of_another_pair_refused():
    pub, _ = (k.decode() for k in zmq.curve_keypair())
    _, sec = (k.decode() for k in zmq.curve_keypair())
    with pytest.raises(errors.InvalidArgument) as e:
        agentbus.Keys(pub, sec, pub)
    assert e.value.field == "secret" and "does not match" in str(e.value)
    ok_pub, ok_sec = (k.decode() for k in zmq.curve_keypair())
    assert agentbus.Keys(ok_pub, ok_sec, pub).public == ok_pub
