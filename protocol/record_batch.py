"""Kafka's v2 record batch (magic 2): a zero-copy header view and the record decoder.

This module owns the byte layout of one v2 ``RecordBatch`` and of the records inside it, as
Kafka 3.9 defines them (``DefaultRecordBatch``/``DefaultRecord``), plus the value types shared
by every record format (:class:`Record`, :class:`SimpleRecord`, :class:`TimestampType`). It is
sans-IO: it reads and patches buffers it is given, never sockets, files or clocks.

It must not copy batch bytes to read them: the header is read with ``struct.unpack_from`` on a
memoryview, and keys/values of uncompressed batches are memoryview slices of the caller's buffer
(they stay valid only as long as that buffer is unchanged). Malformed input raises
:class:`ProtocolError`/:class:`CorruptRecordError` and nothing else.

Batch layout (big-endian, 61-byte header)::

    0 baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8
    17 crc uint32 (CRC-32C of bytes 21..end) | 21 attributes int16 | 23 lastOffsetDelta int32
    27 baseTimestamp int64 | 35 maxTimestamp int64 | 43 producerId int64 | 51 producerEpoch int16
    53 baseSequence int32 | 57 recordsCount int32 | 61 records...
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeAlias

from protocol.checksum import crc32c
from protocol.compression import CompressionType, decompress
from protocol.errors import CorruptRecordError, ErrorCode, ProtocolError
from protocol.varint import decode_varint, decode_varlong

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "Bytes",
    "Header",
    "Record",
    "RecordBatchView",
    "SimpleRecord",
    "TimestampType",
    "scan_v2_records",
]

Bytes: TypeAlias = bytes | bytearray | memoryview
Header: TypeAlias = tuple[str, Bytes | None]

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
RECORD_BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # offset int64 + length int32, common to every format
MAGIC_OFFSET = 16
#: Default bound on a batch's decompressed size (a compressed batch may not inflate past it).
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024

_HEADER = struct.Struct(">qiibIhiqqqhii")
_q = struct.Struct(">q")
_i = struct.Struct(">i")
_h = struct.Struct(">h")
_I = struct.Struct(">I")

_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35
# Smallest encoded record: length, attributes, timestampDelta, offsetDelta, key len, value len,
# header count -- one byte each.
MIN_RECORD_SIZE = 7

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


class TimestampType(IntEnum):
    """What a batch's timestamps mean (attributes bit 3; magic 0 has none)."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record, in any format. `key`/`value` may be memoryview slices (no copy)."""

    offset: int
    timestamp: int
    key: Bytes | None
    value: Bytes | None
    headers: list[Header] = field(default_factory=list)

    def __repr__(self) -> str:
        def show(b: Bytes | None) -> str:
            return "None" if b is None else repr(bytes(b))

        headers = ", ".join(f"({k!r}, {show(v)})" for k, v in self.headers)
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={show(self.key)}, "
            f"value={show(self.value)}, headers=[{headers}])"
        )


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to write with a builder: offsets and batch fields come from the builder."""

    key: Bytes | None
    value: Bytes | None
    headers: Sequence[Header] = ()
    timestamp: int = NO_TIMESTAMP


def as_byte_view(buf: Bytes) -> memoryview:
    """A flat unsigned-byte memoryview over `buf` (no copy)."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def first_batch_is_transactional(buf: Bytes) -> bool:
    """Whether the first batch in `buf` is a v2 transactional batch (Kafka's
    hasTransactionalRecords looks at each partition's first batch); False for anything shorter
    or of an older format."""
    view = as_byte_view(buf)
    return (
        len(view) >= RECORD_BATCH_OVERHEAD
        and view[MAGIC_OFFSET] == 2
        and bool(view[_ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK)
    )


class RecordBatchView:
    """A zero-copy view of exactly one v2 record batch.

    Construction checks only the framing (size >= 61, magic 2, batchLength matching the buffer);
    call :meth:`verify_crc` to check integrity. Setters write into the buffer in place and need
    a writable one (e.g. a bytearray); they raise TypeError on read-only buffers.
    """

    __slots__ = ("buf",)

    def __init__(self, buf: Bytes) -> None:
        view = as_byte_view(buf)
        size = len(view)
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch size {size} is smaller than the minimum {RECORD_BATCH_OVERHEAD}"
            )
        if view[MAGIC_OFFSET] != 2:
            raise CorruptRecordError(f"not a v2 record batch (magic {view[MAGIC_OFFSET]})")
        (batch_length,) = _i.unpack_from(view, 8)
        if batch_length + LOG_OVERHEAD != size:
            raise CorruptRecordError(
                f"batchLength {batch_length} does not match the {size}-byte batch"
            )
        self.buf = view

    # ---- header fields --------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return int(_q.unpack_from(self.buf, 0)[0])

    @property
    def batch_length(self) -> int:
        return int(_i.unpack_from(self.buf, 8)[0])

    @property
    def partition_leader_epoch(self) -> int:
        return int(_i.unpack_from(self.buf, 12)[0])

    @property
    def magic(self) -> int:
        return 2

    @property
    def crc(self) -> int:
        return int(_I.unpack_from(self.buf, _CRC_OFFSET)[0])

    @property
    def attributes(self) -> int:
        return int(_h.unpack_from(self.buf, _ATTRIBUTES_OFFSET)[0])

    @property
    def compression(self) -> int:
        """The codec id (a :class:`CompressionType` value, or an unknown 5-7)."""
        return self.buf[_ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.buf[_ATTRIBUTES_OFFSET + 1] & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.buf[_ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.buf[_ATTRIBUTES_OFFSET + 1] & CONTROL_MASK)

    @property
    def has_delete_horizon_ms(self) -> bool:
        return bool(self.buf[_ATTRIBUTES_OFFSET + 1] & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon (stored in baseTimestamp) when attributes bit 6 is set."""
        return self.base_timestamp if self.has_delete_horizon_ms else None

    @property
    def last_offset_delta(self) -> int:
        return int(_i.unpack_from(self.buf, 23)[0])

    @property
    def base_timestamp(self) -> int:
        return int(_q.unpack_from(self.buf, 27)[0])

    @property
    def max_timestamp(self) -> int:
        return int(_q.unpack_from(self.buf, _MAX_TIMESTAMP_OFFSET)[0])

    @property
    def producer_id(self) -> int:
        return int(_q.unpack_from(self.buf, 43)[0])

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def producer_epoch(self) -> int:
        return int(_h.unpack_from(self.buf, 51)[0])

    @property
    def base_sequence(self) -> int:
        return int(_i.unpack_from(self.buf, 53)[0])

    @property
    def records_count(self) -> int:
        return int(_i.unpack_from(self.buf, 57)[0])

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return len(self.buf)

    @property
    def records_data(self) -> memoryview:
        """The (possibly compressed) records region after the 61-byte header."""
        return self.buf[RECORD_BATCH_OVERHEAD:]

    def header(self) -> tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]:
        """All 13 header fields in wire order, in one unpack (cheaper than 13 properties)."""
        return _HEADER.unpack_from(self.buf, 0)

    # ---- CRC -------------------------------------------------------------------------------

    def compute_crc(self) -> int:
        """CRC-32C of attributes..end, i.e. what the crc field should hold."""
        return int(crc32c(self.buf[_ATTRIBUTES_OFFSET:]))

    def is_valid(self) -> bool:
        return self.crc == self.compute_crc()

    def verify_crc(self) -> None:
        """Raise :class:`CorruptRecordError` unless the stored CRC matches the contents."""
        stored, computed = self.crc, self.compute_crc()
        if stored != computed:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset} is corrupt "
                f"(stored crc = {stored}, computed crc = {computed})"
            )

    # ---- in-place rewrites -----------------------------------------------------------------

    def set_base_offset(self, offset: int) -> None:
        """Rewrite baseOffset in place (outside the CRC: the CRC stays valid)."""
        _q.pack_into(self.buf, 0, offset)

    def set_partition_leader_epoch(self, epoch: int) -> None:
        """Rewrite partitionLeaderEpoch in place (outside the CRC: the CRC stays valid)."""
        _i.pack_into(self.buf, 12, epoch)

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """Set the timestamp type bit and maxTimestamp, then recompute the CRC (in place).

        A no-op when both already hold those values, as in Kafka's ``setMaxTimestamp``.
        """
        if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
            raise ValueError("a v2 batch needs CREATE_TIME or LOG_APPEND_TIME")
        if self.timestamp_type == timestamp_type and self.max_timestamp == max_timestamp:
            return
        attributes = self.attributes & ~TIMESTAMP_TYPE_MASK
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        _h.pack_into(self.buf, _ATTRIBUTES_OFFSET, attributes)
        _q.pack_into(self.buf, _MAX_TIMESTAMP_OFFSET, max_timestamp)
        _I.pack_into(self.buf, _CRC_OFFSET, self.compute_crc())

    def set_log_append_time(self, timestamp: int) -> None:
        """Stamp the batch LogAppendTime = `timestamp` (what a broker does for such topics)."""
        self.set_max_timestamp(TimestampType.LOG_APPEND_TIME, timestamp)

    def __repr__(self) -> str:
        return (
            f"RecordBatchView(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"records_count={self.records_count}, compression={self.compression}, "
            f"size={self.size_in_bytes})"
        )


# --------------------------------------------------------------------------------------------
# Records inside a v2 batch
# --------------------------------------------------------------------------------------------


def _corrupt(batch: RecordBatchView, what: str) -> CorruptRecordError:
    return CorruptRecordError(f"record batch at offset {batch.base_offset}: {what}")


def iter_v2_records(
    batch: RecordBatchView,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    verify_crc: bool = False,
) -> Iterator[Record]:
    """Yield the records of a v2 batch, decompressing (bounded) if needed.

    Errors surface lazily, as records are pulled: a batch whose records disagree with
    recordsCount, overrun the data, or leave bytes over raises :class:`CorruptRecordError`.
    """
    (
        base_offset,
        _length,
        _epoch,
        _magic,
        _crc,
        attributes,
        _lod,
        base_timestamp,
        max_timestamp,
        _pid,
        _pepoch,
        _seq,
        count,
    ) = _HEADER.unpack_from(batch.buf, 0)
    if verify_crc:
        batch.verify_crc()
    if count < 0:
        raise _corrupt(batch, f"invalid record count {count}")
    codec = attributes & COMPRESSION_MASK
    data = batch.buf[RECORD_BATCH_OVERHEAD:]
    if codec != CompressionType.NONE:
        data = memoryview(decompress(codec, data, max_decompressed_bytes))
    log_append_time = max_timestamp if attributes & TIMESTAMP_TYPE_MASK else None
    end = len(data)
    if count > end // MIN_RECORD_SIZE:
        raise _corrupt(batch, f"record count {count} cannot fit in {end} bytes")
    pos = 0
    try:
        for _ in range(count):
            record, pos = _read_record(data, pos, end, base_offset, base_timestamp, log_append_time)
            yield record
    except ProtocolError as e:
        raise _corrupt(batch, str(e)) from None
    if pos != end:
        raise _corrupt(batch, f"{end - pos} bytes left after the {count} declared records")


def _bad_record(message: str) -> ProtocolError:
    return ProtocolError(message, error_code=ErrorCode.INVALID_RECORD)


# Smallest record body after its length: attributes, timestampDelta, offsetDelta, key length,
# value length, header count -- one byte each.
_MIN_RECORD_BODY = MIN_RECORD_SIZE - 1


def scan_v2_records(data: Bytes, count: int) -> int:
    """Walk the `count` records of a v2 batch's (decompressed) records region without building
    them, as Kafka's record iterator reads them: every field fits its record's declared length,
    offset deltas run 0..count-1, and no byte is left over.

    Returns the largest timestampDelta, from which a caller derives the batch's real
    maxTimestamp. The leader's produce path runs it on every batch, so it allocates nothing per
    record and decodes one- and two-byte varints inline (longer ones go through
    :mod:`protocol.varint`). Raises :class:`ProtocolError` with INVALID_RECORD, Kafka's answer
    to an ``InvalidRecordException``.
    """
    end = len(data)
    if count <= 0 or count > end // MIN_RECORD_SIZE:
        raise _bad_record(f"record count {count} cannot fit in {end} bytes of records")
    # Indexing bytes is about twice as fast as indexing a memoryview; typed `bytes`, the
    # compiled build (wirebroker.compiled) indexes it natively.
    buf = data if type(data) is bytes else bytes(data)
    pos = 0
    max_delta = -(1 << 63)
    try:
        for i in range(count):
            b = buf[pos]
            if b < 0x80:
                size, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif buf[pos + 1] < 0x80:
                b = (b & 0x7F) | buf[pos + 1] << 7
                size, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                size, pos = decode_varint(buf, pos)
            rec_end = pos + size
            if size < _MIN_RECORD_BODY or rec_end > end:
                raise _bad_record(f"record {i} declares an invalid size {size}")
            b = buf[pos + 1]  # after the (unused) attributes byte
            if b < 0x80:
                delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                delta, pos = decode_varlong(buf, pos + 1)
            if delta > max_delta:
                max_delta = delta
            b = buf[pos]
            if b == i << 1 < 0x80:
                pos += 1
            else:
                offset_delta, pos = decode_varint(buf, pos)
                if offset_delta != i:
                    raise _bad_record(f"record {i} has offset delta {offset_delta}; expected {i}")
            for _ in range(2):  # key, then value; any negative length is null
                b = buf[pos]
                if b < 0x80:
                    pos += 1 if b & 1 else (b >> 1) + 1
                elif buf[pos + 1] < 0x80:
                    pos += 2 if b & 1 else (((b & 0x7F) | buf[pos + 1] << 7) >> 1) + 2
                else:
                    length, pos = decode_varint(buf, pos)
                    if length > 0:
                        pos += length
            header_count = buf[pos]
            pos += 1
            if header_count:
                header_count, pos = decode_varint(buf, pos - 1)
                if header_count < 0 or header_count > (rec_end - pos) // 2:
                    raise _bad_record(f"record {i} declares {header_count} headers")
                for _ in range(header_count):
                    length, pos = decode_varint(buf, pos)
                    if length < 0:
                        raise _bad_record(f"record {i} has a header key of negative size {length}")
                    length, pos = decode_varint(buf, pos + length)
                    if length > 0:
                        pos += length
            if pos != rec_end:
                raise _bad_record(
                    f"record {i} declares {size} bytes but its fields take {size + pos - rec_end}"
                )
    except IndexError:
        raise _bad_record("records end in the middle of a record") from None
    except ProtocolError as e:
        if e.error_code == ErrorCode.INVALID_RECORD:
            raise
        raise _bad_record(f"malformed record: {e}") from None
    if pos != end:
        raise _bad_record(f"{end - pos} bytes left after the {count} declared records")
    return max_delta


def _read_record(
    buf: memoryview,
    pos: int,
    end: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
) -> tuple[Record, int]:
    size, pos = decode_varint(buf, pos)
    if size < 0 or size > end - pos:
        raise ProtocolError(f"record size {size} exceeds the {end - pos} bytes left")
    rec_end = pos + size
    pos += 1  # attributes: unused
    ts_delta, pos = decode_varlong(buf, pos)
    offset_delta, pos = decode_varint(buf, pos)
    key_len, pos = decode_varint(buf, pos)
    key: memoryview | None = None
    if key_len >= 0:  # Kafka reads any negative length as null
        if key_len > rec_end - pos:
            raise ProtocolError(f"key length {key_len} overruns the record")
        key = buf[pos : pos + key_len]
        pos += key_len
    value_len, pos = decode_varint(buf, pos)
    value: memoryview | None = None
    if value_len >= 0:
        if value_len > rec_end - pos:
            raise ProtocolError(f"value length {value_len} overruns the record")
        value = buf[pos : pos + value_len]
        pos += value_len
    header_count, pos = decode_varint(buf, pos)
    if header_count < 0:
        raise ProtocolError(f"invalid number of record headers {header_count}")
    if header_count > (rec_end - pos) // 2:
        raise ProtocolError(f"{header_count} headers cannot fit in the record")
    headers: list[Header] = []
    for _ in range(header_count):
        hk_len, pos = decode_varint(buf, pos)
        if hk_len < 0:
            raise ProtocolError(f"invalid negative header key size {hk_len}")
        if hk_len > rec_end - pos:
            raise ProtocolError(f"header key length {hk_len} overruns the record")
        # Java decodes header keys leniently (malformed UTF-8 -> U+FFFD); so do we.
        hkey = str(buf[pos : pos + hk_len], "utf-8", "replace")
        pos += hk_len
        hv_len, pos = decode_varint(buf, pos)
        hvalue: memoryview | None = None
        if hv_len >= 0:
            if hv_len > rec_end - pos:
                raise ProtocolError(f"header value length {hv_len} overruns the record")
            hvalue = buf[pos : pos + hv_len]
            pos += hv_len
        headers.append((hkey, hvalue))
    if pos != rec_end:
        raise ProtocolError(
            f"record declared {size} bytes but its fields took {pos - rec_end + size}"
        )
    timestamp = base_timestamp + ts_delta if log_append_time is None else log_append_time
    return Record(base_offset + offset_delta, timestamp, key, value, headers), pos
