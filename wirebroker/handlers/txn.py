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
- AddOffsetsToTxn v0-4: adds the group's `__consumer_offsets` partition to the transaction.
  PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
- EndTxn v0-4: answered once the PrepareCommit or PrepareAbort record is durable; the markers
  follow. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.
- TxnOffsetCommit v0-4: partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION, the others
  are committed in the transaction by the group coordinator (`GroupCoordinator.
  commit_transactional`); v3+ checks the member and generation; v0-1 see
  COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS (Kafka's fix for 0.11 clients);
  v4+ may see TRANSACTION_ABORTABLE where older versions see INVALID_TXN_STATE.
- DescribeTransactions v0, ListTransactions v0-1 (state and producer-id filters, v1 the
  duration filter).

Differences from Kafka: authorization (TRANSACTIONAL_ID, GROUP, TOPIC, CLUSTER_ACTION) is not
checked here yet.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
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
from wirebroker.dispatch import RequestContext, handles
from wirebroker.group.coordinator import OFFSETS_TOPIC
from wirebroker.group.state import CommittedOffset
from wirebroker.handlers.offsets import partition_known
from wirebroker.partition import TopicPartition
from wirebroker.txn.verification import TransactionalWriter

Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


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
    missing = {tp for tp in wanted if not partition_known(ctx, tp.topic, tp.partition)}
    coordinator = ctx.broker.transactions
    errors: dict[TopicPartition, ErrorCode]
    if missing:
        errors = {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if tp in missing
            else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    elif txn.verify_only:
        errors = coordinator.verify_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, list(wanted)
        )
    else:
        error = await coordinator.add_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, frozenset(wanted)
        )
        errors = dict.fromkeys(wanted, _fenced(error, ctx.api_version, 2))
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
    broker = ctx.broker
    if not broker.cluster_mode:
        broker.groups.ensure_topic()  # its partition must exist when the markers are written
    offsets = TopicPartition(OFFSETS_TOPIC, broker.groups.partition_of(request.group_id))
    error = await broker.transactions.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        frozenset({offsets}),
    )
    return AddOffsetsToTxnResponse(error_code=_fenced(error, ctx.api_version, 2))


@handles(EndTxnRequest, (0, 4))
async def end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    error = await ctx.broker.transactions.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return EndTxnResponse(error_code=_fenced(error, ctx.api_version, 2))


@handles(TxnOffsetCommitRequest, (0, 4))
async def txn_offset_commit(
    ctx: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    broker = ctx.broker
    now = broker.now_ms()
    results: dict[tuple[str, int], ErrorCode] = {}
    wanted: list[tuple[str, int, CommittedOffset]] = []
    for topic in request.topics:
        for p in topic.partitions:
            if not partition_known(ctx, topic.name, p.partition_index):
                results[(topic.name, p.partition_index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            committed = CommittedOffset(
                p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", now
            )
            wanted.append((topic.name, p.partition_index, committed))
    if wanted:
        writer = TransactionalWriter(
            broker,
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            abortable_ok=ctx.api_version >= 4,
        )
        codes = await broker.groups.commit_transactional(
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
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=results[(topic.name, p.partition_index)],
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
    return DescribeTransactionsResponse(
        transaction_states=[
            ctx.broker.transactions.describe(tid) for tid in request.transactional_ids
        ]
    )


@handles(ListTransactionsRequest, (0, 1))
async def list_transactions(
    ctx: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    return ctx.broker.transactions.list_transactions(
        set(request.producer_id_filters),
        set(request.state_filters),
        request.duration_filter if ctx.api_version >= 1 else -1,
    )
