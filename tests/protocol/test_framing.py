"""FrameBuffer: frames split anywhere come out whole; sizes are checked before allocating."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import FrameTooLargeError, ProtocolError
from protocol.framing import (
    DEFAULT_CHUNK_SIZE,
    INITIAL_CHUNK_SIZE,
    NEED_DATA,
    FrameBuffer,
    frame,
)


def drain(fb: FrameBuffer) -> list[bytes]:
    out = []
    while (f := fb.next_frame()) is not NEED_DATA:
        assert isinstance(f, memoryview)
        out.append(bytes(f))
    return out


def test_split_at_every_byte() -> None:
    payloads = [b"abc", b"", b"x" * 300, b"\x00\x01"]
    data = b"".join(frame(p) for p in payloads)
    for cut in range(len(data) + 1):
        fb = FrameBuffer()
        fb.receive_data(data[:cut])
        got = drain(fb)
        fb.receive_data(data[cut:])
        got += drain(fb)
        assert got == payloads
        assert fb.buffered() == 0


@given(
    st.lists(st.binary(max_size=200), max_size=8),
    st.lists(st.integers(1, 50), min_size=1, max_size=20),
)
def test_any_chunking(payloads: list[bytes], sizes: list[int]) -> None:
    data = b"".join(frame(p) for p in payloads)
    fb = FrameBuffer()
    got: list[bytes] = []
    pos, i = 0, 0
    while pos < len(data):
        step = sizes[i % len(sizes)]
        fb.receive_data(data[pos : pos + step])
        got += drain(fb)
        pos += step
        i += 1
    assert got == payloads


def test_oversize_frame_is_refused_from_its_prefix_alone() -> None:
    fb = FrameBuffer(max_frame_size=1024)
    fb.receive_data(b"\x00\x00\x04\x01")  # 1025, and not one byte of body
    with pytest.raises(FrameTooLargeError):
        fb.next_frame()


def test_negative_size_is_a_protocol_error() -> None:
    fb = FrameBuffer()
    fb.receive_data(b"\xff\xff\xff\xfe")
    with pytest.raises(ProtocolError):
        fb.next_frame()


def test_partial_prefix_needs_data() -> None:
    fb = FrameBuffer()
    fb.receive_data(b"\x00\x00")
    assert fb.next_frame() is NEED_DATA
    assert fb.pending_size() is None


def test_frames_are_writable_views() -> None:
    fb = FrameBuffer()
    fb.receive_data(frame(b"ab") + frame(b"cd"))
    first = fb.next_frame()
    assert isinstance(first, memoryview) and not first.readonly
    first[0] = ord("x")
    second = fb.next_frame()
    assert isinstance(second, memoryview) and not second.readonly
    assert bytes(second) == b"cd"


def _read_into(fb: FrameBuffer, data: bytes, step: int) -> list[bytes]:
    """Feed `data` the way a socket loop does: readv into writable(), advance, drain."""
    got: list[memoryview] = []
    pos = 0
    while pos < len(data):
        room = fb.writable()
        assert room.nbytes > 0 and not room.readonly
        n = min(step, room.nbytes, len(data) - pos)
        room[:n] = data[pos : pos + n]
        fb.advance(n)
        pos += n
        while (f := fb.next_frame()) is not NEED_DATA:
            assert isinstance(f, memoryview)
            got.append(f)
    # Frames stay valid (never overwritten) after everything that came later.
    return [bytes(f) for f in got]


@given(
    st.lists(st.binary(max_size=300), max_size=10),
    st.integers(1, 700),
    st.sampled_from([16, 64, 1024]),
)
def test_reading_into_the_buffer(payloads: list[bytes], step: int, chunk: int) -> None:
    data = b"".join(frame(p) for p in payloads)
    fb = FrameBuffer(chunk_size=chunk)
    assert _read_into(fb, data, step) == payloads
    assert fb.buffered() == 0


def test_a_large_frame_grows_with_what_arrived() -> None:
    fb = FrameBuffer(max_frame_size=10_000_000, chunk_size=1024)
    fb.receive_data(b"\x00\x98\x96\x80")  # claims 10,000,000 bytes
    assert fb.writable().nbytes < 2048  # nothing near the claimed size is set aside
    payload = bytes(range(256)) * 40
    assert _read_into(fb, payload, 999) == []
    assert fb.buffered() == 4 + len(payload)


def test_a_buffer_starts_small_and_grows_with_need() -> None:
    fb = FrameBuffer()
    assert _read_into(fb, frame(b"api-versions"), 4096) == [b"api-versions"]
    assert fb.capacity() == INITIAL_CHUNK_SIZE  # one small request: one small buffer
    # Reads that fill the buffer (pipelined requests) double it, up to the chunk size.
    many = frame(b"y" * 100) * 10_000
    assert len(_read_into(fb, many, len(many))) == 10_000
    assert fb.capacity() == DEFAULT_CHUNK_SIZE
    fb.release()
    assert fb.writable().nbytes == INITIAL_CHUNK_SIZE  # rested: small again


def test_a_big_frame_makes_the_next_buffer_big_enough_at_once() -> None:
    fb = FrameBuffer()
    big = b"z" * 1_000_000
    assert _read_into(fb, frame(big), 65536) == [big]
    # The next frame of that size is read into one buffer, with no growing (copying) on the way.
    assert _read_into(fb, frame(big)[:10], 10) == []
    assert fb.writable().nbytes >= len(big) - 6


def test_advance_past_the_space_is_refused() -> None:
    fb = FrameBuffer()
    room = fb.writable()
    with pytest.raises(ValueError):
        fb.advance(room.nbytes + 1)


def test_release_drops_the_buffer_but_not_the_frames() -> None:
    fb = FrameBuffer()
    fb.receive_data(frame(b"abc"))
    held = fb.next_frame()
    assert fb.capacity() > 0
    fb.release()
    assert fb.capacity() == 0
    assert isinstance(held, memoryview) and bytes(held) == b"abc"
    fb.receive_data(frame(b"de")[:3])
    fb.release()  # something is pending: kept
    assert fb.capacity() > 0
    fb.receive_data(frame(b"de")[3:])
    assert bytes(fb.next_frame()) == b"de"  # type: ignore[arg-type]
