"""A segment roll's disk work runs in a worker thread (storage.roll_work), not on the loop.

An in-process broker with small segments rolls at almost every produce. The next segment's
files are made ahead in a worker thread and the roll only renames them; the roll's producer
snapshot is written there too. Here that worker is held (the loop keeps answering and the
rolls create their files themselves meanwhile, counted), fails as on a full disk (the broker
keeps serving, nothing acknowledged is lost), and the broker restarts with a prepared segment
on disk (it is removed, the log is whole). Real clients over TCP: confluent-kafka and our
codec's Metadata.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import storage.roll_work
from storage.roll_work import RollWork
from tests.wirebroker.held_worker import metadata
from tests.wirebroker.helpers import eventually
from wirebroker.config import BrokerConfig
from wirebroker.server import serve_broker

TIMEOUT = 30.0
TOPIC_CONFIGS = {"segment.bytes": "2000"}  # about 12 records of 100 bytes a segment


class HeldRollWork:
    """Wraps `RollWork.prepare` and `commit`: records the thread of each preparation, holds
    the first that makes a next segment until `release`, and counts commits."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, hold: bool) -> None:
        self.prepare, self.commit = RollWork.prepare, RollWork.commit
        self.hold = hold
        self.threads: set[int] = set()
        self.held = threading.Event()
        self.release = threading.Event()
        self.segments_made = 0
        self.made = threading.Condition()
        monkeypatch.setattr(RollWork, "prepare", lambda work: self._prepare(work))
        monkeypatch.setattr(RollWork, "commit", lambda work: self._commit(work))

    def _prepare(self, work: RollWork) -> None:
        self.threads.add(threading.get_ident())
        if self.hold and work.sizes is not None and not self.held.is_set():
            self.held.set()
            assert self.release.wait(TIMEOUT)
        self.prepare(work)

    def _commit(self, work: RollWork) -> None:
        self.commit(work)
        if work.sizes is not None and work.error is None:
            with self.made:
                self.segments_made += 1
                self.made.notify_all()

    def wait_made(self, count: int) -> None:
        """Until `count` next segments were made and handed to their logs."""
        with self.made:
            assert self.made.wait_for(lambda: self.segments_made >= count, TIMEOUT)


def _config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )


async def _serve_topic(nursery: trio.Nursery, config: BrokerConfig) -> tuple[Any, str, Any]:
    """A broker served in `nursery` with the topic ``t`` (`TOPIC_CONFIGS`): the running
    broker, its bootstrap address and the log of ``t-0``."""
    running = await nursery.start(partial(serve_broker, config))
    running.broker.create_topic("t", 1, 1, TOPIC_CONFIGS)
    return running, running.bootstrap_servers, running.broker.log_manager.get("t", 0)


def _produce(
    bootstrap: str, first: int, count: int, acknowledged: Callable[[], None] | None = None
) -> None:
    """Records `first`..`first + count - 1` ("v<i>", 100 bytes), each acknowledged (acks=all)
    before the next is sent: a roll every dozen. `acknowledged` is called after each."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    errors: list[Any] = []
    for i in range(first, first + count):
        value = (b"v%d-" % i).ljust(100, b".")
        producer.produce("t", value, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(TIMEOUT) == 0
        if acknowledged is not None:
            acknowledged()
    assert errors == [None] * count


def _consume(bootstrap: str, start: int = 0) -> list[tuple[int, int]]:
    """(offset, record number) of every record from `start` to the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition("t", 0, start)])
    out = []
    try:
        while True:
            message = consumer.poll(TIMEOUT)
            assert message is not None, "no end of partition reached"
            if message.error():
                assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                return out
            out.append((message.offset(), int(message.value().split(b"-")[0][1:])))
    finally:
        consumer.close()


def _delete_records(bootstrap: str, before: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.delete_records([TopicPartition("t", 0, before)]).values()
    return int(future.result(TIMEOUT).low_watermark)


def test_rolls_adopt_segments_made_in_a_worker_while_the_loop_keeps_answering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldRollWork(monkeypatch, hold=True)
    topic_dir = tmp_path / "t-0"

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running, bootstrap, log = await _serve_topic(nursery, _config(tmp_path))
            try:
                with trio.fail_after(TIMEOUT):
                    # The first preparation is held: the loop answers, and rolls go on, each
                    # creating its segment itself.
                    await trio.to_thread.run_sync(_produce, bootstrap, 0, 10)
                    assert await trio.to_thread.run_sync(held.held.wait, TIMEOUT)
                    await trio.to_thread.run_sync(_produce, bootstrap, 10, 30)
                    await trio.to_thread.run_sync(metadata, bootstrap)
                    assert log.rolls_inline >= 2 and log.rolls_prepared == 0
                    assert not list(topic_dir.glob("*.prepared"))
            finally:
                held.release.set()
            with trio.fail_after(TIMEOUT):
                # Released: from now on each roll adopts the segment made ahead for it. Each
                # roll asks for the next segment; the producer waits until it is made (a roll
                # before that would create its own, which is the loaded machine's timing, not
                # what is tested here).
                await trio.to_thread.run_sync(held.wait_made, 1)
                inline, segments = log.rolls_inline, len(log.segments)

                def wait_for_preparation() -> None:
                    rolls = trio.from_thread.run_sync(lambda: len(log.segments)) - segments
                    held.wait_made(1 + rolls)

                await trio.to_thread.run_sync(_produce, bootstrap, 40, 60, wait_for_preparation)
                assert log.rolls_prepared >= 4
                assert log.rolls_inline == inline
                bases = [s.base_offset for s in log.segments]
                assert len(bases) >= 8
                assert await trio.to_thread.run_sync(_consume, bootstrap) == [
                    (i, i) for i in range(100)
                ]
                # Producer snapshots at the rolls, written by the worker thread.
                assert {int(p.name[:20]) for p in topic_dir.glob("*.snapshot")} & set(bases[1:])
                # DeleteRecords into an adopted segment, then reading from the new start.
                assert await trio.to_thread.run_sync(_delete_records, bootstrap, bases[-2] + 1)
                assert await trio.to_thread.run_sync(_consume, bootstrap, bases[-2] + 1) == [
                    (i, i) for i in range(bases[-2] + 1, 100)
                ]
            nursery.cancel_scope.cancel()
        return loop_thread

    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads


def test_a_full_disk_while_preparing_leaves_the_rolls_to_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(path: Path, size: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(storage.roll_work, "create_file", no_space)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            running, bootstrap, log = await _serve_topic(nursery, _config(tmp_path))
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(_produce, bootstrap, 0, 60)
                await trio.to_thread.run_sync(metadata, bootstrap)
                assert log.rolls_inline >= 4 and log.rolls_prepared == 0
                assert not running.broker.log_manager.offline_dirs
                assert await trio.to_thread.run_sync(_consume, bootstrap) == [
                    (i, i) for i in range(60)
                ]
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_restart_with_a_prepared_segment_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldRollWork(monkeypatch, hold=False)
    topic_dir = tmp_path / "t-0"

    async def serve(first: int, count: int) -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, _config(tmp_path)))
            bootstrap = running.bootstrap_servers
            if first == 0:
                running.broker.create_topic("t", 1, 1, TOPIC_CONFIGS)
            else:  # the prepared files were removed when the log was opened
                assert not list(topic_dir.glob("*.prepared"))
                # (and the topic's segment.bytes applies to the log found at start-up)
                assert running.broker.log_manager.get("t", 0).config.segment_bytes == 2000
            made = held.segments_made
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(_produce, bootstrap, first, count)
                await trio.to_thread.run_sync(held.wait_made, made + 1)
                assert await trio.to_thread.run_sync(_consume, bootstrap) == [
                    (i, i) for i in range(first + count)
                ]
            nursery.cancel_scope.cancel()

    trio.run(serve, 0, 20)
    # Shut down with the next segment's files ready (empty, under names no segment has).
    assert sorted(p.name for p in topic_dir.glob("*.prepared")) == [
        "next.index.prepared",
        "next.log.prepared",
        "next.timeindex.prepared",
    ]
    trio.run(serve, 20, 30)


def test_a_rolled_segments_indexes_are_cut_to_their_entries_in_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A roll writes the old segment's last index entries; the cut of its two indexes from
    ``segment.index.bytes`` to their entries is the roll work's (the loop made both with
    `ftruncate`s). Every rolled segment's indexes end cut; none of those cuts is the loop's."""
    cuts: list[tuple[int, str]] = []  # (thread, file) of each cut of an index while serving
    serving = threading.Event()
    ftruncate, truncate = os.ftruncate, os.truncate

    def note(name: str, length: int) -> None:
        full = {".index": 10 * 1024 * 1024, ".timeindex": 10 * 1024 * 1024 // 12 * 12}
        for suffix, size in full.items():
            if serving.is_set() and name.endswith(suffix) and length < size:
                cuts.append((threading.get_ident(), name))

    def cutting_fd(fd: int, length: int) -> None:
        with contextlib.suppress(OSError):
            note(os.readlink(f"/proc/self/fd/{fd}"), length)
        ftruncate(fd, length)

    def cutting_path(path: Any, length: int) -> None:
        note(os.fspath(path), length)
        truncate(path, length)

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running, bootstrap, log = await _serve_topic(nursery, _config(tmp_path))
            serving.set()
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(_produce, bootstrap, 0, 60)
                rolled = log.segments[:-1]
                assert len(rolled) >= 4
                await eventually(
                    lambda: all(
                        os.path.getsize(s.offset_index.path) == s.offset_index.entries * 8
                        and os.path.getsize(s.time_index.path) == s.time_index.entries * 12
                        for s in rolled
                    ),
                    TIMEOUT,
                    what="the rolled segments' indexes trimmed to their entries",
                )
                assert await trio.to_thread.run_sync(_consume, bootstrap) == [
                    (i, i) for i in range(60)
                ]
            serving.clear()  # the shutdown's close trims the active segment on the loop
            nursery.cancel_scope.cancel()
        return loop_thread

    monkeypatch.setattr(os, "ftruncate", cutting_fd)
    monkeypatch.setattr(os, "truncate", cutting_path)
    loop_thread = trio.run(main)
    monkeypatch.undo()
    assert cuts and all(thread != loop_thread for thread, _ in cuts), cuts
