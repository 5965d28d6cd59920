"""Requests from this broker to another one over our codec, one request at a time.

`PeerConnection` owns one open connection: it frames and sends a request, reads the response
frame, decodes it and checks that its correlation id is the request's. A closed stream or an
answer to another request raises `EOFError`, a garbled one `ProtocolError`; the connection
is then out of step and the caller must close it. It sets no timeout: callers bound each
request with their own (`replica.socket.timeout.ms`, `controller.socket.timeout.ms`).

`PeerSecurity` is how a connection is secured, as the inter-broker listener's protocol says
(`PeerSecurity.inter_broker(config)`: `Broker.peer_security`, made again when the listener's
stores or login change at run time, for the next connections; open ones keep theirs): TLS with
the context of `wirebroker.tls.inter_broker_client_context` (the broker's keystore as client
certificate, its truststore, host names checked) for SSL and SASL_SSL, then for SASL_PLAINTEXT
and SASL_SSL a SASL login (`wirebroker.sasl.settings.SaslLogin`: SaslHandshake v1, then
SaslAuthenticate v2 rounds with the mechanism's client) before the first request, as Kafka's
SaslClientAuthenticator; an OAUTHBEARER login that fetches its token from an identity provider
waits for the broker's first token, then takes the one held at each login; a GSSAPI login
(which reaches the KDC) runs its client in a worker thread, asking for the ticket of the
service on the host this connection was opened to. When the peer's answer gives the session a lifetime (KIP-368), the
connection logs in again on its next request after 85-95% of it, as Kafka's clients do. A
connection that cannot be opened, secured or logged in raises `PeerError` (a refused login
`PeerAuthenticationFailed`, whose message says what the peer answered, never the secret; a
transient failure of the login's client, Kafka's retriable Kerberos errors, is a `PeerError`
like a lost connection, tried again as Kafka's client does);
`PLAINTEXT` is neither TLS nor SASL.

`request_once` is one request on a fresh connection (a broker's ControlledShutdown to the
controller); any failure is a `PeerError`. `PeerClient` keeps a connection to one peer for the
replica fetchers and AlterPartition: it connects when needed, to the address `resolve()` gives
at that moment (so a broker that moved is found again), and turns any failure into
`PeerError`, closing the connection; the next request reconnects, but not before `backoff_s`
after a failed attempt. The controller's per-broker queues (`controller.channel`) use
`PeerConnection` directly, with their own reconnect and retry rules.

Nothing here interprets a response or retries a request: callers do.
"""

from __future__ import annotations

import logging
import random
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import trio

from protocol.api import decode_response, encode_request
from protocol.errors import ErrorCode, ProtocolError
from protocol.framing import NEED_DATA, FrameBuffer, frame
from protocol.messages.headers import RequestHeader
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from protocol.schema import Message
from wirebroker.config import BrokerConfig
from wirebroker.sasl.mechanism import SaslFailure, SaslRetriable
from wirebroker.sasl.settings import SaslLogin, inter_broker_login

log = logging.getLogger(__name__)

T = TypeVar("T")

RECEIVE_SIZE = 256 * 1024
MAX_RESPONSE_BYTES = 1 << 30
DEFAULT_TIMEOUT_S = 30.0  # Kafka's replica.socket.timeout.ms and controller.socket.timeout.ms


#: SaslHandshake and SaslAuthenticate versions this broker's login uses (Kafka 3.9's newest).
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2
#: Share of a session's lifetime after which the next request logs in again (Kafka's clients
#: pick a point between 85% and 95%, so a fleet does not renew all at once).
REAUTHENTICATE_AT = (0.85, 0.95)
#: What a broken, refused or garbled connection raises on its way.
CONNECTION_FAILURES = (
    OSError,
    EOFError,
    ProtocolError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
)


class PeerError(Exception):
    """A request to another broker failed; the connection (if any) is closed."""


class PeerAuthenticationFailed(PeerError):
    """The peer refused this broker's SASL login (wrong credentials or mechanism), or its
    answers did not prove it knows them: fix the JAAS config or the peer's credentials."""


@dataclass(frozen=True)
class PeerSecurity:
    """How connections to peers are secured: TLS when `ssl_context` is set, then a SASL login
    when `sasl` is (SASL_SSL has both, PLAINTEXT neither)."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    @classmethod
    def inter_broker(cls, config: BrokerConfig) -> PeerSecurity:
        """What the inter-broker listener's protocol asks for; ConfigError when it cannot be."""
        from wirebroker.tls import inter_broker_client_context  # start-up time: see server

        return cls(inter_broker_client_context(config), inter_broker_login(config))


PLAINTEXT = PeerSecurity()


class PeerConnection:
    """One open connection to a broker; requests on it must not overlap."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        client_id: str,
        security: PeerSecurity = PLAINTEXT,
        host: str = "",
    ) -> None:
        self.stream = stream
        #: The peer's host as connected to (a GSSAPI login's service host).
        self.host = host
        #: A plain TCP stream's socket, read straight into the frame buffer (no copy).
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.client_id = client_id
        self.security = security
        self._frames = FrameBuffer(MAX_RESPONSE_BYTES)
        self._correlation_id = 0
        #: trio time after which the next request first logs in again (None: never).
        self._reauthenticate_at: float | None = None

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str,
        security: PeerSecurity = PLAINTEXT,
        receive_buffer: int | None = None,
    ) -> PeerConnection:
        """Connect (with SO_RCVBUF `receive_buffer`, None: the system's default), then TLS
        and SASL as `security` says; PeerError (nothing left open) when any of it fails."""
        try:
            stream: trio.abc.Stream = await _open_tcp(host, port, receive_buffer)
        except OSError as e:
            raise PeerError(f"cannot connect to {host}:{port}: {e}") from e
        try:
            if security.ssl_context is not None:
                # Kafka's frames carry their length: no need for close_notify to see truncation.
                tls = trio.SSLStream(
                    stream, security.ssl_context, server_hostname=host, https_compatible=True
                )
                await tls.do_handshake()
                stream = tls
            connection = cls(stream, client_id, security, host)
            if security.sasl is not None:
                await connection.authenticate()
        except BaseException as e:
            await trio.aclose_forcefully(stream)
            if isinstance(e, CONNECTION_FAILURES):
                raise PeerError(f"{host}:{port}: {e!r}") from e
            raise
        return connection

    async def authenticate(self) -> None:
        """Log in (again) with the SASL login of `security`; PeerAuthenticationFailed when the
        peer refuses. Other failures (a closed stream) raise as from `request`."""
        login = self.security.sasl
        assert login is not None
        await login.ready()
        who = f"SASL/{login.mechanism} login on {login.listener_name}"

        async def run(call: Callable[..., T], *args: Any) -> T:
            """The login's client's `call`; a failure of it refuses the login, but a transient
            one is a lost connection (Kafka's client: "Kafka Client will retry")."""
            try:
                if not login.blocking:
                    return call(*args)
                return await trio.to_thread.run_sync(call, *args, abandon_on_cancel=True)
            except SaslRetriable as e:
                raise PeerError(f"{who}: {e}") from None
            except SaslFailure as e:
                raise PeerAuthenticationFailed(f"{who}: {e}") from None

        shake = await self._call(
            SaslHandshakeRequest(mechanism=login.mechanism), SASL_HANDSHAKE_VERSION
        )
        assert isinstance(shake, SaslHandshakeResponse)
        if shake.error_code != ErrorCode.NONE:
            raise PeerAuthenticationFailed(
                f"{who}: the peer answered {ErrorCode(shake.error_code).name} "
                f"(it offers {', '.join(shake.mechanisms)})"
            )
        client = await run(login.client, int(time.time() * 1000), self.host)
        token: bytes | None = await run(client.initial)
        lifetime_ms = 0
        while token is not None:
            answer = await self._call(
                SaslAuthenticateRequest(auth_bytes=token), SASL_AUTHENTICATE_VERSION
            )
            assert isinstance(answer, SaslAuthenticateResponse)
            if answer.error_code != ErrorCode.NONE:
                raise PeerAuthenticationFailed(
                    f"{who} refused: {ErrorCode(answer.error_code).name}: {answer.error_message}"
                )
            lifetime_ms = answer.session_lifetime_ms
            token = await run(client.evaluate, answer.auth_bytes)
        self._reauthenticate_at = (
            trio.current_time() + lifetime_ms / 1000 * random.uniform(*REAUTHENTICATE_AT)
            if lifetime_ms > 0
            else None
        )

    async def request(self, body: Message, version: int) -> Any:
        """Send `body` at `version` and return the response body (logging in again first when
        the session is due for it)."""
        if self._reauthenticate_at is not None and trio.current_time() >= self._reauthenticate_at:
            await self.authenticate()
        return await self._call(body, version)

    async def _call(self, body: Message, version: int) -> Any:
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
        frames, sock = self._frames, self._socket
        while True:
            got = frames.next_frame()
            if got is not NEED_DATA:
                assert isinstance(got, memoryview)
                return got
            if sock is not None:
                n = await sock.recv_into(frames.writable())
                if not n:
                    raise EOFError("the peer closed the connection")
                frames.advance(n)
                continue
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise EOFError("the peer closed the connection")
            frames.receive_data(data)

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


async def _open_tcp(host: str, port: int, receive_buffer: int | None) -> trio.SocketStream:
    """A TCP connection; with `receive_buffer`, its SO_RCVBUF set before it connects, as
    Kafka's Selector does (the window scale its handshake offers is chosen for it)."""
    if receive_buffer is None:
        return await trio.open_tcp_stream(host, port)
    failure: OSError = OSError(f"{host} has no address")
    for family, type_, proto, _, address in await trio.socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM
    ):
        sock = trio.socket.socket(family, type_, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            await sock.connect(address)
        except OSError as e:
            sock.close()
            failure = e
            continue
        except BaseException:
            sock.close()
            raise
        return trio.SocketStream(sock)
    raise failure


async def request_once(
    host: str,
    port: int,
    body: Message,
    version: int,
    *,
    client_id: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    security: PeerSecurity = PLAINTEXT,
) -> Any:
    """One request on a fresh connection, connecting included in `timeout_s`; PeerError when
    it cannot be done."""
    try:
        with trio.fail_after(timeout_s):
            connection = await PeerConnection.open(
                host, port, client_id=client_id, security=security
            )
            async with connection:
                return await connection.request(body, version)
    except (*CONNECTION_FAILURES, trio.TooSlowError) as e:
        raise PeerError(f"{type(body).__name__} to {host}:{port} failed: {e!r}") from e


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
        security: PeerSecurity = PLAINTEXT,
        receive_buffer: int | None = None,
    ) -> None:
        self.name = name
        self.security = security
        #: SO_RCVBUF of its connections (None: the system's default).
        self.receive_buffer = receive_buffer
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
            except (*CONNECTION_FAILURES, trio.TooSlowError, PeerError) as e:
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
                    *address,
                    client_id=self.client_id,
                    security=self.security,
                    receive_buffer=self.receive_buffer,
                )
        except (PeerError, trio.TooSlowError) as e:
            self._next_attempt = trio.current_time() + self.backoff_s
            if isinstance(e, PeerAuthenticationFailed):
                log.warning("%s: %s", self.name, e)
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
