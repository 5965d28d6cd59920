"""PartitionLog: one partition's ordered segments and its offsets (Kafka's UnifiedLog/LocalLog).

This module owns a partition directory while it is open: the segment list (found by bisecting
base offsets, so a read costs O(log segments) plus one in-memory index probe and a scan of
about one index interval), the log start offset, high watermark, log end offset and recovery
point -- with ``log_start_offset <= high_watermark <= log_end_offset`` after every operation --
the last stable offset (from the producer state's transactions, never past the high
watermark), and every operation that changes them: leader and follower appends (which keep the
producer state and write aborted transactions to the active segment's ``.txnindex``), reads
returning pinned file slices (with the aborted transactions of their range for read_committed),
timestamp lookups, truncation, DeleteRecords, retention, compaction, rolling, flushing and
closing. It must not know about sockets, trio, replicas or requests; the broker decides
*when* (high watermark, flush, retention ticks), this module decides *how*.

Durability: an append returns after ``os.pwrite`` returned for all its bytes (nothing is
buffered in user space, so a process crash loses nothing acknowledged). fsync happens when
``flush.messages`` / ``flush.ms`` say so, before returning when
``wirebroker.fsync.before.ack`` is set, or when the caller flushes. For group commit, append
with ``sync=False`` and then call :meth:`PartitionLog.begin_flush` and run the returned
:class:`PendingFlush`, a :class:`~storage.chore.Chore`: one fsync then covers every append made
before ``begin_flush``. Compaction is a chore too (:meth:`PartitionLog.begin_compaction`).

Failures: an append that cannot be written, indexed, rolled or (when due) flushed raises
:class:`KafkaStorageError` and leaves nothing behind -- a flush that fails takes the append back
out -- so the error is reported before the log end offset advances, and a retry writes once.

Not thread-safe: one thread calls a log (except a chore's ``prepare``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.errors import CorruptRecordError
from protocol.record_batch import CONTROL_MASK, NO_TIMESTAMP, TimestampType
from storage.checkpoints import fsync_dir
from storage.chore import SegmentRenames, SegmentTrims, run_chore
from storage.clock import wall_clock_ms
from storage.config import DEFAULT_MAX_MAP_KEYS, LogConfig
from storage.errors import (
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    UnexpectedAppendOffsetError,
)
from storage.file_handles import FileHandles, create_file
from storage.layout import (
    DELETED_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    delete_dir_name,
    parse_partition_dir,
    segment_file,
    stray_dir_name,
)
from storage.leader_epoch import CheckpointWrite, LeaderEpochCache
from storage.producer_state import (
    BATCH_HEADER_SIZE,
    BatchMetadata,
    BatchUpdate,
    CompletedTxn,
    ProducerStateManager,
    VerificationGuard,
    batch_update,
    producer_batches,
    snapshot_tmp,
)
from storage.recovery import load_partition_dir
from storage.results import AppendInfo, FileSlice, OffsetAndTimestamp, ReadResult
from storage.retention import plan_retention
from storage.roll_work import PendingSnapshot, RollWork
from storage.scan import iter_file_headers
from storage.segment import (
    LogSegment,
    LookupReads,
    TimestampReads,
    segment_file_sizes,
    write_batches,
)
from storage.txn_index import AbortedTxn
from storage.validation import (
    AppendOrigin,
    ValidatedAppend,
    analyze_follower_append,
    validate_leader_append,
)
from storage.write_back import start_write_back

if TYPE_CHECKING:
    from storage.cleaner import Compaction

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "FollowerAppend",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "PartitionLog",
    "PendingFlush",
    "Truncation",
]

log = logging.getLogger(__name__)

#: A read continues into following segments (Kafka's stops at the first segment's end), up
#: to this many: each slice pins one descriptor until released.
MAX_READ_SEGMENTS = 8

#: ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
#: A timestamp no record reaches: time index reads up to it read every last entry.
_NEVER = 2**63 - 1


class PendingFlush:
    """The fsyncs of one flush (a :class:`~storage.chore.Chore`), made by
    :meth:`PartitionLog.begin_flush`.

    It holds file paths, not descriptors: :meth:`prepare` writes the leader epoch checkpoint
    if it changed (its entries copied when the flush began), then opens, fsyncs and closes one
    file at a time (an fsync through any descriptor of a file makes all its data durable), so a
    flush of thousands of segments uses one descriptor, and :meth:`prepare` touches no state of
    the log: it may run in a worker thread while the log keeps appending. A file (or the
    partition directory) deleted meanwhile is skipped. :meth:`commit` advances the log's
    recovery point.
    """

    __slots__ = ("log", "up_to", "epochs", "paths", "directory", "done")

    def __init__(self, log: PartitionLog, up_to: int) -> None:
        self.log = log
        self.up_to = up_to
        self.epochs: CheckpointWrite | None = None
        self.paths: list[Path] = []
        self.directory: Path | None = None
        self.done = False

    def prepare(self) -> None:
        if self.epochs is not None:
            with contextlib.suppress(FileNotFoundError):  # the partition was deleted meanwhile
                self.epochs.run(fsync=False)  # fsynced below, with the directory
        for path in self.paths:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self.directory is not None:
            with contextlib.suppress(FileNotFoundError):  # the partition was deleted meanwhile
                fsync_dir(self.directory)
        self.done = True

    def abort(self) -> None:
        pass  # an fsync cannot be interrupted, and the next ones are as long

    def commit(self) -> None:
        self.log._complete_flush(self)


class PartitionLog:
    """One partition's log; open with :meth:`open`."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        handles: FileHandles,
        now_ms: Callable[[], int],
        *,
        owns_handles: bool,
        opened_ms: int,
    ) -> None:
        self.dir = directory
        self.config = config
        self.handles = handles
        self.topic_partition = parse_partition_dir(directory.name)
        self._now_ms = now_ms
        self._owns_handles = owns_handles
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start = 0
        self._high_watermark = 0
        self._leo = 0
        self._recovery_point = 0
        self.leader_epoch_cache = LeaderEpochCache(None)
        #: Idempotent producers' epochs and last batches (see :mod:`storage.producer_state`).
        self.producer_state = ProducerStateManager(directory)
        #: First offset not yet compacted (Kafka's cleaner checkpoint).
        self.cleaner_checkpoint = 0
        #: Earliest tombstone delete horizon left by compaction (None: none pending).
        self.tombstone_horizon_ms: int | None = None
        self._unflushed_messages = 0
        self._last_flush_ms = opened_ms
        self._dir_dirty = False
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        #: Segments deleted from the start whose files keep their names until the removal
        #: chore renames them (:meth:`take_renames`), and the renames taken, until done.
        self._unrenamed: list[LogSegment] = []
        self._renaming: list[SegmentRenames] = []
        #: Producer snapshots below the log start offset (and snapshots written off the loop
        #: that a truncation voided), unlinked with the deleted segments' files (as Kafka's
        #: async delete, after ``file.delete.delay.ms``).
        self._obsolete_snapshots: list[tuple[int, Path]] = []
        #: Descriptors of deleted segments' files, for the removal chore to close.
        self._unclosed: list[int] = []
        #: Counts truncations: a chore prepared before one must not be committed after it.
        self.truncations = 0
        #: The log's one writer while a worker thread writes its files (see :attr:`writing`).
        self._writer: Truncation | FollowerAppend | None = None
        #: Where reads bounded by the high watermark and by the last stable offset stop.
        self._position_cache: dict[int, tuple[LogSegment, int]] = {}
        self.closed = False
        #: Its log directory failed (see :class:`~storage.log_manager.LogManager`): the log was
        #: abandoned, and every operation raises :class:`KafkaStorageError`.
        self.offline = False
        self.had_clean_shutdown = False
        self.recovery_stats: dict[str, int] = {}
        #: Told (on the log's thread) when the log wants its :meth:`begin_roll_work` run; the
        #: log manager sets it. None: nothing is prepared ahead, every roll creates its files.
        self.on_roll_work: Callable[[PartitionLog], None] | None = None
        self._roll_work_asked = False  # told `on_roll_work`, begin_roll_work not called yet
        self._roll_work_running = False  # begun, not committed
        #: The next segment is wanted (half way), or was tried since the last roll.
        self._next_wanted = False
        self._next_tried = False
        #: The sizes of the next segment's files made ahead (``next.*.prepared``), if any.
        self._prepared: tuple[int, int, int] | None = None
        #: The producer snapshots of the rolls since the last roll work, to write: (offset,
        #: path, bytes, the truncation count then: a truncation since voids it).
        self._pending_snapshots: list[PendingSnapshot] = []
        #: The cuts of rolled segments' files to their data, for the next roll work.
        self._pending_trims: list[SegmentTrims] = []
        #: Rolls that adopted prepared files, and rolls that created their files themselves.
        self.rolls_prepared = 0
        self.rolls_inline = 0

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        handles: FileHandles | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
        had_clean_shutdown: bool = False,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        cleaner_checkpoint: int | None = None,
    ) -> PartitionLog:
        """Open the log in `directory` (created if missing), recovering it if needed.

        The keyword offsets are the log directory's checkpoints (the log manager passes them;
        the defaults mean "unknown": the whole log is scanned, the high watermark starts at the
        log start offset). With `had_clean_shutdown` nothing is scanned.
        """
        owns = handles is None
        pool = FileHandles() if handles is None else handles
        self = cls(directory, config, pool, now_ms, owns_handles=owns, opened_ms=now_ms())
        try:
            loaded = load_partition_dir(
                directory,
                config,
                pool,
                now_ms=now_ms(),
                had_clean_shutdown=had_clean_shutdown,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
            )
        except OSError as e:
            raise KafkaStorageError(f"cannot load {directory}: {e}") from e
        self._segments = loaded.segments
        self._bases = [s.base_offset for s in loaded.segments]
        self._log_start = loaded.log_start_offset
        self._leo = loaded.log_end_offset
        self._recovery_point = loaded.recovery_point
        self.leader_epoch_cache = loaded.leader_epoch_cache
        self.had_clean_shutdown = had_clean_shutdown
        self.recovery_stats = {
            "truncated_bytes": loaded.truncated_bytes,
            "dropped_segments": loaded.dropped_segments,
            "recovered_segments": loaded.recovered_segments,
        }
        hw = self._log_start if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, self._log_start), self._leo)
        cc = self._log_start if cleaner_checkpoint is None else cleaner_checkpoint
        self.cleaner_checkpoint = min(max(cc, self._log_start), self._leo)
        try:
            self._load_producer_state(had_clean_shutdown, loaded.txn_rebuild_from)
        except OSError as e:
            raise KafkaStorageError(f"cannot load the producer state of {directory}: {e}") from e
        return self

    @classmethod
    def create(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        handles: FileHandles,
        now_ms: Callable[[], int],
        created_ms: int,
    ) -> PartitionLog:
        """A new, empty log in `directory`, a directory just made: nothing in it is looked for
        (no scan, no recovery, no checkpoint or snapshot read), only the first segment's files
        are made. `now_ms` is not called: `created_ms` is the time (read by the caller, so
        this may run in a worker thread)."""
        self = cls(directory, config, handles, now_ms, owns_handles=False, opened_ms=created_ms)
        segment = LogSegment.create(directory, 0, config, handles, created_ms)
        segment.become_active()
        self._segments = [segment]
        self._bases = [0]
        self.leader_epoch_cache = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
        self.had_clean_shutdown = True
        return self

    def _load_producer_state(
        self, had_clean_shutdown: bool, rebuild_from: int | None = None
    ) -> None:
        """Latest snapshot, then the batches after it. Without a snapshot after a clean
        shutdown only the last two segments are scanned (as Kafka does). `rebuild_from`: the
        segments from this offset were recovered and their transaction indexes emptied; the
        scan starts at or below it and refills them (Kafka's recoverSegment)."""
        producers = self.producer_state
        start = producers.load(self._log_start, self._leo, at_most=rebuild_from)
        if start < 0:
            start = self._log_start
            if had_clean_shutdown and len(self._segments) > 2:
                start = self._segments[-2].base_offset
        if start < self._leo:
            self._scan_producers(start, rebuild_from)
        producers.remove_expired(self._now_ms())
        producers.on_high_watermark(self._high_watermark)

    def _scan_producers(self, start: int, rebuild_from: int | None) -> None:
        producers = self.producer_state
        for seg in self._segments:
            if seg.next_offset <= start:
                continue
            first = seg.translate_offset(start) if seg.base_offset < start else None
            with seg.log.use() as fd:
                position = 0 if first is None else first.position
                for base, update in _producer_updates(fd, position, seg.size, start, seg):
                    done = producers.update(update)
                    if done is not None and rebuild_from is not None and base >= rebuild_from:
                        _index_aborted(seg, done)

    # ---- offsets ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (a copy of the list; do not modify the segments)."""
        return list(self._segments)

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: ``(epoch, end_offset)`` against the current log end offset,
        ``(-1, -1)`` when unknown (see :meth:`LeaderEpochCache.end_offset_for`)."""
        return self.leader_epoch_cache.end_offset_for(leader_epoch, self._leo)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest transaction not yet decided (or
        decided by a marker not yet below the high watermark), but never past the high
        watermark nor before the log start offset; the high watermark without such a one."""
        state = self.producer_state
        if not state.ongoing and not state.unreplicated:  # no transactions: the common case
            return self._high_watermark
        first = state.first_unstable_offset
        if first is None:
            return self._high_watermark
        return min(max(first, self._log_start), self._high_watermark)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, log end]; return the new value."""
        self._set_high_watermark(offset)
        return self._high_watermark

    def _set_high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self._log_start), self._leo)
        self.producer_state.on_high_watermark(self._high_watermark)

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config (segment-shape settings apply from the next roll)."""
        self.config = config

    def _check_open(self) -> None:
        if self.closed:
            if self.offline:
                raise KafkaStorageError(f"log {self.dir} is in an offline log directory")
            raise LogClosedError(f"log {self.dir} is closed")

    # ---- appends ---------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        now_ms: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        sync: bool | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendInfo:
        """Validate `records`, assign offsets from the log end offset (in place, in the
        caller's buffer when it is writable), stamp `leader_epoch`, append.

        `sync`: fsync before returning (True), don't (False), or as
        ``wirebroker.fsync.before.ack`` says (None). `verification_guard`: the KIP-890 guard a
        transactional batch brings (see :mod:`storage.producer_state`; None: verification is
        off). Raises the errors listed in
        :mod:`storage.validation`, :class:`RecordBatchTooLargeError` and
        :class:`KafkaStorageError`; on any error nothing was written.
        """
        self._check_open()
        v = validate_leader_append(
            records,
            next_offset=self._leo,
            leader_epoch=leader_epoch,
            now_ms=now_ms,
            config=self.config,
            origin=origin,
        )
        producers = producer_batches(v.data)
        client = origin is AppendOrigin.CLIENT
        for update in producers:  # a client append holds exactly one batch
            duplicate = self.producer_state.check(update, client=client, guard=verification_guard)
            if duplicate is not None:
                return self._duplicate_info(duplicate)
        previous_end = self._leo
        self._append(v, now_ms)
        self._update_producers(producers, previous_end)
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, v.first_offset)
        return self._after_append(v, now_ms, sync, previous_end)

    def _duplicate_info(self, batch: BatchMetadata) -> AppendInfo:
        log_append = self.config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
        return AppendInfo(
            batch.first_offset,
            batch.last_offset,
            batch.timestamp,
            batch.last_offset,
            batch.timestamp if log_append else NO_TIMESTAMP,
            self._log_start,
            0,
            0,
            duplicate=True,
        )

    def append_as_follower(
        self, records: bytes | bytearray | memoryview, *, sync: bool | None = None
    ) -> AppendInfo:
        """Append replicated batches as they are (offsets, epochs, timestamps kept), on this
        thread (:meth:`begin_follower_append` with its write run here).

        A trailing partial batch is ignored (``valid_bytes`` says how much was taken). Raises
        :class:`CorruptRecordError`, :class:`OffsetsOutOfOrderError`,
        :class:`UnexpectedAppendOffsetError` (first offset below the log end offset),
        :class:`RecordBatchTooLargeError` and :class:`KafkaStorageError`.
        """
        append = self.begin_follower_append(records, sync=sync)
        if append is None:
            return AppendInfo(-1, -1, NO_TIMESTAMP, -1, NO_TIMESTAMP, self._log_start, 0, 0)
        run_chore(append)
        assert append.info is not None  # the commit raised otherwise
        return append.info

    def begin_follower_append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        sync: bool | None = None,
        write_behind: bool = False,
    ) -> FollowerAppend | None:
        """:meth:`append_as_follower` with its write as a chore (a :class:`FollowerAppend`):
        the batches are checked here (CRCs, offsets against the log end offset) and the
        segment rolled if due; :meth:`FollowerAppend.prepare` writes them (``pwrite`` of
        `records` itself, never copied) through the pinned descriptor of the active segment,
        off this thread; :meth:`FollowerAppend.commit` indexes them and moves the log end
        offset, the producer state and the leader epochs (and flushes, if due). Until then
        the log is :attr:`writing` and reads as before the append. `write_behind`: the write
        also starts its pages' write-back (:func:`~storage.write_back.start_write_back`), for
        a log flushed whole soon after (a move's copy). None if `records` hold no whole
        batch. Raises as :meth:`append_as_follower`; on an error nothing was written."""
        self._check_open()
        if self._writer is not None:  # the caller's bug: one writer per log
            raise RuntimeError(f"append to {self.dir.name} while a worker thread writes it")
        now_ms = self._now_ms()
        v = analyze_follower_append(records)
        if not v.metas:
            return None
        if v.first_offset < self._leo:
            raise UnexpectedAppendOffsetError(
                f"follower append starts at offset {v.first_offset}, below the log end offset "
                f"{self._leo}",
                first_offset=v.first_offset,
                last_offset=v.last_offset,
            )
        seg = self._segment_for(v, now_ms)
        fd = seg.begin_append()
        self._writer = FollowerAppend(self, v, seg, fd, now_ms, sync, write_behind)
        return self._writer

    def _complete_follower_append(self, append: FollowerAppend) -> None:
        self._writer = None
        append.segment.log.release()
        self._check_open()  # abandoned meanwhile (its log directory failed): not appended
        if append.error is not None:
            raise KafkaStorageError(
                f"append to {append.segment.log.path} failed: {append.error}"
            ) from append.error
        v = append.validated
        producers = producer_batches(v.data)
        previous_end = self._leo
        append.segment.appended(v.metas)
        self._appended(append.segment, v, append.now_ms)
        self._update_producers(producers, previous_end)
        cache = self.leader_epoch_cache
        if v.has_legacy:
            cache.clear()
        else:
            for epoch, offset in v.epochs:
                cache.assign(epoch, offset)
        append.info = self._after_append(v, append.now_ms, append.sync, previous_end)

    def _append(self, v: ValidatedAppend, now_ms: int) -> None:
        if self._writer is not None:  # the caller's bug: one writer per log
            raise RuntimeError(f"append to {self.dir.name} while a worker thread writes it")
        seg = self._segment_for(v, now_ms)
        seg.append(v.data, v.metas)
        self._appended(seg, v, now_ms)

    def _segment_for(self, v: ValidatedAppend, now_ms: int) -> LogSegment:
        """The segment `v` goes to: the active one, rolled first if due."""
        size = len(v.data)
        config = self.config
        if size > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {size} bytes exceeds segment.bytes ({config.segment_bytes})"
            )
        seg = self._segments[-1]
        if seg.should_roll(
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
            append_size=size,
            max_timestamp=v.max_timestamp,
            max_offset=v.last_offset,
            now_ms=now_ms,
        ):
            seg = self._roll(max(v.first_offset, self._leo), now_ms)
        return seg

    def _appended(self, seg: LogSegment, v: ValidatedAppend, now_ms: int) -> None:
        """`v` is in `seg`: the log end offset moves past it."""
        config = self.config
        self._leo = v.last_offset + 1
        self._unflushed_messages += v.records_count
        if (
            not self._next_tried
            and self.on_roll_work is not None
            and seg.half_way_to_roll(
                segment_bytes=config.segment_bytes,
                segment_ms=config.segment_ms,
                max_timestamp=v.max_timestamp,
                now_ms=now_ms,
            )
        ):
            self._next_tried = self._next_wanted = True
            self._ask_roll_work()

    def _update_producers(self, updates: list[BatchUpdate], previous_end: int) -> None:
        """Apply appended batches to the producer state; a transaction an ABORT marker ended
        goes into the active segment's transaction index. If that write fails the append is
        taken back (the log end returns to `previous_end`) and KafkaStorageError raised."""
        segment = self._segments[-1]
        for update in updates:
            done = self.producer_state.update(update)
            if done is None:
                continue
            try:
                _index_aborted(segment, done)
            except OSError as e:
                log.error("%s: cannot write the transaction index: %s", self.dir.name, e)
                try:
                    self.truncate_to(previous_end)
                except (OSError, KafkaStorageError) as e2:
                    raise KafkaStorageError(f"cannot take back an append: {e2}") from e
                raise KafkaStorageError(f"transaction index write failed: {e}") from e

    def _after_append(
        self, v: ValidatedAppend, now_ms: int, sync: bool | None, previous_end: int
    ) -> AppendInfo:
        """Flush if due. A flush that fails takes the append back out (the log end returns
        to `previous_end`), so the error is reported before the log end advances and a retry
        writes the records once."""
        config = self.config
        if (
            sync
            or (sync is None and config.fsync_before_ack)
            or (
                self._unflushed_messages >= config.flush_messages
                or now_ms - self._last_flush_ms >= config.flush_ms
            )
        ):
            try:
                self.flush()
            except KafkaStorageError:
                log.error("%s: taking back the append at %d", self.dir.name, v.first_offset)
                try:
                    self.truncate_to(previous_end)
                except (OSError, KafkaStorageError) as e:
                    raise KafkaStorageError(f"cannot take back an append: {e}") from e
                raise
        return AppendInfo(
            v.first_offset,
            v.last_offset,
            v.max_timestamp,
            v.offset_of_max_timestamp,
            v.log_append_time,
            self._log_start,
            v.records_count,
            len(v.data),
        )

    # ---- rolling ---------------------------------------------------------------------------

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new segment at the log end offset (no-op if the active one is empty)."""
        self._check_open()
        return self._roll(self._leo, self._now_ms() if now_ms is None else now_ms)

    def _roll(self, base_offset: int, now_ms: int) -> LogSegment:
        old = self._segments[-1]
        if old.size == 0 and old.base_offset == base_offset:
            return old
        try:
            old.become_inactive(defer_trims=self.on_roll_work is not None)
        except OSError as e:
            old.become_active()
            raise KafkaStorageError(f"cannot roll {old.log.path}: {e}") from e
        try:
            new = self._adopt_prepared(base_offset, now_ms)
            if new is None:
                new = LogSegment.create(self.dir, base_offset, self.config, self.handles, now_ms)
                self.rolls_inline += 1
        except KafkaStorageError:
            old.become_active()
            raise
        # The segment after this one is made now (with this roll's snapshot), while this one
        # fills; `_next_tried` keeps its half way from asking again.
        self._next_tried = self._next_wanted = True
        self._segments.append(new)
        self._bases.append(base_offset)
        self._dir_dirty = True
        if self.on_roll_work is None:
            self._snapshot_producers(base_offset, fsync=False)
        else:
            if base_offset != self.producer_state.last_snapshot_offset:
                path, data = self.producer_state.encode_snapshot(base_offset)
                self._pending_snapshots.append((base_offset, path, data, self.truncations))
            if old.trims is not None:
                self._pending_trims.append(old.trims)
            self._ask_roll_work()
        return new

    def _adopt_prepared(self, base_offset: int, now_ms: int) -> LogSegment | None:
        """The new segment made of the files prepared ahead, if they are there and of the
        sizes the config asks for now; None: the caller creates it."""
        sizes, self._prepared = self._prepared, None
        if sizes is None or sizes != segment_file_sizes(self.config):
            return None
        try:
            new = LogSegment.adopt(self.dir, base_offset, self.config, self.handles, now_ms, sizes)
        except KafkaStorageError as e:
            log.warning("%s: %s (creating the segment instead)", self.dir.name, e)
            return None
        self.rolls_prepared += 1
        return new

    def _ask_roll_work(self) -> None:
        if not (self._roll_work_asked or self._roll_work_running) and self.on_roll_work:
            self._roll_work_asked = True
            self.on_roll_work(self)

    def begin_roll_work(self) -> RollWork | None:
        """What the last roll and the next one leave to a worker thread (a
        :class:`~storage.chore.Chore`, see :mod:`storage.roll_work`): the producer snapshot
        taken at the last roll, the next segment's files once wanted; None if nothing is to
        do or it is being done."""
        self._roll_work_asked = False
        if self.closed or self._roll_work_running:
            return None
        sizes = None
        if self._next_wanted and self._prepared is None:
            sizes = segment_file_sizes(self.config)
        self._next_wanted = False
        snapshots, self._pending_snapshots = self._pending_snapshots, []
        trims, self._pending_trims = self._pending_trims, []
        if sizes is None and not snapshots and not trims:
            return None
        self._roll_work_running = True
        return RollWork(self, self.dir, sizes, snapshots, trims)

    def _roll_work_done(self, work: RollWork) -> None:
        """Adopt what `work` made: the next segment's files (a failure is not retried before
        the next roll), the snapshot renamed into place unless a truncation voided it."""
        self._roll_work_running = False
        if self.closed:
            return  # the temporary snapshot and prepared files: removed at the next open
        if work.sizes is not None and work.error is None:
            self._prepared = work.sizes
        for offset, path, _data, truncations in work.written:
            tmp = snapshot_tmp(path)
            if truncations != self.truncations or offset < self._log_start:
                self._obsolete_snapshots.append((self._delete_due(self._now_ms()), tmp))
            else:
                try:
                    os.replace(tmp, path)
                    self.producer_state.snapshot_written(offset)
                except OSError as e:
                    log.warning("%s: cannot rename the producer snapshot: %s", path, e)
        if (
            self._pending_snapshots
            or self._pending_trims
            or (self._next_wanted and self._prepared is None)
        ):
            self._ask_roll_work()

    def _snapshot_producers(self, offset: int, *, fsync: bool) -> None:
        # A lost snapshot only costs a longer scan at the next open: never fail for it.
        try:
            self.producer_state.take_snapshot(offset, fsync=fsync)
        except OSError as e:
            log.warning("%s: cannot write the producer snapshot at %d: %s", self.dir, offset, e)

    # ---- reads -----------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        aborted_transactions: bool = False,
    ) -> ReadResult:
        """File slices from the batch holding `offset`, at most `max_bytes` (but the whole
        first batch if `min_one_batch`), below `max_offset` (the high watermark or the last
        stable offset for consumers; default: the log end offset). Continues into the next
        segments (up to ``MAX_READ_SEGMENTS``) when a segment is read to its end. With
        `aborted_transactions` the result also lists the aborted transactions the slices may
        hold, from the transaction indexes (nothing is decoded). Release the result (or use it
        as a context manager).

        Raises :class:`OffsetOutOfRangeError` for `offset` outside [log start, log end].
        """
        self._check_open()
        leo = self._leo
        if offset < self._log_start or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.dir.name}: log start "
                f"{self._log_start}, log end {leo}"
            )
        limit = leo if max_offset is None else min(max_offset, leo)
        result = ReadResult(aborted_transactions=[] if aborted_transactions else None)
        if offset >= limit:
            return result
        segs = self._segments
        if limit == leo:
            end_index, end_pos = len(segs) - 1, segs[-1].size
        else:
            end_seg, end_pos = self._position_of(limit)
            end_index = bisect_right(self._bases, end_seg.base_offset) - 1
        i = max(0, bisect_right(self._bases, offset) - 1)
        budget = max_bytes
        first = True
        stop_index = stop_pos = 0  # where the read ended: segment index, byte position
        try:
            while i <= end_index:
                seg = segs[i]
                seg_end = end_pos if i == end_index else seg.size
                if first:
                    located = seg.locate(offset)
                    if located is None:
                        i += 1
                        continue
                    start, batch_size, base_offset = located
                    if start >= seg_end:
                        break
                    allowed = max(budget, batch_size) if min_one_batch else budget
                    result.first_batch_offset = base_offset
                else:
                    start = 0
                    allowed = budget
                length = min(seg_end - start, allowed)
                if length <= 0:
                    break
                result.slices.append(FileSlice(seg.log, start, length))
                result.size += length
                budget -= length
                first = False
                stop_index, stop_pos = i, start + length
                if stop_pos < seg_end or budget <= 0:
                    break
                if len(result.slices) >= MAX_READ_SEGMENTS:
                    break
                i += 1
            if result.aborted_transactions is not None and result.slices:
                if stop_index == end_index and stop_pos == end_pos:
                    upper = limit
                else:
                    upper = self._upper_bound(stop_index, stop_pos)
                result.aborted_transactions = self.aborted_transactions(offset, upper)
        except BaseException:
            result.release()
            raise
        return result

    def lookup_reads(self, offset: int) -> LookupReads | None:
        """What a read from `offset` would wait on the disk for before its slices (an old
        segment's offset index not in memory, the batch headers not in the page cache), else
        None: a caller on the event loop runs it in a worker thread first (`LookupReads.run`,
        then `finish` on the loop)."""
        if self.closed or not self._segments or not self._log_start <= offset < self._leo:
            return None  # the read itself answers (an offline directory, out of range)
        return self._segments[max(0, bisect_right(self._bases, offset) - 1)].lookup_reads(offset)

    def _upper_bound(self, index: int, position: int) -> int:
        """An offset no batch ending before `position` in segment `index` reaches (Kafka's
        fetch upper bound): the first offset index entry from there, else the next segment's
        base offset, else the log end offset."""
        found = self._segments[index].offset_index.upper_bound_offset(position)
        if found is not None:
            return found
        return self._bases[index + 1] if index + 1 < len(self._bases) else self._leo

    def aborted_transactions(self, offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[offset, upper_bound)`` (Kafka's
        collectAbortedTransactions): from the segment holding `offset` on, until an index
        says every transaction started below `upper_bound` has ended."""
        out: list[AbortedTxn] = []
        for seg in self._segments[max(0, bisect_right(self._bases, offset) - 1) :]:
            if seg.txn_index.collect(offset, upper_bound, out):
                break
        return out

    def _position_of(self, offset: int) -> tuple[LogSegment, int]:
        """Segment and byte position of the batch holding `offset` (end of its floor segment
        if no batch does): where a read bounded by `offset` stops."""
        cache = self._position_cache
        cached = cache.get(offset)
        if cached is not None:
            return cached
        i = max(0, bisect_right(self._bases, offset) - 1)
        seg = self._segments[i]
        located = seg.locate(offset)
        pos = seg.size if located is None else located[0]
        if seg is not self._segments[-1] or located is not None:
            if len(cache) >= 2:
                del cache[next(iter(cache))]
            cache[offset] = (seg, pos)
        return seg, pos

    def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets: -1 latest (log end offset), -2 earliest, -3 the record with the max
        timestamp, -4 earliest local; otherwise the first offset whose timestamp is >=
        `timestamp`. None when nothing matches."""
        self._check_open()
        cache = self.leader_epoch_cache
        if timestamp == EARLIEST_TIMESTAMP:
            entry = cache.earliest_entry
            epoch = entry.epoch if entry and entry.start_offset <= self._log_start else None
            return OffsetAndTimestamp(self._log_start, NO_TIMESTAMP, epoch)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            epoch_for = cache.epoch_for_offset(self._log_start)
            return OffsetAndTimestamp(self._log_start, NO_TIMESTAMP, epoch_for)
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(self._leo, NO_TIMESTAMP, cache.latest_epoch)
        if timestamp == MAX_TIMESTAMP:
            best = max(self._segments, key=lambda s: s.max_timestamp_so_far)
            if best.max_timestamp_so_far < 0:
                return None
            found = best.max_timestamp_record()
            return None if found is None else OffsetAndTimestamp(*found)
        if timestamp < 0:
            return None
        for seg in self._from_log_start():
            if seg.max_timestamp_so_far >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self._log_start)
                if found is not None:
                    return OffsetAndTimestamp(*found)
        return None

    def _from_log_start(self) -> list[LogSegment]:
        """The segments from the one holding the log start offset on (by base offsets: no
        segment's end is read)."""
        return self._segments[max(0, bisect_right(self._bases, self._log_start) - 1) :]

    def timestamp_reads(self, timestamp: int) -> TimestampReads | LookupReads | None:
        """What :meth:`offset_for_timestamp` of `timestamp` (>= 0, or -3) would wait on the disk
        for next, else None: the time index entries of old segments not in memory (their last
        entries, the whole index of the segment that reaches `timestamp`; for -3 every last
        entry), then the reads finding the offset that index gives (as :meth:`lookup_reads`). A caller on the event
        loop runs each in a worker thread (`run`, then `finish` on the loop) and asks again;
        the lookup then reads what is in memory and in the page cache."""
        if self.closed:
            return None
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_reads()
        if timestamp < 0:
            return None
        unknown: list[LogSegment] = []
        for seg in self._from_log_start():
            largest = seg.known_max_timestamp()
            if largest is None:
                unknown.append(seg)
            elif largest >= timestamp:
                if unknown:
                    return TimestampReads(timestamp, [*unknown, seg])
                return seg.timestamp_reads(timestamp, self._log_start)
        return TimestampReads(timestamp, unknown) if unknown else None

    def _max_timestamp_reads(self) -> TimestampReads | LookupReads | None:
        """ListOffsets -3's reads: every segment's largest timestamp (the time indexes' last
        entries), then the reads finding the record that holds the largest."""
        unknown = [seg for seg in self._segments if seg.known_max_timestamp() is None]
        if unknown:
            return TimestampReads(_NEVER, unknown, whole_index=False)
        best = max(self._segments, key=lambda s: s.max_timestamp_so_far)
        if best.max_timestamp_so_far < 0:
            return None
        return best.lookup_reads(best.offset_of_max_timestamp, best.max_timestamp_so_far)

    def retention_reads(self, now_ms: int) -> TimestampReads | None:
        """What :meth:`apply_retention` at `now_ms` would wait on the disk for, else None: by
        ``retention.ms`` it asks each segment from the log start for its largest timestamp up
        to the first one not expired, which after a start is its time index's last entry,
        still in the file (or, for a segment without timestamps, its file's mtime). A caller
        on the event loop reads them in a worker thread (`run`, then `finish` on the loop)
        first."""
        config = self.config
        if self.closed or not config.delete or config.retention_ms < 0:
            return None
        return TimestampReads.for_largest(self._from_log_start(), now_ms - config.retention_ms)

    def compaction_reads(self, now_ms: int) -> TimestampReads | None:
        """What :meth:`begin_compaction` at `now_ms` would wait on the disk for, else None:
        the largest timestamps of the dirty segments ``min.compaction.lag.ms`` looks at (see
        :func:`storage.cleaner.compaction_reads`; read in a worker thread as
        :meth:`retention_reads`)."""
        from storage.cleaner import compaction_reads

        return None if self.closed else compaction_reads(self, now_ms)

    # ---- truncation and deletion -----------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: remove every batch whose last offset is >= `offset` (a batch
        straddling it goes whole) and set the log end offset to `offset`. Returns whether
        anything changed. Its file work is done on this thread (see
        :meth:`begin_truncation`)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        if offset >= self._leo:
            return False
        truncation = self.begin_truncation(offset)
        if truncation is not None:
            run_chore(truncation)
        return True

    @property
    def writing(self) -> bool:
        """A worker thread writes the log's files (a truncation's, :meth:`begin_truncation`,
        or a follower append's, :meth:`begin_follower_append`): nothing else may append to,
        truncate, flush, compact or apply retention to the log until that committed."""
        return self._writer is not None

    def begin_truncation(self, offset: int) -> Truncation | None:
        """:meth:`truncate_to` with its file work as a chore (a :class:`Truncation`): the log
        reads as truncated at once (the segments above `offset` renamed to ``.deleted``, the
        offsets and caches cut); :meth:`Truncation.prepare` cuts the last kept segment's files,
        deletes the producer snapshots above `offset` and rebuilds the producer state from the
        snapshot and batches below it, off this thread; :meth:`Truncation.commit` installs
        that state. Until then the log is :attr:`writing`. A truncation below the first
        segment or the log start offset starts the log over at `offset`
        (:meth:`begin_full_truncation`). None when there is nothing to truncate."""
        self._check_open()
        if self._writer is not None:
            raise RuntimeError(f"{self.dir.name} is being written by a worker thread already")
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        if offset >= self._leo:
            return None
        if offset < self._segments[0].base_offset or offset < self._log_start:
            return self.begin_full_truncation(offset)
        keep = bisect_right(self._bases, offset)
        for seg in self._segments[keep:]:
            self._delete_segment(seg)
        del self._segments[keep:]
        del self._bases[keep:]
        seg = self._segments[-1]
        cuts = seg.begin_truncation(offset)
        if not seg.active:
            seg.become_active()
        self._leo = offset
        self._truncated_in_memory()
        truncation = self._writer = Truncation(
            self,
            offset,
            cuts,
            [(s.log.path, s.base_offset, s.size) for s in self._segments],
        )
        return truncation

    def _complete_truncation(self, truncation: Truncation) -> None:
        self._writer = None
        for renames in truncation.renames:
            for path, error in renames.failed:
                log.error("%s: cannot rename %s to delete it: %s", self.dir.name, path, error)
        due = self._delete_due(self._now_ms())
        for seg in truncation.deleted:  # their renames are made: unlinked in due time
            if self.closed:
                seg.release_files()
            else:
                self._pending_deletes.append((due, seg))
        if self.closed:  # abandoned meanwhile (its log directory failed)
            return
        if truncation.producers is None:
            raise KafkaStorageError(
                f"truncating {self.dir.name} to {truncation.offset} failed: {truncation.error}"
            ) from truncation.error
        producers = truncation.producers
        producers.verifications = self.producer_state.verifications
        self.producer_state = producers
        producers.remove_expired(self._now_ms())
        producers.on_high_watermark(self._high_watermark)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and start an empty log at `offset` (log start = end = offset). Its
        file work is done on this thread (see :meth:`begin_full_truncation`)."""
        run_chore(self.begin_full_truncation(offset))

    def begin_full_truncation(self, offset: int) -> Truncation:
        """:meth:`truncate_fully_and_start_at` with its file work as a chore (a
        :class:`Truncation`, as :meth:`begin_truncation`'s): the log reads as an empty log at
        `offset` at once (every segment forgotten, offsets, epochs and caches reset, the new
        segment in memory); :meth:`Truncation.prepare` renames the old segments' files to
        ``.deleted`` -- after what the removal chore has not renamed yet of segments deleted
        from the start: the new segment may take the name of one -- makes the new segment's
        files, and loads the producer state (the snapshot at `offset`, if any; the others
        deleted); :meth:`Truncation.commit` installs it. Until then the log is
        :attr:`writing`."""
        self._check_open()
        if self._writer is not None:  # the caller's bug: one writer per log
            raise RuntimeError(f"{self.dir.name} is being written by a worker thread")
        self.take_renames()
        old = self._segments
        renames = [
            *self._renaming,
            SegmentRenames([seg.renamed_elsewhere(DELETED_SUFFIX) for seg in old]),
        ]
        self._renaming = []
        for seg in old:
            seg.active = False
            seg.log.detach(self._unclosed)
        config = self.config
        new = LogSegment.create(self.dir, offset, config, self.handles, self._now_ms(), make=False)
        self._segments = [new]
        self._bases = [offset]
        self._dir_dirty = True
        self._leo = offset
        self._log_start = offset
        self.leader_epoch_cache.clear()
        self._truncated_in_memory()
        files = new.new_files(config)
        truncation = self._writer = Truncation(
            self, offset, [], [(new.log.path, offset, 0)], renames=renames, files=files
        )
        truncation.deleted = old
        return truncation

    def _truncated_in_memory(self) -> None:
        leo = self._leo
        self._high_watermark = min(max(self._high_watermark, self._log_start), leo)
        self._recovery_point = min(self._recovery_point, leo)
        self.cleaner_checkpoint = min(max(self.cleaner_checkpoint, self._log_start), leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        self._position_cache.clear()
        self.truncations += 1

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: advance the log start offset to `offset` (-1: the high watermark),
        deleting segments wholly below it. Returns the new log start offset. Raises
        :class:`OffsetOutOfRangeError` if `offset` is above the high watermark."""
        self._check_open()
        if offset == -1:
            offset = self._high_watermark
        if offset < 0 or offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot increment the log start offset to {offset} of {self.dir.name}: it is "
                f"larger than the high watermark {self._high_watermark}"
            )
        if offset > self._log_start:
            self._log_start = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self.producer_state.on_high_watermark(offset)
            self.cleaner_checkpoint = max(self.cleaner_checkpoint, offset)
            now = self._now_ms()
            plan = plan_retention(
                self._segments,
                self.config.replace(cleanup_policy=("compact",)),
                now_ms=now,
                log_start_offset=self._log_start,
                high_watermark=self._high_watermark,
                log_end_offset=self._leo,
            )
            self._delete_oldest(plan.count, now)
        return self._log_start

    def apply_retention(self, now_ms: int) -> int:
        """Delete the segments retention allows (log start, ``retention.bytes``,
        ``retention.ms``); their files are unlinked later (:meth:`take_deleted_files`).
        Returns the number of segments deleted."""
        self._check_open()
        self.producer_state.remove_expired(now_ms)
        plan = plan_retention(
            self._segments,
            self.config,
            now_ms=now_ms,
            log_start_offset=self._log_start,
            high_watermark=self._high_watermark,
            log_end_offset=self._leo,
        )
        if plan.count:
            log.info("%s: deleting %d segment(s): %s", self.dir.name, plan.count, plan.reasons)
        return self._delete_oldest(plan.count, now_ms)

    def _delete_oldest(self, count: int, now_ms: int) -> int:
        if count <= 0:
            return 0
        if count >= len(self._segments):
            self._roll(self._leo, now_ms)
        victims = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        due = self._delete_due(now_ms)
        for seg in victims:  # renamed and closed by the removal chore: no file call here
            seg.active = False
            seg.log.detach(self._unclosed)
            self._pending_deletes.append((due, seg))
        self._unrenamed += victims
        first = self._segments[0].base_offset
        if first > self._log_start:
            self._log_start = first
            self.leader_epoch_cache.truncate_from_start(first)
        self._set_high_watermark(max(self._high_watermark, self._log_start))
        self._recovery_point = max(self._recovery_point, min(self._log_start, self._leo))
        self.cleaner_checkpoint = max(self.cleaner_checkpoint, self._log_start)
        self._position_cache.clear()
        pending = {path for _when, path in self._obsolete_snapshots}
        for path in self.producer_state.snapshots_before(self._log_start):
            if path not in pending:
                self._obsolete_snapshots.append((self._delete_due(now_ms), path))
        return count

    def _delete_due(self, now_ms: int) -> int:
        """When a file deleted now is to be unlinked (``file.delete.delay.ms`` later)."""
        return now_ms + max(0, self.config.file_delete_delay_ms)

    def _delete_segment(self, seg: LogSegment, now_ms: int | None = None) -> None:
        """Rename to ``.deleted`` here and forget it now (readers holding slices keep their
        descriptors): a truncation's and a compaction's, whose segments' names are taken
        again at once (segments deleted from the start are renamed off this thread: see
        :meth:`take_renames`); its files are unlinked off the log's thread once
        ``file.delete.delay.ms`` passed (:meth:`take_deleted_files`), as Kafka's async delete."""
        seg.active = False
        seg.rename_suffix(DELETED_SUFFIX)
        seg.log.detach(self._unclosed)
        now = self._now_ms() if now_ms is None else now_ms
        self._pending_deletes.append((self._delete_due(now), seg))

    def take_descriptors(self) -> list[int]:
        """The open descriptors of deleted segments' files, taken out of the file handle pool
        since the last call (their segments were forgotten; a pinned one stays a reader's and
        closes at its release), for the caller to close off this thread (the removal
        chore). Until then they count in no pool's bound; a close of the log closes them."""
        descriptors, self._unclosed = self._unclosed, []
        return descriptors

    def _close_descriptors(self) -> None:
        for fd in self.take_descriptors():
            with contextlib.suppress(OSError):
                os.close(fd)

    def take_renames(self) -> SegmentRenames | None:
        """The renames to ``.deleted`` of the segments deleted from the start of the log
        (retention, DeleteRecords) since the last call, for the removal chore's worker thread
        (:class:`~storage.chore.SegmentRenames`): until then they were forgotten in memory only
        (readers no longer find them) and keep their names. A crash in between leaves them
        under their names, wholly below the log start offset the next start reads from its
        checkpoint (or, with an older checkpoint, back as they were before their deletion, as
        after a crash just before it): retention deletes them again. Nothing else may take
        their names meanwhile: a truncation, which may make a segment of the same base offset,
        and a close rename what is left on this thread first; a deletion of the partition
        cancels it."""
        self._renaming = [r for r in self._renaming if not r.done]
        if not self._unrenamed:
            return None
        renames = SegmentRenames([seg.renamed_elsewhere(DELETED_SUFFIX) for seg in self._unrenamed])
        self._unrenamed = []
        self._renaming.append(renames)
        return renames

    def _finish_renames(self, *, cancel: bool = False) -> None:
        """Rename (or with `cancel`, leave) what :meth:`take_renames` left to do, here, now.
        A file that cannot be renamed stays under its name (a new segment of that base
        offset replaces it; recovery deletes it below the log start)."""
        self.take_renames()
        for renames in self._renaming:
            for path, error in renames.run_here(cancel=cancel):
                log.error("%s: cannot rename %s to delete it: %s", self.dir.name, path, error)
        self._renaming = []

    def take_deleted_files(self, now_ms: int) -> list[Path]:
        """The files of deleted segments whose ``file.delete.delay.ms`` passed, their
        descriptors closed, and the producer snapshots below the log start offset, for the
        caller to unlink in a worker thread (see :class:`~storage.chore.RemoveDeleted`). A
        segment a reader still pins waits for its release: the last close of an unlinked
        file frees its blocks, which is the slow part and must not happen on the log's
        thread. Of the segments deleted from the start it returns the names
        :meth:`take_renames` gave them: the removal chore renames before it unlinks."""
        due = [path for when, path in self._obsolete_snapshots if when <= now_ms]
        self._obsolete_snapshots = [(w, p) for w, p in self._obsolete_snapshots if w > now_ms]
        keep: list[tuple[int, LogSegment]] = []
        for when, seg in self._pending_deletes:
            if when <= now_ms and not seg.log.is_open and seg not in self._unrenamed:
                due += seg.release_files(self._unclosed)
            else:
                keep.append((when, seg))
        self._pending_deletes = keep
        return due

    # ---- compaction ------------------------------------------------------------------------

    def begin_compaction(
        self, now_ms: int, *, force: bool = False, max_map_keys: int = DEFAULT_MAX_MAP_KEYS
    ) -> Compaction | None:
        """A compaction pass (a :class:`~storage.chore.Chore`) if ``cleanup.policy`` includes
        compact and the dirty ratio reaches ``min.cleanable.dirty.ratio`` (or `force`); None
        if there is nothing to do. See :mod:`storage.cleaner` (imported here, by the first
        pass: start-up time, docs/perf-notes.md)."""
        from storage.cleaner import plan_compaction

        self._check_open()
        return plan_compaction(self, now_ms, force=force, max_map_keys=max_map_keys)

    def compact(self, now_ms: int, *, force: bool = False) -> int:
        """One compaction pass on this thread; returns the number of bytes removed."""
        pass_ = self.begin_compaction(now_ms, force=force)
        if pass_ is None:
            return 0
        run_chore(pass_)
        return pass_.removed

    def install_cleaned(self, old: list[LogSegment], cleaned: LogSegment, now_ms: int) -> None:
        """Swap `cleaned` (its files still ``.cleaned``) in for `old`, as Kafka does: rename it
        ``.swap``, the old segments ``.deleted``, then the swap files into place (recovery
        finishes a swap interrupted by a crash)."""
        cleaned.rename_suffix(SWAP_SUFFIX)
        first = self._segments.index(old[0])
        self._segments[first : first + len(old)] = [cleaned]
        self._bases = [s.base_offset for s in self._segments]
        self._position_cache.clear()
        for seg in old:
            self._delete_segment(seg, now_ms)
        cleaned.rename_suffix("")

    # ---- flushing --------------------------------------------------------------------------

    def begin_flush(self, up_to: int | None = None) -> PendingFlush | None:
        """Prepare fsyncs making everything below `up_to` (default: the log end offset)
        durable; None if nothing needs it. See :class:`PendingFlush`."""
        self._check_open()
        end = self._leo if up_to is None else min(up_to, self._leo)
        if end <= self._recovery_point and not self._dir_dirty:
            return None
        pending = PendingFlush(self, end)
        pending.epochs = self.leader_epoch_cache.begin_write()
        if pending.epochs is not None:
            pending.paths.append(pending.epochs.path)
            self._dir_dirty = True
        try:
            segs = self._segments
            for i, seg in enumerate(segs):
                seg_end = self._bases[i + 1] if i + 1 < len(segs) else self._leo
                if seg_end <= self._recovery_point:
                    continue
                if seg.base_offset >= end:
                    break
                seg.persist_indexes()
                pending.paths += (
                    seg.log.path,
                    seg.offset_index.path,
                    seg.time_index.path,
                    seg.txn_index.path,
                )
                if i + 1 < len(segs):  # the producer snapshot taken when it rolled
                    pending.paths.append(segment_file(self.dir, seg_end, SNAPSHOT_SUFFIX))
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.dir} failed: {e}") from e
        if self._dir_dirty:
            pending.directory = self.dir
            self._dir_dirty = False
        return pending

    def _complete_flush(self, pending: PendingFlush) -> None:
        """If the flush ran, advance the recovery point to what it covered."""
        if not pending.done:
            if pending.directory is not None:
                self._dir_dirty = True
            return
        if pending.up_to > self._recovery_point:
            self._recovery_point = min(pending.up_to, self._leo)
        if pending.up_to >= self._leo:
            self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()

    def flush(self, up_to: int | None = None) -> None:
        """fsync everything below `up_to` (default: all) and advance the recovery point."""
        pending = self.begin_flush(up_to)
        if pending is None:
            return
        try:
            run_chore(pending)
        except OSError as e:
            raise KafkaStorageError(f"fsync in {self.dir} failed: {e}") from e

    # ---- closing ---------------------------------------------------------------------------

    def close(self, *, fsync: bool = True) -> None:
        """Flush, finish the active segment's indexes, release every descriptor.

        With ``fsync=False`` everything is written but nothing fsynced: the caller syncs the
        file system once for many logs and then calls :meth:`mark_flushed` (the log
        manager's shutdown does that). Deleted segments not yet unlinked stay as ``.deleted``
        files that recovery removes at the next open (Kafka drops its pending deletes at
        shutdown too)."""
        if self.closed:
            return
        self._finish_renames()
        if fsync:
            self.flush()
        self.leader_epoch_cache.flush(fsync=fsync)
        self._snapshot_producers(self._leo, fsync=fsync)
        for seg in self._segments:
            seg.close()
        for _due, seg in self._pending_deletes:  # left as ``.deleted``: recovery removes them
            seg.release_files()
        self._close_descriptors()
        self.closed = True
        if self._owns_handles:
            self.handles.close_all()

    def mark_flushed(self) -> None:
        """Declare everything durable (after the caller synced the file system)."""
        self._recovery_point = self._leo
        self._unflushed_messages = 0

    def abandon(self) -> None:
        """Drop the log without flushing or writing anything (what a crash leaves behind);
        for tests and for a failed log directory."""
        self._finish_renames(cancel=True)  # left as they are: recovery deletes them
        for seg in self._segments:
            seg.release_files()
        for _due, seg in self._pending_deletes:
            seg.release_files()
        self._close_descriptors()
        self.closed = True
        if self._owns_handles:
            self.handles.close_all()

    def delete(self, *, stray: bool = False) -> Path:
        """Remove the partition: rename its directory to ``<name>.<uuid>-delete`` and return
        the new path, for the caller to remove (off the log's thread: see
        :class:`~storage.chore.RemoveDeleted`); with `stray`, to ``<name>.<uuid>-stray``, to
        be kept. Open file slices stay readable until released."""
        self._finish_renames(cancel=True)  # the directory goes, and its name may come back
        for seg in self._segments:
            seg.release_files()  # its indexes' descriptors too (the pool is shared)
        for _due, seg in self._pending_deletes:
            seg.release_files()
        self._close_descriptors()
        self.closed = True
        target = self.dir
        tp = self.topic_partition
        if tp is not None:
            target = self.dir.with_name((stray_dir_name if stray else delete_dir_name)(*tp))
            os.rename(self.dir, target)
            if stray:  # at start-up; a deletion's removal chore fsyncs it (off the loop)
                fsync_dir(target.parent)
        if self._owns_handles:
            self.handles.close_all()
        return target

    @property
    def relocatable(self) -> bool:
        """Nothing names its files off this thread or later (no writer, roll work, pending
        snapshot, deleted segment or rename): :meth:`relocate` may rename its directory."""
        return not (
            self._writer is not None
            or self._roll_work_asked
            or self._roll_work_running
            or self._pending_snapshots
            or self._pending_trims
            or self._pending_deletes
            or self._unrenamed
            or self._renaming
            or self._obsolete_snapshots
        )

    def relocate(self, directory: Path) -> None:
        """Rename the log's directory to `directory` (on the same file system) and name every
        file there; open descriptors stay valid. Only when :attr:`relocatable` (Kafka's
        ``LocalLog.renameDir``: a future replica becoming the current one)."""
        if not self.relocatable:
            raise RuntimeError(f"{self.dir.name} has file work under way: not relocatable")
        os.rename(self.dir, directory)
        self.dir = directory
        self.topic_partition = parse_partition_dir(directory.name)
        self.producer_state.dir = directory
        self.leader_epoch_cache.path = directory / LEADER_EPOCH_CHECKPOINT
        for seg in self._segments:
            seg.moved_to(directory)

    def take_over_from(self, current: PartitionLog) -> None:
        """Become the copy of `current` it has caught up with (same log end offset): take its
        high watermark, log start offset, cleaner checkpoint and leader epochs (an epoch may
        start at the log end offset with no batch yet); the batches, producer state and
        aborted transactions came with the follower appends."""
        if self._leo != current._leo:
            raise RuntimeError(f"{self.dir.name} has not caught up with {current.dir.name}")
        self._set_high_watermark(current._high_watermark)
        if current._log_start > self._log_start:
            self.delete_records_before(current._log_start)
        self.cleaner_checkpoint = max(current.cleaner_checkpoint, self._log_start)
        self.tombstone_horizon_ms = current.tombstone_horizon_ms
        for entry in current.leader_epoch_cache.entries:
            self.leader_epoch_cache.assign(entry.epoch, entry.start_offset)

    def statistics(self) -> dict[str, int]:
        return {
            "segments": len(self._segments),
            "size_in_bytes": self.size_in_bytes,
            "log_start_offset": self._log_start,
            "high_watermark": self._high_watermark,
            "log_end_offset": self._leo,
            "recovery_point": self._recovery_point,
            "unflushed_messages": self._unflushed_messages,
            "pending_deletes": len(self._pending_deletes),
            "rolls_prepared": self.rolls_prepared,
            "rolls_inline": self.rolls_inline,
        }

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.dir.name}, log_start={self._log_start}, "
            f"hw={self._high_watermark}, leo={self._leo}, segments={len(self._segments)})"
        )


class Truncation:
    """The file work of a follower's truncation (a :class:`~storage.chore.Chore`, made by
    :meth:`PartitionLog.begin_truncation` or :meth:`~PartitionLog.begin_full_truncation`,
    which already cut the log in memory).

    :meth:`prepare` touches files by path only, never the log, its segments or the file
    handle pool: for a full truncation it renames the old segments' files to ``.deleted``
    (`renames`) and makes the new segment's (`files`); otherwise it cuts the last kept
    segment's ``.log`` (freeing the blocks above `offset`,
    which may take as long as an unlink) and ``.txnindex``; then it builds a new producer state
    from the latest snapshot at or below `offset` and the batches after it -- deleting the
    snapshots above `offset` and unreadable ones, as a load does. :meth:`commit` installs the
    state, or, if a file operation failed, raises :class:`KafkaStorageError` (the caller takes
    the log directory offline for an I/O error, as Kafka's truncation failure does)."""

    __slots__ = (
        "log",
        "offset",
        "cuts",
        "segments",
        "renames",
        "files",
        "deleted",
        "log_start",
        "producers",
        "error",
    )

    def __init__(
        self,
        log: PartitionLog,
        offset: int,
        cuts: list[tuple[Path, int]],
        segments: list[tuple[Path, int, int]],
        *,
        renames: list[SegmentRenames] | None = None,
        files: list[tuple[Path, int]] | None = None,
    ) -> None:
        self.log = log
        self.offset = offset
        self.cuts = cuts
        #: (path, base offset, size) of every segment kept, the last one cut.
        self.segments = segments
        #: A full truncation's: the old segments' renames, the new segment's files to make.
        self.renames = renames or []
        self.files = files or []
        #: The segments it deleted, in the log's pending deletes once renamed.
        self.deleted: list[LogSegment] = []
        self.log_start = log.log_start_offset
        self.producers: ProducerStateManager | None = None
        self.error: OSError | None = None

    def prepare(self) -> None:
        for renames in self.renames:  # before the new files: one may take a name of theirs
            renames.run()
        try:
            for path, size in self.files:
                create_file(path, size)
            for path, size in self.cuts:
                with contextlib.suppress(FileNotFoundError):  # a transaction index never written
                    os.truncate(path, size)
            producers = ProducerStateManager(self.log.dir)
            start = producers.load(self.log_start, self.offset)
            start = max(start, self.log_start)
            ends = [base for _path, base, _size in self.segments[1:]] + [self.offset]
            for (path, _base, size), end in zip(self.segments, ends, strict=True):
                if end <= start:
                    continue
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    for _base, update in _producer_updates(fd, 0, size, start, path.name):
                        producers.update(update)
                finally:
                    os.close(fd)
            self.producers = producers
        except OSError as e:
            self.error = e

    def abort(self) -> None:
        pass  # short: cuts, and reads of at most about one segment's batch headers

    def commit(self) -> None:
        self.log._complete_truncation(self)


class FollowerAppend:
    """The write of a follower's append (a :class:`~storage.chore.Chore`, made by
    :meth:`PartitionLog.begin_follower_append`, which checked the batches and pinned the
    active segment's file).

    :meth:`prepare` writes the batches -- the caller's buffer, not a copy -- at the end of the
    segment through its pinned descriptor, never touching the log, the segment or the file
    handle pool, so it may run in a worker thread; a failed write is cut back and kept in
    :attr:`error`. :meth:`commit` releases the pin and commits the append (:attr:`info`), or,
    if the write failed, raises :class:`KafkaStorageError` (the caller takes the log directory
    offline for an I/O error other than a full disk, as for an append made inline)."""

    __slots__ = (
        "log",
        "validated",
        "segment",
        "fd",
        "position",
        "now_ms",
        "sync",
        "write_behind",
        "error",
        "info",
    )

    def __init__(
        self,
        log: PartitionLog,
        validated: ValidatedAppend,
        segment: LogSegment,
        fd: int,
        now_ms: int,
        sync: bool | None,
        write_behind: bool,
    ) -> None:
        self.log = log
        self.validated = validated
        self.segment = segment
        self.fd = fd
        self.position = segment.size
        self.now_ms = now_ms
        self.sync = sync
        #: Start the write-back of what :meth:`prepare` wrote.
        self.write_behind = write_behind
        self.error: OSError | None = None
        #: What was appended, once committed.
        self.info: AppendInfo | None = None

    def prepare(self) -> None:
        try:
            write_batches(self.fd, self.validated.data, self.position)
        except OSError as e:
            self.error = e
            return
        if self.write_behind:
            start_write_back(self.fd, self.position, len(self.validated.data))

    def abort(self) -> None:
        pass  # one write

    def commit(self) -> None:
        self.log._complete_follower_append(self)


def _producer_updates(
    fd: int, position: int, size: int, start: int, what: object
) -> Iterator[tuple[int, BatchUpdate]]:
    """The producer state updates (with their batches' base offsets) of the batches of the
    segment file `fd` from `position` whose last offset is at or above `start`."""
    for h in iter_file_headers(fd, position, size):
        if h.magic != 2 or h.last_offset < start:
            continue
        head = os.pread(fd, BATCH_HEADER_SIZE, h.position)
        if len(head) < BATCH_HEADER_SIZE:
            break
        if head[22] & CONTROL_MASK:  # a marker: its record is needed too
            head = os.pread(fd, h.size, h.position)
        try:
            update = batch_update(head)
        except CorruptRecordError as e:
            log.warning("%s: unreadable control batch at %d: %s", what, h.base_offset, e)
            continue
        if update is not None:
            yield h.base_offset, update


def _index_aborted(segment: LogSegment, done: CompletedTxn) -> None:
    """Kafka's updateTxnIndex: an aborted transaction goes into the marker's segment's index."""
    if done.is_aborted:
        segment.txn_index.append(
            AbortedTxn(
                done.producer_id, done.first_offset, done.last_offset, done.last_stable_offset
            )
        )
