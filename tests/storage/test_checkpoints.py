"""Checkpoint files (Kafka's text format), clean-shutdown marker, leader epoch cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage.checkpoints import (
    CorruptCheckpointError,
    OffsetCheckpointFile,
    has_clean_shutdown,
    remove_clean_shutdown,
    write_clean_shutdown,
)
from storage.leader_epoch import EpochEntry, LeaderEpochCache


def test_offset_checkpoint_format(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    assert f.read() == {}
    f.write({("b-topic", 1): 42, ("a.topic", 0): 7})
    assert f.path.read_text() == "0\n2\na.topic 0 7\nb-topic 1 42\n"
    assert f.read() == {("a.topic", 0): 7, ("b-topic", 1): 42}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt zero 1\n", "0\n1\nt 0\n"])
def test_malformed_checkpoints(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()


def test_clean_shutdown_marker(tmp_path: Path) -> None:
    assert not has_clean_shutdown(tmp_path)
    write_clean_shutdown(tmp_path, 17)
    assert json.loads((tmp_path / ".kafka_cleanshutdown").read_text()) == {
        "version": 0,
        "brokerEpoch": 17,
    }
    assert has_clean_shutdown(tmp_path)
    remove_clean_shutdown(tmp_path)
    assert not has_clean_shutdown(tmp_path)


def test_leader_epoch_cache_kafka_semantics(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochCache(path)
    assert c.end_offset_for(0, 100) == (-1, -1)
    assert c.assign(1, 0)
    assert not c.assign(1, 10)  # same epoch, later offset: no change
    assert c.assign(3, 20)
    assert c.assign(5, 50)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(3, 20), EpochEntry(5, 50)]
    assert (
        c.epoch_for_offset(0) == 1 and c.epoch_for_offset(49) == 3 and c.epoch_for_offset(99) == 5
    )
    # OffsetsForLeaderEpoch
    assert c.end_offset_for(5, 77) == (5, 77)  # latest epoch: the log end offset
    assert c.end_offset_for(3, 77) == (3, 50)
    assert c.end_offset_for(4, 77) == (3, 50)  # unknown epoch in between: the one before
    assert c.end_offset_for(0, 77) == (0, 0)  # below the first
    assert c.end_offset_for(9, 77) == (-1, -1)
    assert c.end_offset_for(-1, 77) == (-1, -1)
    # a lower epoch at a later offset replaces the conflicting entries
    c2 = LeaderEpochCache(None, c.entries)
    c2.assign(4, 40)
    assert c2.entries == [EpochEntry(1, 0), EpochEntry(3, 20), EpochEntry(4, 40)]
    c.flush()
    assert path.read_text() == "0\n3\n1 0\n3 20\n5 50\n"
    c.truncate_from_end(50)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(3, 20)]
    c.truncate_from_start(25)
    assert c.entries == [EpochEntry(3, 25)]
    c.flush()
    assert LeaderEpochCache.load(path).entries == [EpochEntry(3, 25)]


def test_leader_epoch_malformed_file_gives_empty_cache(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n5\n1 0\n")
    assert len(LeaderEpochCache.load(path)) == 0


def test_a_leader_epoch_checkpoint_never_goes_back(tmp_path: Path) -> None:
    """A flush's write made in a worker thread after a later one made on the log's thread
    writes nothing: the file keeps the later entries."""
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    cache.assign(0, 0)
    older = cache.begin_write()  # a flush's, its worker late
    assert older is not None
    cache.assign(1, 10)
    assert cache.flush()
    assert not older.run(fsync=False)
    assert LeaderEpochCache.load(path).entries == [EpochEntry(0, 0), EpochEntry(1, 10)]
    assert not cache.dirty and cache.begin_write() is None
