"""A failed log directory, in-process: an I/O error (other than a full disk) in one of the
broker's `log.dirs` takes it offline as Kafka's LogDirFailureChannel does. Its partitions answer
KAFKA_STORAGE_ERROR to Produce and Fetch until a restart; the other directory's go on."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.headers import RequestHeader
from protocol.record_batch import SimpleRecord
from storage.segment import RECENT_BATCHES
from tests.wirebroker.helpers import fetch_request, produce_request
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig
from wirebroker.dispatch import RequestContext, dispatch
from wirebroker.handlers.fetch import FileRecords


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    config = BrokerConfig.from_properties(
        {
            "broker.id": "1",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}",
        }
    )
    b = Broker.open(config)
    try:
        yield b
    finally:
        b.close()


def call(broker: Broker, body: Any, version: int) -> Any:
    header = RequestHeader(
        request_api_key=body.API_KEY, request_api_version=version, correlation_id=1, client_id="c"
    )
    return trio.run(dispatch, RequestContext(broker, header, "127.0.0.1", "PLAINTEXT"), body)


def produce(broker: Broker, partition: int) -> int:
    request = produce_request("t", partition, [SimpleRecord(b"k", b"v")], acks=1)
    return int(call(broker, request, 9).responses[0].partition_responses[0].error_code)


def fetch(broker: Broker, partition: int) -> int:
    request = fetch_request("t", partition)
    response = call(broker, request, 12).responses[0].partitions[0]
    if isinstance(response.records, FileRecords):  # not the shared empty records of an error
        response.records.release()
    return int(response.error_code)


def test_an_io_error_takes_only_its_log_directory_offline(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = tmp_path / "a"
    broker.create_topic("t", 2, 1, {"flush.messages": "1"})  # every append is fsynced
    manager = broker.log_manager
    assert (manager.log_dir_of("t", 0), manager.log_dir_of("t", 1)) == (a, tmp_path / "b")
    assert produce(broker, 0) == produce(broker, 1) == ErrorCode.NONE
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(f"{a}/"):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert produce(broker, 0) == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.undo()
    assert manager.offline_dirs == {a}
    assert produce(broker, 0) == ErrorCode.KAFKA_STORAGE_ERROR  # until a restart
    assert fetch(broker, 0) == ErrorCode.KAFKA_STORAGE_ERROR
    assert produce(broker, 1) == ErrorCode.NONE
    assert fetch(broker, 1) == ErrorCode.NONE


def test_a_read_that_fails_for_its_disk(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = tmp_path / "a"
    broker.create_topic("t", 2, 1, {})
    # more batches than the active segment remembers the positions of, so the fetch from 0
    # has to read the file to find its batch
    for _ in range(RECENT_BATCHES + 1):
        assert produce(broker, 0) == ErrorCode.NONE
    assert produce(broker, 1) == ErrorCode.NONE
    real_pread = os.pread

    def pread(fd: int, n: int, offset: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(f"{a}/"):
            raise OSError(errno.EIO, "Input/output error")
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)
    assert fetch(broker, 0) == ErrorCode.KAFKA_STORAGE_ERROR  # not the whole request failed
    assert fetch(broker, 1) == ErrorCode.NONE
    monkeypatch.undo()
    assert broker.log_manager.offline_dirs == {a}
