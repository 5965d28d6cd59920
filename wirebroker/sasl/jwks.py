"""The JSON Web Key Set (RFC 7517) secured OAUTHBEARER tokens are verified against: fetched
from `sasl.oauthbearer.jwks.endpoint.url`, kept in memory, refreshed off the event loop.

As Kafka's RefreshingHttpsJwks (an http/https URL): the set is fetched at start-up, before any
listener is served, then every `sasl.oauthbearer.jwks.endpoint.refresh.ms`; a token naming a key
id (`kid`) the set does not hold triggers an early refresh, at most once a minute per key id (16
key ids remembered, ids longer than 1000 characters ignored), and that token fails: the next one
finds the key. A refresh that fails is retried with exponential backoff from
`...retry.backoff.ms`, for at most `...retry.backoff.max.ms` in all, and then keeps the keys it
had (Kafka's "not updating local JWKS cache"), or, when the set it had is empty, still holds
none. A first fetch that fails holds no key: the broker does not start (a listener added at run
time is not started), as Kafka's RefreshingHttpsJwks.init fails the configuration of the
listener's callback handler ("Could not refresh JWKS"). As Kafka's
JwksFileVerificationKeyResolver, a `file:` URL is read once at start-up and never refreshed.

Every fetch runs in a worker thread (`trio.to_thread`); a token is checked on the loop against
the keys already in memory (`KeySet.key`, no I/O).

Differs from Kafka: a set that cannot be fetched at start-up is retried as a refresh is (Kafka
tries once) before the broker refuses to start; symmetric (`oct`) keys and keys whose `use` is
`enc` are skipped, so a token is only ever verified with a public key.

An https endpoint's TLS comes from the `ssl.*` options of the listener's OAUTHBEARER JAAS entry,
and redirects are followed, as `wirebroker.sasl.provider` says (jose4j's Get is Java's
HttpURLConnection).
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections import OrderedDict
from typing import Any

import trio

from wirebroker.config import ConfigError
from wirebroker.sasl.provider import (
    FetchError,
    ProviderTls,
    fetch_with_retry,
    http_exchange,
    monotonic_ms,
    shown_url,
)

log = logging.getLogger(__name__)

MISSING_KEY_IDS = 16  # Kafka's RefreshingHttpsJwks.MISSING_KEY_ID_CACHE_MAX_ENTRIES
MISSING_KEY_ID_RETRY_MS = 60_000  # ...MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
MAX_KEY_ID_LENGTH = 1000  # ...MISSING_KEY_ID_MAX_KEY_LENGTH
MAX_JWKS_BYTES = 1 << 20  # a key set is a few KiB; a bigger answer is refused, not read
FETCH_TIMEOUT_S = 10.0
#: The algorithms a key without `alg` verifies, by its `kty` (and EC's `crv`).
_ALGORITHMS = {
    "RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    "EC:P-256": ("ES256",),
    "EC:P-384": ("ES384",),
    "EC:P-521": ("ES512",),
    "OKP:Ed25519": ("EdDSA",),
    "OKP:Ed448": ("EdDSA",),
}


class JwksError(FetchError):
    """A key set that could not be fetched or read; the message says which and why."""


class VerificationKey:
    """One public key of the set and the algorithms it may verify."""

    __slots__ = ("key_id", "key", "algorithms")

    def __init__(self, key_id: str | None, key: Any, algorithms: tuple[str, ...]) -> None:
        self.key_id = key_id
        self.key = key
        self.algorithms = algorithms


class JwksEndpoint:
    """Where the key set comes from and how often it is fetched again."""

    __slots__ = ("url", "refresh_ms", "retry_backoff_ms", "retry_backoff_max_ms", "tls")

    def __init__(
        self,
        url: str,
        refresh_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        tls: ProviderTls | None = None,
    ) -> None:
        self.url = url
        self.refresh_ms = refresh_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        #: The JAAS entry's `ssl.*` options, for an https endpoint.
        self.tls = tls or ProviderTls({}, "sasl.jaas.config")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JwksEndpoint) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[str, int, int, int, ProviderTls]:
        return (
            self.url,
            self.refresh_ms,
            self.retry_backoff_ms,
            self.retry_backoff_max_ms,
            self.tls,
        )

    @property
    def shown(self) -> str:
        """The URL as logged: without a user name or password in it."""
        return shown_url(self.url)

    @property
    def is_file(self) -> bool:
        return urllib.parse.urlsplit(self.url).scheme.lower() == "file"


def parse_jwks(data: bytes) -> list[VerificationKey]:
    """The usable public keys of a JWKS document; JwksError when it is not one."""
    from jwt import PyJWK
    from jwt.exceptions import PyJWKError

    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise JwksError("not JSON") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JwksError('not a JWKS: no "keys" list')
    keys = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kty, crv, alg = entry.get("kty"), entry.get("crv"), entry.get("alg")
        allowed = _ALGORITHMS.get(str(kty) if kty == "RSA" else f"{kty}:{crv}", ())
        if alg is not None:
            allowed = (alg,) if alg in allowed else ()
        if not allowed:
            continue  # a symmetric or unknown key: never used to verify
        try:
            key = PyJWK(entry, allowed[0]).key
        except PyJWKError:
            continue
        kid = entry.get("kid")
        keys.append(VerificationKey(kid if isinstance(kid, str) else None, key, allowed))
    return keys


def fetch_jwks(url: str, tls: ProviderTls) -> list[VerificationKey]:
    """Blocking: the keys at `url` (http, https or file). Runs in a worker thread."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() == "file":
        try:
            with open(urllib.parse.unquote(parts.path), "rb") as f:
                data = f.read(MAX_JWKS_BYTES + 1)
        except OSError as e:
            raise JwksError(str(e)) from None
    else:
        try:
            answer = http_exchange(
                url,
                tls,
                headers={"Accept": "application/json"},
                connect_s=FETCH_TIMEOUT_S,
                read_s=FETCH_TIMEOUT_S,
                limit=MAX_JWKS_BYTES,
            )
        except FetchError as e:
            raise JwksError(str(e), retryable=e.retryable) from None
        if answer.status != 200:
            raise JwksError(f"HTTP {answer.status} {answer.reason}")
        data = answer.body
    if len(data) > MAX_JWKS_BYTES:
        raise JwksError(f"larger than {MAX_JWKS_BYTES} bytes")
    return parse_jwks(data)


def _key_ids(keys: list[VerificationKey]) -> str:
    return ", ".join(k.key_id or "no kid" for k in keys)


class KeySet:
    """The keys of one endpoint in memory: read on the loop, replaced by `run`'s fetches."""

    def __init__(self, endpoint: JwksEndpoint) -> None:
        self.endpoint = endpoint
        self.keys: list[VerificationKey] = []
        #: Why `run` could not fetch the set at all (None: fetched, or not tried yet).
        self.failure: str | None = None
        self._missing: OrderedDict[str, int] = OrderedDict()  # key id -> next refresh allowed
        self._expedite = trio.Event()
        self._last_error = "see the warnings above"

    def candidates(self, key_id: str | None, algorithm: str) -> list[VerificationKey]:
        """The keys a token signed with `algorithm` under `key_id` may verify with; none
        with a key id schedules an early refresh (rate limited, as Kafka's)."""
        found = [
            k
            for k in self.keys
            if algorithm in k.algorithms and (key_id is None or k.key_id == key_id)
        ]
        if not found and key_id is not None:
            self._maybe_expedite(key_id)
        return found

    def _maybe_expedite(self, key_id: str) -> None:
        if len(key_id) > MAX_KEY_ID_LENGTH or self.endpoint.is_file:
            return
        now = monotonic_ms()
        if self._missing.get(key_id, now) > now:
            return
        self._missing[key_id] = now + MISSING_KEY_ID_RETRY_MS
        self._missing.move_to_end(key_id)
        while len(self._missing) > MISSING_KEY_IDS:
            self._missing.popitem(last=False)
        self._expedite.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetch the set (ConfigError when it cannot be had: the broker does not start),
        report started, then refresh it on the interval and when a key id is missing."""
        keys = await self._fetch_with_retry("giving up: no key is held yet")
        if keys is None:
            self.failure = (
                f"cannot fetch the JWKS of sasl.oauthbearer.jwks.endpoint.url="
                f"{self.endpoint.shown} ({self._last_error}); OAUTHBEARER tokens cannot be "
                "verified without it"
            )
            raise ConfigError(self.failure)
        self._replace(keys)
        task_status.started()
        if self.endpoint.is_file:
            return
        while True:
            with trio.move_on_after(self.endpoint.refresh_ms / 1000):
                await self._expedite.wait()
            self._expedite = trio.Event()
            keys = await self._fetch_with_retry(self._kept())
            if keys is not None:
                self._replace(keys)

    def _replace(self, keys: list[VerificationKey]) -> None:
        self.keys = keys
        for key in keys:
            if key.key_id is not None:
                self._missing.pop(key.key_id, None)
        log.info(
            "JWKS of %s: %d verification key(s) (%s)",
            self.endpoint.shown,
            len(keys),
            _key_ids(keys),
        )

    def _kept(self) -> str:
        """What a refresh that failed leaves (Kafka's "not updating local JWKS cache")."""
        if not self.keys:
            return "still holding no key: tokens are refused until a refresh finds one"
        return f"keeping the {len(self.keys)} key(s) held ({_key_ids(self.keys)})"

    async def _fetch_with_retry(self, giving_up: str) -> list[VerificationKey] | None:
        """The keys, fetched as Kafka's Retry does; None when every attempt failed (the last
        failure logged with `giving_up`)."""
        endpoint = self.endpoint
        try:
            return await fetch_with_retry(
                lambda: fetch_jwks(endpoint.url, endpoint.tls),
                f"JWKS fetch of {endpoint.shown}",
                endpoint.retry_backoff_ms,
                endpoint.retry_backoff_max_ms,
                giving_up,
            )
        except FetchError as e:
            self._last_error = str(e)
            return None
