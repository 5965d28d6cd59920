"""One client connection: frames in, responses out, strictly in order.

This module owns the life of a connection: reading bytes into a `FrameBuffer` (which refuses a
frame over `socket.request.max.bytes` before reading its body), decoding each request, handing
it to the dispatcher, and writing the response before the next request is handled — so
responses always leave in request order, as Kafka guarantees. acks=0 Produce gets no response.
A malformed frame, or an API key or version we do not implement, is logged and closes this
connection only (ApiVersions of an unknown version gets the KIP-511 answer instead). A
connection idle for `connections.max.idle.ms` is closed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

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
from wirebroker.dispatch import REGISTRY, CloseConnection, RequestContext, dispatch, supported
from wirebroker.transport import release, send_frame

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

RECEIVE_SIZE = 256 * 1024


async def serve_connection(stream: trio.SocketStream, broker: Broker, listener_name: str) -> None:
    """Serve one accepted connection until the peer closes it, it idles out, or misbehaves."""
    sock = stream.socket
    try:
        peer = sock.getpeername()
        client_host = str(peer[0])
    except OSError:
        client_host = "?"
    frames = FrameBuffer(broker.config.socket_request_max_bytes)
    idle_s = broker.config.connections_max_idle_ms / 1000
    broker.stats.connections += 1
    try:
        while True:
            with trio.move_on_after(idle_s) as idle:
                data = await stream.receive_some(RECEIVE_SIZE)
            if idle.cancelled_caught:
                log.info("closing connection from %s: idle for %.0f s", client_host, idle_s)
                return
            if not data:
                return
            frames.receive_data(data)
            while True:
                frame = frames.next_frame()
                if frame is NEED_DATA:
                    break
                await _handle_frame(sock, broker, frame, client_host, listener_name)  # type: ignore[arg-type]
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
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def _handle_frame(
    sock: trio.socket.SocketType,
    broker: Broker,
    frame: memoryview,
    client_host: str,
    listener_name: str,
) -> None:
    api_key, api_version, correlation_id = peek_request_header(frame)
    if not supported(api_key, api_version):
        if api_key == API_VERSIONS_KEY:
            reg = REGISTRY[API_VERSIONS_KEY]
            answer = unsupported_api_versions_response(
                correlation_id, (reg.min_version, reg.max_version)
            )
            await send_frame(sock, [answer])
            return
        name = api_info(api_key).name if api_key in APIS else f"API key {api_key}"
        raise CloseConnection(f"{name} v{api_version} is not supported")
    request = decode_request(frame)
    ctx = RequestContext(broker, request.header, client_host, listener_name)
    broker.stats.requests += 1
    response = await dispatch(ctx, request.body)
    if response is None:  # acks=0 produce
        return
    chunks = encode_response_chunks(
        ResponseHeader(correlation_id=correlation_id), response, api_key, api_version
    )
    try:
        await send_frame(sock, chunks)
    finally:
        release(chunks)
