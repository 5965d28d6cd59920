"""The wire primitives: varints at their limits, and lying lengths that must raise, not allocate."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import EncodeError, ProtocolError
from protocol.primitives import Reader, Writer


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_roundtrip(n: int) -> None:
    w = Writer()
    w.varint(n)
    r = Reader(w.getvalue())
    assert r.varint() == n
    assert r.remaining() == 0


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_roundtrip(n: int) -> None:
    w = Writer()
    w.varlong(n)
    r = Reader(w.getvalue())
    assert r.varlong() == n


@pytest.mark.parametrize(
    ("n", "encoded"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02")],
)
def test_uvarint_known_bytes(n: int, encoded: bytes) -> None:
    w = Writer()
    w.uvarint(n)
    assert w.getvalue() == encoded
    assert Reader(encoded).uvarint() == n


def test_varint_out_of_range_is_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        Writer().varint(2**31)


@pytest.mark.parametrize("data", [b"\x80\x80\x80\x80\x80\x01", b"\xff\xff\xff\xff\x7f", b"\x80"])
def test_bad_uvarints_raise(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        Reader(data).uvarint()


def test_strings_and_nulls() -> None:
    w = Writer()
    w.string("héllo")
    w.nullable_string(None)
    w.compact_string("x")
    w.compact_nullable_string(None)
    w.nullable_blob(None)
    w.compact_blob(b"ab")
    w.uuid_(uuid.UUID(int=5))
    r = Reader(w.getvalue())
    assert r.string() == "héllo"
    assert r.nullable_string() is None
    assert r.compact_string() == "x"
    assert r.compact_nullable_string() is None
    assert r.nullable_blob() is None
    assert r.compact_blob() == b"ab"
    assert r.uuid_() == uuid.UUID(int=5)
    assert r.remaining() == 0


def test_null_where_not_nullable_raises() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff").string()
    with pytest.raises(ProtocolError):
        Reader(b"\x00").compact_string()
    with pytest.raises(EncodeError):
        Writer().string(None)


@pytest.mark.parametrize(
    "read",
    [
        lambda r: r.string(),
        lambda r: r.blob(),
        lambda r: r.view(),
        lambda r: r.compact_string(),
        lambda r: r.compact_blob(),
        lambda r: r.array(lambda r, v: r.int8(), 0),
        lambda r: r.compact_array(lambda r, v: r.int8(), 0),
    ],
)
def test_lying_lengths_raise_before_allocating(read) -> None:  # type: ignore[no-untyped-def]
    # The largest length each form can claim, followed by only three bytes.
    for prefix in (b"\x7f\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f"):
        with pytest.raises(ProtocolError):
            read(Reader(prefix + b"abc"))


def test_invalid_utf8_is_a_protocol_error_at_message_level() -> None:
    from protocol.messages.metadata import MetadataRequest

    bad = struct.pack(">i", 1) + b"\x00\x02\xff\xfe"
    with pytest.raises(ProtocolError):
        MetadataRequest.decode(bad, 0)


def test_records_are_kept_as_chunks_not_copied() -> None:
    payload = memoryview(b"r" * 1000)
    w = Writer()
    w.int32(7)
    w.records(payload, compact=True, nullable=True)
    w.int16(1)
    chunks = w.chunks()
    assert any(c is payload for c in chunks)
    assert len(w) == 4 + 2 + 1000 + 2
