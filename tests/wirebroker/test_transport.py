"""Writing responses: a response holding a file slice goes out corked (`TCP_CORK`) on TCP, and
the cork never stays on while the writer waits or after it returns (a corked partial segment
would wait for the kernel's 200 ms timer), and the kernel may take a whole answer at once."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import trio
import trio.testing

from wirebroker.transport import PlainTransport


class Slice:
    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd, self.position, self.length = fd, position, length


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    for s in (client, accepted):
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return accepted, client


def corked(sock: socket.socket) -> bool:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CORK) != 0


def test_a_response_with_a_file_slice_arrives_whole_and_uncorked(tmp_path: Path) -> None:
    data = os.urandom(3_000_000)
    path = tmp_path / "segment.log"
    path.write_bytes(data)

    async def main() -> None:
        ours, theirs = tcp_pair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # the writer must wait
        fd = os.open(path, os.O_RDONLY)
        try:
            transport = PlainTransport(ours)
            header, trailer = b"head", b"tail"
            response = [header, Slice(fd, 0, len(data)), trailer]
            expected = len(header) + len(data) + len(trailer)
            received = bytearray()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(transport.send_frames, [response, [b"next"]])
                await trio.testing.wait_all_tasks_blocked()
                assert not corked(ours)  # waiting for the reader: nothing held back
                while len(received) < 4 + expected + 4 + 4:
                    await trio.lowlevel.wait_readable(theirs)
                    received += theirs.recv(1 << 20)
            assert not corked(ours)
            assert int.from_bytes(received[:4], "big") == expected
            assert received[4 : 4 + expected] == header + data + trailer
            assert received[4 + expected + 4 :] == b"next"
        finally:
            os.close(fd)
            ours.close()
            theirs.close()

    trio.run(main)


def test_small_responses_are_written_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(b"records")

    async def main() -> None:
        ours, theirs = tcp_pair()
        fd = os.open(path, os.O_RDONLY)
        try:
            await PlainTransport(ours).send_frames([[b"h", Slice(fd, 0, 7), b"t"], [b"x"]])
            assert not corked(ours)
            received = b""
            while len(received) < 4 + 9 + 4 + 1:
                await trio.lowlevel.wait_readable(theirs)
                received += theirs.recv(100)
            assert received == b"\0\0\0\x09hrecordst\0\0\0\x01x"
        finally:
            os.close(fd)
            ours.close()
            theirs.close()

    trio.run(main)


def test_the_kernel_may_hold_a_whole_answer_unsent() -> None:
    """trio's SocketStream limits a socket's unsent bytes to 16 KiB (`TCP_NOTSENT_LOWAT`): a
    fetch answer larger than that would stop part-way and wait for the reader to drain. A
    broker connection's transport sets the system's default (no limit) back."""
    ours, theirs = tcp_pair()
    try:
        ours.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, 1 << 14)  # as trio does
        PlainTransport(ours)
        assert ours.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT) == 0
    finally:
        ours.close()
        theirs.close()
