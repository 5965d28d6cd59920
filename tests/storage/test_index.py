"""OffsetIndex / TimeIndex: Kafka's entry formats, lookups, truncation, persistence."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage.errors import CorruptIndexError
from storage.index import OffsetIndex, TimeIndex


def test_offset_index_format_and_lookup(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 80)
    idx.create(preallocate=True)
    assert (tmp_path / "00000000000000000100.index").stat().st_size == 80
    assert idx.lookup(150) == (100, 0)
    for off, pos in [(110, 4000), (120, 8200), (135, 12500)]:
        idx.append(off, pos)
    assert idx.lookup(109) == (100, 0)
    assert idx.lookup(110) == (110, 4000)
    assert idx.lookup(134) == (120, 8200)
    assert idx.lookup(10**9) == (135, 12500)
    idx.trim()
    raw = (tmp_path / "00000000000000000100.index").read_bytes()
    assert raw == struct.pack(">iiiiii", 10, 4000, 20, 8200, 35, 12500)
    again = OffsetIndex(idx.path, 100, 80)
    assert again.entries == 3 and again.lookup(125) == (120, 8200)


def test_offset_index_full_and_truncate(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "x.index", 0, 24)
    idx.create(preallocate=True)
    assert idx.max_entries == 3 and not idx.is_full
    for i in range(3):
        idx.append(10 * (i + 1), 100 * (i + 1))
    assert idx.is_full
    idx.truncate_to(20)  # removes entries for offsets >= 20
    assert idx.entries == 1 and idx.lookup(25) == (10, 100)
    idx.persist(size=24)
    assert idx.path.read_bytes() == struct.pack(">ii", 10, 100) + bytes(16)


def test_preallocated_zeros_after_a_crash_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">ii", 5, 300) + bytes(8 * 20))
    idx = OffsetIndex(path, 0, 1024)
    assert idx.entries == 1 and idx.lookup(99) == (5, 300)


def test_preallocated_zeros_after_a_crash_are_ignored_in_the_time_index(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    entries = [(-5, 1), (2**40 + 7, 9), (2**62, 2**31 - 1)]  # words of both signs, high and low
    path.write_bytes(b"".join(struct.pack(">qi", *e) for e in entries) + bytes(12 * 20))
    idx = TimeIndex(path, 0, 1024)
    assert idx.entries == 3 and idx.last_entry() == entries[-1]
    assert [idx.lookup(ts) for ts, _ in entries] == entries
    path.write_bytes(bytes(12 * 20))  # preallocated, never written
    assert TimeIndex(path, 0, 1024).entries == 0


def test_corrupt_offset_index_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">iiii", 9, 300, 5, 600))  # offsets going backwards
    with pytest.raises(CorruptIndexError, match="at entry 1"):
        OffsetIndex(path, 0, 1024).load()
    path.write_bytes(struct.pack(">iiiiii", 1, 300, 2, 600, 3, 500))  # positions going back
    with pytest.raises(CorruptIndexError, match="at entry 2"):
        OffsetIndex(path, 0, 1024).load()
    path.write_bytes(b"\x00" * 7)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 1024).load()


def test_time_index_format_and_rules(tmp_path: Path) -> None:
    idx = TimeIndex(tmp_path / "00000000000000000050.timeindex", 50, 12 * 4)
    idx.create(preallocate=True)
    assert idx.last_entry() == (-1, 50)
    idx.maybe_append(1000, 55)
    idx.maybe_append(1000, 56)  # same timestamp: ignored
    idx.maybe_append(999, 57)  # lower timestamp: ignored
    idx.maybe_append(2000, 60)
    assert idx.is_full is False
    idx.maybe_append(3000, 70)
    assert idx.is_full  # the last slot is reserved for the roll entry
    idx.maybe_append(4000, 80)
    assert idx.entries == 3
    idx.maybe_append(4000, 80, skip_full_check=True)
    assert idx.entries == 4
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(2500) == (2000, 60)
    idx.trim()
    raw = idx.path.read_bytes()
    assert raw[:12] == struct.pack(">qi", 1000, 5) and len(raw) == 48
    fresh = TimeIndex(idx.path, 50, 48)
    assert fresh.last_entry() == (4000, 80)  # read from the tail without loading
    assert not fresh.loaded
    fresh.truncate_to(70)
    assert fresh.last_entry() == (2000, 60)
