"""The transactional APIs of the transaction coordinator and the group coordinator:
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions and
ListTransactions -- every version Kafka 3.9 accepts. (InitProducerId is in `producer_ids`,
WriteTxnMarkers in `write_txn_markers`.)

- AddPartitionsToTxn v0-5: v0-3 carry one transaction (from a producer), v4+ a batch of them
  (from brokers), each answered on its own; v4+ `verify_only` asks whether the partitions are
  already in the transaction (KIP-890) instead of adding them: TRANSACTION_ABORTABLE for each
  one that is not. A partition that does not exist fails its whole transaction: it gets
  UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, and nothing is written.
  PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
- AddOffsetsToTxn v0-4: adds the group's `__consumer_offsets` partition to the transaction (it
  creates no topic, as Kafka's: the group's FindCoordinator does; a partition whose log does
  not exist when the markers are written had no offsets written and needs no marker).
  PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
- EndTxn v0-4: answered once the PrepareCommit or PrepareAbort record is durable; the markers
  follow. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
- TxnOffsetCommit v0-4: partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION, the others
  are committed in the transaction by the group coordinator
  (`GroupMetadataManager.commit_transactional`); v3+ checks the member and generation; v0-1 see
  COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS (Kafka's fix for 0.11 clients);
  v4+ may see TRANSACTION_ABORTABLE where older versions see INVALID_TXN_STATE.
- DescribeTransactions v0, ListTransactions v0-1 (state and producer-id filters, v1 the
  duration filter).

Authorization, as Kafka 3.9's KafkaApis: AddPartitionsToTxn v0-3, AddOffsetsToTxn, EndTxn and
TxnOffsetCommit need WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
for the whole transaction); AddPartitionsToTxn v0-3 then WRITE on each topic (internal topics
are never granted: TOPIC_AUTHORIZATION_FAILED, and the others OPERATION_NOT_ATTEMPTED), v4+
comes from brokers and needs to be acting as one (`require_cluster_action`); AddOffsetsToTxn
and TxnOffsetCommit READ on the group (GROUP_AUTHORIZATION_FAILED), TxnOffsetCommit READ on
each topic (TOPIC_AUTHORIZATION_FAILED for its partitions). DescribeTransactions needs DESCRIBE
on each id and leaves out the topics the client may not DESCRIBE; ListTransactions leaves out
the ids the client may not DESCRIBE.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import RequestContext, handles
from wirebroker.group.state import CommittedOffset
from wirebroker.handlers.offsets import partition_known, sort_commits
from wirebroker.partition import TopicPartition
from wirebroker.topics import INTERNAL_TOPICS, OFFSETS_TOPIC
from wirebroker.txn.verification import TransactionalWriter

Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


WRITE, READ, DESCRIBE = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE
TOPIC, GROUP, TXN_ID = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID


def _fenced(error: ErrorCode, version: int, first_version: int) -> ErrorCode:
    """Clients older than `first_version` know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


@handles(AddPartitionsToTxnRequest, (0, 5))
async def add_partitions_to_txn(
    ctx: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    if ctx.api_version < 4:
        txn = Txn(
            transactional_id=request.v3_and_below_transactional_id,
            producer_id=request.v3_and_below_producer_id,
            producer_epoch=request.v3_and_below_producer_epoch,
            topics=request.v3_and_below_topics,
        )
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=await _add(ctx, txn))
    try:  # v4+ batches come from brokers (KIP-890 verification)
        ctx.require_cluster_action()
    except KafkaError as e:
        return AddPartitionsToTxnResponse(error_code=e.error_code)
    results = []
    for txn in request.transactions:
        results.append(
            AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id, topic_results=await _add(ctx, txn)
            )
        )
    return AddPartitionsToTxnResponse(results_by_transaction=results)


async def _add(ctx: RequestContext, txn: Txn) -> list[TopicResult]:
    """One transaction's partitions added (or verified), each with its answer."""
    wanted: dict[TopicPartition, None] = {}  # request order, without repeats
    for topic in txn.topics:
        for index in topic.partitions:
            wanted[TopicPartition(topic.name, index)] = None
    from_client = ctx.api_version < 4  # v4+ was authorized as a whole (a broker)
    if from_client and not ctx.authorize(WRITE, TXN_ID, txn.transactional_id):
        return _by_topic(
            wanted, dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        )
    writable = (  # each topic decided once, logged with how many partitions named it (Kafka's)
        ctx.authorized(WRITE, TOPIC, (tp.topic for tp in wanted if tp.topic not in INTERNAL_TOPICS))
        if from_client
        else {tp.topic for tp in wanted}
    )
    failed: dict[TopicPartition, ErrorCode] = {}
    for tp in wanted:
        if tp.topic not in writable:
            failed[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not partition_known(ctx, tp.topic, tp.partition):
            failed[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    coordinator = ctx.broker.transactions
    errors: dict[TopicPartition, ErrorCode]
    if failed:  # one failed partition fails the transaction's request: nothing is added
        errors = {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    elif txn.verify_only:
        errors = coordinator.verify_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, list(wanted)
        )
    else:
        error = await coordinator.add_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, frozenset(wanted)
        )
        errors = dict.fromkeys(wanted, _fenced(error, ctx.api_version, 2))
    return _by_topic(wanted, errors)


def _by_topic(
    wanted: dict[TopicPartition, None], errors: dict[TopicPartition, ErrorCode]
) -> list[TopicResult]:
    by_topic: dict[str, list[PartitionResult]] = {}
    for tp in wanted:
        by_topic.setdefault(tp.topic, []).append(
            PartitionResult(partition_index=tp.partition, partition_error_code=errors[tp])
        )
    return [TopicResult(name=name, results_by_partition=rs) for name, rs in by_topic.items()]


@handles(AddOffsetsToTxnRequest, (0, 4))
async def add_offsets_to_txn(
    ctx: RequestContext, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    if not ctx.authorize(WRITE, TXN_ID, request.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(READ, GROUP, request.group_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    broker = ctx.broker
    offsets = TopicPartition(
        OFFSETS_TOPIC, broker.groups.group_manager.partition_of(request.group_id)
    )
    error = await broker.transactions.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        frozenset({offsets}),
    )
    return AddOffsetsToTxnResponse(error_code=_fenced(error, ctx.api_version, 2))


@handles(EndTxnRequest, (0, 4))
async def end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    if not ctx.authorize(WRITE, TXN_ID, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    error = await ctx.broker.transactions.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return EndTxnResponse(error_code=_fenced(error, ctx.api_version, 2))


@handles(TxnOffsetCommitRequest, (0, 4))
async def txn_offset_commit(
    ctx: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    broker = ctx.broker
    if not ctx.authorize(WRITE, TXN_ID, request.transactional_id):
        return _txn_offset_commit_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(READ, GROUP, request.group_id):
        return _txn_offset_commit_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    now = broker.now_ms()
    results, wanted = sort_commits(
        ctx,
        request.topics,
        lambda p: CommittedOffset(
            p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", now
        ),
    )
    if wanted:
        writer = TransactionalWriter(
            broker,
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            abortable_ok=ctx.api_version >= 4,
        )
        codes = await broker.groups.group_manager.commit_transactional(
            request.group_id,
            writer,
            request.member_id,
            request.group_instance_id,
            request.generation_id,
            wanted,
        )
        for (topic_name, index, _), code in zip(wanted, codes, strict=True):
            if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and ctx.api_version < 2:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            results[(topic_name, index)] = code
    return _txn_offset_commit_response(request, results)


def _txn_offset_commit_response(
    request: TxnOffsetCommitRequest, errors: ErrorCode | dict[tuple[str, int], ErrorCode]
) -> TxnOffsetCommitResponse:
    """Every partition of the request with its error (one for all, or each its own)."""
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=errors
                        if isinstance(errors, ErrorCode)
                        else errors[(topic.name, p.partition_index)],
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


@handles(DescribeTransactionsRequest, (0, 0))
async def describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    states = []
    for tid in request.transactional_ids:
        if ctx.authorize(DESCRIBE, TXN_ID, tid):
            state = ctx.broker.transactions.describe(tid)
            state.topics = [t for t in state.topics if ctx.authorize(DESCRIBE, TOPIC, t.topic)]
        else:
            state = DescribeTransactionsResponse.TransactionState(
                transactional_id=tid, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            )
        states.append(state)
    return DescribeTransactionsResponse(transaction_states=states)


@handles(ListTransactionsRequest, (0, 1))
async def list_transactions(
    ctx: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    response = ctx.broker.transactions.list_transactions(
        set(request.producer_id_filters),
        set(request.state_filters),
        request.duration_filter if ctx.api_version >= 1 else -1,
    )
    response.transaction_states = [
        s
        for s in response.transaction_states
        if ctx.authorize(DESCRIBE, TXN_ID, s.transactional_id)
    ]
    return response
