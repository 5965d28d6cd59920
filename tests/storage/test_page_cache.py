"""`storage.page_cache`: whether a file range is in the page cache, told by both mechanisms
(cachestat and mincore) on a real file whose pages are dropped and read back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import page_cache

SIZE = 1 << 20


@pytest.fixture(params=["cachestat", "mincore"])
def mechanism(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(page_cache, "mechanism", request.param)
    return str(request.param)


@pytest.fixture
def written(tmp_path: Path) -> Iterator[int]:
    """A descriptor of a 1 MiB file written and made durable (its pages clean, so droppable)."""
    path = tmp_path / "00000000000000000000.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, os.urandom(SIZE))
        os.fsync(fd)
        yield fd
    finally:
        os.close(fd)


def _drop(fd: int, position: int = 0, length: int = 0) -> None:
    os.posix_fadvise(fd, position, length, os.POSIX_FADV_DONTNEED)


def test_a_written_file_is_cached_and_a_dropped_one_is_not(written: int, mechanism: str) -> None:
    assert page_cache.cached(written, 0, SIZE)
    assert page_cache.cached(written, 12_345, 100)
    _drop(written)
    if page_cache.cached(written, 0, SIZE):
        pytest.skip("this file system keeps its pages (tmpfs?): nothing to drop")
    assert not page_cache.cached(written, 12_345, 100)
    assert page_cache.mechanism == mechanism


def test_load_reads_the_range_back_and_only_it(written: int, mechanism: str) -> None:
    _drop(written)
    if page_cache.cached(written, 0, SIZE):
        pytest.skip("this file system keeps its pages (tmpfs?): nothing to drop")
    page_cache.load(written, 300_000, 200_000)
    assert page_cache.cached(written, 300_000, 200_000)
    assert not page_cache.cached(written, 0, SIZE)
    # a range crossing pages only partly cached counts as not cached
    _drop(written, 400_000 - 400_000 % 4096, 4096)
    assert not page_cache.cached(written, 300_000, 200_000)


def test_load_stops_at_the_end_of_the_file(written: int) -> None:
    _drop(written)
    page_cache.load(written, SIZE - 100, 10_000)  # past the end: reads what is there
    assert page_cache.cached(written, SIZE - 100, 100)


def test_an_empty_range_and_a_bad_descriptor_count_as_cached() -> None:
    assert page_cache.cached(-1, 0, 0)
    assert page_cache.cached(-1, 0, 100)  # the send that follows reports the descriptor
