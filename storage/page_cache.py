"""Whether a file range is in the page cache, and reading a range into it.

Records leave the broker straight from the page cache (`os.sendfile`, or `os.pread` on TLS),
and a range that is not there makes the sending thread wait for the disk: for the event loop's
thread, every connection waits with it (a consumer catching up on old records from a slow disk
would stall the producers and the followers). So the sender asks `cached` first and has a
worker thread `load` a range that is not, then sends from the cache. `cached` is one
`cachestat(2)` system call (Linux 6.5+; ~1 µs with its ctypes call), or `mincore(2)` over a
short-lived mapping of the range on older kernels; where neither is available every range
counts as cached (the sender then reads on its own thread, as before).

Kafka reads in its network threads (`FileChannel.transferTo`), several of them, so a cold read
holds up only the connections of one thread. This module owns only the question and the
read; it decides nothing about what is sent.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

__all__ = ["cached", "load"]

_PAGE = mmap.PAGESIZE
#: cachestat(2)'s system call number (the same on x86-64 and arm64).
_CACHESTAT = 451
#: Bytes `load` reads per call.
_LOAD_PIECE = 1 << 20


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [
        ("nr_cache", ctypes.c_uint64),
        ("nr_dirty", ctypes.c_uint64),
        ("nr_writeback", ctypes.c_uint64),
        ("nr_evicted", ctypes.c_uint64),
        ("nr_recently_evicted", ctypes.c_uint64),
    ]


try:
    _libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - not a libc platform
    _libc = None
_range, _stat = _Range(), _Stat()
_range_ref, _stat_ref = ctypes.byref(_range), ctypes.byref(_stat)
#: "cachestat", "mincore", or None when neither works here.
mechanism: str | None = "cachestat" if _libc is not None else None


def _pages(position: int, length: int) -> int:
    first = position // _PAGE
    return (position + length + _PAGE - 1) // _PAGE - first


def _cachestat(fd: int, position: int, length: int) -> bool | None:
    assert _libc is not None
    _range.off, _range.len = position, length
    if _libc.syscall(_CACHESTAT, fd, _range_ref, _stat_ref, 0) == 0:
        return bool(_stat.nr_cache >= _pages(position, length))
    return None


def _mincore(fd: int, position: int, length: int) -> bool | None:
    assert _libc is not None
    start = position - position % _PAGE
    size = position + length - start
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
    if address is None or address == ctypes.c_void_p(-1).value:
        return None
    try:
        pages = _pages(position, length)
        vector = (ctypes.c_ubyte * pages)()
        if _libc.mincore(ctypes.c_void_p(address), size, vector) != 0:
            return None
        return all(page & 1 for page in vector)
    finally:
        _libc.munmap(ctypes.c_void_p(address), size)


if _libc is not None:
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def cached(fd: int, position: int, length: int) -> bool:
    """Whether every page of `length` bytes at `position` of `fd` is in the page cache now
    (True where this cannot be told)."""
    global mechanism
    if length <= 0 or mechanism is None:
        return True
    if mechanism == "cachestat":
        answer = _cachestat(fd, position, length)
        if answer is not None:
            return answer
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):
            return True  # a bad descriptor or range: the send itself will say
        mechanism = "mincore"  # a kernel before 6.5 (or a filter refusing the call)
    answer = _mincore(fd, position, length)
    if answer is None:
        if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):
            mechanism = None
        return True
    return answer


def load(fd: int, position: int, length: int) -> None:
    """Read `length` bytes at `position` of `fd` into the page cache (blocking: for a worker
    thread). Stops early at the file's end."""
    buffer = memoryview(bytearray(min(length, _LOAD_PIECE)))
    end = position + length
    while position < end:
        read = os.preadv(fd, [buffer[: end - position]], position)
        if not read:
            return
        position += read
