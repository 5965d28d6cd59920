"""The values the partition log hands back: AppendInfo, FileSlice, ReadResult, OffsetAndTimestamp.

This module owns the shapes of append and read results and the pin/release contract of file
slices; it must not perform appends or reads itself.

A :class:`ReadResult` holds its segment files *pinned* (see :mod:`storage.file_handles`): their
descriptors stay open, even if the segment is deleted meanwhile, until :meth:`ReadResult.release`
(or the end of a ``with`` block). Pass ``slice.fd``, ``slice.position`` and ``slice.length`` to
``os.sendfile`` -- across as many non-blocking calls as the socket needs -- then release. A
slice may end inside a batch (Kafka sends partial trailing batches too; clients drop them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from storage.file_handles import FileHandle
from storage.txn_index import AbortedTxn

__all__ = ["AppendInfo", "FileSlice", "OffsetAndTimestamp", "ReadResult"]


class AppendInfo(NamedTuple):
    """What an append wrote (offsets are -1 when a follower append held no whole batch)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    #: The LogAppendTime stamped on the batches, or -1 for CreateTime topics.
    log_append_time: int
    log_start_offset: int
    records_count: int
    valid_bytes: int
    #: The batch repeated one of its producer's last five (nothing was written; the offsets
    #: are the original batch's, as Kafka answers a retried idempotent batch).
    duplicate: bool = False


class OffsetAndTimestamp(NamedTuple):
    """A ListOffsets answer: offset, its timestamp (-1 if none) and leader epoch (or None)."""

    offset: int
    timestamp: int
    leader_epoch: int | None


class FileSlice:
    """``length`` bytes at ``position`` of one segment file, pinned open until released."""

    __slots__ = ("_handle", "fd", "position", "length", "_released")

    def __init__(self, handle: FileHandle, position: int, length: int) -> None:
        self._handle = handle
        self.fd = handle.acquire()
        self.position = position
        self.length = length
        self._released = False

    @property
    def path(self) -> Path:
        return self._handle.path

    def read(self) -> bytes:
        """The slice's bytes (a copy; for tests and for paths that cannot sendfile)."""
        if self._released:
            raise ValueError("slice already released")
        return os.pread(self.fd, self.length, self.position)

    def release(self) -> None:
        """Unpin (idempotent); the descriptor may be closed afterwards."""
        if not self._released:
            self._released = True
            self._handle.release()

    def __repr__(self) -> str:
        return (
            f"FileSlice({self._handle.path.name}, position={self.position}, length={self.length})"
        )


class ReadResult:
    """The slices of one read, in log order, and what they start with."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = ("aborted_transactions", "first_batch_offset", "size", "slices")

    def __init__(self, aborted_transactions: list[AbortedTxn] | None = None) -> None:
        self.slices: list[FileSlice] = []
        #: Base offset of the first batch in the slices (-1 if empty).
        self.first_batch_offset = -1
        #: Total bytes over all slices.
        self.size = 0
        #: The aborted transactions overlapping the slices, when the read asked for them (a
        #: read_committed fetch), from the segments' transaction indexes; else None.
        self.aborted_transactions = aborted_transactions

    def read(self) -> bytes:
        """All slices' bytes, concatenated."""
        return b"".join(s.read() for s in self.slices)

    def release(self) -> None:
        for s in self.slices:
            s.release()

    def __enter__(self) -> ReadResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
