"""`__consumer_offsets` over a broker's life, with real broker processes: offsets expire and take
their Empty group with them (`offsets.retention.minutes`), a deleted topic's offsets go too
(and a topic made again under its name is read from the start), a removed group's metadata is
tombstoned only if it had a generation, and a big partition loads at start beside the event
loop, its groups answering COORDINATOR_LOAD_IN_PROGRESS meanwhile."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from protocol.errors import ErrorCode
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from tests.broker_process import broker_process
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    decode_records,
    fetch_raw,
    make_coordinator_topics,
    offset_delete_request,
    wait_until,
)
from wirebroker.group import records
from wirebroker.topics import OFFSETS_TOPIC

pytestmark = pytest.mark.integration

E = ErrorCode


def commit_request(
    group: str, topic: str, offsets: dict[int, int], timestamp: int = -1, retention: int = -1
) -> OffsetCommitRequest:
    """A commit without group management (generation -1); `timestamp` is v1's commit time,
    `retention` v2-v4's retention time."""
    partitions = [
        OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, commit_timestamp=timestamp
        )
        for p, o in offsets.items()
    ]
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        retention_time_ms=retention,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=partitions)],
    )


def fetch_request(group: str) -> OffsetFetchRequest:
    """OffsetFetch v8 of every committed partition of `group`."""
    return OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    with RawClient(bootstrap) as c:
        fetched = c.request(fetch_request(group), 8).groups[0]
    assert fetched.error_code == E.NONE
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in fetched.topics
        for p in t.partitions
    }


def listed_groups(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
    assert not result.errors, result.errors
    return {g.group_id for g in result.valid}


def group_consumer(bootstrap: str, group: str) -> Consumer:
    """A consumer of `group` that reads from the start and commits when told."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def test_expired_offsets_take_their_empty_group(tmp_path: Path, topic: str) -> None:
    properties = {
        "offsets.topic.num.partitions": "1",
        "offsets.retention.minutes": "1",
        "offsets.retention.check.interval.ms": "200",
    }
    with broker_process(tmp_path, properties) as broker:
        create_topic(broker.bootstrap, topic, 1)
        make_coordinator_topics(broker.bootstrap, (0,))
        # a commit made two minutes ago (v1 carries its time): past the one-minute retention
        two_minutes_ago = int(time.time() * 1000) - 120_000
        with RawClient(broker.bootstrap) as c:
            old = c.request(commit_request("old", topic, {0: 7}, two_minutes_ago), 1)
            assert old.topics[0].partitions[0].error_code == E.NONE
            # a commit of now that asks (v2) to be kept 100 ms only
            short = c.request(commit_request("short", topic, {0: 8}, retention=100), 2)
            assert short.topics[0].partitions[0].error_code == E.NONE
        # a consumer's commit of now (without group management: the group stays Empty)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "recent"})
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 9)], asynchronous=False)
        finally:
            consumer.close()

        wait_until(
            lambda: not {"old", "short"} & listed_groups(broker.bootstrap), 15, 0.2, "expiry"
        )
        assert "recent" in listed_groups(broker.bootstrap)
        with RawClient(broker.bootstrap) as c:
            fetched = c.request(fetch_request("old"), 8).groups[0]
            assert (fetched.error_code, fetched.topics) == (E.NONE, [])
            recent = c.request(fetch_request("recent"), 8).groups[0]
            assert recent.topics[0].partitions[0].committed_offset == 9

        # the tombstones are in the log: a restart does not bring the group back
        broker.restart()

        def loaded() -> bool:
            with RawClient(broker.bootstrap) as c:
                return c.request(fetch_request("recent"), 8).groups[0].error_code == E.NONE

        wait_until(loaded, 15, 0.1, "the offsets partition loaded")
        assert not {"old", "short"} & listed_groups(broker.bootstrap)


def test_a_deleted_topic_takes_its_offsets_and_their_empty_group(
    tmp_path: Path, topic: str
) -> None:
    other = topic + "-other"
    with broker_process(tmp_path, {"offsets.topic.num.partitions": "1"}) as broker:
        create_topic(broker.bootstrap, topic, 2)
        create_topic(broker.bootstrap, other, 1)
        make_coordinator_topics(broker.bootstrap, (0,))
        with RawClient(broker.bootstrap) as c:
            for group, t, offsets in [
                ("only-deleted", topic, {0: 5, 1: 6}),
                ("both", topic, {0: 3}),
                ("both", other, {0: 4}),
            ]:
                answer = c.request(commit_request(group, t, offsets), 8)
                assert {p.error_code for p in answer.topics[0].partitions} == {E.NONE}
            deleted = c.request(DeleteTopicsRequest(topic_names=[topic], timeout_ms=10_000), 5)
            assert deleted.responses[0].error_code == E.NONE

        # Kafka's onPartitionsDeleted: the offsets go, and the group left without any with them
        wait_until(lambda: "only-deleted" not in listed_groups(broker.bootstrap), 15, 0.1)
        assert committed(broker.bootstrap, "both") == {(other, 0): 4}

        # made again under the name: a consumer of "both" reads it from the start, not from 3
        create_topic(broker.bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(8):
            producer.produce(topic, value=b"%d" % i)
        assert producer.flush(15) == 0
        consumer = group_consumer(broker.bootstrap, "both")
        try:
            consumer.subscribe([topic])
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(values) < 8 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    values.append(message.value())
        finally:
            consumer.close()
        assert values == [b"%d" % i for i in range(8)]

        # the tombstones are in the log: a restart brings neither the group nor the offsets back
        broker.restart()
        wait_until(lambda: committed(broker.bootstrap, "both") == {(other, 0): 4}, 15, 0.1)
        assert "only-deleted" not in listed_groups(broker.bootstrap)


@pytest.mark.timeout(60)
def test_only_a_group_that_had_a_generation_gets_a_metadata_tombstone(
    tmp_path: Path, topic: str
) -> None:
    """Kafka's cleanupGroupMetadata tombstones a removed group's metadata only if its generation
    is above 0: a group that only stored offsets never wrote metadata. Both groups' offsets are
    tombstoned, and neither group comes back after a restart."""
    properties = {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}
    with broker_process(tmp_path, properties) as broker:
        create_topic(broker.bootstrap, topic, 1)
        make_coordinator_topics(broker.bootstrap, (0,))
        with RawClient(broker.bootstrap) as c:
            answer = c.request(commit_request("offsets-only", topic, {0: 5}), 8)
            assert answer.topics[0].partitions[0].error_code == E.NONE
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, value=b"x")
        assert producer.flush(15) == 0
        # a consumer group: a generation formed, an offset committed, the member gone (Empty)
        consumer = group_consumer(broker.bootstrap, "formed")
        try:
            consumer.subscribe([topic])
            message = None
            deadline = time.monotonic() + 20
            while message is None and time.monotonic() < deadline:
                message = consumer.poll(0.5)
            assert message is not None and message.error() is None
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()

        # OffsetDelete empties the one, DeleteGroups removes the other
        offset_delete = offset_delete_request("offsets-only", topic, [0])
        with RawClient(broker.bootstrap) as c:
            assert c.request(offset_delete, 0).error_code == E.NONE
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_consumer_groups(["formed"], request_timeout=10)["formed"].result(timeout=15)
        assert not {"offsets-only", "formed"} & listed_groups(broker.bootstrap)

        def tombstones() -> set[bytes]:
            stored = decode_records(fetch_raw(broker.bootstrap, OFFSETS_TOPIC).records)
            return {key for _, key, value in stored if key is not None and value is None}

        wanted = {records.offset_key(g, topic, 0) for g in ("offsets-only", "formed")}
        wait_until(lambda: wanted <= tombstones(), 10, 0.1, "the offsets' tombstones")
        written = tombstones()
        assert records.group_key("formed") in written
        assert records.group_key("offsets-only") not in written

        broker.restart()
        wait_until(lambda: committed(broker.bootstrap, "formed") == {}, 15, 0.1, "loaded")
        assert committed(broker.bootstrap, "offsets-only") == {}
        assert not {"offsets-only", "formed"} & listed_groups(broker.bootstrap)


PARTITIONS = 100
COMMITS = 500  # 50 000 offset records to replay at start (about 1.5 s here)
WINDOW = 50  # commits in flight on the connection


def test_a_big_offsets_partition_loads_beside_the_loop(tmp_path: Path, topic: str) -> None:
    properties = {"offsets.topic.num.partitions": "1"}
    with broker_process(tmp_path, properties) as broker:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        make_coordinator_topics(broker.bootstrap, (0,))
        with RawClient(broker.bootstrap, timeout=60) as c:
            for start in range(0, COMMITS, WINDOW):
                sent = [
                    c.send(commit_request("big", topic, dict.fromkeys(range(PARTITIONS), n)), 8)
                    for n in range(start, start + WINDOW)
                ]
                for correlation_id in sent:
                    answer = c.receive(OffsetCommitRequest, 8, correlation_id)
                    assert {p.error_code for t in answer.topics for p in t.partitions} == {E.NONE}

        since = len(broker.log)
        broker.restart()
        codes: list[ErrorCode] = []
        with RawClient(broker.bootstrap, timeout=60) as c:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                fetched = c.request(fetch_request("big"), 8).groups[0]
                codes.append(fetched.error_code)
                if fetched.error_code == E.NONE:
                    break
                # the coordinator lookup still answers while the group loads
                found = c.request(FindCoordinatorRequest(key="big", key_type=0), 3)
                assert found.error_code == E.NONE
        assert codes[0] == E.COORDINATOR_LOAD_IN_PROGRESS, codes
        assert codes[-1] == E.NONE and set(codes[:-1]) == {E.COORDINATOR_LOAD_IN_PROGRESS}
        offsets = {p.partition_index: p.committed_offset for p in fetched.topics[0].partitions}
        assert offsets == dict.fromkeys(range(PARTITIONS), COMMITS - 1)
        line = broker.wait_for_log("__consumer_offsets-0: loaded", since=since)
        assert line is not None and f"from {COMMITS * PARTITIONS} records" in line
