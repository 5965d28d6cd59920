"""SASL/OAUTHBEARER (RFC 7628): the server's validation of Kafka's unsecured JWS tokens and of
secured (OIDC) ones, and the client's unsecured token, as Kafka does them.

The server is Kafka's OAuthBearerSaslServer with OAuthBearerUnsecuredValidatorCallbackHandler:
the client's first message is `n,[a=authzid],` `\\x01auth=Bearer <token>` then `\\x01key=value`
extensions and `\\x01\\x01`; the token is an unsecured JWS (`alg` `none`, an empty signature)
whose principal claim (`sub`, or the JAAS option `unsecuredValidatorPrincipalClaimName`) names
the user. `exp` is required and must be in the future, `iat` (if present) must not be, `exp`
must come after `iat`, all within `unsecuredValidatorAllowableClockSkewMs`; every scope named in
`unsecuredValidatorRequiredScope` (space-separated) must be in the token's scope claim (`scope`,
or `unsecuredValidatorScopeClaimName`; a string or a list). A token that fails is answered, as
Kafka's, with a JSON error (`{"status":"invalid_token"}`, or `insufficient_scope` with the
scope) that the client acknowledges with `\\x01`; only then does the exchange fail, with that
JSON as the message. Extensions are accepted and ignored (as the unsecured validator does).
The token's `exp` bounds the session (KIP-368), as in Kafka.

The client is Kafka's OAuthBearerUnsecuredLoginCallbackHandler: a token with `iat` now, `exp`
after `unsecuredLoginLifetimeSeconds` (3600), the claims of the `unsecuredLoginStringClaim_<c>`,
`unsecuredLoginNumberClaim_<c>` and `unsecuredLoginListClaim_<c>` options (a list option's first
character separates its items) and `unsecuredLoginExtension_<e>` extensions; it answers an
error challenge with `\\x01`, as Kafka's client. A broker whose login fetches its token from an
identity provider (`wirebroker.sasl.access_token`) sends that token instead, with the
`extension_<e>` options as extensions, as Kafka's OAuthBearerLoginCallbackHandler.

Secured tokens (KIP-768) are Kafka's OAuthBearerValidatorCallbackHandler's (`SecuredValidator`):
a JWS verified by PyJWT with the key of the `sasl.oauthbearer.jwks.endpoint.url` set its `kid`
names (`wirebroker.sasl.jwks` holds the keys; a token is checked against them on the loop, no
I/O), never `alg` `none`; as Kafka's ValidatorAccessTokenValidator (jose4j), `exp` and `iat` are
required, `exp` and `nbf` are checked with `sasl.oauthbearer.clock.skew.seconds`, `aud` must
name one of `sasl.oauthbearer.expected.audience` (and be absent when none is expected), `iss`
must equal `sasl.oauthbearer.expected.issuer` when set, the principal is the (trimmed)
`sasl.oauthbearer.sub.claim.name` claim, and the scope claim is a string (one scope, whole) or a
list. A refused token is answered as an unsecured one is; the reason is logged, never the
token.

Differs from Kafka: the unsecured token's parts are decoded as base64url (RFC 7515; Kafka's
decoder takes the standard alphabet only); a token whose header has no `alg` fails as an
invalid token.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from wirebroker.sasl.jwks import KeySet
from wirebroker.sasl.mechanism import SaslAuthenticationFailed, SaslFailure
from wirebroker.sasl.settings import OAUTHBEARER

log = logging.getLogger(__name__)

UNSECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)
#: Kafka 3.9's secured validator, by its public name and by its deprecated one.
SECURED_VALIDATORS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)
_SEPARATOR = "\x01"
_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+))?,\x01"
    r"(?P<pairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)
_RESERVED_CLAIMS = ("iat", "exp")
_CLAIM_OPTIONS = (
    "unsecuredLoginStringClaim",
    "unsecuredLoginNumberClaim",
    "unsecuredLoginListClaim",
)


class InvalidToken(Exception):
    """A token the unsecured validator refuses; `scope` is set when only the scope was short."""

    def __init__(self, message: str, scope: str | None = None) -> None:
        super().__init__(message)
        self.scope = scope


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: Java's long: Kafka holds a token's expiry (ms) in one.
_LONG_MAX = 2**63 - 1


def _claim_ms(seconds: float) -> int:
    """A time claim (seconds, finite) in milliseconds as Kafka takes it: Math.round of the
    double, which saturates at a long's bounds (a token may claim to expire in 1e300 s: its
    session then lasts as long as a long can tell, not past what the answer can carry)."""
    ms = seconds * 1000
    if ms >= _LONG_MAX:
        return _LONG_MAX
    return max(-_LONG_MAX - 1, round(ms))


def _decode_part(part: str) -> dict[str, Any]:
    try:
        data = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        obj = json.loads(data)
    except (binascii.Error, ValueError, RecursionError):
        raise InvalidToken("malformed Base64 URL encoded value or JSON") from None
    if not isinstance(obj, dict):
        raise InvalidToken("malformed JSON")
    return obj


class BearerToken:
    """A validated token (unsecured or secured): who it names, its scope and when it ends."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("principal", "scope", "expires_ms")

    def __init__(self, principal: str, scope: frozenset[str], expires_ms: int) -> None:
        self.principal = principal
        self.scope = scope
        self.expires_ms = expires_ms


class UnsecuredValidator:
    """The `unsecuredValidator*` options of the listener's OAuthBearerLoginModule JAAS entry."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("principal_claim", "scope_claim", "required_scope", "clock_skew_ms")

    def __init__(
        self,
        principal_claim: str = "sub",
        scope_claim: str = "scope",
        required_scope: tuple[str, ...] = (),
        clock_skew_ms: int = 0,
    ) -> None:
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.required_scope = required_scope
        self.clock_skew_ms = clock_skew_ms

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> UnsecuredValidator:
        """ValueError when an option is unusable (the message names it)."""
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip() or "0"
        if not skew.isdigit():
            raise ValueError(
                f"unsecuredValidatorAllowableClockSkewMs={skew!r} must be a non-negative integer"
            )
        return cls(
            options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub",
            options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
            tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
            int(skew),
        )

    def validate(self, token: str, now_ms: int) -> BearerToken:
        """The token's principal, scope and expiry; InvalidToken when it does not pass."""
        if ".." in token:
            raise InvalidToken("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken(
                "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded "
                "values"
            )
        header, claims = _decode_part(parts[0]), _decode_part(parts[1])
        if header.get("alg") != "none":
            raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise InvalidToken("Unsecured JWS must not contain a digital signature")
        scope = self._scope(claims.get(self.scope_claim))
        exp, iat = claims.get("exp"), claims.get("iat")
        if exp is None:
            raise InvalidToken("No expiration time in JWT")
        for name, value in (("exp", exp), ("iat", iat)):
            if value is not None and not (_number(value) and math.isfinite(value)):
                raise InvalidToken(f"The '{name}' claim was not of type Number")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"No principal name in JWT claim: {self.principal_claim}")
        skew = self.clock_skew_ms
        if iat is not None and 1000 * iat > now_ms + skew:
            raise InvalidToken(f"The Issued At value ({iat} seconds) was after now plus skew")
        if now_ms - skew >= 1000 * exp:
            raise InvalidToken(f"The token expired at {exp} seconds")
        if iat is not None and exp <= iat:
            raise InvalidToken("The Expiration Time was not after the Issued At time")
        for wanted in self.required_scope:
            if wanted not in scope:
                raise InvalidToken(
                    f"The provided scope ({sorted(scope)}) was missing a required scope ({wanted})",
                    scope="[" + ", ".join(self.required_scope) + "]",
                )
        return BearerToken(principal, scope, _claim_ms(exp))

    @staticmethod
    def _scope(value: Any) -> frozenset[str]:
        if value is None:
            return frozenset()
        if isinstance(value, str):
            return frozenset([value.strip()] if value.strip() else [])
        if isinstance(value, list):
            return frozenset(str(s).strip() for s in value if str(s).strip())
        raise InvalidToken("The scope claim was not of type String or List")


class SecuredValidator:
    """Kafka's OAuthBearerValidatorCallbackHandler (KIP-768): a JWS signed by a key of the
    `sasl.oauthbearer.jwks.endpoint.url` key set (PyJWT verifies it), checked as Kafka's
    ValidatorAccessTokenValidator does."""

    __slots__ = (
        "keys",
        "expected_audience",
        "expected_issuer",
        "principal_claim",
        "scope_claim",
        "clock_skew_s",
    )

    def __init__(
        self,
        keys: KeySet,
        expected_audience: tuple[str, ...] = (),
        expected_issuer: str | None = None,
        principal_claim: str = "sub",
        scope_claim: str = "scope",
        clock_skew_s: int = 30,
    ) -> None:
        self.keys = keys
        self.expected_audience = expected_audience
        self.expected_issuer = expected_issuer
        self.principal_claim = principal_claim
        self.scope_claim = scope_claim
        self.clock_skew_s = clock_skew_s

    def validate(self, token: str, now_ms: int) -> BearerToken:
        """The token's principal, scope and expiry; InvalidToken when it does not pass."""
        import jwt  # here: a broker without secured tokens never loads PyJWT (start-up time)

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise InvalidToken(f"malformed token: {e}") from None
        algorithm, key_id = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or algorithm.lower() == "none":
            raise InvalidToken(f"the token's algorithm {algorithm!r} is not allowed")
        if key_id is not None and not isinstance(key_id, str):
            raise InvalidToken("the token's key id (kid) is not a string")
        candidates = self.keys.candidates(key_id, algorithm)
        if not candidates:
            raise InvalidToken(
                f"no {algorithm} verification key with kid {key_id!r} in the JWKS of "
                f"{self.keys.endpoint.shown}"
            )
        claims: dict[str, Any] | None = None
        for key in candidates:
            try:
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=[algorithm],
                    audience=self.expected_audience or None,
                    issuer=self.expected_issuer,
                    # exp and nbf are checked below against the broker's clock
                    options={
                        "require": ["exp", "iat"],
                        "verify_exp": False,
                        "verify_nbf": False,
                        "verify_iat": False,
                    },
                )
                break
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as e:
                raise InvalidToken(f"could not validate the token: {e}") from None
        if claims is None:
            raise InvalidToken(f"the token's signature does not verify (kid {key_id!r})")
        return self._checked(claims, now_ms)

    def _checked(self, claims: dict[str, Any], now_ms: int) -> BearerToken:
        skew_ms = 1000 * self.clock_skew_s
        times = {name: claims.get(name) for name in ("exp", "iat", "nbf")}
        for name, value in times.items():
            if value is not None and not (_number(value) and math.isfinite(value) and value >= 0):
                raise InvalidToken(f"the '{name}' claim is not a non-negative number")
        exp, nbf = times["exp"], times["nbf"]
        assert exp is not None  # required above
        if now_ms - skew_ms >= 1000 * exp:
            raise InvalidToken(f"the token expired at {exp} seconds")
        if nbf is not None and 1000 * nbf > now_ms + skew_ms:
            raise InvalidToken(f"the token is not valid before {nbf} seconds")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"no principal name in the token's {self.principal_claim} claim")
        raw_scope = claims.get(self.scope_claim)
        items = [raw_scope] if isinstance(raw_scope, str) else raw_scope
        scope = [s.strip() for s in items if isinstance(s, str)] if isinstance(items, list) else []
        if "" in scope:
            raise InvalidToken(f"the token's {self.scope_claim} claim holds an empty scope")
        return BearerToken(principal.strip(), frozenset(scope), _claim_ms(exp))


class OAuthBearerServer:
    """One OAUTHBEARER exchange on the server's side."""

    mechanism = OAUTHBEARER
    blocking = False

    def __init__(
        self, validator: UnsecuredValidator | SecuredValidator, now_ms: Callable[[], int]
    ) -> None:
        self._validator = validator
        self._now_ms = now_ms
        self.username: str | None = None
        self.expires_ms: int | None = None
        self._error: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("unexpected OAUTHBEARER message after completion")
        if token == _SEPARATOR.encode() and self._error is not None:
            raise SaslAuthenticationFailed(self._error)
        self._error = None
        m = _CLIENT_FIRST.fullmatch(token.decode("utf-8", "replace"))
        if not m:
            raise SaslFailure("Invalid OAUTHBEARER client first message")
        pairs = dict(p.split("=", 1) for p in m["pairs"].split(_SEPARATOR) if p)
        auth = _AUTH.fullmatch(pairs.get("auth", ""))
        if auth is None or auth["scheme"].lower() != "bearer":
            raise SaslFailure("Invalid OAUTHBEARER client first message: no 'auth=Bearer'")
        try:
            jws = self._validator.validate(auth["token"], self._now_ms())
        except InvalidToken as e:
            log.info("OAUTHBEARER token refused: %s", e)  # the reason, never the token
            status = "insufficient_scope" if e.scope is not None else "invalid_token"
            error = {"status": status} | ({"scope": e.scope} if e.scope is not None else {})
            self._error = json.dumps(error, separators=(",", ":"))
            self.username = _claimed_principal(auth["token"], self._validator.principal_claim)
            return self._error.encode()
        self.username = jws.principal
        authzid = (m["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
        if authzid and authzid != jws.principal:
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) that "
                f"is different from the token's principal name ({jws.principal})"
            )
        self.expires_ms = jws.expires_ms
        self.complete = True
        return b""


def _claimed_principal(token: str, claim: str) -> str | None:
    """Who a refused token says it is, for the log line (never trusted)."""
    try:
        value = _decode_part(token.split(".")[1]).get(claim)
    except (InvalidToken, IndexError):
        return None
    return value if isinstance(value, str) else None


# the client -------------------------------------------------------------------------------------
def login_extensions(options: Mapping[str, str], prefix: str) -> dict[str, str]:
    """The SASL extensions set by the JAAS options `<prefix><name>` (`unsecuredLoginExtension_`
    for the unsecured token, `extension_` for a fetched one), checked as Kafka's
    OAuthBearerClientInitialResponse checks them; ValueError naming the option that is not."""
    extensions = {k[len(prefix) :]: v for k, v in options.items() if k.startswith(prefix)}
    for name, value in extensions.items():
        if not re.fullmatch(r"[A-Za-z]+", name) or name == "auth":
            raise ValueError(f"{prefix}{name}: not a valid extension name")
        if not re.fullmatch(r"[\x21-\x7e \t\r\n]+", value):
            raise ValueError(f"{prefix}{name}: not a valid extension value")
    return extensions


def unsecured_token(options: Mapping[str, str], now_ms: int) -> tuple[str, dict[str, str]]:
    """An unsecured JWS from the `unsecuredLogin*` options of an OAuthBearerLoginModule JAAS
    entry, and its SASL extensions; ValueError when the options do not make a token."""
    claims: dict[str, Any] = {}
    extensions = login_extensions(options, "unsecuredLoginExtension_")
    for key, value in options.items():
        kind, _, name = key.partition("_")
        if kind not in _CLAIM_OPTIONS:
            continue
        if name in _RESERVED_CLAIMS or not name:
            raise ValueError(f"{key}: the claim {name!r} cannot be set")
        if kind == "unsecuredLoginStringClaim":
            claims[name] = value
        elif kind == "unsecuredLoginNumberClaim":
            try:
                claims[name] = float(value) if "." in value else int(value)
            except ValueError:
                raise ValueError(f"{key}={value!r} is not a number") from None
        else:
            claims[name] = [item for item in value[1:].split(value[:1]) if item] if value else []
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "").strip() or "sub"
    if not isinstance(claims.get(principal_claim), str) or not claims[principal_claim].strip():
        raise ValueError(
            f"set unsecuredLoginStringClaim_{principal_claim}: the token's principal claim"
        )
    lifetime = options.get("unsecuredLoginLifetimeSeconds", "").strip() or "3600"
    if not lifetime.isdigit() or not int(lifetime):
        raise ValueError(f"unsecuredLoginLifetimeSeconds={lifetime!r} must be a positive integer")
    issued = now_ms / 1000
    claims = {"iat": issued, "exp": issued + int(lifetime), **claims}

    def part(obj: dict[str, Any]) -> str:
        text = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(text).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}.", extensions


class OAuthBearerClient:
    """One OAUTHBEARER exchange on the client's side, with a token made beforehand."""

    mechanism = OAUTHBEARER

    def __init__(self, token: str, extensions: Mapping[str, str]) -> None:
        pairs = "".join(f"{_SEPARATOR}{k}={v}" for k, v in extensions.items())
        self._initial = f"n,,{_SEPARATOR}auth=Bearer {token}{pairs}{_SEPARATOR}{_SEPARATOR}"
        self.complete = False

    def initial(self) -> bytes:
        return self._initial.encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if challenge:  # the server's error: acknowledge it, and it answers with the failure
            return _SEPARATOR.encode()
        self.complete = True
        return None
