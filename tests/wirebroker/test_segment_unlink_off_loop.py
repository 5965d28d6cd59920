"""What deletion leaves to unlink or to make durable is done in a worker thread (the removal
chore), never on the loop: an in-process broker whose unlinks or fsyncs are held up keeps
answering requests.

- Retention renames a deleted segment's files to ``.deleted`` on the loop and unlinks them in
  a worker thread (unlinking a 512 MiB segment took 48-124 ms when it ran on the loop).
- The producer snapshots below a new log start offset (DeleteRecords here; retention takes the
  same path) are unlinked there too (an unlink on the loop took up to 51 ms in the audit of
  docs/perf-notes.md).
- DeleteTopics renames the partitions' directories on the loop; their removal and the fsync
  of the log directory that makes it durable run in a worker thread, and a failed fsync takes
  the log directory offline (as a failed unlink does) without stopping the broker.
"""

from __future__ import annotations

import errno
import os
import threading
from functools import partial
from pathlib import Path

import pytest
import trio
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import storage.chore
from protocol.errors import ErrorCode
from protocol.messages.metadata import MetadataRequest
from tests.wirebroker.helpers import RawClient, eventually
from wirebroker.config import BrokerConfig
from wirebroker.server import serve_broker

TIMEOUT = 30.0


class _HeldUnlinks:
    """Wraps ``os.unlink``: records the thread of every unlink of a file named ``*<suffix>``
    and holds each until `release` is set."""

    def __init__(self, suffix: str = ".deleted") -> None:
        self.unlink = os.unlink
        self.suffix = suffix
        self.threads: set[int] = set()
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if os.fspath(path).endswith(self.suffix):
            self.threads.add(threading.get_ident())
            self.started.set()
            assert self.release.wait(TIMEOUT)
        self.unlink(path, *args, **kwargs)  # type: ignore[arg-type]


def _produce(bootstrap: str, topic: str, count: int) -> None:
    """`count` batches of one record each (every one rolls a segment of this topic)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    errors = []
    for _ in range(count):
        producer.produce(topic, b"v" * 100, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(TIMEOUT) == 0
    assert errors == [None] * count


def _metadata(bootstrap: str) -> None:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        response = client.request(MetadataRequest(topics=None), 12)
    assert response.topics and response.topics[0].error_code == ErrorCode.NONE


def test_retention_unlinks_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _HeldUnlinks()
    monkeypatch.setattr(os, "unlink", held)
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path),
            "log.retention.check.interval.ms": "100",
        }
    )
    topic_dir = tmp_path / "t-0"

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            bootstrap = running.bootstrap_servers
            running.broker.create_topic(
                "t",
                1,
                1,
                {"segment.bytes": "200", "retention.bytes": "1", "file.delete.delay.ms": "0"},
            )
            try:
                with trio.fail_after(TIMEOUT):
                    await trio.to_thread.run_sync(_produce, bootstrap, "t", 5)
                    assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
                    # An unlink is held: the loop still answers, and the log already moved on.
                    await trio.to_thread.run_sync(_metadata, bootstrap)
                    assert list(topic_dir.glob("*.log.deleted"))
                    assert running.broker.log_manager.get("t", 0).log_start_offset > 0
            finally:
                held.release.set()
            await eventually(  # by the next removal chore
                lambda: not list(topic_dir.glob("*.deleted")),
                TIMEOUT,
                what="the .deleted files removed",
            )
            nursery.cancel_scope.cancel()
        return loop_thread

    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads


def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )


def _delete_records(bootstrap: str, topic: str, before: int) -> int:
    """DeleteRecords with confluent-kafka's AdminClient: the new low watermark."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.delete_records([TopicPartition(topic, 0, before)]).values()
    return int(future.result(TIMEOUT).low_watermark)


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(TIMEOUT)


def test_producer_snapshots_below_the_log_start_are_unlinked_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _HeldUnlinks(".snapshot")
    monkeypatch.setattr(os, "unlink", held)
    topic_dir = tmp_path / "t-0"

    def snapshots() -> list[int]:
        return sorted(int(p.name.split(".")[0]) for p in topic_dir.glob("*.snapshot"))

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, _config(tmp_path)))
            bootstrap = running.bootstrap_servers
            running.broker.create_topic(
                "t", 1, 1, {"segment.bytes": "200", "file.delete.delay.ms": "0"}
            )
            try:
                with trio.fail_after(TIMEOUT):
                    await trio.to_thread.run_sync(_produce, bootstrap, "t", 5)
                    await eventually(  # one per roll, written by its chore
                        lambda: snapshots() == [1, 2, 3, 4],
                        TIMEOUT,
                        what="producer snapshots 1 to 4",
                    )
                    start = await trio.to_thread.run_sync(_delete_records, bootstrap, "t", 4)
                    assert start == 4
                    assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
                    # An unlink is held in the removal chore: the loop answers meanwhile.
                    await trio.to_thread.run_sync(_metadata, bootstrap)
            finally:
                held.release.set()
            await eventually(  # the latest stays
                lambda: snapshots() == [4], TIMEOUT, what="only producer snapshot 4 left"
            )
            nursery.cancel_scope.cancel()
        return loop_thread

    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads


class _HeldDirectorySyncs:
    """Wraps the removal chore's ``fsync_dir``: records each call's thread and directory,
    holds it until `release` is set, then fails it with `error` if one is given."""

    def __init__(self, error: OSError | None = None) -> None:
        self.fsync_dir = storage.chore.fsync_dir
        self.error = error
        self.calls: list[tuple[int, Path]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()

    def __call__(self, directory: Path) -> None:
        self.calls.append((threading.get_ident(), directory))
        self.started.set()
        assert self.release.wait(TIMEOUT)
        if self.error is not None:
            raise self.error
        self.fsync_dir(directory)
        self.done.set()


class _Fsyncs:
    """Wraps ``os.fsync``: the threads that called it."""

    def __init__(self) -> None:
        self.fsync = os.fsync
        self.threads: set[int] = set()

    def __call__(self, fd: int) -> None:
        self.threads.add(threading.get_ident())
        self.fsync(fd)


def test_deleted_topics_directories_are_removed_and_made_durable_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _HeldDirectorySyncs()
    monkeypatch.setattr(storage.chore, "fsync_dir", held)
    fsyncs = _Fsyncs()

    async def main() -> tuple[int, set[int]]:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, _config(tmp_path)))
            bootstrap = running.bootstrap_servers
            running.broker.create_topic("t", 2, 1, {})
            monkeypatch.setattr(os, "fsync", fsyncs)
            try:
                with trio.fail_after(TIMEOUT):
                    await trio.to_thread.run_sync(_produce, bootstrap, "t", 3)
                    await trio.to_thread.run_sync(_delete_topic, bootstrap, "t")
                    assert not (tmp_path / "t-0").exists() and not (tmp_path / "t-1").exists()
                    assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
                    # The removal is being made durable: the loop answers meanwhile, and the
                    # directories are gone already.
                    await trio.to_thread.run_sync(_metadata_of_none, bootstrap)
                    assert not list(tmp_path.glob("t-*"))
            finally:
                held.release.set()
            assert await trio.to_thread.run_sync(held.done.wait, TIMEOUT)
            serving = set(fsyncs.threads)  # the shutdown's checkpoints are written on the loop
            nursery.cancel_scope.cancel()
        return loop_thread, serving

    loop_thread, serving = trio.run(main)
    assert {directory for _thread, directory in held.calls} == {tmp_path}
    assert loop_thread not in {thread for thread, _directory in held.calls}
    assert loop_thread not in serving


def test_a_failed_fsync_of_a_removal_takes_the_log_directory_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _HeldDirectorySyncs(OSError(errno.EIO, "Input/output error"))
    held.release.set()
    monkeypatch.setattr(storage.chore, "fsync_dir", held)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, _config(tmp_path)))
            bootstrap = running.bootstrap_servers
            manager = running.broker.log_manager
            running.broker.create_topic("t", 1, 1, {})
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(_delete_topic, bootstrap, "t")
                await eventually(
                    lambda: tmp_path in manager.offline_dirs,
                    TIMEOUT,
                    what="the log directory offline",
                )
                # The broker stays up and answers.
                await trio.to_thread.run_sync(_metadata_of_none, bootstrap)
            nursery.cancel_scope.cancel()

    trio.run(main)


def _metadata_of_none(bootstrap: str) -> None:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        assert client.request(MetadataRequest(topics=[]), 12).brokers
