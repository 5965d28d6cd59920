"""Segment logs in Kafka's on-disk format. Synchronous; no trio, no sockets.

The broker uses :class:`LogManager` (all partitions of the log directories) and
:class:`PartitionLog` (one partition: append, read file slices, offsets, truncation,
retention, compaction); the other modules are their parts. Errors derive from
:class:`protocol.errors.KafkaError` and carry the error code to answer with.
"""

from storage.config import LogConfig
from storage.errors import (
    InvalidConfigError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from storage.file_handles import FileHandles
from storage.leader_epoch import LeaderEpochCache
from storage.log_manager import LogManager
from storage.partition_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    PartitionLog,
    PendingFlush,
)
from storage.results import AppendInfo, FileSlice, OffsetAndTimestamp, ReadResult
from storage.validation import AppendOrigin

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "AppendOrigin",
    "FileHandles",
    "FileSlice",
    "InvalidConfigError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "LeaderEpochCache",
    "LogClosedError",
    "LogConfig",
    "LogManager",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OffsetsOutOfOrderError",
    "PartitionLog",
    "PendingFlush",
    "ReadResult",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "StorageError",
    "UnexpectedAppendOffsetError",
]
