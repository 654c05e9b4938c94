#!/usr/bin/env python3
"""Using libtvm from Python through ctypes: create, push, pop, drop.

    python3 examples/python/tvmq_ctypes.py target/release/libtvm.so

Uses $TVMDBD (default /dev/shm/tvmq-<uid>) like every tvmq program.
"""
import ctypes
import sys

TABLE = ctypes.c_uint
RC_SUCC, QUE_NOWAIT, NO_DATA_FOUND = 0, 1, 24


class SATvm(ctypes.Structure):
    # The public members of tvm.h's SATvm, then its private ones.
    _fields_ = [
        ("lSize", ctypes.c_size_t),
        ("tblName", TABLE),
        ("m_lErrno", ctypes.c_uint),
        ("m_lEffect", ctypes.c_size_t),
        ("pstVoid", ctypes.c_void_p),
        ("m_bHold", ctypes.c_bool),
        ("m_pPriv", ctypes.c_void_p),
    ]


def main(path):
    lib = ctypes.CDLL(path)
    lib.pCloneSATvm.restype = ctypes.POINTER(SATvm)
    lib.sGetTError.restype = ctypes.c_char_p
    lib.sGetTError.argtypes = [ctypes.c_long]
    for name in ("lCircleQueue", "lDropTable", "lPush", "lPop"):
        getattr(lib, name).restype = ctypes.c_long
    lib.lCircleQueue.argtypes = [ctypes.POINTER(SATvm), TABLE, ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.c_char_p, ctypes.c_char_p]
    lib.lDropTable.argtypes = [ctypes.POINTER(SATvm), TABLE]
    lib.lPush.argtypes = [ctypes.POINTER(SATvm)]
    lib.lPop.argtypes = [ctypes.POINTER(SATvm), ctypes.c_void_p, ctypes.c_uint]

    h = lib.pCloneSATvm()

    def check(rc, what):
        if rc != RC_SUCC:
            code = h.contents.m_lErrno
            raise RuntimeError(f"{what}: ({code}) {lib.sGetTError(code).decode()}")

    queue, size = 42, 32
    lib.lDropTable(h, queue)  # a leftover from an earlier run, if any
    check(lib.lCircleQueue(h, queue, 100, size, b"python", b""), "lCircleQueue")
    buf = ctypes.create_string_buffer(size)
    h.contents.lSize, h.contents.tblName = size, queue
    h.contents.pstVoid = ctypes.cast(buf, ctypes.c_void_p)
    for i in range(10):
        buf.value = f"message {i}".encode()
        check(lib.lPush(h), "lPush")
    got = []
    while lib.lPop(h, buf, QUE_NOWAIT) == RC_SUCC:
        got.append(buf.value.decode())
    assert h.contents.m_lErrno == NO_DATA_FOUND, h.contents.m_lErrno
    assert got == [f"message {i}" for i in range(10)], got
    check(lib.lDropTable(h, queue), "lDropTable")
    lib.vCloneFree(h)
    print(f"ok: {len(got)} records through libtvm from Python, in order")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/release/libtvm.so")
