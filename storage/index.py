"""OffsetIndex and TimeIndex: one segment's sparse index files, in Kafka's exact formats.

``<base>.index`` holds 8-byte entries (int32 offset relative to the segment's base offset,
int32 byte position in the ``.log``); ``<base>.timeindex`` holds 12-byte entries (int64
timestamp, int32 relative offset). Both are big-endian, sorted, and, while the segment is
active, preallocated to ``segment.index.bytes`` (rounded down to whole entries) and trimmed to
their entries when the segment rolls or closes -- as Kafka lays them out, so Kafka's tools read
them.

This module owns one index file each: its in-memory copy (two ``array`` columns searched with
``bisect``, i.e. no file access per lookup), which entries have reached the file, and the
file's size. Entries reach the file with ``persist``: an active segment's first entries at
once and the next ones within a second (the segment and the log manager call it), so the file
holds them much as a running Kafka's memory-mapped index does and Kafka's DumpLogSegments reads
them without a mismatch; the others on flush, roll and close. Entries are not fsynced until a
flush: after a crash recovery rebuilds them, as Kafka's.
Writes go through a descriptor from the segment's :class:`~storage.file_handles.FileHandles`
pool, so open files stay bounded. Inactive indexes are loaded lazily and may be dropped
(``unload``) to bound memory. It must not read the ``.log``.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from itertools import islice
from pathlib import Path

from storage.errors import CorruptIndexError
from storage.file_handles import FileHandles, create_file

__all__ = ["OffsetEntries", "OffsetIndex", "TimeEntries", "TimeIndex"]

_LITTLE = sys.byteorder == "little"
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_NO_TIMESTAMP = -1
#: An offset index file's entries as read: relative offsets, positions, the file's size.
OffsetEntries = tuple["array[int]", "array[int]", int]
#: A time index file's entries as read: timestamps, relative offsets, the file's size.
TimeEntries = tuple["array[int]", "array[int]", int]


def _entries_before_zeros(data: bytes, entry_size: int) -> int:
    """How many entries `data` holds before the zero entries a preallocated file ends with
    after a crash (all of them when it has none)."""
    end = len(data.rstrip(b"\0"))
    return -(-end // entry_size)


class _IndexFile:
    """The file side shared by both indexes: path, base offset, sizes, persistence."""

    ENTRY_SIZE = 0

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int,
        handles: FileHandles | None = None,
    ) -> None:
        self.path = path
        #: Writes go through this pool's descriptor (None: opened for each write).
        self._handle = handles.handle(path) if handles is not None else None
        self.base_offset = base_offset
        self.max_entries = max_index_size // self.ENTRY_SIZE
        self.loaded = False
        self._persisted = 0  # leading entries known to be in the file
        self._file_size: int | None = None  # None: unknown
        self._cut_needed = False  # entries were removed: cut the file at the next persist
        self._clear()

    # ---- file helpers ----------------------------------------------------------------------

    def _read_file(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CorruptIndexError(f"index file {self.path} does not exist") from None
        if len(data) % self.ENTRY_SIZE:
            raise CorruptIndexError(
                f"index file {self.path} is corrupt: {len(data)} bytes is not a multiple of "
                f"{self.ENTRY_SIZE}"
            )
        return data

    def exists(self) -> bool:
        return self.path.exists()

    @classmethod
    def full_size(cls, max_index_size: int) -> int:
        """The size of a preallocated file: ``segment.index.bytes`` in whole entries."""
        return max_index_size // cls.ENTRY_SIZE * cls.ENTRY_SIZE

    def create(self, preallocate: bool) -> None:
        """Create an empty index file, preallocated to its maximum size if asked."""
        size = self.max_entries * self.ENTRY_SIZE if preallocate else 0
        create_file(self.path, size)
        self.start_empty(size)

    def start_empty(self, file_size: int) -> None:
        """Hold no entry, in a file just made empty of `file_size` bytes (created, or
        prepared ahead and renamed to this index's name)."""
        self._file_size = file_size
        self._clear()
        self.loaded = True
        self._persisted = 0

    def _encode(self, start: int) -> bytes:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError

    @property
    def entries(self) -> int:
        raise NotImplementedError

    def persist(self, *, fsync: bool = False, size: int | None = None) -> None:
        """Write the entries not yet in the file; then set the file's length to `size`
        bytes if given (preallocation or trimming); fsync if asked."""
        start = self._persisted
        n = self.entries if self.loaded else start
        if (
            start >= n
            and (size is None or size == self._file_size)
            and not fsync
            and not self._cut_needed
        ):
            return
        fd, pooled = self._open()
        try:
            if self._cut_needed:
                os.ftruncate(fd, start * self.ENTRY_SIZE)
                self._file_size = start * self.ENTRY_SIZE
                self._cut_needed = False
            if start < n:
                data = self._encode(start)
                pos = start * self.ENTRY_SIZE
                view = memoryview(data)
                while view:
                    written = os.pwrite(fd, view, pos)
                    view = view[written:]
                    pos += written
                self._persisted = n
            if size is not None and size != self._file_size:
                os.ftruncate(fd, max(size, n * self.ENTRY_SIZE))
                self._file_size = max(size, n * self.ENTRY_SIZE)
            if fsync:
                os.fsync(fd)
        finally:
            if pooled:
                assert self._handle is not None
                self._handle.release()
            else:
                os.close(fd)

    def _open(self) -> tuple[int, bool]:
        """A descriptor to write with, and whether it is the pool's (to release, not close);
        the file is created if it is missing (indexes rebuilt from scratch)."""
        if self._handle is not None:
            try:
                return self._handle.acquire(), True
            except FileNotFoundError:
                pass
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644), False

    @property
    def written(self) -> int:
        """How many entries are in the file."""
        return self._persisted

    @property
    def unwritten(self) -> bool:
        """Entries are in memory that are not in the file yet."""
        return self.loaded and self._persisted < self.entries

    def close(self, into: list[int] | None = None) -> None:
        """Give the pool's descriptor back (the segment is closing); with `into`, see
        :meth:`FileHandle.detach <storage.file_handles.FileHandle.detach>`."""
        if self._handle is not None:
            self._handle.detach(into)

    def trim(self) -> None:
        """Persist and cut the file to exactly its entries (a segment becoming inactive)."""
        if not self.loaded:
            self.load()
        self.persist(size=self.entries * self.ENTRY_SIZE)

    def defer_trim(self) -> tuple[Path, int]:
        """:meth:`trim` but the cut: the entries are written, and the file (counted as cut
        from now on) and its size returned for the caller to cut (a worker thread:
        :class:`~storage.chore.SegmentTrims`) before it changes size again here."""
        if not self.loaded:
            self.load()
        self.persist()
        self._file_size = size = self.entries * self.ENTRY_SIZE
        return self.path, size

    def preallocate(self) -> None:
        """Persist and grow the file to ``segment.index.bytes`` (a segment becoming active)."""
        if not self.loaded:
            self.load()
        self.persist(size=self.max_entries * self.ENTRY_SIZE)

    def unload(self) -> None:
        """Drop the in-memory entries if they are all in the file (they reload on demand)."""
        if self.loaded and self._persisted == self.entries:
            self._clear()
            self.loaded = False

    def rename(self, new_path: Path) -> None:
        if self.path.exists():
            os.rename(self.path, new_path)
        self.moved(new_path)

    def moved(self, new_path: Path) -> None:
        """The file is (or is about to be) `new_path`: an open descriptor stays valid."""
        self.path = new_path
        if self._handle is not None:
            self._handle.path = new_path

    def load(self) -> None:
        raise NotImplementedError

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise ValueError(f"offset {offset} does not fit segment {self.base_offset}'s index")
        return rel


class OffsetIndex(_IndexFile):
    """``.index``: relative offset -> position, one entry per ``index.interval.bytes``."""

    ENTRY_SIZE = 8

    def _clear(self) -> None:
        self._offsets = array("i")  # relative offsets
        self._positions = array("i")

    @property
    def entries(self) -> int:
        if not self.loaded:
            self.load()
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        if not self.loaded:
            self.load()
        return len(self._offsets) >= self.max_entries

    def load(self) -> None:
        """Read the file; raise :class:`CorruptIndexError` if it fails its check."""
        self.install(self.read_entries())

    def read_entries(self) -> OffsetEntries:
        """The file's entries, checked (offsets rising, positions not falling), and its size.
        Changes nothing here, so a worker thread may call it while the loop serves (an old
        segment's index holds up to ~260,000 entries: tens of ms); `install` puts them in place.
        Raises :class:`CorruptIndexError`."""
        data = self._read_file()
        both = array("i")
        both.frombytes(data)
        if _LITTLE:
            both.byteswap()
        offsets, positions = both[0::2], both[1::2]
        n = _entries_before_zeros(data, self.ENTRY_SIZE)
        if n < len(offsets):
            del offsets[n:]
            del positions[n:]
        # Pairwise comparisons run in C (map); the entry at fault is looked for only then.
        if not (
            all(map(operator.lt, offsets, islice(offsets, 1, None)))
            and all(map(operator.le, positions, islice(positions, 1, None)))
        ):
            bad = next(
                i
                for i in range(1, n)
                if offsets[i] <= offsets[i - 1] or positions[i] < positions[i - 1]
            )
            raise CorruptIndexError(f"index file {self.path} is corrupt at entry {bad}")
        if offsets and offsets[0] < 0:
            raise CorruptIndexError(f"index file {self.path} has a negative relative offset")
        return offsets, positions, len(data)

    def install(self, entries: OffsetEntries) -> None:
        """Take the entries `read_entries` returned, unless the index was loaded meanwhile
        (every change loads it first, so the file had not changed under them)."""
        if self.loaded:
            return
        self._offsets, self._positions, self._file_size = entries
        self._persisted = len(self._offsets)
        self.loaded = True

    def append(self, offset: int, position: int) -> None:
        if not self.loaded:
            self.load()
        rel = self._relative(offset)
        if self._offsets and rel <= self._offsets[-1]:
            return  # Kafka raises; a repeated entry is harmless, so keep the first
        self._offsets.append(rel)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or below `offset`, else ``(base, 0)``."""
        if not self.loaded:
            self.load()
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def last_entry(self) -> tuple[int, int]:
        if not self.loaded:
            self.load()
        if not self._offsets:
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def upper_bound_offset(self, position: int) -> int | None:
        """The offset of the first entry at or after byte `position` (Kafka's
        ``fetchUpperBoundOffset``: an offset no read ending at `position` reaches), None
        when no entry is."""
        if not self.loaded:
            self.load()
        i = bisect_left(self._positions, position)
        if i >= len(self._positions):
            return None
        return self.base_offset + self._offsets[i]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for an offset at or above `offset`."""
        if not self.loaded:
            self.load()
        keep = bisect_right(self._offsets, offset - self.base_offset - 1)
        del self._offsets[keep:]
        del self._positions[keep:]
        if keep < self._persisted:
            self._persisted = keep
            self._cut_needed = True

    def reset(self) -> None:
        self._clear()
        self.loaded = True
        self._persisted = 0
        self._cut_needed = True

    def _encode(self, start: int) -> bytes:
        both = array("i", bytes(8 * (len(self._offsets) - start)))
        both[0::2] = self._offsets[start:]
        both[1::2] = self._positions[start:]
        if _LITTLE:
            both.byteswap()
        return both.tobytes()


class TimeIndex(_IndexFile):
    """``.timeindex``: timestamp -> relative offset, appended only when the timestamp grows.

    The last slot is reserved for the entry written when the segment becomes inactive, so the
    index counts as full one entry early (as Kafka's does).
    """

    ENTRY_SIZE = 12
    _last: tuple[int, int] | None = None  # cached tail while unloaded

    def _clear(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("i")

    @property
    def entries(self) -> int:
        if not self.loaded:
            self.load()
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        if not self.loaded:
            self.load()
        return len(self._timestamps) >= self.max_entries - 1

    def load(self) -> None:
        """Read the file; raise :class:`CorruptIndexError` if it fails its check."""
        self.install(self.read_entries())

    def read_entries(self) -> TimeEntries:
        """The file's entries, checked, and its size. Changes nothing here, so a worker thread
        may call it while the loop serves (ListOffsets by timestamp on an old segment);
        `install` puts them in place. Raises :class:`CorruptIndexError`."""
        data = self._read_file()
        # Whole columns at C speed: the file as big-endian 32-bit words, three per entry
        # (timestamp's high and low word, relative offset); the timestamps reassembled.
        n = _entries_before_zeros(data, self.ENTRY_SIZE)
        words = array("I")
        words.frombytes(data[: n * self.ENTRY_SIZE])
        if _LITTLE:
            words.byteswap()
        halves = array("I", bytes(8 * n))
        halves[0::2], halves[1::2] = (
            (words[1::3], words[0::3]) if _LITTLE else (words[0::3], words[1::3])
        )
        timestamps = array("q", halves.tobytes())
        offsets = array("i", words[2::3].tobytes())
        if timestamps and (timestamps[-1] < timestamps[0] or offsets[-1] < 0):
            raise CorruptIndexError(f"time index file {self.path} is corrupt")
        return timestamps, offsets, len(data)

    def install(self, entries: TimeEntries) -> None:
        """Take the entries `read_entries` returned, unless the index was loaded meanwhile."""
        if self.loaded:
            return
        self._timestamps, self._offsets, self._file_size = entries
        self._persisted = len(self._timestamps)
        self.loaded = True
        self._last = None

    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, or ``(-1, base)`` when empty.

        For an unloaded index only the file's last entry is read.
        """
        if self.loaded:
            if not self._timestamps:
                return _NO_TIMESTAMP, self.base_offset
            return self._timestamps[-1], self.base_offset + self._offsets[-1]
        if self._last is None:
            last = self.read_last()
            if last is None:  # preallocated: fall back to a full load
                self.load()
                return self.last_entry()
            self._last = last
        return self._last

    def known_last(self) -> tuple[int, int] | None:
        """`last_entry` if it is known without reading the file, else None."""
        if self.loaded or self._last is not None:
            return self.last_entry()
        return None

    def remember_last(self, last: tuple[int, int]) -> None:
        """Keep the last entry `read_last` returned (in a worker thread), unless loaded."""
        if not self.loaded:
            self._last = last

    def read_last(self) -> tuple[int, int] | None:
        """The file's last entry, ``(timestamp, offset)``, reading only it; None when the
        file ends in preallocated zeros (only a full load finds its last entry). Changes
        nothing here (a worker thread may call it). Raises :class:`CorruptIndexError`."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise CorruptIndexError(f"time index file {self.path} does not exist") from None
        try:
            size = os.fstat(fd).st_size
            if size % self.ENTRY_SIZE:
                raise CorruptIndexError(f"time index file {self.path} has a partial entry")
            if size == 0:
                return _NO_TIMESTAMP, self.base_offset
            ts, rel = _TIME_ENTRY.unpack(os.pread(fd, self.ENTRY_SIZE, size - self.ENTRY_SIZE))
        finally:
            os.close(fd)
        if ts == 0 and rel == 0:
            return None
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        if not self.loaded:
            self.load()
        if not skip_full_check and self.is_full:
            return
        last_ts = self._timestamps[-1] if self._timestamps else _NO_TIMESTAMP
        if timestamp > last_ts:
            rel = self._relative(offset)
            if self._offsets and rel < self._offsets[-1]:
                return
            self._timestamps.append(timestamp)
            self._offsets.append(rel)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry with a timestamp at or below `timestamp`,
        else ``(-1, base)``."""
        if not self.loaded:
            self.load()
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return _NO_TIMESTAMP, self.base_offset
        return self._timestamps[i], self.base_offset + self._offsets[i]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for an offset at or above `offset`."""
        if not self.loaded:
            self.load()
        rel = offset - self.base_offset
        keep = len(self._offsets)
        while keep and self._offsets[keep - 1] >= rel:
            keep -= 1
        del self._timestamps[keep:]
        del self._offsets[keep:]
        if keep < self._persisted:
            self._persisted = keep
            self._cut_needed = True

    def reset(self) -> None:
        self._clear()
        self.loaded = True
        self._persisted = 0
        self._cut_needed = True
        self._last = None

    def _encode(self, start: int) -> bytes:
        pack = _TIME_ENTRY.pack
        return b"".join(
            pack(ts, rel)
            for ts, rel in zip(self._timestamps[start:], self._offsets[start:], strict=True)
        )
