"""Golden frames: bytes captured from librdkafka and the Java client against real Kafka 3.9.

Owns the check that our codec (``protocol.api``) decodes every captured frame and
re-encodes it to identical bytes, plus spot checks of decoded values. The frames and
``index.json`` come from ``tests/protocol/golden/capture.py`` (``make golden``).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from protocol.api import decode_request, decode_response, encode_request, encode_response

FRAMES_DIR = Path(__file__).resolve().parent / "golden" / "frames"
INDEX: dict[str, Any] = json.loads((FRAMES_DIR / "index.json").read_text())
FRAMES: list[dict[str, Any]] = INDEX["frames"]
BROKER: dict[str, Any] = INDEX["broker"]
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, API_VERSIONS = 0, 1, 3, 10, 18


def _load(entry: dict[str, Any]) -> bytes:
    return (FRAMES_DIR / entry["file"]).read_bytes()


def _by_file(name: str) -> dict[str, Any]:
    return next(e for e in FRAMES if e["file"] == name)


def _select(api_key: int, direction: str) -> list[dict[str, Any]]:
    return [e for e in FRAMES if e["api_key"] == api_key and e["direction"] == direction]


def _decode(entry: dict[str, Any]) -> Any:
    data = _load(entry)
    if entry["direction"] == "request":
        return decode_request(data)
    return decode_response(data, entry["api_key"], entry["api_version"])


def _batch_attributes(records: Any) -> list[int]:
    """Attributes of each v2 record batch in a ``records`` blob (magic checked)."""
    raw = bytes(records)
    out = []
    pos = 0
    while pos + 23 <= len(raw):
        (batch_length,) = struct.unpack_from(">i", raw, pos + 8)
        assert raw[pos + 16] == 2, "record batch magic must be 2"
        out.append(struct.unpack_from(">h", raw, pos + 21)[0])
        pos += 12 + batch_length
    return out


# --------------------------------------------------------------------------- the data


def test_index_lists_existing_frames() -> None:
    files = {p.name for p in FRAMES_DIR.glob("*.bin")}
    listed = [e["file"] for e in FRAMES]
    assert len(listed) == len(set(listed))
    assert set(listed) == files
    for e in FRAMES:
        assert e["size"] == (FRAMES_DIR / e["file"]).stat().st_size
        assert e["direction"] in ("request", "response")


def test_every_client_produced_with_every_codec() -> None:
    for client in INDEX["clients"]:
        kept = {
            e["compression"]
            for e in _select(PRODUCE, "request")
            if e["client"] == client and "compression" in e
        }
        assert kept == set(CODECS), client


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("entry", FRAMES, ids=[e["file"] for e in FRAMES])
def test_round_trip_identical(entry: dict[str, Any]) -> None:
    data = _load(entry)
    if entry["direction"] == "request":
        request = decode_request(data)
        assert request.header.request_api_key == entry["api_key"]
        assert request.header.request_api_version == entry["api_version"]
        assert request.header.correlation_id == entry["correlation_id"]
        assert request.header.client_id == entry["client_id"]
        again = encode_request(request.header, request.body)
    else:
        api_key, api_version = entry["api_key"], entry["api_version"]
        response = decode_response(data, api_key, api_version)
        assert response.header.correlation_id == entry["correlation_id"]
        again = encode_response(response.header, response.body, api_key, api_version)
    assert bytes(again) == data


# --------------------------------------------------------------------------- spot checks


@pytest.mark.parametrize(
    "entry",
    _select(PRODUCE, "request"),
    ids=[e["file"] for e in _select(PRODUCE, "request")],
)
def test_produce_request_values(entry: dict[str, Any]) -> None:
    body = _decode(entry).body
    assert body.acks == -1  # librdkafka acks=all; the console producer's default
    assert body.transactional_id is None
    [topic] = body.topic_data
    codec = entry.get("compression", "none")
    assert topic.name == f"golden-{entry['client']}-{codec}"
    [partition] = topic.partition_data
    assert partition.index == 0
    attributes = _batch_attributes(partition.records)
    assert attributes
    assert {a & 0x7 for a in attributes} == {CODECS[codec]}


@pytest.mark.parametrize(
    "entry",
    _select(PRODUCE, "response"),
    ids=[e["file"] for e in _select(PRODUCE, "response")],
)
def test_produce_response_values(entry: dict[str, Any]) -> None:
    body = _decode(entry).body
    [topic] = body.responses
    [partition] = topic.partition_responses
    assert partition.error_code == 0
    assert partition.base_offset >= 0


@pytest.mark.parametrize(
    "entry",
    _select(METADATA, "response"),
    ids=[e["file"] for e in _select(METADATA, "response")],
)
def test_metadata_response_advertises_the_proxy(entry: dict[str, Any]) -> None:
    body = _decode(entry).body
    [broker] = body.brokers
    assert broker.node_id == BROKER["node_id"]
    assert broker.host == BROKER["host"]
    assert broker.port == BROKER["advertised_port"]
    assert body.controller_id == BROKER["node_id"]
    for topic in body.topics:
        assert topic.error_code == 0
        assert topic.name.startswith(("golden-", "__"))


def _coordinators(entry: dict[str, Any]) -> list[Any]:
    body = _decode(entry).body
    return list(body.coordinators) if entry["api_version"] >= 4 else [body]


@pytest.mark.parametrize(
    "entry",
    _select(FIND_COORDINATOR, "response"),
    ids=[e["file"] for e in _select(FIND_COORDINATOR, "response")],
)
def test_find_coordinator_response_advertises_the_proxy(entry: dict[str, Any]) -> None:
    for coordinator in _coordinators(entry):
        if coordinator.error_code != 0:
            # COORDINATOR_NOT_AVAILABLE while __consumer_offsets is still being created.
            assert coordinator.error_code == 15
            assert coordinator.node_id == -1
            continue
        assert coordinator.node_id == BROKER["node_id"]
        assert coordinator.host == BROKER["host"]
        assert coordinator.port == BROKER["advertised_port"]


def test_each_client_found_its_coordinator() -> None:
    for client in INDEX["clients"]:
        found = [
            c
            for e in _select(FIND_COORDINATOR, "response")
            if e["client"] == client
            for c in _coordinators(e)
            if c.error_code == 0
        ]
        assert found, client


@pytest.mark.parametrize(
    "entry",
    _select(API_VERSIONS, "response"),
    ids=[e["file"] for e in _select(API_VERSIONS, "response")],
)
def test_api_versions_response_lists_kafka_39(entry: dict[str, Any]) -> None:
    body = _decode(entry).body
    assert body.error_code == 0
    versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert versions[PRODUCE] == (0, 11)
    assert versions[FETCH][1] == 17
    assert versions[API_VERSIONS] == (0, 4)


def test_fetch_responses_carry_every_codec() -> None:
    """Across each client's kept Fetch responses, batches of all five codecs appear."""
    for client in INDEX["clients"]:
        seen: set[int] = set()
        for entry in _select(FETCH, "response"):
            if entry["client"] != client:
                continue
            body = _decode(entry).body
            assert body.error_code == 0
            for topic in body.responses:
                for partition in topic.partitions:
                    assert partition.error_code == 0
                    if partition.records:
                        seen |= {a & 0x7 for a in _batch_attributes(partition.records)}
        assert seen == set(CODECS.values()), client


def test_request_response_pairs_match() -> None:
    for entry in FRAMES:
        if "pair" not in entry:
            continue
        other = _by_file(entry["pair"])
        assert other["pair"] == entry["file"]
        assert other["correlation_id"] == entry["correlation_id"]
        assert other["api_key"] == entry["api_key"]
