"""The Kafka wire primitives: a bounded Reader over a memoryview and a chunked Writer.

This module owns the byte-level encoding of Kafka's types (fixed-width integers, varints, classic
and compact strings, bytes and arrays, uuids, tagged-field sections). It must not know about any
message: the generated modules in `protocol/messages/` call it.

Safety rule: every length or count read from the wire is checked against the bytes left before
anything is allocated, so a lying length raises :class:`ProtocolError` instead of allocating.
Record data is never copied: `records` fields come back as memoryview slices of the frame, and
the Writer keeps them as separate chunks instead of joining them into a new buffer.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sized
from typing import Any, Final, TypeVar

from protocol.errors import EncodeError, ProtocolError

T = TypeVar("T")

ZERO_UUID = uuid.UUID(int=0)
#: The uuids read so far by their 16 bytes (topic ids come again in every fetch); a bounded
#: cache, emptied when full, so that no sender can grow it (uuid.UUID is immutable).
_UUIDS: dict[bytes, uuid.UUID] = {}
_UUIDS_KEPT = 4096

_i8: Final = struct.Struct(">b")
_i16: Final = struct.Struct(">h")
_u16: Final = struct.Struct(">H")
_i32: Final = struct.Struct(">i")
_u32: Final = struct.Struct(">I")
_i64: Final = struct.Struct(">q")
_f64: Final = struct.Struct(">d")
_unpack_i8: Final = _i8.unpack_from
_unpack_i16: Final = _i16.unpack_from
_unpack_u16: Final = _u16.unpack_from
_unpack_i32: Final = _i32.unpack_from
_unpack_u32: Final = _u32.unpack_from
_unpack_i64: Final = _i64.unpack_from
_pack_i8: Final = _i8.pack
_pack_i16: Final = _i16.pack
_pack_u16: Final = _u16.pack
_pack_i32: Final = _i32.pack
_pack_u32: Final = _u32.pack
_pack_i64: Final = _i64.pack
_pack_f64: Final = _f64.pack


def _short(n: int, left: int) -> ProtocolError:
    return ProtocolError(f"length {n} exceeds the {left} bytes left")


UnknownTags = list[tuple[int, bytes]]


class Reader:
    """Reads Kafka primitives from `buf[pos:end]`, advancing `pos`.

    Short reads raise ``struct.error``/``IndexError``; message-level decode functions convert
    those into :class:`ProtocolError` at their boundary. Length checks raise it directly.
    """

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None):
        self.buf = buf if isinstance(buf, memoryview) else memoryview(buf)
        if self.buf.format != "B" or self.buf.ndim != 1:
            self.buf = self.buf.cast("B")
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        """Reserve `n` bytes and return where they start; raise if fewer are left."""
        pos = self.pos
        if n < 0 or n > self.end - pos:
            raise ProtocolError(f"length {n} exceeds the {self.end - pos} bytes left")
        self.pos = pos + n
        return pos

    # fixed width -------------------------------------------------------------------------
    # Each is `_take` inlined: these run for every field of every request.
    def int8(self) -> int:
        pos = self.pos
        if self.end - pos < 1:
            raise _short(1, self.end - pos)
        self.pos = pos + 1
        return _unpack_i8(self.buf, pos)[0]

    def int16(self) -> int:
        pos = self.pos
        if self.end - pos < 2:
            raise _short(2, self.end - pos)
        self.pos = pos + 2
        return _unpack_i16(self.buf, pos)[0]

    def uint16(self) -> int:
        pos = self.pos
        if self.end - pos < 2:
            raise _short(2, self.end - pos)
        self.pos = pos + 2
        return _unpack_u16(self.buf, pos)[0]

    def int32(self) -> int:
        pos = self.pos
        if self.end - pos < 4:
            raise _short(4, self.end - pos)
        self.pos = pos + 4
        return _unpack_i32(self.buf, pos)[0]

    def uint32(self) -> int:
        pos = self.pos
        if self.end - pos < 4:
            raise _short(4, self.end - pos)
        self.pos = pos + 4
        return _unpack_u32(self.buf, pos)[0]

    def int64(self) -> int:
        pos = self.pos
        if self.end - pos < 8:
            raise _short(8, self.end - pos)
        self.pos = pos + 8
        return _unpack_i64(self.buf, pos)[0]

    def float64(self) -> float:
        return _f64.unpack_from(self.buf, self._take(8))[0]

    def fixed(self, s: struct.Struct) -> tuple[Any, ...]:
        """Several fixed-width fields in a row, with one bounds check and one unpack."""
        pos = self.pos
        n = s.size
        if self.end - pos < n:
            raise _short(n, self.end - pos)
        self.pos = pos + n
        return s.unpack_from(self.buf, pos)

    def boolean(self) -> bool:
        return self.buf[self._take(1)] != 0

    def uuid_(self) -> uuid.UUID:
        pos = self._take(16)
        raw = bytes(self.buf[pos : pos + 16])
        known = _UUIDS.get(raw)
        if known is None:
            if len(_UUIDS) >= _UUIDS_KEPT:
                _UUIDS.clear()
            known = _UUIDS[raw] = uuid.UUID(bytes=raw)
        return known

    # varints -----------------------------------------------------------------------------
    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes (32 bits), as Kafka's readUnsignedVarint."""
        buf, pos, end = self.buf, self.pos, self.end
        if pos < end:  # one byte: lengths, counts and tag sections almost always are
            b = buf[pos]
            if b < 0x80:
                self.pos = pos + 1
                return b
        result = 0
        for shift in (0, 7, 14, 21, 28):
            if pos >= end:
                raise ProtocolError("truncated varint")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                if result > 0xFFFFFFFF:
                    raise ProtocolError("varint exceeds 32 bits")
                return result
        raise ProtocolError("varint longer than 5 bytes")

    def uvarlong(self) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        result = 0
        for shift in range(0, 70, 7):
            if pos >= end:
                raise ProtocolError("truncated varlong")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                if result > 0xFFFFFFFFFFFFFFFF:
                    raise ProtocolError("varlong exceeds 64 bits")
                return result
        raise ProtocolError("varlong longer than 10 bytes")

    def varint(self) -> int:
        n = self.uvarint()
        return (n >> 1) ^ -(n & 1)

    def varlong(self) -> int:
        n = self.uvarlong()
        return (n >> 1) ^ -(n & 1)

    # strings -----------------------------------------------------------------------------
    def _text(self, n: int) -> str:
        pos = self._take(n)
        return str(self.buf[pos : pos + n], "utf-8")

    def string(self) -> str:
        n = _i16.unpack_from(self.buf, self._take(2))[0]
        if n < 0:
            raise ProtocolError("null in a non-nullable string")
        return self._text(n)

    def nullable_string(self) -> str | None:
        n = _i16.unpack_from(self.buf, self._take(2))[0]
        return None if n < 0 else self._text(n)

    def compact_string(self) -> str:
        pos = self.pos
        if pos < self.end and 0 < self.buf[pos] < 0x80:  # a one-byte length, not null
            self.pos = pos + 1
            return self._text(self.buf[pos] - 1)
        n = self.uvarint() - 1
        if n < 0:
            raise ProtocolError("null in a non-nullable compact string")
        return self._text(n)

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._text(n)

    # bytes -------------------------------------------------------------------------------
    def _view(self, n: int) -> memoryview:
        pos = self._take(n)
        return self.buf[pos : pos + n]

    def blob(self) -> bytes:
        n = self.int32()
        if n < 0:
            raise ProtocolError("null in non-nullable bytes")
        return bytes(self._view(n))

    def nullable_blob(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else bytes(self._view(n))

    def compact_blob(self) -> bytes:
        n = self.uvarint() - 1
        if n < 0:
            raise ProtocolError("null in non-nullable compact bytes")
        return bytes(self._view(n))

    def compact_nullable_blob(self) -> bytes | None:
        n = self.uvarint() - 1
        return None if n < 0 else bytes(self._view(n))

    def view(self) -> memoryview:
        """Non-nullable bytes as a zero-copy slice of the frame (`records`, zeroCopy fields)."""
        n = self.int32()
        if n < 0:
            raise ProtocolError("null in non-nullable bytes")
        return self._view(n)

    def nullable_view(self) -> memoryview | None:
        n = self.int32()
        return None if n < 0 else self._view(n)

    def compact_view(self) -> memoryview:
        n = self.uvarint() - 1
        if n < 0:
            raise ProtocolError("null in non-nullable compact bytes")
        return self._view(n)

    def compact_nullable_view(self) -> memoryview | None:
        n = self.uvarint() - 1
        return None if n < 0 else self._view(n)

    # arrays ------------------------------------------------------------------------------
    def array_length(self) -> int:
        """An int32 count, checked against the bytes left; -1 (null) is returned as -1."""
        n = _i32.unpack_from(self.buf, self._take(4))[0]
        if n > self.end - self.pos:
            raise ProtocolError(
                f"array of {n} elements exceeds the {self.end - self.pos} bytes left"
            )
        return n

    def compact_array_length(self) -> int:
        pos = self.pos
        if pos < self.end and self.buf[pos] < 0x80:  # one byte (a count below 127, or null)
            self.pos = pos + 1
            n = self.buf[pos] - 1
        else:
            n = self.uvarint() - 1
        if n > self.end - self.pos:
            raise ProtocolError(
                f"array of {n} elements exceeds the {self.end - self.pos} bytes left"
            )
        return n

    def array(self, read: Callable[[Reader, int], T], version: int) -> list[T]:
        n = self.array_length()
        if n < 0:
            raise ProtocolError("null in a non-nullable array")
        return [read(self, version) for _ in range(n)]

    def nullable_array(self, read: Callable[[Reader, int], T], version: int) -> list[T] | None:
        n = self.array_length()
        return None if n < 0 else [read(self, version) for _ in range(n)]

    def compact_array(self, read: Callable[[Reader, int], T], version: int) -> list[T]:
        n = self.compact_array_length()
        if n < 0:
            raise ProtocolError("null in a non-nullable compact array")
        return [read(self, version) for _ in range(n)]

    def compact_nullable_array(
        self, read: Callable[[Reader, int], T], version: int
    ) -> list[T] | None:
        n = self.compact_array_length()
        return None if n < 0 else [read(self, version) for _ in range(n)]

    # tagged fields -----------------------------------------------------------------------
    def tag_header(self) -> tuple[int, int]:
        """Read one tag and its size; the size is checked against the bytes left."""
        tag = self.uvarint()
        size = self.uvarint()
        if size > self.end - self.pos:
            raise ProtocolError(f"tagged field of {size} bytes exceeds the bytes left")
        return tag, size

    def tag_count(self) -> int:
        pos = self.pos
        if pos < self.end and self.buf[pos] == 0:  # the usual empty section
            self.pos = pos + 1
            return 0
        n = self.uvarint()
        if n > self.end - self.pos:
            raise ProtocolError(f"{n} tagged fields exceed the bytes left")
        return n

    def skip_unknown_tag(self, tag: int, size: int, unknown: UnknownTags | None) -> UnknownTags:
        """Keep an unknown tagged field's raw bytes so that re-encoding is byte-identical."""
        if unknown is None:
            unknown = []
        unknown.append((tag, bytes(self._view(size))))
        return unknown

    def unknown_tags_only(self) -> UnknownTags | None:
        """Read a tagged-field section in which no tag is known to this struct and version."""
        pos = self.pos
        if pos < self.end and self.buf[pos] == 0:  # the usual empty section
            self.pos = pos + 1
            return None
        count = self.tag_count()
        unknown: UnknownTags | None = None
        for _ in range(count):
            tag, size = self.tag_header()
            unknown = self.skip_unknown_tag(tag, size, unknown)
        return unknown

    def expect_end_of_tag(self, end: int) -> None:
        if self.pos != end:
            raise ProtocolError("tagged field size does not match its contents")


def _uvarint_bytes(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_UVARINTS = [_uvarint_bytes(i) for i in range(128)]


def uvarint_bytes(n: int) -> bytes:
    """The unsigned varint encoding of a non-negative int."""
    if 0 <= n < 128:
        return _SMALL_UVARINTS[n]
    if n < 0:
        raise EncodeError(f"unsigned varint of a negative value {n}")
    return _uvarint_bytes(n)


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


class Writer:
    """Appends Kafka primitives to a bytearray; zero-copy values become chunks of their own.

    `chunks()` returns the encoded message as a list of buffers: bytearrays the Writer built and,
    between them, the untouched objects that were passed to :meth:`records` (memoryviews, bytes,
    or any sized object a transport knows how to send, such as a file slice).
    """

    __slots__ = ("buf", "_chunks")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._chunks: list[Any] | None = None

    def chunks(self) -> list[Any]:
        if self._chunks is None:
            return [self.buf]
        return [*self._chunks, self.buf]

    def getvalue(self) -> bytes:
        if self._chunks is None:
            return bytes(self.buf)
        return b"".join(self.chunks())

    def __len__(self) -> int:
        n = len(self.buf)
        if self._chunks is not None:
            n += sum(_sized(c) for c in self._chunks)
        return n

    # fixed width -------------------------------------------------------------------------
    def int8(self, v: int) -> None:
        self.buf += _pack_i8(v)

    def int16(self, v: int) -> None:
        self.buf += _pack_i16(v)

    def uint16(self, v: int) -> None:
        self.buf += _pack_u16(v)

    def int32(self, v: int) -> None:
        self.buf += _pack_i32(v)

    def uint32(self, v: int) -> None:
        self.buf += _pack_u32(v)

    def int64(self, v: int) -> None:
        self.buf += _pack_i64(v)

    def float64(self, v: float) -> None:
        self.buf += _pack_f64(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid_(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    # varints -----------------------------------------------------------------------------
    def uvarint(self, n: int) -> None:
        if 0 <= n < 128:
            self.buf.append(n)
        else:
            self.buf += uvarint_bytes(n)

    def varint(self, n: int) -> None:
        self.uvarint(zigzag(n) & 0xFFFFFFFF if -(2**31) <= n < 2**31 else _range_error(n))

    def varlong(self, n: int) -> None:
        if not -(2**63) <= n < 2**63:
            _range_error(n)
        self.uvarint(zigzag(n) & 0xFFFFFFFFFFFFFFFF)

    # strings -----------------------------------------------------------------------------
    def string(self, v: str | None) -> None:
        if v is None:
            raise EncodeError("null written to a non-nullable string")
        data = v.encode()
        self.buf += _pack_i16(len(data))
        self.buf += data

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self.buf += b"\xff\xff"
        else:
            self.string(v)

    def compact_string(self, v: str | None) -> None:
        if v is None:
            raise EncodeError("null written to a non-nullable string")
        data = v.encode()
        n = len(data) + 1
        if n < 128:
            self.buf.append(n)
        else:
            self.buf += uvarint_bytes(n)
        self.buf += data

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self.buf.append(0)
        else:
            self.compact_string(v)

    # bytes -------------------------------------------------------------------------------
    def blob(self, v: bytes | memoryview | None) -> None:
        if v is None:
            raise EncodeError("null written to non-nullable bytes")
        self.buf += _pack_i32(len(v))
        self.buf += v

    def nullable_blob(self, v: bytes | memoryview | None) -> None:
        if v is None:
            self.buf += b"\xff\xff\xff\xff"
        else:
            self.blob(v)

    def compact_blob(self, v: bytes | memoryview | None) -> None:
        if v is None:
            raise EncodeError("null written to non-nullable bytes")
        self.uvarint(len(v) + 1)
        self.buf += v

    def compact_nullable_blob(self, v: bytes | memoryview | None) -> None:
        if v is None:
            self.buf.append(0)
        else:
            self.compact_blob(v)

    def records(self, v: Sized | None, *, compact: bool, nullable: bool) -> None:
        """Write a `records` field without copying it: the value becomes a chunk of its own."""
        if v is None:
            if not nullable:
                raise EncodeError("null written to non-nullable records")
            self.buf += b"\x00" if compact else b"\xff\xff\xff\xff"
            return
        size = _sized(v)
        if compact:
            if size < 127:
                self.buf.append(size + 1)
            else:
                self.buf += uvarint_bytes(size + 1)
        else:
            self.buf += _pack_i32(size)
        if size:
            if self._chunks is None:
                self._chunks = []
            self._chunks.append(self.buf)
            self._chunks.append(v)
            self.buf = bytearray()

    # arrays ------------------------------------------------------------------------------
    def array_length(self, items: Sized | None, *, compact: bool, nullable: bool) -> None:
        if items is None:
            if not nullable:
                raise EncodeError("null written to a non-nullable array")
            self.buf += b"\x00" if compact else b"\xff\xff\xff\xff"
        elif compact:
            n = len(items) + 1
            if n < 128:
                self.buf.append(n)
            else:
                self.buf += uvarint_bytes(n)
        else:
            self.buf += _pack_i32(len(items))

    # tagged fields -----------------------------------------------------------------------
    def no_tagged_fields(self, unknown: UnknownTags | None) -> None:
        """The tagged-field section of a struct with no known tagged fields in this version."""
        if not unknown:
            self.buf.append(0)
        else:
            self.tagged_fields([], unknown)

    def tagged_fields(self, known: list[tuple[int, bytes]], unknown: UnknownTags | None) -> None:
        """Write known and unknown tagged fields merged in ascending tag order."""
        if not known and not unknown:  # the usual empty section
            self.buf.append(0)
            return
        fields = known + unknown if unknown else known
        if unknown:
            fields.sort(key=lambda f: f[0])
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.buf += data


def _sized(v: Any) -> int:
    return v.nbytes if isinstance(v, memoryview) else len(v)


def _range_error(n: int) -> int:
    raise EncodeError(f"value {n} does not fit its varint type")


# Element readers for arrays of primitives: `Reader.array(read_int32_item, version)`.
def read_int8_item(r: Reader, version: int) -> int:
    return r.int8()


def read_int16_item(r: Reader, version: int) -> int:
    return r.int16()


def read_uint16_item(r: Reader, version: int) -> int:
    return r.uint16()


def read_int32_item(r: Reader, version: int) -> int:
    return r.int32()


def read_int64_item(r: Reader, version: int) -> int:
    return r.int64()


def read_float64_item(r: Reader, version: int) -> float:
    return r.float64()


def read_uuid_item(r: Reader, version: int) -> uuid.UUID:
    return r.uuid_()


def read_string_item(r: Reader, version: int) -> str:
    return r.string()


def read_compact_string_item(r: Reader, version: int) -> str:
    return r.compact_string()
