"""Produce, v0-v11.

acks 0, 1 and -1; acks=0 gets no response at all, and a failed acks=0 produce closes the
connection, as Kafka does. Each partition is answered on its own:
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, MESSAGE_TOO_LARGE (batch over the topic's
`max.message.bytes`), CORRUPT_MESSAGE (CRC, framing, undecodable compressed records),
INVALID_RECORD (records that disagree with their batch header, a decompression bomb, a keyless
record on a compacted topic, ...), INVALID_TIMESTAMP, KAFKA_STORAGE_ERROR (an I/O error other
than a full disk also takes the partition's log directory offline: see `storage.log_manager`);
from v8 the answer also carries `error_message` (not for the producer-state refusals below: Kafka
sends none for them) and, for rejected records, `record_errors` (index in the batch and why), as
Kafka's does. A partition whose append succeeded is always answered
with its offset, even if another partition in the same request failed (an unexpected error is
confined to the partition it hit). v3+ must carry exactly one v2 batch.
Idempotent batches (see :mod:`storage.producer_state`): a retry of one of the producer's last
five batches is answered with its original base offset and no error, and not written again;
a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch INVALID_PRODUCER_EPOCH.
Transactional batches start (or continue) their producer's transaction on the partition,
which ends with the coordinator's marker (`wirebroker.txn_markers`); a non-transactional batch
while its producer's transaction is ongoing is INVALID_TXN_STATE.
Authorization, as Kafka: transactional records need WRITE on the transactional id (else every
partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), each topic WRITE (else its partitions are
TOPIC_AUTHORIZATION_FAILED, before a topic is looked up). Idempotence needs no more here: it
was authorized when the producer got its id (InitProducerId).
acks=all (-1) is answered once the high watermark passed every appended batch, i.e. every
in-sync replica has it, or after the request's `timeout_ms` (REQUEST_TIMED_OUT); an ISR smaller
than `min.insync.replicas` refuses the append (NOT_ENOUGH_REPLICAS), and an ISR that shrank below
it while waiting answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (the records are written). The wait
is a :class:`~wirebroker.dispatch.Later`: the connection goes on appending the producer's next
requests while earlier ones wait, and answers in order (Kafka reads nothing more from the
connection until the answer has gone; see `wirebroker.connection`).
A client over its `producer_byte_rate` quota (the request's bytes, every request counted) is
answered with the throttle time, and its connection muted for it (`wirebroker.quotas`); the
quota is recorded when the request arrives (Kafka: when it is answered).
With `transaction.partition.verification.enable` (Kafka's default, KIP-890 part 1), a
transactional batch of a producer with no transaction going on in the partition is first checked
with the transaction's coordinator (`wirebroker.txn.verification`): a partition that is not in
the transaction is INVALID_TXN_STATE (v11: TRANSACTION_ABORTABLE), a coordinator that cannot say
NOT_ENOUGH_REPLICAS (retriable), a fenced producer INVALID_PRODUCER_EPOCH; a request whose
transactional batches carry two producer ids is INVALID_PRODUCER_ID_MAPPING. The append then
brings the verification's guard: if a marker of the producer landed while the coordinator was
asked, the batch is INVALID_TXN_STATE ("Record was not part of an ongoing transaction"), as
Kafka's verification guard has it.
"""

from __future__ import annotations

import logging
from functools import partial

from protocol.errors import ErrorCode, KafkaError, ProtocolError
from protocol.messages.produce import ProduceRequest, ProduceResponse
from protocol.record_batch import RecordBatchView, first_batch_is_transactional
from protocol.records import iter_batches
from storage.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from storage.producer_state import VerificationGuard
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.delayed_produce import await_replication, replicated
from wirebroker.dispatch import CloseConnection, Later, RequestContext, handles
from wirebroker.metrics import BrokerStats
from wirebroker.partition import Partition, TopicPartition
from wirebroker.quotas import throttle
from wirebroker.txn.verification import OFF, TransactionalWriter, Verified

log = logging.getLogger(__name__)

#: Refusals by the partition's producer state, answered without an `error_message` as Kafka
#: does (its message is for record validation errors only).
_PRODUCER_STATE_ERRORS = (OutOfOrderSequenceError, InvalidProducerEpochError, InvalidTxnStateError)

PartitionResponse = ProduceResponse.PartitionProduceResponse
# acks=all partitions still waiting: (partition, offset its high watermark must reach, answer).
Waiting = list[tuple[Partition, int, PartitionResponse]]


@handles(ProduceRequest, (0, 11))
async def produce(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | Later | None:
    quota = ctx.broker.quotas.produce
    if quota.enabled:
        throttle.record(ctx, quota, ctx.request_size)
    if request.acks == 0:
        throttle.exempt(ctx)  # from the request quota; the byte rate still counts, as Kafka's
    acks_valid = request.acks in (0, 1, -1)
    refused = _transaction_refused(ctx, request)
    writable = ctx.authorized(
        AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in request.topic_data)
    )
    try:
        verified = (
            await _verify(ctx, request, writable)
            if request.transactional_id is not None and acks_valid and not refused
            else OFF
        )
    except KafkaError as e:
        if request.acks == 0:  # Kafka's ProduceRequest.getErrorResponse: no answer, closed
            raise CloseConnection(f"acks=0 produce failed: {e}") from e
        raise
    waiting: Waiting = []
    topics = []
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            result = PartitionResponse(index=data.index, base_offset=-1)
            partitions.append(result)
            if refused:
                result.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                continue
            if not acks_valid:
                result.error_code = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            if topic.name not in writable:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            guard = None
            if verified is not OFF:
                tp = TopicPartition(topic.name, data.index)
                rejected = verified.errors.get(tp)
                if rejected is not None:
                    result.error_code, result.error_message = _verification_answer(rejected)
                    continue
                guard = verified.guard(tp)
            appended = _append(ctx, topic.name, data, result, request.acks, guard)
            if appended is not None and request.acks == -1:
                waiting.append((*appended, result))
        topics.append(
            ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions)
        )
    if request.acks == 0:
        if ctx.broker.stats.on:
            ctx.broker.stats.produce_answered(topics)
        failed = [
            f"{t.name}-{p.index}: {ErrorCode(p.error_code).name}"
            for t in topics
            for p in t.partition_responses
            if p.error_code
        ]
        if failed:
            # Kafka closes the connection so that an acks=0 producer learns of the failure.
            raise CloseConnection(f"acks=0 produce failed for {', '.join(failed)}")
        return None
    response = ProduceResponse(responses=topics)
    waiting = _settle(waiting)
    if waiting:
        return Later(
            partial(_await_replication, ctx.broker.stats, waiting, request.timeout_ms, response)
        )
    if ctx.broker.stats.on:
        ctx.broker.stats.produce_answered(topics)
    return response


async def _verify(ctx: RequestContext, request: ProduceRequest, writable: set[str]) -> Verified:
    """KIP-890 part 1 for a request with a transactional id: which partitions (of the
    `writable` topics) may not get their transactional batch (not added to the transaction),
    and the guards of the others."""
    assert request.transactional_id is not None
    batches: dict[TopicPartition, tuple[int, int]] = {}
    sequences: dict[TopicPartition, int] = {}
    for topic in request.topic_data:
        if topic.name not in writable:
            continue
        for data in topic.partition_data:
            producer = _transactional_producer(data.records)
            if producer is not None:
                tp = TopicPartition(topic.name, data.index)
                batches[tp], sequences[tp] = producer[:2], producer[2]
    producers = set(batches.values())
    if not producers:
        return OFF
    if len(producers) > 1:
        raise KafkaError(
            "transactional records contained more than one producer id",
            error_code=ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        )
    ((producer_id, epoch),) = producers
    writer = TransactionalWriter(
        ctx.broker, request.transactional_id, producer_id, epoch, abortable_ok=ctx.api_version >= 11
    )
    return await writer.verify(sequences)


def _transactional_producer(records: memoryview | None) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of the first transactional batch in `records`."""
    if records is None:
        return None
    try:
        for batch in iter_batches(records):
            if isinstance(batch, RecordBatchView) and batch.is_transactional:
                return batch.producer_id, batch.producer_epoch, batch.base_sequence
    except ProtocolError:
        pass  # the append reports it
    return None


def _verification_answer(error: ErrorCode) -> tuple[ErrorCode, str | None]:
    """A failed verification as Produce answers it: a coordinator that could not say is
    NOT_ENOUGH_REPLICAS (retried by every client without a metadata refresh), as in Kafka;
    Kafka's messages for those two, none for the others (a fenced producer's
    INVALID_PRODUCER_EPOCH)."""
    if error == ErrorCode.INVALID_TXN_STATE:
        return error, "Partition was not added to the transaction"
    if error in _RETRY_VERIFICATION:
        return (
            ErrorCode.NOT_ENOUGH_REPLICAS,
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {error.name}",
        )
    return error, None


_RETRY_VERIFICATION = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


def _transaction_refused(ctx: RequestContext, request: ProduceRequest) -> bool:
    """Transactional records need WRITE on the request's transactional id (Kafka looks at each
    partition's first batch); without it the whole request is refused."""
    if not any(
        data.records is not None and first_batch_is_transactional(data.records)
        for topic in request.topic_data
        for data in topic.partition_data
    ):
        return False
    tid = request.transactional_id
    return tid is None or not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)


def _settle(waiting: Waiting) -> Waiting:
    """Answer the partitions whose high watermark passed their batch; the others remain."""
    still = []
    for partition, required, result in waiting:
        error = replicated((partition, required))
        if error is None:
            still.append((partition, required, result))
        else:
            result.error_code = error
    return still


async def _await_replication(
    stats: BrokerStats, waiting: Waiting, timeout_ms: int, response: ProduceResponse
) -> ProduceResponse:
    """Kafka's DelayedProduce: wait until each partition's high watermark reaches its batch."""
    errors = await await_replication(
        [(p, required) for p, required, _ in waiting], timeout_ms / 1000
    )
    for (_partition, _required, result), error in zip(waiting, errors, strict=True):
        result.error_code = error
    if stats.on:
        stats.produce_answered(response.responses)
    return response


def _append(
    ctx: RequestContext,
    topic: str,
    data: ProduceRequest.PartitionProduceData,
    result: PartitionResponse,
    acks: int,
    guard: VerificationGuard | None,
) -> tuple[Partition, int] | None:
    """Append one partition's batch (bringing KIP-890's `guard`); (partition, offset the high
    watermark must reach)."""
    broker = ctx.broker
    partition = broker.partition(topic, data.index)
    if partition is None:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None
    if not partition.is_leader(broker.node_id):
        result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return None
    records = data.records
    if records is None or len(records) == 0:
        result.error_code = ErrorCode.INVALID_RECORD
        result.error_message = "the produce request carries no records"
        return None
    try:
        info = partition.append_to_leader(
            records, ctx.broker.now_ms(), acks, verification_guard=guard
        )
    except KafkaError as e:
        if e.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
            broker.log_manager.handle_log_error(topic, data.index, e)
        result.error_code = e.error_code
        if not isinstance(e, _PRODUCER_STATE_ERRORS):
            result.error_message = str(e)
        if isinstance(e, InvalidRecordError):
            result.record_errors = [
                ProduceResponse.BatchIndexAndErrorMessage(
                    batch_index=index, batch_index_error_message=message
                )
                for index, message in e.record_errors
            ]
        return None
    except OSError as e:
        log.error("append to %s-%d failed: %s", topic, data.index, e)
        broker.log_manager.handle_log_error(topic, data.index, e)
        result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        result.error_message = str(e)
        return None
    except Exception:
        # A bug: only this partition's fate is unknown; the others keep their real answers.
        log.exception("append to %s-%d failed unexpectedly", topic, data.index)
        result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
        return None
    if broker.stats.on:
        broker.stats.produced(topic, info.records_count, len(records))
    result.base_offset = info.first_offset
    result.log_append_time_ms = info.log_append_time
    result.log_start_offset = info.log_start_offset
    return partition, info.last_offset + 1
