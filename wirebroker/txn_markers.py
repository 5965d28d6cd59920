"""Writing transaction markers to the partitions this broker leads (the append side of Kafka's
WriteTxnMarkers), for the WriteTxnMarkers handler and, in process, for a transaction
coordinator of this broker.

For one marker (producer id and epoch, coordinator epoch, COMMIT or ABORT) and its partitions,
:func:`append_markers` appends a control batch to each partition as its leader, at once and in
order, with acks=all semantics (Kafka's ``appendRecords`` with ``requiredAcks = -1`` and origin
COORDINATOR): the partition's producer state checks the producer epoch
(INVALID_PRODUCER_EPOCH) and the coordinator epoch (TRANSACTION_COORDINATOR_FENCED) before
anything is written. :func:`complete` then waits until each marker is replicated (the high
watermark passed it; REQUEST_TIMED_OUT after the timeout, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
NOT_LEADER_OR_FOLLOWER when the leadership moved), and tells the group coordinator which
``__consumer_offsets`` partitions got their marker so that it materializes (or drops) the
producer's transactional offsets, as Kafka's ``onTransactionCompleted``.
:func:`write_txn_markers` does both for an in-process caller.

Per-partition errors are Kafka's: UNKNOWN_TOPIC_OR_PARTITION (no replica here),
NOT_LEADER_OR_FOLLOWER (a replica, not the leader), NOT_ENOUGH_REPLICAS (ISR below
``min.insync.replicas``), KAFKA_STORAGE_ERROR, the epoch errors above. It must not parse
requests (the handler does) nor decide when markers are sent (the coordinator does).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, KafkaError
from protocol.record_builder import build_end_txn_marker_batch
from storage.validation import AppendOrigin
from wirebroker.delayed_produce import Appended, await_replication, replicated
from wirebroker.partition import TopicPartition
from wirebroker.topics import OFFSETS_TOPIC

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MarkerEntry:
    """One transaction's marker, as a WriteTxnMarkers request carries it."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclass(slots=True)
class MarkerWrite:
    """One marker's appends: the answers known so far, and the appends still waiting to be
    replicated."""

    entry: MarkerEntry
    errors: dict[TopicPartition, ErrorCode] = field(default_factory=dict)
    waiting: dict[TopicPartition, Appended] = field(default_factory=dict)

    def settle(self) -> bool:
        """Answer the appends already replicated; True when none is left waiting."""
        for tp, appended in list(self.waiting.items()):
            error = replicated(appended)
            if error is not None:
                self.errors[tp] = error
                del self.waiting[tp]
        return not self.waiting


def append_markers(
    broker: Broker, entry: MarkerEntry, partitions: Iterable[TopicPartition]
) -> MarkerWrite:
    """Append `entry`'s marker to each of `partitions` (each once) as its leader; see the
    module doc. Finish with :func:`complete`."""
    write = MarkerWrite(entry)
    for tp in partitions:
        if tp in write.errors or tp in write.waiting:
            continue
        error, appended = _append(broker, entry, tp)
        if appended is None:
            write.errors[tp] = error
        else:
            write.errors[tp] = ErrorCode.NONE  # keeps the partitions in their order
            write.waiting[tp] = appended
    return write


def _append(
    broker: Broker, entry: MarkerEntry, tp: TopicPartition
) -> tuple[ErrorCode, Appended | None]:
    partition = broker.partition(tp.topic, tp.partition)
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if not partition.is_local_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
    now = broker.now_ms()
    batch = build_end_txn_marker_batch(
        entry.commit,
        producer_id=entry.producer_id,
        producer_epoch=entry.producer_epoch,
        coordinator_epoch=entry.coordinator_epoch,
        timestamp=now,
    )
    try:
        info = partition.append_to_leader(
            memoryview(bytearray(batch)), now, acks=-1, origin=AppendOrigin.COORDINATOR
        )
    except KafkaError as e:
        log.info(
            "%s-%d: marker of producer %d refused: %s", tp.topic, tp.partition, entry.producer_id, e
        )
        if e.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
            broker.log_manager.handle_log_error(tp.topic, tp.partition, e)
        return e.error_code, None
    except OSError as e:
        log.error("%s-%d: marker append failed: %s", tp.topic, tp.partition, e)
        broker.log_manager.handle_log_error(tp.topic, tp.partition, e)
        return ErrorCode.KAFKA_STORAGE_ERROR, None
    return ErrorCode.NONE, (partition, info.last_offset + 1)


def complete_now(broker: Broker, writes: list[MarkerWrite]) -> bool:
    """If every append of `writes` is replicated already (one broker, or an ISR of one), answer
    them and complete the offsets' transactions now; else False (call :func:`complete`)."""
    if not all([w.settle() for w in writes]):
        return False
    for w in writes:
        _complete_offsets(broker, w)
    return True


async def complete(broker: Broker, writes: list[MarkerWrite], timeout_s: float) -> None:
    """Wait until each append of `writes` is replicated (or `timeout_s` passed), then complete
    the producers' transactional offsets in the `__consumer_offsets` partitions that have
    their marker."""
    if complete_now(broker, writes):
        return
    pending = [(w, tp, appended) for w in writes for tp, appended in w.waiting.items()]
    answers = await await_replication([appended for _, _, appended in pending], timeout_s)
    for (w, tp, _), error in zip(pending, answers, strict=True):
        w.errors[tp] = error
    for w in writes:
        w.waiting.clear()
        _complete_offsets(broker, w)


def _complete_offsets(broker: Broker, write: MarkerWrite) -> None:
    done = [
        tp.partition
        for tp, error in write.errors.items()
        if tp.topic == OFFSETS_TOPIC and error == ErrorCode.NONE
    ]
    if not done:
        return
    entry = write.entry
    try:
        broker.groups.group_manager.complete_transaction(entry.producer_id, done, entry.commit)
    except Exception:
        log.exception("completing the offsets of producer %d failed", entry.producer_id)
        for index in done:
            write.errors[TopicPartition(OFFSETS_TOPIC, index)] = ErrorCode.UNKNOWN_SERVER_ERROR


async def write_txn_markers(
    broker: Broker, entry: MarkerEntry, partitions: Iterable[TopicPartition], timeout_s: float
) -> dict[TopicPartition, ErrorCode]:
    """In process (a transaction coordinator of this broker): write `entry`'s marker to
    `partitions` and wait as WriteTxnMarkers does; the error of each partition, in order."""
    write = append_markers(broker, entry, partitions)
    await complete(broker, [write], timeout_s)
    return write.errors
