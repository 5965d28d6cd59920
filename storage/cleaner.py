"""Log compaction (``cleanup.policy=compact``): keep the latest record per key, offsets intact.

This module owns one cleaning pass over one partition log, following Kafka's ``LogCleaner``:

* the *dirty* section runs from the cleaner checkpoint to the first uncleanable offset (the
  active segment, the last stable offset, or the first segment younger than
  ``min.compaction.lag.ms``); a pass runs when dirty bytes / total bytes reach
  ``min.cleanable.dirty.ratio``;
* an offset map (key -> latest offset) is built over the dirty section, holding at most
  ``log.cleaner.dedupe.buffer.size`` / 24 bytes (Kafka's entry: an MD5 of the key and an offset)
  x ``log.cleaner.io.buffer.load.factor`` keys; when the dirty section has more distinct keys,
  the pass stops mapping where the map filled, cleans up to there, and the next pass continues
  from that offset (Kafka does the same);
* every segment before the end of the mapped section is rewritten, in groups that fit
  ``segment.bytes``, into ``<base>.log.cleaned`` (+ indexes): a record survives if no later
  record has its key, and a tombstone (null value) also survives until its batch's *delete
  horizon* -- set to now + ``delete.retention.ms`` the first time a pass keeps it (KIP-534, the
  v2 ``deleteHorizonMs`` batch field) -- has passed. Batches keep their base offset and last
  offset delta, so every surviving record keeps its offset; control batches are kept;
* transactions, as Kafka's ``CleanedTransactionMetadata``: nothing at or after the last stable
  offset is cleaned (an open transaction's data stays); the batches of aborted transactions
  (known from the transaction indexes) are left out of the offset map and removed; an ABORT
  marker stays, and is written to the cleaned segment's ``.txnindex``, while its
  transaction's batches are being removed, and a COMMIT marker while its transaction has
  data in the log; after that a marker is kept only until its own delete horizon (set the
  first time a pass finds it removable) has passed. The last batch of each active producer
  is kept as an empty batch (header only) when all its records go, so that its sequence
  and epoch survive, as Kafka keeps them;
* a pass also runs, with nothing new to dedupe, once the earliest delete horizon it left
  behind has passed (Kafka cleans logs with expired tombstones in quiet periods too);
* the output is fsynced, renamed ``.swap``, the old segments renamed ``.deleted`` and the swap
  files renamed into place (recovery finishes an interrupted swap).

A pass is a :class:`~storage.chore.Chore` (:class:`Compaction`): :func:`plan_compaction`, on the
log's thread, picks the range and the segments; :meth:`Compaction.prepare` builds the map and
the ``.cleaned`` files, reading the segments through descriptors of its own (so it may run in
a worker thread while the log keeps changing); :meth:`Compaction.commit`, back on the log's
thread, swaps them in -- unless the log was closed, truncated, or lost one of the segments
meanwhile (retention, DeleteRecords), in which case the work is discarded.

Simplifications (documented deviations): the map holds the keys themselves (bounded in count
as Kafka's is in bytes); legacy (magic 0/1) entries are kept whole if any of their records
survives;
``max.compaction.lag.ms`` does not force cleaning. It must not decide when to run (the broker's
housekeeping does).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.checksum import crc32c
from protocol.record_batch import Record, RecordBatchView, SimpleRecord, TimestampType
from protocol.record_builder import ControlRecordType, build_empty_batch, decode_control_record_key
from protocol.records import Batch, build_record_batch, iter_batches, iter_records
from storage.errors import KafkaStorageError
from storage.file_handles import FileHandles
from storage.layout import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from storage.scan import iter_file_headers, read_batch
from storage.segment import BatchMeta, LogSegment, TimestampReads
from storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from storage.partition_log import PartitionLog

__all__ = [
    "Compaction",
    "cleanable_range",
    "compaction_reads",
    "plan_compaction",
]

log = logging.getLogger(__name__)
_INT_MAX = 0x7FFFFFFF


@dataclass(frozen=True)
class _Source:
    """A segment to clean, as the plan saw it (``prepare`` reads the file by its path)."""

    segment: LogSegment
    path: Path
    base_offset: int
    end_offset: int
    size: int


@contextmanager
def _opened(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _first_dirty(plog: PartitionLog) -> int:
    return max(plog.cleaner_checkpoint, plog.log_start_offset)


def _dirty_inactive(plog: PartitionLog, first_dirty: int) -> list[LogSegment]:
    """The inactive segments from the one holding `first_dirty` (Kafka's
    ``nonActiveLogSegmentsFrom``): found by base offsets, no segment's end is read."""
    segments = plog.segments
    first = max(0, bisect_right([s.base_offset for s in segments], first_dirty) - 1)
    return segments[first:-1]


def cleanable_range(plog: PartitionLog, now_ms: int) -> tuple[int, int]:
    """``(first_dirty, first_uncleanable)`` offsets for `plog` now."""
    first_dirty = _first_dirty(plog)
    limit = min(plog.active_segment.base_offset, plog.last_stable_offset)
    lag = plog.config.min_compaction_lag_ms
    if lag > 0:
        for seg in _dirty_inactive(plog, first_dirty):
            if seg.largest_timestamp() > now_ms - lag:
                limit = min(limit, seg.base_offset)
                break
    return first_dirty, limit


def compaction_reads(plog: PartitionLog, now_ms: int) -> TimestampReads | None:
    """What :func:`cleanable_range` at `now_ms` would wait on the disk for, else None: the
    largest timestamps ``min.compaction.lag.ms`` asks the dirty segments for, up to the first
    one too young, which after a start are their time indexes' last entries (or their files'
    mtimes), for a caller on the event loop to read in a worker thread first."""
    lag = plog.config.min_compaction_lag_ms
    if not plog.config.compact or lag <= 0:
        return None
    return TimestampReads.for_largest(_dirty_inactive(plog, _first_dirty(plog)), now_ms - lag + 1)


def _dirty_ratio(segments: list[LogSegment], first_dirty: int, limit: int) -> float:
    clean = dirty = 0
    for i, seg in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
        if end <= first_dirty:
            clean += seg.size
        elif seg.base_offset < limit:
            dirty += seg.size
    total = clean + dirty
    return dirty / total if total else 0.0


class _Aborted(Exception):
    """:meth:`Compaction.abort` was called while the pass was being prepared."""


def _between_batches(aborted: threading.Event) -> None:
    """Stop if the pass was aborted; else hand the GIL over for a moment. A pass walks every
    record in Python, in a worker thread beside the broker's event loop: yielding once per
    batch keeps the loop's waits for the GIL to one batch's work, not CPython's 5 ms switch
    interval each time it wants the GIL back (several times per request)."""
    if aborted.is_set():
        raise _Aborted
    time.sleep(0)


class _Transactions:
    """Kafka's CleanedTransactionMetadata: the transactions a pass walks through, in log
    order, from the aborted ones the transaction indexes list."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        #: Aborted transactions under way: producer id -> [the transaction, batches seen].
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, list[bool]]] = {}
        self._ongoing_committed: set[int] = set()
        #: Where retained ABORT markers' transactions go (the cleaned segment's index).
        self.index: list[AbortedTxn] = []

    def _consume_up_to(self, offset: int) -> None:
        aborted = self._aborted
        while self._next < len(aborted) and aborted[self._next].first_offset <= offset:
            txn = aborted[self._next]
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, [False]))
            self._next += 1

    def on_data(self, batch: Batch) -> bool:
        """A data batch: True if it belongs to an aborted transaction (it goes)."""
        self._consume_up_to(batch.last_offset)
        if not isinstance(batch, RecordBatchView) or not batch.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing[1][0] = True
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def on_control(self, batch: RecordBatchView) -> bool:
        """A control batch: True if it may go (once its delete horizon passed)."""
        self._consume_up_to(batch.last_offset)
        record = next(iter_records(batch), None)
        if record is None:
            return True  # emptied by an earlier pass
        _version, control_type = decode_control_record_key(record.key)
        pid = batch.producer_id
        if control_type == ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1][0]:
                self.index.append(ongoing[0])  # its batches go in this pass: keep it
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False


#: Per active producer: the last offset of its last data batch (-1: none) and its epoch.
LastBatches = dict[int, tuple[int, int]]


def _is_last_of_producer(batch: RecordBatchView, last: LastBatches) -> bool:
    """Kafka's isBatchLastRecordOfProducer: the batch holding an active producer's last
    sequence, or its last marker (its latest epoch)."""
    found = last.get(batch.producer_id)
    if found is None:
        return False
    last_offset, epoch = found
    if last_offset >= 0:
        return batch.last_offset == last_offset
    return batch.is_control and batch.producer_epoch == epoch


def _build_offset_map(
    sources: list[_Source],
    first_dirty: int,
    limit: int,
    max_keys: int,
    txns: _Transactions,
    aborted: threading.Event,
) -> tuple[dict[bytes, int], int, bool]:
    """key -> latest offset over [first_dirty, limit), at most `max_keys` keys, leaving out
    aborted transactions; the last offset mapped; whether the map filled before `limit`."""
    latest: dict[bytes, int] = {}
    last = first_dirty - 1
    for src in sources:
        if src.end_offset <= first_dirty:
            continue
        with _opened(src.path) as fd:
            for h in iter_file_headers(fd, 0, src.size):
                if h.last_offset < first_dirty:
                    continue
                if h.base_offset >= limit:
                    break
                _between_batches(aborted)
                for batch in iter_batches(read_batch(fd, h)):
                    if isinstance(batch, RecordBatchView) and batch.is_control:
                        txns.on_control(batch)
                        continue
                    if txns.on_data(batch):
                        last = max(last, batch.last_offset)
                        continue
                    for r in iter_records(batch):
                        if first_dirty <= r.offset < limit:
                            if r.key is not None:
                                key = bytes(r.key)
                                if len(latest) >= max_keys and key not in latest:
                                    return latest, last, True
                                latest[key] = r.offset
                            last = max(last, r.offset)
    return latest, last, False


def _rebuild(batch: RecordBatchView, kept: list[Record], horizon: int | None) -> bytes:
    """`batch` holding only `kept`, same base offset and last offset delta."""
    lat = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    data = bytearray(
        build_record_batch(
            [SimpleRecord(r.key, r.value, r.headers, r.timestamp) for r in kept],
            base_offset=batch.base_offset,
            partition_leader_epoch=batch.partition_leader_epoch,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
            compression=batch.compression,
            timestamp_type=batch.timestamp_type,
            log_append_time=batch.max_timestamp if lat else None,
            offset_deltas=[r.offset - batch.base_offset for r in kept],
            delete_horizon_ms=horizon,
        )
    )
    struct.pack_into(">i", data, 23, batch.last_offset_delta)
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    return bytes(data)


def _filter_batch(
    raw: bytes,
    latest: dict[bytes, int],
    map_end: int,
    now_ms: int,
    delete_retention_ms: int,
    txns: _Transactions,
    last_batches: LastBatches,
) -> bytes | None:
    """The batch to write for `raw` (itself, rebuilt, emptied, or None to drop it)."""
    out: list[bytes] = []
    for batch in iter_batches(raw):
        if not isinstance(batch, RecordBatchView):
            txns.on_data(batch)
            if _kept_records(batch, latest, map_end, now_ms)[0]:
                out.append(bytes(batch.buf))  # legacy entries stay whole
            continue
        horizon = batch.delete_horizon_ms
        if batch.is_control:
            removable = txns.on_control(batch)
            drop_records = removable and horizon is not None and now_ms >= horizon
        else:
            removable = drop_records = txns.on_data(batch)
        records = list(iter_records(batch))
        if drop_records:
            kept: list[Record] = []
            tombstones = False
        elif batch.is_control:
            kept, tombstones = records, False
        else:
            kept, tombstones = _kept_records(batch, latest, map_end, now_ms)
        if not kept:
            if batch.has_producer_id and _is_last_of_producer(batch, last_batches):
                out.append(_emptied(batch))
            continue
        new_horizon = horizon
        if horizon is None and (tombstones or (removable and batch.is_control)):
            new_horizon = now_ms + delete_retention_ms
        if len(kept) == len(records) and new_horizon == horizon:
            out.append(bytes(batch.buf))
        else:
            out.append(_rebuild(batch, kept, new_horizon))
    return b"".join(out) if out else None


def _kept_records(
    batch: Batch, latest: dict[bytes, int], map_end: int, now_ms: int
) -> tuple[list[Record], bool]:
    """The records of a data batch that survive the offset map and their delete horizon;
    whether tombstones are among them."""
    horizon = batch.delete_horizon_ms if isinstance(batch, RecordBatchView) else None
    kept: list[Record] = []
    tombstones = False
    for r in iter_records(batch):
        if r.offset > map_end:
            kept.append(r)
            tombstones = tombstones or r.value is None
            continue
        if r.key is None or latest.get(bytes(r.key), -1) > r.offset:
            continue
        if r.value is None:
            if horizon is not None and now_ms >= horizon:
                continue
            tombstones = True
        kept.append(r)
    return kept, tombstones


def _emptied(batch: RecordBatchView) -> bytes:
    """Kafka's RETAIN_EMPTY: the batch's header with no records (offsets, producer, epoch,
    sequence and attributes kept)."""
    return build_empty_batch(
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        partition_leader_epoch=batch.partition_leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        timestamp_type=batch.timestamp_type,
        timestamp=batch.max_timestamp,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
    )


def _group(sources: list[_Source], max_bytes: int) -> list[list[_Source]]:
    groups: list[list[_Source]] = []
    for src in sources:
        if groups:
            g = groups[-1]
            size = sum(s.size for s in g) + src.size
            if size <= max_bytes and src.end_offset - 1 - g[0].base_offset <= _INT_MAX:
                g.append(src)
                continue
        groups.append([src])
    return groups


def plan_compaction(
    plog: PartitionLog, now_ms: int, *, force: bool, max_map_keys: int
) -> Compaction | None:
    """The next compaction pass over `plog` (see the module doc), or None if none is due."""
    config = plog.config
    if not config.compact:
        return None
    segments = plog.segments
    first_dirty, limit = cleanable_range(plog, now_ms)
    horizon = plog.tombstone_horizon_ms
    tombstones_due = horizon is not None and horizon <= now_ms
    if first_dirty >= limit:
        if not (force or tombstones_due):
            return None
        limit = first_dirty  # nothing new to dedupe: only drop expired tombstones
    elif (
        not force
        and not tombstones_due
        and _dirty_ratio(segments, first_dirty, limit) < config.min_cleanable_dirty_ratio
    ):
        return None
    sources = [
        _Source(seg, seg.log.path, seg.base_offset, segments[i + 1].base_offset, seg.size)
        for i, seg in enumerate(segments[:-1])
        if seg.base_offset < limit
    ]
    aborted = (
        plog.aborted_transactions(plog.log_start_offset, sources[-1].end_offset) if sources else []
    )
    last_batches = {
        pid: (entry.last_offset, entry.epoch)
        for pid, entry in plog.producer_state.producers.items()
    }
    return Compaction(
        plog, now_ms, first_dirty, limit, sources, max_map_keys, aborted, last_batches
    )


class Compaction:
    """One compaction pass, a :class:`~storage.chore.Chore`; made by :func:`plan_compaction`.

    After :meth:`commit`, ``removed`` is the number of bytes the pass removed (0 if its work
    was discarded).
    """

    def __init__(
        self,
        plog: PartitionLog,
        now_ms: int,
        first_dirty: int,
        limit: int,
        sources: list[_Source],
        max_keys: int,
        aborted: list[AbortedTxn],
        last_batches: LastBatches,
    ) -> None:
        self.log = plog
        self.config = plog.config
        self.dir = plog.dir
        self.now_ms = now_ms
        self.first_dirty = first_dirty
        self.limit = limit
        self.sources = sources
        self.max_keys = max_keys
        #: The aborted transactions overlapping the segments, from their indexes.
        self.aborted_txns = aborted
        self.last_batches = last_batches
        self.truncations = plog.truncations
        self.removed = 0
        #: Whether the offset map filled before the end of the dirty section.
        self.map_filled = False
        self._groups: list[list[_Source]] = []  # each cleaned into <its base>.log.cleaned
        self._map_end = first_dirty - 1
        self._horizons: list[int] = []
        self._aborted = threading.Event()
        self._done = False

    def prepare(self) -> None:
        """Build the offset map and the ``.cleaned`` segments (thread-safe)."""
        try:
            dirty_txns = _Transactions(
                [t for t in self.aborted_txns if t.last_offset >= self.first_dirty]
            )
            latest, self._map_end, self.map_filled = _build_offset_map(
                self.sources, self.first_dirty, self.limit, self.max_keys, dirty_txns, self._aborted
            )
            end = self._map_end + 1 if self.map_filled else self.limit
            txns = _Transactions(self.aborted_txns)
            pool = FileHandles(4)
            try:
                for group in _group(
                    [s for s in self.sources if s.base_offset < end], self.config.segment_bytes
                ):
                    self._groups.append(group)
                    self._clean_group(group, latest, txns, pool)
            finally:
                pool.close_all()
        except _Aborted:
            return  # commit discards the pass
        except FileNotFoundError:
            return  # retention or deletion removed a file meanwhile: commit discards the pass
        except (OSError, KafkaStorageError):
            if self.dir.exists():
                raise
            return  # the partition was deleted meanwhile: commit discards the pass
        self._done = True

    def abort(self) -> None:
        self._aborted.set()

    def _clean_group(
        self,
        group: list[_Source],
        latest: dict[bytes, int],
        txns: _Transactions,
        pool: FileHandles,
    ) -> None:
        config = self.config
        cleaned = LogSegment.create(
            self.dir,
            group[0].base_offset,
            config,
            pool,
            self.now_ms,
            suffix=CLEANED_SUFFIX,
            active=False,
        )
        txns.index = []
        for src in group:
            self._copy_filtered(src, cleaned, latest, txns)
        for txn in txns.index:
            cleaned.txn_index.append(txn)
        cleaned.become_inactive()
        with cleaned.log.use() as fd:
            os.fsync(fd)
        cleaned.persist_indexes(fsync=True)
        if txns.index:
            fd = os.open(cleaned.txn_index.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        cleaned.close()
        mtime = os.stat(group[-1].path).st_mtime_ns
        os.utime(cleaned.log.path, ns=(mtime, mtime))

    def _copy_filtered(
        self, source: _Source, target: LogSegment, latest: dict[bytes, int], txns: _Transactions
    ) -> None:
        retention_ms = self.config.delete_retention_ms
        with _opened(source.path) as fd:
            for h in iter_file_headers(fd, 0, source.size):
                _between_batches(self._aborted)
                raw = read_batch(fd, h)
                kept = _filter_batch(
                    raw, latest, self._map_end, self.now_ms, retention_ms, txns, self.last_batches
                )
                if kept is None:
                    continue
                metas: list[BatchMeta] = []
                for b in iter_batches(kept):
                    if isinstance(b, RecordBatchView):
                        if b.delete_horizon_ms is not None:
                            self._horizons.append(b.delete_horizon_ms)
                        metas.append(
                            (b.size_in_bytes, b.base_offset, b.last_offset, b.max_timestamp)
                        )
                    else:
                        metas.append((b.size_in_bytes, b.offset, b.offset, b.timestamp))
                target.append(kept, metas)

    def _stale(self) -> bool:
        """Did the log change meanwhile in a way that invalidates the pass?"""
        plog = self.log
        if plog.closed or plog.truncations != self.truncations:
            return True
        current = {id(seg): seg.size for seg in plog.segments}
        return any(
            current.get(id(src.segment)) != src.size for group in self._groups for src in group
        )

    def commit(self) -> None:
        """Swap the cleaned segments in, or discard them if the pass is stale or failed."""
        if not self._done or self._stale():
            for group in self._groups:
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    path = segment_file(self.dir, group[0].base_offset, suffix + CLEANED_SUFFIX)
                    path.unlink(missing_ok=True)
            if self._done:
                log.info("%s: log changed during compaction, discarding the pass", self.dir.name)
            return
        plog = self.log
        before = after = 0
        for group in self._groups:
            cleaned = LogSegment.open(
                self.dir,
                group[0].base_offset,
                self.config,
                plog.handles,
                suffix=CLEANED_SUFFIX,
                now_ms=self.now_ms,
            )
            plog.install_cleaned([src.segment for src in group], cleaned, self.now_ms)
            before += sum(src.size for src in group)
            after += cleaned.size
        plog.cleaner_checkpoint = max(plog.cleaner_checkpoint, self._map_end + 1, self.first_dirty)
        plog.tombstone_horizon_ms = min(self._horizons) if self._horizons else None
        self.removed = before - after
        log.info("%s: compacted %d bytes into %d", self.dir.name, before, after)
