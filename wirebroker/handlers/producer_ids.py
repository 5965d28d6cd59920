"""InitProducerId v0-v5 and DescribeProducers v0.

InitProducerId goes to the transaction coordinator (`wirebroker.txn.coordinator`), as in Kafka:
without a transactional id it answers a fresh producer id with epoch 0 (v3+ may send the current
id and epoch after a fatal error: Kafka ignores them for idempotent producers, and so do we);
with one, the id's producer id and a bumped epoch, fencing the previous instance, after
aborting its ongoing transaction (CONCURRENT_TRANSACTIONS until that is done). A v3+ request
naming its current producer id and epoch (KIP-360) whose id is no longer the transactional id's
is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v4, as Kafka maps it); giving only one of the
two is INVALID_REQUEST. A transaction timeout that is not positive or above
``transaction.max.timeout.ms`` is INVALID_TRANSACTION_TIMEOUT; an empty transactional id is
INVALID_REQUEST; a transactional id coordinated by another broker NOT_COORDINATOR. In a
ZooKeeper cluster the ids come from blocks of `/latest_producer_id_block`, so InitProducerId
without a transactional id may go to any broker and two brokers never answer the same id;
while ZooKeeper cannot give a block the answer is COORDINATOR_LOAD_IN_PROGRESS (retriable;
Kafka 3.9 answers it when its block is not there yet). The embedded broker reserves its blocks
in a local file, written off the event loop before the answer; a reservation that cannot be
written (a full disk) is UNKNOWN_SERVER_ERROR, as Kafka's answer to a failed ZooKeeper write.

Authorization, as Kafka: a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), an idempotent producer IDEMPOTENT_WRITE on the cluster
or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED).

DescribeProducers reports, per partition, each producer's epoch, last sequence and timestamp,
the coordinator epoch of its last transaction marker and the first offset of its ongoing
transaction (-1 without one), from the partition's producer state, as Kafka's
activeProducerState (what `kafka-transactions find-hanging` reads). It needs READ on each
topic (else TOPIC_AUTHORIZATION_FAILED in its partitions).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
)
from protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import RequestContext, handles

NO_PRODUCER_ID = NO_PRODUCER_EPOCH = -1


@handles(InitProducerIdRequest, (0, 5))
async def init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    refused = _refused(ctx, request.transactional_id)
    if refused is not None:
        return InitProducerIdResponse(error_code=refused, producer_id=-1, producer_epoch=-1)
    pid, epoch = request.producer_id, request.producer_epoch
    if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        return InitProducerIdResponse(
            error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1
        )
    result = await ctx.broker.transactions.init_producer_id(
        request.transactional_id,
        request.transaction_timeout_ms,
        None if pid == NO_PRODUCER_ID else (pid, epoch),
    )
    error = result.error
    if error == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return InitProducerIdResponse(
        error_code=error, producer_id=result.producer_id, producer_epoch=result.producer_epoch
    )


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
