"""Remote queues (tvmq.remote) against a redis-server and tvmq serve that the
tests start on free loopback ports: pushes, pops and every lease call with
their codes; the lease options kept in Redis; lTvmRequireReplicas."""

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import tvmq
from tvmq.remote import Remote

REDIS = shutil.which("redis-server")


def free_port() -> int:
    """A loopback port nothing is bound to now, in 20000-29999: below the
    kernel's ephemeral range, so that no outgoing connection of any process
    takes it before the server binds it (one bind(port 0) hands out may be
    the next connect's), as c-tests/ports.sh picks them."""
    for _ in range(500):
        port = random.randint(20000, 29999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 20000-29999")


def wait_port(port: int, proc) -> None:
    for _ in range(200):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.025)
    raise RuntimeError(f"nothing listens on {port}")


@pytest.fixture
def redis():
    if REDIS is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tvmq-pytest-redis-") as d:
        proc = subprocess.Popen(
            [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d],
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_port(port, proc)
            yield port
        finally:
            proc.kill()
            proc.wait()


@pytest.fixture
def serve():
    tvmq_bin = os.environ.get("TVMQ_BIN")
    if not tvmq_bin:
        pytest.skip("TVMQ_BIN (the tvmq command) is not set")
    port = free_port()
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="tvmq-pytest-serve-") as d:
        proc = subprocess.Popen([tvmq_bin, "serve", "--port", str(port), "--dir", d], stdout=subprocess.DEVNULL)
        try:
            wait_port(port, proc)
            yield port, d
        finally:
            proc.terminate()
            proc.wait()


def rec(b: bytes, size: int = 16) -> bytes:
    return b.ljust(size, b"\0")


def test_leases_on_redis(redis):
    with Remote("127.0.0.1", redis) as r:
        q, dead = r.queue(21, 16), r.queue(22, 16)
        q.drop()
        dead.drop()
        with pytest.raises(tvmq.TvmError) as e:
            q.pop_lease(wait=False)
        assert e.value.name == "NOT_SUPPT_OPT"
        q.create_leases(lease_ms=30000, max_deliveries=2, dead_letter=22)
        with pytest.raises(tvmq.TvmError) as e:
            q.create_leases()
        assert e.value.name == "TBL_ARD_EXIST"
        for b in (b"a", b"b", b"c", b"d"):
            q.push(b)
        assert len(q) == 4
        data, lease = q.pop_lease()
        assert (data, lease.deliveries) == (rec(b"a"), 1)
        q.ack(lease)
        with pytest.raises(tvmq.TvmError) as e:
            q.ack(lease)
        assert e.value.name == "LEASE_EXPIRED"
        # Released: delivered again first, its count raised; extended: the old copy stale.
        data, lease = q.pop_lease()
        q.release(lease)
        data, lease = q.pop_lease()
        assert (data, lease.deliveries) == (rec(b"b"), 2)
        old = Lease_copy(lease)
        q.extend_lease(lease, 60000)
        with pytest.raises(tvmq.TvmError) as e:
            q.ack(old)
        assert e.value.name == "LEASE_EXPIRED"
        # At the delivery limit (2) a release dead-letters.
        q.release(lease)
        assert dead.pop(wait=False) == rec(b"b")
        # Rejected: to the dead-letter queue.
        data, lease = q.pop_lease()
        assert data == rec(b"c")
        q.reject(lease)
        assert dead.pop(wait=False) == rec(b"c")
        # Released with a delay: a waiting lease gets it.
        data, lease = q.pop_lease()
        q.release(lease, 200)
        with pytest.raises(tvmq.Empty):
            q.pop_lease(wait=False)
        t0 = time.monotonic()
        data, lease = q.pop_lease(timeout=5)
        assert data == rec(b"d") and lease.deliveries == 2 and time.monotonic() - t0 >= 0.15
        q.ack(lease)
        # A lease that runs out: the late ack fails, the record comes back.
        q.push(b"e")
        data, lease = q.pop_lease(lease_ms=100)
        time.sleep(0.3)
        with pytest.raises(tvmq.TvmError) as e:
            q.ack(lease)
        assert e.value.name == "LEASE_EXPIRED"
        data, lease2 = q.pop_lease(timeout=5)
        assert (data, lease2.deliveries) == (rec(b"e"), 2)
        q.ack(lease2)
        with pytest.raises(tvmq.Timeout):
            q.pop_lease(timeout=0.05)
        # lTvmRequireReplicas on a master without replicas.
        r.require_replicas(1, 50)
        with pytest.raises(tvmq.TvmError) as e:
            q.push(b"f")
        assert e.value.name == "REPL_TIMEOUT"
        r.require_replicas(0, 0)
        assert q.pop(wait=False) == rec(b"f")
        q.drop()
        dead.drop()


def Lease_copy(lease: tvmq.Lease) -> tvmq.Lease:
    c = tvmq.Lease()
    import ctypes

    ctypes.memmove(ctypes.byref(c), ctypes.byref(lease), ctypes.sizeof(c))
    return c


def test_leases_on_tvmq_serve(serve):
    port, d = serve
    os.environ["TVMDBD"] = d
    try:
        tvmq.Queue.create(21, rows=10, record_size=16, lease_ms=30000).close()
        with Remote("127.0.0.1", port) as r:
            q = r.queue(21, 16)
            with pytest.raises(tvmq.TvmError) as e:
                r.require_replicas(1, 100)
            assert e.value.name == "NOT_SUPPT_OPT"
            with pytest.raises(tvmq.TvmError) as e:
                q.create_leases()
            assert e.value.name == "RMT_NOT_SUPPT"
            q.push(b"x")
            data, lease = q.pop_lease(timeout=1)
            assert (data, lease.deliveries) == (rec(b"x"), 1)
            q.release(lease)
            data, lease = q.pop_lease(timeout=1)
            assert lease.deliveries == 2
            q.ack(lease)
            with pytest.raises(tvmq.Empty):
                q.pop_lease(wait=False)
        tvmq.Queue.drop_queue(21)
    finally:
        del os.environ["TVMDBD"]


def test_connect_errors():
    with pytest.raises(tvmq.TvmError) as e:
        Remote("127.0.0.1", free_port(), timeout=1)
    assert e.value.name == "SOCK_CONN_ERR"
    with pytest.raises(tvmq.TvmError) as e:
        Remote.sentinel("127.0.0.1:%d" % free_port(), "mymaster", timeout=1)
    assert e.value.name == "SOCK_CONN_ERR"
