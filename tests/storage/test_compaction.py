"""Log compaction: latest value per key, offsets preserved, tombstones after
delete.retention.ms, compact+delete, the dirty ratio, and a crash in the middle of a swap."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path

from protocol.records import RecordBatchView, iter_batches
from storage.config import LogConfig
from storage.partition_log import PartitionLog

from .helpers import T0, Clock, keyed, open_log, read_all

COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=600,
    index_interval_bytes=100,
    delete_retention_ms=1000,
    file_delete_delay_ms=0,
)


def _fill(
    log: PartitionLog, writes: Sequence[tuple[bytes, bytes | None]], per_batch: int = 3
) -> None:
    for i in range(0, len(writes), per_batch):
        log.append_as_leader(keyed(writes[i : i + per_batch]), 0, T0)
    log.update_high_watermark(log.log_end_offset)


def _latest(writes: Sequence[tuple[bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, (k, v) in enumerate(writes):
        out[k] = (offset, v)
    return out


def test_keeps_the_latest_value_per_key_with_offsets(tmp_path: Path) -> None:
    rng = random.Random(3)
    writes = [(b"key%d" % rng.randrange(8), b"v%d" % i) for i in range(120)]
    log = open_log(tmp_path / "t-0", COMPACT)
    _fill(log, writes)
    before = log.size_in_bytes
    active_base = log.active_segment.base_offset
    removed = log.compact(T0)
    assert removed > 0 and log.size_in_bytes == before - removed
    records = read_all(log)
    # The active segment is never cleaned, nor used to dedupe: below it, exactly the latest
    # record of each key among the records below it survives.
    latest = _latest(writes[:active_base])
    cleaned = [r for r in records if r.offset < active_base]
    expected = sorted(o for o, _ in latest.values())
    assert [r.offset for r in cleaned] == expected
    for r in records:
        assert (r.key, r.value) == writes[r.offset]  # offsets preserved
    assert log.log_end_offset == len(writes)
    # batch last offsets are kept, so the next append continues at the same offset
    assert log.append_as_leader(keyed([(b"x", b"y")]), 0, T0).first_offset == len(writes)
    assert not list((tmp_path / "t-0").glob("*.swap")) + list((tmp_path / "t-0").glob("*.cleaned"))
    log.close()
    again = open_log(tmp_path / "t-0", COMPACT, recovery_point=0)
    assert [(r.offset, r.value) for r in read_all(again)][: len(cleaned)] == [
        (r.offset, r.value) for r in cleaned
    ]
    again.close()


def test_tombstones_removed_after_delete_retention(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", COMPACT, clock)
    writes: list[tuple[bytes, bytes | None]] = [(b"a", b"1"), (b"b", b"1"), (b"a", None)]
    writes += [(b"c%d" % i, b"x" * 40) for i in range(30)]  # push a and b out of the active segment
    _fill(log, writes)
    log.compact(clock(), force=True)
    records = {r.key: r for r in read_all(log)}
    assert records[b"a"].value is None and records[b"a"].offset == 2  # tombstone kept
    assert records[b"b"].value == b"1"
    # its batch now carries a delete horizon of now + delete.retention.ms
    with log.read(2, 1000) as r:
        first = next(iter(iter_batches(r.read())))
    assert isinstance(first, RecordBatchView) and first.delete_horizon_ms == clock() + 1000
    log.compact(clock.advance(999), force=True)
    assert b"a" in {r.key for r in read_all(log)}
    log.compact(clock.advance(1), force=True)
    keys = {r.key for r in read_all(log)}
    assert b"a" not in keys and b"b" in keys
    log.close()


def test_compact_and_delete(tmp_path: Path) -> None:
    clock = Clock()
    config = COMPACT.replace(cleanup_policy=("compact", "delete"), retention_ms=10_000)
    log = open_log(tmp_path / "t-0", config, clock)
    _fill(log, [(b"k%d" % (i % 3), b"v%d" % i) for i in range(60)])
    assert log.compact(clock(), force=True) > 0
    segments = len(log.segments)
    assert log.apply_retention(T0 + 9_000) == 0
    # Segments emptied by compaction have no timestamp: their age is their file's mtime.
    wall = int(time.time() * 1000)
    assert log.apply_retention(wall + 20_000) == segments
    assert len(log.segments) == 1 and log.active_segment.size == 0
    log.close()


def test_dirty_ratio_and_checkpoint(tmp_path: Path) -> None:
    config = COMPACT.replace(min_cleanable_dirty_ratio=0.9)
    log = open_log(tmp_path / "t-0", config)
    _fill(log, [(b"k%d" % (i % 4), b"v" * 30) for i in range(80)])
    assert log.compact(T0) > 0  # all dirty: ratio 1.0
    checkpoint = log.cleaner_checkpoint
    assert checkpoint == log.active_segment.base_offset
    assert log.compact(T0) == 0  # nothing new is dirty
    _fill(log, [(b"k%d" % (i % 4), b"w" * 30) for i in range(4)])
    assert log.compact(T0) == 0  # too little dirty data for 0.9
    log.close()


def test_min_compaction_lag(tmp_path: Path) -> None:
    config = COMPACT.replace(min_compaction_lag_ms=60_000)
    log = open_log(tmp_path / "t-0", config)
    _fill(log, [(b"k", b"v%d" % i) for i in range(60)])
    assert log.compact(T0 + 1000, force=True) == 0  # every segment is younger than the lag
    assert log.compact(T0 + 120_000, force=True) > 0
    log.close()


def test_crash_after_swap_files_were_written(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", COMPACT)
    writes = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(90)]
    _fill(log, writes)
    log.close()
    reference = open_log(tmp_path / "ref-0", COMPACT)
    _fill(reference, writes)
    reference.compact(T0, force=True)
    expected = [(r.offset, r.value) for r in read_all(reference)]
    reference.close()
    # Replay the compaction's output as leftover .swap files next to the original segments.
    d = tmp_path / "t-0"
    for p in (tmp_path / "ref-0").iterdir():
        if (
            p.suffix in (".log", ".index", ".timeindex")
            and p.name < d.joinpath(sorted(x.name for x in d.glob("*.log"))[-1]).name
        ):
            (d / (p.name + ".swap")).write_bytes(p.read_bytes())
    log = open_log(d, COMPACT, had_clean_shutdown=True)
    assert [(r.offset, r.value) for r in read_all(log)] == expected
    log.close()
