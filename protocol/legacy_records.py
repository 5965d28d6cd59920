"""Kafka's legacy message sets (magic 0 and 1): view, deep iteration and builder.

This module owns the pre-0.11 message format (``LegacyRecord``/``AbstractLegacyRecordBatch`` in
Kafka 3.9). Each entry of a message set is one message; a compressed "wrapper" message holds a
whole inner message set, compressed, in its value. It is sans-IO; malformed input raises
:class:`ProtocolError`/:class:`CorruptRecordError` only. It must not know about v2 batches.

Entry layout (big-endian)::

    0 offset int64 | 8 messageSize int32 | 12 crc uint32 (zlib CRC-32 of bytes 16..end)
    16 magic int8 | 17 attributes int8 | [18 timestamp int64, magic 1 only]
    keyLength int32 (-1 = null) | key | valueLength int32 (-1 = null) | value

Attributes: bits 0-2 codec (none, gzip, snappy, lz4 -- zstd needs magic 2), bit 3 timestamp
type (magic 1 only). Inner offsets are absolute for magic 0 and relative for magic 1 (the
wrapper carries the absolute offset of the last inner message).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence

from protocol.compression import CompressionType, compress, decompress
from protocol.error_codes import ErrorCode
from protocol.errors import CorruptRecordError, EncodeError, ProtocolError
from protocol.record_batch import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    Bytes,
    Record,
    SimpleRecord,
    TimestampType,
    as_byte_view,
)

__all__ = ["LegacyMessageView", "build_legacy_records", "iter_legacy_messages"]

_q = struct.Struct(">q")
_i = struct.Struct(">i")
_I = struct.Struct(">I")
_ENTRY_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes

#: crc + magic + attributes + key length + value length (+ timestamp for magic 1)
RECORD_OVERHEAD_V0 = 14
RECORD_OVERHEAD_V1 = 22
_CRC_OFFSET = 12
_ATTRIBUTES_OFFSET = 17
_TIMESTAMP_OFFSET = 18
_TIMESTAMP_TYPE_MASK = 0x08
_COMPRESSION_MASK = 0x07


class LegacyMessageView:
    """A zero-copy view of one magic 0/1 message-set entry (``offset``, ``size``, message).

    Construction checks the framing (magic 0/1, messageSize matching the buffer, key and value
    lengths consuming the message exactly) but not the CRC: call :meth:`verify_crc`.
    """

    __slots__ = ("buf", "magic", "_key", "_value")

    def __init__(self, buf: Bytes) -> None:
        view = as_byte_view(buf)
        size = len(view)
        if size < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"legacy message of {size} bytes is too short")
        magic = view[16]
        if magic > 1:
            raise CorruptRecordError(f"not a legacy message (magic {magic})")
        (message_size,) = _i.unpack_from(view, 8)
        if message_size + LOG_OVERHEAD != size:
            raise CorruptRecordError(f"messageSize {message_size} does not match {size} bytes")
        if magic == 1 and size < LOG_OVERHEAD + RECORD_OVERHEAD_V1:
            raise CorruptRecordError(f"magic 1 message of {size} bytes is too short")
        pos = _TIMESTAMP_OFFSET + (8 if magic == 1 else 0)
        self.buf = view
        self.magic = magic
        self._key, pos = self._read_bytes(pos, "key")
        self._value, pos = self._read_bytes(pos, "value")
        if pos != size:
            raise CorruptRecordError(f"legacy message has {size - pos} bytes after its value")

    def _read_bytes(self, pos: int, what: str) -> tuple[memoryview | None, int]:
        if len(self.buf) - pos < 4:
            raise CorruptRecordError(f"legacy message truncated before its {what} length")
        (n,) = _i.unpack_from(self.buf, pos)
        pos += 4
        if n < 0:
            return None, pos
        if n > len(self.buf) - pos:
            raise CorruptRecordError(f"legacy message {what} length {n} overruns the message")
        return self.buf[pos : pos + n], pos + n

    @property
    def offset(self) -> int:
        return int(_q.unpack_from(self.buf, 0)[0])

    last_offset = offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def message_size(self) -> int:
        return int(_i.unpack_from(self.buf, 8)[0])

    @property
    def size_in_bytes(self) -> int:
        return len(self.buf)

    @property
    def crc(self) -> int:
        return int(_I.unpack_from(self.buf, _CRC_OFFSET)[0])

    @property
    def attributes(self) -> int:
        return self.buf[_ATTRIBUTES_OFFSET]

    @property
    def compression(self) -> int:
        return self.buf[_ATTRIBUTES_OFFSET] & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.buf[_ATTRIBUTES_OFFSET] & _TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def timestamp(self) -> int:
        """The message timestamp; -1 (NO_TIMESTAMP) for magic 0."""
        if self.magic == 0:
            return NO_TIMESTAMP
        return int(_q.unpack_from(self.buf, _TIMESTAMP_OFFSET)[0])

    @property
    def key(self) -> memoryview | None:
        return self._key

    @property
    def value(self) -> memoryview | None:
        return self._value

    @property
    def is_control(self) -> bool:
        return False

    @property
    def is_transactional(self) -> bool:
        return False

    def compute_crc(self) -> int:
        """zlib CRC-32 of magic..end."""
        return zlib.crc32(self.buf[16:])

    def is_valid(self) -> bool:
        return self.crc == self.compute_crc()

    def verify_crc(self) -> None:
        """Raise :class:`CorruptRecordError` unless the stored CRC matches the message."""
        stored, computed = self.crc, self.compute_crc()
        if stored != computed:
            raise CorruptRecordError(
                f"message at offset {self.offset} is corrupt "
                f"(stored crc = {stored}, computed crc = {computed})"
            )

    def set_offset(self, offset: int) -> None:
        """Rewrite the offset in place (outside the CRC)."""
        _q.pack_into(self.buf, 0, offset)

    def set_timestamp(self, timestamp_type: TimestampType, timestamp: int) -> None:
        """Magic 1 only: set the timestamp type bit and timestamp, then recompute the CRC."""
        if self.magic != 1:
            raise ValueError("only magic 1 messages carry a timestamp")
        attributes = self.attributes & ~_TIMESTAMP_TYPE_MASK
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= _TIMESTAMP_TYPE_MASK
        self.buf[_ATTRIBUTES_OFFSET] = attributes
        _q.pack_into(self.buf, _TIMESTAMP_OFFSET, timestamp)
        _I.pack_into(self.buf, _CRC_OFFSET, self.compute_crc())

    def __repr__(self) -> str:
        return (
            f"LegacyMessageView(magic={self.magic}, offset={self.offset}, "
            f"compression={self.compression}, size={self.size_in_bytes})"
        )


def iter_legacy_messages(buf: memoryview) -> Iterator[LegacyMessageView]:
    """Split a message set that must hold only whole legacy messages (an inner set)."""
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptRecordError("truncated message in compressed message set")
        (size,) = _i.unpack_from(buf, pos + 8)
        if size < RECORD_OVERHEAD_V0 or size > end - pos - LOG_OVERHEAD:
            raise CorruptRecordError(f"invalid inner message size {size}")
        yield LegacyMessageView(buf[pos : pos + LOG_OVERHEAD + size])
        pos += LOG_OVERHEAD + size


def iter_legacy_records(
    message: LegacyMessageView,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    verify_crc: bool = False,
) -> Iterator[Record]:
    """Yield the record(s) of a legacy entry: itself, or the inner messages of a wrapper.

    Inner messages of a wrapper must have the wrapper's magic and no compression of their own.
    Magic 1 inner offsets are made absolute from the wrapper offset; with LogAppendTime the
    wrapper timestamp applies to every inner record (as Kafka's ``DeepRecordsIterator`` does).
    """
    if verify_crc:
        message.verify_crc()
    codec = message.compression
    if codec == CompressionType.NONE:
        yield Record(message.offset, message.timestamp, message.key, message.value, [])
        return
    if codec > CompressionType.LZ4:
        raise ProtocolError(
            f"compression codec {codec} is not allowed in magic {message.magic} messages",
            error_code=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        )
    if message.value is None:
        raise CorruptRecordError("found invalid compressed record set with null value")
    inner_set = memoryview(
        decompress(codec, message.value, max_decompressed_bytes, magic=message.magic)
    )
    inner = list(iter_legacy_messages(inner_set))
    if not inner:
        raise CorruptRecordError("found invalid compressed record set with no inner records")
    for m in inner:
        if m.magic != message.magic:
            raise CorruptRecordError(
                f"inner message magic {m.magic} does not match wrapper magic {message.magic}"
            )
        if m.compression != CompressionType.NONE:
            raise CorruptRecordError("inner messages of a compressed message set are compressed")
        if verify_crc:
            m.verify_crc()
    base = 0 if message.magic == 0 else message.offset - inner[-1].offset
    log_append = message.timestamp_type == TimestampType.LOG_APPEND_TIME
    for m in inner:
        timestamp = message.timestamp if log_append else m.timestamp
        yield Record(base + m.offset, timestamp, m.key, m.value, [])


# --------------------------------------------------------------------------------------------
# Builder
# --------------------------------------------------------------------------------------------


def encode_legacy_message(
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: Bytes | None,
    value: Bytes | None,
) -> bytes:
    """One message-set entry with its CRC."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += _q.pack(timestamp)
    for data in (key, value):
        if data is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _i.pack(len(data))
            body += data
    try:
        head = struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body))
    except struct.error as e:
        raise EncodeError(f"legacy message field out of range: {e}") from e
    return head + body


def build_legacy_records(
    records: Sequence[SimpleRecord],
    *,
    magic: int,
    base_offset: int = 0,
    compression: int = CompressionType.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """Encode `records` as a magic 0/1 message set (one wrapper message if compressed).

    Offsets are ``base_offset + i``. Legacy formats carry no headers (EncodeError if given) and
    no zstd. For magic 1 LOG_APPEND_TIME, `log_append_time` is written as the timestamp.
    """
    if magic not in (0, 1):
        raise EncodeError(f"legacy magic must be 0 or 1, not {magic}")
    if not records:
        raise EncodeError("a message set needs at least one record")
    if not 0 <= compression <= CompressionType.LZ4:
        raise EncodeError(f"compression codec {compression} is not allowed with magic {magic}")
    if any(r.headers for r in records):
        raise EncodeError(f"magic {magic} messages cannot carry headers")
    ts_attr = 0
    if magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise EncodeError("LOG_APPEND_TIME needs log_append_time")
        ts_attr = _TIMESTAMP_TYPE_MASK

    def stamp(r: SimpleRecord) -> int:
        return log_append_time if ts_attr and log_append_time is not None else r.timestamp

    if compression == CompressionType.NONE:
        return b"".join(
            encode_legacy_message(base_offset + i, magic, ts_attr, stamp(r), r.key, r.value)
            for i, r in enumerate(records)
        )
    # Inner messages: relative offsets for magic 1, absolute for magic 0; CreateTime attributes.
    inner = b"".join(
        encode_legacy_message(
            i if magic == 1 else base_offset + i, magic, 0, r.timestamp, r.key, r.value
        )
        for i, r in enumerate(records)
    )
    payload = compress(compression, inner, level=compression_level, magic=magic)
    if ts_attr and log_append_time is not None:
        wrapper_ts = log_append_time
    else:
        wrapper_ts = max(r.timestamp for r in records)
    return encode_legacy_message(
        base_offset + len(records) - 1, magic, compression | ts_attr, wrapper_ts, None, payload
    )
