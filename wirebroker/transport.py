"""Writing a response to a socket without copying record bytes.

A response arrives as a list of chunks from `protocol.api.encode_response_chunks`: buffers the
codec built, memoryviews of record data, and file slices from `storage` (anything with an open
`fd`, a `position` and a `length`), possibly grouped in containers with `.slices`. Buffers go out with `sendmsg` (scatter/gather, no join);
file slices go out with `os.sendfile`, straight from the page cache to the socket. This module
owns only that; it never decodes anything.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Any, Protocol

import trio

_MAX_IOV = 512


class FileChunk(Protocol):
    """A slice of an open file, as storage hands out for fetch responses."""

    fd: int
    position: int
    length: int


def flatten(chunks: Sequence[Any]) -> list[Any]:
    """Expand containers of file slices (anything with `.slices`) into the slices."""
    out: list[Any] = []
    for chunk in chunks:
        slices = getattr(chunk, "slices", None)
        if slices is not None:
            out.extend(slices)
        else:
            out.append(chunk)
    return out


def release(chunks: Sequence[Any]) -> None:
    """Unpin whatever file slices a response held."""
    for chunk in chunks:
        done = getattr(chunk, "release", None)
        if done is not None and not isinstance(chunk, memoryview):
            done()


def _is_file(chunk: Any) -> bool:
    return hasattr(chunk, "fd") and hasattr(chunk, "length")


def chunk_size(chunk: Any) -> int:
    if isinstance(chunk, memoryview):
        return chunk.nbytes
    if _is_file(chunk):
        return int(chunk.length)
    return len(chunk)


async def send_frame(sock: trio.socket.SocketType, chunks: Sequence[Any]) -> None:
    """Send the 4-byte size prefix and the chunks, in order."""
    chunks = flatten(chunks)
    size = sum(chunk_size(c) for c in chunks)
    pending: list[Any] = [struct.pack(">i", size)]
    for chunk in chunks:
        if _is_file(chunk):
            await _send_buffers(sock, pending)
            pending = []
            await _sendfile(sock, chunk)
        elif chunk_size(chunk):
            pending.append(chunk)
    await _send_buffers(sock, pending)


async def _send_buffers(sock: trio.socket.SocketType, buffers: list[Any]) -> None:
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        sent = await sock.sendmsg(views[:_MAX_IOV])
        while sent and views:
            first = views[0]
            if sent >= first.nbytes:
                sent -= first.nbytes
                views.pop(0)
            else:
                views[0] = first[sent:]
                sent = 0


async def _sendfile(sock: trio.socket.SocketType, chunk: FileChunk) -> None:
    out_fd = sock.fileno()
    offset, remaining = chunk.position, chunk.length
    while remaining > 0:
        try:
            sent = os.sendfile(out_fd, chunk.fd, offset, remaining)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)
            continue
        if sent == 0:
            raise OSError(f"file slice ended {remaining} bytes early at position {offset}")
        offset += sent
        remaining -= sent
    await trio.lowlevel.checkpoint()
