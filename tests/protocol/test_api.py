"""Frames: header versions per API version, KIP-511, and whole-frame decode/encode rules."""

from __future__ import annotations

import pytest

from protocol.api import (
    decode_request,
    decode_response,
    encode_request,
    encode_response_chunks,
    peek_request_header,
    unsupported_api_versions_response,
)
from protocol.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from protocol.messages import API_KEYS_BY_NAME, APIS
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from protocol.messages.fetch import FetchResponse
from protocol.messages.headers import RequestHeader, ResponseHeader
from protocol.messages.metadata import MetadataRequest


@pytest.mark.parametrize(
    ("api", "version", "request_header", "response_header"),
    [
        ("Produce", 8, 1, 0),
        ("Produce", 9, 2, 1),
        ("Fetch", 12, 2, 1),
        ("ApiVersions", 2, 1, 0),
        ("ApiVersions", 3, 2, 0),  # ApiVersions responses are always header v0
        ("ControlledShutdown", 0, 0, 0),
        ("ControlledShutdown", 1, 1, 0),
        ("ControlledShutdown", 3, 2, 1),
    ],
)
def test_header_versions(api: str, version: int, request_header: int, response_header: int) -> None:
    info = APIS[API_KEYS_BY_NAME[api]]
    assert info.request_header_version(version) == request_header
    assert info.response_header_version(version) == response_header


def test_registry_holds_every_api_of_kafka_3_9() -> None:
    assert len(APIS) >= 80
    for name in [
        "Produce",
        "Fetch",
        "LeaderAndIsr",
        "UpdateMetadata",
        "StopReplica",
        "WriteTxnMarkers",
    ]:
        info = APIS[API_KEYS_BY_NAME[name]]
        assert info.request_class().API_KEY == info.api_key
        assert info.response_class().MAX_VERSION == info.max_version


def test_client_id_is_never_compact() -> None:
    header = RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=1, client_id="abc"
    )
    frame = encode_request(header, ApiVersionsRequest(client_software_name="x"))
    # key, version, correlation id, then an int16 length (not a varint) and the client id
    assert frame[8:13] == b"\x00\x03abc"
    assert frame[13] == 0  # header v2 has an (empty) tagged-field section
    decoded = decode_request(frame)
    assert decoded.header.client_id == "abc"
    assert decoded.body == ApiVersionsRequest(client_software_name="x")


def test_unknown_api_versions_version_gets_the_kip_511_answer() -> None:
    frame = bytes.fromhex("001200630000002a000163") + b"\x00" * 8
    with pytest.raises(UnsupportedVersionError):
        decode_request(frame)
    api_key, version, correlation_id = peek_request_header(frame)
    assert (api_key, version, correlation_id) == (18, 99, 42)
    response = decode_response(unsupported_api_versions_response(correlation_id), 18, 0)
    assert response.header.correlation_id == 42
    body = response.body
    assert isinstance(body, ApiVersionsResponse)
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]


def test_unknown_api_key_and_short_frames() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_request(b"\x7f\x00\x00\x00\x00\x00\x00\x01\x00\x00")
    with pytest.raises(ProtocolError):
        peek_request_header(b"\x00\x03")


def test_trailing_bytes_after_a_request_are_ignored_as_kafka_does() -> None:
    header = RequestHeader(
        request_api_key=3, request_api_version=1, correlation_id=1, client_id="c"
    )
    frame = encode_request(header, MetadataRequest(topics=None))
    assert decode_request(frame).body == MetadataRequest(topics=None)
    assert decode_request(frame + b"\x00\x01\x00").body == MetadataRequest(topics=None)


def test_fetch_response_records_stay_zero_copy() -> None:
    records = memoryview(bytearray(b"R" * 4096))
    body = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[FetchResponse.PartitionData(partition_index=0, records=records)],
            )
        ]
    )
    chunks = encode_response_chunks(ResponseHeader(correlation_id=9), body, 1, 12)
    assert any(c is records for c in chunks)
    decoded = decode_response(b"".join(chunks), 1, 12)
    got = decoded.body.responses[0].partitions[0].records  # type: ignore[attr-defined]
    assert isinstance(got, memoryview)
    assert got == records
