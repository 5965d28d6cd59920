"""Tests for protocol.compression: round trips, wire framing, bombs and fuzzing."""

from __future__ import annotations

import contextlib
import gzip
import struct
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.compression import CompressionType, compress, decompress, xxh32
from protocol.error_codes import ErrorCode
from protocol.errors import DecompressionLimitError, EncodeError, ProtocolError

CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
XERIAL_MAGIC = b"\x82SNAPPY\x00"
MiB = 1024 * 1024

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- round trips ------------------------------------------------------------------------------


@FAST
@given(
    data=st.binary(max_size=5000), codec=st.sampled_from(CODECS), magic=st.sampled_from([0, 1, 2])
)
def test_round_trip(data: bytes, codec: int, magic: int) -> None:
    packed = compress(codec, data, magic=magic)
    assert bytes(decompress(codec, packed, len(data), magic=magic)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_limit_is_exact(codec: int) -> None:
    data = b"abcdefgh" * 20000 + bytes(range(256))
    packed = compress(codec, data)
    assert bytes(decompress(codec, packed, len(data))) == data
    with pytest.raises(DecompressionLimitError):
        decompress(codec, packed, len(data) - 1)


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_memoryview_slices(codec: int) -> None:
    data = b"kafka" * 1000
    packed = b"JUNK" + compress(codec, data) + b"MORE"
    view = memoryview(packed)[4:-4]
    assert bytes(decompress(codec, view, len(data))) == data


def test_none_codec_copies_and_bounds() -> None:
    assert decompress(CompressionType.NONE, memoryview(b"abc"), 3) == b"abc"
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.NONE, b"abcd", 3)


@pytest.mark.parametrize("codec", [5, 6, 7, 99])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(ProtocolError) as e:
        decompress(codec, b"x", 10)
    assert e.value.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(ProtocolError) as e:
        compress(codec, b"x")
    assert e.value.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_bad_level_is_encode_error() -> None:
    with pytest.raises(EncodeError):
        compress(CompressionType.GZIP, b"x", level=42)


# ---- gzip -------------------------------------------------------------------------------------


def test_gzip_is_rfc1952_and_reads_stdlib_output() -> None:
    data = b"hello gzip" * 100
    assert gzip.decompress(compress(CompressionType.GZIP, data)) == data
    assert decompress(CompressionType.GZIP, gzip.compress(data), len(data)) == data


def test_gzip_concatenated_members() -> None:
    packed = gzip.compress(b"one ") + gzip.compress(b"two")
    assert decompress(CompressionType.GZIP, packed, 7) == b"one two"
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.GZIP, packed, 6)


@pytest.mark.parametrize("suffix", [b"garbage", b"\x1f\x8b"])
def test_gzip_trailing_garbage_rejected(suffix: bytes) -> None:
    with pytest.raises(ProtocolError):
        decompress(CompressionType.GZIP, gzip.compress(b"x") + suffix, 100)


def test_gzip_truncated_rejected() -> None:
    packed = gzip.compress(b"abc" * 100)
    for cut in range(len(packed)):
        with pytest.raises(ProtocolError):
            decompress(CompressionType.GZIP, packed[:cut], 1000)


# ---- snappy -----------------------------------------------------------------------------------


def _xerial(blocks: list[bytes], versions: bytes = struct.pack(">ii", 1, 1)) -> bytes:
    out = XERIAL_MAGIC + versions
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        out += struct.pack(">i", len(raw)) + raw
    return out


def test_snappy_encodes_xerial_framing_with_32k_blocks() -> None:
    data = bytes(range(256)) * 300  # 76800 bytes -> 3 blocks
    packed = compress(CompressionType.SNAPPY, data)
    assert packed[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert [len(b) for b in blocks] == [32768, 32768, 11264]
    assert b"".join(blocks) == data


def test_snappy_decodes_raw_and_xerial() -> None:
    data = b"snappy!" * 5000
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert bytes(decompress(CompressionType.SNAPPY, raw, len(data))) == data
    framed = _xerial([data[:10000], data[10000:20000], data[20000:]])
    assert bytes(decompress(CompressionType.SNAPPY, framed, len(data))) == data
    # Little-endian version fields (a known writer bug) are tolerated like other clients do.
    framed_le = _xerial([data], versions=struct.pack("<ii", 1, 1))
    assert bytes(decompress(CompressionType.SNAPPY, framed_le, len(data))) == data


def test_snappy_xerial_bad_block_length() -> None:
    framed = _xerial([b"abc" * 10])
    for bad in (struct.pack(">i", -1), struct.pack(">i", 1000)):
        broken = framed[:16] + bad + framed[20:]
        with pytest.raises(ProtocolError):
            decompress(CompressionType.SNAPPY, broken, 1000)
    with pytest.raises(ProtocolError):
        decompress(CompressionType.SNAPPY, framed + b"\x00\x00", 1000)


def test_snappy_lying_preamble() -> None:
    raw = bytearray(cramjam.snappy.compress_raw(b"a" * 100))
    raw[0] = 50  # claims 50 bytes, holds 100
    with pytest.raises(ProtocolError):
        decompress(CompressionType.SNAPPY, bytes(raw), 1000)


# ---- lz4 --------------------------------------------------------------------------------------


def test_xxh32_known_vectors() -> None:
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


@pytest.mark.parametrize("store_size", [False, True])
@pytest.mark.parametrize("content_checksum", [False, True])
def test_xxh32_matches_lz4_frame_header_checksum(store_size: bool, content_checksum: bool) -> None:
    frame = lz4.frame.compress(
        b"x" * 100, store_size=store_size, content_checksum=content_checksum, block_linked=False
    )
    hc_pos = 6 + (8 if store_size else 0)
    assert frame[hc_pos] == (xxh32(frame[4:hc_pos]) >> 8) & 0xFF


def test_lz4_frame_flags_match_kafka() -> None:
    frame = compress(CompressionType.LZ4, b"abc" * 1000)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg, bd = frame[4], frame[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks
    assert not flg & 0x08  # no content size
    assert (bd >> 4) & 0x07 == 4  # 64 KiB blocks
    assert lz4.frame.decompress(frame) == b"abc" * 1000


def test_lz4_magic0_broken_header_checksum() -> None:
    data = b"old kafka" * 100
    frame = compress(CompressionType.LZ4, data, magic=0)
    assert frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF  # hashed over the magic too
    assert frame[6] != (xxh32(frame[4:6]) >> 8) & 0xFF
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(frame)  # a standard decoder refuses it ...
    assert decompress(CompressionType.LZ4, frame, len(data), magic=0) == data  # ... Kafka ignores
    with pytest.raises(ProtocolError):
        decompress(CompressionType.LZ4, frame, len(data), magic=1)
    # A correct HC is fine with magic 0 as well.
    good = compress(CompressionType.LZ4, data, magic=1)
    assert decompress(CompressionType.LZ4, good, len(data), magic=0) == data


def test_lz4_standard_frames_with_optional_fields() -> None:
    data = bytes(range(256)) * 1000
    for kwargs in (
        {"store_size": True},
        {"content_checksum": True},
        {"block_checksum": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ):
        frame = lz4.frame.compress(data, block_linked=False, **kwargs)
        assert decompress(CompressionType.LZ4, frame, len(data)) == data


def test_lz4_linked_blocks_rejected_like_kafka() -> None:
    frame = lz4.frame.compress(b"abc" * 100000, block_linked=True)
    with pytest.raises(ProtocolError, match="dependent block"):
        decompress(CompressionType.LZ4, frame, 10**6)


def test_lz4_truncated_and_trailing() -> None:
    frame = compress(CompressionType.LZ4, bytes(range(256)) * 100)
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decompress(CompressionType.LZ4, frame[:cut], 10**6)
    with pytest.raises(ProtocolError):
        decompress(CompressionType.LZ4, frame + b"x", 10**6)


# ---- zstd -------------------------------------------------------------------------------------


def test_zstd_multiple_and_skippable_frames() -> None:
    c = zstandard.ZstdCompressor()
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    packed = c.compress(b"one ") + skippable + c.compress(b"two")
    assert decompress(CompressionType.ZSTD, packed, 7) == b"one two"


def test_zstd_streamed_frame_without_content_size() -> None:
    data = b"stream" * 10000
    cobj = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    packed = cobj.compress(data) + cobj.flush()
    assert zstandard.get_frame_parameters(packed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    empty = zstandard.ZstdCompressor().compressobj()
    packed += empty.flush()  # an empty second frame
    assert decompress(CompressionType.ZSTD, packed, len(data)) == data


def test_zstd_truncated_and_trailing() -> None:
    frame = compress(CompressionType.ZSTD, bytes(range(256)) * 100)
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decompress(CompressionType.ZSTD, frame[:cut], 10**6)
    with pytest.raises(ProtocolError):
        decompress(CompressionType.ZSTD, frame + b"xyzxyzxyz", 10**6)


def test_zstd_huge_window_refused() -> None:
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=28)
    cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = cobj.compress(b"x" * 1000) + cobj.flush()  # streamed: the header keeps 2**28
    assert zstandard.get_frame_parameters(frame).window_size == 1 << 28
    with pytest.raises(ProtocolError):
        decompress(CompressionType.ZSTD, frame, 10**6)


# ---- decompression bombs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bombs() -> dict[int, bytes]:
    zeros = bytes(100 * MiB)
    return {
        CompressionType.GZIP: compress(CompressionType.GZIP, zeros, level=1),
        CompressionType.SNAPPY: compress(CompressionType.SNAPPY, zeros),
        CompressionType.LZ4: compress(CompressionType.LZ4, zeros),
        CompressionType.ZSTD: compress(CompressionType.ZSTD, zeros),
    }


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb_is_refused_with_bounded_memory(
    bombs: dict[int, bytes], codec: int
) -> None:
    payload = bombs[codec]
    assert len(payload) < 5 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError):
            decompress(codec, payload, MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB, f"peak Python allocation {peak} bytes"


def test_raw_snappy_bomb_refused_before_decoding() -> None:
    raw = bytes(cramjam.snappy.compress_raw(bytes(8 * MiB)))
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError):
            decompress(CompressionType.SNAPPY, raw, MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_gzip_member_bomb() -> None:
    member = gzip.compress(bytes(MiB // 2))
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.GZIP, member * 3, MiB)


# ---- fuzzing ----------------------------------------------------------------------------------


@FAST
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=300), magic=st.sampled_from([0, 2]))
def test_fuzz_arbitrary_bytes(codec: int, data: bytes, magic: int) -> None:
    with contextlib.suppress(ProtocolError):
        decompress(codec, data, 10_000, magic=magic)


def _prefixed(codec: int) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes behind a valid header, so decoders get past their magic checks."""
    packed = compress(codec, b"some payload " * 20)
    return st.binary(max_size=200).map(lambda tail: packed[:16] + tail)


@FAST
@given(
    codec=st.sampled_from(CODECS),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10_000),
)
def test_fuzz_mutated_payloads(codec: int, edits: list[tuple[int, int]], cut: int) -> None:
    packed = bytearray(compress(codec, bytes(range(256)) * 8 + b"tail" * 100))
    for pos, byte in edits:
        packed[pos % len(packed)] = byte
    if cut % 3 == 0:
        del packed[len(packed) - cut % (len(packed) + 1) :]
    try:
        out = decompress(codec, bytes(packed), 50_000)
        assert len(out) <= 50_000
    except ProtocolError:
        pass


@FAST
@given(data=st.data(), codec=st.sampled_from(CODECS))
def test_fuzz_valid_header_random_body(data: st.DataObject, codec: int) -> None:
    payload = data.draw(_prefixed(codec))
    with contextlib.suppress(ProtocolError):
        decompress(codec, payload, 10_000)


def test_zlib_error_is_protocol_error() -> None:
    bad = bytearray(gzip.compress(b"abc" * 100))
    bad[12] ^= 0xFF
    with pytest.raises(ProtocolError):
        decompress(CompressionType.GZIP, bytes(bad), 10_000)
    with pytest.raises(ProtocolError):
        decompress(CompressionType.GZIP, zlib.compress(b"zlib, not gzip"), 10_000)
