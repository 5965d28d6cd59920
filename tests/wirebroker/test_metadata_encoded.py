"""A Metadata answer's topics are the kept topics' encodings spliced in (`protocol.spliced`,
kept in `MetadataCache.derived` by listener and exact version): the answer is byte for byte the
one the generated codec writes afresh, at every version, the first time and from what was kept;
what a topic changes (a partition added, a leader moved) is told at once; a caller's
authorized operations are told to it only.

In process (an embedded `Broker`, the handler and the response's encode) for what is kept and
dropped; over TCP with kafka-python and confluent-kafka for what clients read."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaConsumer

from protocol.api import encode_response, encode_response_chunks
from protocol.errors import ErrorCode
from protocol.messages.headers import RequestHeader, ResponseHeader
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import RawClient, create_topic, told_partitions
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig
from wirebroker.dispatch import RequestContext, dispatch
from wirebroker.metadata_cache import PartitionInfo

TIMEOUT = 30.0
#: Before and after each field Metadata gained (v1 racks, v4 auto-creation, v7 leader
#: epochs, v8 authorized operations, v9 flexible, v10 ids, v12 a nullable name).
VERSIONS = (0, 1, 4, 7, 8, 9, 10, 12)
ALL_OPERATIONS_UNKNOWN = -(2**31)


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Broker]:
    config = BrokerConfig.from_properties(
        {
            "broker.id": "0",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:9092",  # told, never listened on
            "log.dirs": str(tmp_path),
        }
    )
    broker = Broker.open(config)
    broker.advertised = config.advertised_listeners()  # as its listeners would set them
    try:
        broker.create_topic("a", 3, 1, {})
        broker.create_topic("b", 130, 1, {})  # more than a one-byte compact array length
        yield broker
    finally:
        broker.close()


def _answer(broker: Broker, version: int, operations: bool = False) -> MetadataResponse:
    """The all-topics answer as the broker writes it, checked against the codec's fresh
    encoding of the same answer."""
    header = RequestHeader(
        request_api_key=3, request_api_version=version, correlation_id=7, client_id="c"
    )
    ctx = RequestContext(broker, header, "127.0.0.1", "PLAINTEXT")
    request = MetadataRequest(
        topics=[] if version == 0 else None, include_topic_authorized_operations=operations
    )
    response = trio.run(dispatch, ctx, request)
    assert isinstance(response, MetadataResponse)
    assert ctx.spliced is not None
    told = b"".join(
        encode_response_chunks(ResponseHeader(correlation_id=7), response, 3, version, ctx.spliced)
    )
    assert told == encode_response(ResponseHeader(correlation_id=7), response, 3, version)
    return MetadataResponse.decode(told[4 + (version >= 9) :], version)


def _encodings(broker: Broker, topic: str) -> set[object]:
    kept = broker.metadata_cache.derived.get(topic, {})
    return {key for key, value in kept.items() if isinstance(value, bytes)}


def _leaders(response: MetadataResponse, topic: str) -> dict[int, tuple[int, int]]:
    (t,) = [t for t in response.topics if t.name == topic]
    return {p.partition_index: (p.error_code, p.leader_id) for p in t.partitions}


def test_kept_encodings_are_the_fresh_answer_at_every_version(embedded: Broker) -> None:
    for version in VERSIONS:
        first = _answer(embedded, version)
        assert (_encodings(embedded, "a") & _encodings(embedded, "b")) >= {
            ("metadata-encoded", "PLAINTEXT", version)
        }
        assert _answer(embedded, version) == first  # from what was kept
        assert [len(t.partitions) for t in first.topics] == [3, 130]


def test_a_moved_leader_or_an_added_partition_drops_the_topics_encodings(
    embedded: Broker,
) -> None:
    for version in VERSIONS:
        _answer(embedded, version)
    cache = embedded.metadata_cache
    a_id = cache.topic_id("a")
    cache.put_partition(a_id, PartitionInfo("a", 1, 5, 3, [5], [5, 0]))  # led by a broker gone
    assert _encodings(embedded, "a") == set()
    assert _encodings(embedded, "b")  # another topic's are kept
    for version in VERSIONS:
        leaders = _leaders(_answer(embedded, version), "a")
        assert leaders[1] == (ErrorCode.LEADER_NOT_AVAILABLE, -1), version
        assert leaders[0] == (ErrorCode.NONE, 0)
    cache.put_partition(a_id, PartitionInfo("a", 3, 0, 0, [0], [0]))  # a partition added
    assert _encodings(embedded, "a") == set()
    for version in VERSIONS:
        assert sorted(_leaders(_answer(embedded, version), "a")) == [0, 1, 2, 3], version


def test_a_callers_authorized_operations_are_not_kept_for_others(embedded: Broker) -> None:
    for version in (8, 10, 12):
        assert {t.topic_authorized_operations for t in _answer(embedded, version).topics} == {
            ALL_OPERATIONS_UNKNOWN
        }
        told = _answer(embedded, version, operations=True)  # after the bytes were kept
        operations = {t.topic_authorized_operations for t in told.topics}
        assert ALL_OPERATIONS_UNKNOWN not in operations and len(operations) == 1
        again = _answer(embedded, version)
        assert {t.topic_authorized_operations for t in again.topics} == {ALL_OPERATIONS_UNKNOWN}


@pytest.mark.integration
def test_clients_read_the_spliced_answer(broker: BrokerProcess, topic: str) -> None:
    """The answer read off the socket is the codec's fresh encoding of what it decodes to, at
    each version; confluent-kafka and kafka-python (told two broker versions) read the same
    partitions, before and after partitions are added."""
    names = [f"{topic}-x", f"{topic}-y"]
    for name in names:
        create_topic(broker.bootstrap, name, partitions=3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _check_clients(broker, names, {n: 3 for n in names})
    for future in admin.create_partitions(
        [NewPartitions(names[0], 5)], operation_timeout=TIMEOUT
    ).values():
        future.result(timeout=TIMEOUT)
    _check_clients(broker, names, {names[0]: 5, names[1]: 3})


def _check_clients(broker: BrokerProcess, names: list[str], counts: dict[str, int]) -> None:
    with RawClient(broker.bootstrap, timeout=TIMEOUT) as client:
        for version in VERSIONS:
            request = MetadataRequest(topics=[] if version == 0 else None)
            client.send(request, version)
            body = client.receive_frame()[4 + (version >= 9) :]
            response = MetadataResponse.decode(body, version)
            assert response.encode(version) == body, version
            told = {t.name: told_partitions(t) for t in response.topics if t.name in counts}
            assert {n: len(p) for n, p in told.items()} == counts, version
            topic_ids = {t.topic_id for t in response.topics if t.name in counts}
            assert (uuid.UUID(int=0) in topic_ids) == (version < 10), version
    listed = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=TIMEOUT)
    assert {n: len(listed.topics[n].partitions) for n in names} == counts
    for api_version in ((0, 10, 0), (2, 5, 0)):  # an old and a newer Metadata version
        consumer = KafkaConsumer(
            bootstrap_servers=broker.bootstrap, api_version=api_version, group_id=None
        )
        try:
            assert {n: len(consumer.partitions_for_topic(n) or ()) for n in names} == counts
        finally:
            consumer.close()
