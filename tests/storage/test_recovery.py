"""Recovery at open: torn tails at 100 cut points, flipped bits, leftovers of deletion and
compaction, missing indexes, and the log start offset beyond the data."""

from __future__ import annotations

import os
import random
import shutil
import struct
from pathlib import Path

import pytest

from protocol.records import RecordBatchView, iter_batches
from storage.config import LogConfig
from storage.partition_log import PartitionLog

from .helpers import T0, batch, batches_of, open_log, read_all

CONFIG = LogConfig(segment_bytes=6000, index_interval_bytes=300)


class Template:
    """A closed three-segment log to copy, and the batches of its last segment."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "t-0"
        rng = random.Random(7)
        log = open_log(self.dir, CONFIG)
        while len(log.segments) < 3 or log.active_segment.size < 5000:
            n = rng.randint(1, 6)
            log.append_as_leader(
                batch(
                    n,
                    value_size=rng.randint(0, 300),
                    compression=rng.choice([0, 0, 1, 3]),
                    tag=rng.randrange(256),
                ),
                rng.randrange(3),
                T0,
            )
        self.last = log.active_segment
        self.last_base = self.last.base_offset
        self.last_path = self.last.log.path.name
        self.records = [(r.offset, r.value) for r in read_all(log)]
        log.close()
        data = (self.dir / self.last_path).read_bytes()
        self.size = len(data)
        # (position, size, last offset) of every batch in the last segment
        self.batches: list[tuple[int, int, int]] = []
        pos = 0
        for b in iter_batches(data):
            assert isinstance(b, RecordBatchView)
            self.batches.append((pos, b.size_in_bytes, b.last_offset))
            pos += b.size_in_bytes

    def copy(self, target: Path) -> Path:
        shutil.copytree(self.dir, target)
        return target

    def expected_end(self, keep_bytes: int) -> int:
        """Log end offset when the last segment keeps its whole batches below keep_bytes."""
        end = self.last_base
        for pos, size, last in self.batches:
            if pos + size <= keep_bytes:
                end = last + 1
        return end


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return Template(tmp_path_factory.mktemp("template"))


def _check(log: PartitionLog, template: Template, end: int) -> None:
    assert log.log_end_offset == end
    assert [(r.offset, r.value) for r in read_all(log)] == [
        (o, v) for o, v in template.records if o < end
    ]
    assert log.append_as_leader(batch(1), 9, T0).first_offset == end  # and it appends on


CUTS = sorted(random.Random(42).sample(range(6200), 100))


@pytest.mark.parametrize("cut_seed", range(100))
def test_torn_tail_at_random_cut_points(tmp_path: Path, template: Template, cut_seed: int) -> None:
    cut = CUTS[cut_seed] % (template.size + 1)
    d = template.copy(tmp_path / "t-0")
    with open(d / template.last_path, "r+b") as f:
        f.truncate(cut)
    recovery_point = template.last_base if cut_seed % 2 else 0
    log = PartitionLog.open(d, CONFIG, recovery_point=recovery_point)
    kept = max((p + s for p, s, _ in template.batches if p + s <= cut), default=0)
    assert log.recovery_stats["truncated_bytes"] == cut - kept
    assert log.active_segment.size == kept
    _check(log, template, template.expected_end(cut))
    log.close()


def _flippable(template: Template, rng: random.Random) -> tuple[int, int]:
    """A byte covered by a check: anything but baseOffset (0-7) and partitionLeaderEpoch
    (12-15), which the v2 format deliberately leaves outside the CRC."""
    while True:
        pos = rng.randrange(template.size)
        for start, size, _ in template.batches:
            if start <= pos < start + size:
                rel = pos - start
                if rel < 8 or 12 <= rel < 16:
                    break
                return pos, start
        else:
            raise AssertionError("position outside every batch")


@pytest.mark.parametrize("seed", range(100))
def test_flipped_bit_drops_only_that_batch_and_what_follows(
    tmp_path: Path, template: Template, seed: int
) -> None:
    rng = random.Random(seed)
    pos, batch_start = _flippable(template, rng)
    d = template.copy(tmp_path / "t-0")
    with open(d / template.last_path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    log = PartitionLog.open(d, CONFIG, recovery_point=template.last_base)
    assert log.active_segment.size == batch_start
    _check(log, template, template.expected_end(batch_start))
    log.close()


def test_corruption_in_an_earlier_segment_drops_the_later_ones(
    tmp_path: Path, template: Template
) -> None:
    d = template.copy(tmp_path / "t-0")
    first_log = d / "00000000000000000000.log"
    data = bytearray(first_log.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first_log.write_bytes(data)
    log = PartitionLog.open(d, CONFIG, recovery_point=0)
    assert len(log.segments) == 1 and log.recovery_stats["dropped_segments"] == 2
    assert log.log_end_offset < template.last_base
    records = read_all(log)
    assert [(r.offset, r.value) for r in records] == template.records[: len(records)]
    assert sorted(p.name for p in d.iterdir() if p.suffix == ".log") == [first_log.name]
    log.close()


def test_clean_shutdown_skips_the_scan(tmp_path: Path, template: Template) -> None:
    d = template.copy(tmp_path / "t-0")
    log = PartitionLog.open(d, CONFIG, had_clean_shutdown=True)
    assert log.recovery_stats == {
        "truncated_bytes": 0,
        "dropped_segments": 0,
        "recovered_segments": 0,
    }
    _check(log, template, template.expected_end(template.size))
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_an_index_entry_at_the_files_end_is_recovered(
    tmp_path: Path, template: Template, clean: bool
) -> None:
    """The last segment's offset index ends with an entry pointing at the file's end (an
    index entry of an append never written: what a commit without its write closed with,
    the rolling restart's records written twice): the segment is recovered, its log end
    read from its batches. Taking the tail for empty (as Kafka's readNextOffset, and the old
    code) gave a log end offset of the segment's base offset, and a follower fetched every
    record of the segment again, after the ones already there."""
    d = template.copy(tmp_path / "t-0")
    last_offset = template.batches[-1][2]
    with open(d / template.last_path.replace(".log", ".index"), "ab") as index:
        index.write(struct.pack(">ii", last_offset + 1 - template.last_base, template.size))
    log = PartitionLog.open(d, CONFIG, had_clean_shutdown=clean)
    assert log.log_end_offset == last_offset + 1
    assert [(r.offset, r.value) for r in read_all(log)] == template.records
    assert log.active_segment.offset_index.last_entry()[1] < template.size
    log.close()


def test_leftovers_and_missing_indexes(tmp_path: Path, template: Template) -> None:
    d = template.copy(tmp_path / "t-0")
    (d / "00000000000000000000.index").unlink()
    (d / "00000000000000000000.timeindex").unlink()
    (d / "00000000000000000999.index").write_bytes(b"")  # orphan
    (d / "00000000000000000005.log.deleted").write_bytes(b"junk")
    (d / "00000000000000000005.log.cleaned").write_bytes(b"junk")
    log = PartitionLog.open(d, CONFIG, had_clean_shutdown=True)
    names = sorted(p.name for p in d.iterdir())
    assert "00000000000000000000.index" in names and "00000000000000000000.timeindex" in names
    assert not [n for n in names if n.endswith((".deleted", ".cleaned")) or "999" in n]
    _check(log, template, template.expected_end(template.size))
    log.close()


def test_interrupted_swap_is_completed(tmp_path: Path, template: Template) -> None:
    d = template.copy(tmp_path / "t-0")
    # Pretend compaction rewrote the first two segments into one swap segment.
    segs = sorted(p for p in d.iterdir() if p.suffix == ".log")
    second_base = int(segs[1].name[:20])
    data = segs[0].read_bytes() + segs[1].read_bytes()
    for suffix in (".log", ".index", ".timeindex"):
        (d / f"{0:020d}{suffix}.swap").write_bytes(data if suffix == ".log" else b"")
    log = PartitionLog.open(d, CONFIG, had_clean_shutdown=True)
    assert [s.base_offset for s in log.segments] == [0, template.last_base]
    assert not (d / f"{second_base:020d}.log").exists()
    _check(log, template, template.expected_end(template.size))
    log.close()


def test_log_start_beyond_the_data_empties_the_log(tmp_path: Path, template: Template) -> None:
    d = template.copy(tmp_path / "t-0")
    log = PartitionLog.open(d, CONFIG, had_clean_shutdown=True, log_start_offset=10**6)
    assert (log.log_start_offset, log.log_end_offset) == (10**6, 10**6)
    assert batches_of(log) == []
    log.close()


def test_recovery_scan_builds_kafka_indexes(tmp_path: Path, template: Template) -> None:
    d = template.copy(tmp_path / "t-0")
    for p in d.glob("*index"):
        os.truncate(p, 0)
    log = PartitionLog.open(d, CONFIG, recovery_point=0)
    for seg in log.segments[:-1]:
        assert seg.offset_index.path.stat().st_size == seg.offset_index.entries * 8 > 0
        assert seg.time_index.path.stat().st_size == seg.time_index.entries * 12 > 0
    _check(log, template, template.expected_end(template.size))
    log.close()
