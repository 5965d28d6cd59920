"""This broker's own OAUTHBEARER access token, for its logins to its peers: fetched from the
identity provider by the OAuth client-credentials grant and kept fresh, as Kafka 3.9's
OAuthBearerLoginCallbackHandler (HttpAccessTokenRetriever, LoginAccessTokenValidator) and
ExpiringCredentialRefreshingLogin do.

The request: a POST to `sasl.oauthbearer.token.endpoint.url` with `Authorization: Basic
base64(clientId:clientSecret)` (the JAAS options; each URL-encoded first when
`sasl.oauthbearer.header.urlencode=true`), `Accept: application/json`, `Cache-Control:
no-cache`, the form body `grant_type=client_credentials` and `&scope=<scope>` when the JAAS
option `scope` is set; `sasl.login.connect.timeout.ms` and `sasl.login.read.timeout.ms` bound
it. A 200 or 201 answer's JSON `access_token` is the token. A refusal Kafka does not retry
(400-407, 409-415, 501, 505: a wrong client secret is 401) ends the attempts at once; any other
failure is retried as Kafka's Retry (`sasl.login.retry.backoff.ms`, doubled after each, for at
most `sasl.login.retry.backoff.max.ms` in all: `wirebroker.sasl.provider`). A `file:` URL names
a file holding the token.

The token is checked as LoginAccessTokenValidator checks it, signature aside (the peers verify
it): three dot-separated parts, a base64url JSON payload with `exp` (a non-negative number), the
`sasl.oauthbearer.sub.claim.name` claim (`sub`: a string, not blank), `iat`, if present,
non-negative, and the `sasl.oauthbearer.scope.claim.name` claim's scopes not blank, none twice.

It is fetched again, as Kafka's refresher decides, at `sasl.login.refresh.window.factor` (0.8)
plus up to `...window.jitter` (0.05) of its lifetime since `iat` (since its fetch, without
one), but no sooner than `sasl.login.refresh.min.period.seconds` (60) from now and no later than
`sasl.login.refresh.buffer.seconds` (300) before `exp`; a token with less than those two
together left is fetched again at the factor (with jitter) of what it has left. A refresh that
fails keeps the token held and is tried again 10 s later, as Kafka's.

Every fetch runs in a worker thread (`trio.to_thread`), before the broker needs the token
(`AccessTokenLogin.run`, before the broker connects to a peer) and on refresh; a login reads the
token held, on the loop. Neither the client secret nor a token is ever logged or in a repr.

Differs from Kafka: a token that has already expired when it arrives is a failed fetch (Kafka
logs it and stops refreshing); unset, the connect and read timeouts are 10 s each (Kafka's JDK
waits without end); a `file:` token is read again at each refresh (Kafka reads it once).

An https endpoint's TLS comes from the JAAS entry's `ssl.*` options, and redirects are followed,
as `wirebroker.sasl.provider` says.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import random
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

import trio

from wirebroker.config import ConfigError
from wirebroker.sasl.provider import (
    FetchError,
    ProviderTls,
    ProviderTlsError,
    fetch_with_retry,
    http_exchange,
    shown_url,
)

log = logging.getLogger(__name__)

#: Kafka's HttpAccessTokenRetriever.UNRETRYABLE_HTTP_CODES.
UNRETRYABLE_STATUS = frozenset(
    {400, 401, 402, 403, 404, 405, 406, 407, 409, 410, 411, 412, 413, 414, 415, 501, 505}
)
#: Kafka's ExpiringCredentialRefreshingLogin.DELAY_SECONDS_BEFORE_NEXT_RETRY_WHEN_RELOGIN_FAILS.
RETRY_FAILED_REFRESH_S = 10.0
DEFAULT_TIMEOUT_MS = 10_000
MAX_ANSWER_BYTES = 1 << 20  # a token answer is a few KiB; a bigger one is refused, not read
_ERROR_SHOWN = 300  # characters of an error answer shown in the log


class RefreshWindow:
    """Kafka's `sasl.login.refresh.*`: when a token is fetched again."""

    __slots__ = ("factor", "jitter", "min_period_s", "buffer_s")

    def __init__(
        self,
        factor: float = 0.8,
        jitter: float = 0.05,
        min_period_s: int = 60,
        buffer_s: int = 300,
    ) -> None:
        self.factor = factor
        self.jitter = jitter
        self.min_period_s = min_period_s
        self.buffer_s = buffer_s

    def _key(self) -> tuple[float, float, int, int]:
        return (self.factor, self.jitter, self.min_period_s, self.buffer_s)

    def refresh_ms(self, token: AccessToken, now_ms: int, rng: random.Random) -> int:
        """When to fetch `token`'s successor (epoch ms): ExpiringCredentialRefreshingLogin's
        `refreshMs`."""
        expires = token.expires_ms
        share = self.factor + self.jitter * rng.random()
        if now_ms + 1000 * (self.min_period_s + self.buffer_s) > expires:
            return now_ms + int((expires - now_ms) * share)
        start = token.issued_ms if token.issued_ms is not None else now_ms
        proposed = start + int((expires - start) * share)
        proposed = min(proposed, expires - 1000 * self.buffer_s)
        return max(proposed, now_ms + 1000 * self.min_period_s)


class TokenEndpoint:
    """Where and how this broker gets its token. It holds the client secret: no repr shows it,
    and `jaas_key` names where it is set (the key, never its value)."""

    __slots__ = (
        "url",
        "client_id",
        "_client_secret",
        "scope",
        "extensions",
        "urlencode_header",
        "retry_backoff_ms",
        "retry_backoff_max_ms",
        "connect_timeout_ms",
        "read_timeout_ms",
        "sub_claim",
        "scope_claim",
        "refresh",
        "jaas_key",
        "tls",
    )

    def __init__(
        self,
        url: str,
        client_id: str,
        client_secret: str,
        *,
        jaas_key: str,
        scope: str | None = None,
        extensions: Mapping[str, str] | None = None,
        urlencode_header: bool = False,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 10_000,
        connect_timeout_ms: int | None = None,
        read_timeout_ms: int | None = None,
        sub_claim: str = "sub",
        scope_claim: str = "scope",
        refresh: RefreshWindow | None = None,
        tls: ProviderTls | None = None,
    ) -> None:
        self.url = url
        self.client_id = client_id
        self._client_secret = client_secret
        self.jaas_key = jaas_key
        self.scope = scope
        self.extensions = dict(extensions or {})
        self.urlencode_header = urlencode_header
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.read_timeout_ms = read_timeout_ms
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.refresh = refresh or RefreshWindow()
        #: The JAAS entry's `ssl.*` options, for an https endpoint.
        self.tls = tls or ProviderTls({}, jaas_key)

    def __repr__(self) -> str:
        return f"TokenEndpoint({shown_url(self.url)!r}, client_id={self.client_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenEndpoint) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[Any, ...]:
        return (
            self.url,
            self.client_id,
            self._client_secret,
            self.scope,
            tuple(sorted(self.extensions.items())),
            self.urlencode_header,
            self.retry_backoff_ms,
            self.retry_backoff_max_ms,
            self.connect_timeout_ms,
            self.read_timeout_ms,
            self.sub_claim,
            self.scope_claim,
            self.refresh._key(),
            self.tls,
        )

    @property
    def is_file(self) -> bool:
        return urllib.parse.urlsplit(self.url).scheme.lower() == "file"

    def authorization(self) -> str:
        """The Basic authorization of the client credentials (RFC 7617, Kafka's
        `formatAuthorizationHeader`)."""
        client_id, secret = self.client_id.strip(), self._client_secret.strip()
        if self.urlencode_header:
            client_id, secret = urllib.parse.quote_plus(client_id), urllib.parse.quote_plus(secret)
        return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()

    def request_body(self) -> bytes:
        body = "grant_type=client_credentials"
        if self.scope and self.scope.strip():
            body += "&scope=" + urllib.parse.quote_plus(self.scope.strip())
        return body.encode()


class AccessToken:
    """A token checked as LoginAccessTokenValidator checks it; its repr leaves the token out."""

    __slots__ = ("value", "principal", "scope", "expires_ms", "issued_ms")

    def __init__(
        self,
        value: str,
        principal: str,
        scope: frozenset[str],
        expires_ms: int,
        issued_ms: int | None,
    ) -> None:
        self.value = value
        self.principal = principal
        self.scope = scope
        self.expires_ms = expires_ms
        self.issued_ms = issued_ms

    def __repr__(self) -> str:
        return f"AccessToken(principal={self.principal!r}, expires_ms={self.expires_ms})"


def _number_claim(claims: Mapping[str, Any], name: str) -> int | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FetchError(f"the token's {name} claim is not a number", retryable=False)
    if value < 0:
        raise FetchError(f"the token's {name} claim must be non-negative", retryable=False)
    return int(value) * 1000


def validate_access_token(value: str, sub_claim: str, scope_claim: str) -> AccessToken:
    """LoginAccessTokenValidator's checks of a fetched token (its signature is the peers' to
    verify); FetchError (not retryable) saying what is wrong, never the token."""
    parts = value.split(".")
    if len(parts) != 3 or not all(parts):
        raise FetchError(
            "the token is not a JWT (three parts: header, payload and signature)", retryable=False
        )
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        raise FetchError("the token's payload is not base64url JSON", retryable=False) from None
    if not isinstance(payload, dict):
        raise FetchError("the token's payload is not a JSON object", retryable=False)
    raw_scope = payload.get(scope_claim)
    items = [raw_scope] if isinstance(raw_scope, str) else raw_scope
    scope: set[str] = set()
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, str) or not item.strip():
            raise FetchError(
                f"the token's {scope_claim} claim holds a blank scope", retryable=False
            )
        if item.strip() in scope:
            raise FetchError(
                f"the token's {scope_claim} claim repeats {item.strip()}", retryable=False
            )
        scope.add(item.strip())
    expires_ms = _number_claim(payload, "exp")
    if expires_ms is None:
        raise FetchError("the token has no exp claim", retryable=False)
    subject = payload.get(sub_claim)
    if not isinstance(subject, str) or not subject.strip():
        raise FetchError(f"the token has no {sub_claim} claim (a string)", retryable=False)
    issued_ms = _number_claim(payload, "iat")
    return AccessToken(value, subject.strip(), frozenset(scope), expires_ms, issued_ms)


def _error_summary(data: bytes) -> str:
    """Kafka's `formatErrorMessage`: an OAuth error answer's `error` and `error_description`
    (or Okta's `errorCode` and `errorSummary`), else the start of the answer."""
    text = data.decode("utf-8", "replace").strip()
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        answer = None
    if isinstance(answer, dict):
        for code, description in (("error", "error_description"), ("errorCode", "errorSummary")):
            if code in answer:
                return f"{answer[code]} - {answer.get(description, '')}"
    return text[:_ERROR_SHOWN].encode("unicode_escape").decode() or "no answer body"


def _post(endpoint: TokenEndpoint) -> bytes:
    """Blocking: the token endpoint's answer to the client-credentials request."""
    answer = http_exchange(
        endpoint.url,
        endpoint.tls,
        method="POST",
        body=endpoint.request_body(),
        headers={
            "Accept": "application/json",
            "Authorization": endpoint.authorization(),
            "Cache-Control": "no-cache",
            "Content-Type": "application/x-www-form-urlencoded",
        },
        connect_s=(endpoint.connect_timeout_ms or DEFAULT_TIMEOUT_MS) / 1000,
        read_s=(endpoint.read_timeout_ms or DEFAULT_TIMEOUT_MS) / 1000,
        limit=MAX_ANSWER_BYTES,
    )
    data = answer.body
    if answer.status not in (200, 201):
        raise FetchError(
            f"HTTP {answer.status} {answer.reason} ({_error_summary(data)})",
            retryable=answer.status not in UNRETRYABLE_STATUS,
        )
    if not data.strip():
        raise FetchError(f"HTTP {answer.status} with an empty answer")
    if len(data) > MAX_ANSWER_BYTES:
        raise FetchError(f"an answer larger than {MAX_ANSWER_BYTES} bytes", retryable=False)
    return data


def fetch_access_token(endpoint: TokenEndpoint, now_ms: int) -> AccessToken:
    """Blocking: a token from `endpoint`, checked (runs in a worker thread); FetchError."""
    if endpoint.is_file:
        path = urllib.parse.unquote(urllib.parse.urlsplit(endpoint.url).path)
        try:
            with open(path, encoding="utf-8") as f:
                value = f.read(MAX_ANSWER_BYTES).strip()
        except (OSError, UnicodeDecodeError) as e:
            raise FetchError(f"cannot read the token file: {e}") from None
    else:
        try:
            answer = json.loads(_post(endpoint))
        except (ValueError, RecursionError):
            raise FetchError("the token endpoint's answer is not JSON", retryable=False) from None
        got = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(got, str) or not got.strip():
            keys = ", ".join(sorted(map(str, answer))) if isinstance(answer, dict) else "none"
            raise FetchError(
                f"the token endpoint's answer has no access_token (its keys: {keys})",
                retryable=False,
            )
        value = got.strip()
    token = validate_access_token(value, endpoint.sub_claim, endpoint.scope_claim)
    if token.expires_ms <= now_ms:
        raise FetchError(
            f"the token expired at {token.expires_ms // 1000} s, before it arrived (is this "
            "host's clock right?)",
            retryable=False,
        )
    return token


def _wall_ms() -> int:
    return int(time.time() * 1000)


class AccessTokenLogin:
    """This broker's token: fetched before the broker needs it (`run`), read on the loop by
    each login (`token`), fetched again before it expires."""

    def __init__(self, endpoint: TokenEndpoint, listener_name: str) -> None:
        self.endpoint = endpoint
        self.listener_name = listener_name
        self.token: AccessToken | None = None
        self._fetched = trio.Event()
        self._refresh_now = trio.Event()
        self._rng = random.Random()
        self._refresh_at_ms = 0

    async def wait_token(self) -> AccessToken:
        """The token, once there is one."""
        await self._fetched.wait()
        assert self.token is not None
        return self.token

    def follow(self, endpoint: TokenEndpoint) -> None:
        """Fetch from `endpoint` from now on, starting at once (its JAAS config or keys changed
        at run time); the token held serves until the first fetch succeeds."""
        if endpoint != self.endpoint:
            self.endpoint = endpoint
            self._refresh_now.set()

    async def run(
        self,
        *,
        at_start: bool = True,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Fetch the token (`at_start`: ConfigError when it cannot be had, and the broker does
        not start; later, for a login changed at run time, tried again every 10 s), report
        started, then fetch it again before it expires, for ever."""
        while True:
            try:
                token = await self._fetch("giving up")
                break
            except FetchError as e:
                if at_start:
                    raise ConfigError(self._refusal(e)) from None
                await trio.sleep(RETRY_FAILED_REFRESH_S)
        self._hold(token)
        task_status.started()
        while True:
            await self._wait_refresh(self._refresh_at_ms - _wall_ms())
            while True:
                try:
                    token = await self._fetch(
                        f"keeping the token held (it expires at {token.expires_ms // 1000} s); "
                        f"trying again in {RETRY_FAILED_REFRESH_S:.0f} s"
                    )
                    break
                except FetchError:
                    await self._wait_refresh(RETRY_FAILED_REFRESH_S * 1000)
            self._hold(token)

    def _refusal(self, e: FetchError) -> str:
        """Why the broker does not start without its token, and what to check: after a TLS
        failure the provider answered nothing, so the credentials are not in doubt (the reason names the
        JAAS option to set when one is wrong)."""
        what = (
            f"cannot get this broker's OAUTHBEARER access token from "
            f"sasl.oauthbearer.token.endpoint.url={shown_url(self.endpoint.url)}: {e}. The "
            "broker logs in to the other brokers with it"
        )
        if isinstance(e, ProviderTlsError):
            return what
        return (
            f"{what}: check the clientId, clientSecret and scope of {self.endpoint.jaas_key} "
            "and that the URL is the identity provider's token endpoint"
        )

    async def _wait_refresh(self, delay_ms: float) -> None:
        """Until `delay_ms` has passed or `follow` asks for a fetch at once."""
        with trio.move_on_after(max(0.0, delay_ms) / 1000):
            await self._refresh_now.wait()
        self._refresh_now = trio.Event()

    async def _fetch(self, giving_up: str) -> AccessToken:
        endpoint = self.endpoint
        return await fetch_with_retry(
            lambda: fetch_access_token(endpoint, _wall_ms()),
            f"access token fetch from {shown_url(endpoint.url)}",
            endpoint.retry_backoff_ms,
            endpoint.retry_backoff_max_ms,
            giving_up,
        )

    def _hold(self, token: AccessToken) -> None:
        self.token = token
        self._fetched.set()
        now = _wall_ms()
        self._refresh_at_ms = self.endpoint.refresh.refresh_ms(token, now, self._rng)
        log.info(
            "access token for this broker's logins on %s: principal %s, expires in %.1f s, "
            "fetched again in %.1f s",
            self.listener_name,
            token.principal,
            (token.expires_ms - now) / 1000,
            (self._refresh_at_ms - now) / 1000,
        )
