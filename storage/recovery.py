"""Loading a partition directory: leftovers, segments, and crash recovery (Kafka's LogLoader).

This module owns turning a partition directory into an ordered list of segments plus the log's
start offset, end offset, recovery point and leader epoch cache:

1. leftovers: ``*.deleted`` files are removed; ``*.cleaned`` files (unfinished compaction) are
   removed; ``*.prepared`` files (a next segment made ahead, :mod:`storage.roll_work`: empty
   until a roll renames them) are removed; ``*.swap`` files (finished compaction not yet installed) replace the segments in
   their offset range; index files without a ``.log`` are removed;
2. segments are opened; one missing an index is recovered (its indexes rebuilt);
3. after an unclean shutdown, every segment from the one holding the recovery point onwards is
   scanned: framing, CRC and offsets of each batch are checked and its indexes rebuilt; at the
   first torn or corrupt batch the segment is cut and every later segment deleted. Their
   transaction indexes are emptied: the log refills them when it replays the producer state
   over them (``LoadedLog.txn_rebuild_from``). After a clean shutdown nothing is scanned except
   the tail of the active segment (one index interval);
4. the leader epoch cache is reconciled with the log's range.

It must not decide retention or touch other partitions; the log-directory checkpoints are read
by :mod:`storage.log_manager` and passed in.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from pathlib import Path

from storage.config import LogConfig
from storage.file_handles import FileHandles
from storage.layout import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    PREPARED_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_from_file_name,
)
from storage.leader_epoch import LeaderEpochCache
from storage.segment import LogSegment

__all__ = ["LoadedLog", "load_partition_dir"]

log = logging.getLogger(__name__)


class LoadedLog:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = (
        "dropped_segments",
        "leader_epoch_cache",
        "log_end_offset",
        "log_start_offset",
        "recovered_segments",
        "recovery_point",
        "segments",
        "truncated_bytes",
        "txn_rebuild_from",
    )

    def __init__(
        self,
        *,
        segments: list[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        leader_epoch_cache: LeaderEpochCache,
        truncated_bytes: int,
        dropped_segments: int,
        recovered_segments: int,
        txn_rebuild_from: int | None,
    ) -> None:
        self.segments = segments
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.leader_epoch_cache = leader_epoch_cache
        #: Bytes cut from torn or corrupt tails, and segments dropped after them.
        self.truncated_bytes = truncated_bytes
        self.dropped_segments = dropped_segments
        self.recovered_segments = recovered_segments
        #: Base offset of the first segment recovered after an unclean shutdown (its and the
        #: later segments' transaction indexes are to be rebuilt); None when none was.
        self.txn_rebuild_from = txn_rebuild_from


def _remove_leftovers_and_swap(directory: Path, config: LogConfig, handles: FileHandles) -> None:
    names = sorted(os.listdir(directory))
    swaps: list[str] = []
    for name in names:
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, PREPARED_SUFFIX)):
            (directory / name).unlink(missing_ok=True)
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(name)
    if not swaps:
        return
    low, high = None, None
    for name in swaps:
        base = offset_from_file_name(name)
        if base is None or not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        seg = LogSegment.open(directory, base, config, handles, suffix=SWAP_SUFFIX)
        try:
            end = seg.next_offset
        finally:
            seg.log.detach()
        low = base if low is None else min(low, base)
        high = end if high is None else max(high, end)
    if low is not None and high is not None:
        for name in os.listdir(directory):
            off = offset_from_file_name(name)
            if off is not None and not name.endswith(SWAP_SUFFIX) and low <= off < high:
                log.info("deleting %s, replaced by an interrupted compaction", name)
                (directory / name).unlink(missing_ok=True)
    for name in swaps:
        os.rename(directory / name, directory / name[: -len(SWAP_SUFFIX)])


def _open_segments(
    directory: Path, config: LogConfig, handles: FileHandles, now_ms: int
) -> tuple[list[LogSegment], int]:
    names = set(os.listdir(directory))
    segments: list[LogSegment] = []
    rebuilt = 0
    for name in sorted(names):
        base = offset_from_file_name(name)
        if base is None:
            continue
        stem = name[:20]
        if name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
            if stem + LOG_SUFFIX not in names:
                log.warning("removing orphaned index file %s", directory / name)
                (directory / name).unlink(missing_ok=True)
        elif name == stem + LOG_SUFFIX:
            seg = LogSegment.open(directory, base, config, handles, now_ms=now_ms)
            if not seg.indexes_exist():
                log.warning("rebuilding the missing indexes of %s", seg.log.path)
                seg.recover()
                rebuilt += 1
            segments.append(seg)
    return segments, rebuilt


def load_partition_dir(
    directory: Path,
    config: LogConfig,
    handles: FileHandles,
    *,
    now_ms: int,
    had_clean_shutdown: bool,
    recovery_point: int,
    log_start_offset: int,
) -> LoadedLog:
    """Open (and if needed recover) the partition log in `directory`; see the module doc.

    `recovery_point` and `log_start_offset` come from the log directory's checkpoints (0 when
    unknown: everything is then scanned).
    """
    directory.mkdir(parents=True, exist_ok=True)
    _remove_leftovers_and_swap(directory, config, handles)
    cache = LeaderEpochCache.load(directory / LEADER_EPOCH_CHECKPOINT)
    segments, recovered = _open_segments(directory, config, handles, now_ms)
    truncated = dropped = 0
    txn_rebuild_from = None

    if not had_clean_shutdown and segments:
        bases = [s.base_offset for s in segments]
        first = max(0, bisect_right(bases, recovery_point) - 1)
        txn_rebuild_from = bases[first]

        def on_epoch(epoch: int, offset: int) -> None:
            latest = cache.latest_epoch
            if latest is None or epoch > latest:
                cache.assign(epoch, offset)

        for i in range(first, len(segments)):
            seg = segments[i]
            seg.txn_index.reset()
            cut = seg.recover(on_epoch)
            recovered += 1
            if cut:
                truncated = cut
                log.warning(
                    "%s: cut %d bytes of torn or corrupt data; log ends at offset %d",
                    seg.log.path,
                    cut,
                    seg.next_offset,
                )
                for later in segments[i + 1 :]:
                    later.delete_files()
                    dropped += 1
                del segments[i + 1 :]
                break

    log_end = segments[-1].next_offset if segments else log_start_offset
    if segments and log_end < log_start_offset:
        log.warning(
            "%s: deleting all segments: log end %d is below the log start offset %d",
            directory,
            log_end,
            log_start_offset,
        )
        for seg in segments:
            seg.delete_files()
        segments = []
        cache.clear()
    if not segments:
        segments = [LogSegment.create(directory, log_start_offset, config, handles, now_ms)]
        log_end = log_start_offset
    active = segments[-1]
    active.become_active()
    log_end = active.next_offset
    cache.truncate_from_end(log_end)
    cache.truncate_from_start(log_start_offset)
    start = max(log_start_offset, segments[0].base_offset)
    point = log_end if had_clean_shutdown else min(recovery_point, log_end)
    return LoadedLog(
        segments=segments,
        log_start_offset=start,
        log_end_offset=log_end,
        recovery_point=point,
        leader_epoch_cache=cache,
        truncated_bytes=truncated,
        dropped_segments=dropped,
        recovered_segments=recovered,
        txn_rebuild_from=txn_rebuild_from,
    )
