"""Zigzag varints as Kafka's record format (v2 batches) uses them.

This module owns the byte-level varint/varlong codec used *inside* record batches
(`ByteUtils.readVarint`/`readVarlong` in Kafka). It must not know about batches or records, and
it does no I/O. (The message codec has its own unsigned varints in `protocol.primitives`.)

Semantics follow Kafka exactly: a varint is at most 5 bytes and a varlong at most 10; a longer
encoding is malformed. Bits beyond 32 (resp. 64) in the last byte are dropped, as Java's shifts
drop them. Decoders raise :class:`ProtocolError` on a truncated or over-long encoding.
"""

from __future__ import annotations

from protocol.errors import EncodeError, ProtocolError

__all__ = [
    "decode_varint",
    "decode_varlong",
    "encode_varint",
    "encode_varlong",
    "size_of_varint",
    "size_of_varlong",
]

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1

# One-byte encodings are by far the most common (small lengths, deltas, counts): precompute.
_ONE_BYTE = [bytes([(v << 1) if v >= 0 else ((-v << 1) - 1)]) for v in range(-64, 64)]


def _decode(buf: memoryview | bytes | bytearray, pos: int, max_bytes: int) -> tuple[int, int]:
    """Return (zigzag-encoded unsigned value, position after it)."""
    try:
        b = buf[pos]
    except IndexError:
        raise ProtocolError("truncated varint") from None
    if b < 0x80:  # fast path: a single byte
        return b, pos + 1
    raw = b & 0x7F
    shift = 7
    end = pos + max_bytes
    pos += 1
    while True:
        if pos >= end:
            raise ProtocolError(f"varint longer than {max_bytes} bytes")
        try:
            b = buf[pos]
        except IndexError:
            raise ProtocolError("truncated varint") from None
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return raw, pos
        shift += 7


def decode_varint(buf: memoryview | bytes | bytearray, pos: int) -> tuple[int, int]:
    """Decode a zigzag int32 varint at `buf[pos]`; return (value, next position)."""
    raw, pos = _decode(buf, pos, 5)
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: memoryview | bytes | bytearray, pos: int) -> tuple[int, int]:
    """Decode a zigzag int64 varlong at `buf[pos]`; return (value, next position)."""
    raw, pos = _decode(buf, pos, 10)
    raw &= _MASK64
    return (raw >> 1) ^ -(raw & 1), pos


def _encode_unsigned(u: int) -> bytes:
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Encode `value` (an int32) as a zigzag varint."""
    if -64 <= value < 64:
        return _ONE_BYTE[value + 64]
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise EncodeError(f"{value} does not fit a varint (int32)")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & _MASK32)


def encode_varlong(value: int) -> bytes:
    """Encode `value` (an int64) as a zigzag varlong."""
    if -64 <= value < 64:
        return _ONE_BYTE[value + 64]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise EncodeError(f"{value} does not fit a varlong (int64)")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & _MASK64)


def _size_unsigned(u: int) -> int:
    return max(1, (u.bit_length() + 6) // 7)


def size_of_varint(value: int) -> int:
    """Bytes `encode_varint(value)` takes."""
    return _size_unsigned(((value << 1) ^ (value >> 31)) & _MASK32)


def size_of_varlong(value: int) -> int:
    """Bytes `encode_varlong(value)` takes."""
    return _size_unsigned(((value << 1) ^ (value >> 63)) & _MASK64)
