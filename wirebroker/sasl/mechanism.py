"""What every mechanism's server and client are (Java's `SaslServer`, `SaslClient`) and how
they fail.

A mechanism's server takes the client's tokens one at a time and answers each with a token
(possibly empty); once `complete`, `username` is the authenticated user. It fails in one of two
ways, as in Kafka: :class:`SaslAuthenticationFailed` carries a message safe to send to the client,
any other :class:`SaslFailure` is answered with a standard message (its own may say whether a
user exists) and only logged, but :class:`SaslPrincipalFailure`, answered as a success before
the close, and :class:`SaslRetriable`, not answered, as Kafka.

A mechanism's client (this broker logging in to another) gives its first token with `initial()`
and answers each server token with `evaluate()`: the next token, or None once it is `complete`.
It raises :class:`SaslFailure` when the server's answer does not check out (a SCRAM server that
does not know the password), :class:`SaslRetriable` when the failure is transient.
"""

from __future__ import annotations

from typing import Protocol


class SaslFailure(Exception):
    """The exchange failed; the message is for the broker's log only (Java's SaslException)."""


class SaslAuthenticationFailed(SaslFailure):
    """The exchange failed with a message the client may see (SaslAuthenticationException)."""


class SaslRetriable(SaslFailure):
    """A transient failure (Kafka's retriable Kerberos errors: a replayed authenticator, a
    ticket or client not yet valid). As Kafka, which handles it as an I/O error: a server
    closes the connection at once, unanswered; a client takes it for a lost connection and
    connects again, not for a refused login."""


class SaslPrincipalFailure(SaslFailure):
    """The exchange succeeded but its principal cannot be made (Kafka's principal builder
    failing: a Kerberos name no rule maps). Kafka answers the last token as a success, then
    closes the connection at its next request, without the failed-login delay; `answer` is
    that last token's answer."""

    def __init__(self, message: str, answer: bytes) -> None:
        super().__init__(message)
        self.answer = answer


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    #: The authenticated user once complete; the user the client claims, if known, before.
    username: str | None
    #: When the credential the client proved ends (epoch ms: an OAUTHBEARER token's `exp`),
    #: which bounds its session; None when it does not end.
    expires_ms: int | None
    #: Whether `evaluate` may block on I/O (run in a worker thread, then).
    blocking: bool

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token; raises SaslFailure."""
        ...


class SaslClient(Protocol):
    mechanism: str
    complete: bool

    def initial(self) -> bytes:
        """The client's first token."""
        ...

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The answer to the server's token; None once the exchange is complete."""
        ...
