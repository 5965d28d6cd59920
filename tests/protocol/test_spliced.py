"""An answer written with an array's items encoded ahead (`protocol.spliced`) is byte for byte
the answer the generated codec writes with the structs, at every version, whatever the fields
around the array hold; a message whose array is followed by more than fixed-width fields is
refused rather than spliced wrong."""

from __future__ import annotations

import uuid

import pytest

from protocol.api import encode_response, encode_response_chunks
from protocol.errors import EncodeError
from protocol.messages.headers import ResponseHeader
from protocol.messages.metadata import MetadataResponse
from protocol.primitives import Writer
from protocol.spliced import item_bytes, write_spliced

Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponsePartition


def _topic(name: str, partitions: int, version: int, operations: int | None) -> Topic:
    return Topic(
        error_code=0,
        name=name,
        topic_id=uuid.uuid4() if version >= 10 else uuid.UUID(int=0),
        is_internal=name.startswith("__") and version >= 1,
        partitions=[
            Partition(
                error_code=0,
                partition_index=i,
                leader_id=i % 3,
                leader_epoch=7 if version >= 7 else -1,
                replica_nodes=[i % 3, (i + 1) % 3],
                isr_nodes=[i % 3],
                offline_replicas=[(i + 1) % 3] if version >= 5 else [],
            )
            for i in range(partitions)
        ],
        topic_authorized_operations=-(2**31) if operations is None or version < 8 else operations,
    )


def _response(version: int, topics: list[Topic]) -> MetadataResponse:
    return MetadataResponse(
        throttle_time_ms=250 if version >= 3 else 0,
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=n, host=f"h{n}", port=9092 + n, rack="r" if version >= 1 else None
            )
            for n in range(3)
        ],
        cluster_id="c-1" if version >= 2 else None,
        controller_id=1 if version >= 1 else -1,
        topics=topics,
        cluster_authorized_operations=0b1010 if 8 <= version <= 10 else -(2**31),
    )


@pytest.mark.parametrize("count", [0, 1, 130])  # 130 topics: a compact length of two bytes
@pytest.mark.parametrize("version", range(13))
def test_spliced_topics_are_the_codecs_answer(version: int, count: int) -> None:
    topics = [_topic(f"t{i}", i % 4, version, 1 << 3 if i % 2 else None) for i in range(count)]
    topics.append(_topic("__consumer_offsets", 50, version, None))
    response = _response(version, topics)
    header = ResponseHeader(correlation_id=42)
    spliced = ("topics", [item_bytes(t, version) for t in topics])
    chunks = encode_response_chunks(header, response, 3, version, spliced)
    assert b"".join(chunks) == encode_response(header, response, 3, version)
    assert response.topics is topics  # the answer's structs are left as they were
    assert MetadataResponse.decode(b"".join(chunks)[4 + (version >= 9) :], version) == response


def test_an_array_followed_by_more_than_fixed_width_fields_is_refused() -> None:
    response = _response(12, [])  # its brokers are followed by the cluster id, a string
    with pytest.raises(EncodeError, match="cluster_id follows brokers: not fixed-width"):
        write_spliced(Writer(), response, 12, "brokers", [])
