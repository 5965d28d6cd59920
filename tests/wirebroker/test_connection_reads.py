"""The connection's reads: a read shorter than its buffer took all the socket held, so the
connection waits before reading again (no read that finds nothing), and misses no byte that
comes later: the rest of a split request, the next request, the peer's close."""

from __future__ import annotations

import os
import socket

import pytest
import trio
import trio.testing

from protocol.messages.api_versions import ApiVersionsRequest
from tests.wirebroker.helpers import host_port, receive_frame, request_frame
from wirebroker.embed import open_broker
from wirebroker.transport import PlainTransport

API_VERSIONS = request_frame(ApiVersionsRequest(), 0, 1)


def test_a_split_request_and_the_next_are_answered_without_empty_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int | None] = []  # bytes each read of the broker took; None: nothing there

    def receive_into(self: PlainTransport, buffer: memoryview) -> int:
        try:
            n = os.readv(self.fd, (buffer,))
        except BlockingIOError:
            reads.append(None)
            raise
        reads.append(n)
        return n

    monkeypatch.setattr(PlainTransport, "receive_into", receive_into)

    async def main() -> None:
        async with open_broker() as bootstrap:
            client = await trio.open_tcp_stream(*host_port(bootstrap))
            async with client:
                await client.send_all(API_VERSIONS[:7])
                await trio.testing.wait_all_tasks_blocked()  # read short, waiting
                await client.send_all(API_VERSIONS[7:])
                assert await receive_frame(client)
                for _ in range(3):
                    await client.send_all(API_VERSIONS)
                    assert await receive_frame(client)
        took = [n for n in reads if n is not None]
        assert took == [7, len(API_VERSIONS) - 7] + [len(API_VERSIONS)] * 3 + [0]
        # Only a new connection's first read may find nothing (it can come before any byte).
        assert None not in reads[1:]

    trio.run(main)


def test_a_close_after_a_request_is_seen() -> None:
    """The peer sends a request and shuts its side: it gets the answer, then the close."""

    async def main() -> None:
        async with open_broker() as bootstrap:
            client = await trio.open_tcp_stream(*host_port(bootstrap))
            async with client:
                await client.send_all(API_VERSIONS)
                client.socket.shutdown(socket.SHUT_WR)
                assert await receive_frame(client)
                with trio.fail_after(10):
                    assert await client.receive_some() == b""

    trio.run(main)
