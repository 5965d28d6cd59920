"""LogSegment: one ``.log`` file with its ``.index``, ``.timeindex`` and ``.txnindex``.

This module owns one segment's bytes and positions: appending batches with ``os.pwrite`` and
indexing them every ``index.interval.bytes``, turning an offset into a file position (one
in-memory index probe plus a scan of at most about one index interval; the active segment also
remembers where its last ``RECENT_BATCHES`` batches are, so that a consumer or a follower
reading at the tail reads no file to find its position), truncation,
the CRC-checking recovery scan that rebuilds the indexes, rolling bookkeeping (size, time,
index fullness) and finding offsets by timestamp. It knows offsets and positions only: it must
not know partitions, high watermarks, retention or other segments (that is
:mod:`storage.partition_log`).

The ``.log`` descriptor comes from the shared :class:`~storage.file_handles.FileHandles` pool
and is pinned only for the length of each operation.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import random
import struct
import zlib
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from protocol.checksum import crc32c
from protocol.errors import CorruptRecordError, ProtocolError
from protocol.legacy_records import LegacyMessageView
from protocol.record_batch import TimestampType
from protocol.records import RecordBatchView, iter_batches, iter_records
from storage.chore import SegmentTrims
from storage.config import LogConfig
from storage.errors import CorruptIndexError, KafkaStorageError
from storage.file_handles import FileHandle, FileHandles, create_file
from storage.index import OffsetEntries, OffsetIndex, TimeEntries, TimeIndex
from storage.layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    prepared_file,
    segment_file,
)
from storage.page_cache import cached, load
from storage.scan import MIN_SIZE, BatchHeader, iter_file_headers, read_batch
from storage.txn_index import TransactionIndex

__all__ = [
    "MADE_SUFFIXES",
    "BatchMeta",
    "LogSegment",
    "LookupReads",
    "TimestampAndOffset",
    "TimestampReads",
    "segment_file_sizes",
    "write_batches",
]

log = logging.getLogger(__name__)

#: What an append tells the segment about each batch it writes:
#: (size, first_offset, last_offset, max_timestamp).
BatchMeta = tuple[int, int, int, int]
#: (offset, timestamp, leader_epoch or None), as ListOffsets answers.
TimestampAndOffset = tuple[int, int, int | None]

_INT_MAX = 0x7FFFFFFF
#: The batches appended last whose positions the active segment keeps (see `locate`).
RECENT_BATCHES = 64
_V2_HEAD = struct.Struct(">qiibIhiqq")
_LEGACY_HEAD = struct.Struct(">qiIb")


#: The files a new segment is made with, in the order of :func:`segment_file_sizes`.
MADE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def segment_file_sizes(config: LogConfig, *, active: bool = True) -> tuple[int, int, int]:
    """The sizes a new segment's ``.log``, ``.index`` and ``.timeindex`` are made with: an
    active one's indexes preallocated to ``segment.index.bytes``, its log to ``segment.bytes``
    if ``preallocate``."""
    if not active:
        return 0, 0, 0
    index_bytes = config.segment_index_bytes
    return (
        config.segment_bytes if config.preallocate else 0,
        OffsetIndex.full_size(index_bytes),
        TimeIndex.full_size(index_bytes),
    )


def write_batches(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """Write all of `data` at `position` of the segment file `fd` (on any thread: it touches
    the descriptor only). On an error the file is cut back to `position` and the OSError
    raised."""
    view = memoryview(data)
    at = position
    try:
        while view:
            n = os.pwrite(fd, view, at)
            if n <= 0:
                raise OSError("pwrite wrote nothing")
            at += n
            view = view[n:]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, position)
        raise


#: The bytes from an index entry on that a lookup reads, in one piece, to find its batch.
_SCANNED = 8 * 1024 + 4096


class LookupReads:
    """The disk reads finding an offset in a segment would make on the caller's thread, done
    ahead in a worker thread: the offset index's file read and checked (when not in memory)
    and the bytes from the index entry on read into the page cache, up to the end of the
    first batch holding the offset or after it (with a `timestamp`: the first that reaches
    it, which ListOffsets reads whole). On the loop `pin` (the
    segment's file), then `run` in the worker, then `finish` on the loop, always (it installs
    the index, unless it was loaded meanwhile, and unpins the file)."""

    __slots__ = ("segment", "offset", "timestamp", "position", "entries", "fd")

    def __init__(
        self, segment: LogSegment, offset: int, position: int | None, timestamp: int = -1
    ) -> None:
        self.segment = segment
        self.offset = offset
        self.timestamp = timestamp
        self.position = position  # of the index entry, when the index is in memory
        self.entries: OffsetEntries | None = None
        self.fd: int | None = None

    def pin(self) -> None:
        """Open (if the pool closed it) and pin the segment's file; a segment deleted since
        is left to the read."""
        with contextlib.suppress(OSError, ValueError):
            self.fd = self.segment.log.acquire()

    def run(self) -> None:
        """In a worker thread. A read that fails is left to the lookup itself (which then
        reports it as before)."""
        segment = self.segment
        if self.fd is None:
            return
        try:
            position = self.position
            if position is None:
                self.entries = entries = segment.offset_index.read_entries()
                offsets, positions, _ = entries
                i = bisect_right(offsets, self.offset - segment.base_offset) - 1
                position = positions[i] if i >= 0 else 0
            load(self.fd, position, min(segment.size - position, _SCANNED))
            for h in iter_file_headers(self.fd, position, segment.size):
                if h.last_offset >= self.offset and h.max_timestamp >= self.timestamp:
                    if h.position + h.size > position + _SCANNED:  # read whole next
                        load(self.fd, h.position, h.size)
                    break
        except (OSError, CorruptIndexError, CorruptRecordError):
            pass

    def finish(self) -> None:
        if self.entries is not None:
            self.segment.offset_index.install(self.entries)
        if self.fd is not None:
            self.fd = None
            self.segment.log.release()


class TimestampReads:
    """The time index reads finding the first record at or after `timestamp` (ListOffsets)
    would make on the caller's thread, done ahead in a worker thread: the last entry of each
    of `segments` whose largest timestamp is not known yet, in order, up to the first that
    reaches the timestamp, and that one's whole time index (when not in memory). The caller
    then asks again for the reads that find the offset the index gives (a
    :class:`LookupReads`). Same protocol as :class:`LookupReads`: `pin` and `finish` on the
    loop (`finish` always: it keeps what was read, unless loaded meanwhile), `run` in the
    worker. With `whole_index` False only last entries are read; with `modified` a segment
    without timestamps counts by its file's mtime, read too (Kafka's largest timestamp:
    :meth:`LogSegment.largest_timestamp`). A retention pass by ``retention.ms`` and the
    cleaner's ``min.compaction.lag.ms`` want no more (:meth:`for_largest`)."""

    __slots__ = ("timestamp", "segments", "whole_index", "modified", "lasts", "mtimes", "entries")

    def __init__(
        self,
        timestamp: int,
        segments: list[LogSegment],
        *,
        whole_index: bool = True,
        modified: bool = False,
    ) -> None:
        self.timestamp = timestamp
        self.whole_index = whole_index
        self.modified = modified
        #: Each segment with its last time index entry when known here (read only the others),
        #: and its file's path, size and activity now (an mtime read is kept for these).
        self.segments = [
            (seg, seg.time_index.known_last(), seg.log.path, seg.size, seg.active)
            for seg in segments
        ]
        self.lasts: list[tuple[LogSegment, tuple[int, int]]] = []
        self.mtimes: list[tuple[LogSegment, int, bool, int]] = []
        self.entries: tuple[LogSegment, TimeEntries] | None = None

    @classmethod
    def for_largest(cls, segments: list[LogSegment], timestamp: int) -> TimestampReads | None:
        """The reads that :meth:`LogSegment.largest_timestamp` of `segments`, in order up to
        the first that reaches `timestamp`, would make on the caller's thread (their time
        indexes' last entries not in memory, the mtimes of those without timestamps, which
        are read again for each pass, as Kafka's); None if there are none."""
        unknown: list[LogSegment] = []
        for seg in segments:
            largest = seg.known_max_timestamp()
            if largest is None or largest < 0:
                unknown.append(seg)
            elif largest >= timestamp:
                break
        return cls(timestamp, unknown, whole_index=False, modified=True) if unknown else None

    def pin(self) -> None:
        pass  # the index files are opened by path

    def run(self) -> None:
        """In a worker thread. A read that fails is left to the lookup itself (which then
        reports it as before)."""
        try:
            for seg, known, path, size, active in self.segments:
                index = seg.time_index
                last = known
                if last is None:
                    last = index.read_last()
                    if last is not None:
                        self.lasts.append((seg, last))
                largest = None if last is None else last[0]
                if self.modified and largest is not None and largest < 0:
                    largest = _modified_ms(path)
                    self.mtimes.append((seg, size, active, largest))
                if largest is None or largest >= self.timestamp:
                    if not index.loaded and (last is None or self.whole_index):
                        self.entries = (seg, index.read_entries())
                    return
        except (OSError, CorruptIndexError):
            pass

    def finish(self) -> None:
        for seg, last in self.lasts:
            seg.time_index.remember_last(last)
        for seg, size, active, mtime in self.mtimes:
            seg.remember_modified(size, active, mtime)
        if self.entries is not None:
            seg, entries = self.entries
            seg.time_index.install(entries)


class LogSegment:
    """One segment; see the module doc. Create with :meth:`create` or :meth:`open`."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        handles: FileHandles,
        *,
        suffix: str = "",
        created_ms: int = 0,
    ) -> None:
        self.dir = directory
        self.base_offset = base_offset
        self.suffix = suffix
        self.log: FileHandle = handles.handle(
            segment_file(directory, base_offset, LOG_SUFFIX + suffix)
        )
        self.log.on_close = self._on_log_closed
        self.offset_index = OffsetIndex(
            segment_file(directory, base_offset, INDEX_SUFFIX + suffix),
            base_offset,
            config.segment_index_bytes,
            handles,
        )
        self.time_index = TimeIndex(
            segment_file(directory, base_offset, TIME_INDEX_SUFFIX + suffix),
            base_offset,
            config.segment_index_bytes,
            handles,
        )
        #: The transactions aborted by markers in this segment (written by the log).
        self.txn_index = TransactionIndex(
            segment_file(directory, base_offset, TXN_INDEX_SUFFIX + suffix)
        )
        self.size = 0
        self.active = False
        self.index_interval_bytes = config.index_interval_bytes
        self.preallocated = False
        self.created_ms = created_ms
        jitter = config.segment_jitter_ms
        self.roll_jitter_ms = random.randrange(min(jitter, config.segment_ms)) if jitter > 0 else 0
        self._bytes_since_index = 0
        self._needs_preallocation = False
        self._next_offset: int | None = None
        self._max_ts: int | None = None
        self._offset_of_max_ts = base_offset
        self._rolling_ts: int | None = None  # max timestamp of the first batch, once known
        #: The file's mtime last read in a worker thread (`TimestampReads`), with the size and
        #: activity it was read at: it holds while they do.
        self._modified: tuple[int, bool, int] | None = None
        #: The cuts of its files its roll left to the roll work's worker (see `become_inactive`).
        self.trims: SegmentTrims | None = None
        self._rolling_ts_known = False
        #: (first offset, last offset, position, size) of the batches appended last while
        #: active, in file order, ending at `size`; cleared whenever the file changes otherwise.
        self._recent: deque[tuple[int, int, int, int]] = deque(maxlen=RECENT_BATCHES)

    # ---- life cycle ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        handles: FileHandles,
        now_ms: int,
        *,
        suffix: str = "",
        active: bool = True,
        make: bool = True,
    ) -> LogSegment:
        """A new, empty segment (any stale files of the same name are replaced). With `make`
        False its files are not made yet: the caller makes :meth:`new_files` before anything
        reads or appends to it -- off the log's thread for a full truncation
        (:meth:`PartitionLog.begin_full_truncation`)."""
        seg = cls(directory, base_offset, config, handles, suffix=suffix, created_ms=now_ms)
        seg._start_empty(segment_file_sizes(config, active=active), active=active)
        if not make:
            return seg
        try:
            for file, size in seg.new_files(config):
                create_file(file, size)
        except OSError as e:
            with contextlib.suppress(OSError):
                seg.delete_files()
            raise KafkaStorageError(f"cannot create segment {seg.log.path}: {e}") from e
        return seg

    def new_files(self, config: LogConfig) -> list[tuple[Path, int]]:
        """The files a new segment is made of, with their sizes (for
        :func:`~storage.file_handles.create_file`)."""
        sizes = segment_file_sizes(config, active=self.active)
        return list(zip(self._made_files(), sizes, strict=True))

    @classmethod
    def adopt(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        handles: FileHandles,
        now_ms: int,
        sizes: tuple[int, int, int],
    ) -> LogSegment:
        """A new, empty, active segment made of the files prepared ahead in `directory`
        (``next.*.prepared``, of `sizes`: see :mod:`storage.roll_work`), renamed to its names:
        three renames, where :meth:`create` creates and sizes three files. Raises
        :class:`KafkaStorageError` if a rename fails (the caller creates the segment then)."""
        seg = cls(directory, base_offset, config, handles, created_ms=now_ms)
        try:
            for file, suffix in zip(seg._made_files(), MADE_SUFFIXES, strict=True):
                os.rename(prepared_file(directory, suffix), file)
        except OSError as e:
            raise KafkaStorageError(f"cannot adopt the prepared segment {seg.log.path}: {e}") from e
        seg._start_empty(sizes, active=True)
        return seg

    def _made_files(self) -> tuple[Path, Path, Path]:
        """The files a new segment has (its ``.txnindex`` is made by its first entry)."""
        return self.log.path, self.offset_index.path, self.time_index.path

    def _start_empty(self, sizes: tuple[int, int, int], *, active: bool) -> None:
        self.preallocated = sizes[0] > 0
        self.offset_index.start_empty(sizes[1])
        self.time_index.start_empty(sizes[2])
        self._next_offset = self.base_offset
        self._max_ts = -1
        self._rolling_ts_known = True
        self.active = active

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        handles: FileHandles,
        *,
        suffix: str = "",
        now_ms: int = 0,
    ) -> LogSegment:
        """An existing segment; its size is the file's size, its indexes load lazily. Its age
        for ``segment.ms`` (when its records carry no timestamps) counts from `now_ms`, as
        Kafka counts from loading."""
        seg = cls(directory, base_offset, config, handles, suffix=suffix, created_ms=now_ms)
        seg.size = os.stat(seg.log.path).st_size
        return seg

    def _on_log_closed(self) -> None:
        if not self.active:
            self.offset_index.unload()
            self.time_index.unload()
            self.txn_index.unload()

    def indexes_exist(self) -> bool:
        return self.offset_index.exists() and self.time_index.exists()

    def become_active(self) -> None:
        """Make this the segment appends go to: its indexes are loaded now and grown back to
        ``segment.index.bytes`` (as Kafka's ``resizeIndexes``) on the first append."""
        self.finish_trims()
        self.active = True
        try:
            for index in (self.offset_index, self.time_index):
                if not index.loaded:
                    index.load()
        except CorruptIndexError:
            self.rebuild_indexes()
        self._needs_preallocation = True

    def _preallocate_indexes(self) -> None:
        self.offset_index.preallocate()
        self.time_index.preallocate()
        self._needs_preallocation = False

    def become_inactive(self, *, defer_trims: bool = False) -> None:
        """Roll bookkeeping: final time index entry, indexes and log trimmed to their data --
        with `defer_trims`, the index entries written here and the cuts left in :attr:`trims`
        (a :class:`~storage.chore.SegmentTrims`) for the roll work's worker thread."""
        self.time_index.maybe_append(
            self.max_timestamp_so_far, self._offset_of_max_ts, skip_full_check=True
        )
        self._needs_preallocation = False
        if defer_trims:
            cuts = [self.offset_index.defer_trim(), self.time_index.defer_trim()]
            if self.preallocated:
                cuts.append((self.log.path, self.size))
            self.trims = SegmentTrims([cuts])
        else:
            self.offset_index.trim()
            self.time_index.trim()
            if self.preallocated:
                with self.log.use() as fd:
                    os.ftruncate(fd, self.size)
        self.preallocated = False
        self.active = False
        self._recent.clear()

    def finish_trims(self) -> None:
        """Make the cuts :meth:`become_inactive` left (:attr:`trims`) here, unless made: the
        files are about to change size again."""
        trims, self.trims = self.trims, None
        if trims is not None and not trims.done:
            for path, error in trims.run_here():
                log.warning("%s: cannot cut it to its data: %s", path, error)

    def close(self) -> None:
        """Write what is in memory and trim the files (as Kafka's close), release the fd."""
        try:
            self.finish_trims()
            if self.active:
                self.become_inactive()
        finally:
            self.log.detach()
            self.offset_index.close()
            self.time_index.close()

    def rename_suffix(self, suffix: str) -> None:
        """Rename all four files to ``<base>.<ext><suffix>`` (e.g. ``.deleted``)."""
        log, offsets, times, txns = self._paths(suffix)
        self.log.rename(log)
        self.offset_index.rename(offsets)
        self.time_index.rename(times)
        self.txn_index.rename(txns)
        self.suffix = suffix

    def renamed_elsewhere(self, suffix: str) -> list[tuple[Path, Path]]:
        """Name the four files ``<base>.<ext><suffix>`` here without renaming them; the
        renames for the caller to make, ``.log`` first (see
        :class:`~storage.chore.SegmentRenames`). Its descriptors are closed or detached."""
        log, offsets, times, txns = self._paths(suffix)
        renames = [
            (self.log.path, log),
            (self.offset_index.path, offsets),
            (self.time_index.path, times),
            (self.txn_index.path, txns),
        ]
        self.log.path = log
        self.offset_index.moved(offsets)
        self.time_index.moved(times)
        self.txn_index.path = txns
        self.suffix = suffix
        return renames

    def moved_to(self, directory: Path) -> None:
        """Its partition directory was renamed to `directory`: name the files there (open
        descriptors stay valid)."""
        self.dir = directory
        log, offsets, times, txns = self._paths(self.suffix)
        self.log.path = log
        self.offset_index.moved(offsets)
        self.time_index.moved(times)
        self.txn_index.path = txns

    def _paths(self, suffix: str) -> list[Path]:
        return [
            segment_file(self.dir, self.base_offset, ext + suffix)
            for ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        ]

    def release_files(self, into: list[int] | None = None) -> list[Path]:
        """Give back this segment's descriptors (a pinned ``.log`` closes at its last release;
        with `into`, the others are put there for the caller to close, off the log's thread)
        and return its four files' paths, for the caller to unlink."""
        self.log.detach(into)
        self.offset_index.close(into)
        self.time_index.close(into)
        return [self.log.path, self.offset_index.path, self.time_index.path, self.txn_index.path]

    def delete_files(self) -> None:
        for path in self.release_files():
            path.unlink(missing_ok=True)

    # ---- facts -----------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """One past the last offset in this segment (its base offset when empty)."""
        if self._next_offset is None:
            self._load_tail()
        assert self._next_offset is not None
        return self._next_offset

    @property
    def max_timestamp_so_far(self) -> int:
        if self._max_ts is None:
            try:
                ts, off = self.time_index.last_entry()
                self._max_ts, self._offset_of_max_ts = ts, off
            except CorruptIndexError:
                self.rebuild_indexes()
        assert self._max_ts is not None
        return self._max_ts

    def known_max_timestamp(self) -> int | None:
        """`max_timestamp_so_far` if it is known without reading a file, else None."""
        if self._max_ts is not None:
            return self._max_ts
        last = self.time_index.known_last()
        return None if last is None else last[0]

    @property
    def offset_of_max_timestamp(self) -> int:
        _ = self.max_timestamp_so_far
        return self._offset_of_max_ts

    def largest_timestamp(self) -> int:
        """The max record timestamp, or the file's mtime if it has none (Kafka's rule): the
        one a worker thread read (`TimestampReads`) if the segment was not written since."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        modified = self._modified
        if modified is not None and modified[0] == self.size and modified[1] == self.active:
            return modified[2]
        return _modified_ms(self.log.path)

    def remember_modified(self, size: int, active: bool, mtime_ms: int) -> None:
        """Keep the mtime a worker thread read while the segment had `size` and `active`."""
        self._modified = (size, active, mtime_ms)

    def _load_tail(self) -> None:
        """Scan from the last offset index entry to the end (at most about one interval); a
        segment whose tail is not whole batches from that entry is recovered."""
        try:
            _, pos = self.offset_index.last_entry()
        except CorruptIndexError:
            self.rebuild_indexes()
            _, pos = self.offset_index.last_entry()
        max_ts = self.max_timestamp_so_far
        next_offset = self.base_offset
        end = pos
        if pos and pos >= self.size:
            # An entry is a batch's position: one at (or past) the file's end is for bytes
            # that were never written (the index and the log disagree: an index entry of an
            # append not made, then a crash or a close). Recover, which rebuilds the index
            # from the log, rather than take the tail for empty (Kafka's readNextOffset does).
            end = -1
        elif self.size:
            with self.log.use() as fd:
                try:
                    for h in iter_file_headers(fd, pos, self.size):
                        next_offset = h.last_offset + 1
                        end = h.position + h.size
                        if h.max_timestamp > max_ts:
                            max_ts, self._offset_of_max_ts = h.max_timestamp, h.last_offset
                except CorruptRecordError:
                    end = -1
        if end != self.size:
            # Bytes that are not whole batches where a clean shutdown leaves none, or an index
            # past the data: recover rather than append after garbage.
            log.warning("%s: its index or its end is inconsistent; recovering it", self.log.path)
            self.recover()
            return
        self._max_ts = max_ts
        self._next_offset = next_offset

    def first_batch_timestamp(self) -> int | None:
        if not self._rolling_ts_known:
            self._rolling_ts_known = True
            if self.size:
                with self.log.use() as fd:
                    for h in iter_file_headers(fd, 0, self.size):
                        self._rolling_ts = h.max_timestamp
                        break
        return self._rolling_ts

    def should_roll(
        self,
        *,
        segment_bytes: int,
        segment_ms: int,
        append_size: int,
        max_timestamp: int,
        max_offset: int,
        now_ms: int,
    ) -> bool:
        """Kafka's ``shouldRoll``: size, age (by first batch timestamp), index full, or an
        offset that no longer fits a 32-bit relative offset. An empty segment only rolls for
        the last reason."""
        size = self.size
        if max_offset - self.base_offset > _INT_MAX:
            return True
        if size == 0:
            return False
        if size > segment_bytes - append_size:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return self._waited(max_timestamp, now_ms) > segment_ms - self.roll_jitter_ms

    def half_way_to_roll(
        self, *, segment_bytes: int, segment_ms: int, max_timestamp: int, now_ms: int
    ) -> bool:
        """Half of what :meth:`should_roll` waits for is reached (size, index entries, age):
        time for the log to prepare its next segment (:mod:`storage.roll_work`)."""
        if self.size * 2 >= segment_bytes:
            return True
        offsets, times = self.offset_index, self.time_index
        if offsets.entries * 2 >= offsets.max_entries or times.entries * 2 >= times.max_entries:
            return True
        return self._waited(max_timestamp, now_ms) * 2 > segment_ms - self.roll_jitter_ms

    def _waited(self, max_timestamp: int, now_ms: int) -> int:
        """The segment's age for ``segment.ms``: by its first batch's timestamp, else since
        it was made (or loaded)."""
        first_ts = self.first_batch_timestamp()
        if first_ts is not None and first_ts >= 0:
            return max_timestamp - first_ts
        return max(now_ms - self.created_ms, 0)

    # ---- append ----------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, metas: Sequence[BatchMeta]) -> None:
        """Write `data` (whole batches described by `metas`) at the end, then index it.

        On an I/O error the file is cut back to its previous size, no index entry is added,
        and :class:`KafkaStorageError` is raised.
        """
        fd = self.begin_append()
        try:
            write_batches(fd, data, self.size)
        except OSError as e:
            raise KafkaStorageError(f"append to {self.log.path} failed: {e}") from e
        finally:
            self.log.release()
        self.appended(metas)

    def begin_append(self) -> int:
        """Make the segment ready for an append at :attr:`size` (its indexes grown back, if
        due) and pin its file: the descriptor, for :func:`write_batches` -- which may run in a
        worker thread -- then :meth:`appended` on this thread and ``self.log.release()``. Raises
        :class:`KafkaStorageError`."""
        if self._needs_preallocation:
            try:
                self._preallocate_indexes()
            except OSError as e:
                raise KafkaStorageError(f"cannot grow the indexes of {self.log.path}: {e}") from e
        try:
            return self.log.acquire()
        except OSError as e:
            raise KafkaStorageError(f"cannot open {self.log.path}: {e}") from e

    def appended(self, metas: Sequence[BatchMeta]) -> None:
        """Index the batches `metas` describes, written at :attr:`size` (see
        :meth:`begin_append`), and count them in."""
        pos = self.size
        if pos == 0:
            self._rolling_ts = metas[0][3]
            self._rolling_ts_known = True
        max_ts = self.max_timestamp_so_far
        interval = self.index_interval_bytes
        since = self._bytes_since_index
        last = self.base_offset
        indexed = False
        recent = self._recent if self.active else None
        for size, first, last, ts in metas:
            if recent is not None:
                recent.append((first, last, pos, size))
            if ts > max_ts:
                max_ts = ts
                self._offset_of_max_ts = last
            if since > interval:
                self.offset_index.append(last, pos)
                self.time_index.maybe_append(max_ts, self._offset_of_max_ts)
                indexed = True
                since = 0
            pos += size
            since += size
        if indexed and self.active and not self.offset_index.written:
            # The first entries go to the file at once: until then its preallocated zeros read
            # as an entry to Kafka's DumpLogSegments. Later ones within a second
            # (LogManager.write_index_entries), as writing each costs an append ~10%. The
            # append itself is done: should this write fail, the next flush, roll or close
            # writes them.
            with contextlib.suppress(OSError):
                self.persist_indexes()
        self._max_ts = max_ts
        self._bytes_since_index = since
        self.size = pos
        self._next_offset = last + 1

    # ---- lookups ---------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """The first batch whose last offset is at or above `offset`, or None if none is."""
        try:
            _, pos = self.offset_index.lookup(offset)
        except CorruptIndexError:
            self.rebuild_indexes()
            _, pos = self.offset_index.lookup(offset)
        pos = max(pos, start_position)
        if pos >= self.size:
            return None
        with self.log.use() as fd:
            for h in iter_file_headers(fd, pos, self.size):
                if h.last_offset >= offset:
                    return h
        return None

    def lookup_reads(self, offset: int, timestamp: int = -1) -> LookupReads | None:
        """What `locate(offset)` would wait on the disk for, or None: the offset index's file
        when it is not in memory, the batch headers from the index entry on when they are not
        in the page cache (see :class:`LookupReads`; with a `timestamp`, up to the batch that
        reaches it, for `find_offset_by_timestamp`)."""
        recent = self._recent
        if recent and offset >= recent[0][0]:
            return None  # found without reading the file
        index = self.offset_index
        if not index.loaded:
            return LookupReads(self, offset, None, timestamp)
        _, position = index.lookup(offset)
        try:
            with self.log.use() as fd:
                if cached(fd, position, min(self.size - position, _SCANNED)):
                    return None
        except (OSError, ValueError):  # gone or detached (an offline directory): the read says
            return None
        return LookupReads(self, offset, position, timestamp)

    def timestamp_reads(
        self, timestamp: int, starting_offset: int
    ) -> TimestampReads | LookupReads | None:
        """What `find_offset_by_timestamp` would wait on the disk for next, or None: this
        segment's time index when not in memory, then the reads finding the offset it gives
        (:meth:`lookup_reads`)."""
        if not self.time_index.loaded:
            return TimestampReads(timestamp, [self])
        _, offset = self.time_index.lookup(timestamp)
        return self.lookup_reads(max(offset, starting_offset), timestamp)

    def locate(self, offset: int) -> tuple[int, int, int] | None:
        """(position, size, base offset) of the first batch whose last offset is at or above
        `offset`, or None if none is: `translate_offset` without reading the file when that
        batch is one of the last appended."""
        recent = self._recent
        if recent and offset >= recent[0][0]:
            found = None
            for entry in reversed(recent):
                if entry[1] < offset:
                    break
                found = entry
            return None if found is None else (found[2], found[3], found[0])
        h = self.translate_offset(offset)
        return None if h is None else (h.position, h.size, h.base_offset)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record at or after `starting_offset` with a timestamp >= `timestamp`."""
        try:
            _, ts_offset = self.time_index.lookup(timestamp)
            _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        except CorruptIndexError:
            self.rebuild_indexes()
            pos = 0
        with self.log.use() as fd:
            for h in iter_file_headers(fd, pos, self.size):
                if h.max_timestamp < timestamp or h.last_offset < starting_offset:
                    continue
                for batch in iter_batches(read_batch(fd, h)):
                    for record in iter_records(batch):
                        if record.timestamp >= timestamp and record.offset >= starting_offset:
                            return record.offset, record.timestamp, _epoch(h)
        return None

    def max_timestamp_record(self) -> TimestampAndOffset | None:
        """The (first) record holding this segment's max timestamp (ListOffsets -3)."""
        target = self.max_timestamp_so_far
        try:
            _, pos = self.offset_index.lookup(self.offset_of_max_timestamp)
        except CorruptIndexError:
            self.rebuild_indexes()
            pos = 0
        with self.log.use() as fd:
            for h in iter_file_headers(fd, pos, self.size):
                if h.max_timestamp != target:
                    continue
                for batch in iter_batches(read_batch(fd, h)):
                    if (
                        isinstance(batch, RecordBatchView)
                        and batch.timestamp_type == TimestampType.LOG_APPEND_TIME
                    ):
                        return batch.base_offset, target, _epoch(h)
                    for record in iter_records(batch):
                        if record.timestamp == target:
                            return record.offset, target, _epoch(h)
        return None

    # ---- truncation and recovery -----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is at or above `offset`; return bytes cut."""
        before = self.size
        for path, size in self.begin_truncation(offset):
            with contextlib.suppress(FileNotFoundError):  # a transaction index never written
                os.truncate(path, size)
        return before - self.size

    def begin_truncation(self, offset: int) -> list[tuple[Path, int]]:
        """`truncate_to` in memory: the segment reads and appends as if cut at once; the
        files to cut, each to its size, are returned for the caller to cut (a follower's
        truncation cuts them in a worker thread: `PartitionLog.begin_truncation`) before
        anything is appended to this segment again. The index files are cut by their next
        write, as after any truncation."""
        self.finish_trims()
        cuts = []
        txn_size = self.txn_index.begin_truncation(offset)
        if txn_size is not None:
            cuts.append((self.txn_index.path, txn_size))
        h = self.translate_offset(offset)
        if h is None:
            return cuts
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        cuts.append((self.log.path, h.position))
        self.size = h.position
        self._recent.clear()
        self.preallocated = False
        self._max_ts = None
        self._next_offset = None
        self._bytes_since_index = 0
        if self.size == 0:
            self._rolling_ts = None
            self._rolling_ts_known = True
        self._load_tail()
        return cuts

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the batch headers (no CRC checks, no truncation)."""
        self.finish_trims()
        self.offset_index.reset()
        self.time_index.reset()
        max_ts, off_max = -1, self.base_offset
        last_index_pos = 0
        next_offset = self.base_offset
        with self.log.use() as fd:
            try:
                for h in iter_file_headers(fd, 0, self.size):
                    if h.max_timestamp > max_ts:
                        max_ts, off_max = h.max_timestamp, h.last_offset
                    if h.position - last_index_pos > self.index_interval_bytes:
                        self.offset_index.append(h.last_offset, h.position)
                        self.time_index.maybe_append(max_ts, off_max)
                        last_index_pos = h.position
                    next_offset = h.last_offset + 1
            except CorruptRecordError:
                pass
        self.time_index.maybe_append(max_ts, off_max, skip_full_check=True)
        self._max_ts, self._offset_of_max_ts = max_ts, off_max
        self._next_offset = next_offset
        self._write_rebuilt_indexes()

    def _write_rebuilt_indexes(self) -> None:
        self.offset_index.trim()
        self.time_index.trim()
        if self.active:
            self._preallocate_indexes()

    def recover(self, on_epoch: Callable[[int, int], None] | None = None) -> int:
        """Kafka's segment recovery: verify every batch (framing, CRC, offsets), rebuild both
        indexes, and cut the file at the first torn or corrupt batch. Calls
        ``on_epoch(partition_leader_epoch, base_offset)`` for each v2 batch. Returns the
        number of bytes cut."""
        self.finish_trims()
        self.offset_index.reset()
        self.time_index.reset()
        max_ts, off_max = -1, self.base_offset
        valid = 0
        prev_last = self.base_offset - 1
        interval = self.index_interval_bytes
        base = self.base_offset
        offset_index, time_index = self.offset_index, self.time_index
        size = self.size
        with self.log.use() as fd:
            if size:
                m = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
                view = memoryview(m)
                try:
                    valid, prev_last, max_ts, off_max = _scan_valid(
                        view, base, interval, offset_index, time_index, on_epoch
                    )
                finally:
                    view.release()
                    m.close()
            cut = size - valid
            if cut:
                os.ftruncate(fd, valid)
        self.size = valid
        self._recent.clear()
        self.preallocated = False
        time_index.maybe_append(max_ts, off_max, skip_full_check=True)
        self._max_ts, self._offset_of_max_ts = max_ts, off_max
        self._next_offset = prev_last + 1
        self._bytes_since_index = 0
        self._rolling_ts_known = False
        self._rolling_ts = None
        self._write_rebuilt_indexes()
        return cut

    # ---- flush -----------------------------------------------------------------------------

    @property
    def indexes_unwritten(self) -> bool:
        """Index entries are in memory that are not in the files yet."""
        return self.offset_index.unwritten or self.time_index.unwritten

    def persist_indexes(self, *, fsync: bool = False) -> None:
        """Write pending index entries (the file keeps its preallocated size)."""
        self.offset_index.persist(fsync=fsync)
        self.time_index.persist(fsync=fsync)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, active={self.active})"


def _modified_ms(path: Path) -> int:
    """The file's mtime in ms (0 if it is gone)."""
    try:
        return os.stat(path).st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return 0


def _epoch(h: BatchHeader) -> int | None:
    return h.partition_leader_epoch if h.partition_leader_epoch >= 0 else None


def _scan_valid(
    view: memoryview,
    base: int,
    interval: int,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    on_epoch: Callable[[int, int], None] | None,
) -> tuple[int, int, int, int]:
    """The recovery loop over a mapped segment: returns (valid bytes, last offset, max
    timestamp, offset of max timestamp). Kept flat for speed."""
    end = len(view)
    pos = 0
    last_index_pos = 0
    prev_last = base - 1
    max_ts, off_max = -1, base
    v2_unpack = _V2_HEAD.unpack_from
    legacy_unpack = _LEGACY_HEAD.unpack_from
    crc = crc32c
    limit = base + _INT_MAX
    while end - pos >= 17:
        magic = view[pos + 16]
        if magic == 2:
            if end - pos < 61:
                break
            first, length, epoch, _m, stored, _a, lod, _bts, ts = v2_unpack(view, pos)
            size = length + 12
            if size < 61 or pos + size > end or lod < 0:
                break
            if crc(view[pos + 21 : pos + size]) != stored:
                break
            last = first + lod
        elif magic < 2:
            first, length, stored, _m = legacy_unpack(view, pos)
            size = length + 12
            if size < MIN_SIZE[magic] or pos + size > end:
                break
            if zlib.crc32(view[pos + 16 : pos + size]) != stored:
                break
            try:
                LegacyMessageView(view[pos : pos + size])
            except ProtocolError:
                break
            last = first
            ts = struct.unpack_from(">q", view, pos + 18)[0] if magic == 1 else -1
            epoch = -1
        else:
            break
        if first <= prev_last or first < base or last > limit:
            break
        if ts > max_ts:
            max_ts, off_max = ts, last
        if pos - last_index_pos > interval:
            offset_index.append(last, pos)
            time_index.maybe_append(max_ts, off_max)
            last_index_pos = pos
        if on_epoch is not None and magic == 2 and epoch >= 0:
            on_epoch(epoch, first)
        prev_last = last
        pos += size
    return pos, prev_last, max_ts, off_max
