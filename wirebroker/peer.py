"""Requests from this broker to another one over our codec, one request at a time.

`PeerConnection` owns one open connection: it frames and sends a request, reads the response
frame, decodes it and checks that its correlation id is the request's. A closed stream or an
answer to another request raises `EOFError`, a garbled one `ProtocolError`; the connection
is then out of step and the caller must close it. It sets no timeout: callers bound each
request with their own (`replica.socket.timeout.ms`, `controller.socket.timeout.ms`).

`request_once` is one request on a fresh connection (a broker's ControlledShutdown to the
controller). `PeerClient` keeps a connection to one peer for the replica fetchers and
AlterPartition: it connects when needed, to the address `resolve()` gives at that moment (so a
broker that moved is found again), and turns any failure into `PeerError`, closing the
connection; the next request reconnects, but not before `backoff_s` after a failed attempt.
The controller's per-broker queues (`controller.channel`) use `PeerConnection` directly, with
their own reconnect and retry rules.

Over an SSL inter-broker listener every connection is TLS with the context of
`wirebroker.tls.inter_broker_client_context` (the broker's keystore as client certificate, its
truststore, host names checked); `ssl_context=None` is plaintext.

Nothing here interprets a response or retries a request: callers do.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from types import TracebackType
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
DEFAULT_TIMEOUT_S = 30.0  # Kafka's replica.socket.timeout.ms and controller.socket.timeout.ms


class PeerError(Exception):
    """A request to another broker failed; the connection (if any) is closed."""


class PeerConnection:
    """One open connection to a broker; requests on it must not overlap."""

    def __init__(self, stream: trio.abc.Stream, client_id: str) -> None:
        self.stream = stream
        self.client_id = client_id
        self._frames = FrameBuffer(MAX_RESPONSE_BYTES)
        self._correlation_id = 0

    @classmethod
    async def open(
        cls, host: str, port: int, *, client_id: str, ssl_context: ssl.SSLContext | None = None
    ) -> PeerConnection:
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        if ssl_context is not None:
            # Kafka's frames carry their length: no need for close_notify to see truncation.
            tls = trio.SSLStream(stream, ssl_context, server_hostname=host, https_compatible=True)
            try:
                await tls.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            stream = tls
        return cls(stream, client_id)

    async def request(self, body: Message, version: int) -> Any:
        """Send `body` at `version` and return the response body."""
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._correlation_id
        header = RequestHeader(
            request_api_key=body.API_KEY,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=self.client_id,
        )
        await self.stream.send_all(frame(encode_request(header, body)))
        response = decode_response(await self._receive_frame(), body.API_KEY, version)
        if response.header.correlation_id != correlation_id:
            raise EOFError(f"correlation id {response.header.correlation_id} != {correlation_id}")
        return response.body

    async def _receive_frame(self) -> memoryview:
        while True:
            got = self._frames.next_frame()
            if got is not NEED_DATA:
                assert isinstance(got, memoryview)
                return got
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise EOFError("the peer closed the connection")
            self._frames.receive_data(data)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> PeerConnection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def request_once(
    host: str,
    port: int,
    body: Message,
    version: int,
    *,
    client_id: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ssl_context: ssl.SSLContext | None = None,
) -> Any:
    """One request on a fresh connection, connecting included in `timeout_s`."""
    with trio.fail_after(timeout_s):
        connection = await PeerConnection.open(
            host, port, client_id=client_id, ssl_context=ssl_context
        )
        async with connection:
            return await connection.request(body, version)


class PeerClient:
    """A connection to one peer, reopened after failures, for requests in turn."""

    def __init__(
        self,
        name: str,
        resolve: Callable[[], tuple[str, int] | None],
        *,
        client_id: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_s: float = 1.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self.ssl_context = ssl_context
        self.resolve = resolve
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self._connection: PeerConnection | None = None
        self._lock = trio.Lock()
        self._next_attempt = 0.0
        self.address: tuple[str, int] | None = None

    async def request(self, body: Message, version: int) -> Any:
        """Send `body` at `version` and return the response body."""
        async with self._lock:
            connection = await self._connect()
            try:
                with trio.fail_after(self.timeout_s):
                    return await connection.request(body, version)
            except (
                trio.TooSlowError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                OSError,
                EOFError,
                ProtocolError,
            ) as e:
                await self._drop(f"{type(body).__name__} failed: {e!r}")
                raise PeerError(f"{self.name}: {type(body).__name__} failed: {e!r}") from e
            except trio.Cancelled:
                # The answer would arrive for nobody: the stream is out of step, start afresh.
                await self._drop("cancelled mid-request")
                raise

    async def _connect(self) -> PeerConnection:
        if self._connection is not None:
            return self._connection
        await trio.sleep_until(self._next_attempt)
        address = self.resolve()
        if address is None:
            self._next_attempt = trio.current_time() + self.backoff_s
            raise PeerError(f"{self.name}: address unknown")
        try:
            with trio.fail_after(self.timeout_s):
                connection = await PeerConnection.open(
                    *address, client_id=self.client_id, ssl_context=self.ssl_context
                )
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as e:
            self._next_attempt = trio.current_time() + self.backoff_s
            raise PeerError(
                f"{self.name}: cannot connect to {address[0]}:{address[1]}: {e!r}"
            ) from e
        log.info("%s: connected to %s:%d", self.name, *address)
        self._connection = connection
        self.address = address
        return connection

    async def _drop(self, why: str) -> None:
        if self._connection is not None:
            log.info("%s: closing the connection: %s", self.name, why)
            self._next_attempt = trio.current_time() + self.backoff_s
            await self.aclose()

    async def aclose(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            with trio.CancelScope(shield=True):
                await connection.aclose()
