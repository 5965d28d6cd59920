"""WriteTxnMarkers, v0-v1: a transaction coordinator asks this broker to end a transaction on
the partitions it leads.

Each marker (producer id and epoch, coordinator epoch, COMMIT or ABORT) is appended as a control
batch to each of its partitions by `wirebroker.txn_markers` (the same path a coordinator of this
broker calls in process), with acks=all semantics: the answer waits, as a
:class:`~wirebroker.dispatch.Later`, until every marker is replicated or ``request.timeout.ms``
passed. Per-partition errors are Kafka's: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR; a refused marker writes nothing. Markers for the same
producer are answered in one result, as Kafka groups them. Once the markers of a
`__consumer_offsets` partition are written the group coordinator completes the producer's
transactional offsets there.

Differences from Kafka: authorization (CLUSTER_ACTION) is not checked here yet.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from wirebroker.dispatch import Later, RequestContext, handles
from wirebroker.partition import TopicPartition
from wirebroker.txn_markers import MarkerEntry, MarkerWrite, append_markers, complete, complete_now

Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult

if TYPE_CHECKING:
    from wirebroker.broker import Broker


@handles(WriteTxnMarkersRequest, (0, 1))
async def write_txn_markers(
    ctx: RequestContext, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse | Later:
    broker = ctx.broker
    writes = [
        append_markers(
            broker,
            MarkerEntry(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result),
            [TopicPartition(t.name, index) for t in m.topics for index in t.partition_indexes],
        )
        for m in request.markers
    ]
    if complete_now(broker, writes):
        return _response(writes)
    return Later(partial(_finish, broker, writes))


async def _finish(broker: Broker, writes: list[MarkerWrite]) -> WriteTxnMarkersResponse:
    await complete(broker, writes, broker.config.get_int("request.timeout.ms") / 1000)
    return _response(writes)


def _response(writes: list[MarkerWrite]) -> WriteTxnMarkersResponse:
    by_producer: dict[int, dict[str, list[PartitionResult]]] = {}
    for w in writes:
        topics = by_producer.setdefault(w.entry.producer_id, {})
        for tp, error in w.errors.items():
            topics.setdefault(tp.topic, []).append(
                PartitionResult(partition_index=tp.partition, error_code=error)
            )
    return WriteTxnMarkersResponse(
        markers=[
            Result(
                producer_id=pid,
                topics=[TopicResult(name=name, partitions=parts) for name, parts in topics.items()],
            )
            for pid, topics in by_producer.items()
        ]
    )
