"""The aborted-transaction index: one segment's ``.txnindex`` (Kafka's TransactionIndex).

The file holds one 34-byte big-endian entry per transaction aborted by a marker in the
segment, in marker order: int16 version (0), int64 producer id, int64 first offset (of the
transaction), int64 last offset (of its ABORT marker), int64 last stable offset (the LSO once
the abort was written) -- Kafka's ``AbortedTxn`` layout, so ``kafka.tools.DumpLogSegments``
reads it. The file exists only once a segment has an entry, as in Kafka.

This module owns that file and a lazily loaded in-memory copy of its entries (dropped with
:meth:`TransactionIndex.unload`, as the other indexes of an inactive segment are), and the
search a read_committed fetch makes (:meth:`TransactionIndex.collect`, Kafka's
``collectAbortedTxns``). A trailing partial entry (a write cut short by a crash) is ignored
and overwritten by the next append. It must not read the ``.log``: the log and recovery hand
it the entries.
"""

from __future__ import annotations

import contextlib
import os
import struct
from bisect import bisect_left
from pathlib import Path
from typing import NamedTuple

from storage.errors import CorruptIndexError

__all__ = ["ENTRY_SIZE", "AbortedTxn", "TransactionIndex"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    """One aborted transaction, as the index stores it and a fetch reports it."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(VERSION, *self)


class TransactionIndex:
    """One ``.txnindex`` file; see the module doc."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # None: not loaded

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, oldest first (loaded on first use; do not modify)."""
        if self._entries is None:
            self._entries = self._load()
        return self._entries

    def _load(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        entries = []
        for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
            version, *fields = _ENTRY.unpack_from(data, pos)
            if version > VERSION:
                raise CorruptIndexError(
                    f"unexpected aborted transaction version {version} in {self.path}"
                )
            entries.append(AbortedTxn(*fields))
        return entries

    def append(self, txn: AbortedTxn) -> None:
        """Write `txn` after the last entry. Raises ``ValueError`` unless its last offset is
        above the last entry's (Kafka's rule), ``OSError`` if the write fails (the entry is
        then not kept)."""
        entries = self.entries
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(
                f"aborted transaction at {txn.last_offset} does not follow the last one at "
                f"{entries[-1].last_offset} in {self.path}"
            )
        data = txn.encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            pos = len(entries) * ENTRY_SIZE
            while data:
                written = os.pwrite(fd, data, pos)
                data = data[written:]
                pos += written
        finally:
            os.close(fd)
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or above `offset`."""
        size = self.begin_truncation(offset)
        if size is not None:
            self._cut(size)

    def begin_truncation(self, offset: int) -> int | None:
        """`truncate_to` in memory only: the size to cut the file to (None: nothing to cut),
        for the caller to cut, perhaps in a worker thread (a missing file needs no cut)."""
        entries = self.entries
        keep = bisect_left(entries, offset, key=lambda t: t.last_offset)
        if keep == len(entries):
            return None
        del entries[keep:]
        return keep * ENTRY_SIZE

    def reset(self) -> None:
        """Remove every entry (recovery rebuilds them)."""
        self._entries = []
        self._cut(0)

    def _cut(self, size: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.truncate(self.path, size)

    def collect(self, fetch_offset: int, upper_bound: int, out: list[AbortedTxn]) -> bool:
        """Add to `out` the transactions overlapping ``[fetch_offset, upper_bound)``; True when
        the search is complete (an entry's LSO reached `upper_bound`: every transaction
        started below it has ended), False when it must go on into the next segment. Entries
        whose marker is below `fetch_offset` are skipped by bisection: their LSO cannot reach
        the bound."""
        entries = self.entries
        for i in range(
            bisect_left(entries, fetch_offset, key=lambda t: t.last_offset), len(entries)
        ):
            txn = entries[i]
            if txn.first_offset < upper_bound:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return True
        return False

    def unload(self) -> None:
        """Drop the in-memory entries (they reload on demand)."""
        self._entries = None

    def rename(self, new_path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, new_path)
        self.path = new_path
