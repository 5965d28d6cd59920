"""New partition logs are made off the event loop, and a stray partition directory is never
reused.

- An in-process broker whose log creation is held in its worker thread: during a CreateTopics
  of 1,000 partitions Metadata and Produce are answered, the topic is not known yet
  (UNKNOWN_TOPIC_OR_PARTITION, as Kafka before its partitions exist) and the CreateTopics is not
  answered. A DeleteTopics that arrives meanwhile wins: once released, the logs made are
  deleted, and the topic created again with the same name (made after, in order) starts afresh.
- Partitions added to a topic whose logs are held being made are not told by Metadata (by
  name nor in the all-topics answer) until they exist; the topic's others are.
- confluent-kafka produces to every partition right after its AdminClient's CreateTopics (and
  CreatePartitions) returned: every record is acknowledged.
- A broker process restarted over the partition directories of a topic missing from
  `topics.json` (a crash before the registry write) and of a topic whose `partition.metadata`
  names another topic id moves them aside as `-stray` (kept, logged as Kafka does); the topics
  created with those names start empty.
"""

from __future__ import annotations

import json
import threading
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from protocol.errors import ErrorCode
from protocol.messages.create_partitions import CreatePartitionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    end_offset,
    held_in_process,
    produce_request,
    serving_in_process,
)

pytestmark = pytest.mark.integration

TIMEOUT = 60.0


def _create(bootstrap: str, name: str, partitions: int) -> int:
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1
            )
        ],
        timeout_ms=30_000,
    )
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (result,) = client.request(request, 7).topics
    return int(result.error_code)


def _delete(bootstrap: str, name: str) -> int:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (result,) = client.request(DeleteTopicsRequest(topic_names=[name]), 5).responses
    return int(result.error_code)


def metadata_of(bootstrap: str, name: str) -> tuple[int, int]:
    """(error code, partitions listed) of `name`, not auto-created; the all-topics answer
    lists the same partitions (none: not listed)."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=name)],
        allow_auto_topic_creation=False,
    )
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (topic,) = client.request(request, 12).topics
        every = client.request(MetadataRequest(topics=None), 12).topics
    listed = [[p.partition_index for p in t.partitions] for t in every if t.name == name]
    assert listed == ([[p.partition_index for p in topic.partitions]] if topic.partitions else [])
    return topic.error_code, len(topic.partitions)


def _add_partitions(bootstrap: str, name: str, count: int) -> int:
    request = CreatePartitionsRequest(
        topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count)],
        timeout_ms=30_000,
    )
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (result,) = client.request(request, 3).results
    return int(result.error_code)


def _produce_error(bootstrap: str, name: str) -> int:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        response = client.request(produce_request(name, 0, [SimpleRecord(b"k", b"v")]), 9)
    return int(response.responses[0].partition_responses[0].error_code)


@pytest.mark.timeout(120)
def test_metadata_is_answered_while_a_large_creation_runs_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, held = held_in_process(tmp_path, monkeypatch)
    answers, ask = held.answers, held.ask

    async def main() -> None:
        async with serving_in_process(config, held.release, TIMEOUT) as running:
            bootstrap = running.bootstrap_servers
            async with trio.open_nursery() as creating:
                creating.start_soon(ask, "create", partial(_create, bootstrap, "big", 1000))
                assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
                # Its logs are being made in the worker thread: the loop answers others.
                for _ in range(3):
                    meta = await trio.to_thread.run_sync(metadata_of, bootstrap, "big")
                    assert meta == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0)
                produced = await trio.to_thread.run_sync(_produce_error, bootstrap, "big")
                assert produced == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                assert "create" not in answers  # answered only once its partitions exist
                # A delete meanwhile wins; a re-creation is made after (in order).
                assert await trio.to_thread.run_sync(_delete, bootstrap, "big") == 0
                creating.start_soon(ask, "again", partial(_create, bootstrap, "big", 2))
                held.release.set()
            assert answers == {"create": ErrorCode.NONE, "again": ErrorCode.NONE}
            meta = await trio.to_thread.run_sync(metadata_of, bootstrap, "big")
            assert meta == (ErrorCode.NONE, 2)
            assert running.broker.log_manager.partitions() == [("big", 0), ("big", 1)]
            assert await trio.to_thread.run_sync(end_offset, bootstrap, "big", 1) == 0

    loop_thread = threading.get_ident()
    trio.run(main)
    assert [n for _thread, n in held.calls] == [1000, 2]  # one thread call per creation
    assert loop_thread not in {thread for thread, _n in held.calls}
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("big-"))
    assert names[:2] == ["big-0", "big-1"]
    assert all(n.endswith("-delete") for n in names[2:])  # the first creation's, deleted


@pytest.mark.timeout(120)
def test_partitions_added_are_told_once_their_logs_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, held = held_in_process(tmp_path, monkeypatch, hold=2)  # the CreatePartitions' logs
    answers, ask = held.answers, held.ask

    async def main() -> None:
        async with serving_in_process(config, held.release, TIMEOUT) as running:
            bootstrap = running.bootstrap_servers
            assert await trio.to_thread.run_sync(_create, bootstrap, "grown", 2) == 0
            async with trio.open_nursery() as adding:
                adding.start_soon(ask, "add", partial(_add_partitions, bootstrap, "grown", 5))
                assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
                # The new partitions' logs are being made: Metadata tells the old ones only.
                meta = await trio.to_thread.run_sync(metadata_of, bootstrap, "grown")
                assert meta == (ErrorCode.NONE, 2)
                assert "add" not in answers
                held.release.set()
            assert answers == {"add": ErrorCode.NONE}
            meta = await trio.to_thread.run_sync(metadata_of, bootstrap, "grown")
            assert meta == (ErrorCode.NONE, 5)
            assert await trio.to_thread.run_sync(end_offset, bootstrap, "grown", 4) == 0

    trio.run(main)
    assert [n for _thread, n in held.calls] == [2, 3]


@pytest.mark.timeout(120)
def test_produce_right_after_create_and_create_partitions(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("fresh", 20, 1)]).values():
            future.result(TIMEOUT)
        delivered: list[Any] = []
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})

        def produce(partitions: range) -> None:
            for p in partitions:
                producer.produce(
                    "fresh", b"v", partition=p, on_delivery=lambda e, m: delivered.append(e)
                )
            assert producer.flush(TIMEOUT) == 0

        produce(range(20))
        for future in admin.create_partitions([NewPartitions("fresh", 30)]).values():
            future.result(TIMEOUT)
        del producer
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        produce(range(20, 30))
        assert delivered == [None] * 30
        assert [end_offset(broker.bootstrap, "fresh", p) for p in (0, 29)] == [1, 1]
    finally:
        broker.stop()
    assert not broker.tracebacks(), "\n".join(broker.log)


@pytest.mark.timeout(120)
def test_a_stray_partition_directory_is_moved_aside_not_reused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    broker.start()
    try:
        for name in ("lost", "other"):
            create_topic(broker.bootstrap, name)
            with RawClient(broker.bootstrap, timeout=TIMEOUT) as client:
                records = [SimpleRecord(b"k", b"old")] * 3
                response = client.request(produce_request(name, 0, records), 9)
            assert response.responses[0].partition_responses[0].error_code == 0
        assert broker.stop() == 0
        # As if a crash came before `lost` reached topics.json, and `other`'s directory were
        # an older topic's of the same name.
        registry = json.loads((data / "topics.json").read_text())
        del registry["topics"]["lost"]
        registry["topics"]["other"]["topic_id"] = str(uuid.uuid4())
        (data / "topics.json").write_text(json.dumps(registry))
        since = len(broker.log)
        broker.start()
        for name in ("lost", "other"):
            assert broker.wait_for_log(f"Log in {data / name}-0 marked stray", since=since)
        strays = sorted(p.name.split(".")[0] for p in data.glob("*-stray"))
        assert strays == ["lost-0", "other-0"]  # kept aside, with their records
        assert end_offset(broker.bootstrap, "other") == 0  # its log starts afresh
        create_topic(broker.bootstrap, "lost")
        assert end_offset(broker.bootstrap, "lost") == 0
        broker.restart()  # the strays stay aside, the new logs are kept
        assert [end_offset(broker.bootstrap, n) for n in ("lost", "other")] == [0, 0]
        assert len(list(data.glob("*-stray"))) == 2
    finally:
        broker.stop()
    assert not broker.tracebacks(), "\n".join(broker.log)
