"""What fetching from the OAuth/OIDC identity provider shares, for the JWKS tokens are verified
with (`jwks`) and this broker's own access token (`access_token`): Kafka's Retry, Kafka 3.9.1's
allowed-URL check, a URL as it may be logged, the TLS of an https endpoint and the HTTP
exchange, redirects followed.

TLS (Kafka's JaasOptionsUtils): an https endpoint's context is built from the `ssl.*` options
of the listener's OAUTHBEARER JAAS entry (`ssl.truststore.location`, `.type`, `.password`,
`ssl.keystore.*`, `ssl.key.password`, `ssl.protocol`, ...) by `wirebroker.tls.client_context`,
as a listener's from its keys: PEM or PKCS12 stores; without a truststore, the system's CAs.
The host name is always checked, as Java's HttpsURLConnection checks it whatever
`ssl.endpoint.identification.algorithm` says. The context is made again for each fetch, in its
worker thread (the event loop never reads the store files), so a store replaced on disk is used
at the next fetch.

Redirects, as Java's HttpURLConnection (which Kafka's token request and jose4j's JWKS GET use,
with its defaults): 300-303 and 307 with a `Location` are followed, at most 20 times
(`http.maxRedirects`), to the same scheme only (an https endpoint never goes on over http: the
redirect is then the answer); a POST answered 300-303 goes on as a GET without the body and the
credentials, a 307 repeats it. Differs from Java: the credentials (`Authorization`) go to the
endpoint's own host and port only, never to another one a redirect names.

Kafka's Retry: attempts until `retry.backoff.max.ms` has passed, waiting `retry.backoff.ms`
doubled after each failure; a failure retrying cannot help (Kafka's UnretryableException: the
provider refused the request) ends them at once. Each attempt runs in a worker thread.

Allowed URLs: Kafka 3.9.1 reads the JVM system property
`org.apache.kafka.sasl.oauthbearer.allowed.urls` (comma-separated URLs). When it is set, a JWKS
or token endpoint URL that is not one of them (exactly, once trimmed) is refused where the
configuration is read; unset, every URL is allowed (3.9.1 keeps older configurations working;
Kafka 4.0 allows none). wirebroker has no JVM: it reads it as `system_properties` says (an
environment variable of that name or the `-D...=` word of `KAFKA_OPTS`).
"""

from __future__ import annotations

import http.client
import logging
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TypeVar

import trio

from wirebroker.config import ConfigError
from wirebroker.system_properties import system_property

log = logging.getLogger(__name__)

ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
#: The answers Java's HttpURLConnection follows (not 304, 305, 306 nor 308).
REDIRECTS = frozenset({300, 301, 302, 303, 307})
MAX_REDIRECTS = 20  # Java's http.maxRedirects
_NAME_MISMATCH = (62, 64)  # OpenSSL's verify codes of a certificate for another host or address

T = TypeVar("T")


class FetchError(Exception):
    """A fetch from the identity provider failed; the message says why (never a secret or a
    token). `retryable` is False when trying again cannot help."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ProviderTlsError(FetchError):
    """No TLS session with an https provider, so no request was answered: a store option that
    cannot be read (not retried), a certificate that did not verify or a failed handshake
    (retried, as Kafka's Retry retries its SSLHandshakeException). The message says why and,
    for the first two, which JAAS option to set."""


def shown_url(url: str) -> str:
    """`url` as logged: without a user name or password in it."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def allowed_urls() -> frozenset[str] | None:
    """The URLs OAUTHBEARER endpoints may use; None: any."""
    text = system_property(ALLOWED_URLS)
    return None if text is None else frozenset(u.strip() for u in text.split(","))


def endpoint_url(key: str, url: str) -> str:
    """`url`, the value of `key`, if it may be used; ConfigError (saying what to set) if not."""
    if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https", "file"):
        raise ConfigError(f"{key}={shown_url(url)}: only http, https and file URLs are supported")
    allowed = allowed_urls()
    if allowed is not None and url not in allowed:
        raise ConfigError(
            f"{key}={shown_url(url)} is not allowed: the environment variable {ALLOWED_URLS} "
            "(or its -D in KAFKA_OPTS) lists the URLs OAUTHBEARER endpoints may use; add it there"
        )
    return url


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


async def fetch_with_retry(
    fetch: Callable[[], T], what: str, backoff_ms: int, backoff_max_ms: int, giving_up: str
) -> T:
    """`fetch()` (blocking: run in a worker thread), retried as Kafka's Retry; each failure is
    logged as `what` and why, the last with `giving_up`, and the last FetchError raised."""
    deadline = monotonic_ms() + backoff_max_ms
    attempt = 0
    while True:
        attempt += 1
        try:
            return await trio.to_thread.run_sync(fetch, abandon_on_cancel=True)
        except FetchError as e:
            wait_ms = min(backoff_ms * 2 ** (attempt - 1), deadline - monotonic_ms())
            if not e.retryable:
                wait_ms = 0
            log.warning(
                "%s, attempt %d, failed: %s; %s",
                what,
                attempt,
                e,
                f"retrying in {wait_ms} ms" if wait_ms > 0 else giving_up,
            )
            if wait_ms <= 0:
                raise
            await trio.sleep(wait_ms / 1000)


class ProviderTls:
    """The `ssl.*` options of the OAUTHBEARER JAAS entry at `jaas_key`, for an https endpoint:
    a `wirebroker.tls.SslSettings`. Its repr shows no option (passwords are among them)."""

    __slots__ = ("options", "jaas_key")

    def __init__(self, options: Mapping[str, str], jaas_key: str) -> None:
        self.options = tuple(sorted((k, v) for k, v in options.items() if k.startswith("ssl.")))
        self.jaas_key = jaas_key

    def __repr__(self) -> str:
        return f"ProviderTls({self.jaas_key!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProviderTls) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (self.options, self.jaas_key)

    def get(self, key: str) -> str | None:
        value = dict(self.options).get(key)
        return value.strip() if value is not None and value.strip() else None

    def name(self, key: str) -> str:
        return f"the {key} option of {self.jaas_key}"

    def context(self) -> ssl.SSLContext:
        """Blocking (reads the stores): the context; ProviderTlsError (not retryable) saying
        which option is wrong."""
        from wirebroker.tls import client_context

        try:
            context = client_context(self)
        except ConfigError as e:
            raise ProviderTlsError(str(e), retryable=False) from None
        context.check_hostname = True
        return context

    def untrusted(self, e: ssl.SSLCertVerificationError, host: str) -> str:
        """What to set when the provider's certificate did not verify."""
        if e.verify_code in _NAME_MISMATCH:
            return f"{e.verify_message}: the provider's certificate is not for {host}"
        where = self.get("ssl.truststore.location") or self.get("ssl.truststore.certificates")
        trusted = f"the truststore {where}" if where else "the system's trusted CAs"
        return (
            f"{e.verify_message}: the provider's certificate is not trusted by {trusted}; set "
            f"{self.name('ssl.truststore.location')} (and ssl.truststore.type, "
            "ssl.truststore.password) to a truststore holding its CA"
        )


class Answer:
    """An HTTP answer: its status, reason and body (at most the `limit` asked, plus a byte)."""

    __slots__ = ("status", "reason", "body")

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.body = body


def _origin(parts: urllib.parse.SplitResult) -> tuple[str, str, int | None]:
    return (parts.scheme.lower(), (parts.hostname or "").lower(), parts.port)


def http_exchange(
    url: str,
    tls: ProviderTls,
    *,
    method: str = "GET",
    body: bytes | None = None,
    headers: Mapping[str, str],
    connect_s: float,
    read_s: float,
    limit: int,
) -> Answer:
    """Blocking: `method` to `url` (http or https, TLS from `tls`), redirects followed as
    Java's HttpURLConnection follows them; FetchError when no answer came."""
    origin = _origin(urllib.parse.urlsplit(url))
    sent = dict(headers)
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        answer, location = _exchange(parts, tls, method, body, sent, connect_s, read_s, limit)
        if answer.status not in REDIRECTS or location is None:
            return answer
        target = urllib.parse.urljoin(url, location.strip())
        target_parts = urllib.parse.urlsplit(target)
        if target_parts.scheme.lower() != parts.scheme.lower():
            return answer  # Java follows no redirect to another protocol
        log.info("%s redirects (HTTP %d) to %s", shown_url(url), answer.status, shown_url(target))
        if method == "POST" and answer.status != 307:
            method, body = "GET", None
            sent = {"Accept": sent.get("Accept", "*/*")}
        if _origin(target_parts) != origin:
            sent.pop("Authorization", None)
        url = target
    raise FetchError(f"redirected more than {MAX_REDIRECTS} times")


def _exchange(
    parts: urllib.parse.SplitResult,
    tls: ProviderTls,
    method: str,
    body: bytes | None,
    headers: Mapping[str, str],
    connect_s: float,
    read_s: float,
    limit: int,
) -> tuple[Answer, str | None]:
    host = parts.hostname or ""
    connection: http.client.HTTPConnection
    try:
        if parts.scheme.lower() == "https":
            connection = http.client.HTTPSConnection(
                host, parts.port, timeout=connect_s, context=tls.context()
            )
        else:
            connection = http.client.HTTPConnection(host, parts.port, timeout=connect_s)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            connection.connect()
            assert connection.sock is not None
            connection.sock.settimeout(read_s)
            connection.request(method, path, body, dict(headers))
            response = connection.getresponse()
            data = response.read(limit + 1)
        finally:
            connection.close()
    except ssl.SSLCertVerificationError as e:
        raise ProviderTlsError(tls.untrusted(e, host)) from None
    except ssl.SSLError as e:
        raise ProviderTlsError(f"SSLError: {e}") from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise FetchError(f"{type(e).__name__}: {e}") from None
    return Answer(response.status, response.reason, data), response.getheader("Location")
