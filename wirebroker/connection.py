"""One client connection: frames in, responses out, strictly in order.

This module owns the life of a connection: reading bytes straight into a `FrameBuffer` (which
refuses a frame over `socket.request.max.bytes` before reading its body), decoding each
request, handing it to the dispatcher, and writing the responses in request order, as Kafka
guarantees. The requests that arrived together are handled one after the other and their
responses written together in one system call; before a handler that may wait (see
`_answers_at_once`) the responses ahead of it are written. acks=0 Produce gets no response.
A malformed frame, or an API key or version we do not implement, is logged and closes this
connection only (ApiVersions of an unknown version gets the KIP-511 answer instead). A
connection idle for `connections.max.idle.ms` is closed.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import trio

from protocol.api import (
    API_VERSIONS_KEY,
    api_info,
    decode_request,
    encode_response_chunks,
    peek_request_header,
    unsupported_api_versions_response,
)
from protocol.errors import ProtocolError
from protocol.framing import NEED_DATA, FrameBuffer
from protocol.messages import APIS
from protocol.messages.headers import ResponseHeader
from protocol.schema import Message
from wirebroker.dispatch import REGISTRY, CloseConnection, RequestContext, dispatch, supported
from wirebroker.transport import release, send_frames

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
# Handlers that never wait: ListOffsets, Metadata, OffsetCommit, OffsetFetch, FindCoordinator,
# ApiVersions.
_IMMEDIATE_KEYS = frozenset({2, 3, 8, 9, 10, 18})
# Seconds without a byte after which a connection drops its (256 KiB) receive buffer.
BUFFER_IDLE_S = 1.0


async def serve_connection(stream: trio.SocketStream, broker: Broker, listener_name: str) -> None:
    """Serve one accepted connection until the peer closes it, it idles out, or misbehaves."""
    sock = stream.socket
    fd = sock.fileno()
    try:
        peer = sock.getpeername()
        client_host = str(peer[0])
    except OSError:
        client_host = "?"
    frames = FrameBuffer(broker.config.socket_request_max_bytes)
    idle_s = broker.config.connections_max_idle_ms / 1000
    broker.stats.connections += 1
    out: list[list[Any]] = []  # encoded responses not yet written, in request order
    handled = False  # a round of requests was handled since this task last let others run
    try:
        while True:
            # Read straight into the frame buffer: no bytes object, no copy.
            try:
                n = os.readv(fd, (frames.writable(),))
            except BlockingIOError:
                handled = False  # waiting lets the others run
                deadline = trio.current_time() + idle_s
                if frames.capacity() and not frames.buffered():
                    # A connection quiet for a moment gives its receive buffer back, so idle
                    # connections cost no buffer memory; a busy one keeps reusing it.
                    with trio.move_on_after(min(BUFFER_IDLE_S, idle_s)) as quiet:
                        await trio.lowlevel.wait_readable(fd)
                    if not quiet.cancelled_caught:
                        continue
                    frames.release()
                with trio.move_on_at(deadline) as idle:
                    await trio.lowlevel.wait_readable(fd)
                if idle.cancelled_caught:
                    log.info("closing connection from %s: idle for %.0f s", client_host, idle_s)
                    return
                continue
            if not n:
                return
            frames.advance(n)
            if handled:
                # More data at once after a round: let other connections run first. (When the
                # read would block, the wait does that, so the usual round costs no extra pass
                # through trio's scheduler.)
                await trio.lowlevel.checkpoint()
            # Every whole frame that arrived is handled before anything is written, and their
            # responses leave together in one system call (pipelined clients send several).
            try:
                while (frame := frames.next_frame()) is not NEED_DATA:
                    await _handle_frame(fd, broker, frame, client_host, listener_name, out)  # type: ignore[arg-type]
            finally:
                if out:
                    await _flush(fd, out)
            handled = True
    except ProtocolError as e:
        log.warning("closing connection from %s: %s", client_host, e)
    except CloseConnection as e:
        log.warning("closing connection from %s: %s", client_host, e)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    except Exception:
        # A bug must cost this connection only, never the broker.
        log.exception("closing connection from %s after an unexpected error", client_host)
    finally:
        broker.stats.connections -= 1
        for chunks in out:
            release(chunks)
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def _flush(fd: int, out: list[list[Any]]) -> None:
    """Write the pending responses, then unpin what they held."""
    try:
        await send_frames(fd, out)
    finally:
        for chunks in out:
            release(chunks)
        out.clear()


def _answers_at_once(broker: Broker, api_key: int, body: Message) -> bool:
    """Whether the handler answers without waiting (so its response may wait for others').

    A handler that can wait (a Fetch long poll, a group join, an acks=all produce to a
    partition with followers) must not hold back the responses to requests before it. An
    acks=all produce to partitions whose only replica is their leader is answered at once (the
    high watermark moves with the append), so pipelined acks=all requests to such partitions,
    the Java producer's default, are still answered together.
    """
    if api_key == PRODUCE_KEY:
        if body.acks != -1:  # type: ignore[attr-defined]
            return True
        for topic in body.topic_data:  # type: ignore[attr-defined]
            for data in topic.partition_data:
                partition = broker.partition(topic.name, data.index)
                if partition is None:
                    continue  # answered at once with an error
                leader = partition.leader
                if partition.isr != [leader] or any(r != leader for r in partition.replicas):
                    return False
        return True
    return api_key in _IMMEDIATE_KEYS


async def _handle_frame(
    fd: int,
    broker: Broker,
    frame: memoryview,
    client_host: str,
    listener_name: str,
    out: list[list[Any]],
) -> None:
    """Handle one request; its response joins `out` (written before any handler waits)."""
    api_key, api_version, correlation_id = peek_request_header(frame)
    if not supported(api_key, api_version):
        if api_key == API_VERSIONS_KEY:
            reg = REGISTRY[API_VERSIONS_KEY]
            answer = unsupported_api_versions_response(
                correlation_id, (reg.min_version, reg.max_version)
            )
            out.append([answer])
            return
        name = api_info(api_key).name if api_key in APIS else f"API key {api_key}"
        raise CloseConnection(f"{name} v{api_version} is not supported")
    request = decode_request(frame)
    if out and not _answers_at_once(broker, api_key, request.body):
        await _flush(fd, out)
    ctx = RequestContext(broker, request.header, client_host, listener_name)
    broker.stats.requests += 1
    response = await dispatch(ctx, request.body)
    if response is None:  # acks=0 produce
        return
    out.append(
        encode_response_chunks(
            ResponseHeader(correlation_id=correlation_id), response, api_key, api_version
        )
    )
