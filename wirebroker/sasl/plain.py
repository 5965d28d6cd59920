"""SASL/PLAIN (RFC 4616): the server, against the users of the listener's PlainLoginModule
JAAS config, and the client this broker logs in to its peers with.

As Kafka's PlainSaslServer with its PlainServerCallbackHandler: the one client token is
`authzid NUL authcid NUL passwd`; the authorization id must be empty or the user name; the
password is compared in constant time. Every failure message is sent to the client, as Kafka's are.
The client sends that token (no authorization id) and takes the server's empty answer.
"""

from __future__ import annotations

import hmac

from wirebroker.sasl.mechanism import SaslAuthenticationFailed, SaslFailure
from wirebroker.sasl.settings import PLAIN


class PlainServer:
    mechanism = PLAIN
    expires_ms: int | None = None  # a password does not end
    blocking = False

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("Unexpected challenge after SASL/PLAIN authentication")
        parts = token.split(b"\0")
        if len(parts) != 3:
            # Kafka's extractTokens stops counting at 4
            raise SaslAuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}"
            )
        try:
            authzid, username, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        self.username = username
        expected = self._users.get(username)
        # Compared even for an unknown user, so the time taken does not tell which users exist.
        matches = hmac.compare_digest(
            password.encode(), (expected if expected is not None else "\0" + password).encode()
        )
        if expected is None or not matches:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.complete = True
        return b""


class PlainClient:
    mechanism = PLAIN

    def __init__(self, username: str, password: str) -> None:
        self._token = f"\0{username}\0{password}".encode()
        self.complete = False

    def initial(self) -> bytes:
        return self._token

    def evaluate(self, challenge: bytes) -> bytes | None:
        if challenge:
            raise SaslFailure("unexpected SASL/PLAIN challenge from the server")
        self.complete = True
        return None
