"""The controller's exceptions, in a module of their own so that a broker that is not in a
cluster can name them (the controller APIs' handlers catch them) without importing the
controller, ZooKeeper and kazoo."""

from __future__ import annotations

from protocol.errors import ErrorCode


class NotController(Exception):
    """Raised by `Controller.call` when this broker is not the active controller; the handler
    answers NOT_CONTROLLER so the client asks the controller named in Metadata."""


class ControllerError(Exception):
    """Raised by a controller operation that refuses a request; the handler answers with
    `code` (a Kafka error code) and the message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
