"""A SASL connection before its authentication completes (Kafka's SaslServerAuthenticator).

The connection hands every frame to :meth:`SaslAuthenticator.receive` until `principal` is set
and answers what it returns. As in Kafka:

- first ApiVersions (once) and SaslHandshake are answered; any other request closes the
  connection without an answer, as does a first frame that is not a Kafka request at all
  (unless GSSAPI is enabled: then it is a Kafka 0.9 client's first GSSAPI token, and the
  exchange goes on with bare tokens, as after a v0 handshake);
- a SaslHandshake naming a mechanism the listener does not offer is answered with
  UNSUPPORTED_SASL_MECHANISM and the enabled mechanisms, then the connection is closed; one
  naming an enabled mechanism Kafka would have no server for (`settings.has_sasl_server`, or
  GSSAPI whose JAAS entry has no Krb5LoginModule) is answered, then the next frame closes the
  connection, unanswered;
- after a v0 handshake the client's SASL tokens arrive as bare size-prefixed frames and are
  answered the same way; after v1 they come in SaslAuthenticate requests;
- during SaslAuthenticate, another request is answered with its error response carrying
  ILLEGAL_SASL_STATE, then the connection is closed;
- a transient failure (`SaslRetriable`: a replayed Kerberos authenticator) closes the
  connection at once, unanswered, as Kafka's, so that the client connects again;
- a failed authentication is answered with SASL_AUTHENTICATION_FAILED and a message (the
  mechanism's own when it is safe to show, else Kafka's standard one), then closed after
  `connection.failed.authentication.delay.ms`. One whose principal cannot be made (a Kerberos
  name no rule maps) is answered as a success; the next frame then closes the connection at
  once, unanswered, as Kafka's SocketServer does when its principal builder fails on the first
  request after the exchange; a re-authentication that ends so closes at once, unanswered, as
  Kafka's SaslServerAuthenticator builds the principal there. The log says which user from
  which host (its control characters escaped: a name cannot forge a log line), never the
  secret.

A mechanism whose server may block (GSSAPI: the keytab, the replay cache) evaluates each token
in a worker thread.

Frames before authentication may not exceed `sasl.server.max.receive.size` (the connection's
frame buffer refuses a bigger one before reading it).

Re-authentication (KIP-368): with `connections.max.reauth.ms` set, or an OAUTHBEARER token
(whose `exp` bounds the session, as in Kafka), a completed SaslAuthenticate v1+ tells the client
its `session_lifetime_ms`; the connection closes when a request other than
SaslHandshake arrives after that, as Kafka's. A SaslHandshake on an authenticated connection
starts a new authenticator (`reauthenticating`: no ApiVersions first). It must name the same
mechanism and end with the same principal, else it fails as above (a changed mechanism is
answered with ILLEGAL_SASL_STATE).
"""

from __future__ import annotations

import logging
import re
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
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import APIS
from protocol.messages.headers import ResponseHeader
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from protocol.schema import Message
from wirebroker.dispatch import REGISTRY, RequestContext, error_response, supported
from wirebroker.sasl.mechanism import (
    SaslAuthenticationFailed,
    SaslFailure,
    SaslPrincipalFailure,
    SaslRetriable,
    SaslServer,
)
from wirebroker.sasl.settings import (
    GSSAPI,
    LOGIN_MODULES,
    OAUTHBEARER,
    PLAIN,
    SCRAM,
    ListenerSasl,
    has_sasl_server,
)

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = SaslHandshakeRequest.API_KEY
SASL_AUTHENTICATE_KEY = SaslAuthenticateRequest.API_KEY


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """`text`, which holds what a client sent (its user name), for the log: its control
    characters escaped, so that a name with a newline cannot forge a line of the log."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


class Step:
    """What the connection does with one frame: write `chunks` (if any), then close if `close`
    says why: after `connection.failed.authentication.delay.ms` if `delay` (a failed
    authentication), else at once."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("chunks", "close", "delay")

    def __init__(
        self, chunks: list[Any] | None, close: str | None = None, *, delay: bool = True
    ) -> None:
        self.chunks = chunks
        self.close = close
        self.delay = delay


class SaslAuthenticator:
    """The SASL state of one connection until it is authenticated."""

    def __init__(
        self,
        broker: Broker,
        settings: ListenerSasl,
        client_host: str,
        listener_name: str,
        *,
        reauthenticating: tuple[str, str] | None = None,
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.client_host = client_host
        self.listener_name = listener_name
        #: (principal, mechanism) of the session being renewed.
        self.reauthenticating = reauthenticating
        # then "handshake", "authenticate"
        self.state = "handshake" if reauthenticating else "handshake_or_versions"
        #: Why the next frame closes the connection, unanswered: the exchange's principal
        #: cannot be made, or the mechanism has no server.
        self.doomed: str | None = None
        self.raw_tokens = False  # after a v0 handshake
        self.server: SaslServer | None = None
        #: `User:<name>` once authenticated.
        self.principal: str | None = None
        #: What the completed SaslAuthenticate told the client (0: the session does not expire).
        self.session_lifetime_ms = 0

    async def receive(self, frame: memoryview) -> Step:
        if self.doomed is not None:
            return Step(None, self.doomed, delay=False)
        if self.state == "authenticate" and self.raw_tokens:
            return await self._raw_token(bytes(frame))
        try:
            api_key, api_version, correlation_id = peek_request_header(frame)
            if api_key not in APIS:
                raise ProtocolError(f"unknown API key {api_key}")
        except ProtocolError:
            if self.state == "handshake_or_versions" and GSSAPI in self.settings.mechanisms:
                # Kafka 0.9's clients send their first GSSAPI token with no handshake.
                no_server = self._no_server(GSSAPI)
                if no_server is not None:
                    return Step(None, no_server, delay=False)
                self.server = self._server(GSSAPI)
                self.raw_tokens = True
                self.state = "authenticate"
                return await self._raw_token(bytes(frame))
            if self.state == "handshake_or_versions":
                return Step(
                    None,
                    "Invalid request, potential reasons: kafka client configured with the wrong "
                    "security protocol, it does not support KIP-43 or it is not a kafka client",
                )
            raise
        name = api_info(api_key).name
        if self.state == "authenticate":
            return await self._authenticate_request(frame, api_key, api_version, name)
        if api_key == API_VERSIONS_KEY and self.state == "handshake_or_versions":
            if not supported(api_key, api_version):
                reg = REGISTRY[API_VERSIONS_KEY]
                return Step(
                    [
                        unsupported_api_versions_response(
                            correlation_id, (reg.min_version, reg.max_version)
                        )
                    ]
                )
            request = decode_request(frame)
            ctx = self._context(request.header)
            response = await REGISTRY[API_VERSIONS_KEY].handler(ctx, request.body)
            assert isinstance(response, Message)
            self.state = "handshake"
            return Step(self._encode(correlation_id, response, api_key, api_version))
        if api_key != SASL_HANDSHAKE_KEY or not supported(api_key, api_version):
            return Step(None, f"unexpected request {name} v{api_version} during SASL handshake")
        return self._handshake(decode_request(frame).body, correlation_id, api_version)

    def _handshake(self, request: Any, correlation_id: int, version: int) -> Step:
        assert isinstance(request, SaslHandshakeRequest)
        mechanisms = list(self.settings.mechanisms)
        if self.reauthenticating and request.mechanism != self.reauthenticating[1]:
            response = SaslHandshakeResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechanisms
            )
            return Step(
                self._encode(correlation_id, response, SASL_HANDSHAKE_KEY, version),
                f"SASL mechanism changed from {self.reauthenticating[1]} to "
                f"{request.mechanism} during re-authentication",
            )
        if request.mechanism not in mechanisms:
            response = SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms
            )
            return Step(
                self._encode(correlation_id, response, SASL_HANDSHAKE_KEY, version),
                f"unsupported SASL mechanism {request.mechanism!r} (enabled: {mechanisms})",
            )
        # As Kafka's, the handshake is answered, then a SaslServer it cannot make dooms it.
        self.doomed = self._no_server(request.mechanism)
        if self.doomed is None:
            self.server = self._server(request.mechanism)
        self.raw_tokens = version == 0
        self.state = "authenticate"
        response = SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=mechanisms)
        return Step(self._encode(correlation_id, response, SASL_HANDSHAKE_KEY, version))

    def _no_server(self, mechanism: str) -> str | None:
        """Why Kafka could make no SaslServer for an enabled `mechanism` (None: it could): no
        login loaded its login module (`settings.has_sasl_server`), or GSSAPI's login has no
        Krb5LoginModule, whose Kerberos principal its server takes from the Subject."""
        if mechanism == GSSAPI and self.settings.kerberos is None:
            return (
                "Principal could not be determined from Subject, this may be a transient failure "
                f"due to Kerberos re-login (the listener's GSSAPI JAAS entry names no "
                f"{LOGIN_MODULES[GSSAPI]})"
            )
        if not has_sasl_server(mechanism, self.broker.login_modules):
            return (
                "Kafka Server failed to create a SaslServer to interact with a client during "
                f"session authentication with server mechanism {mechanism} (no JAAS entry of "
                f"this broker names {LOGIN_MODULES[mechanism]}, which registers it)"
            )
        return None

    def _server(self, mechanism: str) -> SaslServer:
        """The mechanism's server; its module is imported here, by the first exchange that
        uses it (start-up time, docs/perf-notes.md)."""
        if mechanism == PLAIN:
            from wirebroker.sasl.plain import PlainServer

            return PlainServer(self.settings.plain_users())
        if mechanism == OAUTHBEARER:
            from wirebroker.sasl.oauthbearer import OAuthBearerServer

            assert self.settings.oauthbearer is not None
            return OAuthBearerServer(self.settings.oauthbearer, self.broker.now_ms)
        if mechanism == GSSAPI:
            from wirebroker.sasl.kerberos import GssapiServer

            assert self.settings.kerberos is not None
            return GssapiServer(self.settings.kerberos)
        from wirebroker.sasl.scram import ScramServer

        assert mechanism in SCRAM
        store = self.broker.scram_credentials
        return ScramServer(
            mechanism, lambda user: store.get(user, mechanism), self.broker.delegation_tokens
        )

    async def _raw_token(self, token: bytes) -> Step:
        try:
            answer = await self._evaluate(token)
        except SaslPrincipalFailure as e:
            return self._principal_failure(e, [e.answer])
        except SaslRetriable as e:
            return self._retriable(e)
        except SaslFailure as e:
            return Step(None, self._failure(e))
        return Step([answer])

    async def _authenticate_request(
        self, frame: memoryview, api_key: int, api_version: int, name: str
    ) -> Step:
        if not supported(api_key, api_version):
            return Step(
                None, f"unexpected request {name} v{api_version} during SASL authentication"
            )
        request = decode_request(frame)
        correlation_id = request.header.correlation_id
        if api_key != SASL_AUTHENTICATE_KEY:
            ctx = self._context(request.header)
            response = error_response(ctx, request.body, ErrorCode.ILLEGAL_SASL_STATE)
            return Step(
                self._encode(correlation_id, response, api_key, api_version),
                f"unexpected request {name} during SASL authentication",
            )
        body = request.body
        assert isinstance(body, SaslAuthenticateRequest)
        try:
            answer = await self._evaluate(bytes(body.auth_bytes))
        except SaslPrincipalFailure as e:
            response = SaslAuthenticateResponse(
                auth_bytes=e.answer, session_lifetime_ms=self._session_lifetime_ms(None)
            )
            return self._principal_failure(
                e, self._encode(correlation_id, response, api_key, api_version)
            )
        except SaslRetriable as e:
            return self._retriable(e)
        except SaslFailure as e:
            message = (
                str(e)
                if isinstance(e, SaslAuthenticationFailed)
                else "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {self.server.mechanism if self.server else '?'}"
            )
            response = SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message
            )
            return Step(
                self._encode(correlation_id, response, api_key, api_version), self._failure(e)
            )
        response = SaslAuthenticateResponse(
            error_code=ErrorCode.NONE,
            auth_bytes=answer,
            session_lifetime_ms=self.session_lifetime_ms,
        )
        return Step(self._encode(correlation_id, response, api_key, api_version))

    async def _evaluate(self, token: bytes) -> bytes:
        server = self.server
        assert server is not None
        if server.blocking:
            answer = await trio.to_thread.run_sync(server.evaluate, token)
        else:
            answer = server.evaluate(token)
        if server.complete:
            # a SCRAM session of a delegation token is its owner's
            principal = getattr(server, "principal", None) or f"User:{server.username}"
            if self.reauthenticating and principal != self.reauthenticating[0]:
                raise SaslAuthenticationFailed(
                    "Cannot change principals during re-authentication from "
                    f"{self.reauthenticating[0]}: {principal}"
                )
            self.principal = principal
            self.session_lifetime_ms = self._session_lifetime_ms(server.expires_ms)
            log.debug(
                "%s authenticated from %s with %s",
                shown(principal),
                self.client_host,
                server.mechanism,
            )
        return answer

    def _principal_failure(self, e: SaslPrincipalFailure, answer: list[Any]) -> Step:
        """As Kafka 3.9, whose principal builder runs after the SASL server completed: the
        exchange's last token is answered as a success, the next frame closes the connection
        (SocketServer's processChannelException: no answer, no delay); in a re-authentication
        the principal is built before the answer, so the connection closes unanswered."""
        if self.reauthenticating:
            return Step(None, self._failure(e), delay=False)
        self.doomed = self._failure(e)
        return Step(answer)

    def _retriable(self, e: SaslRetriable) -> Step:
        """As Kafka 3.9's handleSaslToken, which rethrows a retriable Kerberos error as the
        SaslException (an IOException) it is: Selector closes the channel unanswered, at once,
        and the client, seeing a lost connection, connects again."""
        return Step(None, self._failure(e), delay=False)

    def _session_lifetime_ms(self, expires_ms: int | None) -> int:
        """As Kafka: `connections.max.reauth.ms`, or less when the credential ends sooner (an
        OAUTHBEARER token's `exp`); 0 when neither bounds it."""
        max_reauth_ms = self.settings.max_reauth_ms
        if expires_ms is None:
            return max_reauth_ms
        left = max(1, expires_ms - self.broker.now_ms())
        return min(left, max_reauth_ms) if max_reauth_ms else left

    def _failure(self, e: SaslFailure) -> str:
        """The log line of a failed authentication: who, how and why, never the secret."""
        server = self.server
        user = server.username if server is not None else None
        mechanism = server.mechanism if server is not None else "?"
        return shown(f"SASL/{mechanism} authentication of User:{user} failed: {e}")

    def _context(self, header: Any) -> RequestContext:
        return RequestContext(self.broker, header, self.client_host, self.listener_name)

    @staticmethod
    def _encode(correlation_id: int, body: Message, api_key: int, version: int) -> list[Any]:
        return encode_response_chunks(
            ResponseHeader(correlation_id=correlation_id), body, api_key, version
        )
