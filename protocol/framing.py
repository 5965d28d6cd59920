"""Kafka's length-prefixed framing, sans-IO: bytes in, whole frames out.

`FrameBuffer.receive_data(data)` accepts bytes split anywhere; `next_frame()` returns the next
whole frame (the bytes after the 4-byte big-endian size) or :data:`NEED_DATA`. The size is
checked against the maximum before any buffer for the body is set aside, so a lying or hostile
size raises :class:`FrameTooLargeError` and allocates nothing. This module owns framing only.
"""

from __future__ import annotations

import struct
from typing import Final

from protocol.errors import FrameTooLargeError, ProtocolError

_SIZE = struct.Struct(">i")


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by :meth:`FrameBuffer.next_frame` when no whole frame has arrived yet.
NEED_DATA: Final = _NeedData()

#: Kafka's default `socket.request.max.bytes`.
DEFAULT_MAX_FRAME_SIZE: Final = 104_857_600

#: A new (or rested) connection's receive buffer: room for the usual request.
INITIAL_CHUNK_SIZE: Final = 4 * 1024

#: Receive buffers double up to this while reads keep filling them (pipelined requests); a frame
#: that needs more grows its buffer with what arrived.
DEFAULT_CHUNK_SIZE: Final = 256 * 1024

#: New buffers are made as big as the largest frame received, up to this (a default
#: `max.request.size` produce fits).
LARGEST_CHUNK_SIZE: Final = 2 * 1024 * 1024


class FrameBuffer:
    """Collects received bytes and cuts them into frames of at most `max_frame_size` bytes.

    Bytes go in either by :meth:`receive_data` (a copy) or, with no copy, by reading straight
    into :meth:`writable` and calling :meth:`advance` (``recv_into``/``readv``). Frames come
    out as writable memoryviews of the buffer they arrived in, never copied. A buffer is never
    written again where a frame was handed out of it: when the free space runs short, a new
    buffer is started and only the bytes of the unfinished frame move to it. So a frame stays
    valid for as long as anyone holds it, and the cost is one allocation per buffer.

    Buffers start at `INITIAL_CHUNK_SIZE` and grow with need: doubling (up to `chunk_size`)
    while each read fills the free space, and to the size of the largest whole frame received
    (up to `LARGEST_CHUNK_SIZE`), so a producer of big batches gets a buffer its batch fits.
    :meth:`release` (an idle connection) drops the buffer and starts small again.
    """

    __slots__ = ("_buf", "_start", "_end", "_chunk", "max_frame_size", "chunk_size")

    def __init__(
        self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> None:
        self._buf = bytearray()
        self._start = 0  # first byte not yet returned as a frame
        self._end = 0  # end of the received bytes
        self.max_frame_size = max_frame_size
        self.chunk_size = chunk_size
        self._chunk = min(INITIAL_CHUNK_SIZE, chunk_size)  # the size of the next new buffer

    def writable(self) -> memoryview:
        """Free space after the received bytes, to read into; then call :meth:`advance`.

        It is at least an eighth of the current buffer size, or the rest of a frame whose size
        is known.
        """
        buf, start, end = self._buf, self._start, self._end
        have = end - start
        size = self.pending_size()
        if size is not None:
            whole = size + 4
            if whole > len(buf) - start:
                # Grow with the bytes that arrived, never straight to a size the peer claims.
                self._move(max(self._chunk, min(whole, 2 * have)))
            elif end == len(buf):
                # The frame is complete in this buffer: nothing to read into before it is cut.
                self._move(self._chunk)
        elif len(buf) - end < self._chunk >> 3:
            self._move(self._chunk)
        return memoryview(self._buf)[self._end :]

    def advance(self, n: int) -> None:
        """Account for `n` bytes written into the view :meth:`writable` returned."""
        free = len(self._buf) - self._end
        if n < 0 or n > free:
            raise ValueError(f"advance({n}) past the writable space")
        self._end += n
        if n == free and self._chunk < self.chunk_size:
            self._chunk = min(2 * self._chunk, self.chunk_size)  # more may be waiting

    def _move(self, capacity: int) -> None:
        """Start a new buffer of `capacity` bytes holding the unfinished frame's bytes."""
        have = self._end - self._start
        new = bytearray(max(capacity, have))
        if have:
            new[:have] = memoryview(self._buf)[self._start : self._end]
        self._buf, self._start, self._end = new, 0, have

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` in (for callers that already hold the bytes)."""
        with memoryview(data) as src, src.cast("B") as flat:
            pos, total = 0, flat.nbytes
            while pos < total:
                room = self.writable()
                n = min(room.nbytes, total - pos)
                room[:n] = flat[pos : pos + n]
                room.release()
                self.advance(n)
                pos += n

    def pending_size(self) -> int | None:
        """The size of the frame being received, once its prefix arrived (checked first)."""
        if self._end - self._start < 4:
            return None
        size: int = _SIZE.unpack_from(self._buf, self._start)[0]
        if size < 0:
            raise ProtocolError(f"negative frame size {size}")
        if size > self.max_frame_size:
            raise FrameTooLargeError(
                f"frame of {size} bytes exceeds the maximum of {self.max_frame_size}"
            )
        return size

    def next_frame(self) -> memoryview | _NeedData:
        """The next whole frame (without its size prefix), or NEED_DATA.

        The frame is a writable view of the receive buffer (no copy), so a broker can assign
        offsets in place; it stays valid after later calls.
        """
        size = self.pending_size()
        if size is None or self._end - self._start - 4 < size:
            return NEED_DATA
        begin = self._start + 4
        end = begin + size
        self._start = end
        if size + 4 > self._chunk:
            # The peer sends frames this big: take the next one at once (up to a bound, so one
            # huge request does not make every later buffer huge).
            self._chunk = max(self._chunk, min(size + 4, LARGEST_CHUNK_SIZE))
        return memoryview(self._buf)[begin:end]

    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return self._end - self._start

    def capacity(self) -> int:
        """Bytes of receive buffer this FrameBuffer holds (in use or free)."""
        return len(self._buf)

    def release(self) -> None:
        """Drop the receive buffer when nothing is pending (an idle connection holds none).

        The next buffer starts small again. Frames already handed out stay valid: they keep
        their own buffer alive.
        """
        if self._start == self._end:
            self._buf = bytearray()
            self._start = self._end = 0
            self._chunk = min(INITIAL_CHUNK_SIZE, self.chunk_size)


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix a payload with its 4-byte size."""
    return _SIZE.pack(len(payload)) + bytes(payload)
