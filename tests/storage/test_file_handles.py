"""FileHandles: bounded LRU of descriptors, pinning, detaching."""

from __future__ import annotations

import os
from pathlib import Path

from storage.file_handles import FileHandles


def test_lru_bound_and_pins(tmp_path: Path) -> None:
    pool = FileHandles(max_open=3)
    handles = []
    for i in range(10):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x%d" % i)
        handles.append(pool.handle(p))
    for h in handles:
        with h.use() as fd:
            assert os.pread(fd, 2, 0).startswith(b"x")
    assert pool.open_count == 3
    assert [h.is_open for h in handles] == [False] * 7 + [True] * 3
    for h in handles[:5]:  # five pins: the pool exceeds its bound rather than fail
        h.acquire()
    assert pool.open_count == 5
    for h in handles[:5]:
        h.release()
    assert pool.open_count == 3


def test_pinned_descriptor_survives_rename_unlink_and_detach(tmp_path: Path) -> None:
    pool = FileHandles(max_open=1)
    p = tmp_path / "seg.log"
    p.write_bytes(b"hello")
    h = pool.handle(p)
    fd = h.acquire()
    h.rename(tmp_path / "seg.log.deleted")
    (tmp_path / "seg.log.deleted").unlink()
    h.detach()
    other = pool.handle(tmp_path / "other")
    (tmp_path / "other").write_bytes(b"o")
    with other.use():
        pass
    assert os.pread(fd, 5, 0) == b"hello"  # still open while pinned
    h.release()
    assert not h.is_open and pool.open_count == 0  # `other` was evicted to stay within 1
