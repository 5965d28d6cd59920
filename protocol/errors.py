"""The exceptions the codec raises, and who should catch them.

`protocol/` owns exactly two kinds of failure:

* the peer sent bytes we cannot decode -> :class:`ProtocolError` (and its subclasses). This is
  the one type malformed input ever raises; a connection that sees it should be closed.
* we were asked to write something the chosen version cannot carry -> :class:`EncodeError`.
  That is a bug on our side (or a caller choosing the wrong version), never the peer's fault.

Both derive from :class:`KafkaError`, which carries the Kafka :class:`ErrorCode` a broker would
answer with, so a handler can turn any of them into a per-partition or per-request error code.
"""

from __future__ import annotations

from protocol.error_codes import ErrorCode

__all__ = [
    "CorruptRecordError",
    "DecompressionLimitError",
    "EncodeError",
    "ErrorCode",
    "FrameTooLargeError",
    "KafkaError",
    "ProtocolError",
    "UnsupportedVersionError",
]


class KafkaError(Exception):
    """Base of every error the codec raises; carries the Kafka error code to answer with.

    Raised by nothing directly. Callers that turn exceptions into Kafka responses catch this
    and use :attr:`error_code`.
    """

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, *, error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class ProtocolError(KafkaError):
    """The remote peer sent bytes that are not a valid Kafka frame, message or record batch.

    Raised by every decoder in `protocol/` for any malformed input (short reads, lying lengths,
    bad varints, invalid UTF-8, ...). A server should log it and close the connection; nothing
    that was decoded from that frame may be trusted.
    """

    error_code = ErrorCode.CORRUPT_MESSAGE


class FrameTooLargeError(ProtocolError):
    """A frame's size prefix exceeds the configured maximum (or is negative).

    Raised by :class:`protocol.framing.FrameBuffer` before any buffer for the body is allocated.
    Close the connection, as Kafka does for `socket.request.max.bytes`.
    """

    error_code = ErrorCode.INVALID_REQUEST


class UnsupportedVersionError(ProtocolError):
    """A request names an API key or version this codec does not know.

    Raised by request decoding. For ApiVersions the caller answers with UNSUPPORTED_VERSION in the
    v0 layout (KIP-511, see :func:`protocol.headers.unsupported_api_versions_response`); for any
    other API it closes the connection.
    """

    error_code = ErrorCode.UNSUPPORTED_VERSION


class CorruptRecordError(ProtocolError):
    """A record batch fails its CRC or its framing is inconsistent.

    Raised by `protocol.records`. A broker answers the partition with CORRUPT_MESSAGE.
    """

    error_code = ErrorCode.CORRUPT_MESSAGE


class DecompressionLimitError(ProtocolError):
    """Decompressing a batch would exceed the caller's output limit (a decompression bomb).

    Raised by `protocol.compression`. A broker answers the partition with INVALID_RECORD
    or MESSAGE_TOO_LARGE; the memory was never allocated.
    """

    error_code = ErrorCode.INVALID_RECORD


class EncodeError(KafkaError):
    """A value cannot be written in the requested version (a local bug, not the peer's fault).

    Raised when encoding a message whose non-default field does not exist in the target version
    and is not marked ignorable, when null is written where the version is not nullable, or
    when a value does not fit its wire type. Fix the caller: pick another version or value.
    """

    error_code = ErrorCode.UNSUPPORTED_VERSION
