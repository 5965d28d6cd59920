"""Writing v2 record batches, including control batches (transaction markers).

This module owns encoding records into a v2 ``RecordBatch`` exactly as Kafka 3.9's
``MemoryRecordsBuilder`` lays them out: per-record varint framing, compression of the records
region, the 61-byte header and its CRC-32C. It is sans-IO and returns plain ``bytes``.

It must not decide broker policy (offsets to assign, which timestamp type a topic uses): callers
pass those in. Invalid arguments (a value that does not fit its wire type, a non-UTF-8-encodable
header key) raise :class:`EncodeError`; they are bugs on the caller's side, never peer input.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from enum import IntEnum

from protocol.checksum import crc32c
from protocol.compression import CompressionType, compress
from protocol.errors import CorruptRecordError, EncodeError
from protocol.record_batch import (
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Bytes,
    Record,
    SimpleRecord,
    TimestampType,
)
from protocol.varint import encode_varint, encode_varlong

__all__ = [
    "ControlRecordType",
    "build_control_batch",
    "build_empty_batch",
    "build_end_txn_marker_batch",
    "build_record_batch",
    "control_record_type",
    "decode_control_record_key",
    "decode_end_txn_marker",
    "encode_control_record_key",
    "encode_end_txn_marker",
]

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")
_ATTRIBUTES_OFFSET = 21


class ControlRecordType(IntEnum):
    """The `type` in a control record's key (Kafka 3.9's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def _encode_bytes(out: bytearray, data: Bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zigzag(-1)
    else:
        out += encode_varint(len(data))
        out += data


def _encode_record(
    out: bytearray, offset_delta: int, timestamp_delta: int, record: SimpleRecord
) -> None:
    body = bytearray(b"\x00")  # attributes
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    _encode_bytes(body, record.key)
    _encode_bytes(body, record.value)
    body += encode_varint(len(record.headers))
    for hkey, hvalue in record.headers:
        if not isinstance(hkey, str):
            raise EncodeError(f"header key must be str, not {type(hkey).__name__}")
        try:
            _encode_bytes(body, hkey.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise EncodeError(f"header key {hkey!r} is not encodable as UTF-8") from e
        _encode_bytes(body, hvalue)
    out += encode_varint(len(body))
    out += body


def _attributes(
    compression: int,
    timestamp_type: TimestampType,
    is_transactional: bool,
    is_control: bool,
    has_delete_horizon: bool,
) -> int:
    if not 0 <= compression <= 4:
        raise EncodeError(f"unknown compression codec {compression}")
    attributes = compression
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    elif timestamp_type != TimestampType.CREATE_TIME:
        raise EncodeError("a v2 batch needs CREATE_TIME or LOG_APPEND_TIME")
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    return attributes


def _finish(header_fields: tuple[int, ...], payload: bytes | bytearray) -> bytes:
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    try:
        _HEADER.pack_into(out, 0, *header_fields)
    except struct.error as e:
        raise EncodeError(f"record batch header field out of range: {e}") from e
    out[RECORD_BATCH_OVERHEAD:] = payload
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_record_batch(
    records: Sequence[SimpleRecord],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: int = CompressionType.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    offset_deltas: Sequence[int] | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode `records` as one v2 batch with a correct CRC.

    Offsets are ``base_offset + offset_deltas[i]`` (default: consecutive). baseTimestamp is the
    first record's timestamp (or `delete_horizon_ms`, which also sets attributes bit 6);
    maxTimestamp is the largest record timestamp, or `log_append_time` for LOG_APPEND_TIME.
    """
    if not records:
        raise EncodeError("a record batch needs at least one record (see build_empty_batch)")
    if offset_deltas is None:
        offset_deltas = range(len(records))
    elif len(offset_deltas) != len(records):
        raise EncodeError("offset_deltas must have one entry per record")
    if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time is None:
        raise EncodeError("LOG_APPEND_TIME needs log_append_time")
    base_timestamp = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
    max_timestamp = NO_TIMESTAMP
    body = bytearray()
    for record, delta in zip(records, offset_deltas, strict=True):
        max_timestamp = max(max_timestamp, record.timestamp)
        _encode_record(body, delta, record.timestamp - base_timestamp, record)
    if log_append_time is not None and timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_timestamp = log_append_time
    attributes = _attributes(
        compression, timestamp_type, is_transactional, is_control, delete_horizon_ms is not None
    )
    payload = (
        body
        if compression == CompressionType.NONE
        else compress(compression, body, level=compression_level)
    )
    return _finish(
        (
            base_offset,
            RECORD_BATCH_OVERHEAD - 12 + len(payload),
            partition_leader_epoch,
            2,
            0,
            attributes,
            offset_deltas[-1],
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        ),
        payload,
    )


def build_empty_batch(
    *,
    base_offset: int,
    last_offset: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    timestamp: int = NO_TIMESTAMP,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """A batch with no records (kept by compaction to retain producer state)."""
    attributes = _attributes(0, timestamp_type, is_transactional, is_control, False)
    return _finish(
        (
            base_offset,
            RECORD_BATCH_OVERHEAD - 12,
            partition_leader_epoch,
            2,
            0,
            attributes,
            last_offset - base_offset,
            timestamp,
            timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            0,
        ),
        b"",
    )


# --------------------------------------------------------------------------------------------
# Control records
# --------------------------------------------------------------------------------------------


def encode_control_record_key(control_type: int, version: int = 0) -> bytes:
    """Key of a control record: version int16 + type int16."""
    return _CONTROL_KEY.pack(version, control_type)


def decode_control_record_key(key: Bytes | None) -> tuple[int, int]:
    """Return (version, type) of a control record key; type may be unknown to this enum."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("invalid control record key (needs at least 4 bytes)")
    version, control_type = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"invalid version found for control record: {version}")
    return int(version), int(control_type)


def encode_end_txn_marker(coordinator_epoch: int, version: int = 0) -> bytes:
    """Value of an ABORT/COMMIT control record: version int16 + coordinatorEpoch int32."""
    return _END_TXN_MARKER.pack(version, coordinator_epoch)


def decode_end_txn_marker(value: Bytes | None) -> tuple[int, int]:
    """Return (version, coordinator_epoch) from an ABORT/COMMIT control record value."""
    if value is None or len(value) < 6:
        raise CorruptRecordError("invalid end transaction marker value (needs 6 bytes)")
    version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value, 0)
    return int(version), int(coordinator_epoch)


def control_record_type(record: Record) -> int:
    """The control type of a record from a control batch."""
    return decode_control_record_key(record.key)[1]


def build_control_batch(
    control_type: int,
    value: Bytes,
    *,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    is_transactional: bool = False,
) -> bytes:
    """A control batch holding one control record of `control_type` with `value`."""
    record = SimpleRecord(encode_control_record_key(control_type), value, (), timestamp)
    return build_record_batch(
        [record],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=is_transactional,
        is_control=True,
    )


def build_end_txn_marker_batch(
    commit: bool,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transactional control batch with one COMMIT (or ABORT) marker, as WriteTxnMarkers writes."""
    return build_control_batch(
        ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
        encode_end_txn_marker(coordinator_epoch),
        timestamp=timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
    )
