"""Ctrl-C (SIGINT) stops a Python consumer blocked in a wait, as it stops a
C program, within a fraction of a second, and loses no record."""

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import tvmq

# The consumer: attaches queue 31, says so, then runs the wait under test
# until Ctrl-C; prints what it got (JSON) and how it ended.
CONSUMER = r"""
import json, signal, sys, time, tvmq
# Ctrl-C as at a terminal, however the tests were started: a shell that
# starts a command in the background (`make test &`, nohup) leaves SIGINT
# ignored in it and its children, and Python then installs no handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
q = tvmq.Queue(31)
call = sys.argv[1]
got = []
print("ready", flush=True)
try:
    while True:
        if call == "pop":
            got.append(q.pop())
        elif call == "pop_timeout":
            got.append(q.pop(timeout=30))
        elif call == "pop_many":
            got.extend(q.pop_many(8, timeout=30))
        else:
            raise SystemExit("unknown call " + call)
except KeyboardInterrupt:
    print(json.dumps({"end": "KeyboardInterrupt", "at": time.monotonic(), "got": [r.rstrip(b"\0").decode() for r in got]}), flush=True)
"""


@pytest.fixture
def queue():
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="tvmq-pytest-int-") as d:
        os.environ["TVMDBD"] = d
        q = tvmq.Queue.create(31, rows=100000, record_size=16)
        yield q
        tvmq.Queue.drop_queue(31)


def consumer(call):
    p = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, call],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    return p


def finish(p):
    out, err = p.communicate(timeout=10)
    assert p.returncode == 0, f"consumer exited with {p.returncode}: {err}"
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("call", ["pop", "pop_timeout", "pop_many"])
def test_ctrl_c_stops_a_blocked_wait_at_once(queue, call):
    p = consumer(call)
    time.sleep(0.3)  # asleep in the wait by now
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    result = finish(p)
    assert result["end"] == "KeyboardInterrupt"
    assert result["at"] - sent < 0.5, f"KeyboardInterrupt came {result['at'] - sent:.3f} s after Ctrl-C"
    assert result["got"] == []


@pytest.mark.parametrize("call", ["pop", "pop_many"])
def test_ctrl_c_loses_no_record(queue, call):
    # A producer pushes while Ctrl-C comes at random moments: every record
    # pushed is either in what the consumer got or still in the queue, once.
    rng = random.Random(7)
    pushed = 0
    for _ in range(12):
        first = pushed
        p = consumer(call)
        stop = time.monotonic() + rng.uniform(0.05, 0.4)
        while time.monotonic() < stop:
            for _ in range(rng.randint(1, 3)):
                queue.push(b"%d" % pushed)
                pushed += 1
            time.sleep(rng.choice([0, 0.0002, 0.001, 0.003]))
        p.send_signal(signal.SIGINT)
        got = finish(p)["got"]
        left = [r.rstrip(b"\0").decode() for r in queue]
        assert sorted(got + left, key=int) == [str(i) for i in range(first, pushed)], "a record lost or repeated"


def test_an_interrupt_as_a_record_is_taken_keeps_the_record(queue, monkeypatch):
    # The interrupt raised just as lPopWait returns with a record (a signal
    # handler runs between two steps): pop returns the record; the next pop
    # raises the interrupt before taking anything.
    queue.push(b"kept")
    queue.push(b"next")
    lib = tvmq.load_library()
    real = lib.lPopWait

    def interrupting(*args):
        real(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(lib, "lPopWait", interrupting)
    assert queue.pop().rstrip(b"\0") == b"kept"
    monkeypatch.setattr(lib, "lPopWait", real)
    with pytest.raises(KeyboardInterrupt):
        queue.pop()
    assert queue.depth == 1
    assert queue.pop().rstrip(b"\0") == b"next"
