"""Log compaction (``cleanup.policy=compact``): keep the latest record per key, offsets intact.

This module owns one cleaning pass over one partition log, following Kafka's ``LogCleaner``:

* the *dirty* section runs from the cleaner checkpoint to the first uncleanable offset (the
  active segment, the high watermark, or the first segment younger than
  ``min.compaction.lag.ms``); a pass runs when dirty bytes / total bytes reach
  ``min.cleanable.dirty.ratio``;
* an offset map (key -> latest offset) is built over the dirty section;
* every segment before the first uncleanable offset is rewritten, in groups that fit
  ``segment.bytes``, into ``<base>.log.cleaned`` (+ indexes): a record survives if no later
  record has its key, and a tombstone (null value) also survives until its batch's *delete
  horizon* -- set to now + ``delete.retention.ms`` the first time a pass keeps it (KIP-534, the
  v2 ``deleteHorizonMs`` batch field) -- has passed. Batches keep their base offset and last
  offset delta, so every surviving record keeps its offset; control batches are kept;
* a pass also runs, with nothing new to dedupe, once the earliest delete horizon it left
  behind has passed (Kafka cleans logs with expired tombstones in quiet periods too);
* the output is fsynced, renamed ``.swap``, the old segments renamed ``.deleted`` and the swap
  files renamed into place (recovery finishes an interrupted swap).

Simplifications (documented deviations): the offset map is an in-memory dict of the dirty
section's keys (Kafka bounds it by ``log.cleaner.dedupe.buffer.size`` and cleans in several
passes); aborted transactional data is not removed (we keep no ``.txnindex``); legacy (magic
0/1) entries are kept whole if any of their records survives; ``max.compaction.lag.ms`` does
not force cleaning. It must not decide when to run (the log manager's tick does).
"""

from __future__ import annotations

import logging
import os
import struct
from typing import TYPE_CHECKING

import crc32c

from protocol.record_batch import Record, RecordBatchView, SimpleRecord, TimestampType
from protocol.records import build_record_batch, iter_batches, iter_records
from storage.layout import CLEANED_SUFFIX, SWAP_SUFFIX
from storage.scan import iter_file_headers, read_batch
from storage.segment import BatchMeta, LogSegment

if TYPE_CHECKING:
    from storage.partition_log import PartitionLog

__all__ = ["clean_log", "cleanable_range"]

log = logging.getLogger(__name__)
_INT_MAX = 0x7FFFFFFF


def cleanable_range(plog: PartitionLog, now_ms: int) -> tuple[int, int]:
    """``(first_dirty, first_uncleanable)`` offsets for `plog` now."""
    segments = plog.segments
    first_dirty = max(plog.cleaner_checkpoint, plog.log_start_offset)
    limit = min(segments[-1].base_offset, plog.high_watermark)
    lag = plog.config.min_compaction_lag_ms
    if lag > 0:
        for seg in segments[:-1]:
            if seg.next_offset <= first_dirty:
                continue
            if seg.largest_timestamp() > now_ms - lag:
                limit = min(limit, seg.base_offset)
                break
    return first_dirty, limit


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


def _build_offset_map(
    segments: list[LogSegment], first_dirty: int, limit: int
) -> tuple[dict[bytes, int], int]:
    """key -> latest offset over [first_dirty, limit); and the last offset mapped."""
    latest: dict[bytes, int] = {}
    last = first_dirty - 1
    for i, seg in enumerate(segments):
        end = segments[i + 1].base_offset if i + 1 < len(segments) else seg.next_offset
        if end <= first_dirty or seg.base_offset >= limit:
            continue
        with seg.log.use() as fd:
            for h in iter_file_headers(fd, 0, seg.size):
                if h.last_offset < first_dirty:
                    continue
                if h.base_offset >= limit:
                    break
                for batch in iter_batches(read_batch(fd, h)):
                    if batch.is_control:
                        continue
                    for r in iter_records(batch):
                        if first_dirty <= r.offset < limit:
                            if r.key is not None:
                                latest[bytes(r.key)] = r.offset
                            last = max(last, r.offset)
    return latest, last


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
    struct.pack_into(">I", data, 17, crc32c.crc32c(memoryview(data)[21:]))
    return bytes(data)


def _filter_batch(
    raw: bytes, latest: dict[bytes, int], map_end: int, now_ms: int, delete_retention_ms: int
) -> bytes | None:
    """The batch to write for `raw` (itself, rebuilt, or None to drop it)."""
    out: list[bytes] = []
    for batch in iter_batches(raw):
        if batch.is_control:
            out.append(bytes(batch.buf))
            continue
        records = list(iter_records(batch))
        horizon = batch.delete_horizon_ms if isinstance(batch, RecordBatchView) else None
        kept: list[Record] = []
        tombstones = False
        for r in records:
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
        if not kept:
            continue
        if not isinstance(batch, RecordBatchView):
            out.append(bytes(batch.buf))  # legacy entries stay whole
            continue
        new_horizon = horizon
        if tombstones and horizon is None:
            new_horizon = now_ms + delete_retention_ms
        if len(kept) == len(records) and new_horizon == horizon:
            out.append(bytes(batch.buf))
        else:
            out.append(_rebuild(batch, kept, new_horizon))
    return b"".join(out) if out else None


def _group(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    groups: list[list[LogSegment]] = []
    for seg in segments:
        if groups:
            g = groups[-1]
            size = sum(s.size for s in g) + seg.size
            if size <= max_bytes and seg.next_offset - 1 - g[0].base_offset <= _INT_MAX:
                g.append(seg)
                continue
        groups.append([seg])
    return groups


def _fsync_segment(seg: LogSegment) -> None:
    with seg.log.use() as fd:
        os.fsync(fd)
    seg.persist_indexes(fsync=True)


def clean_log(plog: PartitionLog, now_ms: int, *, force: bool = False) -> int:
    """One compaction pass over `plog` (see the module doc); returns bytes removed."""
    config = plog.config
    if not config.compact:
        return 0
    segments = plog.segments
    first_dirty, limit = cleanable_range(plog, now_ms)
    horizon = plog.tombstone_horizon_ms
    tombstones_due = horizon is not None and horizon <= now_ms
    if first_dirty >= limit:
        if not (force or tombstones_due):
            return 0
        limit = first_dirty  # nothing new to dedupe: only drop expired tombstones
    elif (
        not force
        and not tombstones_due
        and _dirty_ratio(segments, first_dirty, limit) < config.min_cleanable_dirty_ratio
    ):
        return 0
    latest, map_end = _build_offset_map(segments, first_dirty, limit)
    to_clean = [s for s in segments[:-1] if s.base_offset < limit]
    before = sum(s.size for s in to_clean)
    after = 0
    horizons: list[int] = []
    for group in _group(to_clean, config.segment_bytes):
        cleaned = LogSegment.create(
            plog.dir,
            group[0].base_offset,
            config,
            plog.handles,
            now_ms,
            suffix=CLEANED_SUFFIX,
            active=False,
        )
        for seg in group:
            _copy_filtered(
                seg, cleaned, latest, map_end, now_ms, config.delete_retention_ms, horizons
            )
        cleaned.become_inactive()
        _fsync_segment(cleaned)
        mtime = os.stat(group[-1].log.path).st_mtime_ns
        os.utime(cleaned.log.path, ns=(mtime, mtime))
        cleaned.rename_suffix(SWAP_SUFFIX)
        plog._replace_segments(group, [cleaned])
        for seg in group:
            plog._delete_segment(seg, now_ms)
        cleaned.rename_suffix("")
        after += cleaned.size
    plog.cleaner_checkpoint = max(plog.cleaner_checkpoint, map_end + 1, first_dirty)
    plog.tombstone_horizon_ms = min(horizons) if horizons else None
    removed = before - after
    log.info("%s: compacted %d bytes into %d", plog.dir.name, before, after)
    return removed


def _copy_filtered(
    source: LogSegment,
    target: LogSegment,
    latest: dict[bytes, int],
    map_end: int,
    now_ms: int,
    delete_retention_ms: int,
    horizons: list[int],
) -> None:
    with source.log.use() as fd:
        for h in iter_file_headers(fd, 0, source.size):
            raw = read_batch(fd, h)
            kept = _filter_batch(raw, latest, map_end, now_ms, delete_retention_ms)
            if kept is None:
                continue
            metas: list[BatchMeta] = []
            for b in iter_batches(kept):
                if isinstance(b, RecordBatchView):
                    if b.delete_horizon_ms is not None:
                        horizons.append(b.delete_horizon_ms)
                    metas.append((b.size_in_bytes, b.base_offset, b.last_offset, b.max_timestamp))
                else:
                    metas.append((b.size_in_bytes, b.offset, b.offset, b.timestamp))
            target.append(kept, metas)
