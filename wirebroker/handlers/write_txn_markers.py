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

Who may send it (docs/security.md, "Transaction markers"): Kafka takes it from anyone allowed
ALTER on the cluster (an admin's `kafka-transactions abort`) or CLUSTER_ACTION (a transaction
coordinator), which without an authorizer is everyone. Here ABORT markers are taken from anyone
allowed ALTER on the cluster (everyone without an authorizer, as Kafka, so the tool works on
every broker), and from brokers; a request with a COMMIT marker only from a broker (the
inter-broker rule of `RequestContext.authorize_cluster_action`: never on the embedded broker,
whose coordinator writes its markers in process). Refused: CLUSTER_AUTHORIZATION_FAILED for
every partition, nothing written.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

from protocol.errors import KafkaError
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from wirebroker.authorizer.acls import AclOperation
from wirebroker.dispatch import Later, RequestContext, handles
from wirebroker.partition import TopicPartition
from wirebroker.txn_markers import MarkerEntry, MarkerWrite, append_markers, complete, complete_now

Result = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
PartitionResult = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)


@handles(WriteTxnMarkersRequest, (0, 1))
async def write_txn_markers(
    ctx: RequestContext, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse | Later:
    broker = ctx.broker
    markers = [
        (
            MarkerEntry(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result),
            [TopicPartition(t.name, index) for t in m.topics for index in t.partition_indexes],
        )
        for m in request.markers
    ]
    try:
        _authorize(ctx, request)
    except KafkaError as e:
        log.info("%s", e)
        return _response(
            [MarkerWrite(entry, dict.fromkeys(tps, e.error_code)) for entry, tps in markers]
        )
    writes = [append_markers(broker, entry, tps) for entry, tps in markers]
    if complete_now(broker, writes):
        return _response(writes)
    return Later(partial(_finish, broker, writes))


def _authorize(ctx: RequestContext, request: WriteTxnMarkersRequest) -> None:
    """ABORT markers from an admin (ALTER on the cluster) or a broker, COMMIT markers from a
    broker only (see the module doc); raises KafkaError CLUSTER_AUTHORIZATION_FAILED."""
    commits = any(m.transaction_result for m in request.markers)
    admin = ctx.authorize_cluster(AclOperation.ALTER, log_if_denied=False)
    if admin and not commits:
        return
    try:
        ctx.require_cluster_action()
    except KafkaError as e:
        if not admin:
            raise
        raise KafkaError(
            f"{e}; a COMMIT marker is written only by a transaction coordinator (ALTER on the "
            "cluster allows ABORT markers, as kafka-transactions abort sends)",
            error_code=e.error_code,
        ) from e


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
