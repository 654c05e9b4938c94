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
    restore = interrupt_as_it_returns(monkeypatch, "lPopWait")
    assert queue.pop().rstrip(b"\0") == b"kept"
    restore()
    with pytest.raises(KeyboardInterrupt):
        queue.pop()
    assert queue.depth == 1
    assert queue.pop().rstrip(b"\0") == b"next"



def interrupt_as_it_returns(monkeypatch, name):
    """Makes the library's C function `name` raise KeyboardInterrupt each
    time it returns (after it did its work), as a signal handler run between
    two steps would; returns what puts the function back."""
    lib = tvmq.load_library()
    real = getattr(lib, name)

    def interrupting(*args):
        real(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(lib, name, interrupting)
    return lambda: monkeypatch.setattr(lib, name, real)


def interrupted_pop_many(queue, tag, step):
    """Pushes 5 records, then pop_many(8) with a KeyboardInterrupt raised
    at its `step`-th check point, where Python runs a signal's handler:
    the entry of a function (step counted when the library calls it or it
    is the library's) or the return of a builtin the library called (a
    profile function's 'call' and 'c_return'). Returns the records pushed,
    those taken (what pop_many returned, then every later pop: the first
    raises the interrupt kept, if any), and whether the step came."""
    here = tvmq.__file__
    pushed = [b"%s-%d" % (tag, i) for i in range(5)]
    for r in pushed:
        queue.push(r)
    seen = [0]

    def profile(frame, event, arg):
        if event == "call":
            mine = frame.f_code.co_filename == here or (frame.f_back and frame.f_back.f_code.co_filename == here)
        else:
            mine = event == "c_return" and frame.f_code.co_filename == here
        if mine:
            seen[0] += 1
            if seen[0] == step:
                raise KeyboardInterrupt

    got = []
    sys.setprofile(profile)
    try:
        got = queue.pop_many(8, timeout=0)
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
    rest = []
    while True:
        try:
            rest.append(queue.pop(wait=False))
        except KeyboardInterrupt:
            continue
        except tvmq.Empty:
            break
    return sorted(pushed), sorted(r.rstrip(b"\0") for r in got + rest), seen[0] >= step


def test_an_interrupt_at_any_step_of_pop_many_loses_no_record(queue, monkeypatch):
    # Ctrl-C's KeyboardInterrupt comes between two steps of whatever runs,
    # the library's own code included: raised at each check point of
    # pop_many in turn, and just as its lPopup returns, every record it
    # took is returned, or left for the next pop (which raises the
    # interrupt first), once; none is lost, nothing freed twice.
    step = 0
    while True:
        step += 1
        pushed, taken, came = interrupted_pop_many(queue, b"%d" % step, step)
        assert taken == pushed, f"interrupted at step {step}: a record lost or repeated"
        if not came:
            break
    assert step > 10, step
    restore = interrupt_as_it_returns(monkeypatch, "lPopup")
    pushed, taken, _ = interrupted_pop_many(queue, b"after", 0)
    restore()
    assert taken == pushed, "interrupted as lPopup returned: a record lost or repeated"
