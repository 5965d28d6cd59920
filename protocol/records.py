"""Kafka record data: splitting a records blob into batches, decoding records, validating produce.

This is the entry point for everything that handles a ``records`` field (Produce requests,
Fetch responses, log segments). It owns dispatching on the magic byte (offset 16 in every
format) between v2 batches (:mod:`protocol.record_batch`) and legacy magic 0/1 message sets
(:mod:`protocol.legacy_records`), and re-exports the public names of those modules and of
:mod:`protocol.record_builder`, so callers import from here only.

Sans-IO: bytes or memoryviews in, views and values out; no sockets, files, threads or clocks.
Views never copy the batch bytes. Malformed input raises :class:`ProtocolError` (or its
subclasses :class:`CorruptRecordError`, :class:`DecompressionLimitError`) and nothing else.

Partial trailing batch: a Fetch response may end with the first bytes of a batch that did not
fit. :func:`iter_batches` yields only whole batches and then stops; afterwards its
:attr:`BatchIterator.truncated` flag says whether bytes were left over (and
:attr:`BatchIterator.remaining` holds them). Pass ``allow_truncated=False`` to get a
:class:`CorruptRecordError` instead (what a produce path wants).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NoReturn

from protocol.compression import CompressionType
from protocol.error_codes import ErrorCode
from protocol.errors import CorruptRecordError, ProtocolError
from protocol.legacy_records import (
    RECORD_OVERHEAD_V0,
    LegacyMessageView,
    build_legacy_records,
    encode_legacy_message,
    iter_legacy_records,
)
from protocol.record_batch import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_RECORD_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    Bytes,
    Header,
    Record,
    RecordBatchView,
    SimpleRecord,
    TimestampType,
    as_byte_view,
    iter_v2_records,
)
from protocol.record_builder import (
    ControlRecordType,
    build_control_batch,
    build_empty_batch,
    build_end_txn_marker_batch,
    build_record_batch,
    control_record_type,
    decode_control_record_key,
    decode_end_txn_marker,
    encode_control_record_key,
    encode_end_txn_marker,
)

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "Batch",
    "BatchIterator",
    "Bytes",
    "CompressionType",
    "ControlRecordType",
    "Header",
    "LegacyMessageView",
    "Record",
    "RecordBatchView",
    "SimpleRecord",
    "TimestampType",
    "build_control_batch",
    "build_empty_batch",
    "build_end_txn_marker_batch",
    "build_legacy_records",
    "build_record_batch",
    "control_record_type",
    "decode_control_record_key",
    "decode_end_txn_marker",
    "encode_control_record_key",
    "encode_end_txn_marker",
    "encode_legacy_message",
    "iter_batches",
    "iter_records",
    "validate_produce_records",
]

Batch = RecordBatchView | LegacyMessageView

_i = struct.Struct(">i")


class BatchIterator:
    """Iterates the whole batches of a records blob; see the module doc for truncation.

    Attributes, meaningful once iteration has stopped: `position` (bytes consumed by whole
    batches), `truncated` (bytes were left over), `remaining` (those bytes, a memoryview) and
    `truncated_batch_size` (the declared total size of the partial batch, if its length field
    was readable; a consumer compares it with its fetch size).
    """

    __slots__ = ("buf", "position", "allow_truncated", "truncated_batch_size")

    def __init__(self, buf: Bytes, *, allow_truncated: bool = True) -> None:
        self.buf = as_byte_view(buf)
        self.position = 0
        self.allow_truncated = allow_truncated
        self.truncated_batch_size: int | None = None

    def __iter__(self) -> BatchIterator:
        return self

    @property
    def remaining(self) -> memoryview:
        return self.buf[self.position :]

    @property
    def truncated(self) -> bool:
        return self.position < len(self.buf)

    def _stop(self, declared: int | None) -> NoReturn:
        self.truncated_batch_size = declared
        if not self.allow_truncated:
            left = len(self.buf) - self.position
            raise CorruptRecordError(f"records end with a partial batch ({left} bytes)")
        raise StopIteration

    def __next__(self) -> Batch:
        buf = self.buf
        pos = self.position
        left = len(buf) - pos
        if left == 0:
            raise StopIteration
        if left < LOG_OVERHEAD:
            self._stop(None)
        (length,) = _i.unpack_from(buf, pos + 8)
        # Same checks, in the same order, as Kafka's ByteBufferLogInputStream.
        if length < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"record size {length} is less than the minimum record overhead "
                f"({RECORD_OVERHEAD_V0})"
            )
        size = length + LOG_OVERHEAD
        if left <= MAGIC_OFFSET:
            self._stop(size)
        magic = buf[pos + MAGIC_OFFSET]
        if magic > 2:
            raise CorruptRecordError(f"invalid magic found in record: {magic}")
        if left < size:
            self._stop(size)
        view = buf[pos : pos + size]
        batch: Batch = RecordBatchView(view) if magic == 2 else LegacyMessageView(view)
        self.position = pos + size
        return batch


def iter_batches(buf: Bytes, *, allow_truncated: bool = True) -> BatchIterator:
    """Iterate the batches (v2) or entries (magic 0/1) of a records blob, without copying.

    Yields :class:`RecordBatchView` or :class:`LegacyMessageView` per the magic byte. Framing
    errors raise :class:`CorruptRecordError`; CRCs are not checked (call ``verify_crc``).
    """
    return BatchIterator(buf, allow_truncated=allow_truncated)


def iter_records(
    batch: Batch,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    verify_crc: bool = False,
) -> Iterator[Record]:
    """Yield the records of a batch (decompressing, bounded by `max_decompressed_bytes`).

    For a legacy compressed wrapper these are its inner records, with absolute offsets.
    Keys and values are memoryview slices of the batch (or of the decompressed buffer).
    """
    if isinstance(batch, RecordBatchView):
        return iter_v2_records(
            batch, max_decompressed_bytes=max_decompressed_bytes, verify_crc=verify_crc
        )
    return iter_legacy_records(
        batch, max_decompressed_bytes=max_decompressed_bytes, verify_crc=verify_crc
    )


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(message, error_code=ErrorCode.INVALID_RECORD)


def validate_produce_records(
    buf: Bytes, *, single_batch: bool = True, from_client: bool = True
) -> list[RecordBatchView]:
    """Check a produce records blob of v2 batches cheaply (no decompression); return views.

    Checks, in order per batch: whole batches only, magic 2, CRC-32C, recordsCount >= 0 and
    (uncompressed) that many records can fit. With `single_batch` (Produce v3+), exactly one
    batch. With `from_client`, Kafka's ``LogValidator.validateBatch`` client checks: a positive
    count equal to lastOffsetDelta + 1, no control batch, a base sequence when a producer id is
    set. Framing/CRC failures raise :class:`CorruptRecordError` (CORRUPT_MESSAGE); policy
    failures raise :class:`ProtocolError` with error code INVALID_RECORD.
    """
    batches: list[RecordBatchView] = []
    for batch in iter_batches(buf, allow_truncated=False):
        if not isinstance(batch, RecordBatchView):
            raise _invalid(
                f"produce requests may only contain magic 2 record batches, not magic {batch.magic}"
            )
        if single_batch and batches:
            raise _invalid(
                "produce requests may only contain exactly one record batch per partition"
            )
        batch.verify_crc()
        count = batch.records_count
        if count < 0:
            raise CorruptRecordError(f"invalid record count {count}")
        records_size = batch.size_in_bytes - RECORD_BATCH_OVERHEAD
        if batch.compression == CompressionType.NONE and count * MIN_RECORD_SIZE > records_size:
            raise CorruptRecordError(f"record count {count} cannot fit in {records_size} bytes")
        if from_client:
            if batch.last_offset_delta + 1 <= 0:
                raise _invalid(
                    f"batch has an invalid offset range: [{batch.base_offset}, {batch.last_offset}]"
                )
            if count <= 0:
                raise _invalid(f"invalid reported count for record batch: {count}")
            if batch.last_offset_delta + 1 != count:
                raise _invalid(
                    f"inconsistent batch offset range [{batch.base_offset}, {batch.last_offset}] "
                    f"and count of records {count}"
                )
            if batch.is_control:
                raise _invalid("clients are not allowed to write control records")
            if batch.has_producer_id and batch.base_sequence < 0:
                raise _invalid(
                    f"invalid sequence number {batch.base_sequence} in record batch "
                    f"with producerId {batch.producer_id}"
                )
        batches.append(batch)
    if not batches:
        raise _invalid("produce requests must have at least one record batch per partition")
    return batches
