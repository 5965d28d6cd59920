"""The leader epoch cache: which leader epoch began at which offset, and its checkpoint file.

This module owns the ordered ``(epoch, start_offset)`` entries of one partition (Kafka's
``LeaderEpochFileCache``) and their ``leader-epoch-checkpoint`` file. It answers
OffsetsForLeaderEpoch (:meth:`LeaderEpochCache.end_offset_for`), follows the log's
truncations from the end and from the start, and finds the epoch of an offset for ListOffsets.

Changes count as versions; the file is written by :meth:`LeaderEpochCache.flush` (on close) or
by a :class:`CheckpointWrite` made by :meth:`LeaderEpochCache.begin_write` (a flush's, run in
its worker thread), before the partition log advances its recovery point. That is safe because
loading a log re-derives the entries of every unflushed segment from its batches and trims the
cache to the loaded log's range. Writes of one cache take turns (a lock), and one never replaces
a later version in the file, so a flush on the log's thread and one in a worker may overlap. It
must not read segments itself.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

from storage.checkpoints import CorruptCheckpointError, read_checkpoint, write_checkpoint

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "CheckpointWrite",
    "EpochEntry",
    "LeaderEpochCache",
]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def _parse(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError("expected 2 fields")
    return EpochEntry(int(fields[0]), int(fields[1]))


class LeaderEpochCache:
    """Entries sorted by epoch, with strictly increasing start offsets."""

    def __init__(self, path: Path | None, entries: list[EpochEntry] | None = None) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for e in entries or ():
            self._epochs.append(e.epoch)
            self._offsets.append(e.start_offset)
        #: Changes made, and the change the file holds (read and set under `_write_lock`).
        self._version = 0
        self._written = 0
        self._write_lock = threading.Lock()

    @classmethod
    def load(cls, path: Path) -> LeaderEpochCache:
        """Read `path` (a missing or malformed file gives an empty, dirty cache)."""
        try:
            entries = read_checkpoint(path, _parse)
        except CorruptCheckpointError:
            cache = cls(path)
            cache._changed()
            return cache
        cache = cls(path, sorted(entries or (), key=lambda e: e.epoch))
        return cache

    # ---- reading ---------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets, strict=True)]

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[-1], self._offsets[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return EpochEntry(self._epochs[0], self._offsets[0]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at `offset` was written in (None before the first entry)."""
        i = bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(epoch, end_offset)`` -- the largest epoch <= the requested
        one and the start offset of the next epoch (the log end offset for the latest epoch);
        ``(-1, -1)`` if unknown. Kafka's ``endOffsetFor`` semantics."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    # ---- changing --------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; entries it contradicts (a later or
        equal epoch, or a start offset at or after this one) are dropped. Returns whether the
        cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and (epoch == self._epochs[-1] and start_offset >= self._offsets[-1]):
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._changed()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated to it)."""
        if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
            return
        keep = bisect_left(self._offsets, end_offset)
        del self._epochs[keep:]
        del self._offsets[keep:]
        self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop entries wholly before it and move the
        last of those to start there."""
        i = bisect_right(self._offsets, start_offset) - 1
        if i < 0:
            return
        epoch = self._epochs[i]
        if i == 0 and self._offsets[0] == start_offset:
            return
        del self._epochs[: i + 1]
        del self._offsets[: i + 1]
        self._epochs.insert(0, epoch)
        self._offsets.insert(0, start_offset)
        self._changed()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._offsets.clear()
            self._changed()

    def _changed(self) -> None:
        self._version += 1

    @property
    def dirty(self) -> bool:
        """Changed since the file was last written (or a write of the change was begun)."""
        return self._version > self._written

    def begin_write(self) -> CheckpointWrite | None:
        """The checkpoint file's write of the entries as they are now (copied), for any thread
        to run; None if the file holds them already."""
        if self.path is None or not self.dirty:
            return None
        lines = [f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)]
        return CheckpointWrite(self, self.path, lines, self._version)

    def flush(self, *, fsync: bool = True) -> bool:
        """Write the checkpoint file here if anything changed since the last write; return
        whether it was written."""
        write = self.begin_write()
        return write is not None and write.run(fsync=fsync)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries})"


class CheckpointWrite:
    """One write of a cache's ``leader-epoch-checkpoint`` (made by
    :meth:`LeaderEpochCache.begin_write`): :meth:`run` on any thread writes it unless the file
    holds this version or a later one already. A write that fails leaves the cache dirty: the
    next flush writes it again."""

    __slots__ = ("cache", "path", "lines", "version")

    def __init__(self, cache: LeaderEpochCache, path: Path, lines: list[str], version: int) -> None:
        self.cache = cache
        self.path = path
        self.lines = lines
        self.version = version

    def run(self, *, fsync: bool) -> bool:
        """Write (raising the ``OSError`` of a failure); whether this call wrote the file."""
        cache = self.cache
        with cache._write_lock:
            if self.version <= cache._written:
                return False
            write_checkpoint(self.path, self.lines, fsync=fsync)
            cache._written = self.version
        return True
