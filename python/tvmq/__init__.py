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
name and the message; an empty queue is :class:`Empty`, a full one
:class:`Full`, a timeout :class:`Timeout`, a missing queue :class:`NotFound`.

A ``Queue`` object owns one libtvm handle: use it from one thread at a time
(give each thread its own ``Queue``; the queue itself is shared safely).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Type, TypeVar, Union

__all__ = [
    "Queue",
    "TvmError",
    "Empty",
    "Full",
    "Timeout",
    "NotFound",
    "Exists",
    "load_library",
    "RC_SUCC",
    "QUE_NORMAL",
    "QUE_NOWAIT",
]

RC_SUCC = 0
QUE_NORMAL = 0
QUE_NOWAIT = 1
_FIELD_CHAR, _FIELD_LONG, _FIELD_DOUB = 1, 2, 4

# The codes the exceptions below stand for (the STVM numbers of tvm.h).
_CODES = {
    "DATA_SPC_FULL": 4,
    "NO_DATA_FOUND": 24,
    "TBL_NOT_FOUND": 44,
    "TBL_ARD_EXIST": 87,
    "MQUE_WAIT_TMO": 97,
}

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


class TvmError(Exception):
    """A libtvm call failed: ``code`` is the tvm code, ``name`` its macro name."""

    def __init__(self, code: int, name: str, message: str, call: str = ""):
        self.code = code
        self.name = name
        self.message = message
        self.call = call
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


_BY_CODE = {
    _CODES["NO_DATA_FOUND"]: Empty,
    _CODES["DATA_SPC_FULL"]: Full,
    _CODES["MQUE_WAIT_TMO"]: Timeout,
    _CODES["TBL_NOT_FOUND"]: NotFound,
    _CODES["TBL_ARD_EXIST"]: Exists,
}

_lib: Optional[ctypes.CDLL] = None


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
    long_, size_t, uint = ctypes.c_long, ctypes.c_size_t, ctypes.c_uint
    sig = {
        "pCloneSATvm": (ctypes.c_void_p, []),
        "vCloneFree": (None, [_H]),
        "sGetTError": (ctypes.c_char_p, [long_]),
        "lAttchTable": (long_, [_H, uint]),
        "lCircleQueue": (long_, [_H, uint, size_t, size_t, ctypes.c_char_p, ctypes.c_char_p]),
        "lTableQueue": (long_, [_H, uint, size_t, _DEF]),
        "lTvmDefQueue": (long_, [uint, ctypes.c_char_p, ctypes.c_char_p, size_t]),
        "lTvmDefField": (long_, [ctypes.c_char_p, size_t, size_t, long_]),
        "lDropTable": (long_, [_H, uint]),
        "lPush": (long_, [_H]),
        "lPushs": (long_, [_H, ctypes.POINTER(size_t), ctypes.POINTER(ctypes.c_void_p)]),
        "lPop": (long_, [_H, ctypes.c_void_p, uint]),
        "lPopup": (long_, [_H, size_t, ctypes.c_long, ctypes.POINTER(size_t), ctypes.POINTER(ctypes.c_void_p)]),
        "lQueueInfo": (long_, [_H, uint, ctypes.POINTER(size_t), ctypes.POINTER(size_t), ctypes.POINTER(size_t)]),
        "lGetTErrno": (long_, []),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    _lib = lib
    return lib


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None


def _error(code: int, call: str) -> TvmError:
    lib = load_library()
    message = (lib.sGetTError(code) or b"unknown error").decode("utf-8", "replace")
    names = {v: k for k, v in _CODES.items()}
    return _BY_CODE.get(code, TvmError)(code, names.get(code, f"code {code}"), message, call)


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
        self._check(lib.lAttchTable(self._h, self.id), "lAttchTable")
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
    def create(cls, id: int, rows: int, record_size: int, name: Optional[str] = None) -> "Queue":
        """Creates queue ``id`` holding exactly ``rows`` records of up to
        ``record_size`` bytes (``lCircleQueue``), and opens it. Raises
        :class:`Exists` if it exists."""
        lib = load_library()
        h = ctypes.cast(lib.pCloneSATvm(), _H)
        try:
            nm = (name if name is not None else str(id)).encode()
            if lib.lCircleQueue(h, id, rows, record_size, nm, None) != RC_SUCC:
                raise _error(h.contents.m_lErrno, "lCircleQueue")
        finally:
            lib.vCloneFree(h)
        return cls(id)

    @classmethod
    def create_for(cls, id: int, rows: int, struct: Type[ctypes.Structure], name: Optional[str] = None) -> "Queue":
        """Creates queue ``id`` for records of the ``ctypes.Structure``
        ``struct`` (``lTableQueue``): the record size is ``sizeof(struct)``
        and its fields are stored with the queue (``tvmq peek`` decodes
        records by them: arrays of chars as text, integers, doubles)."""
        lib = load_library()
        qname = (name or struct.__name__).encode()
        failure: List[BaseException] = []

        def define(table: int) -> int:
            try:
                if lib.lTvmDefQueue(table, b"", qname, ctypes.sizeof(struct)) != RC_SUCC:
                    return -1
                for fname, ctype, *_ in struct._fields_:
                    member = getattr(struct, fname)
                    if lib.lTvmDefField(fname.encode(), member.offset, member.size, _field_kind(ctype)) != RC_SUCC:
                        return -1
                return RC_SUCC
            except BaseException as e:  # never let an exception cross into C
                failure.append(e)
                return -1

        callback = _DEF(define)
        h = ctypes.cast(lib.pCloneSATvm(), _H)
        try:
            rc = lib.lTableQueue(h, id, rows, callback)
            if failure:
                raise failure[0]
            if rc != RC_SUCC:
                raise _error(h.contents.m_lErrno, "lTableQueue")
        finally:
            lib.vCloneFree(h)
        return cls(id)

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

    # -- records -------------------------------------------------------------

    def _check(self, rc: int, call: str) -> None:
        if rc != RC_SUCC:
            raise _error(self._h.contents.m_lErrno, call)

    def _bind(self, size: int, buf) -> None:
        h = self._h.contents
        h.lSize = size
        h.tblName = self.id
        h.pstVoid = ctypes.cast(buf, ctypes.c_void_p).value if buf is not None else None

    def push(self, record: Record) -> None:
        """Appends one record: ``bytes`` of 1 to ``record_size`` bytes, or a
        ``ctypes.Structure``. Never waits: a full queue raises :class:`Full`."""
        data = bytes(record)
        buf = ctypes.create_string_buffer(data, len(data))
        self._bind(len(data), buf)
        self._check(load_library().lPush(self._h), "lPush")

    def push_many(self, records: Sequence[Record]) -> int:
        """Pushes records in one call (``lPushs``), each padded with zero bytes
        to the longest; returns how many went in. If the queue fills, the
        records before stay pushed and :class:`Full` is raised with
        ``pushed`` set on it."""
        if not records:
            return 0
        datas = [bytes(r) for r in records]
        each = max(len(d) for d in datas)
        block = ctypes.create_string_buffer(b"".join(d.ljust(each, b"\0") for d in datas), each * len(datas))
        n = ctypes.c_size_t(len(datas))
        p = ctypes.c_void_p(ctypes.addressof(block))
        self._bind(each, None)
        rc = load_library().lPushs(self._h, ctypes.byref(n), ctypes.byref(p))
        if rc != RC_SUCC:
            e = _error(self._h.contents.m_lErrno, "lPushs")
            e.pushed = n.value  # type: ignore[attr-defined]
            raise e
        return n.value

    def pop(self, timeout: Optional[float] = None, wait: bool = True) -> bytes:
        """Removes the oldest record and returns its ``record_size`` bytes (a
        shorter record is followed by zero bytes). ``wait=False``: raises
        :class:`Empty` at once when the queue is empty. Otherwise waits for a
        record, forever (``timeout=None``) or up to ``timeout`` seconds,
        rounded up to whole seconds as the C API's ``lPopup`` counts them
        (then :class:`Timeout`)."""
        if not wait or timeout is not None:
            records = self.pop_many(1, timeout=timeout if wait else 0)
            return records[0]
        self._bind(self.record_size, None)
        self._check(load_library().lPop(self._h, self._buf, QUE_NORMAL), "lPop")
        return self._buf.raw

    def pop_struct(self, struct: Type[S], timeout: Optional[float] = None, wait: bool = True) -> S:
        """:meth:`pop`, returning an instance of the ``ctypes.Structure`` ``struct``."""
        raw = self.pop(timeout=timeout, wait=wait)
        size = ctypes.sizeof(struct)
        return struct.from_buffer_copy(raw[:size].ljust(size, b"\0"))

    def pop_many(self, max: int, timeout: Optional[float] = 0) -> List[bytes]:
        """Removes up to ``max`` records in one call (``lPopup``).
        ``timeout=0``: what is there now (:class:`Empty` if nothing).
        ``timeout=T``: waits up to T seconds (rounded up to whole seconds) for
        ``max`` records and returns what came; :class:`Timeout` if none."""
        if max < 1:
            raise ValueError("max must be at least 1")
        secs = 0 if not timeout else max_secs(timeout)
        n = ctypes.c_size_t()
        out = ctypes.c_void_p()
        self._bind(self.record_size, None)
        rc = load_library().lPopup(self._h, max, secs, ctypes.byref(n), ctypes.byref(out))
        try:
            records = [ctypes.string_at(out.value + i * self.record_size, self.record_size) for i in range(n.value)]
        finally:
            if out.value:
                _libc.free(out.value)
        code = self._h.contents.m_lErrno
        if rc != RC_SUCC and not (records and code == _CODES["MQUE_WAIT_TMO"]):
            if code == _CODES["NO_DATA_FOUND"] and secs > 0:
                code = _CODES["MQUE_WAIT_TMO"]
            raise _error(code, "lPopup")
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

    @property
    def depth(self) -> int:
        """The records queued now (a snapshot: others push and pop meanwhile)."""
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


def max_secs(timeout: float) -> int:
    """Seconds for lPopup: a positive timeout rounded up to whole seconds."""
    if timeout < 0 or math.isnan(timeout):
        raise ValueError("timeout must be a number of seconds >= 0")
    return max(1, math.ceil(timeout))
