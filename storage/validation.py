"""Checking appended record data and assigning offsets in place (Kafka's ``LogValidator``).

This module owns the rules a batch must pass before it reaches a segment, and the rewrite a
leader makes: base offset, partition leader epoch and the timestamp -- LogAppendTime, or for
CreateTime the records' real maxTimestamp (recomputing the CRC when it differs from the header).
It is pure: it reads and patches the buffer it is given and returns what to write, never
touching files, clocks or partition state.

Leader appends (:func:`validate_leader_append`) are checked at batch level -- framing, CRC,
Kafka's client-batch rules, ``max.message.bytes`` -- and then record by record, as Kafka's
record iterator does: a compressed batch is decompressed (bounded, see
:attr:`LogConfig.max_decompressed_bytes`) and every batch's records are walked with
:func:`~protocol.record_batch.scan_v2_records`, which builds no record objects. Record count,
sizes and offset deltas must agree with the header (else INVALID_RECORD, or CORRUPT_MESSAGE
for an undecodable payload), and the records' largest timestamp replaces the producer's
maxTimestamp, so that segment rolling and time retention see the real one. Records are
decoded into objects only when a rule needs them: a compacted topic (every record needs a
key), finite ``message.timestamp.before/after.max.ms``, a ``compression.type`` other than the
producer's, or a legacy magic 0/1 message set -- which is converted to one v2 batch, as Kafka
3.x stores it.

Follower appends (:func:`analyze_follower_append`) keep offsets, epochs and bytes; they are only
framed, CRC-checked and checked for increasing offsets. A trailing partial batch is dropped.
"""

from __future__ import annotations

import struct
from enum import Enum

from protocol.checksum import crc32c
from protocol.compression import CompressionType, decompress
from protocol.errors import CorruptRecordError
from protocol.legacy_records import LegacyMessageView
from protocol.record_batch import (
    CONTROL_MASK,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    Record,
    RecordBatchView,
    SimpleRecord,
    TimestampType,
    as_byte_view,
    scan_v2_records,
)
from protocol.records import build_record_batch, iter_batches, iter_records
from storage.config import LogConfig
from storage.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
)
from storage.segment import BatchMeta

__all__ = ["AppendOrigin", "ValidatedAppend", "analyze_follower_append", "validate_leader_append"]

_HEADER = struct.Struct(">qiibIhiqqqhii")
_q = struct.Struct(">q")
_i = struct.Struct(">i")
_h = struct.Struct(">h")
_I = struct.Struct(">I")


class AppendOrigin(Enum):
    """Who is appending as leader: a producer, or a coordinator of this broker (group
    offsets, transaction markers), whose batches skip the client rules."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


class ValidatedAppend:
    """What to write and what it contains."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = (
        "data",
        "epochs",
        "first_offset",
        "has_legacy",
        "last_offset",
        "log_append_time",
        "max_timestamp",
        "metas",
        "offset_of_max_timestamp",
        "records_count",
    )

    def __init__(
        self,
        data: memoryview,
        metas: list[BatchMeta],
        first_offset: int = -1,
        last_offset: int = -1,
        max_timestamp: int = NO_TIMESTAMP,
        offset_of_max_timestamp: int = -1,
        log_append_time: int = NO_TIMESTAMP,
        records_count: int = 0,
        epochs: list[tuple[int, int]] | None = None,
    ) -> None:
        self.data = data
        self.metas = metas
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.log_append_time = log_append_time
        self.records_count = records_count
        #: (partition leader epoch, base offset) of each v2 batch, for the leader epoch cache.
        self.epochs = [] if epochs is None else epochs
        #: A legacy (magic 0/1) batch was appended as is (follower only).
        self.has_legacy = False


def _invalid(message: str, index: int = 0) -> InvalidRecordError:
    return InvalidRecordError(message, record_errors=[(index, message)])


def validate_leader_append(
    records: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    leader_epoch: int,
    now_ms: int,
    config: LogConfig,
    origin: AppendOrigin = AppendOrigin.CLIENT,
) -> ValidatedAppend:
    """Validate a leader append and assign offsets from `next_offset`; see the module doc.

    Raises :class:`CorruptRecordError` (CORRUPT_MESSAGE), :class:`ProtocolError` /
    :class:`InvalidRecordError` (INVALID_RECORD), :class:`InvalidTimestampError`,
    :class:`RecordTooLargeError`.
    """
    view = records if type(records) is memoryview else memoryview(records)
    if view.readonly or view.format != "B" or view.ndim != 1:
        view = memoryview(bytearray(view))
    n = len(view)
    if n >= RECORD_BATCH_OVERHEAD and view[16] == 2 and origin is AppendOrigin.CLIENT:
        fast = _fast_path(view, n, next_offset, leader_epoch, now_ms, config)
        if fast is not None:
            return fast
    if n < 17:
        raise CorruptRecordError(f"records of {n} bytes hold no batch")
    magic = view[16]
    if magic < 2:
        return _convert_legacy(view, next_offset, leader_epoch, now_ms, config)
    if magic > 2:
        raise CorruptRecordError(f"invalid magic found in record: {magic}")
    if n < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(f"record batch of {n} bytes is smaller than its header")
    (length,) = _i.unpack_from(view, 8)
    if length + 12 != n and origin == AppendOrigin.CLIENT:
        if length + 12 > n or length + 12 < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"batchLength {length} does not match {n} bytes of records")
        raise _invalid("produce requests may only contain exactly one record batch per partition")
    out = ValidatedAppend(view, [])
    pos = 0
    offset = next_offset
    while pos < n:
        if n - pos < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"records end with a partial batch ({n - pos} bytes)")
        size = _i.unpack_from(view, pos + 8)[0] + 12
        if size < RECORD_BATCH_OVERHEAD or size > n - pos:
            raise CorruptRecordError(f"record batch at byte {pos} has an invalid size {size}")
        if view[pos + 16] != 2:
            raise _invalid("batch magic does not match the first batch's magic 2")
        offset = _validate_v2(
            view[pos : pos + size], out, offset, leader_epoch, now_ms, config, origin
        )
        pos += size
    return out


def _fast_path(
    view: memoryview, n: int, next_offset: int, leader_epoch: int, now_ms: int, config: LogConfig
) -> ValidatedAppend | None:
    """One well-formed client v2 batch needing no record objects: every check and the
    in-place rewrite in one function (the produce hot path). None: take the general path,
    which also produces the precise error."""
    (
        _base,
        length,
        _epoch,
        _magic,
        stored_crc,
        attributes,
        lod,
        base_ts,
        header_max_ts,
        producer_id,
        _producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(view, 0)
    codec = attributes & 0x07
    if (
        length + 12 != n
        or attributes & (CONTROL_MASK | TIMESTAMP_TYPE_MASK)
        or codec > CompressionType.ZSTD
        or count <= 0
        or lod + 1 != count
        or (producer_id >= 0 and base_sequence < 0)
        or n > config.max_message_bytes
        or config.compact
        or config.validates_timestamps
    ):
        return None
    target = config.target_compression
    if target is not None and target != codec:
        return None
    if crc32c(view[21:]) != stored_crc:
        raise CorruptRecordError(f"record is corrupt (stored crc = {stored_crc}) in batch")
    max_ts = base_ts + _scan_records(view, codec, count, config)
    _q.pack_into(view, 0, next_offset)
    _i.pack_into(view, 12, leader_epoch)
    last = next_offset + lod
    log_append_time = NO_TIMESTAMP
    if config.message_timestamp_type == TimestampType.LOG_APPEND_TIME:
        RecordBatchView(view).set_log_append_time(now_ms)
        max_ts = log_append_time = now_ms
    elif max_ts != header_max_ts:
        RecordBatchView(view).set_max_timestamp(TimestampType.CREATE_TIME, max_ts)
    return ValidatedAppend(
        view,
        [(n, next_offset, last, max_ts)],
        next_offset,
        last,
        max_ts,
        last,
        log_append_time,
        count,
        [(leader_epoch, next_offset)] if leader_epoch >= 0 else [],
    )


def _scan_records(batch: memoryview, codec: int, count: int, config: LogConfig) -> int:
    """Walk a v2 batch's records, decompressing them first (bounded by
    :attr:`LogConfig.max_decompressed_bytes`); return their largest timestamp delta."""
    data = batch[RECORD_BATCH_OVERHEAD:]
    if codec != CompressionType.NONE:
        data = memoryview(decompress(codec, data, config.max_decompressed_bytes))
    return scan_v2_records(data, count)


def _validate_v2(
    batch: memoryview,
    out: ValidatedAppend,
    next_offset: int,
    leader_epoch: int,
    now_ms: int,
    config: LogConfig,
    origin: AppendOrigin,
) -> int:
    size = len(batch)
    (
        _base,
        _length,
        _epoch,
        _magic,
        stored_crc,
        attributes,
        lod,
        base_ts,
        header_max_ts,
        producer_id,
        _producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(batch, 0)
    if crc32c(batch[21:]) != stored_crc:
        raise CorruptRecordError(f"record is corrupt (stored crc = {stored_crc}) in batch")
    codec = attributes & 0x07
    if codec > CompressionType.ZSTD:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    if count < 0:
        raise CorruptRecordError(f"invalid record count {count}")
    is_control = bool(attributes & CONTROL_MASK)
    if origin == AppendOrigin.CLIENT:
        if lod + 1 <= 0:
            raise _invalid(f"batch has an invalid offset range: last offset delta {lod}")
        if count <= 0:
            raise _invalid(f"invalid reported count for record batch: {count}")
        if lod + 1 != count:
            raise _invalid(
                f"inconsistent batch offset range (last offset delta {lod}) and count of "
                f"records {count}"
            )
        if is_control:
            raise _invalid("clients are not allowed to write control records")
        if producer_id >= 0 and base_sequence < 0:
            raise _invalid(
                f"invalid sequence number {base_sequence} in record batch with producerId "
                f"{producer_id}"
            )
    elif lod < 0:
        raise _invalid(f"batch has an invalid last offset delta {lod}")
    if size > config.max_message_bytes:
        raise RecordTooLargeError(
            f"the record batch of {size} bytes exceeds max.message.bytes "
            f"({config.max_message_bytes})"
        )
    log_append = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    if attributes & TIMESTAMP_TYPE_MASK and origin == AppendOrigin.CLIENT and log_append:
        raise InvalidTimestampError(
            "producers must not set the timestamp type to LogAppendTime",
            record_errors=[(0, "invalid timestamp type LogAppendTime")],
        )
    max_ts = base_ts + _scan_records(batch, codec, count, config)
    target = config.target_compression
    convert = target is not None and target != codec and not is_control
    deep = (config.compact and not is_control) or (config.validates_timestamps and not log_append)
    if convert or deep:
        view = RecordBatchView(batch)
        decoded = list(iter_records(view, max_decompressed_bytes=config.max_decompressed_bytes))
        _check_records(decoded, config, now_ms, log_append)
        if convert:
            if len(out.metas) or len(batch) != len(out.data):
                raise _invalid("a batch that must be rebuilt must be the only batch")
            return _rebuild(view, decoded, out, next_offset, leader_epoch, now_ms, config)
    # In place: offsets and epoch are outside the CRC; the timestamp is inside it.
    _q.pack_into(batch, 0, next_offset)
    _i.pack_into(batch, 12, leader_epoch)
    if log_append:
        RecordBatchView(batch).set_log_append_time(now_ms)
        max_ts = now_ms
        out.log_append_time = now_ms
    elif attributes & TIMESTAMP_TYPE_MASK or max_ts != header_max_ts:
        RecordBatchView(batch).set_max_timestamp(TimestampType.CREATE_TIME, max_ts)
    last = next_offset + lod
    _account(out, size, next_offset, last, max_ts, count, leader_epoch)
    return last + 1


def _account(
    out: ValidatedAppend,
    size: int,
    first: int,
    last: int,
    max_ts: int,
    count: int,
    epoch: int,
) -> None:
    if not out.metas:
        out.first_offset = first
    out.metas.append((size, first, last, max_ts))
    out.last_offset = last
    if max_ts > out.max_timestamp or out.offset_of_max_timestamp < 0:
        out.max_timestamp = max_ts
        out.offset_of_max_timestamp = last
    out.records_count += count
    if epoch >= 0:
        out.epochs.append((epoch, first))


def _check_records(records: list[Record], config: LogConfig, now_ms: int, log_append: bool) -> None:
    errors: list[tuple[int, str]] = []
    timestamp_error = False
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    for i, r in enumerate(records):
        if config.compact and r.key is None:
            errors.append((i, "compacted topic cannot accept message without key"))
            continue
        if not log_append and r.timestamp != NO_TIMESTAMP:
            diff = now_ms - r.timestamp
            if diff > before or -diff > after:
                timestamp_error = True
                errors.append(
                    (
                        i,
                        f"timestamp {r.timestamp} of message with offset {r.offset} is out of "
                        f"range; it should be within [{now_ms - before}, {now_ms + after}]",
                    )
                )
    if errors:
        if timestamp_error:
            raise InvalidTimestampError(
                "one or more records have been rejected due to invalid timestamp",
                record_errors=errors,
            )
        raise InvalidRecordError(
            f"one or more records have been rejected due to {len(errors)} record errors",
            record_errors=errors,
        )


def _build(
    records: list[Record],
    *,
    next_offset: int,
    leader_epoch: int,
    now_ms: int,
    config: LogConfig,
    compression: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    log_append = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    target = config.target_compression
    simple = [
        SimpleRecord(r.key, r.value, r.headers, now_ms if log_append else r.timestamp)
        for r in records
    ]
    return build_record_batch(
        simple,
        base_offset=next_offset,
        partition_leader_epoch=leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        compression=compression,
        compression_level=config.target_compression_level if compression == target else None,
        timestamp_type=config.message_timestamp_type,
        log_append_time=now_ms if log_append else None,
    )


def _finish_rebuilt(
    out: ValidatedAppend,
    data: bytes,
    next_offset: int,
    leader_epoch: int,
    config: LogConfig,
    now_ms: int,
) -> int:
    if len(data) > config.max_message_bytes:
        raise RecordTooLargeError(
            f"the converted batch of {len(data)} bytes exceeds max.message.bytes "
            f"({config.max_message_bytes})"
        )
    view = RecordBatchView(data)
    out.data = memoryview(data)
    out.metas.clear()
    out.epochs.clear()
    out.records_count = 0
    out.max_timestamp = NO_TIMESTAMP
    out.offset_of_max_timestamp = -1
    if view.timestamp_type == TimestampType.LOG_APPEND_TIME:
        out.log_append_time = now_ms
    last = view.last_offset
    _account(
        out, len(data), next_offset, last, view.max_timestamp, view.records_count, leader_epoch
    )
    return last + 1


def _rebuild(
    view: RecordBatchView,
    records: list[Record],
    out: ValidatedAppend,
    next_offset: int,
    leader_epoch: int,
    now_ms: int,
    config: LogConfig,
) -> int:
    target = config.target_compression
    data = _build(
        records,
        next_offset=next_offset,
        leader_epoch=leader_epoch,
        now_ms=now_ms,
        config=config,
        compression=view.compression if target is None else target,
        producer_id=view.producer_id,
        producer_epoch=view.producer_epoch,
        base_sequence=view.base_sequence,
        is_transactional=view.is_transactional,
    )
    return _finish_rebuilt(out, data, next_offset, leader_epoch, config, now_ms)


def _convert_legacy(
    view: memoryview, next_offset: int, leader_epoch: int, now_ms: int, config: LogConfig
) -> ValidatedAppend:
    """A magic 0/1 message set becomes one v2 batch (Kafka 3.x always stores v2)."""
    entries: list[LegacyMessageView] = []
    for entry in iter_batches(view, allow_truncated=False):
        if not isinstance(entry, LegacyMessageView) or (
            entries and entry.magic != entries[0].magic
        ):
            raise _invalid("batch magic is not the same as the first batch's magic")
        entry.verify_crc()
        if entry.size_in_bytes > config.max_message_bytes:
            raise RecordTooLargeError(
                f"the message of {entry.size_in_bytes} bytes exceeds max.message.bytes "
                f"({config.max_message_bytes})"
            )
        entries.append(entry)
    codec = entries[0].compression
    if codec != CompressionType.NONE and len(entries) > 1:
        raise _invalid("compressed outer record has more than one batch")
    records: list[Record] = []
    for entry in entries:
        if entry.compression != codec:
            raise _invalid("legacy message set mixes compressed and uncompressed messages")
        records.extend(iter_records(entry, verify_crc=True))
    if not records:
        raise _invalid("produce requests must have at least one record")
    log_append = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    _check_records(records, config, now_ms, log_append)
    target = config.target_compression
    out = ValidatedAppend(view, [])
    data = _build(
        records,
        next_offset=next_offset,
        leader_epoch=leader_epoch,
        now_ms=now_ms,
        config=config,
        compression=codec if target is None else target,
    )
    _finish_rebuilt(out, data, next_offset, leader_epoch, config, now_ms)
    return out


def analyze_follower_append(records: bytes | bytearray | memoryview) -> ValidatedAppend:
    """Frame and CRC-check replicated batches, keeping their offsets; see the module doc.

    Raises :class:`CorruptRecordError` or :class:`OffsetsOutOfOrderError`.
    """
    view = as_byte_view(records)
    out = ValidatedAppend(view, [])
    it = iter_batches(view)
    prev_last = -1
    for batch in it:
        batch.verify_crc()
        if isinstance(batch, RecordBatchView):
            first, last = batch.base_offset, batch.last_offset
            max_ts = batch.max_timestamp
            count = batch.records_count
            epoch = batch.partition_leader_epoch
            if batch.last_offset_delta < 0:
                raise CorruptRecordError(f"batch at offset {first} has a negative offset delta")
        else:
            first = last = batch.offset
            max_ts = batch.timestamp
            count = 1
            epoch = -1
            out.has_legacy = True
        if first <= prev_last:
            raise OffsetsOutOfOrderError(
                f"out of order offsets found in append: {first} follows {prev_last}"
            )
        prev_last = last
        _account(out, batch.size_in_bytes, first, last, max_ts, count, epoch)
    if it.truncated:
        out.data = view[: it.position]
    return out
