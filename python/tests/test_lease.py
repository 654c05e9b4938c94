"""Leases from Python: pop_lease, ack, release (with a delay), reject to the
dead-letter queue, extend_lease, the lease running out, the errors, and a
consumer process that dies holding a lease."""

import os
import subprocess
import sys
import tempfile
import time

import pytest

import tvmq


@pytest.fixture(autouse=True)
def queue_dir(monkeypatch):
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="tvmq-pytest-lease-") as d:
        monkeypatch.setenv("TVMDBD", d)
        yield d
        for name in os.listdir(d):
            if name.startswith("queue-") and name.endswith(".tvmq"):
                tvmq.Queue.drop_queue(int(name[6:-5]))


def rec(b: bytes, size: int = 16) -> bytes:
    return b.ljust(size, b"\0")


def test_ack_release_reject_extend():
    tvmq.Queue.create(22, rows=10, record_size=16)
    q = tvmq.Queue.create(21, rows=10, record_size=16, lease_ms=30000, dead_letter=22)
    for r in (b"a", b"b", b"c"):
        q.push(r)
    data, lease = q.pop_lease()
    assert (data, lease.deliveries) == (rec(b"a"), 1)
    q.ack(lease)
    with pytest.raises(tvmq.TvmError) as e:
        q.ack(lease)
    assert e.value.name == "LEASE_EXPIRED"

    data, lease = q.pop_lease()
    assert data == rec(b"b")
    q.release(lease)
    data, lease = q.pop_lease(wait=False)
    assert (data, lease.deliveries) == (rec(b"b"), 2)
    old = tvmq.Lease.from_buffer_copy(lease)
    q.extend_lease(lease, 60000)
    with pytest.raises(tvmq.TvmError) as e:
        q.ack(old)
    assert e.value.name == "LEASE_EXPIRED"
    q.reject(lease)
    assert tvmq.Queue.open(22).pop(wait=False) == rec(b"b")

    data, lease = q.pop_lease()
    assert data == rec(b"c")
    q.release(lease, delay_ms=200)
    with pytest.raises(tvmq.Empty):
        q.pop_lease(wait=False)
    t = time.monotonic()
    data, lease = q.pop_lease(timeout=5)
    assert data == rec(b"c") and lease.deliveries == 2
    assert 0.1 <= time.monotonic() - t < 3
    q.ack(lease)
    with pytest.raises(tvmq.Timeout):
        q.pop_lease(timeout=0.05)


def test_a_lease_runs_out_and_errors():
    q = tvmq.Queue.create(21, rows=10, record_size=16, lease_ms=30000)
    q.push(b"x")
    data, lease = q.pop_lease(lease_ms=50)
    time.sleep(0.2)
    with pytest.raises(tvmq.TvmError) as e:
        q.ack(lease)
    assert e.value.name == "LEASE_EXPIRED"
    data, lease = q.pop_lease(timeout=1)
    assert (data, lease.deliveries) == (rec(b"x"), 2)
    q.ack(lease)
    with pytest.raises(tvmq.TvmError) as e:
        q.ack(tvmq.Lease())
    assert e.value.name == "LEASE_INVALID"
    plain = tvmq.Queue.create(23, rows=10, record_size=16)
    plain.push(b"y")
    with pytest.raises(tvmq.TvmError) as e:
        plain.pop_lease()
    assert e.value.name == "NOT_SUPPT_OPT"
    with pytest.raises(ValueError):
        q.release(lease, delay_ms=-1)
    # Over a year (31,536,000,000 ms): refused, nothing taken.
    q.push(b"z")
    with pytest.raises(tvmq.TvmError) as e:
        q.pop_lease(lease_ms=31536000001)
    assert e.value.name == "CONDIT_IS_NIL"
    data, lease = q.pop_lease(timeout=1, lease_ms=31536000000)
    assert data == rec(b"z")
    for call in (lambda: q.release(lease, delay_ms=31536000001), lambda: q.extend_lease(lease, lease_ms=31536000001)):
        with pytest.raises(tvmq.TvmError) as e:
            call()
        assert e.value.name == "CONDIT_IS_NIL"
    q.ack(lease)


def test_a_consumer_process_that_dies_holding_a_lease():
    q = tvmq.Queue.create(21, rows=10, record_size=16, lease_ms=600000)
    q.push(b"job")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, tvmq; q = tvmq.Queue.open(21); q.pop_lease(); print('leased', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout.readline() == b"leased\n"
    with pytest.raises(tvmq.Empty):
        q.pop_lease(wait=False)
    child.kill()
    child.wait()
    data, lease = q.pop_lease(timeout=5)
    assert (data, lease.deliveries) == (rec(b"job"), 2)
    q.ack(lease)
