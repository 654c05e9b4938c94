"""tvmq queues from Python, through libtvm (the STVM queue API) and ctypes.

A :class:`Queue` is one queue of the queue directory (``$TVMDBD``, default
``/dev/shm/tvmq-<uid>``), shared with every C, Rust and Python process that
uses it. Records are ``bytes`` (at most the queue's record size) or instances
of a ``ctypes.Structure`` laid out as the C programs' struct::

    import tvmq

    q = tvmq.Queue.create(21, rows=1000, record_size=304)
    q.push(b"hello")
    print(q.pop(timeout=1.0))           # b'hello' and zero bytes up to 304
    q.drop()

Errors raise :class:`TvmError` (or a subclass) carrying the tvm code, its
name, the message and libtvm's detail text (``sGetTErrDetail``: the path,
the OS error, a server's answer); an empty queue is :class:`Empty`, a full one
:class:`Full`, a timeout :class:`Timeout`, a missing queue :class:`NotFound`.
Every code's name comes from libtvm itself (``sGetTErrName``, made from the
table tvm.h's ``#define`` lines are made from): :func:`code_name`, :func:`codes`.

Waits (``pop``, ``pop_struct``, ``pop_many`` with a timeout) return to Python
every 100 ms at most, so Ctrl-C raises ``KeyboardInterrupt`` within about
that time. No record is lost to it: if the interrupt comes just as a record
was taken, the call returns the record and the next ``pop`` raises the
``KeyboardInterrupt`` before taking anything.

A ``Queue`` object owns one libtvm handle: use it from one thread at a time
(give each thread its own ``Queue``; the queue itself is shared safely).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Type, TypeVar, Union

__all__ = [
    "Queue",
    "QueueStats",
    "queues",
    "Lease",
    "TvmError",
    "Empty",
    "Full",
    "Timeout",
    "NotFound",
    "Exists",
    "load_library",
    "code_name",
    "codes",
    "RC_SUCC",
    "QUE_NORMAL",
    "QUE_NOWAIT",
]

RC_SUCC = 0
QUE_NORMAL = 0
QUE_NOWAIT = 1
_FIELD_CHAR, _FIELD_LONG, _FIELD_DOUB = 1, 2, 4

# The longest a wait stays in C before Python may run a signal handler.
_SLICE_MS = 100

Record = Union[bytes, bytearray, memoryview, ctypes.Structure]
S = TypeVar("S", bound=ctypes.Structure)


class _SATvm(ctypes.Structure):
    # The public members of tvm.h's SATvm, in order; the library's private
    # members follow, and this module never touches them.
    _fields_ = [
        ("lSize", ctypes.c_size_t),
        ("tblName", ctypes.c_uint),
        ("m_lErrno", ctypes.c_uint),
        ("m_lEffect", ctypes.c_size_t),
        ("pstVoid", ctypes.c_void_p),
    ]


_H = ctypes.POINTER(_SATvm)
_DEF = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_uint)


class _Stats(ctypes.Structure):
    # tvm.h's TvmQueueStats (size-versioned: size is set to sizeof before the call).
    _fields_ = [("size", ctypes.c_size_t)] + [
        (name, ctypes.c_uint64)
        for name in (
            "record_size", "capacity", "depth", "pushed", "popped", "waiters", "processes",
            "leases_in_flight", "redelivered", "expired", "dead_lettered", "syncs",
        )
    ]


@dataclass(frozen=True)
class QueueStats:
    """A queue's counters at one instant (:meth:`Queue.stats`, libtvm's
    ``lQueueStats``). Counters (``pushed``, ``popped``, ``redelivered``,
    ``expired``, ``dead_lettered``, ``syncs``) only grow while the queue
    exists; the rest say what is now."""

    record_size: int
    """The largest record, in bytes."""
    capacity: int
    """How many records the queue holds at most."""
    depth: int
    """Records queued now (leased records are not counted)."""
    pushed: int
    """Records pushed since the queue was created."""
    popped: int
    """Records popped or leased since the queue was created."""
    waiters: int
    """Threads of every process asleep in a blocking pop now."""
    processes: int
    """Processes attached now (this one included)."""
    leases_in_flight: int
    """Leases held by consumers now (0 for a plain queue)."""
    redelivered: int
    """Records delivered again after a lease ran out, its holder died or it was released."""
    expired: int
    """Leases that ran out."""
    dead_lettered: int
    """Records moved to the dead-letter queue."""
    syncs: int
    """Syncs to stable storage (0 unless the queue is durable)."""


class _Options(ctypes.Structure):
    # tvm.h's TvmQueueOptions (lInitQueueOptions fills it with the defaults).
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("rows", ctypes.c_size_t),
        ("record_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("part", ctypes.c_char_p),
        ("def_", _DEF),
        ("mode", ctypes.c_uint),
        ("durable", ctypes.c_uint),
        ("durable_interval_ms", ctypes.c_uint),
        ("has_spin", ctypes.c_bool),
        ("spin_us", ctypes.c_long),
        ("unblock_timeout_ms", ctypes.c_ulonglong),
        ("leases", ctypes.c_bool),
        ("lease_ms", ctypes.c_ulonglong),
        ("max_deliveries", ctypes.c_uint),
        ("has_dead_letter", ctypes.c_bool),
        ("dead_letter", ctypes.c_uint),
        ("max_leases", ctypes.c_ulonglong),
    ]


class Lease(ctypes.Structure):
    """A leased delivery (tvm.h's ``TvmLease``), returned by
    :meth:`Queue.pop_lease` and passed to :meth:`Queue.ack`,
    :meth:`Queue.release`, :meth:`Queue.reject` or
    :meth:`Queue.extend_lease` (which updates it). ``deliveries`` is how many
    times the record has been delivered, this delivery included; the rest is
    private. Plain data: a copy may be used by any thread or process, one
    call at a time."""

    _fields_ = [
        ("deliveries", ctypes.c_uint),
        ("_check", ctypes.c_uint),
        ("_priv", ctypes.c_ulonglong * 7),
    ]

    def __repr__(self) -> str:
        return f"tvmq.Lease(deliveries={self.deliveries})"


class TvmError(Exception):
    """A libtvm call failed: ``code`` is the tvm code, ``name`` its macro
    name, ``message`` what happened (the detail when there is one, else the
    code's standard message), ``detail`` libtvm's detail text of the failed
    call (``sGetTErrDetail``: the path involved, the OS error, a server's
    answer such as ``WRONGPASS ...``; ``""`` when the code says it all).
    ``count`` is, for a call that stops partway (:meth:`Queue.push_many`,
    :meth:`Queue.import_file`), how many records it had pushed, which stay;
    ``None`` for the others."""

    def __init__(self, code: int, name: str, message: str, call: str = "", detail: str = ""):
        self.code = code
        self.name = name
        self.message = message
        self.call = call
        self.count: Optional[int] = None
        self.detail = detail
        super().__init__(f"{call + ': ' if call else ''}{message} ({name}, code {code})")


class Empty(TvmError):
    """The queue holds no record (``NO_DATA_FOUND``)."""


class Full(TvmError):
    """The queue is full (``DATA_SPC_FULL``)."""


class Timeout(TvmError):
    """Nothing came in time (``MQUE_WAIT_TMO``)."""


class NotFound(TvmError):
    """No such queue (``TBL_NOT_FOUND``)."""


class Exists(TvmError):
    """The queue already exists (``TBL_ARD_EXIST``)."""


# The exceptions of particular codes, by the codes' names.
_BY_NAME = {
    "NO_DATA_FOUND": Empty,
    "DATA_SPC_FULL": Full,
    "MQUE_WAIT_TMO": Timeout,
    "TBL_NOT_FOUND": NotFound,
    "TBL_ARD_EXIST": Exists,
}

_lib: Optional[ctypes.CDLL] = None
_codes: Dict[str, int] = {}
# An interrupt that came just as a pop took a record: the record was
# returned, and the next pop raises this before taking anything.
_pending: Optional[BaseException] = None


def _candidates() -> List[str]:
    found = []
    env = os.environ.get("TVMQ_LIB")
    if env:
        return [env]  # asked for: this one or an error
    here = Path(__file__).resolve().parent
    found += [str(p) for p in sorted(here.glob("libtvm.so*"))]
    name = ctypes.util.find_library("tvm")
    found += [name] if name else []
    found += ["libtvm.so.0", "libtvm.so"]
    return found


def load_library() -> ctypes.CDLL:
    """The loaded libtvm: ``$TVMQ_LIB``, else a copy inside this package,
    else the system's. Raises ``OSError`` saying where it looked."""
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise OSError("libtvm not found (set TVMQ_LIB to libtvm.so): " + "; ".join(errors))
    for needed in ("sGetTErrName", "lPopWait", "lCreateQueueEx", "sGetTErrDetail", "lQueueStats"):
        if not hasattr(lib, needed):
            raise OSError(
                f"the libtvm at {path} has no {needed}: it is older than this package; "
                "set TVMQ_LIB to a current build's libtvm.so (target/release/libtvm.so) or install it again"
            )
    long_, size_t, uint = ctypes.c_long, ctypes.c_size_t, ctypes.c_uint
    sig = {
        "pCloneSATvm": (ctypes.c_void_p, []),
        "vCloneFree": (None, [_H]),
        "sGetTError": (ctypes.c_char_p, [long_]),
        "sGetTErrName": (ctypes.c_char_p, [long_]),
        "lAttchTable": (long_, [_H, uint]),
        "lCircleQueue": (long_, [_H, uint, size_t, size_t, ctypes.c_char_p, ctypes.c_char_p]),
        "lTableQueue": (long_, [_H, uint, size_t, _DEF]),
        "lTvmDefQueue": (long_, [uint, ctypes.c_char_p, ctypes.c_char_p, size_t]),
        "lTvmDefField": (long_, [ctypes.c_char_p, size_t, size_t, long_]),
        "lDropTable": (long_, [_H, uint]),
        "lPush": (long_, [_H]),
        "lPushs": (long_, [_H, ctypes.POINTER(size_t), ctypes.POINTER(ctypes.c_void_p)]),
        "lPop": (long_, [_H, ctypes.c_void_p, uint]),
        "lPopWait": (long_, [_H, ctypes.c_void_p, long_]),
        "lPopup": (long_, [_H, size_t, ctypes.c_long, ctypes.POINTER(size_t), ctypes.POINTER(ctypes.c_void_p)]),
        "lQueueInfo": (long_, [_H, uint, ctypes.POINTER(size_t), ctypes.POINTER(size_t), ctypes.POINTER(size_t)]),
        "lGetTErrno": (long_, []),
        "lGetEffect": (size_t, []),
        "lInitQueueOptions": (long_, [ctypes.POINTER(_Options), size_t]),
        "lCreateQueueEx": (long_, [_H, uint, ctypes.POINTER(_Options)]),
        "lTruncate": (long_, [_H, uint]),
        "lPopLease": (long_, [_H, ctypes.c_void_p, uint, long_, ctypes.POINTER(Lease)]),
        "lAck": (long_, [_H, ctypes.POINTER(Lease)]),
        "lRelease": (long_, [_H, ctypes.POINTER(Lease), long_]),
        "lReject": (long_, [_H, ctypes.POINTER(Lease)]),
        "lExtendLease": (long_, [_H, ctypes.POINTER(Lease), long_]),
        "lExportFile": (long_, [uint, ctypes.c_char_p, ctypes.c_char_p]),
        "lImportFile": (long_, [uint, ctypes.c_char_p, ctypes.c_char_p]),
        "sGetTErrDetail": (ctypes.c_char_p, []),
        "lQueueStats": (long_, [_H, uint, ctypes.POINTER(_Stats)]),
        "lListQueues": (long_, [ctypes.POINTER(uint), size_t, ctypes.POINTER(size_t)]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    code = 0
    while True:
        name = lib.sGetTErrName(code)
        if name is None:
            break
        _codes[name.decode()] = code
        code += 1
    _lib = lib
    return lib


def codes() -> Dict[str, int]:
    """Every tvm error code by name (``{"TVM_DONE_SUCC": 0, ...}``), as
    libtvm names them: the same table tvm.h's ``#define`` lines come from."""
    load_library()
    return dict(_codes)


def code_name(code: int) -> str:
    """The name of tvm code ``code`` (``"RECD_TOO_LONG"`` for 74), or
    ``"code N"`` for a number that is no tvm code."""
    name = load_library().sGetTErrName(code) if -(2**63) <= code < 2**63 else None
    return name.decode() if name is not None else f"code {code}"


def _code(name: str) -> int:
    load_library()
    return _codes[name]


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def _detail() -> str:
    """The detail text of this thread's last libtvm error ("" after a success)."""
    return (load_library().sGetTErrDetail() or b"").decode("utf-8", "replace")


def _error(code: int, call: str, message: Optional[str] = None, detail: Optional[str] = None) -> TvmError:
    """The exception of tvm code ``code`` from ``call``: ``message`` says
    what happened. Without a message nor a ``detail``, ``call`` is the
    libtvm call that just failed on this thread: its detail text
    (``sGetTErrDetail``) is the detail, and the message when there is one,
    else the code's standard message is."""
    lib = load_library()
    if message is None and detail is None:
        detail = _detail()
    detail = detail or ""
    if message is None:
        message = detail or (lib.sGetTError(code) or b"unknown error").decode("utf-8", "replace")
    name = code_name(code)
    return _BY_NAME.get(name, TvmError)(code, name, message, call, detail)


def queues() -> List[int]:
    """The ids of the queues in the queue directory (``$TVMDBD``, else
    ``/dev/shm/tvmq-<uid>``), ascending (``lListQueues``). A directory that
    does not exist holds none."""
    lib = load_library()
    n = ctypes.c_size_t()
    while True:
        if lib.lListQueues(None, 0, ctypes.byref(n)) != RC_SUCC:
            raise _error(lib.lGetTErrno(), "lListQueues")
        room = n.value + 16  # queues made between the two calls
        ids = (ctypes.c_uint * room)()
        if lib.lListQueues(ids, room, ctypes.byref(n)) != RC_SUCC:
            raise _error(lib.lGetTErrno(), "lListQueues")
        if n.value <= room:
            return list(ids[: n.value])


def _split(taken: List[bytes], size: int) -> List[bytes]:
    """The records of the array an ``lPopup`` returned (``taken``: the
    array's bytes, once copied, or nothing), ``size`` bytes each."""
    if not taken:
        return []
    return [taken[0][i * size : (i + 1) * size] for i in range(len(taken[0]) // size)]


def _raise_pending() -> None:
    """Raises the interrupt a previous pop deferred, if any."""
    global _pending
    if _pending is not None:
        e, _pending = _pending, None
        raise e


def _queue_dir() -> str:
    return os.environ.get("TVMDBD") or f"/dev/shm/tvmq-{os.geteuid()}"


def _field_kind(ctype) -> int:
    """The FIELD kind of a ctypes field type."""
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        return _FIELD_CHAR
    if ctype in (ctypes.c_double, ctypes.c_float):
        return _FIELD_DOUB
    if ctype in (ctypes.c_char, ctypes.c_byte, ctypes.c_ubyte, ctypes.c_bool):
        return _FIELD_CHAR
    return _FIELD_LONG


class Queue:
    """One queue, with a libtvm handle of its own (one thread at a time)."""

    def __init__(self, id: int):
        """Attaches queue ``id``; raises :class:`NotFound` if it does not exist."""
        self.id = int(id)
        lib = load_library()
        ptr = lib.pCloneSATvm()
        if not ptr:
            raise MemoryError("pCloneSATvm")
        self._h = ctypes.cast(ptr, _H)
        if lib.lAttchTable(self._h, self.id) != RC_SUCC:
            code = self._h.contents.m_lErrno
            what = f"no queue {self.id} in {_queue_dir()}" if code_name(code) == "TBL_NOT_FOUND" else None
            raise _error(code, "lAttchTable", what, _detail())
        size = ctypes.c_size_t()
        cap = ctypes.c_size_t()
        self._check(lib.lQueueInfo(self._h, self.id, ctypes.byref(size), ctypes.byref(cap), None), "lQueueInfo")
        self.record_size: int = size.value
        """The largest record, in bytes."""
        self.capacity: int = cap.value
        """How many records the queue holds at most."""
        self._buf = ctypes.create_string_buffer(self.record_size)

    # -- creation and removal ------------------------------------------------

    @classmethod
    def create(
        cls,
        id: int,
        rows: int,
        record_size: int,
        name: Optional[str] = None,
        **options,
    ) -> "Queue":
        """Creates queue ``id`` holding exactly ``rows`` records of up to
        ``record_size`` bytes, and opens it. Raises :class:`Exists` if it
        exists. The keyword options are those of ``tvmq create`` (and of
        ``lCreateQueueEx``): ``part`` (text), ``mode`` (0o600),
        ``unblock_timeout_ms``, ``spin_us`` (-1: never sleep), ``durable``
        (``"always"`` or ``"interval=MS"``; the queue directory must be on a
        disk), and leases: ``lease_ms``, ``max_deliveries``, ``dead_letter``,
        ``max_leases`` (any of them gives the queue leases)."""
        return cls._create(id, rows, record_size, name if name is not None else str(id), None, options)

    @classmethod
    def _create(cls, id: int, rows: int, record_size: int, name: Optional[str], define, options) -> "Queue":
        lib = load_library()
        o = _Options()
        if lib.lInitQueueOptions(ctypes.byref(o), ctypes.sizeof(o)) != RC_SUCC:
            raise _error(lib.lGetTErrno(), "lInitQueueOptions")
        o.rows, o.record_size = rows, record_size
        keep = []  # the encoded strings live as long as the call
        if name is not None:
            keep.append(name.encode())
            o.name = keep[-1]
        unknown = set(options) - {
            "part", "mode", "unblock_timeout_ms", "spin_us", "durable",
            "lease_ms", "max_deliveries", "dead_letter", "max_leases",
        }
        if unknown:
            raise TypeError(f"unknown option(s) {sorted(unknown)}")
        if "part" in options:
            keep.append(str(options["part"]).encode())
            o.part = keep[-1]
        if "mode" in options:
            o.mode = options["mode"]
        if "unblock_timeout_ms" in options:
            o.unblock_timeout_ms = options["unblock_timeout_ms"]
        if options.get("spin_us") is not None:
            o.has_spin, o.spin_us = True, options["spin_us"]
        durable = options.get("durable")
        if durable is not None:
            if durable == "always":
                o.durable = 1
            elif isinstance(durable, str) and durable.startswith("interval="):
                o.durable, o.durable_interval_ms = 2, int(durable[len("interval="):])
            else:
                raise ValueError(f"durable={durable!r}: use 'always' or 'interval=MS'")
        lease_keys = ("lease_ms", "max_deliveries", "dead_letter", "max_leases")
        if any(options.get(k) is not None for k in lease_keys):
            o.leases = True
            if options.get("lease_ms") is not None:
                o.lease_ms = options["lease_ms"]
            if options.get("max_deliveries") is not None:
                o.max_deliveries = options["max_deliveries"]
            if options.get("dead_letter") is not None:
                o.has_dead_letter, o.dead_letter = True, options["dead_letter"]
            if options.get("max_leases") is not None:
                o.max_leases = options["max_leases"]
        failure: List[BaseException] = []
        if define is not None:
            def guarded(table: int) -> int:
                try:
                    return define(table)
                except BaseException as e:  # never let an exception cross into C
                    failure.append(e)
                    return -1

            o.def_ = _DEF(guarded)
        h = ctypes.cast(lib.pCloneSATvm(), _H)
        try:
            rc = lib.lCreateQueueEx(h, id, ctypes.byref(o))
            if failure:
                raise failure[0]
            if rc != RC_SUCC:
                raise _error(h.contents.m_lErrno, "lCreateQueueEx")
        finally:
            lib.vCloneFree(h)
        return cls(id)

    @classmethod
    def create_for(
        cls, id: int, rows: int, struct: Type[ctypes.Structure], name: Optional[str] = None, **options
    ) -> "Queue":
        """Creates queue ``id`` for records of the ``ctypes.Structure``
        ``struct`` (as ``lTableQueue``): the record size is ``sizeof(struct)``
        and its fields are stored with the queue (``tvmq peek`` decodes
        records by them: arrays of chars as text, integers, doubles). The
        keyword options are those of :meth:`create`."""
        lib = load_library()
        qname = (name or struct.__name__).encode()

        def define(table: int) -> int:
            if lib.lTvmDefQueue(table, b"", qname, ctypes.sizeof(struct)) != RC_SUCC:
                return -1
            for fname, ctype, *_ in struct._fields_:
                member = getattr(struct, fname)
                if lib.lTvmDefField(fname.encode(), member.offset, member.size, _field_kind(ctype)) != RC_SUCC:
                    return -1
            return RC_SUCC

        return cls._create(id, rows, 0, None, define, options)

    @classmethod
    def open(cls, id: int) -> "Queue":
        """Opens queue ``id`` (the same as ``Queue(id)``)."""
        return cls(id)

    @staticmethod
    def drop_queue(id: int) -> None:
        """Removes queue ``id``; processes blocked on it wake with an error."""
        lib = load_library()
        h = ctypes.cast(lib.pCloneSATvm(), _H)
        try:
            if lib.lDropTable(h, id) != RC_SUCC:
                raise _error(h.contents.m_lErrno, "lDropTable")
        finally:
            lib.vCloneFree(h)

    def drop(self) -> None:
        """Removes this queue (see :meth:`drop_queue`)."""
        Queue.drop_queue(self.id)

    def truncate(self) -> int:
        """Removes the records queued now, by popping them (``lTruncate``):
        attached processes go on undisturbed. Returns how many it removed."""
        self._check(load_library().lTruncate(self._h, self.id), "lTruncate")
        return self._h.contents.m_lEffect

    def export(self, path: str, sep: Optional[str] = "|") -> int:
        """Writes a copy of the records queued at one instant to ``path``,
        consuming none (``lExportFile``): text lines with fields separated
        by ``sep`` for a queue with a field list, else (or with ``sep=None``)
        the binary form. Returns how many records it wrote."""
        lib = load_library()
        s = sep.encode() if sep is not None else None
        if lib.lExportFile(self.id, str(path).encode(), s) != RC_SUCC:
            raise _error(lib.lGetTErrno(), "lExportFile")
        return lib.lGetEffect()

    def import_file(self, path: str, sep: Optional[str] = "|") -> int:
        """Appends the records of an export (``lImportFile``; text or binary).
        Returns how many went in; a full queue raises :class:`Full` after
        pushing what fitted (its ``count`` says how many)."""
        lib = load_library()
        s = sep.encode() if sep is not None else None
        if lib.lImportFile(self.id, str(path).encode(), s) != RC_SUCC:
            e = _error(lib.lGetTErrno(), "lImportFile")
            e.count = lib.lGetEffect()
            raise e
        return lib.lGetEffect()

    # -- records -------------------------------------------------------------

    def _check(self, rc: int, call: str) -> None:
        if rc != RC_SUCC:
            raise _error(self._h.contents.m_lErrno, call)

    def _bind(self, size: int, buf) -> None:
        h = self._h.contents
        h.lSize = size
        h.tblName = self.id
        h.pstVoid = ctypes.cast(buf, ctypes.c_void_p).value if buf is not None else None

    def _check_record(self, size: int, call: str) -> None:
        """A record the queue cannot take, refused here with a message that
        names its size (libtvm would give only the code)."""
        if size == 0:
            raise _error(_code("CONDIT_IS_NIL"), call, "an empty record (0 bytes) cannot be pushed")
        if size > self.record_size:
            what = f"a record of {size} bytes is longer than queue {self.id}'s records (at most {self.record_size})"
            raise _error(_code("RECD_TOO_LONG"), call, what)

    def push(self, record: Record) -> None:
        """Appends one record: ``bytes`` of 1 to ``record_size`` bytes, or a
        ``ctypes.Structure``. Never waits: a full queue raises :class:`Full`."""
        data = bytes(record)
        self._check_record(len(data), "lPush")
        buf = ctypes.create_string_buffer(data, len(data))
        self._bind(len(data), buf)
        self._check(load_library().lPush(self._h), "lPush")

    def push_many(self, records: Sequence[Record]) -> int:
        """Pushes records in one call (``lPushs``), each padded with zero bytes
        to the longest; returns how many went in. If the queue fills, the
        records before stay pushed and :class:`Full` is raised with its
        ``count`` saying how many (also as ``pushed``, its earlier name)."""
        if not records:
            return 0
        datas = [bytes(r) for r in records]
        each = max(len(d) for d in datas)
        self._check_record(each, "lPushs")
        block = ctypes.create_string_buffer(b"".join(d.ljust(each, b"\0") for d in datas), each * len(datas))
        n = ctypes.c_size_t(len(datas))
        p = ctypes.c_void_p(ctypes.addressof(block))
        self._bind(each, None)
        rc = load_library().lPushs(self._h, ctypes.byref(n), ctypes.byref(p))
        if rc != RC_SUCC:
            e = _error(self._h.contents.m_lErrno, "lPushs")
            e.count = n.value
            e.pushed = n.value  # type: ignore[attr-defined]
            raise e
        return n.value

    def pop(self, timeout: Optional[float] = None, wait: bool = True) -> bytes:
        """Removes the oldest record and returns its ``record_size`` bytes (a
        shorter record is followed by zero bytes). ``wait=False``: raises
        :class:`Empty` at once when the queue is empty (so does ``timeout=0``).
        Otherwise waits for a record, forever (``timeout=None``) or up to
        ``timeout`` seconds (then :class:`Timeout`). Ctrl-C interrupts the
        wait (``KeyboardInterrupt``)."""
        _raise_pending()
        if timeout is not None:
            _check_timeout(timeout)
        got = self._pop_one(0)
        if got is not None:
            return got
        if not wait or timeout == 0:
            raise self._empty("lPop")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _SLICE_MS if deadline is None else math.ceil(1000 * (deadline - time.monotonic()))
            if left <= 0:
                raise _error(_code("MQUE_WAIT_TMO"), "lPopWait", f"nothing came to queue {self.id} within {timeout} s")
            got = self._pop_one(min(left, _SLICE_MS))
            if got is not None:
                return got

    def _empty(self, call: str) -> TvmError:
        return _error(_code("NO_DATA_FOUND"), call, f"queue {self.id} is empty")

    def _pop_one(self, ms: int) -> Optional[bytes]:
        """One ``lPopWait`` of at most ``ms`` milliseconds: the record, or
        None if nothing came. An exception a signal handler raises as the
        call returns (Python runs them between steps) does not lose a record
        the call took: the record is returned and the exception kept for the
        next pop."""
        global _pending
        h = self._h.contents
        self._bind(self.record_size, None)
        h.m_lEffect = 0
        try:
            rc = load_library().lPopWait(self._h, self._buf, ms)
            if rc == RC_SUCC:
                return self._buf.raw
        except BaseException as e:
            if h.m_lErrno == 0 and h.m_lEffect == 1:
                _pending = e
                return self._buf.raw
            raise
        code = h.m_lErrno
        if code_name(code) in ("NO_DATA_FOUND", "MQUE_WAIT_TMO"):
            return None
        raise _error(code, "lPopWait")

    # -- leases (a queue created with lease_ms, max_deliveries, dead_letter or max_leases) --

    def pop_lease(self, timeout: Optional[float] = None, wait: bool = True, lease_ms: int = 0) -> Tuple[bytes, Lease]:
        """Takes the oldest record with a lease (``lPopLease``): returns its
        ``record_size`` bytes and the :class:`Lease`. The record is delivered
        again (``deliveries`` raised) unless it is acknowledged
        (:meth:`ack`) before the lease runs out (``lease_ms``; 0: the queue's
        lease time) or this process dies. Waits as :meth:`pop` does (Ctrl-C
        interrupts the wait; the wait looks again every few milliseconds).
        Raises :class:`TvmError` ``LEASE_LIMIT`` when the queue's maximum of
        leases are in flight, ``NOT_SUPPT_OPT`` on a queue without leases,
        ``CONDIT_IS_NIL`` for a ``lease_ms`` over a year (31,536,000,000)."""
        _raise_pending()
        if timeout is not None:
            _check_timeout(timeout)
        if lease_ms < 0:
            raise ValueError("lease_ms is 0 or more")
        lib = load_library()
        lease = Lease()
        deadline = None if timeout is None else time.monotonic() + timeout
        nap = 0.0005
        while True:
            self._bind(self.record_size, None)
            rc = lib.lPopLease(self._h, self._buf, QUE_NOWAIT, lease_ms, ctypes.byref(lease))
            if rc == RC_SUCC:
                return self._buf.raw, lease
            code = self._h.contents.m_lErrno
            if code_name(code) != "NO_DATA_FOUND":
                raise _error(code, "lPopLease")
            if not wait or timeout == 0:
                raise self._empty("lPopLease")
            if deadline is not None and time.monotonic() >= deadline:
                raise _error(_code("MQUE_WAIT_TMO"), "lPopLease", f"nothing came to queue {self.id} within {timeout} s")
            time.sleep(nap)
            nap = min(nap * 2, 0.005)

    def _lease_call(self, call: str, *args) -> None:
        self._bind(self.record_size, None)
        self._check(getattr(load_library(), call)(self._h, *args), call)

    def ack(self, lease: Lease) -> None:
        """Acknowledges a delivery: done and gone (``lAck``). Raises
        ``LEASE_EXPIRED`` if the lease ran out (the record may have gone to
        another consumer) or was already ended, ``LEASE_INVALID`` for a lease
        of another queue or a made-up one."""
        self._lease_call("lAck", ctypes.byref(lease))

    def release(self, lease: Lease, delay_ms: int = 0) -> None:
        """Puts the record back, delivered again ``delay_ms`` from now
        (``lRelease``); at the queue's delivery limit it goes to the
        dead-letter queue instead. Errors: those of :meth:`ack`;
        ``CONDIT_IS_NIL`` for a ``delay_ms`` over a year (31,536,000,000)."""
        if delay_ms < 0:
            raise ValueError("delay_ms is 0 or more")
        self._lease_call("lRelease", ctypes.byref(lease), delay_ms)

    def reject(self, lease: Lease) -> None:
        """Moves the record to the queue's dead-letter queue, or drops it
        without one (``lReject``). Errors: those of :meth:`ack`, and those of
        the push into the dead-letter queue (the lease is then still held)."""
        self._lease_call("lReject", ctypes.byref(lease))

    def extend_lease(self, lease: Lease, lease_ms: int = 0) -> None:
        """The lease now runs out ``lease_ms`` from now (0: the queue's lease
        time); ``lease`` is updated, copies of the old one are stale
        (``lExtendLease``). Errors: those of :meth:`ack`; ``CONDIT_IS_NIL``
        for a ``lease_ms`` over a year (31,536,000,000)."""
        if lease_ms < 0:
            raise ValueError("lease_ms is 0 or more")
        self._lease_call("lExtendLease", ctypes.byref(lease), lease_ms)

    def pop_struct(self, struct: Type[S], timeout: Optional[float] = None, wait: bool = True) -> S:
        """:meth:`pop`, returning an instance of the ``ctypes.Structure`` ``struct``."""
        raw = self.pop(timeout=timeout, wait=wait)
        size = ctypes.sizeof(struct)
        return struct.from_buffer_copy(raw[:size].ljust(size, b"\0"))

    def pop_many(self, max: int, timeout: Optional[float] = 0) -> List[bytes]:
        """Removes up to ``max`` records (``lPopup``: up to 64 with one claim).
        ``timeout=0``: what is there now (:class:`Empty` if nothing).
        ``timeout=T``: waits up to T seconds for ``max`` records and returns
        what came; :class:`Timeout` if none. Ctrl-C interrupts the wait; the
        records already taken are returned, and the next pop raises the
        ``KeyboardInterrupt``."""
        global _pending
        if max < 1:
            raise ValueError("max must be at least 1")
        _raise_pending()
        timeout = _check_timeout(timeout or 0)
        deadline = time.monotonic() + timeout
        records: List[bytes] = []
        try:
            while len(records) < max and _pending is None:
                records += self._popup(max - len(records))
                left = math.ceil(1000 * (deadline - time.monotonic()))
                if len(records) == max or left <= 0 or _pending is not None:
                    break
                one = self._pop_one(min(left, _SLICE_MS))
                if one is not None:
                    records.append(one)
        except BaseException as e:
            if not records:
                raise
            _pending = e
        if records:
            return records
        if timeout == 0:
            raise self._empty("lPopup")
        raise _error(_code("MQUE_WAIT_TMO"), "lPopup", f"nothing came to queue {self.id} within {timeout} s")

    def _popup(self, max: int) -> List[bytes]:
        """What ``lPopup`` takes now, without waiting (up to ``max``)."""
        global _pending
        n = ctypes.c_size_t()
        out = ctypes.c_void_p()
        self._bind(self.record_size, None)
        size = self.record_size
        taken: List[bytes] = []

        def take() -> None:
            # Copies the array the call returned (once, in one piece), then
            # frees it: forgotten before it is freed, so that an interrupt
            # between the two leaks it rather than frees it twice.
            if not taken and out.value:
                taken.append(ctypes.string_at(out.value, n.value * size))
            array = out.value
            if array:
                out.value = None
                _libc.free(array)

        # Everything after the call is inside the try: an interrupt at any
        # step once the call took records is kept for the next pop, and the
        # records are returned.
        records: List[bytes] = []
        try:
            rc = load_library().lPopup(self._h, max, 0, ctypes.byref(n), ctypes.byref(out))
            take()
            records = _split(taken, size)
            code = self._h.contents.m_lErrno
            if rc != RC_SUCC and code_name(code) not in ("NO_DATA_FOUND", "MQUE_WAIT_TMO"):
                raise _error(code, "lPopup")
        except BaseException as e:
            take()
            if not taken:
                raise
            _pending = e
            records = _split(taken, size)
        return records

    def __iter__(self) -> Iterator[bytes]:
        """Pops records until the queue is empty (without waiting)."""
        while True:
            try:
                yield self.pop(wait=False)
            except Empty:
                return

    def __len__(self) -> int:
        """The records queued now (a snapshot)."""
        return self.depth

    def stats(self) -> QueueStats:
        """The queue's counters at one instant (``lQueueStats``): depth,
        pushed, popped, waiters, processes, leases, syncs; see
        :class:`QueueStats`. Others push and pop meanwhile."""
        s = _Stats()
        s.size = ctypes.sizeof(s)
        self._check(load_library().lQueueStats(self._h, self.id, ctypes.byref(s)), "lQueueStats")
        return QueueStats(**{name: getattr(s, name) for name, _ in _Stats._fields_ if name != "size"})

    @property
    def depth(self) -> int:
        """The records queued now, a property (a snapshot: others push and pop meanwhile)."""
        d = ctypes.c_size_t()
        self._check(load_library().lQueueInfo(self._h, self.id, None, None, ctypes.byref(d)), "lQueueInfo")
        return d.value

    def close(self) -> None:
        """Frees the handle (the queue stays attached to the process)."""
        if getattr(self, "_h", None):
            load_library().vCloneFree(self._h)
            self._h = None

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"tvmq.Queue({self.id}, record_size={self.record_size}, capacity={self.capacity})"


def _check_timeout(timeout: float) -> float:
    """A timeout in seconds, checked: a number >= 0."""
    if timeout < 0 or math.isnan(timeout):
        raise ValueError("timeout must be a number of seconds >= 0")
    return timeout
