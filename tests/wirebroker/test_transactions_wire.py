"""Transactions on the wire with raw requests: transactional Produce, WriteTxnMarkers (its
answers and Kafka's error codes, nothing written when refused), and what read_committed and
read_uncommitted Fetch and ListOffsets then see."""

from __future__ import annotations

import time
from typing import Any

from protocol.errors import ErrorCode
from protocol.messages.describe_producers import DescribeProducersRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from protocol.record_batch import RecordBatchView, SimpleRecord
from protocol.record_builder import decode_end_txn_marker
from protocol.records import iter_batches, iter_records
from tests.broker_process import BrokerProcess

from .helpers import (
    RawClient,
    create_topic,
    end_offset,
    fetch_raw,
    produce_request,
    wait_until,
)


def txn_produce(
    c: RawClient,
    topic: str,
    pid: int,
    seq: int,
    values: list[bytes],
    *,
    epoch: int = 0,
    partition: int = 0,
    transactional: bool = True,
) -> Any:
    now = int(time.time() * 1000)
    records = [SimpleRecord(b"k", v, (), now) for v in values]
    request = produce_request(
        topic,
        partition,
        records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )
    return c.request(request, 9).responses[0].partition_responses[0]


def write_markers(
    c: RawClient,
    markers: list[tuple[int, int, int, bool, dict[str, list[int]]]],
    version: int = 1,
) -> dict[tuple[int, str, int], int]:
    """WriteTxnMarkers of (producer id, producer epoch, coordinator epoch, commit, partitions);
    the error code of each (producer id, topic, partition) answered."""
    request = WriteTxnMarkersRequest(
        markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=commit,
                coordinator_epoch=coordinator_epoch,
                topics=[
                    WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()
                ],
            )
            for pid, epoch, coordinator_epoch, commit, topics in markers
        ]
    )
    response = c.request(request, version)
    return {
        (m.producer_id, t.name, p.partition_index): p.error_code
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    }


def log_end(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The log end offset (the high watermark of a one-broker partition)."""
    return end_offset(bootstrap, topic, partition)


def test_markers_end_transactions_and_are_stored_as_control_batches(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    with RawClient(broker.bootstrap) as c:
        assert txn_produce(c, topic, 500, 0, [b"a", b"b"]).error_code == 0
        assert txn_produce(c, topic, 501, 0, [b"x"], partition=1).error_code == 0
        answers = write_markers(
            c,
            [
                (500, 0, 3, True, {topic: [0]}),
                (501, 0, 3, False, {topic: [1]}),
                (500, 0, 3, True, {"no-such-topic": [0]}),
            ],
        )
        assert answers == {
            (500, topic, 0): ErrorCode.NONE,
            (501, topic, 1): ErrorCode.NONE,
            (500, "no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        request = DescribeProducersRequest(
            topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
        )
        (state,) = c.request(request, 0).topics[0].partitions[0].active_producers
    assert (state.producer_id, state.coordinator_epoch, state.current_txn_start_offset) == (
        500,
        3,
        -1,
    )
    batches = list(iter_batches(bytes(fetch_raw(broker.bootstrap, topic, 0).records)))
    assert [b.is_control for b in batches] == [False, True]
    marker = batches[1]
    assert isinstance(marker, RecordBatchView) and marker.is_transactional
    assert (marker.base_offset, marker.producer_id, marker.producer_epoch) == (2, 500, 0)
    (record,) = iter_records(marker)
    assert bytes(record.key or b"") == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert decode_end_txn_marker(record.value) == (0, 3)


def test_refused_markers_write_nothing(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        assert txn_produce(c, topic, 600, 0, [b"a"], epoch=2).error_code == 0
        assert write_markers(c, [(600, 2, 5, False, {topic: [0]})]) == {(600, topic, 0): 0}
        assert txn_produce(c, topic, 600, 1, [b"b"], epoch=2).error_code == 0
        end = log_end(broker.bootstrap, topic)
        assert write_markers(c, [(600, 1, 5, True, {topic: [0]})], version=0) == {
            (600, topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH
        }
        assert write_markers(c, [(600, 2, 4, True, {topic: [0]})]) == {
            (600, topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED
        }
        assert log_end(broker.bootstrap, topic) == end
        # a non-transactional batch while the transaction is ongoing
        response = txn_produce(c, topic, 600, 2, [b"c"], epoch=2, transactional=False)
        assert response.error_code == ErrorCode.INVALID_TXN_STATE
        assert log_end(broker.bootstrap, topic) == end
        assert write_markers(c, [(600, 2, 5, True, {topic: [0]})]) == {(600, topic, 0): 0}
        assert log_end(broker.bootstrap, topic) == end + 1


def test_markers_on_consumer_offsets_partitions(broker: BrokerProcess) -> None:
    """A marker for a `__consumer_offsets` partition is written and the group coordinator told
    (its transactional offsets are the coordinator's business)."""
    offsets = {"__consumer_offsets": [0, 1]}
    with RawClient(broker.bootstrap) as c:
        c.request(FindCoordinatorRequest(key="g"), 1)  # creates __consumer_offsets
        answer = wait_until(
            lambda: (
                (a := write_markers(c, [(700, 0, 0, True, offsets)]))
                and set(a.values()) == {ErrorCode.NONE}
                and a
            ),
            what="markers on __consumer_offsets",
        )
    assert answer == {(700, "__consumer_offsets", 0): 0, (700, "__consumer_offsets", 1): 0}
