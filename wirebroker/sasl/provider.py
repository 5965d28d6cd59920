"""What fetching from the OAuth/OIDC identity provider shares, for the JWKS tokens are verified
with (`jwks`) and this broker's own access token (`access_token`): Kafka's Retry, Kafka 3.9.1's
allowed-URL check, and a URL as it may be logged.

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

import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import TypeVar

import trio

from wirebroker.config import ConfigError
from wirebroker.system_properties import system_property

log = logging.getLogger(__name__)

ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"

T = TypeVar("T")


class FetchError(Exception):
    """A fetch from the identity provider failed; the message says why (never a secret or a
    token). `retryable` is False when trying again cannot help."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


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
