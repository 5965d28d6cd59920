"""Writing responses to a socket without copying record bytes.

A response arrives as a list of chunks from `protocol.api.encode_response_chunks`: buffers the
codec built, memoryviews of record data, and file slices from `storage` (anything with an open
`fd`, a `position` and a `length`), possibly grouped in containers with `.slices`. Buffers go
out with `writev` (scatter/gather, no join); file slices go out with `os.sendfile`, straight
from the page cache to the socket. Several responses can go in one call (see
`PlainTransport.send_frames`), so a connection answering pipelined requests makes one system
call for all of them. This module owns only that; it never decodes anything.

`PlainTransport` is a PLAINTEXT connection's byte stream with these functions; TLS has its own
transport with the same interface (`wirebroker.tls.TlsTransport`), so the connection loop does
not know which it has. Either is read through its descriptor (`fd`): the loop waits for it
with `trio.lowlevel.wait_readable` when `receive_into` finds nothing, or, where
`short_read_drains`, after a read that did not fill its buffer.

A file slice that is not all in the page cache (`storage.page_cache.cached`) is read into it
by a worker thread first: `sendfile` of bytes not in the cache would make the loop wait for
the disk (a consumer reading old records), and every connection with it.

The socket is written through its descriptor, which is non-blocking: a write that would block
waits with `trio.lowlevel.wait_writable`. A write the kernel takes at once does not checkpoint
(nor create a coroutine); the connection loop checkpoints once per round of requests.

A write holding file slices is corked (`TCP_CORK`) on a TCP socket: the bytes before a slice
(the response's size and header), the slice and the bytes after it (the rest of the response,
the responses behind it) would otherwise each leave as a packet of its own under
`TCP_NODELAY`, and on loopback every packet costs the broker the receiver's side of TCP and a
wake-up of the client. The cork comes off at the end of the write, and before any wait for the
socket to drain: held bytes never wait for a timer (corked, the kernel holds a partial segment
up to 200 ms, and a send buffer smaller than one loopback segment would hold all of it).
trio's `SocketStream` limits a socket's unsent bytes to 16 KiB (`TCP_NOTSENT_LOWAT`); a TCP
transport sets the system's default back (no limit, as the JVM's sockets have), so that the
kernel takes a fetch answer whole instead of stopping part-way until the reader drains it.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Sequence
from typing import Any, Protocol

import trio

from storage.page_cache import cached, load

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
    #: Whether a `receive_into` that filled less than its buffer left nothing to read.
    short_read_drains: bool

    def receive_into(self, buffer: memoryview) -> int: ...
    async def send_frames(self, responses: Sequence[Sequence[Any]]) -> None: ...


class PlainTransport:
    """A connection's byte stream straight on its socket: `readv` in, `writev`/`sendfile` out."""

    __slots__ = ("fd", "cork")
    principal = ANONYMOUS
    short_read_drains = True  # `readv` takes what the socket holds, up to the buffer's size

    def __init__(self, sock: Socket) -> None:
        self.fd = sock.fileno()
        #: Corked around file slices (TCP only); whether it is TCP is asked once, not per write
        #: (`family` is a Python property).
        self.cork = _Cork(sock) if sock.family in _TCP else None
        if self.cork is not None:
            # trio's SocketStream limits unsent bytes to 16 KiB (TCP_NOTSENT_LOWAT): a fetch
            # answer larger than that then stops part-way and waits for the reader to drain
            # the socket. The system's default (0: none) lets the send buffer take it whole,
            # as Kafka's sockets do.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, 0)

    def receive_into(self, buffer: memoryview) -> int:
        """Read into `buffer`; 0 when the peer closed, BlockingIOError when nothing is there."""
        return os.readv(self.fd, (buffer,))

    async def send_frames(self, responses: Sequence[Sequence[Any]]) -> None:
        """Send several responses, each its size prefix and its chunks, in order (corked
        around file slices on TCP)."""
        fd, cork = self.fd, self.cork
        pending: list[Any] = []
        size = 0  # of the pending buffers
        try:
            for chunks in responses:
                if len(chunks) == 1 and type(only := chunks[0]) in _BUFFERS:  # the usual response
                    n = only.nbytes if type(only) is memoryview else len(only)
                    pending += (_SIZE.pack(n), only)
                    size += 4 + n
                    continue
                chunks = flatten(chunks)
                sizes = [chunk_size(c) for c in chunks]
                pending.append(_SIZE.pack(sum(sizes)))
                size += 4
                for chunk, n in zip(chunks, sizes, strict=True):
                    if type(chunk) in _BUFFERS or not _is_file(chunk):
                        if n:
                            pending.append(chunk)
                            size += n
                        continue
                    if not cached(chunk.fd, chunk.position, n):
                        await load_slice(chunk, cork)
                    if cork is not None:
                        cork.hold()
                    if pending:
                        if (sent := _writev(fd, pending)) != size:
                            await _write_rest(fd, pending, sent, size, cork)
                        pending, size = [], 0
                    await _sendfile(fd, chunk, cork)
            if pending and (sent := _writev(fd, pending)) != size:
                await _write_rest(fd, pending, sent, size, cork)
        finally:
            if cork is not None and cork.on:
                cork.release()


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


def _writev(fd: int, buffers: list[Any]) -> int:
    """Write what the socket takes of `buffers` now: the bytes sent, 0 if it takes none."""
    try:
        return os.writev(fd, buffers if len(buffers) <= _MAX_IOV else buffers[:_MAX_IOV])
    except BlockingIOError:
        return 0


async def _write_rest(
    fd: int, buffers: list[Any], sent: int, size: int, cork: _Cork | None
) -> None:
    """Write the rest of `buffers` (`size` bytes in all), whose first `sent` bytes went out."""
    while sent != size:
        size -= sent
        # Drop what went out; keep the rest (cutting a partly sent buffer) for the next call.
        i = 0
        while True:
            first = buffers[i]
            n = first.nbytes if type(first) is memoryview else len(first)
            if sent < n:
                break
            sent -= n
            i += 1
        del buffers[:i]
        if sent:
            buffers[0] = memoryview(buffers[0]).cast("B")[sent:]
        if cork is not None:
            cork.release()
        await trio.lowlevel.wait_writable(fd)
        sent = _writev(fd, buffers)


async def load_slice(chunk: FileChunk, cork: _Cork | None = None) -> None:
    """Have a worker thread read a file slice that is not in the page cache into it, so that
    the loop's `sendfile` (or `pread` on TLS) does not wait for the disk. What the write
    corked so far leaves first."""
    if cork is not None:
        cork.release()
    await trio.to_thread.run_sync(load, chunk.fd, chunk.position, chunk.length)


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
