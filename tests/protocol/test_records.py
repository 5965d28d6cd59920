"""Tests for protocol.records (v2 batches, legacy message sets, varints, builders, validation).

Interop: kafka-python 3.0.12's record code (an independent implementation that needs no broker)
builds batches we decode, and decodes batches we build.
"""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import CompressionType
from protocol.error_codes import ErrorCode
from protocol.errors import CorruptRecordError, DecompressionLimitError, EncodeError, ProtocolError
from protocol.record_batch import iter_v2_records, scan_v2_records
from protocol.records import (
    BatchIterator,
    ControlRecordType,
    LegacyMessageView,
    Record,
    RecordBatchView,
    SimpleRecord,
    TimestampType,
    build_control_batch,
    build_empty_batch,
    build_end_txn_marker_batch,
    build_legacy_records,
    build_record_batch,
    decode_control_record_key,
    decode_end_txn_marker,
    iter_batches,
    iter_records,
    validate_produce_records,
)
from protocol.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALL_CODECS = list(CompressionType)
LEGACY_CODECS = [c for c in CompressionType if c != CompressionType.ZSTD]


# ---- helpers / strategies ---------------------------------------------------------------------


def as_bytes(b: Any) -> bytes | None:
    return None if b is None else bytes(b)


def plain(
    record: Record,
) -> tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    return (
        record.offset,
        record.timestamp,
        as_bytes(record.key),
        as_bytes(record.value),
        [(k, as_bytes(v)) for k, v in record.headers],
    )


def all_records(blob: bytes | bytearray | memoryview, **kwargs: Any) -> list[Record]:
    return [r for batch in iter_batches(blob) for r in iter_records(batch, **kwargs)]


def drain(blob: bytes | bytearray | memoryview) -> None:
    """Decode everything decodable, the way a consumer would."""
    it = iter_batches(blob)
    for batch in it:
        batch.verify_crc()
        for record in iter_records(batch, max_decompressed_bytes=100_000):
            _ = (record.key, record.value, record.headers)


optional_bytes = st.none() | st.binary(max_size=64)
headers_st = st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3)
timestamps = st.integers(0, 2**41)


@st.composite
def simple_records(draw: st.DrawFn, headers: bool = True) -> list[SimpleRecord]:
    n = draw(st.integers(1, 12))
    base_ts = draw(timestamps)
    return [
        SimpleRecord(
            key=draw(optional_bytes),
            value=draw(optional_bytes),
            headers=draw(headers_st) if headers else (),
            timestamp=base_ts + draw(st.integers(-1000, 1000)),
        )
        for _ in range(n)
    ]


# ---- the record walk ---------------------------------------------------------------------------


@FAST
@given(records=simple_records(), flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255))))
def test_scan_agrees_with_the_record_decoder(
    records: list[SimpleRecord], flips: list[tuple[int, int]]
) -> None:
    """scan_v2_records accepts exactly what the decoder reads as records with offset deltas
    0..n-1, and returns their largest timestamp delta; it refuses with INVALID_RECORD only."""
    data = bytearray(build_record_batch(records))
    for position, value in flips:  # records region only: the header is the caller's business
        data[61 + position % (len(data) - 61)] = value
    batch = RecordBatchView(data)
    try:
        decoded = list(iter_v2_records(batch))
        valid = all(r.offset == batch.base_offset + i for i, r in enumerate(decoded))
    except ProtocolError:
        valid = False
    try:
        max_delta = scan_v2_records(batch.records_data, len(records))
    except ProtocolError as e:
        assert e.error_code == ErrorCode.INVALID_RECORD
        assert not valid
        return
    assert valid
    assert batch.base_timestamp + max_delta == max(r.timestamp for r in decoded)


# ---- varints ----------------------------------------------------------------------------------


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    enc = encode_varint(value)
    assert len(enc) == size_of_varint(value) <= 5
    assert decode_varint(enc + b"junk", 0) == (value, len(enc))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    enc = encode_varlong(value)
    assert len(enc) == size_of_varlong(value) <= 10
    assert decode_varlong(b"x" + enc, 1) == (value, len(enc) + 1)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_matches_kafka_python(value: int) -> None:
    from kafka.record.util import encode_varint as kp_encode

    out = bytearray()
    kp_encode(value, out.append)
    assert bytes(out) == encode_varint(value)


def test_varint_known_encodings() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(2**31 - 1) == b"\xfe\xff\xff\xff\x0f"


def test_varint_malformed() -> None:
    with pytest.raises(ProtocolError):
        decode_varint(b"\x80\x80", 0)  # truncated
    with pytest.raises(ProtocolError):
        decode_varint(b"", 0)
    with pytest.raises(ProtocolError):
        decode_varint(b"\x80\x80\x80\x80\x80\x00", 0)  # 6 bytes
    with pytest.raises(ProtocolError):
        decode_varlong(b"\x80" * 10 + b"\x00", 0)  # 11 bytes
    with pytest.raises(EncodeError):
        encode_varint(2**31)
    with pytest.raises(EncodeError):
        encode_varlong(2**63)


# ---- v2 round trips ---------------------------------------------------------------------------


@FAST
@given(
    records=simple_records(),
    codec=st.sampled_from(ALL_CODECS),
    base_offset=st.integers(0, 2**40),
    ts_type=st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]),
    log_append_time=timestamps,
)
def test_v2_round_trip(
    records: list[SimpleRecord],
    codec: int,
    base_offset: int,
    ts_type: TimestampType,
    log_append_time: int,
) -> None:
    blob = build_record_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        timestamp_type=ts_type,
        log_append_time=log_append_time,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        partition_leader_epoch=5,
    )
    (batch,) = list(iter_batches(blob))
    assert isinstance(batch, RecordBatchView)
    batch.verify_crc()
    assert batch.compression == codec
    assert batch.timestamp_type == ts_type
    assert batch.base_offset == base_offset
    assert batch.records_count == len(records)
    assert batch.last_offset == base_offset + len(records) - 1
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 10)
    assert batch.partition_leader_epoch == 5
    assert batch.size_in_bytes == len(blob) == batch.batch_length + 12
    expected_max = (
        log_append_time
        if ts_type == TimestampType.LOG_APPEND_TIME
        else max(
            [-1] + [r.timestamp for r in records]  # Kafka starts from NO_TIMESTAMP
        )
    )
    assert batch.max_timestamp == expected_max
    decoded = [plain(r) for r in iter_records(batch, verify_crc=True)]
    expected = [
        (
            base_offset + i,
            log_append_time if ts_type == TimestampType.LOG_APPEND_TIME else r.timestamp,
            as_bytes(r.key),
            as_bytes(r.value),
            [(k, as_bytes(v)) for k, v in r.headers],
        )
        for i, r in enumerate(records)
    ]
    assert decoded == expected


def test_v2_header_fields_and_flags() -> None:
    blob = build_record_batch(
        [SimpleRecord(b"k", b"v", (), 1000), SimpleRecord(b"k2", b"v2", (), 900)],
        base_offset=42,
        is_transactional=True,
        producer_id=9,
        producer_epoch=2,
        base_sequence=0,
        compression=CompressionType.LZ4,
        offset_deltas=[0, 5],
    )
    batch = RecordBatchView(blob)
    assert batch.magic == 2
    assert batch.is_transactional and not batch.is_control
    assert batch.compression == CompressionType.LZ4
    assert batch.attributes == CompressionType.LZ4 | 0x10
    assert batch.base_timestamp == 1000 and batch.max_timestamp == 1000
    assert batch.last_offset_delta == 5 and batch.next_offset == 48
    assert batch.delete_horizon_ms is None
    assert batch.header() == struct.unpack_from(">qiibIhiqqqhii", blob)
    assert [r.offset for r in iter_records(batch)] == [42, 47]
    assert [r.timestamp for r in iter_records(batch)] == [1000, 900]


def test_delete_horizon() -> None:
    blob = build_record_batch(
        [SimpleRecord(b"k", None, (), 5000)], delete_horizon_ms=4000, compression=1
    )
    batch = RecordBatchView(blob)
    assert batch.has_delete_horizon_ms and batch.delete_horizon_ms == 4000
    assert [r.timestamp for r in iter_records(batch)] == [5000]


def test_uncompressed_keys_and_values_are_zero_copy_slices() -> None:
    blob = bytearray(build_record_batch([SimpleRecord(b"key", b"value", [("h", b"hv")], 1)]))
    (record,) = all_records(blob)
    assert isinstance(record.key, memoryview) and record.key.obj is blob
    assert isinstance(record.value, memoryview) and record.value.obj is blob
    value_at = bytes(blob).index(b"value")
    blob[value_at] = ord("V")  # the view sees the buffer, so no copy was made
    assert bytes(record.value) == b"Value"


def test_empty_batch() -> None:
    blob = build_empty_batch(
        base_offset=10, last_offset=19, producer_id=4, producer_epoch=1, base_sequence=3
    )
    (batch,) = list(iter_batches(blob))
    assert isinstance(batch, RecordBatchView)
    batch.verify_crc()
    assert batch.records_count == 0 and batch.last_offset == 19 and batch.size_in_bytes == 61
    assert list(iter_records(batch)) == []


def test_builder_errors() -> None:
    with pytest.raises(EncodeError):
        build_record_batch([])
    with pytest.raises(EncodeError):
        build_record_batch([SimpleRecord(b"k", b"v", [("\ud800", None)], 1)])
    with pytest.raises(EncodeError):
        build_record_batch([SimpleRecord(b"k", b"v")], timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(EncodeError):
        build_record_batch([SimpleRecord(b"k", b"v")], producer_epoch=2**15)
    with pytest.raises(EncodeError):
        build_record_batch([SimpleRecord(b"k", b"v")], compression=5)


# ---- control batches --------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_marker_batch(commit: bool) -> None:
    blob = build_end_txn_marker_batch(
        commit,
        producer_id=1234,
        producer_epoch=7,
        coordinator_epoch=99,
        timestamp=5555,
        base_offset=8,
    )
    batch = RecordBatchView(blob)
    batch.verify_crc()
    assert batch.is_control and batch.is_transactional
    assert batch.base_sequence == -1 and batch.producer_id == 1234 and batch.producer_epoch == 7
    (record,) = list(iter_records(batch))
    assert bytes(record.key or b"") == struct.pack(">hh", 0, 1 if commit else 0)
    assert bytes(record.value or b"") == struct.pack(">hi", 0, 99)
    expected_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    assert decode_control_record_key(record.key) == (0, expected_type)
    assert decode_end_txn_marker(record.value) == (0, 99)
    assert record.offset == 8 and record.timestamp == 5555


def test_control_key_errors() -> None:
    with pytest.raises(CorruptRecordError):
        decode_control_record_key(b"\x00")
    with pytest.raises(CorruptRecordError):
        decode_control_record_key(None)
    with pytest.raises(CorruptRecordError):
        decode_control_record_key(b"\xff\xff\x00\x01")
    with pytest.raises(CorruptRecordError):
        decode_end_txn_marker(b"\x00\x00")


def test_generic_control_batch() -> None:
    blob = build_control_batch(ControlRecordType.LEADER_CHANGE, b"\x00\x00", timestamp=1)
    batch = RecordBatchView(blob)
    assert batch.is_control and not batch.is_transactional
    (record,) = list(iter_records(batch))
    assert decode_control_record_key(record.key)[1] == ControlRecordType.LEADER_CHANGE


# ---- CRC and in-place rewrites ----------------------------------------------------------------


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_every_flipped_bit_in_crc_region_fails_verify(codec: int) -> None:
    blob = build_record_batch(
        [SimpleRecord(b"key", b"value", [("h", b"x")], 123), SimpleRecord(None, b"v2", (), 124)],
        compression=codec,
    )
    RecordBatchView(blob).verify_crc()
    for byte in range(17, len(blob)):  # the crc field itself and everything it covers
        for bit in range(8):
            corrupted = bytearray(blob)
            corrupted[byte] ^= 1 << bit
            view = RecordBatchView(corrupted)
            assert not view.is_valid()
            with pytest.raises(CorruptRecordError):
                view.verify_crc()


def test_crc_is_crc32c_over_attributes_to_end() -> None:
    blob = build_record_batch([SimpleRecord(b"k", b"v", (), 1)])
    assert struct.unpack_from(">I", blob, 17)[0] == crc32c.crc32c(blob[21:])


def test_fields_outside_crc_rewrite_in_place() -> None:
    blob = bytearray(build_record_batch([SimpleRecord(b"k", b"v", (), 1)] * 3, compression=1))
    crc_before = bytes(blob[17:21])
    batch = RecordBatchView(blob)
    batch.set_base_offset(2**40 + 7)
    batch.set_partition_leader_epoch(31)
    assert bytes(blob[17:21]) == crc_before
    batch.verify_crc()
    assert batch.base_offset == 2**40 + 7 and batch.partition_leader_epoch == 31
    assert [r.offset for r in iter_records(batch)] == [2**40 + 7, 2**40 + 8, 2**40 + 9]


def test_set_log_append_time_recomputes_crc() -> None:
    blob = bytearray(
        build_record_batch([SimpleRecord(b"k", b"v", (), 1), SimpleRecord(b"k", b"v", (), 2)])
    )
    batch = RecordBatchView(blob)
    batch.set_log_append_time(99_999)
    batch.verify_crc()
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == 99_999
    assert [r.timestamp for r in iter_records(batch)] == [99_999, 99_999]
    batch.set_max_timestamp(TimestampType.CREATE_TIME, 2)
    batch.verify_crc()
    assert [r.timestamp for r in iter_records(batch)] == [1, 2]


def test_setters_refuse_read_only_buffers() -> None:
    batch = RecordBatchView(build_record_batch([SimpleRecord(b"k", b"v", (), 1)]))
    with pytest.raises(TypeError):
        batch.set_base_offset(1)


# ---- iterating a records blob -----------------------------------------------------------------


def _three_batches() -> bytes:
    return b"".join(
        build_record_batch(
            [SimpleRecord(b"k%d" % i, b"v" * i, (), i)], base_offset=i, compression=c
        )
        for i, c in enumerate([0, 1, 4])
    )


def test_iter_many_batches() -> None:
    blob = _three_batches()
    it = iter_batches(memoryview(blob))
    batches = list(it)
    assert [b.last_offset for b in batches] == [0, 1, 2]
    assert not it.truncated and it.position == len(blob) and len(it.remaining) == 0
    assert [bytes(r.key or b"") for r in all_records(blob)] == [b"k0", b"k1", b"k2"]


def test_partial_trailing_batch_is_exposed_not_raised() -> None:
    blob = _three_batches()
    sizes = [b.size_in_bytes for b in iter_batches(blob)]
    for cut in range(len(blob) + 1):
        it = iter_batches(blob[:cut])
        whole = list(it)
        expected_whole = sum(1 for end in (sizes[0], sizes[0] + sizes[1], len(blob)) if end <= cut)
        assert len(whole) == expected_whole
        assert it.position == sum(sizes[:expected_whole])
        assert it.truncated == (cut != it.position)
        assert bytes(it.remaining) == blob[it.position : cut]
        if cut - it.position >= 12:
            assert it.truncated_batch_size == sizes[expected_whole]
        if it.truncated:
            with pytest.raises(CorruptRecordError):
                list(iter_batches(blob[:cut], allow_truncated=False))


def test_iter_batches_returns_batch_iterator() -> None:
    assert isinstance(iter_batches(b""), BatchIterator)
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b[:8] + struct.pack(">i", 5) + b[12:],  # length below the minimum overhead
        lambda b: b[:8] + struct.pack(">i", 40) + b[12:],  # v2 batch shorter than its header
        lambda b: b[:16] + b"\x03" + b[17:],  # unknown magic
        lambda b: b[:16] + b"\xff" + b[17:],  # negative magic
    ],
)
def test_bad_framing_raises_corrupt(mutate: Any) -> None:
    blob = mutate(build_record_batch([SimpleRecord(b"k", b"v" * 100, (), 1)]))
    with pytest.raises(CorruptRecordError):
        list(iter_batches(blob))


def test_record_count_mismatch_is_corrupt() -> None:
    for codec in (0, 1):
        blob = bytearray(
            build_record_batch([SimpleRecord(b"k", b"v", (), 1)] * 3, compression=codec)
        )
        for count in (2, 4, -1):
            struct.pack_into(">i", blob, 57, count)
            with pytest.raises(CorruptRecordError):
                list(iter_records(RecordBatchView(blob)))


def test_record_length_overrun_is_corrupt() -> None:
    blob = bytearray(build_record_batch([SimpleRecord(b"k", b"v", (), 1)]))
    blob[61] = 0x7E  # record length 63 > what is left
    with pytest.raises(CorruptRecordError):
        list(iter_records(RecordBatchView(blob)))


def test_decompression_limit_applies_to_batches() -> None:
    blob = build_record_batch(
        [SimpleRecord(None, bytes(100_000), (), 1)], compression=CompressionType.ZSTD
    )
    with pytest.raises(DecompressionLimitError):
        list(iter_records(RecordBatchView(blob), max_decompressed_bytes=50_000))


def test_unknown_codec_in_batch() -> None:
    blob = bytearray(build_record_batch([SimpleRecord(b"k", b"v", (), 1)]))
    blob[22] |= 0x07
    with pytest.raises(ProtocolError) as e:
        list(iter_records(RecordBatchView(blob)))
    assert e.value.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


# ---- produce validation -----------------------------------------------------------------------


def test_validate_produce_records_accepts_client_batches() -> None:
    blob = build_record_batch(
        [SimpleRecord(b"k", b"v", (), 1)] * 3, producer_id=5, producer_epoch=0, base_sequence=0
    )
    (batch,) = validate_produce_records(blob)
    assert batch.records_count == 3
    assert len(validate_produce_records(_three_batches(), single_batch=False)) == 3


def _policy_error(blob: bytes | bytearray, **kwargs: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as e:
        validate_produce_records(blob, **kwargs)
    return e.value


def test_validate_produce_records_rejections() -> None:
    one = build_record_batch([SimpleRecord(b"k", b"v", (), 1)] * 2)
    assert _policy_error(b"").error_code == ErrorCode.INVALID_RECORD
    assert _policy_error(_three_batches()).error_code == ErrorCode.INVALID_RECORD
    assert isinstance(_policy_error(one + one[:20]), CorruptRecordError)
    bad_crc = bytearray(one)
    bad_crc[-1] ^= 1
    assert isinstance(_policy_error(bad_crc), CorruptRecordError)
    legacy = build_legacy_records([SimpleRecord(b"k", b"v", (), 1)], magic=1)
    assert _policy_error(legacy).error_code == ErrorCode.INVALID_RECORD
    control = build_end_txn_marker_batch(
        True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=0
    )
    assert _policy_error(control).error_code == ErrorCode.INVALID_RECORD
    validate_produce_records(control, from_client=False)
    no_seq = build_record_batch([SimpleRecord(b"k", b"v", (), 1)], producer_id=3, producer_epoch=0)
    assert _policy_error(no_seq).error_code == ErrorCode.INVALID_RECORD
    gap = build_record_batch([SimpleRecord(b"k", b"v", (), 1)] * 2, offset_deltas=[0, 2])
    assert _policy_error(gap).error_code == ErrorCode.INVALID_RECORD
    empty = build_empty_batch(base_offset=0, last_offset=0)
    assert _policy_error(empty).error_code == ErrorCode.INVALID_RECORD
    # records count larger than the uncompressed bytes could hold (CRC fixed up)
    lying = bytearray(one)
    struct.pack_into(">ii", lying, 53, -1, 1000)
    struct.pack_into(">i", lying, 23, 999)
    struct.pack_into(">I", lying, 17, crc32c.crc32c(bytes(lying[21:])))
    assert isinstance(_policy_error(lying), CorruptRecordError)


# ---- legacy message sets ----------------------------------------------------------------------


@FAST
@given(
    records=simple_records(headers=False),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(LEGACY_CODECS),
    base_offset=st.integers(0, 2**40),
    log_append=st.booleans(),
)
def test_legacy_round_trip(
    records: list[SimpleRecord], magic: int, codec: int, base_offset: int, log_append: bool
) -> None:
    ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    blob = build_legacy_records(
        records,
        magic=magic,
        base_offset=base_offset,
        compression=codec,
        timestamp_type=ts_type,
        log_append_time=777,
    )
    batches = list(iter_batches(blob))
    assert all(isinstance(b, LegacyMessageView) and b.magic == magic for b in batches)
    assert len(batches) == (len(records) if codec == CompressionType.NONE else 1)
    for b in batches:
        b.verify_crc()
    decoded = [plain(r) for b in batches for r in iter_records(b, verify_crc=True)]

    def ts(r: SimpleRecord) -> int:
        if magic == 0:
            return -1
        return 777 if log_append else r.timestamp

    expected: list[tuple[Any, ...]] = [
        (base_offset + i, ts(r), as_bytes(r.key), as_bytes(r.value), [])
        for i, r in enumerate(records)
    ]
    assert decoded == expected


def test_legacy_wrapper_layout() -> None:
    records = [
        SimpleRecord(b"a", b"1", (), 10),
        SimpleRecord(b"b", b"2", (), 30),
        SimpleRecord(None, b"3", (), 20),
    ]
    wrapper = LegacyMessageView(
        build_legacy_records(records, magic=1, base_offset=100, compression=1)
    )
    assert wrapper.offset == wrapper.last_offset == 102  # absolute offset of the last inner message
    assert wrapper.timestamp == 30  # max timestamp for CreateTime
    assert wrapper.key is None and wrapper.compression == 1
    assert [r.offset for r in iter_records(wrapper)] == [100, 101, 102]
    # Moving the wrapper (what a broker does when assigning offsets) moves every inner record.
    blob = bytearray(wrapper.buf)
    moved = LegacyMessageView(blob)
    moved.set_offset(502)
    moved.verify_crc()
    assert [r.offset for r in iter_records(moved)] == [500, 501, 502]
    moved.set_timestamp(TimestampType.LOG_APPEND_TIME, 4242)
    moved.verify_crc()
    assert [r.timestamp for r in iter_records(moved)] == [4242] * 3


def test_legacy_message_layout_v0_v1() -> None:
    v0 = build_legacy_records([SimpleRecord(b"key", None, (), 5)], magic=0, base_offset=3)
    assert v0 == struct.pack(
        ">qiIbbi3si", 3, 4 + 1 + 1 + 4 + 3 + 4, zlib.crc32(v0[16:]), 0, 0, 3, b"key", -1
    )
    v1 = build_legacy_records([SimpleRecord(None, b"val", (), 5)], magic=1, base_offset=3)
    assert v1 == struct.pack(
        ">qiIbbqi i3s".replace(" ", ""),
        3,
        4 + 1 + 1 + 8 + 4 + 4 + 3,
        zlib.crc32(v1[16:]),
        1,
        0,
        5,
        -1,
        3,
        b"val",
    )
    m = LegacyMessageView(v1)
    assert (m.magic, m.offset, m.timestamp, m.key, bytes(m.value or b"")) == (1, 3, 5, None, b"val")
    assert m.timestamp_type == TimestampType.CREATE_TIME
    assert LegacyMessageView(v0).timestamp_type == TimestampType.NO_TIMESTAMP_TYPE


def test_legacy_flipped_bits_fail_crc() -> None:
    blob = build_legacy_records([SimpleRecord(b"k", b"value", (), 9)], magic=1)
    for byte in range(12, len(blob)):
        for bit in range(8):
            corrupted = bytearray(blob)
            corrupted[byte] ^= 1 << bit
            try:
                view = LegacyMessageView(corrupted)
            except CorruptRecordError:
                continue  # framing changed (magic or a length): also refused
            with pytest.raises(CorruptRecordError):
                view.verify_crc()


def test_legacy_mixed_with_v2_in_one_blob() -> None:
    blob = (
        build_legacy_records([SimpleRecord(b"a", b"1", (), 1)], magic=0, base_offset=0)
        + build_legacy_records(
            [SimpleRecord(b"b", b"2", (), 2)] * 2, magic=1, base_offset=1, compression=2
        )
        + build_record_batch([SimpleRecord(b"c", b"3", (), 3)], base_offset=3)
    )
    assert [type(b).__name__ for b in iter_batches(blob)] == [
        "LegacyMessageView",
        "LegacyMessageView",
        "RecordBatchView",
    ]
    assert [r.offset for r in all_records(blob)] == [0, 1, 2, 3]


def test_legacy_builder_errors() -> None:
    r = [SimpleRecord(b"k", b"v", (), 1)]
    with pytest.raises(EncodeError):
        build_legacy_records(r, magic=2)
    with pytest.raises(EncodeError):
        build_legacy_records(r, magic=1, compression=CompressionType.ZSTD)
    with pytest.raises(EncodeError):
        build_legacy_records([SimpleRecord(b"k", b"v", [("h", None)], 1)], magic=1)
    with pytest.raises(EncodeError):
        build_legacy_records([], magic=0)


def _wrapper(magic: int, inner: bytes, codec: int = 1, offset: int = 0) -> bytes:
    from protocol.compression import compress
    from protocol.legacy_records import encode_legacy_message

    return encode_legacy_message(offset, magic, codec, 0, None, compress(codec, inner))


def test_legacy_bad_wrappers() -> None:
    from protocol.legacy_records import encode_legacy_message

    inner_v0 = encode_legacy_message(0, 0, 0, 0, b"k", b"v")
    nested = _wrapper(1, _wrapper(1, encode_legacy_message(0, 1, 0, 0, b"k", b"v")))
    cases = [
        _wrapper(1, inner_v0),  # inner magic differs from the wrapper's
        nested,  # double compression
        _wrapper(0, b""),  # no inner records
        _wrapper(0, inner_v0 + inner_v0[:10]),  # truncated inner message
        encode_legacy_message(0, 1, 1, 0, None, None),  # compressed wrapper with null value
        encode_legacy_message(0, 1, 4, 0, None, b"x"),  # zstd is not allowed before magic 2
    ]
    for blob in cases:
        with pytest.raises(ProtocolError):
            all_records(blob)


# ---- interop with kafka-python (an independent implementation) --------------------------------


class _CramjamSnappy:
    """python-snappy's API over cramjam, so kafka-python's own xerial code can run."""

    @staticmethod
    def compress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.compress_raw(data))

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.decompress_raw(data))


@pytest.fixture(autouse=True)
def kafka_python_snappy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import kafka.codec

    monkeypatch.setattr(kafka.codec, "snappy", _CramjamSnappy)
    yield


def _kp_v2_batch(records: list[SimpleRecord], codec: int, transactional: bool = False) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=1000 if transactional else -1,
        producer_epoch=2 if transactional else -1,
        base_sequence=17 if transactional else -1,
        batch_size=1 << 24,
    )
    for i, r in enumerate(records):
        assert builder.append(i, r.timestamp, r.key, r.value, list(r.headers)) is not None
    return bytes(builder.build())


COMPRESSIBLE = [
    SimpleRecord(
        b"key-%d" % i,
        b"value " * (i + 10),
        [("trace", b"abc" * i), ("nil", None)],
        1_700_000_000_000 + i,
    )
    for i in range(20)
] + [SimpleRecord(None, None, (), 1_700_000_000_100)]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_v2_batches_decode(codec: int) -> None:
    blob = _kp_v2_batch(COMPRESSIBLE, codec, transactional=True)
    (batch,) = list(iter_batches(blob))
    assert isinstance(batch, RecordBatchView)
    batch.verify_crc()
    assert batch.compression == codec  # kafka-python keeps the codec when it helps
    assert batch.is_transactional and batch.producer_id == 1000 and batch.base_sequence == 17
    expected = [
        (
            i,
            r.timestamp,
            as_bytes(r.key),
            as_bytes(r.value),
            [(k, as_bytes(v)) for k, v in r.headers],
        )
        for i, r in enumerate(COMPRESSIBLE)
    ]
    assert [plain(r) for r in iter_records(batch)] == expected


@FAST
@given(records=simple_records(), codec=st.sampled_from(ALL_CODECS))
def test_kafka_python_v2_batches_decode_hypothesis(records: list[SimpleRecord], codec: int) -> None:
    blob = _kp_v2_batch(records, codec)
    (batch,) = list(iter_batches(blob))
    batch.verify_crc()
    decoded = [plain(r) for r in iter_records(batch)]
    assert decoded == [
        (
            i,
            r.timestamp,
            as_bytes(r.key),
            as_bytes(r.value),
            [(k, as_bytes(v)) for k, v in r.headers],
        )
        for i, r in enumerate(records)
    ]


def _kp_read(blob: bytes) -> list[tuple[Any, ...]]:
    from kafka.record import MemoryRecords

    out = []
    for batch in MemoryRecords(blob):
        for record in batch:
            assert record.validate_crc() if hasattr(record, "validate_crc") else True
            out.append(
                (record.offset, record.timestamp, record.key, record.value, list(record.headers))
            )
    return out


@FAST
@given(
    records=simple_records(),
    codec=st.sampled_from(ALL_CODECS),
    log_append=st.booleans(),
    base_offset=st.integers(0, 2**40),
)
def test_our_v2_batches_decode_with_kafka_python(
    records: list[SimpleRecord], codec: int, log_append: bool, base_offset: int
) -> None:
    from kafka.record import MemoryRecords

    ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    blob = build_record_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        timestamp_type=ts_type,
        log_append_time=31337,
    )
    (kp_batch,) = list(MemoryRecords(blob))
    assert kp_batch.validate_crc()
    assert kp_batch.compression_type == codec
    expected = [
        (
            base_offset + i,
            31337 if log_append else r.timestamp,
            as_bytes(r.key),
            as_bytes(r.value),
            [(k, as_bytes(v)) for k, v in r.headers],
        )
        for i, r in enumerate(records)
    ]
    assert _kp_read(blob) == expected


def test_our_control_batch_reads_as_kafka_python_control_record() -> None:
    from kafka.record import MemoryRecords

    blob = build_end_txn_marker_batch(
        False, producer_id=1, producer_epoch=0, coordinator_epoch=3, timestamp=10
    )
    (kp_batch,) = list(MemoryRecords(blob))
    assert kp_batch.is_control_batch and kp_batch.is_transactional
    (record,) = list(kp_batch)
    assert record.abort and record.type == 0


def test_kafka_python_reads_rewritten_batches() -> None:
    from kafka.record import MemoryRecords

    blob = bytearray(build_record_batch(COMPRESSIBLE[:3], compression=CompressionType.GZIP))
    batch = RecordBatchView(blob)
    batch.set_base_offset(1000)
    batch.set_partition_leader_epoch(4)
    batch.set_log_append_time(123)
    (kp_batch,) = list(MemoryRecords(bytes(blob)))
    assert kp_batch.validate_crc()
    assert kp_batch.base_offset == 1000 and kp_batch.leader_epoch == 4
    assert [(r.offset, r.timestamp) for r in kp_batch] == [(1000, 123), (1001, 123), (1002, 123)]


def _kp_legacy(records: list[SimpleRecord], magic: int, codec: int) -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 24)
    for i, r in enumerate(records):
        assert builder.append(i, r.timestamp, r.key, r.value) is not None
    return bytes(builder.build())


# kafka-python needs the `xxhash` package for lz4 with magic 0 (Kafka's broken checksum).
KP_LEGACY = [(m, c) for m in (0, 1) for c in LEGACY_CODECS if (m, c) != (0, CompressionType.LZ4)]


@pytest.mark.parametrize(("magic", "codec"), KP_LEGACY)
def test_kafka_python_legacy_decode(magic: int, codec: int) -> None:
    records = [SimpleRecord(r.key, r.value, (), r.timestamp) for r in COMPRESSIBLE]
    blob = bytearray(_kp_legacy(records, magic, codec))
    batches = list(iter_batches(blob))
    for b in batches:
        assert isinstance(b, LegacyMessageView)
        b.verify_crc()
    if codec != CompressionType.NONE:
        (wrapper,) = batches
        assert isinstance(wrapper, LegacyMessageView)
        # kafka-python leaves the wrapper offset to the broker; assign it like one would.
        wrapper.set_offset(len(records) - 1)
    ts = [(-1 if magic == 0 else r.timestamp) for r in records]
    expected: list[tuple[Any, ...]] = [
        (i, ts[i], as_bytes(r.key), as_bytes(r.value), []) for i, r in enumerate(records)
    ]
    assert [plain(r) for r in all_records(blob, verify_crc=True)] == expected


@pytest.mark.parametrize(("magic", "codec"), KP_LEGACY)
def test_our_legacy_decodes_with_kafka_python(magic: int, codec: int) -> None:
    records = [SimpleRecord(r.key, r.value, (), r.timestamp) for r in COMPRESSIBLE]
    blob = build_legacy_records(records, magic=magic, base_offset=50, compression=codec)
    ts = [(None if magic == 0 else r.timestamp) for r in records]
    expected: list[tuple[Any, ...]] = [
        (50 + i, ts[i], as_bytes(r.key), as_bytes(r.value), []) for i, r in enumerate(records)
    ]
    assert _kp_read(blob) == expected


def test_kafka_python_multi_batch_blob_with_partial_tail() -> None:
    blob = b"".join(_kp_v2_batch(COMPRESSIBLE[:2], c) for c in ALL_CODECS)
    it = iter_batches(blob + blob[:70])
    assert len(list(it)) == len(ALL_CODECS)
    assert it.truncated and len(it.remaining) == 70


# ---- fuzzing ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        drain(data)


SEEDS = [build_record_batch(COMPRESSIBLE[:4], compression=c) for c in ALL_CODECS] + [
    build_legacy_records(
        [SimpleRecord(r.key, r.value, (), r.timestamp) for r in COMPRESSIBLE[:4]],
        magic=m,
        compression=c,
    )
    for m in (0, 1)
    for c in LEGACY_CODECS
]


def _fix_crc(blob: bytearray) -> None:
    """Make the first batch's CRC match again, so mutations reach the record decoders."""
    if len(blob) >= 61 and blob[16] == 2:
        struct.pack_into(">I", blob, 17, crc32c.crc32c(bytes(blob[21:])))
    elif len(blob) >= 17 and blob[16] in (0, 1):
        struct.pack_into(">I", blob, 12, zlib.crc32(bytes(blob[16:])))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(SEEDS),
    edits=st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), min_size=1, max_size=6),
    cut=st.integers(0, 2000),
    fix_crc=st.booleans(),
)
def test_fuzz_mutated_batches(
    seed: bytes, edits: list[tuple[int, int]], cut: int, fix_crc: bool
) -> None:
    blob = bytearray(seed)
    for pos, byte in edits:
        blob[pos % len(blob)] = byte
    if cut % 4 == 0:
        del blob[cut % len(blob) :]
    if fix_crc:
        _fix_crc(blob)
    with contextlib.suppress(ProtocolError):
        drain(blob)
    with contextlib.suppress(ProtocolError):
        validate_produce_records(blob, single_batch=False)
