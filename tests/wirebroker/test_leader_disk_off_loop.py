"""A leader's remaining disk work runs in worker threads while the loop answers everyone:

- segments deleted from a log's start (retention, DeleteRecords) are forgotten on the loop and
  renamed to ``.deleted`` by the removal chore's worker; a kill -9 between the two leaves them
  under their names, and the restarted broker reads a whole log and deletes them again;
- a flush's ``leader-epoch-checkpoint`` is written by the flush's worker;
- ListOffsets by timestamp reads an old segment's time index, offset index and batch headers
  in a worker (a `Later`), cold after a restart, and answers from memory once warm.

Real brokers (in process, and a `wirebroker serve` process for the kill -9), real clients
(confluent-kafka, our codec's Metadata and ListOffsets); each held worker is held until the
test has seen the loop answer.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

import storage.leader_epoch
from protocol.errors import ErrorCode
from storage.index import TimeIndex
from storage.partition_log import MAX_TIMESTAMP, PartitionLog
from storage.segment import TimestampReads
from tests.broker_process import BrokerProcess
from tests.wirebroker.held_worker import Held
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    eventually,
    list_offset,
    list_offsets_request,
    wait_until,
)
from tests.wirebroker.test_quotas import set_quota
from tests.wirebroker.test_segment_roll_off_loop import _consume
from wirebroker.config import BrokerConfig
from wirebroker.server import serve_broker

TIMEOUT = 30.0
T0 = 1_700_000_000_000  # the records' timestamps: T0 + 1000 * offset
COLD_RECORDS = 400  # `_fill_segments`' records, in six segments or more


def _config(tmp_path: Path, **more: str) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), **more}
    )


async def _serve_retained(
    nursery: trio.Nursery, tmp_path: Path, segment_bytes: str
) -> tuple[Any, str, Any]:
    """A broker served in `nursery` checking retention every 100 ms, with the topic ``t`` of
    `segment_bytes` segments that retention deletes as soon as they are rolled: the running
    broker, its bootstrap address and the log of ``t-0``."""
    config = _config(tmp_path, **{"log.retention.check.interval.ms": "100"})
    running = await nursery.start(partial(serve_broker, config))
    configs = {"segment.bytes": segment_bytes, "retention.bytes": "1", "file.delete.delay.ms": "0"}
    running.broker.create_topic("t", 1, 1, configs)
    return running, running.bootstrap_servers, running.broker.log_manager.get("t", 0)


def _produce(
    bootstrap: str, first: int, count: int, *, size: int = 100, at: int = T0, keys: int = 0
) -> None:
    """Records `first`..`first + count - 1`, each acknowledged before the next is sent, with
    the timestamp `at` + 1000 * its number (and, with `keys`, one of that many keys)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    errors: list[Any] = []
    for i in range(first, first + count):
        value = (b"v%d-" % i).ljust(size, b".")
        producer.produce(
            "t",
            value,
            key=b"k%d" % (i % keys) if keys else None,
            timestamp=at + 1000 * i,
            on_delivery=lambda e, _m: errors.append(e),
        )
        assert producer.flush(TIMEOUT) == 0
    assert errors == [None] * count


def _earliest(bootstrap: str) -> int:
    error, offset = list_offset(bootstrap, "t", 0, -2)
    assert error == ErrorCode.NONE
    return offset


def _live_segments(topic_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in topic_dir.glob("*.log"))


def test_retention_renames_in_a_worker_while_the_loop_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(os.rename, lambda _src, dst, *_: os.fspath(dst).endswith(".deleted"))
    monkeypatch.setattr(os, "rename", held)
    topic_dir = tmp_path / "t-0"

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running, bootstrap, log = await _serve_retained(nursery, tmp_path, "200")
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(_produce, bootstrap, 0, 5)
                # A rename is held: the loop answers Metadata and Produce, readers already
                # start after the deleted segments, whose files keep their names.
                async with held.answering(bootstrap):
                    await trio.to_thread.run_sync(_produce, bootstrap, 5, 1)
                    start = await trio.to_thread.run_sync(_earliest, bootstrap)
                    assert start == log.log_start_offset > 0
                    assert _live_segments(topic_dir)[0] < start
                await eventually(
                    lambda: (
                        not list(topic_dir.glob("*.deleted"))
                        and _live_segments(topic_dir)[0] >= log.segments[0].base_offset
                    ),
                    TIMEOUT,
                    what="the deleted segments' files renamed and removed",
                )
            nursery.cancel_scope.cancel()
        return loop_thread

    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads


_HOLD_RENAMES = """
import os, threading
from pathlib import Path

_rename = os.rename
_marker = os.environ.get("WIREBROKER_TEST_HOLD_RENAMES")


def _held(src, dst, *args, **kwargs):
    if os.fspath(dst).endswith(".deleted"):
        Path(_marker).write_text("held")
        threading.Event().wait()
    return _rename(src, dst, *args, **kwargs)


if _marker:
    os.rename = _held
"""


def test_a_kill_between_a_deletion_and_its_renames_loses_and_resurrects_nothing_wrongly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 while the renames of segments retention deleted are held in the worker: the
    restarted broker finds them under their names (the checkpoint of the log start offset
    was not written since: the log is back as before the deletion), reads the whole log,
    every record where it was acknowledged, and retention deletes them again."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_HOLD_RENAMES)
    marker = tmp_path / "held"
    path = [str(hooks), os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    monkeypatch.setenv("WIREBROKER_TEST_HOLD_RENAMES", str(marker))
    data = tmp_path / "data"
    broker = BrokerProcess(data, {"log.retention.check.interval.ms": "200"})
    topic_dir = data / "t-0"
    configs = {"segment.bytes": "500", "retention.bytes": "1000", "file.delete.delay.ms": "0"}
    broker.start()
    try:
        create_topic(broker.bootstrap, "t", 1, configs)
        _produce(broker.bootstrap, 0, 40)
        wait_until(marker.exists, TIMEOUT, what="a rename held")
        start = _earliest(broker.bootstrap)  # the loop answers; the log moved on in memory
        on_disk = _live_segments(topic_dir)
        assert 0 == on_disk[0] < start and not list(topic_dir.glob("*.deleted"))
        broker.kill()
        monkeypatch.delenv("WIREBROKER_TEST_HOLD_RENAMES")
        broker.properties["log.retention.check.interval.ms"] = "3600000"  # none, first
        broker.start()
        assert _live_segments(topic_dir) == on_disk
        assert _earliest(broker.bootstrap) == 0
        assert _consume(broker.bootstrap, 0) == [(i, i) for i in range(40)]
        broker.stop()
        broker.properties["log.retention.check.interval.ms"] = "200"
        broker.start()

        def deleted_again() -> int | None:
            """The log start once retention moved it past `start` and the worker renamed and
            removed the segments before it (the loop moves it first, the disk follows)."""
            earliest = _earliest(broker.bootstrap)
            if earliest < start or list(topic_dir.glob("*.deleted")):
                return None
            return earliest if _live_segments(topic_dir)[0] == earliest else None

        after = wait_until(deleted_again, TIMEOUT, what="retention to delete them again")
        assert _consume(broker.bootstrap, after) == [(i, i) for i in range(after, 40)]
    finally:
        broker.kill()
    assert not broker.tracebacks(), "\n".join(broker.log)


def test_a_flush_writes_the_leader_epoch_checkpoint_in_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(storage.leader_epoch.write_checkpoint)
    monkeypatch.setattr(storage.leader_epoch, "write_checkpoint", held)
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"

    async def main() -> tuple[int, set[int]]:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, _config(tmp_path)))
            bootstrap = running.bootstrap_servers
            running.broker.create_topic("t", 1, 1, {"segment.bytes": "200"})
            with trio.fail_after(TIMEOUT):
                # The first record starts epoch 0; the next ones roll: the flush job flushes
                # the rolled segments, with the changed checkpoint.
                await trio.to_thread.run_sync(_produce, bootstrap, 0, 3)
                async with held.answering(bootstrap):
                    await trio.to_thread.run_sync(_produce, bootstrap, 3, 2)
                    assert not checkpoint.exists()
                await eventually(checkpoint.exists, TIMEOUT, what="the flushed checkpoint")
            assert checkpoint.read_text() == "0\n1\n0 0\n"
            serving = set(held.threads)  # the shutdown's close writes on the loop
            nursery.cancel_scope.cancel()
        return loop_thread, serving

    loop_thread, serving = trio.run(main)
    assert serving and loop_thread not in serving


@pytest.mark.parametrize("timestamp", [T0 + 1000 * 200 + 1, T0 + 1000 * 20, T0 - 5, MAX_TIMESTAMP])
def test_list_offsets_by_timestamp_reads_cold_segments_in_a_worker(
    timestamp: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart no old segment's indexes are in memory: ListOffsets by timestamp (or
    of the largest, -3) has a worker read them (held here while the loop answers Metadata),
    then answers; asked again (warm) it answers without one."""
    held = Held(TimestampReads.run)
    monkeypatch.setattr(TimestampReads, "run", lambda reads: held(reads))
    config = _config(tmp_path)
    records = COLD_RECORDS
    expected = records - 1 if timestamp == MAX_TIMESTAMP else -(-(timestamp - T0) // 1000)
    expected = min(max(0, expected), records)

    def offsets_for_times(bootstrap: str) -> int:
        if timestamp == MAX_TIMESTAMP:  # librdkafka's consumer asks for timestamps only
            error, offset = list_offset(bootstrap, "t", 0, timestamp)
            assert error == ErrorCode.NONE
            return offset
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
        try:
            (found,) = consumer.offsets_for_times([TopicPartition("t", 0, timestamp)], TIMEOUT)
        finally:
            consumer.close()
        assert found.error is None
        return int(found.offset)

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            bootstrap = running.bootstrap_servers
            log = running.broker.log_manager.get("t", 0)
            assert len(log.segments) >= 6
            assert not any(s.time_index.loaded for s in log.segments[:-1])
            answers: list[int] = []
            with trio.fail_after(TIMEOUT):
                async with trio.open_nursery() as clients:

                    async def ask() -> None:
                        answers.append(await trio.to_thread.run_sync(offsets_for_times, bootstrap))

                    clients.start_soon(ask)
                    async with held.answering(bootstrap):
                        assert not answers
            calls = held.calls
            with trio.fail_after(TIMEOUT):
                answers.append(await trio.to_thread.run_sync(offsets_for_times, bootstrap))
            assert held.calls == calls  # warm: answered from memory
            nursery.cancel_scope.cancel()
        assert answers == [expected if expected < records else -1] * 2
        return loop_thread

    trio.run(_fill_segments, config)
    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads


async def _fill_segments(config: BrokerConfig) -> None:
    """Topic t: `COLD_RECORDS` records of 1000 bytes in segments of 64 KiB (cold once the
    broker restarts)."""
    async with trio.open_nursery() as nursery:
        running = await nursery.start(partial(serve_broker, config))
        running.broker.create_topic("t", 1, 1, {"segment.bytes": "65536", "retention.ms": "-1"})
        with trio.fail_after(TIMEOUT):
            await trio.to_thread.run_sync(
                partial(_produce, size=1000), running.bootstrap_servers, 0, COLD_RECORDS
            )
        nursery.cancel_scope.cancel()


def test_list_offsets_by_timestamp_counts_its_later_in_the_request_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `Later` of a cold ListOffsets by timestamp counts its time on the loop (the reads'
    bookkeeping, the answer) in the client's request quota, and its answer carries the
    throttle time. That time is made 50 ms here (finishing the worker's reads spins), far over
    a quota of 0.05 % (5 ms in the 10 s the rate is taken over) while the handler's own part
    stays well under it."""
    spin_s = 0.05
    finish = TimestampReads.finish

    def slow_finish(reads: TimestampReads) -> None:
        finish(reads)
        end = time.perf_counter() + spin_s
        while time.perf_counter() < end:
            pass

    monkeypatch.setattr(TimestampReads, "finish", slow_finish)
    config = _config(tmp_path)
    busy = "busy-list-offsets"

    def list_offsets_by_timestamp(bootstrap: str) -> tuple[int, int, int]:
        request = list_offsets_request("t", 0, T0 + 1000 * 20)
        with RawClient(bootstrap, client_id=busy) as raw:
            response = raw.request(request, 9)
        (p,) = response.topics[0].partitions
        return p.error_code, p.offset, response.throttle_time_ms

    async def main() -> tuple[int, int, int]:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            bootstrap = running.bootstrap_servers
            log = running.broker.log_manager.get("t", 0)
            assert log.timestamp_reads(T0 + 1000 * 20) is not None  # cold: a `Later`
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(
                    set_quota, bootstrap, busy, "request_percentage", 0.05
                )
                answer = await trio.to_thread.run_sync(list_offsets_by_timestamp, bootstrap)
            nursery.cancel_scope.cancel()
        return answer

    trio.run(_fill_segments, config)
    error, offset, throttle_ms = trio.run(main)
    assert (error, offset) == (ErrorCode.NONE, 20)
    assert 0 < throttle_ms <= 1000  # at most one window, as Kafka's request quota


def _reads_old_timestamps_in_a_worker(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    topic: dict[str, str],
    config: dict[str, str],
    done: Callable[[PartitionLog], int],
    *,
    keys: int = 0,
) -> PartitionLog:
    """Topic t (`topic`): 200 records of 1 KB timestamped from T0, long past, then 100 of
    now; restarted (`config`), no old segment's largest timestamp is in memory. The first
    pass of the job `config` makes run reads them in a worker (held while the loop answers
    Metadata, `done` still 0 meanwhile: the pass waits), then acts (`done` > 0); the loop
    reads no time index's last entry. Returns the log."""
    held = Held(TimestampReads.run)
    monkeypatch.setattr(TimestampReads, "run", lambda reads: held(reads))
    readers: list[int] = []  # the threads that read a time index's last entry
    read_last = TimeIndex.read_last

    def reading_last(index: TimeIndex) -> tuple[int, int] | None:
        readers.append(threading.get_ident())
        return read_last(index)

    monkeypatch.setattr(TimeIndex, "read_last", reading_last)
    old, recent = 200, 100

    async def fill() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, _config(tmp_path)))
            running.broker.create_topic("t", 1, 1, topic)
            with trio.fail_after(TIMEOUT):  # T0 is long past, then records of now
                await trio.to_thread.run_sync(
                    partial(_produce, size=1000, keys=keys), running.bootstrap_servers, 0, old
                )
                await trio.to_thread.run_sync(
                    partial(
                        _produce, size=1000, keys=keys, at=int(time.time() * 1000) - 1000 * old
                    ),
                    running.bootstrap_servers,
                    old,
                    recent,
                )
            nursery.cancel_scope.cancel()

    async def main() -> tuple[int, PartitionLog]:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, _config(tmp_path, **config)))
            readers.clear()  # the start read the active segment's (its log end offset)
            log = running.broker.log_manager.get("t", 0)
            assert done(log) == 0 and len(log.segments) >= 6
            with trio.fail_after(TIMEOUT):
                async with held.answering(running.bootstrap_servers):
                    assert done(log) == 0  # nothing done before the reads
                await eventually(lambda: done(log), TIMEOUT, what="the job's first pass to act")
            nursery.cancel_scope.cancel()
        return loop_thread, log

    trio.run(fill)
    loop_thread, log = trio.run(main)
    assert held.threads and loop_thread not in held.threads
    assert readers and loop_thread not in readers
    return log


def test_retention_by_time_reads_old_segments_timestamps_in_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart the first retention pass by ``retention.ms`` has a worker read the old
    segments' time indexes' last entries, then deletes the expired ones."""
    topic = {"segment.bytes": "65536", "retention.ms": str(7 * 24 * 3600 * 1000)}
    config = {"log.retention.check.interval.ms": "100"}
    log = _reads_old_timestamps_in_a_worker(
        tmp_path, monkeypatch, topic, config, lambda log: log.log_start_offset
    )
    # Every segment wholly older than retention.ms went, the one with records of now stayed
    # (a segment holds ~60 records of 1 KB).
    assert 0 < log.log_start_offset <= 200 < log.segments[1].base_offset


def test_the_cleaners_compaction_lag_reads_old_segments_timestamps_in_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart the cleaner's ``min.compaction.lag.ms`` check has a worker read the old
    segments' largest timestamps, then compacts those old enough and stops at the first too
    young. The old code read them on the loop (and each segment's tail, for its end)."""
    topic = {
        "cleanup.policy": "compact",
        "segment.bytes": "65536",
        "min.compaction.lag.ms": str(3600 * 1000),
    }
    config = {"log.cleaner.backoff.ms": "100"}
    log = _reads_old_timestamps_in_a_worker(
        tmp_path, monkeypatch, topic, config, lambda log: log.cleaner_checkpoint, keys=10
    )
    # Cleaned up to the segment holding the first record of now, not past it.
    assert 0 < log.cleaner_checkpoint <= 200


def test_deleted_segments_descriptors_are_closed_in_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention deletes segments whose `.log` and index descriptors the pool holds open:
    the removal chore's worker closes them, the loop none (it closed each on the loop: ~4
    calls a segment)."""
    closes: list[tuple[int, str]] = []  # (thread, file) of each close of a deleted segment's
    logs: list[Any] = []  # t-0's log, once made
    close = os.close

    def closing(fd: int) -> None:
        try:
            name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        except OSError:
            name = ""
        if logs and name[:20].isdigit() and int(name[:20]) < logs[0].log_start_offset:
            closes.append((threading.get_ident(), name))
        close(fd)

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running, bootstrap, log = await _serve_retained(nursery, tmp_path, "500")
            logs.append(log)
            topic_dir = tmp_path / "t-0"
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(partial(_produce, size=200), bootstrap, 0, 12)
                # The loop moves the log start first; the worker closes the descriptors, then
                # renames the files: wait for the renames too.
                await eventually(
                    lambda: (
                        log.log_start_offset >= 8
                        and not list(topic_dir.glob("*.deleted"))
                        and _live_segments(topic_dir)[0] >= log.segments[0].base_offset
                    ),
                    TIMEOUT,
                    what="the log start at 8 or past and the old files renamed and removed",
                )
            nursery.cancel_scope.cancel()
        return loop_thread

    monkeypatch.setattr(os, "close", closing)
    loop_thread = trio.run(main)
    monkeypatch.undo()
    assert closes and all(thread != loop_thread for thread, _ in closes), closes
