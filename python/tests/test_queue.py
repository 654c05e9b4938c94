"""The tvmq Python package against libtvm: bytes and ctypes records, waits,
batches, errors, and the same queue shared with C programs (the examples'
orders_producer / orders_consumer, in other processes)."""

import ctypes
import os
import subprocess
import tempfile
import time

import pytest

import tvmq

EXAMPLES = os.environ.get("TVMQ_EXAMPLES_BIN", "")


class Order(ctypes.Structure):
    """examples/c/orders.h's dbOrder."""

    _fields_ = [("order_id", ctypes.c_long), ("symbol", ctypes.c_char * 12), ("price", ctypes.c_double)]


@pytest.fixture(autouse=True)
def queue_dir(monkeypatch):
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="tvmq-pytest-") as d:
        monkeypatch.setenv("TVMDBD", d)
        yield d
        for name in os.listdir(d):
            if name.startswith("queue-") and name.endswith(".tvmq"):
                tvmq.Queue.drop_queue(int(name[6:-5]))


def test_bytes_round_trip_depth_and_iteration():
    q = tvmq.Queue.create(21, rows=4, record_size=16, name="PY")
    assert (q.record_size, q.capacity, q.depth, len(q)) == (16, 4, 0, 0)
    q.push(b"one")
    q.push(bytearray(b"two"))
    assert q.depth == 2
    assert q.pop() == b"one".ljust(16, b"\0")
    assert q.pop(wait=False) == b"two".ljust(16, b"\0")
    with pytest.raises(tvmq.Empty) as e:
        q.pop(wait=False)
    assert (e.value.code, e.value.name) == (24, "NO_DATA_FOUND")
    for r in (b"a", b"b", b"c"):
        q.push(r)
    assert [r[:1] for r in q] == [b"a", b"b", b"c"]
    assert q.depth == 0


def test_errors_carry_the_code():
    q = tvmq.Queue.create(22, rows=2, record_size=8)
    with pytest.raises(tvmq.Exists):
        tvmq.Queue.create(22, rows=2, record_size=8)
    with pytest.raises(tvmq.NotFound) as e:
        tvmq.Queue(99)
    assert e.value.code == 44 and "not found" in str(e.value)
    with pytest.raises(tvmq.TvmError) as e:
        q.push(b"123456789")  # longer than the record size: refused, never cut
    assert e.value.code == 74
    q.push(b"x")
    q.push(b"y")
    with pytest.raises(tvmq.Full):
        q.push(b"z")


def test_timeouts():
    q = tvmq.Queue.create(23, rows=2, record_size=8)
    t = time.monotonic()
    with pytest.raises(tvmq.Timeout):
        q.pop(timeout=0.5)  # rounded up to 1 s, as lPopup counts
    assert 0.9 < time.monotonic() - t < 5
    with pytest.raises(tvmq.Timeout):
        q.pop_many(2, timeout=1)
    q.push(b"late")
    assert q.pop(timeout=1)[:4] == b"late"


def test_batches():
    q = tvmq.Queue.create(24, rows=5, record_size=8)
    assert q.push_many([b"1", b"22", b"333"]) == 3
    with pytest.raises(tvmq.Full) as e:
        q.push_many([b"4", b"5", b"6"])
    assert e.value.pushed == 2
    got = q.pop_many(10)
    assert [r.rstrip(b"\0") for r in got] == [b"1", b"22", b"333", b"4", b"5"]
    with pytest.raises(tvmq.Empty):
        q.pop_many(10)


def test_structures_and_their_fields():
    q = tvmq.Queue.create_for(25, rows=8, struct=Order)
    assert q.record_size == ctypes.sizeof(Order) == 32
    q.push(Order(7, b"TVMQ", 1.25))
    o = q.pop_struct(Order)
    assert (o.order_id, o.symbol, o.price) == (7, b"TVMQ", 1.25)
    tvmq_bin = os.environ.get("TVMQ_BIN")
    if tvmq_bin:  # the field list went into the queue file
        import json

        stat = json.loads(subprocess.run([tvmq_bin, "stat", "25", "--json"], check=True, capture_output=True).stdout)
        assert [(f["name"], f["offset"], f["kind"]) for f in stat["fields"]] == [
            ("order_id", 0, "long"),
            ("symbol", 8, "char"),
            ("price", 24, "double"),
        ]


@pytest.mark.skipif(not EXAMPLES, reason="TVMQ_EXAMPLES_BIN (the built C examples) is not set")
def test_c_producer_python_consumer():
    producer = subprocess.Popen([os.path.join(EXAMPLES, "orders_producer"), "5000"], stdout=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while True:
        try:
            q = tvmq.Queue(42)
            break
        except tvmq.NotFound:
            assert time.monotonic() < deadline, "the producer never created queue 42"
            time.sleep(0.01)
    expected = 0
    while True:
        o = q.pop_struct(Order, timeout=5)
        if o.order_id == -1:
            break
        assert (o.order_id, o.symbol) == (expected, b"TVMQ")
        expected += 1
    assert expected == 5000
    assert producer.wait(10) == 0


@pytest.mark.skipif(not EXAMPLES, reason="TVMQ_EXAMPLES_BIN (the built C examples) is not set")
def test_python_producer_c_consumer():
    q = tvmq.Queue.create_for(42, rows=1024, struct=Order, name="dbOrder")
    consumer = subprocess.Popen([os.path.join(EXAMPLES, "orders_consumer")], stdout=subprocess.PIPE, text=True)
    for i in range(3000):
        while True:
            try:
                q.push(Order(i, b"TVMQ", 0.25 * i))
                break
            except tvmq.Full:
                time.sleep(0.0005)
    q.push(Order(-1, b"", 0.0))
    out, _ = consumer.communicate(timeout=20)
    assert consumer.returncode == 0
    assert "3000 orders in order" in out
