"""InitProducerId v0-v5 and DescribeProducers v0.

InitProducerId without a transactional id answers a fresh producer id with epoch 0 (v3+ may
send the current id and epoch after a fatal error: Kafka ignores them for idempotent producers,
and so do we). With a transactional id the id is kept and its epoch bumped (a new id once the
epoch is exhausted); a v3+ request whose expected id and epoch are no longer current is
PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v4, as Kafka maps it). A transaction timeout
that is not positive or above ``transaction.max.timeout.ms`` (default 900000) is
INVALID_TRANSACTION_TIMEOUT; an empty transactional id is INVALID_REQUEST. Ids and the
transactional id mapping survive restarts (:mod:`wirebroker.producer_ids`). In a ZooKeeper
cluster the ids come from blocks of `/latest_producer_id_block`, so InitProducerId may go to any
broker and two brokers never answer the same id; while ZooKeeper cannot give a block the answer
is COORDINATOR_LOAD_IN_PROGRESS (retriable; Kafka 3.9 answers it when its block is not there yet).

Differences from Kafka: this broker is not a transaction coordinator -- no transaction log,
no ongoing transaction is aborted on re-init, no timeouts, no markers (transactions are out of
scope); it only hands out and persists the id and epoch. Authorization, as Kafka: a
transactional id needs WRITE on it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), an idempotent
producer IDEMPOTENT_WRITE on the cluster or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED).

DescribeProducers reports, per partition, each producer's epoch, last sequence and timestamp,
the coordinator epoch of its last transaction marker and the first offset of its ongoing
transaction (-1 without one), from the partition's producer state, as Kafka's
activeProducerState (what `kafka-transactions find-hanging` reads). It needs READ on each
topic (else TOPIC_AUTHORIZATION_FAILED in its partitions).
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
)
from protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import RequestContext, handles

log = logging.getLogger(__name__)

DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000


@handles(InitProducerIdRequest, (0, 5))
async def init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    ids = ctx.broker.producer_ids
    tid = request.transactional_id
    response = InitProducerIdResponse(producer_id=-1, producer_epoch=-1)
    refused = _refused(ctx, tid)
    if refused is not None:
        response.error_code = refused
        return response
    cluster = ctx.broker.cluster
    if cluster is not None and ids.needs_block:
        try:
            ids.add_block(*await cluster.allocate_producer_id_block())
        except Exception as e:  # ZooKeeper unreachable or slow: the client retries
            log.warning("no producer id block from ZooKeeper: %s", e)
            response.error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            return response
    if tid is None:
        response.producer_id = ids.next_producer_id()
        response.producer_epoch = 0
        return response
    if tid == "":
        response.error_code = ErrorCode.INVALID_REQUEST
        return response
    limit = int(
        ctx.broker.config.get("transaction.max.timeout.ms") or DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
    )
    if not 0 < request.transaction_timeout_ms <= limit:
        response.error_code = ErrorCode.INVALID_TRANSACTION_TIMEOUT
        return response
    try:
        pid, epoch = ids.init_transactional(tid, request.producer_id, request.producer_epoch)
    except KafkaError as e:
        code = e.error_code
        if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        response.error_code = code
        return response
    response.producer_id = pid
    response.producer_epoch = epoch
    return response


def _refused(ctx: RequestContext, tid: str | None) -> ErrorCode | None:
    """As Kafka: a transactional producer needs WRITE on its transactional id, an idempotent one
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    if tid is not None:
        if ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
            return None
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE, log_if_denied=False):
        return None
    if ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


PartitionResponse = DescribeProducersResponse.PartitionResponse
ProducerState = DescribeProducersResponse.ProducerState


@handles(DescribeProducersRequest, (0, 0))
async def describe_producers(
    ctx: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    broker = ctx.broker
    readable = ctx.authorized(
        AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            result = PartitionResponse(partition_index=index)
            partitions.append(result)
            partition = broker.partition(topic.name, index)
            if topic.name not in readable:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                result.error_message = None
                continue
            if partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if not partition.is_leader(broker.node_id):
                result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            result.active_producers = [
                ProducerState(
                    producer_id=entry.producer_id,
                    producer_epoch=entry.epoch,
                    last_sequence=entry.last_seq,
                    last_timestamp=entry.last_timestamp,
                    coordinator_epoch=entry.coordinator_epoch,
                    current_txn_start_offset=entry.current_txn_first_offset,
                )
                for entry in partition.log.producer_state.producers.values()
            ]
        topics.append(
            DescribeProducersResponse.TopicResponse(name=topic.name, partitions=partitions)
        )
    return DescribeProducersResponse(topics=topics)
