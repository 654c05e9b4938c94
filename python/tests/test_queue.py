"""The tvmq Python package against libtvm: bytes and ctypes records, waits,
batches, errors, and the same queue shared with C programs (the examples'
orders_producer / orders_consumer, in other processes)."""

import ctypes
import os
import re
import shutil
import subprocess
import sys
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
    assert (e.value.code, e.value.name) == (44, "TBL_NOT_FOUND")
    assert str(e.value).startswith("lAttchTable: no queue 99 in "), str(e.value)
    with pytest.raises(tvmq.TvmError) as e:
        q.push(b"123456789")  # longer than the record size: refused, never cut
    assert (e.value.code, e.value.name) == (74, "RECD_TOO_LONG")
    assert str(e.value).startswith("lPush: a record of 9 bytes is longer than queue 22's records (at most 8)")
    with pytest.raises(tvmq.TvmError) as e:
        q.push(b"")
    assert e.value.name == "CONDIT_IS_NIL" and str(e.value).startswith("lPush: an empty record"), str(e.value)
    q.push(b"x")
    q.push(b"y")
    with pytest.raises(tvmq.Full) as e:
        q.push(b"z")
    assert e.value.name == "DATA_SPC_FULL"


def test_errors_carry_libtvm_s_detail(queue_dir):
    with pytest.raises(tvmq.NotFound) as e:
        tvmq.Queue(99)
    # What libtvm said beyond the code: the file it looked for.
    assert os.path.join(queue_dir, "queue-99.tvmq") in e.value.detail, e.value.detail
    q = tvmq.Queue.create(22, rows=2, record_size=8)
    with pytest.raises(tvmq.Exists) as e:
        tvmq.Queue.create(22, rows=2, record_size=8)
    assert "22" in e.value.detail and e.value.message == e.value.detail, (e.value.message, e.value.detail)
    with pytest.raises(tvmq.Empty) as e:
        q.pop(wait=False)
    assert e.value.detail == ""  # raised by the package, not by a libtvm call
    with pytest.raises(tvmq.TvmError) as e:
        q.push(b"123456789")
    assert e.value.detail == ""


def test_stats_and_the_list_of_queues():
    assert tvmq.queues() == []
    q = tvmq.Queue.create(31, rows=10, record_size=16)
    tvmq.Queue.create(7, rows=3, record_size=8).close()
    assert tvmq.queues() == [7, 31]
    for i in range(5):
        q.push(b"r%d" % i)
    q.pop()
    s = q.stats()
    assert isinstance(s, tvmq.QueueStats)
    assert (s.record_size, s.capacity, s.depth, s.pushed, s.popped) == (16, 10, 4, 5, 1)
    assert (s.waiters, s.leases_in_flight, s.redelivered, s.expired, s.dead_lettered, s.syncs) == (0, 0, 0, 0, 0, 0)
    assert s.processes == 1  # this process
    assert s.depth == q.depth
    # A consumer asleep in another thread is a waiter.
    import threading

    for _ in q:
        pass
    got = []
    with tvmq.Queue(31) as other:
        t = threading.Thread(target=lambda: got.append(other.pop(timeout=30)))
        t.start()
        deadline = time.monotonic() + 20
        while q.stats().waiters == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert q.stats().waiters == 1
        q.push(b"wake")
        t.join(20)
    assert got and got[0].rstrip(b"\0") == b"wake"
    assert q.stats().waiters == 0
    leased = tvmq.Queue.create(33, rows=4, record_size=8, lease_ms=30000)
    leased.push(b"x")
    _, lease = leased.pop_lease(wait=False)
    assert leased.stats().leases_in_flight == 1
    leased.ack(lease)
    assert leased.stats().leases_in_flight == 0
    q.drop()
    assert tvmq.queues() == [7, 33]


def test_every_code_has_the_name_of_the_header():
    # The names come from libtvm (sGetTErrName), made from the table that
    # tvm.h's #defines are made from: they must agree, every one.
    header = os.environ.get("TVMQ_HEADER") or os.path.join(os.path.dirname(__file__), "..", "..", "include", "tvm.h")
    with open(header) as f:
        defines = dict(re.findall(r"^#define ([A-Z][A-Z0-9_]+)\s+(\d+)\s+/\*", f.read(), re.M))
    codes = tvmq.codes()
    assert len(codes) >= 108
    assert codes == {name: int(code) for name, code in defines.items() if name in codes}
    assert set(codes) <= set(defines)
    for name, code in codes.items():
        assert tvmq.code_name(code) == name
    for name, code in [("RECD_TOO_LONG", 74), ("SHM_ERR_EIDRM", 8), ("NOT_DURABLE", 103), ("LEASE_INVALID", 107)]:
        assert tvmq.code_name(code) == name
        assert tvmq.TvmError(code, tvmq.code_name(code), "m").name == name
    for code in (-1, len(codes), 10**6, 2**70):
        assert tvmq.code_name(code) == f"code {code}"


def test_a_dropped_queue_is_named():
    # A consumer waiting when the queue is dropped wakes with SHM_ERR_EIDRM.
    import threading

    tvmq.Queue.create(26, rows=2, record_size=8)
    caught = []

    def wait():
        with tvmq.Queue(26) as q:
            try:
                q.pop(timeout=10)
            except tvmq.TvmError as e:
                caught.append(e)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.35)
    tvmq.Queue.drop_queue(26)
    t.join(5)
    assert [(e.code, e.name) for e in caught] == [(8, "SHM_ERR_EIDRM")]
    with pytest.raises(tvmq.NotFound):
        tvmq.Queue(26)


@pytest.mark.skipif(not os.environ.get("TVMQ_BIN"), reason="TVMQ_BIN (the tvmq command) is not set")
def test_a_durable_file_on_tmpfs_is_named(queue_dir):
    # A durable queue made on a disk, its file then moved to /dev/shm.
    disk = tempfile.mkdtemp(prefix="tvmq-pytest-disk-", dir=os.environ.get("TVMQ_DISK_DIR", os.getcwd()))
    try:
        tvmq_bin = os.environ["TVMQ_BIN"]
        subprocess.run([tvmq_bin, "--dir", disk, "create", "27", "--rows", "4", "--size", "8", "--durable", "always"],
                       check=True, capture_output=True)
        shutil.copy(os.path.join(disk, "queue-27.tvmq"), os.path.join(queue_dir, "queue-27.tvmq"))
        # Dropped (its live part, in /dev/shm/tvmq-<uid>, with it).
        subprocess.run([tvmq_bin, "--dir", disk, "drop", "27"], check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"no durable queue here: {e.stderr.decode().strip()}")
    finally:
        subprocess.run(["rm", "-rf", disk], check=True)
    with pytest.raises(tvmq.TvmError) as e:
        tvmq.Queue(27)
    assert (e.value.code, e.value.name) == (103, "NOT_DURABLE")


def test_timeouts():
    q = tvmq.Queue.create(23, rows=2, record_size=8)
    t = time.monotonic()
    with pytest.raises(tvmq.Timeout) as e:
        q.pop(timeout=0.3)  # in milliseconds, not rounded to seconds
    assert 0.29 < time.monotonic() - t < 2
    assert e.value.name == "MQUE_WAIT_TMO" and "nothing came to queue 23 within 0.3 s" in str(e.value)
    t = time.monotonic()
    with pytest.raises(tvmq.Timeout):
        q.pop_many(2, timeout=0.25)
    assert 0.24 < time.monotonic() - t < 2
    with pytest.raises(tvmq.Empty):
        q.pop(timeout=0)  # no wait at all
    q.push(b"late")
    assert q.pop_many(2, timeout=0.2) == [b"late".ljust(8, b"\0")]  # what came, at the deadline
    q.push(b"late")
    assert q.pop(timeout=1)[:4] == b"late"


def test_batches():
    q = tvmq.Queue.create(24, rows=5, record_size=8)
    assert q.push_many([b"1", b"22", b"333"]) == 3
    with pytest.raises(tvmq.Full) as e:
        q.push_many([b"4", b"5", b"6"])
    # One name for "how many went in" across calls (import_file's too).
    assert e.value.count == 2 and e.value.pushed == 2
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


def test_creation_options_of_tvmq_create():
    q = tvmq.Queue.create(26, rows=4, record_size=16, part="p", mode=0o640, spin_us=100, unblock_timeout_ms=500)
    assert (q.capacity, q.record_size) == (4, 16)
    assert os.stat(os.path.join(os.environ["TVMDBD"], "queue-26.tvmq")).st_mode & 0o777 == 0o640
    tvmq.Queue.create(27, rows=4, record_size=16, lease_ms=1000, max_deliveries=3)
    tvmq_bin = os.environ.get("TVMQ_BIN")
    if tvmq_bin:
        out = subprocess.run([tvmq_bin, "stat", "27"], check=True, capture_output=True, text=True).stdout
        assert "leases           1000 ms by default" in out
        out = subprocess.run([tvmq_bin, "stat", "26"], check=True, capture_output=True, text=True).stdout
        assert "spin 100 us, then sleep" in out and "unblock timeout  500 ms" in out
    with pytest.raises(tvmq.TvmError) as e:
        tvmq.Queue.create(28, rows=4, record_size=16, durable="always")  # $TVMDBD is on tmpfs
    assert e.value.name == "NOT_DURABLE"
    with pytest.raises(tvmq.TvmError) as e:
        tvmq.Queue.create(28, rows=4, record_size=16, lease_ms=10, dead_letter=28)
    assert e.value.name == "NOT_SUPPT_OPT"
    with pytest.raises(TypeError):
        tvmq.Queue.create(28, rows=4, record_size=16, colour="red")


def test_truncate_export_and_import(tmp_path):
    q = tvmq.Queue.create_for(29, rows=8, struct=Order, lease_ms=5000)
    for i in range(5):
        q.push(Order(i, b"T|%d" % i, i / 4))
    assert q.export(str(tmp_path / "o.txt")) == 5
    assert (tmp_path / "o.txt").read_text().splitlines()[1] == "1|T\\x7c1|0.25"
    assert q.export(str(tmp_path / "o.bin"), sep=None) == 5
    assert q.truncate() == 5 and q.depth == 0
    assert q.import_file(str(tmp_path / "o.txt")) == 5
    assert [q.pop_struct(Order).symbol for _ in range(5)] == [b"T|%d" % i for i in range(5)]
    small = tvmq.Queue.create(30, rows=3, record_size=32)
    with pytest.raises(tvmq.Full) as e:
        small.import_file(str(tmp_path / "o.bin"))
    assert e.value.count == 3
    assert len(small.pop_many(5)) == 3
    with pytest.raises(tvmq.Empty) as e:
        small.pop(wait=False)
    assert e.value.count is None  # a call that does not stop partway


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
