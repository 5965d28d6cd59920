"""Writing responses to a socket without copying record bytes.

A response arrives as a list of chunks from `protocol.api.encode_response_chunks`: buffers the
codec built, memoryviews of record data, and file slices from `storage` (anything with an open
`fd`, a `position` and a `length`), possibly grouped in containers with `.slices`. Buffers go
out with `writev` (scatter/gather, no join); file slices go out with `os.sendfile`, straight
from the page cache to the socket. Several responses can go in one call (see
:func:`send_frames`), so a connection answering pipelined requests makes one system call for
all of them. This module owns only that; it never decodes anything.

`PlainTransport` is a PLAINTEXT connection's byte stream with these functions; TLS has its own
transport with the same interface (`wirebroker.tls.TlsTransport`), so the connection loop does
not know which it has.

The socket is written through its descriptor, which is non-blocking: a write that would block
waits with `trio.lowlevel.wait_writable`. These functions do not checkpoint when the kernel took
everything at once; the connection loop checkpoints once per round of requests.

A write holding file slices is corked (`TCP_CORK`) on a TCP socket: the bytes before a slice
(the response's size and header), the slice and the bytes after it (the rest of the response,
the responses behind it) would otherwise each leave as a packet of its own under
`TCP_NODELAY`, and on loopback every packet costs the broker the receiver's side of TCP and a
wake-up of the client. The cork comes off at the end of the write, and before any wait for the
socket to drain: held bytes never wait for a timer (corked, the kernel holds a partial segment
up to 200 ms, and a send buffer smaller than one loopback segment would hold all of it).
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Sequence
from typing import Any, Protocol

import trio

#: The principal of a client that did not authenticate (Kafka's KafkaPrincipal.ANONYMOUS).
ANONYMOUS = "User:ANONYMOUS"
# Linux's IOV_MAX.
_MAX_IOV = 1024
_SIZE = struct.Struct(">i")
_BUFFERS = (bytes, bytearray, memoryview)


class FileChunk(Protocol):
    """A slice of an open file, as storage hands out for fetch responses."""

    fd: int
    position: int
    length: int


class Socket(Protocol):
    """What a transport needs of its socket (a trio or a standard library socket)."""

    @property
    def family(self) -> int: ...
    def fileno(self) -> int: ...
    def setsockopt(self, level: int, option: int, value: int, /) -> None: ...


class Transport(Protocol):
    """A connection's byte stream, whatever carries it (plain TCP or TLS)."""

    fd: int
    principal: str  # who the peer is (Kafka's KafkaPrincipal, as text), for the authorizer

    def receive_into(self, buffer: memoryview) -> int: ...
    async def wait_readable(self) -> None: ...
    async def send_frames(self, responses: Sequence[Sequence[Any]]) -> None: ...


class PlainTransport:
    """A connection's byte stream straight on its socket: `readv` in, `writev`/`sendfile` out."""

    __slots__ = ("fd", "sock", "tcp")
    principal = ANONYMOUS

    def __init__(self, sock: Socket) -> None:
        self.fd = sock.fileno()
        self.sock = sock
        #: Corked around file slices (TCP only); asked once, not per write (a Python property).
        self.tcp = sock.family in _TCP

    def receive_into(self, buffer: memoryview) -> int:
        """Read into `buffer`; 0 when the peer closed, BlockingIOError when nothing is there."""
        return os.readv(self.fd, (buffer,))

    async def wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self.fd)

    async def send_frames(self, responses: Sequence[Sequence[Any]]) -> None:
        await send_frames(self.fd, responses, _Cork(self.sock) if self.tcp else None)


def flatten(chunks: Sequence[Any]) -> list[Any]:
    """Expand containers of file slices (anything with `.slices`) into the slices."""
    out: list[Any] = []
    for chunk in chunks:
        if type(chunk) in _BUFFERS:
            out.append(chunk)
            continue
        slices = getattr(chunk, "slices", None)
        if slices is not None:
            out.extend(slices)
        else:
            out.append(chunk)
    return out


def release(chunks: Sequence[Any]) -> None:
    """Unpin whatever file slices a response held."""
    for chunk in chunks:
        if type(chunk) in _BUFFERS:
            continue
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


class _Cork:
    """`TCP_CORK` of one write: on before the bytes ahead of a file slice, off at the end of
    the write or before it waits for the socket (see the module's docstring)."""

    __slots__ = ("sock", "on")

    def __init__(self, sock: Socket) -> None:
        self.sock = sock
        self.on = False

    def hold(self) -> None:
        if not self.on:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            self.on = True

    def release(self) -> None:
        if self.on:
            self.on = False
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)


_TCP = (socket.AF_INET, socket.AF_INET6)


async def send_frames(
    fd: int, responses: Sequence[Sequence[Any]], cork: _Cork | None = None
) -> None:
    """Send several responses, each its size prefix and its chunks, in order (corked around
    file slices with `cork`, the TCP socket's)."""
    pending: list[Any] = []
    try:
        for chunks in responses:
            chunks = flatten(chunks)
            if len(chunks) == 1 and type(chunks[0]) in _BUFFERS:  # the usual small response
                only = chunks[0]
                pending.append(_SIZE.pack(only.nbytes if type(only) is memoryview else len(only)))
                pending.append(only)
                continue
            pending.append(_SIZE.pack(sum(chunk_size(c) for c in chunks)))
            for chunk in chunks:
                if type(chunk) not in _BUFFERS and _is_file(chunk):
                    if cork is not None:
                        cork.hold()
                    await _write_buffers(fd, pending, cork)
                    pending = []
                    await _sendfile(fd, chunk, cork)
                elif chunk_size(chunk):
                    pending.append(chunk)
        await _write_buffers(fd, pending, cork)
    finally:
        if cork is not None:
            cork.release()


async def _write_buffers(fd: int, buffers: list[Any], cork: _Cork | None = None) -> None:
    if not buffers:
        return
    while True:
        try:
            sent = os.writev(fd, buffers[:_MAX_IOV])
        except BlockingIOError:
            sent = 0
        # Drop what went out; keep the rest (cutting a partly sent buffer) for the next call.
        i = 0
        while i < len(buffers):
            first = buffers[i]
            n = first.nbytes if type(first) is memoryview else len(first)
            if sent < n:
                break
            sent -= n
            i += 1
        if i == len(buffers):
            return
        del buffers[:i]
        if sent:
            buffers[0] = memoryview(buffers[0]).cast("B")[sent:]
        if cork is not None:
            cork.release()
        await trio.lowlevel.wait_writable(fd)


async def _sendfile(fd: int, chunk: FileChunk, cork: _Cork | None = None) -> None:
    offset, remaining = chunk.position, chunk.length
    while remaining > 0:
        try:
            sent = os.sendfile(fd, chunk.fd, offset, remaining)
        except BlockingIOError:
            if cork is not None:
                cork.release()
            await trio.lowlevel.wait_writable(fd)
            continue
        if sent == 0:
            raise OSError(f"file slice ended {remaining} bytes early at position {offset}")
        offset += sent
        remaining -= sent
