"""Whole frames: a header plus a body, for any API key and version.

This module owns the pairing of headers with bodies: which header version each API version uses,
the KIP-511 answer to an ApiVersions request of a version we do not know, and decoding a frame
(the bytes after the 4-byte size prefix) into a header and a message. It does no framing (see
`protocol.framing`) and no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from protocol.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from protocol.messages import APIS
from protocol.messages.api_versions import ApiVersionsResponse
from protocol.messages.headers import RequestHeader, ResponseHeader
from protocol.primitives import Reader, Writer
from protocol.schema import ApiInfo, Message
from protocol.spliced import write_spliced

API_VERSIONS_KEY = 18

_PEEK = struct.Struct(">hhi")
_KEY_VERSION = struct.Struct(">hh")


class RequestFrame:
    """A decoded request: its header and its body."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = ("body", "header")

    def __init__(self, header: RequestHeader, body: Message) -> None:
        self.header = header
        self.body = body

    @property
    def api_key(self) -> int:
        return self.header.request_api_key

    @property
    def api_version(self) -> int:
        return self.header.request_api_version


class ResponseFrame:
    """A decoded response: its header (just the correlation id, and tags in v1) and its body."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = ("body", "header")

    def __init__(self, header: ResponseHeader, body: Message) -> None:
        self.header = header
        self.body = body


def api_info(api_key: int) -> ApiInfo:
    try:
        return APIS[api_key]
    except KeyError:
        raise UnsupportedVersionError(f"unknown API key {api_key}") from None


def peek_request_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes every request header has."""
    if len(frame) < 8:
        raise ProtocolError("request frame shorter than a request header")
    return _PEEK.unpack_from(frame, 0)


#: (api key, version) -> (request header version, request class), filled as requests come.
_REQUEST_LAYOUT: dict[tuple[int, int], tuple[int, type[Message]]] = {}


def _request_layout(api_key: int, api_version: int) -> tuple[int, type[Message]]:
    layout = _REQUEST_LAYOUT.get((api_key, api_version))
    if layout is None:
        info = api_info(api_key)
        if not info.min_version <= api_version <= info.max_version:
            raise UnsupportedVersionError(f"{info.name} v{api_version} is not supported")
        layout = (info.request_header_version(api_version), info.request_class())
        _REQUEST_LAYOUT[api_key, api_version] = layout
    return layout


def decode_request(frame: bytes | bytearray | memoryview) -> RequestFrame:
    """Decode a request frame. Unknown keys and versions raise UnsupportedVersionError.

    Bytes left after the body are ignored, as Kafka ignores them.

    For ApiVersions of an unknown version the caller answers with
    :func:`unsupported_api_versions_response` (KIP-511) rather than closing the connection.
    """
    r = Reader(frame)
    if r.end < 8:
        raise ProtocolError("request frame shorter than a request header")
    header_version, request_class = _request_layout(*_KEY_VERSION.unpack_from(r.buf, 0))
    header = RequestHeader.read_from(r, header_version)
    body = request_class.read_from(r, header.request_api_version)
    # Bytes after the body are ignored, as Kafka's request parsing ignores them (librdkafka 2.16
    # sends three after an all-topics Metadata v12 request).
    return RequestFrame(header, body)


def encode_request_chunks(header: RequestHeader, body: Message) -> list[Any]:
    info = api_info(header.request_api_key)
    w = Writer()
    header.write_to(w, info.request_header_version(header.request_api_version))
    body.write_to(w, header.request_api_version)
    return w.chunks()


def encode_request(header: RequestHeader, body: Message) -> bytes:
    """A request frame (without the size prefix)."""
    return b"".join(encode_request_chunks(header, body))


def decode_response(
    frame: bytes | bytearray | memoryview, api_key: int, api_version: int
) -> ResponseFrame:
    """Decode a response frame to a request of `api_key` at `api_version`."""
    info = api_info(api_key)
    r = Reader(frame)
    header = ResponseHeader.read_from(r, info.response_header_version(api_version))
    body = info.response_class().read_from(r, api_version)
    if r.remaining():
        raise ProtocolError(f"{r.remaining()} bytes left after {info.name} response")
    return ResponseFrame(header, body)


#: (api key, version) -> response header version, filled as responses go.
_RESPONSE_HEADER: dict[tuple[int, int], int] = {}


def encode_response_chunks(
    header: ResponseHeader,
    body: Message,
    api_key: int,
    api_version: int,
    spliced: tuple[str, Sequence[bytes]] | None = None,
) -> list[Any]:
    """A response frame as buffers; `records` values stay chunks of their own (zero-copy).
    With `spliced` (an array field, its items' bytes), that array is written as those bytes
    (`protocol.spliced`)."""
    header_version = _RESPONSE_HEADER.get((api_key, api_version))
    if header_version is None:
        header_version = api_info(api_key).response_header_version(api_version)
        _RESPONSE_HEADER[api_key, api_version] = header_version
    w = Writer()
    header.write_to(w, header_version)
    if spliced is None:
        body.write_to(w, api_version)
    else:
        write_spliced(w, body, api_version, *spliced)
    return w.chunks()


def encode_response(header: ResponseHeader, body: Message, api_key: int, api_version: int) -> bytes:
    """A response frame (without the size prefix)."""
    return b"".join(encode_response_chunks(header, body, api_key, api_version))


def unsupported_api_versions_response(
    correlation_id: int, supported: tuple[int, int] | None = None
) -> bytes:
    """KIP-511: the answer to an ApiVersions request of a version we do not know.

    It is always laid out as ApiVersionsResponse v0 (header v0) with UNSUPPORTED_VERSION and,
    as Kafka does, the ApiVersions versions we do support so the client can retry with one.
    """
    info = APIS[API_VERSIONS_KEY]
    lo, hi = supported or (info.min_version, info.max_version)
    body = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=API_VERSIONS_KEY, min_version=lo, max_version=hi)
        ],
    )
    return encode_response(ResponseHeader(correlation_id=correlation_id), body, API_VERSIONS_KEY, 0)
