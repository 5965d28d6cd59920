"""Log compaction: latest value per key, offsets preserved, tombstones after
delete.retention.ms, compact+delete, the dirty ratio, and a crash in the middle of a swap."""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from protocol.records import RecordBatchView, iter_batches
from storage.chore import run_chore
from storage.cleaner import Compaction
from storage.config import LogConfig, max_map_keys
from storage.log_manager import LogManager
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


def test_a_small_offset_map_cleans_in_several_passes(tmp_path: Path) -> None:
    """``log.cleaner.dedupe.buffer.size`` bounds the keys of one pass: each pass cleans up to
    where its map filled, the next continues from there, and the result is the same."""
    rng = random.Random(5)
    writes = [(b"key%d" % rng.randrange(20), b"v%d" % i) for i in range(300)]
    config = COMPACT.replace(min_cleanable_dirty_ratio=0.0)  # else later passes wait for dirt
    lm = LogManager([tmp_path], config, max_map_keys=max_map_keys(24 * 5, 0.9))
    lm.open()
    log = lm.get_or_create("t", 0)
    _fill(log, writes)
    active_base = log.active_segment.base_offset
    passes = list(_run_all(lm.compactions(T0)))
    assert len(passes) > 1 and all(p.map_filled for p in passes[:-1])
    assert log.cleaner_checkpoint == active_base
    records = read_all(log)
    latest = _latest(writes[:active_base])
    assert [r.offset for r in records if r.offset < active_base] == sorted(
        o for o, _ in latest.values()
    )
    for r in records:
        assert (r.key, r.value) == writes[r.offset]
    assert not list((tmp_path / "t-0").glob("*.cleaned"))
    lm.close()


def _run_all(passes: Iterator[Compaction]) -> Iterator[Compaction]:
    for p in passes:
        run_chore(p)
        yield p


def test_a_pass_is_discarded_if_the_log_changed_meanwhile(tmp_path: Path) -> None:
    """The slow part of a pass runs while the log keeps changing: appends are kept; a
    truncation, a deleted segment or a deleted log make the commit discard the pass."""
    writes = [(b"key%d" % (i % 4), b"v%d" % i) for i in range(90)]

    def fresh(name: str) -> PartitionLog:
        log = open_log(tmp_path / name, COMPACT)
        _fill(log, writes)
        return log

    log = fresh("append-0")
    pass_ = log.begin_compaction(T0)
    assert pass_ is not None
    pass_.prepare()
    log.append_as_leader(keyed([(b"late", b"x")]), 0, T0)
    pass_.commit()
    assert pass_.removed > 0 and read_all(log)[-1].key == b"late"
    log.close()

    log = fresh("truncate-0")
    pass_ = log.begin_compaction(T0)
    assert pass_ is not None
    pass_.prepare()
    assert list((tmp_path / "truncate-0").glob("*.cleaned"))
    log.truncate_to(log.log_end_offset - 1)  # a follower truncating during the pass
    before = [(r.offset, r.key, r.value) for r in read_all(log)]
    pass_.commit()
    assert pass_.removed == 0 and [(r.offset, r.key, r.value) for r in read_all(log)] == before
    assert not list((tmp_path / "truncate-0").glob("*.cleaned"))
    log.close()

    log = fresh("retention-0")
    pass_ = log.begin_compaction(T0)
    assert pass_ is not None
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(log.segments[1].base_offset)  # the first segment goes
    run_chore(pass_)
    assert pass_.removed == 0 and not list((tmp_path / "retention-0").glob("*.cleaned"))
    assert read_all(log)[0].offset == log.log_start_offset
    log.close()

    log = fresh("deleted-0")
    pass_ = log.begin_compaction(T0)
    assert pass_ is not None
    shutil.rmtree(log.delete())
    run_chore(pass_)  # neither raises nor recreates the directory
    assert pass_.removed == 0 and not list(tmp_path.glob("deleted-0*"))


def test_an_aborted_pass_stops_and_is_discarded(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", COMPACT)
    _fill(log, [(b"key%d" % (i % 4), b"v%d" % i) for i in range(90)])
    before = [(r.offset, r.key, r.value) for r in read_all(log)]
    pass_ = log.begin_compaction(T0)
    assert pass_ is not None
    pass_.abort()  # e.g. the broker is shutting down
    run_chore(pass_)
    assert pass_.removed == 0 and [(r.offset, r.key, r.value) for r in read_all(log)] == before
    assert not list((tmp_path / "t-0").glob("*.cleaned"))
    log.close()
