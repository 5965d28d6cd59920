"""What every mechanism's server is (Java's `SaslServer`) and how it fails.

A mechanism's server takes the client's tokens one at a time and answers each with a token
(possibly empty); once `complete`, `username` is the authenticated user. It fails in one of two
ways, as in Kafka: :class:`SaslAuthenticationFailed` carries a message safe to send to the client,
any other :class:`SaslFailure` is answered with a standard message (its own may say whether a
user exists) and only logged.
"""

from __future__ import annotations

from typing import Protocol


class SaslFailure(Exception):
    """The exchange failed; the message is for the broker's log only (Java's SaslException)."""


class SaslAuthenticationFailed(SaslFailure):
    """The exchange failed with a message the client may see (SaslAuthenticationException)."""


class SaslServer(Protocol):
    mechanism: str

    @property
    def complete(self) -> bool: ...

    @property
    def username(self) -> str | None:
        """The authenticated user once complete; the user the client claims, if known, before."""
        ...

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token; raises SaslFailure."""
        ...
