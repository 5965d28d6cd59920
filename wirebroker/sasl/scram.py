"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): credentials, the server side and
the client this broker logs in to its peers with.

A :class:`ScramCredential` is what the broker keeps of a password (salt, StoredKey, ServerKey,
iterations), written as Kafka's ScramCredentialUtils writes it
(`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`). :class:`ScramServer` follows
Kafka's ScramSaslServer: client-first (`n,[a=authzid],n=user,r=nonce[,ext]`), server-first
(`r=nonce+ours,s=salt,i=iterations`), client-final (`c=...,r=nonce,p=proof`), server-final
(`v=signature`). Only gs2 header `n` (no channel binding) is accepted. With the extension
`tokenauth=true` the user name is a delegation token's id, its credential the token's
(`wirebroker.sasl.delegation_tokens`), and the session's `principal` the token's owner, until the
token's expiry. An unknown user or token, a wrong proof
or a malformed message are :class:`SaslFailure` (the client gets the standard message).
:class:`ScramClient` is Kafka's ScramSaslClient: it refuses a server asking for fewer iterations
than the mechanism's minimum (or more than its maximum) and a server-final message whose
signature does not prove the server knows the password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from wirebroker.sasl.delegation_tokens import DelegationTokens, TokenPrincipal
from wirebroker.sasl.mechanism import SaslAuthenticationFailed, SaslFailure
from wirebroker.sasl.settings import SCRAM_SHA_256, SCRAM_SHA_512

#: Kafka's ScramMechanism: hash name and the iteration bounds it accepts.
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>[^,]+))?,(?:m=[^,]+,)?n=(?P<saslname>[^,]+),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?P<extensions>(?:,[A-Za-z]+=[^,]+)*)"
)
_SERVER_FIRST = re.compile(
    r"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+),s=(?P<salt>[A-Za-z0-9+/=]+),i=(?P<iterations>[0-9]+)"
    r"(?:,[A-Za-z]+=[^,]*)*"
)
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<channel>[A-Za-z0-9+/=]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[A-Za-z]+=[^,]*)*),p=(?P<proof>[A-Za-z0-9+/=]+)"
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise SaslFailure("invalid base64 in a SCRAM message") from None


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """The credential of a salted password (what AlterUserScramCredentials sends)."""
        hash_name = HASHES[mechanism]
        client_key = _hmac(hash_name, salted_password, b"Client Key")
        return cls(
            salt,
            hashlib.new(hash_name, client_key).digest(),
            _hmac(hash_name, salted_password, b"Server Key"),
            iterations,
        )

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS
    ) -> ScramCredential:
        salt = secrets.token_bytes(32)
        salted = hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def to_kafka_string(self) -> str:
        return (
            f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
            f"server_key={_b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as e:
            raise ValueError(f"not a SCRAM credential: {e}") from None


def username_from_saslname(saslname: str) -> str:
    """RFC 5802's `saslname`: ',' and '=' arrive as '=2C' and '=3D'."""
    if re.search(r"=(?!2C|3D)", saslname):
        raise SaslFailure(f"invalid SCRAM user name {saslname!r}")
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


class ScramServer:
    """One SCRAM exchange; `lookup(user)` gives the user's credential for this mechanism."""

    expires_ms: int | None = None  # a password does not end, a token does
    blocking = False

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        tokens: DelegationTokens | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._lookup = lookup
        self._tokens = tokens
        self.username: str | None = None
        #: The token's owner, once a client authenticated with a token (else `User:username`).
        self.principal: TokenPrincipal | None = None
        self._credential: ScramCredential | None = None
        self._auth_prefix = b""  # client-first-bare "," server-first
        self._nonce = ""
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("unexpected SCRAM message after completion")
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise SaslFailure("SCRAM message is not UTF-8") from None
        if self._credential is None:
            return self._client_first(text)
        return self._client_final(text)

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if not m:
            raise SaslFailure("invalid SCRAM client-first message")
        username = username_from_saslname(m["saslname"])
        self.username = username
        extensions = dict(e.split("=", 1) for e in m["extensions"].split(",") if e)
        if extensions.get("tokenauth", "").lower() == "true":
            credential = self._token_credential(username)
        else:
            credential = self._lookup(username)
        if credential is None:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        if m["authzid"] and m["authzid"] != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise SaslFailure(f"Iterations {credential.iterations} is less than the minimum")
        self._credential = credential
        self._nonce = m["nonce"] + secrets.token_urlsafe(24)
        server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        bare = text.split(",", 2)[2]  # after the gs2 header "n,[a=authzid],"
        self._auth_prefix = f"{bare},{server_first}".encode()
        return server_first.encode()

    def _token_credential(self, token_id: str) -> ScramCredential | None:
        """Kafka's DelegationTokenCredentialCallback: the token's credential and owner."""
        tokens = self._tokens
        token = tokens.get(token_id) if tokens is not None else None
        if tokens is None or token is None:
            raise SaslFailure(f"Token Authentication failed: Invalid tokenId : {token_id}")
        self.principal = TokenPrincipal(token.owner)
        self.expires_ms = token.expiry_timestamp
        return tokens.credential(token_id, self.mechanism)

    def _client_final(self, text: str) -> bytes:
        credential = self._credential
        assert credential is not None
        m = _CLIENT_FINAL.fullmatch(text)
        if not m:
            raise SaslFailure("invalid SCRAM client-final message")
        # As Kafka's ScramSaslServer, the nonce must end with the server-first one: librdkafka
        # up to 2.0 (Debian's kcat) sends its own nonce twice.
        if not m["nonce"].endswith(self._nonce):
            raise SaslFailure("Invalid client nonce in the final client message.")
        auth_message = self._auth_prefix + b"," + m["without_proof"].encode()
        client_signature = _hmac(self._hash, credential.stored_key, auth_message)
        proof = _b64decode(m["proof"])
        if len(proof) != len(client_signature):
            raise SaslFailure("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        computed = hashlib.new(self._hash, client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key):
            raise SaslFailure("Invalid client credentials")
        self.complete = True
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        self._credential = None
        return f"v={_b64(server_signature)}".encode()


class ScramClient:
    """One SCRAM exchange from the client's side (username and password known); `tokenauth`:
    a delegation token's (its id as username, its HMAC in base64 as password)."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, tokenauth: bool = False
    ) -> None:
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._password = password.encode()
        self._nonce = secrets.token_urlsafe(24)
        self._client_first_bare = f"n={saslname(username)},r={self._nonce}"
        if tokenauth:
            self._client_first_bare += ",tokenauth=true"
        self._server_signature: bytes | None = None
        self.complete = False

    def initial(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        try:
            text = challenge.decode()
        except UnicodeDecodeError:
            raise SaslFailure("SCRAM server message is not UTF-8") from None
        if self._server_signature is None:
            return self._client_final(text)
        if text.startswith("e="):
            raise SaslFailure(f"the SCRAM server refused: {text[2:]}")
        signature = _b64decode(text[2:]) if text.startswith("v=") else b""
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslFailure(
                "the SCRAM server's signature is wrong: it does not know the password"
            )
        self.complete = True
        return None

    def _client_final(self, server_first: str) -> bytes:
        m = _SERVER_FIRST.fullmatch(server_first)
        if not m:
            raise SaslFailure("invalid SCRAM server-first message")
        if not m["nonce"].startswith(self._nonce) or m["nonce"] == self._nonce:
            raise SaslFailure("the SCRAM server's nonce does not extend the client's")
        iterations = int(m["iterations"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslFailure(
                f"the SCRAM server asks for {iterations} iterations, outside "
                f"[{MIN_ITERATIONS}, {MAX_ITERATIONS}]"
            )
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, _b64decode(m["salt"]), iterations)
        client_key = _hmac(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={m['nonce']}"  # biws: base64 of the gs2 header "n,,"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = _hmac(self._hash, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self._hash, salted, b"Server Key")
        self._server_signature = _hmac(self._hash, server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()
