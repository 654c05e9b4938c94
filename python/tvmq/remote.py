"""Remote queues: libtvm's network calls (``lTvmConnect``, ``lTvmPush``,
``lTvmPopLease``, ...) from Python, against ``tvmq serve``, a redis-server,
a Redis Cluster, or a Redis master behind Sentinel (docs/client.md).

    from tvmq.remote import Remote

    r = Remote("127.0.0.1", 6379)                       # or Remote.sentinel("h:26379,...", "mymaster")
    q = r.queue(21, record_size=64)
    q.create_leases(lease_ms=30000, max_deliveries=5, dead_letter=22)   # Redis: kept in {21}:opts
    q.push(b"hello")
    data, lease = q.pop_lease(timeout=1.0)
    q.ack(lease)

A :class:`Remote` is one libtvm handle with its connection: use it from one
thread at a time (one ``Remote`` per thread). Errors are the package's
exceptions (:class:`tvmq.TvmError` and its kinds), with the tvm code.
"""

import ctypes
import time
from typing import Optional, Tuple

from . import (
    QUE_NOWAIT,
    RC_SUCC,
    Lease,
    Record,
    TvmError,
    _code,
    _error,
    _H,
    _Options,
    code_name,
    load_library,
)

_ready = False


def _lib() -> ctypes.CDLL:
    """libtvm with the network calls' signatures set."""
    global _ready
    lib = load_library()
    if _ready:
        return lib
    if not hasattr(lib, "lTvmConnectSentinel"):
        raise OSError("this libtvm has no lTvmConnectSentinel: it is older than this package")
    long_, uint, cp = ctypes.c_long, ctypes.c_uint, ctypes.c_char_p
    lp = ctypes.POINTER(Lease)
    sig = {
        "lTvmConnect": (long_, [_H, cp, long_, ctypes.c_int]),
        "lTvmConnectSentinel": (long_, [_H, cp, cp, ctypes.c_int]),
        "lTvmAuth": (long_, [_H, cp, cp]),
        "lTvmSentinelAuth": (long_, [_H, cp, cp]),
        "vTvmDisconnect": (None, [_H]),
        "lTvmPush": (long_, [_H]),
        "lTvmPop": (long_, [_H, ctypes.c_void_p, uint]),
        "lTvmCount": (long_, [_H, ctypes.POINTER(ctypes.c_size_t)]),
        "lTvmDropTable": (long_, [_H, uint]),
        "lTvmPopLease": (long_, [_H, ctypes.c_void_p, uint, long_, lp]),
        "lTvmAck": (long_, [_H, lp]),
        "lTvmRelease": (long_, [_H, lp, long_]),
        "lTvmReject": (long_, [_H, lp]),
        "lTvmExtendLease": (long_, [_H, lp, long_]),
        "lTvmCreateQueueEx": (long_, [_H, uint, ctypes.POINTER(_Options)]),
        "lTvmRequireReplicas": (long_, [_H, long_, long_]),
        "lTvmSpread": (long_, [_H, uint, long_]),
        "lInitQueueOptions": (long_, [ctypes.POINTER(_Options), ctypes.c_size_t]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _ready = True
    return lib


def _b(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode()


class Remote:
    """A connection (a libtvm handle) to ``host``:``port`` (or a unix socket
    path as ``host``): tvmq serve, a redis-server, or any node of a Redis
    Cluster. ``timeout`` (seconds) bounds the connection and each reply;
    ``password`` (and ``user``) are sent as ``AUTH`` on every connection.
    Raises :class:`tvmq.TvmError` (``SOCK_CONN_ERR``, ...) when it cannot
    connect."""

    def __init__(
        self,
        host: Optional[str] = None,
        port: int = 5050,
        timeout: int = 3,
        password: Optional[str] = None,
        user: Optional[str] = None,
        *,
        _sentinel: Optional[Tuple[str, str, Optional[str], Optional[str]]] = None,
    ):
        lib = _lib()
        self._h = ctypes.cast(lib.pCloneSATvm(), _H)
        if not self._h:
            raise MemoryError("pCloneSATvm")
        try:
            if password is not None:
                self._check(lib.lTvmAuth(self._h, _b(user), _b(password)), "lTvmAuth")
            if _sentinel is not None:
                sentinels, master, s_user, s_password = _sentinel
                if s_password is not None:
                    self._check(lib.lTvmSentinelAuth(self._h, _b(s_user), _b(s_password)), "lTvmSentinelAuth")
                rc = lib.lTvmConnectSentinel(self._h, sentinels.encode(), master.encode(), timeout)
                self._check(rc, "lTvmConnectSentinel")
            else:
                if host is None:
                    raise ValueError("a host (or a unix socket path) is needed")
                self._check(lib.lTvmConnect(self._h, host.encode(), port, timeout), "lTvmConnect")
        except BaseException:
            self.close()
            raise

    @classmethod
    def sentinel(
        cls,
        sentinels: str,
        master: str,
        timeout: int = 3,
        password: Optional[str] = None,
        user: Optional[str] = None,
        sentinel_password: Optional[str] = None,
        sentinel_user: Optional[str] = None,
    ) -> "Remote":
        """The master the sentinels (``"host:port,host:port,..."``) call
        ``master`` (``lTvmConnectSentinel``), followed through failovers.
        ``password`` is the master's, ``sentinel_password`` the sentinels'
        own."""
        return cls(
            None, 0, timeout, password, user, _sentinel=(sentinels, master, sentinel_user, sentinel_password)
        )

    def _check(self, rc: int, call: str) -> None:
        if rc != RC_SUCC:
            raise _error(self._h.contents.m_lErrno, call)

    def queue(self, id: int, record_size: int) -> "RemoteQueue":
        """Queue ``id`` (its key on the server: the decimal id), whose
        records are at most ``record_size`` bytes."""
        return RemoteQueue(self, id, record_size)

    def require_replicas(self, replicas: int, timeout_ms: int) -> None:
        """From now on a push or an acknowledgement returns once ``replicas``
        replicas of the Redis master have it (``lTvmRequireReplicas``); else
        :class:`tvmq.TvmError` ``REPL_TIMEOUT`` (the record may or may not
        survive a failover). 0 turns it off. ``NOT_SUPPT_OPT`` against
        tvmq serve (no replicas)."""
        self._check(_lib().lTvmRequireReplicas(self._h, replicas, timeout_ms), "lTvmRequireReplicas")

    def close(self) -> None:
        """Closes the connection (``vTvmDisconnect``) and frees the handle."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            lib = _lib()
            lib.vTvmDisconnect(h)
            lib.vCloneFree(h)

    def __enter__(self) -> "Remote":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class RemoteQueue:
    """Queue ``id`` on a :class:`Remote`'s server. Blocking calls wait by
    asking again (every 1 to 50 ms), so that Ctrl-C interrupts them."""

    def __init__(self, remote: Remote, id: int, record_size: int):
        if record_size <= 0:
            raise ValueError("record_size is 1 or more")
        self.remote, self.id, self.record_size = remote, id, record_size
        self._buf = ctypes.create_string_buffer(record_size)

    def _bind(self, size: int, buf) -> None:
        h = self.remote._h.contents
        h.lSize, h.tblName = size, self.id
        h.pstVoid = ctypes.cast(buf, ctypes.c_void_p).value if buf is not None else None

    def _check(self, rc: int, call: str) -> None:
        self.remote._check(rc, call)

    def push(self, record: Record) -> None:
        """Appends one record (``lTvmPush``: ``RPUSH``)."""
        data = bytes(record)
        if not 0 < len(data) <= self.record_size:
            raise _error(_code("RECD_TOO_LONG"), "lTvmPush", f"a record of {len(data)} bytes (1 to {self.record_size})")
        buf = ctypes.create_string_buffer(data, len(data))
        self._bind(len(data), buf)
        self._check(_lib().lTvmPush(self.remote._h), "lTvmPush")

    def _wait(self, call: str, timeout: Optional[float], wait: bool, attempt):
        deadline = None if timeout is None else time.monotonic() + timeout
        nap = 0.001
        while True:
            got = attempt()
            if got is not None:
                return got
            if not wait or timeout == 0:
                raise _error(_code("NO_DATA_FOUND"), call, f"queue {self.id} is empty")
            if deadline is not None and time.monotonic() >= deadline:
                raise _error(_code("MQUE_WAIT_TMO"), call, f"nothing came to queue {self.id} within {timeout} s")
            time.sleep(nap)
            nap = min(nap * 2, 0.05)

    def _none_if_empty(self, rc: int, call: str) -> bool:
        if rc == RC_SUCC:
            return True
        code = self.remote._h.contents.m_lErrno
        if code_name(code) == "NO_DATA_FOUND":
            return False
        raise _error(code, call)

    def pop(self, timeout: Optional[float] = None, wait: bool = True) -> bytes:
        """Removes the oldest record (``lTvmPop``), ``record_size`` bytes.
        ``wait=False`` or ``timeout=0``: :class:`tvmq.Empty` at once when
        empty; else waits up to ``timeout`` seconds (None: forever), then
        :class:`tvmq.Timeout`."""

        def attempt():
            self._bind(self.record_size, None)
            ok = self._none_if_empty(_lib().lTvmPop(self.remote._h, self._buf, QUE_NOWAIT), "lTvmPop")
            return self._buf.raw if ok else None

        return self._wait("lTvmPop", timeout, wait, attempt)

    def pop_lease(self, timeout: Optional[float] = None, wait: bool = True, lease_ms: int = 0) -> Tuple[bytes, Lease]:
        """Takes the oldest record with a lease (``lTvmPopLease``): its bytes
        and the :class:`tvmq.Lease`, to pass to :meth:`ack` (or
        :meth:`release`, :meth:`reject`, :meth:`extend_lease`). On Redis
        the queue needs lease options (:meth:`create_leases`), else
        ``NOT_SUPPT_OPT``; a lease not acknowledged in time is delivered
        again, its ``deliveries`` raised. Waits as :meth:`pop`."""
        if lease_ms < 0:
            raise ValueError("lease_ms is 0 or more")
        lease = Lease()

        def attempt():
            self._bind(self.record_size, None)
            rc = _lib().lTvmPopLease(self.remote._h, self._buf, QUE_NOWAIT, lease_ms, ctypes.byref(lease))
            return (self._buf.raw, lease) if self._none_if_empty(rc, "lTvmPopLease") else None

        return self._wait("lTvmPopLease", timeout, wait, attempt)

    def _lease_call(self, call: str, *args) -> None:
        self._bind(self.record_size, None)
        self._check(getattr(_lib(), call)(self.remote._h, *args), call)

    def ack(self, lease: Lease) -> None:
        """Acknowledges a delivery (``lTvmAck``): done and gone.
        ``LEASE_EXPIRED`` when the lease ran out or was already ended (the
        record may have gone to another consumer)."""
        self._lease_call("lTvmAck", ctypes.byref(lease))

    def release(self, lease: Lease, delay_ms: int = 0) -> None:
        """Delivered again ``delay_ms`` from now (``lTvmRelease``); at the
        delivery limit, to the dead-letter queue."""
        if delay_ms < 0:
            raise ValueError("delay_ms is 0 or more")
        self._lease_call("lTvmRelease", ctypes.byref(lease), delay_ms)

    def reject(self, lease: Lease) -> None:
        """To the dead-letter queue, or dropped without one (``lTvmReject``)."""
        self._lease_call("lTvmReject", ctypes.byref(lease))

    def extend_lease(self, lease: Lease, lease_ms: int = 0) -> None:
        """The lease runs out ``lease_ms`` from now (0: the queue's lease
        time); ``lease`` is updated (``lTvmExtendLease``)."""
        if lease_ms < 0:
            raise ValueError("lease_ms is 0 or more")
        self._lease_call("lTvmExtendLease", ctypes.byref(lease), lease_ms)

    def create_leases(
        self, lease_ms: int = 30000, max_deliveries: int = 0, dead_letter: Optional[int] = None, max_leases: int = 1024
    ) -> None:
        """Stores the queue's lease options on a Redis (``lTvmCreateQueueEx``:
        the hash ``{id}:opts``): ``TvmError`` ``TBL_ARD_EXIST`` if it has
        some already, ``RMT_NOT_SUPPT`` against tvmq serve (create it there
        with ``tvmq create``)."""
        lib = _lib()
        o = _Options()
        lib.lInitQueueOptions(ctypes.byref(o), ctypes.sizeof(o))
        o.leases, o.lease_ms, o.max_deliveries, o.max_leases = True, lease_ms, max_deliveries, max_leases
        if dead_letter is not None:
            o.has_dead_letter, o.dead_letter = True, dead_letter
        self._check(lib.lTvmCreateQueueEx(self.remote._h, self.id, ctypes.byref(o)), "lTvmCreateQueueEx")

    def spread(self, shards: int) -> None:
        """Spreads the queue over ``shards`` keys on every master of a Redis
        Cluster, for this connection (``lTvmSpread``: every program using
        the queue must do the same)."""
        self._check(_lib().lTvmSpread(self.remote._h, self.id, shards), "lTvmSpread")

    @property
    def depth(self) -> int:
        """Records in the queue (``lTvmCount``)."""
        n = ctypes.c_size_t()
        self._bind(self.record_size, None)
        self._check(_lib().lTvmCount(self.remote._h, ctypes.byref(n)), "lTvmCount")
        return n.value

    def __len__(self) -> int:
        return self.depth

    def drop(self) -> None:
        """Drops the queue on the server (``lTvmDropTable``; on Redis its
        lease keys and options too)."""
        self._check(_lib().lTvmDropTable(self.remote._h, self.id), "lTvmDropTable")

    def __repr__(self) -> str:
        return f"tvmq.remote.RemoteQueue({self.id}, record_size={self.record_size})"


__all__ = ["Remote", "RemoteQueue", "TvmError"]
