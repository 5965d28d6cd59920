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


class FrameBuffer:
    """Collects received bytes and cuts them into frames of at most `max_frame_size` bytes."""

    __slots__ = ("_buf", "_start", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buf = bytearray()
        self._start = 0
        self.max_frame_size = max_frame_size

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._start and self._start == len(self._buf):
            self._buf.clear()
            self._start = 0
        self._buf += data

    def pending_size(self) -> int | None:
        """The size of the frame being received, once its prefix arrived (checked first)."""
        if len(self._buf) - self._start < 4:
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

        A frame that ends exactly where the received bytes end (the usual case for large
        frames) is handed over without a copy; one followed by more bytes is copied out once.
        Either way the frame is writable, so a broker can assign offsets in place.
        """
        size = self.pending_size()
        if size is None or len(self._buf) - self._start - 4 < size:
            return NEED_DATA
        begin = self._start + 4
        end = begin + size
        if end == len(self._buf):
            frame = memoryview(self._buf)[begin:end]
            self._buf = bytearray()
            self._start = 0
            return frame
        with memoryview(self._buf) as view:
            copied = memoryview(bytearray(view[begin:end]))
        self._start = end
        if self._start > 65536 and self._start * 2 > len(self._buf):
            del self._buf[: self._start]
            self._start = 0
        return copied

    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._start


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix a payload with its 4-byte size."""
    return _SIZE.pack(len(payload)) + bytes(payload)
