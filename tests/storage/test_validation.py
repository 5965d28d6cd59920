"""The leader's record-level validation (Kafka's LogValidator): every batch's records are walked.

Poison batches -- a record count, offset deltas or sizes that disagree with the header, an
undecodable or over-inflating compressed payload -- are refused with nothing written; the
records' real maxTimestamp replaces the producer's, so rolling and retention use it.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from pathlib import Path

import crc32c
import pytest
import zstandard

from protocol.compression import CompressionType
from protocol.errors import CorruptRecordError, DecompressionLimitError, ErrorCode, ProtocolError
from protocol.record_batch import RecordBatchView, scan_v2_records
from protocol.records import SimpleRecord, build_record_batch, iter_batches
from storage.config import LogConfig
from storage.validation import validate_leader_append
from tests.storage.helpers import T0, Clock, batch, open_log, read_all

MiB = 1024 * 1024
INT_MAX = 2**31 - 1


def forge(
    template: bytes | bytearray,
    *,
    records: bytes | None = None,
    codec: int | None = None,
    count: int | None = None,
    max_timestamp: int | None = None,
) -> bytearray:
    """`template` (one v2 batch) with its records region, codec, recordsCount (and
    lastOffsetDelta to match) or maxTimestamp replaced, its length and CRC made consistent."""
    out = bytearray(template)
    if records is not None:
        out[61:] = records
        struct.pack_into(">i", out, 8, len(out) - 12)
    if codec is not None:
        (attributes,) = struct.unpack_from(">h", out, 21)
        struct.pack_into(">h", out, 21, (attributes & ~0x07) | codec)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
        struct.pack_into(">i", out, 23, count - 1)
    if max_timestamp is not None:
        struct.pack_into(">q", out, 35, max_timestamp)
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return out


def validate(data: bytearray, config: LogConfig | None = None) -> int:
    """Validate a client append at offset 0; return the appended max timestamp."""
    v = validate_leader_append(
        data, next_offset=0, leader_epoch=0, now_ms=T0, config=config or LogConfig()
    )
    return v.max_timestamp


def records_region(n: int, *, ts: int = T0) -> bytes:
    return bytes(batch(n, ts=ts)[61:])


def test_gzip_batch_claiming_int_max_records_is_refused() -> None:
    two = batch(2, compression=CompressionType.GZIP)
    with pytest.raises(ProtocolError) as e:
        validate(forge(two, count=INT_MAX))
    assert e.value.error_code == ErrorCode.INVALID_RECORD
    assert validate(forge(two, count=2)) == T0 + 1  # the honest batch passes


@pytest.mark.parametrize("count", [1, 3])
def test_uncompressed_record_count_must_match_the_records(count: int) -> None:
    with pytest.raises(ProtocolError) as e:
        validate(forge(batch(2), count=count))
    assert e.value.error_code == ErrorCode.INVALID_RECORD


def test_zstd_of_zeros_and_plain_zeros_are_refused() -> None:
    template = batch(3)
    # zstd-compressed zeros: a record of size 0, as Kafka's iterator reads it, is invalid.
    zeros = zstandard.ZstdCompressor().compress(bytes(4096))
    with pytest.raises(ProtocolError) as e:
        validate(forge(template, records=zeros, codec=CompressionType.ZSTD))
    assert e.value.error_code == ErrorCode.INVALID_RECORD
    # plain zeros labelled zstd: not a zstd frame at all.
    with pytest.raises(ProtocolError) as e:
        validate(forge(template, records=bytes(4096), codec=CompressionType.ZSTD))
    assert e.value.error_code == ErrorCode.CORRUPT_MESSAGE
    # uncompressed zeros
    with pytest.raises(ProtocolError) as e:
        validate(forge(template, records=bytes(4096)))
    assert e.value.error_code == ErrorCode.INVALID_RECORD


def test_offset_deltas_must_run_from_zero() -> None:
    gap = bytearray(
        build_record_batch([SimpleRecord(b"k", b"v", (), T0)] * 2, offset_deltas=[0, 2])
    )
    gap = forge(gap, count=2)
    for data in (gap, forge(gap, codec=CompressionType.NONE)):
        with pytest.raises(ProtocolError) as e:
            validate(data)
        assert e.value.error_code == ErrorCode.INVALID_RECORD
        assert "offset delta 2" in str(e.value)


@pytest.mark.parametrize(
    "region",
    [
        records_region(2) + b"\x00",  # a byte left over
        records_region(2)[:-1],  # the last record cut short
        b"\x0c" + records_region(2)[1:],  # the first record claims 6 bytes: fields overrun it
    ],
)
def test_record_sizes_must_agree_with_the_batch(region: bytes) -> None:
    with pytest.raises(ProtocolError) as e:
        validate(forge(batch(2), records=region))
    assert e.value.error_code == ErrorCode.INVALID_RECORD


def test_scan_matches_the_record_decoder() -> None:
    records = [
        SimpleRecord(None, None, (), T0 - 5),
        SimpleRecord(b"k" * 300, b"v" * 70_000, [("h", None), ("i", b"x" * 200)], T0 + 2**40),
        SimpleRecord(b"", b"", (), T0),
    ] + [SimpleRecord(b"k", b"v", (), T0 + i) for i in range(200)]
    data = build_record_batch(records)
    assert T0 - 5 + scan_v2_records(memoryview(data)[61:], len(records)) == T0 + 2**40


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
@pytest.mark.parametrize("fast", [True, False])
def test_the_records_real_max_timestamp_replaces_the_header(codec: int, fast: bool) -> None:
    honest = batch(3, ts=T0 - 86_400_000, compression=codec)  # records a day old
    forged = forge(honest, max_timestamp=T0 + 10**12)  # the header claims 30 years ahead
    config = LogConfig() if fast else LogConfig(cleanup_policy=("compact",))
    assert validate(forged, config) == T0 - 86_400_000 + 2
    view = RecordBatchView(forged)
    assert view.max_timestamp == T0 - 86_400_000 + 2
    view.verify_crc()


def test_a_gzip_bomb_is_refused_within_a_bounded_buffer() -> None:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(MiB)
    bomb = b"".join(z.compress(chunk) for _ in range(512)) + z.flush()  # 512 MiB of zeros
    config = LogConfig()
    limit = config.max_decompressed_bytes  # 64 x max.message.bytes: about 64 MiB
    assert len(bomb) < config.max_message_bytes and limit < 65 * MiB
    data = forge(batch(1), records=bomb, codec=CompressionType.GZIP)
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError) as e:
            validate(data, config)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert e.value.error_code == ErrorCode.INVALID_RECORD
    assert f"limit of {limit} bytes" in str(e.value)
    assert peak < 3 * limit  # zlib's output buffer and its final copy, whatever the bomb's size


def test_the_decompression_bound_follows_max_message_bytes() -> None:
    assert LogConfig(max_message_bytes=100).max_decompressed_bytes == 64 * MiB
    assert LogConfig(max_message_bytes=4 * MiB).max_decompressed_bytes == 256 * MiB
    assert LogConfig(max_message_bytes=INT_MAX).max_decompressed_bytes == 1024 * MiB


def test_poison_batches_write_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(1), 0, T0)
    poison = [
        forge(batch(2, compression=CompressionType.GZIP), count=INT_MAX),
        forge(batch(2), records=zstandard.ZstdCompressor().compress(bytes(100)), codec=4),
    ]
    for data in poison:
        with pytest.raises((ProtocolError, CorruptRecordError)):
            log.append_as_leader(data, 0, T0)
        assert log.log_end_offset == 1
    log.append_as_leader(batch(2, tag=1), 0, T0)
    assert [r.offset for r in read_all(log)] == [0, 1, 2]
    log.close()


def test_a_far_future_header_keeps_no_segment_from_rolling_or_retention(tmp_path: Path) -> None:
    clock = Clock(T0 + 10_000)
    config = LogConfig(segment_ms=1000, retention_ms=5000, file_delete_delay_ms=0)
    log = open_log(tmp_path / "t-0", config, clock)
    log.append_as_leader(forge(batch(1, ts=T0), max_timestamp=T0 + 10**12), 0, clock())
    log.append_as_leader(batch(1, ts=T0 + 9000), 0, clock())  # 9 s after the first: a roll
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert log.segments[0].largest_timestamp() == T0
    log.update_high_watermark(2)
    assert log.apply_retention(clock()) == 1  # the first segment is 10 s old, not future
    assert log.log_start_offset == 1
    log.close()


def test_recompression_uses_the_topic_level() -> None:
    records = [SimpleRecord(b"k", bytes(range(256)) * 40, (), T0 + i) for i in range(20)]
    sizes = {}
    for level in (1, 9):
        config = LogConfig(compression_type="gzip", compression_gzip_level=level)
        v = validate_leader_append(
            bytearray(build_record_batch(records)),
            next_offset=0,
            leader_epoch=0,
            now_ms=T0,
            config=config,
        )
        (stored,) = iter_batches(bytes(v.data))
        assert stored.compression == CompressionType.GZIP
        sizes[level] = len(v.data)
    assert sizes[9] < sizes[1]
