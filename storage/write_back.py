"""Write-back of written pages to the disk: the Linux calls Python's ``os`` does not offer.

:func:`syncfs` writes back a whole file system (the log manager's group commit at shutdown);
:func:`start_write_back` starts the write-back of a file range without waiting for it
(``sync_file_range(2)`` with ``SYNC_FILE_RANGE_WRITE``), so that a later ``fsync`` of the file
finds little left to write: a move's copy (:mod:`storage.log_move`) starts it for each append,
and its flush before the swap waits only for the tail. Both are called from worker threads.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["start_write_back", "syncfs"]

_libc = ctypes.CDLL(None, use_errno=True)

#: ``sync_file_range``'s flag: start the write-back of the range's dirty pages, do not wait.
_SYNC_FILE_RANGE_WRITE = 2

_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)


def syncfs(fd: int) -> None:
    """Write back the whole file system holding `fd` and raise the ``OSError`` of any
    write-back failure on it since `fd` was opened (Linux 5.8+; elsewhere ``sync()``, which
    reports nothing)."""
    sync = getattr(_libc, "syncfs", None)
    if sync is None:
        os.sync()
        return
    if sync(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"syncfs: {os.strerror(code)}")


def start_write_back(fd: int, offset: int, length: int) -> None:
    """Start writing the dirty pages of `length` bytes from `offset` of the file `fd` to the
    disk, without waiting (nothing where ``sync_file_range`` is missing). Only a head start:
    an error is left for the ``fsync`` that makes the range durable to report."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)
