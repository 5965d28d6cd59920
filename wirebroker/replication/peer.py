"""A client connection to another broker: one request at a time, our codec, reconnect with backoff.

`PeerClient.request(body, version)` connects if needed (to the address `resolve()` gives at that
moment, so a broker that moved is found again), sends the request, reads its response and
returns the decoded body. Any failure — no address known yet, refused connection, a timeout
(`replica.socket.timeout.ms`), a closed or garbled stream — closes the connection and raises
`PeerError`; the next request reconnects, but not before `backoff_s` after a failed attempt.
It must not interpret the responses: callers do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from protocol.api import decode_response, encode_request
from protocol.errors import ProtocolError
from protocol.framing import NEED_DATA, FrameBuffer, frame
from protocol.messages.headers import RequestHeader
from protocol.schema import Message

log = logging.getLogger(__name__)

RECEIVE_SIZE = 256 * 1024
MAX_RESPONSE_BYTES = 1 << 30


class PeerError(Exception):
    """A request to another broker failed; the connection (if any) is closed."""


class PeerClient:
    def __init__(
        self,
        name: str,
        resolve: Callable[[], tuple[str, int] | None],
        *,
        client_id: str,
        timeout_s: float = 30.0,
        backoff_s: float = 1.0,
    ) -> None:
        self.name = name
        self.resolve = resolve
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self._stream: trio.SocketStream | None = None
        self._frames = FrameBuffer(MAX_RESPONSE_BYTES)
        self._lock = trio.Lock()
        self._correlation_id = 0
        self._next_attempt = 0.0
        self.address: tuple[str, int] | None = None

    async def request(self, body: Message, version: int) -> Any:
        """Send `body` at `version` and return the response body."""
        async with self._lock:
            stream = await self._connect()
            self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
            correlation_id = self._correlation_id
            header = RequestHeader(
                request_api_key=body.API_KEY,
                request_api_version=version,
                correlation_id=correlation_id,
                client_id=self.client_id,
            )
            try:
                with trio.fail_after(self.timeout_s):
                    await stream.send_all(frame(encode_request(header, body)))
                    data = await self._receive_frame(stream)
                response = decode_response(data, body.API_KEY, version)
            except (
                trio.TooSlowError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                OSError,
                ProtocolError,
            ) as e:
                await self._drop(f"{type(body).__name__} failed: {e!r}")
                raise PeerError(f"{self.name}: {type(body).__name__} failed: {e!r}") from e
            except trio.Cancelled:
                # The answer would arrive for nobody: the stream is out of step, start afresh.
                await self._drop("cancelled mid-request")
                raise
            if response.header.correlation_id != correlation_id:
                await self._drop("correlation id mismatch")
                raise PeerError(f"{self.name}: response to another request")
            return response.body

    async def _connect(self) -> trio.SocketStream:
        if self._stream is not None:
            return self._stream
        await trio.sleep_until(self._next_attempt)
        address = self.resolve()
        if address is None:
            self._next_attempt = trio.current_time() + self.backoff_s
            raise PeerError(f"{self.name}: address unknown")
        try:
            with trio.fail_after(self.timeout_s):
                stream = await trio.open_tcp_stream(*address)
        except (OSError, trio.TooSlowError) as e:
            self._next_attempt = trio.current_time() + self.backoff_s
            raise PeerError(
                f"{self.name}: cannot connect to {address[0]}:{address[1]}: {e!r}"
            ) from e
        log.info("%s: connected to %s:%d", self.name, *address)
        self._stream = stream
        self.address = address
        self._frames = FrameBuffer(MAX_RESPONSE_BYTES)
        return stream

    async def _receive_frame(self, stream: trio.SocketStream) -> memoryview:
        while True:
            got = self._frames.next_frame()
            if got is not NEED_DATA:
                return got  # type: ignore[return-value]
            data = await stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise trio.BrokenResourceError("the peer closed the connection")
            self._frames.receive_data(data)

    async def _drop(self, why: str) -> None:
        if self._stream is not None:
            log.info("%s: closing the connection: %s", self.name, why)
            stream, self._stream = self._stream, None
            self._next_attempt = trio.current_time() + self.backoff_s
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                await stream.aclose()
