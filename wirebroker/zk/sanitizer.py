"""Kafka's Sanitizer: user and client ids as they are written into znode names (and quota
entities). Its own module so that quotas name their entities without importing the znodes'
classes (an embedded broker never reads a znode)."""

from __future__ import annotations

from urllib.parse import quote, unquote_plus


def sanitize(name: str) -> str:
    """A user or client id as Kafka's Sanitizer writes it into a znode name (URL-encoded,
    a space as %20)."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (Java's URLDecoder: `+` is a space too)."""
    return unquote_plus(name)
