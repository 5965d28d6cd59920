"""Kafka's record compression codecs, with a hard bound on decompressed size.

This module owns turning the payload of a compressed record batch (or legacy wrapper message)
into bytes and back, for every codec Kafka 3.9 defines: gzip, snappy, lz4 and zstd. It is pure
computation: no I/O, no threads, no clocks. It must not know about batch framing; callers in
`protocol.records` hand it the compressed region only.

Safety: :func:`decompress` never produces (or allocates for) more than ``max_output`` bytes; a
payload that would exceed it raises :class:`DecompressionLimitError`. Every decoder error of the
underlying libraries is converted to :class:`ProtocolError`, the only exception malformed input
raises here.

Wire choices, matching Kafka's Java client:

* gzip: RFC 1952 members (several concatenated members are accepted, as Java's
  ``GZIPInputStream`` does); trailing bytes that are not a gzip member are rejected.
* snappy: decoding accepts both raw snappy and the xerial block framing (``\\x82SNAPPY\\x00``
  magic, two int32 versions, then int32-length-prefixed raw blocks). Encoding writes the xerial
  framing with 32 KiB blocks, exactly what the Java client's ``SnappyOutputStream`` writes: every
  Kafka client (Java, librdkafka, kafka-python, franz-go, sarama) reads it, while some older Java
  consumers cannot read raw snappy.
* lz4: the standard LZ4 frame format with independent blocks (Kafka rejects linked blocks) and
  no content size. For magic 0 messages, Kafka writes a wrong frame-descriptor checksum (HC
  computed over the magic number too) and ignores HC when reading; pass ``magic=0`` to do the
  same.
* zstd: one or more zstd frames; window size is bounded (see :func:`decompress`).

Each codec's library is imported when the first payload of that codec is met, so a broker that
never sees compressed batches never loads them (start-up time).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from enum import IntEnum
from typing import TypeAlias

from protocol.error_codes import ErrorCode
from protocol.errors import DecompressionLimitError, EncodeError, ProtocolError

__all__ = [
    "CompressionType",
    "compress",
    "decompress",
    "xxh32",
]

Buffer: TypeAlias = bytes | bytearray | memoryview


class CompressionType(IntEnum):
    """The compression codec id stored in bits 0-2 of a batch's (or message's) attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def _unsupported(codec: int) -> ProtocolError:
    return ProtocolError(
        f"unsupported compression codec {codec}",
        error_code=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
    )


def xxh32(data: Buffer, seed: int = 0) -> int:
    """The 32-bit xxHash of `data` (used for the LZ4 frame header checksum)."""
    import xxhash

    return int(xxhash.xxh32_intdigest(bytes(data), seed))


# --------------------------------------------------------------------------------------------
# compress
# --------------------------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_i32 = struct.Struct(">i")
_u32le = struct.Struct("<I")


def _gzip_compress(data: Buffer, level: int | None) -> bytes:
    c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _snappy_compress(data: Buffer, level: int | None) -> bytes:
    import cramjam

    view = memoryview(data).cast("B")
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_i32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_compress(data: Buffer, level: int | None, broken_checksum: bool) -> bytes:
    import lz4.frame

    out = lz4.frame.compress(
        data,
        compression_level=0 if level is None else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    if broken_checksum:
        # magic(4) FLG BD HC: old Kafka hashed the magic too (KafkaLZ4BlockOutputStream, magic 0).
        fixed = bytearray(out)
        fixed[6] = (xxh32(out[0:6]) >> 8) & 0xFF
        out = bytes(fixed)
    return out


def _zstd_compress(data: Buffer, level: int | None) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)


def compress(codec: int, data: Buffer, *, level: int | None = None, magic: int = 2) -> bytes:
    """Compress `data` with Kafka codec `codec`; `magic` matters only for lz4 (see module doc).

    NONE returns a copy. Raises :class:`ProtocolError` (UNSUPPORTED_COMPRESSION_TYPE) for an
    unknown codec and :class:`EncodeError` for a bad level.
    """
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return _gzip_compress(data, level)
        if codec == CompressionType.SNAPPY:
            return _snappy_compress(data, level)
        if codec == CompressionType.LZ4:
            return _lz4_compress(data, level, broken_checksum=magic == 0)
        if codec == CompressionType.ZSTD:
            return _zstd_compress(data, level)
    except Exception as e:
        if isinstance(e, (ValueError, RuntimeError, zlib.error, *_library_errors(codec))):
            raise EncodeError(f"cannot compress with codec {codec}: {e}") from e
        raise
    raise _unsupported(codec)


def _library_errors(codec: int) -> tuple[type[Exception], ...]:
    """The error types of a codec's library besides the built-in ones (it is imported by now:
    its codec ran)."""
    if codec == CompressionType.SNAPPY:
        import cramjam

        return (cramjam.DecompressionError,)
    if codec == CompressionType.ZSTD:
        import zstandard

        return (zstandard.ZstdError,)
    return ()


# --------------------------------------------------------------------------------------------
# decompress
# --------------------------------------------------------------------------------------------


def _limit_error(max_output: int) -> DecompressionLimitError:
    return DecompressionLimitError(f"decompressed data exceeds the limit of {max_output} bytes")


def _gzip_decompress(data: memoryview, max_output: int) -> bytes:
    chunks: list[bytes] = []
    budget = max_output
    rest: Buffer = data
    while True:
        d = zlib.decompressobj(31)
        # zlib grows its output buffer as it goes, never past max_length: bounded allocation.
        out = d.decompress(rest, budget + 1)
        if len(out) > budget:
            raise _limit_error(max_output)
        if not d.eof:
            raise ProtocolError("truncated gzip stream")
        chunks.append(out)
        budget -= len(out)
        rest = d.unused_data
        if not rest:
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _snappy_blocks(data: memoryview) -> Iterator[memoryview]:
    """The raw snappy blocks of a payload: the xerial-framed blocks, or the payload itself."""
    if len(data) < 16 or data[:8] != _XERIAL_MAGIC:
        yield data
        return
    # The two version int32s are ignored, as other clients do (some writers get them wrong).
    pos = 16
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise ProtocolError("truncated xerial snappy block length")
        (n,) = _i32.unpack_from(data, pos)
        pos += 4
        if n < 0 or n > end - pos:
            raise ProtocolError(f"xerial snappy block length {n} exceeds the data")
        yield data[pos : pos + n]
        pos += n


def _snappy_decompress(data: memoryview, max_output: int) -> bytearray:
    # Each raw block starts with its uncompressed length: check the running total against the
    # limit before allocating anything, then decompress every block into one exact buffer.
    import cramjam

    blocks: list[tuple[memoryview, int]] = []
    total = 0
    for block in _snappy_blocks(data):
        n = cramjam.snappy.decompress_raw_len(block)
        total += n
        if total > max_output:
            raise _limit_error(max_output)
        blocks.append((block, n))
    out = bytearray(total)
    with memoryview(out) as view:
        pos = 0
        for block, n in blocks:
            if n == 0:
                if len(block) != 1:
                    raise ProtocolError("empty snappy block with trailing bytes")
            elif cramjam.snappy.decompress_raw_into(block, view[pos : pos + n]) != n:
                raise ProtocolError("snappy block shorter than its declared length")
            pos += n
    return out


def _check_lz4_header(data: memoryview, ignore_checksum: bool) -> memoryview | bytes:
    """Apply Kafka's LZ4 frame restrictions; return the frame, with HC repaired if asked."""
    if len(data) < 7 or data[:4] != _LZ4_MAGIC:
        raise ProtocolError("not an LZ4 frame (bad magic)")
    flg = data[4]
    if flg >> 6 != 1:
        raise ProtocolError(f"unsupported LZ4 frame version {flg >> 6}")
    if not flg & 0x20:
        raise ProtocolError(
            "LZ4 dependent block stream is unsupported (Kafka requires independent blocks)"
        )
    if not ignore_checksum:
        return data
    hc_pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(data) <= hc_pos:
        raise ProtocolError("truncated LZ4 frame descriptor")
    hc = (xxh32(data[4:hc_pos]) >> 8) & 0xFF
    return b"".join([data[:hc_pos], bytes([hc]), data[hc_pos + 1 :]])


_FIRST_CHUNK = 64 * 1024
_MAX_CHUNK = 4 * 1024 * 1024


def _chunked_read(read: Callable[[int], bytes], max_output: int) -> bytes:
    """Drain `read(n)` (which returns b"" at the end) in growing chunks, never past the limit.

    The libraries behind `read` allocate `n` bytes up front, so `n` grows geometrically from a
    small size instead of starting at the limit.
    """
    chunks: list[bytes] = []
    total = 0
    chunk = _FIRST_CHUNK
    while True:
        part = read(min(chunk, max_output - total + 1))
        if not part:
            break
        total += len(part)
        if total > max_output:
            raise _limit_error(max_output)
        chunks.append(part)
        chunk = min(chunk * 2, _MAX_CHUNK)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _lz4_decompress(data: memoryview, max_output: int, magic: int) -> bytes:
    import lz4.frame

    frame = _check_lz4_header(data, ignore_checksum=magic == 0)
    d = lz4.frame.LZ4FrameDecompressor()
    pending: list[Buffer] = [frame]

    def read(n: int) -> bytes:
        if d.eof:
            return b""
        src = pending.pop() if pending else b""
        out: bytes = d.decompress(src, max_length=n)
        if not out and d.needs_input and not d.eof:
            raise ProtocolError("truncated LZ4 frame")
        return out

    out = _chunked_read(read, max_output)
    if not d.eof:
        raise ProtocolError("truncated LZ4 frame")
    if d.unused_data:
        raise ProtocolError("trailing bytes after the LZ4 frame")
    return out


_ZSTD_MIN_WINDOW = 1 << 23  # what zstd levels <= 19 use for streams of unknown size
_ZSTD_MAX_WINDOW = 1 << 27  # zstd's (and zstd-jni's, hence Kafka's) default decoder limit


def _check_zstd_frames(data: memoryview) -> None:
    """Walk the frame and block headers: the payload must be whole frames and nothing else.

    (The streaming decoder silently stops at the end of a truncated payload, so completeness
    is checked here, reading only the 3-byte block headers.)
    """
    end = len(data)
    pos = 0
    if end == 0:
        raise ProtocolError("empty zstd payload")
    while pos < end:
        if end - pos < 8:
            raise ProtocolError("truncated zstd frame")
        (magic,) = _u32le.unpack_from(data, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            (size,) = _u32le.unpack_from(data, pos + 4)
            pos += 8 + size
            continue
        if magic != 0xFD2FB528:
            raise ProtocolError("not a zstd frame (bad magic)")
        fhd = data[pos + 4]
        fcs_flag = fhd >> 6
        single_segment = fhd & 0x20
        if fhd & 0x08:
            raise ProtocolError("zstd frame header reserved bit set")
        header = 1 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 0x03]
        header += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
        pos += 4 + header
        while True:
            if end - pos < 3:
                raise ProtocolError("truncated zstd frame")
            bh = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            block_type = (bh >> 1) & 0x03
            if block_type == 3:
                raise ProtocolError("reserved zstd block type")
            pos += 3 + (1 if block_type == 1 else bh >> 3)
            if bh & 1:
                break
        if fhd & 0x04:
            pos += 4  # content checksum
    if pos != end:
        raise ProtocolError("truncated zstd frame")


def _zstd_decompress(data: memoryview, max_output: int) -> bytes:
    import zstandard

    _check_zstd_frames(data)
    # The decoder allocates the frame's window outside Python's heap: refuse windows larger
    # than the output limit could need, other than the sizes the standard levels use.
    window = min(_ZSTD_MAX_WINDOW, max(_ZSTD_MIN_WINDOW, 1 << max(0, max_output - 1).bit_length()))
    dctx = zstandard.ZstdDecompressor(max_window_size=window)
    reader = dctx.stream_reader(data, read_across_frames=True)
    return _chunked_read(reader.read, max_output)


def decompress(codec: int, data: Buffer, max_output: int, *, magic: int = 2) -> bytes | bytearray:
    """Decompress a Kafka `codec` payload into at most `max_output` bytes.

    `magic` is the batch/message format the payload came from (only lz4 with magic 0 differs).
    Returns a bytes-like object (wrap it in a memoryview to slice without copying).

    Raises :class:`DecompressionLimitError` as soon as the output would exceed `max_output`,
    before allocating past it; :class:`ProtocolError` (error code UNSUPPORTED_COMPRESSION_TYPE)
    for an unknown codec; :class:`ProtocolError` for any corrupt or truncated payload.
    zstd frames whose window exceeds max(8 MiB, `max_output` rounded up to a power of two, capped
    at 128 MiB) are refused, bounding the decoder's native allocation too.
    """
    if max_output < 0:
        raise ValueError("max_output must be >= 0")
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    try:
        if codec == CompressionType.NONE:
            if len(view) > max_output:
                raise _limit_error(max_output)
            return bytes(view)
        if codec == CompressionType.GZIP:
            return _gzip_decompress(view, max_output)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(view, max_output)
        if codec == CompressionType.LZ4:
            return _lz4_decompress(view, max_output, magic)
        if codec == CompressionType.ZSTD:
            return _zstd_decompress(view, max_output)
    except ProtocolError:
        raise
    except Exception as e:
        if isinstance(e, _DECODE_ERRORS + _library_errors(codec)):
            raise ProtocolError(f"corrupt {_codec_name(codec)} data: {e}") from e
        raise
    raise _unsupported(codec)


_DECODE_ERRORS: tuple[type[Exception], ...] = (
    zlib.error,
    RuntimeError,  # lz4.frame reports errors as RuntimeError
    ValueError,
    OverflowError,
    EOFError,
    struct.error,
)


def _codec_name(codec: int) -> str:
    try:
        return CompressionType(codec).name.lower()
    except ValueError:
        return str(codec)
