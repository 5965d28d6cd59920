"""The connection's outbox: answers leave in request order, whenever each becomes ready; and
answers a request woke on other connections leave before its own."""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from protocol.messages.create_topics import CreateTopicsRequest
from protocol.record_batch import SimpleRecord
from tests.wirebroker.helpers import (
    fetch_request,
    host_port,
    produce_request,
    receive_frame,
    request_frame,
)
from wirebroker.connection import _Outbox, _Slot
from wirebroker.embed import open_broker
from wirebroker.transport import PlainTransport


def _frames(data: bytes) -> list[bytes]:
    out = []
    while data:
        (size,) = struct.unpack_from(">i", data)
        out.append(data[4 : 4 + size])
        data = data[4 + size :]
    return out


def _pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    return ours, theirs


def _received(sock: socket.socket) -> list[bytes]:
    try:
        return _frames(sock.recv(65536))
    except BlockingIOError:
        return []


def test_a_late_answer_holds_back_the_ones_behind_it() -> None:
    async def main() -> None:
        ours, theirs = _pair()
        with ours, theirs:
            outbox = _Outbox(PlainTransport(ours))
            outbox.put([b"first"])
            late = outbox.put(None)  # an acks=all produce still waiting for its followers
            outbox.put([b"third"])
            await outbox.flush()
            assert _received(theirs) == [b"first"]
            late.chunks = [b"second"]
            await outbox.flush()
            assert _received(theirs) == [b"second", b"third"]
            assert not outbox.slots

    trio.run(main)


def test_a_flush_during_another_leaves_the_writing_to_it() -> None:
    async def main() -> None:
        ours, theirs = _pair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        with ours, theirs:
            outbox = _Outbox(PlainTransport(ours))
            big = b"x" * 1_000_000  # more than the socket takes at once: the writer must wait
            outbox.put([big])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(outbox.flush)
                await trio.testing.wait_all_tasks_blocked()
                outbox.put([b"small"])
                await outbox.flush()  # returns at once: the first flush is still writing
                received = b""
                while len(received) < 4 + len(big) + 4 + len(b"small"):
                    await trio.lowlevel.wait_readable(theirs)
                    received += theirs.recv(1 << 20)
            assert _frames(received) == [big, b"small"]

    trio.run(main)


class CountingTransport(PlainTransport):
    """A socket's transport that counts its writes."""

    __slots__ = ("writes",)

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.writes = 0

    async def send_frames(self, responses: Sequence[Sequence[Any]]) -> None:
        self.writes += 1
        await super().send_frames(responses)


def test_answers_completed_by_one_event_leave_in_one_write() -> None:
    async def main() -> None:
        ours, theirs = _pair()
        with ours, theirs:
            transport = CountingTransport(ours)
            outbox = _Outbox(transport)
            replicated = trio.Event()  # e.g. the high watermark both produces wait for

            async def answer(slot: _Slot, body: bytes) -> None:
                await replicated.wait()
                slot.chunks = [body]
                await outbox.flush(gather=True)

            async with trio.open_nursery() as nursery:
                for body in (b"first", b"second"):
                    nursery.start_soon(answer, outbox.put(None), body)
                await trio.testing.wait_all_tasks_blocked()
                replicated.set()
            assert transport.writes == 1
            assert _received(theirs) == [b"first", b"second"]

    trio.run(main)


def test_a_produce_is_acknowledged_before_the_parked_fetch_it_woke_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A producer with one request in flight sends its next records only on the
    acknowledgement, so it leaves first; the woken fetch's records right after it."""
    written: list[str] = []  # each write of the broker: "records" (a fetch answer) or "other"
    send_frames = PlainTransport.send_frames

    async def recording(self: PlainTransport, responses: Sequence[Sequence[Any]]) -> None:
        files = any(type(c) not in (bytes, bytearray, memoryview) for r in responses for c in r)
        written.append("records" if files else "other")
        await send_frames(self, responses)

    monkeypatch.setattr(PlainTransport, "send_frames", recording)
    create = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1, replication_factor=1)
        ],
        timeout_ms=10_000,
    )
    parked_fetch = fetch_request("t", max_wait_ms=60_000, min_bytes=1)
    produce = produce_request("t", 0, [SimpleRecord(key=None, value=b"v")], acks=1)

    async def main() -> None:
        async with open_broker() as bootstrap:
            producer = await trio.open_tcp_stream(*host_port(bootstrap))
            consumer = await trio.open_tcp_stream(*host_port(bootstrap))
            async with producer, consumer:
                await producer.send_all(request_frame(create, 7, 1))
                await receive_frame(producer)
                await consumer.send_all(request_frame(parked_fetch, 12, 1))
                await trio.testing.wait_all_tasks_blocked()  # the fetch waits for records
                written.clear()
                await producer.send_all(request_frame(produce, 9, 2))
                await receive_frame(consumer)
                await receive_frame(producer)
        assert written == ["other", "records"]

    trio.run(main)
