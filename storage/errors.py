"""The exceptions `storage/` raises, each carrying the Kafka error code a broker answers with.

Record-level problems found by the codec arrive as :mod:`protocol.errors` types
(:class:`~protocol.errors.CorruptRecordError` for framing and CRC failures,
:class:`~protocol.errors.ProtocolError` with INVALID_RECORD for policy failures) and are passed
through unchanged; everything else the storage layer decides is one of the classes below. All of
them derive from :class:`~protocol.errors.KafkaError`, so a produce or fetch handler catches
``KafkaError`` per partition and answers with ``error_code``.
"""

from __future__ import annotations

from protocol.error_codes import ErrorCode
from protocol.errors import KafkaError

__all__ = [
    "CorruptIndexError",
    "InvalidConfigError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "LogClosedError",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "OutOfOrderSequenceError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "TransactionCoordinatorFencedError",
    "UnexpectedAppendOffsetError",
]


class StorageError(KafkaError):
    """Base of every error `storage/` raises itself.

    Raised directly for nothing. Handlers answer the partition with :attr:`error_code`.
    """

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class KafkaStorageError(StorageError):
    """An I/O operation on a log directory failed (disk full, read-only file system, EIO...).

    Raised by appends, flushes, rolls and checkpoints, wrapping the ``OSError``. An append that
    fails (its flush included) leaves the log as it was before the append, so the log stays
    usable and a retry once the fault clears writes the records once. The broker answers
    KAFKA_STORAGE_ERROR; for any other cause than a full disk the log manager also takes the
    log directory offline, as Kafka does.
    """

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogClosedError(StorageError):
    """An operation was attempted on a :class:`~storage.partition_log.PartitionLog` after
    ``close()`` or ``delete()``. The caller raced a partition removal; answer
    NOT_LEADER_OR_FOLLOWER or retry with the current log."""

    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class OffsetOutOfRangeError(StorageError):
    """A read asked for an offset below the log start offset or above the log end offset, or
    DeleteRecords asked to move the log start offset past the high watermark.

    Raised by ``PartitionLog.read`` and ``delete_records_before``. Answer OFFSET_OUT_OF_RANGE.
    """

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(StorageError):
    """A batch is larger than the topic's ``max.message.bytes``.

    Raised by ``append_as_leader``; nothing was written. Answer MESSAGE_TOO_LARGE.
    """

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(StorageError):
    """An append is larger than ``segment.bytes`` and can never fit in a segment.

    Raised by both append paths; nothing was written. Answer RECORD_LIST_TOO_LARGE.
    """

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidRecordError(StorageError):
    """One or more records break the topic's rules (no key on a compacted topic, offsets of a
    coordinator batch that do not line up, ...).

    Raised by ``append_as_leader``; nothing was written. :attr:`record_errors` lists
    ``(batch_index, message)`` pairs for the Produce response (v8+). Answer INVALID_RECORD.
    """

    error_code = ErrorCode.INVALID_RECORD

    def __init__(
        self,
        message: str,
        *,
        record_errors: list[tuple[int, str]] | None = None,
        error_code: ErrorCode | None = None,
    ) -> None:
        super().__init__(message, error_code=error_code)
        self.record_errors: list[tuple[int, str]] = record_errors or []


class InvalidTimestampError(InvalidRecordError):
    """A record's CreateTime timestamp is outside ``message.timestamp.before.max.ms`` /
    ``message.timestamp.after.max.ms``, or a producer set LogAppendTime itself.

    Raised by ``append_as_leader``; nothing was written. Answer INVALID_TIMESTAMP.
    """

    error_code = ErrorCode.INVALID_TIMESTAMP


class UnexpectedAppendOffsetError(StorageError):
    """A follower append starts below the log end offset (the leader's data does not continue
    ours). Raised by ``append_as_follower``; the replica fetcher should truncate and retry."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, *, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class OffsetsOutOfOrderError(StorageError):
    """The batches of a follower append do not have strictly increasing offsets. Raised by
    ``append_as_follower``; nothing was written. The leader sent corrupt data."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


class InvalidConfigError(StorageError):
    """A topic or broker log configuration value is unknown or out of range.

    Raised by :meth:`storage.config.LogConfig.from_properties`. Answer INVALID_CONFIG
    (CreateTopics, AlterConfigs) with the message.
    """

    error_code = ErrorCode.INVALID_CONFIG


class CorruptIndexError(StorageError):
    """An index file fails its sanity check. Raised by :mod:`storage.index` and caught by
    recovery, which rebuilds the index from the log; it never reaches the broker."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not continue its sequence (a gap, or a non-zero
    first sequence for a new epoch). Raised by :mod:`storage.producer_state` during a leader
    append; nothing was written. The producer resends or resets its sequences."""

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """A producer's batch carries an epoch older than the one this partition last saw (the
    producer was fenced by a newer instance). Raised by :mod:`storage.producer_state` during a
    leader append; nothing was written."""

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    """A producer with an ongoing transaction on this partition sent a non-transactional batch
    (Kafka's ProducerAppendInfo check). Raised by :mod:`storage.producer_state` during a leader
    append; nothing was written."""

    error_code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker carries a coordinator epoch older than the one this partition last
    saw for its producer: it comes from a zombie coordinator. Raised by
    :mod:`storage.producer_state` during a marker append; nothing was written."""

    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED
