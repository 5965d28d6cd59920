"""The wire, byte by byte: raw sockets speaking our codec to a broker process.

Covers what clients never exercise on purpose: ApiVersions advertising whole, real ranges (every
advertised version of every API answers), KIP-511 for an unknown ApiVersions version, closing
the connection for unknown APIs and versions and for malformed frames while other connections
carry on, `socket.request.max.bytes` enforced from the size prefix alone, `connections.max.idle.ms`,
acks=0 getting no response, a corrupt batch answered per partition, responses in request order,
the fetch long poll (woken by an append, ended at once by a partition error), fetch sessions
(across a topic deletion too), and clients that vanish mid-frame or mid-fetch.
"""

from __future__ import annotations

import struct
import time

import pytest

from protocol.api import decode_response
from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.messages import APIS
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_acls import DescribeAclsRequest
from protocol.messages.fetch import FetchRequest, FetchResponse
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.produce import ProduceRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    decode_records,
    end_offset,
    fetch_request,
    produce_request,
    request_frame,
)

pytestmark = pytest.mark.integration

MAX_REQUEST = 65_536
IDLE_MS = 2_000
BROKER_PROPERTIES = {
    "socket.request.max.bytes": str(MAX_REQUEST),
    "connections.max.idle.ms": str(IDLE_MS),
}

API_VERSIONS = 18
SOFTWARE = {"client_software_name": "wirebroker-tests", "client_software_version": "1.0"}


def api_versions(client: RawClient, version: int = 3) -> ApiVersionsResponse:
    body = ApiVersionsRequest(**SOFTWARE) if version >= 3 else ApiVersionsRequest()
    return client.request(body, version)


def assert_serves(broker: BrokerProcess, client: RawClient | None = None) -> None:
    """The broker answers ApiVersions (on `client`, or on a new connection)."""
    if client is None:
        with RawClient(broker.bootstrap) as fresh:
            assert api_versions(fresh).error_code == ErrorCode.NONE
    else:
        assert api_versions(client).error_code == ErrorCode.NONE
    assert broker.alive()


def raw_header(api_key: int, version: int, correlation_id: int, client_id: bytes = b"raw") -> bytes:
    """A request header v1 laid out by hand (for versions our encoder refuses)."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


# ApiVersions --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_advertises_whole_kafka_ranges(broker: BrokerProcess, version: int) -> None:
    with RawClient(broker.bootstrap) as client:
        response = api_versions(client, version)
    assert response.error_code == ErrorCode.NONE
    keys = [k.api_key for k in response.api_keys]
    assert keys == sorted(set(keys))
    # The APIs of issue 4, at least; each with the whole range Kafka 3.9 defines for it.
    assert {0, 1, 2, 3, 18, 19, 20, 21, 23, 32, 33, 35, 37, 44, 60} <= set(keys)
    for k in response.api_keys:
        info = APIS[k.api_key]
        assert (k.min_version, k.max_version) == (info.min_version, info.max_version), info.name


def test_every_advertised_version_is_answered(broker: BrokerProcess) -> None:
    """'Real' ranges: a request at every advertised version gets a decodable response."""
    with RawClient(broker.bootstrap) as client:
        advertised = api_versions(client).api_keys
        for k in advertised:
            info = APIS[k.api_key]
            for version in range(k.min_version, k.max_version + 1):
                body = info.request_class()()
                if isinstance(body, ProduceRequest):
                    body.acks = 1  # the default, 0, would get no response at all
                if isinstance(body, ApiVersionsRequest) and version >= 3:
                    body = ApiVersionsRequest(**SOFTWARE)
                if isinstance(body, DescribeAclsRequest):  # UNKNOWN (0) filters are unparsable
                    body = DescribeAclsRequest(
                        resource_type_filter=1,
                        pattern_type_filter=1 if version else 3,  # v0: always LITERAL
                        operation=1,
                        permission_type=1,
                    )
                correlation_id = client.send(body, version)
                response = decode_response(client.receive_frame(), k.api_key, version)
                assert response.header.correlation_id == correlation_id, (info.name, version)
                assert isinstance(response.body, info.response_class())


def test_api_versions_v3_checks_client_software(broker: BrokerProcess) -> None:
    """KIP-511: a malformed client software name is INVALID_REQUEST (the connection stays)."""
    with RawClient(broker.bootstrap) as client:
        bad = ApiVersionsRequest(client_software_name="bad name!", client_software_version="1")
        assert client.request(bad, 3).error_code == ErrorCode.INVALID_REQUEST
        assert api_versions(client).error_code == ErrorCode.NONE


@pytest.mark.parametrize("version", [5, 99, 32767])
def test_unknown_api_versions_version_gets_kip511_answer(
    broker: BrokerProcess, version: int
) -> None:
    with RawClient(broker.bootstrap) as client:
        # A newer client's request: flexible header and a body we cannot know.
        payload = raw_header(API_VERSIONS, version, 4242) + b"\x00" + b"\x05abcd\x041.0\x00\x7f"
        client.send_raw(frame(payload))
        answer = decode_response(client.receive_frame(), API_VERSIONS, 0)  # the v0 layout
        assert answer.header.correlation_id == 4242
        assert answer.body.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert [(k.api_key, k.min_version, k.max_version) for k in answer.body.api_keys] == [
            (API_VERSIONS, 0, 4)
        ]
        # The client retries on the same connection, as librdkafka and the Java client do.
        assert_serves(broker, client)


# Closing connections -------------------------------------------------------------------------


def test_unknown_api_version_closes_the_connection(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as bystander, RawClient(broker.bootstrap) as client:
        client.send_raw(frame(raw_header(3, 99, 7) + b"\x00" * 16))  # Metadata v99
        assert client.wait_closed()
        assert_serves(broker, bystander)
    assert broker.wait_for_log("Metadata v99 is not supported")


def test_unknown_api_key_closes_the_connection(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as bystander, RawClient(broker.bootstrap) as client:
        client.send_raw(frame(raw_header(9999, 0, 7)))
        assert client.wait_closed()
        assert_serves(broker, bystander)


def test_unadvertised_api_closes_the_connection(broker: BrokerProcess) -> None:
    """An API of Kafka 3.9 this broker does not advertise is refused like an unknown one."""
    with RawClient(broker.bootstrap) as bystander:
        advertised = {k.api_key for k in api_versions(bystander).api_keys}
        missing = sorted(set(APIS) - advertised)
        assert missing, "every Kafka API is advertised: pick another test"
        info = APIS[missing[0]]
        with RawClient(broker.bootstrap) as client:
            client.send(info.request_class()(), info.max_version)
            assert client.wait_closed()
        assert_serves(broker, bystander)


def _metadata_v12() -> bytes:
    body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="some-topic")])
    return request_frame(body, 12, 5)[4:]


MALFORMED = {
    "shorter than a header": frame(b"\x00\x03\x00"),
    "truncated body": frame(_metadata_v12()[:-3]),
    "client id longer than the frame": frame(struct.pack(">hhih", 18, 0, 1, 500) + b"abc"),
    "bad compact array length": frame(raw_header(3, 12, 1) + b"\x00" + b"\xff\xff\xff\xff\x7f"),
    "negative size": b"\xff\xff\xff\xfe" + b"\x00" * 16,
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_frame_closes_only_its_connection(broker: BrokerProcess, data: bytes) -> None:
    with RawClient(broker.bootstrap) as bystander, RawClient(broker.bootstrap) as client:
        # The bystander is mid-request when the malformed frame arrives.
        correlation_id = bystander.next_correlation_id()
        request = bystander.encode(ApiVersionsRequest(), 0, correlation_id)
        bystander.send_raw(request[:7])
        client.send_raw(data)
        assert client.wait_closed()
        bystander.send_raw(request[7:])
        assert bystander.receive(ApiVersionsRequest, 0, correlation_id).error_code == 0
        assert_serves(broker, bystander)
    assert_serves(broker)


def test_bytes_after_a_request_body_are_ignored(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        correlation_id = client.next_correlation_id()
        # librdkafka 2.16's Metadata v12 "all topics" request, byte for byte.
        librdkafka = bytes.fromhex(
            f"0003000c{correlation_id:08x}000772646b61666b610000000000010000"
        )
        client.send_raw(frame(librdkafka))
        response: MetadataResponse = client.receive(MetadataRequest, 12, correlation_id)
        assert response.controller_id == 0
        assert_serves(broker, client)


def test_request_max_bytes_is_enforced_from_the_size_prefix(broker: BrokerProcess) -> None:
    """A size over socket.request.max.bytes closes the connection before any body is sent."""
    with RawClient(broker.bootstrap) as bystander:
        for size in (MAX_REQUEST + 1, 2**31 - 1):
            with RawClient(broker.bootstrap) as client:
                client.send_raw(struct.pack(">i", size))  # and nothing else
                assert client.wait_closed(timeout=5)
            assert_serves(broker, bystander)
    assert broker.wait_for_log(f"frame of {MAX_REQUEST + 1} bytes exceeds the maximum")


def test_request_of_exactly_max_bytes_is_served(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        correlation_id = client.next_correlation_id()
        name_length = MAX_REQUEST - 100
        while True:
            body = ApiVersionsRequest(
                client_software_name="a" * name_length, client_software_version="1"
            )
            data = client.encode(body, 3, correlation_id)
            if len(data) - 4 >= MAX_REQUEST:
                break
            name_length += 1
        assert len(data) - 4 == MAX_REQUEST
        client.send_raw(data)
        response = client.receive(ApiVersionsRequest, 3, correlation_id)
        assert response.error_code == ErrorCode.NONE


def test_idle_connection_is_closed_after_connections_max_idle_ms(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as client:
        api_versions(client)
        # Activity before the deadline restarts the idle clock: the gap here is the test.
        time.sleep(IDLE_MS / 1000 * 0.6)
        assert_serves(broker, client)
        last_request = time.monotonic()
        assert client.wait_closed(timeout=IDLE_MS / 1000 * 4)
        idle_for = time.monotonic() - last_request
    assert IDLE_MS / 1000 * 0.95 <= idle_for <= IDLE_MS / 1000 * 3
    assert broker.wait_for_log("idle for")


def test_a_late_answer_counts_as_use_for_the_idle_close(broker: BrokerProcess, topic: str) -> None:
    """As Kafka's selector, a write is a use too: a long poll answered late restarts the idle
    clock (read-only counting would close the connection idle since its request)."""
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        wait_ms = int(IDLE_MS * 0.9)
        client.request(fetch_request(topic, max_wait_ms=wait_ms, min_bytes=1), 11)
        # Idle since the Fetch was read for more than IDLE_MS, but not since its answer.
        time.sleep(IDLE_MS / 1000 * 0.5)
        assert_serves(broker, client)


# Requests on one connection ------------------------------------------------------------------


def test_acks0_produce_gets_no_response(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        for i in range(3):
            client.send(produce_request(topic, 0, [SimpleRecord(b"k", b"v%d" % i)], acks=0), 9)
        correlation_id = client.send(ApiVersionsRequest(), 0)
        # The next frame on the connection answers ApiVersions: no produce responses came first.
        response = decode_response(client.receive_frame(), API_VERSIONS, 0)
        assert response.header.correlation_id == correlation_id
    assert end_offset(broker.bootstrap, topic) == 3


def test_failed_acks0_produce_closes_the_connection(broker: BrokerProcess, topic: str) -> None:
    with RawClient(broker.bootstrap) as client:
        client.send(produce_request(topic, 0, [SimpleRecord(b"k", b"v")], acks=0), 9)
        assert client.wait_closed(timeout=IDLE_MS / 1000 / 2)  # sooner than the idle close


def test_corrupt_batch_is_answered_and_the_connection_stays(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    request = produce_request(topic, 0, [SimpleRecord(b"k", b"value")])
    batch = bytearray(request.topic_data[0].partition_data[0].records)
    batch[-1] ^= 0xFF  # the CRC covers it
    request.topic_data[0].partition_data[0].records = bytes(batch)
    with RawClient(broker.bootstrap) as client:
        response = client.request(request, 9)
        (p,) = response.responses[0].partition_responses
        assert (p.index, p.error_code, p.base_offset) == (0, ErrorCode.CORRUPT_MESSAGE, -1)
        assert_serves(broker, client)
    assert end_offset(broker.bootstrap, topic) == 0


def test_pipelined_responses_come_in_request_order(broker: BrokerProcess, topic: str) -> None:
    """A long-polling fetch does not hold back the requests sent after it (its wait is a
    `Later`; Kafka would read nothing more until it answered): the produce behind it is
    handled at once and wakes it, and the answers still come in request order."""
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        sent = [
            (
                client.send(fetch_request(topic, 0, 0, max_wait_ms=300, min_bytes=1), 11),
                FetchRequest,
                11,
            ),
            (client.send(ApiVersionsRequest(), 0), ApiVersionsRequest, 0),
            (
                client.send(produce_request(topic, 0, [SimpleRecord(None, b"x")], acks=1), 9),
                ProduceRequest,
                9,
            ),
            (client.send(MetadataRequest(topics=None), 12), MetadataRequest, 12),
            (
                client.send(fetch_request(topic, 0, 0, max_wait_ms=300, min_bytes=1), 11),
                FetchRequest,
                11,
            ),
        ]
        bodies = [client.receive(cls, version, cid) for cid, cls, version in sent]
    assert decode_records(bodies[0].responses[0].partitions[0].records) == [(0, None, b"x")]
    assert bodies[2].responses[0].partition_responses[0].base_offset == 0
    assert topic in [t.name for t in bodies[3].topics]
    assert decode_records(bodies[4].responses[0].partitions[0].records) == [(0, None, b"x")]


def test_responses_before_a_long_poll_are_not_held_back(broker: BrokerProcess, topic: str) -> None:
    """Requests that arrive together are answered together, but never behind a wait: the
    produce responses come while the fetch after them is still long-polling."""
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        frames = [
            client.encode(
                produce_request(topic, 0, [SimpleRecord(None, b"%d" % i)], acks=1), 9, cid
            )
            for i, cid in enumerate((1, 2, 3))
        ]
        frames.append(
            client.encode(fetch_request(topic, 0, 3, max_wait_ms=20_000, min_bytes=1), 11, 4)
        )
        started = time.monotonic()
        client.send_raw(b"".join(frames))  # one segment: all four arrive in one read
        acks = [client.receive(ProduceRequest, 9, cid) for cid in (1, 2, 3)]
        assert time.monotonic() - started < 10
        assert [a.responses[0].partition_responses[0].base_offset for a in acks] == [0, 1, 2]
        assert client.wait_closed(timeout=0.2) is False
        assert client.buffered == 0  # the fetch is still waiting


def test_long_poll_fetch_is_woken_by_an_append(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as consumer, RawClient(broker.bootstrap) as producer:
        started = time.monotonic()
        correlation_id = consumer.send(
            fetch_request(topic, 0, 0, max_wait_ms=20_000, min_bytes=1), 12
        )
        assert consumer.wait_closed(timeout=0.2) is False
        assert consumer.buffered == 0  # still waiting: no answer yet
        ack = producer.request(produce_request(topic, 0, [SimpleRecord(b"k", b"woken")]), 9)
        assert ack.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        response: FetchResponse = consumer.receive(FetchRequest, 12, correlation_id)
        elapsed = time.monotonic() - started
    p = response.responses[0].partitions[0]
    assert (p.error_code, p.high_watermark) == (ErrorCode.NONE, 1)
    assert decode_records(p.records) == [(0, b"k", b"woken")]
    assert elapsed < 10


def test_client_vanishing_mid_frame_or_mid_fetch_is_harmless(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        client.send_raw(client.encode(ApiVersionsRequest(), 0, 1)[:6])
    with RawClient(broker.bootstrap) as client:
        client.send(fetch_request(topic, 0, 0, max_wait_ms=20_000, min_bytes=1), 12)
    with RawClient(broker.bootstrap) as client:
        response: MetadataResponse = client.request(MetadataRequest(topics=None), 12)
        assert topic in [t.name for t in response.topics]


@pytest.mark.parametrize("version", [4, 11, 12, 17])
def test_fetch_errors_answer_at_once_with_empty_records(
    broker: BrokerProcess, topic: str, version: int
) -> None:
    """As Kafka: a partition error ends the long poll, and its records are empty, never null
    (librdkafka rejects a null record set as a parse failure and drops the connection)."""
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        client.request(produce_request(topic, 0, [SimpleRecord(b"k", b"v")]), 9)
        request = fetch_request(topic, 0, 5, max_wait_ms=10_000, min_bytes=1)
        request.topics.append(
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[FetchRequest.FetchPartition(partition=7, partition_max_bytes=1 << 20)],
            )
        )
        if version >= 13:  # topics by id
            metadata = client.request(MetadataRequest(topics=None), 12)
            (topic_id,) = [t.topic_id for t in metadata.topics if t.name == topic]
            for t in request.topics:
                t.topic_id = topic_id
        started = time.monotonic()
        response: FetchResponse = client.request(request, version)
        elapsed = time.monotonic() - started
    assert elapsed < 5
    parts = [p for t in response.responses for p in t.partitions]
    assert [(p.partition_index, p.error_code) for p in parts] == [
        (0, ErrorCode.OFFSET_OUT_OF_RANGE),
        (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert [bytes(p.records) if p.records is not None else None for p in parts] == [b"", b""]


def test_incremental_fetch_session_over_the_wire(broker: BrokerProcess, topic: str) -> None:
    """KIP-227 as a Java consumer uses it: a full fetch opens a session, later fetches name
    no partitions and still get the session's news, and a replayed epoch is refused."""
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        opening = fetch_request(topic, 0, 0)
        opening.session_epoch = 0
        response: FetchResponse = client.request(opening, 12)
        session_id = response.session_id
        assert response.error_code == ErrorCode.NONE and session_id > 0
        client.request(produce_request(topic, 0, [SimpleRecord(b"k", b"news")]), 9)
        # Epoch 1 lists nothing: the session's partition is read at its cached offset 0.
        incremental = FetchRequest(
            replica_id=-1, max_wait_ms=5_000, session_id=session_id, session_epoch=1
        )
        response = client.request(incremental, 12)
        (p,) = [p for t in response.responses for p in t.partitions]
        assert (response.error_code, response.session_id) == (ErrorCode.NONE, session_id)
        assert decode_records(p.records) == [(0, b"k", b"news")]
        # The consumer moves on to offset 1 (only that partition is named); nothing new
        # there and the watermark unchanged: an answer without partitions.
        incremental.session_epoch, incremental.max_wait_ms = 2, 0
        incremental.topics = fetch_request(topic, 0, 1).topics
        quiet = client.request(incremental, 12)
        assert quiet.error_code == ErrorCode.NONE and quiet.responses == []
        replayed = client.request(incremental, 12)
        assert replayed.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def _partition_errors(response: FetchResponse) -> list[tuple[int, int]]:
    return [(p.partition_index, p.error_code) for t in response.responses for p in t.partitions]


@pytest.mark.parametrize("version", [12, 13])
def test_a_fetch_session_across_its_topic_deletion(
    broker: BrokerProcess, topic: str, version: int
) -> None:
    """As Kafka 3.9: a session keeps the names of its topics, so once a topic is deleted its
    partitions are answered UNKNOWN_TOPIC_OR_PARTITION at once (UNKNOWN_TOPIC_ID made franz-go
    fetch again in a tight loop); only an id the broker does not know is UNKNOWN_TOPIC_ID, and
    an id whose name now belongs to a new topic is INCONSISTENT_TOPIC_ID."""
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        metadata = client.request(MetadataRequest(topics=None), 12)
        (topic_id,) = [t.topic_id for t in metadata.topics if t.name == topic]
        opening = fetch_request(topic, 0, 0)
        opening.session_epoch = 0
        opening.topics[0].topic_id = topic_id  # read from v13 on, the name before
        response: FetchResponse = client.request(opening, version)
        session_id = response.session_id
        assert response.error_code == ErrorCode.NONE and session_id > 0
        deleted = client.request(DeleteTopicsRequest(topic_names=[topic], timeout_ms=10_000), 5)
        assert deleted.responses[0].error_code == ErrorCode.NONE

        incremental = FetchRequest(
            replica_id=-1, max_wait_ms=10_000, session_id=session_id, session_epoch=1
        )
        started = time.monotonic()
        response = client.request(incremental, version)
        assert time.monotonic() - started < 5  # an error ends the long poll
        assert response.error_code == ErrorCode.NONE
        assert _partition_errors(response) == [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        if version < 13:
            return
        sessionless = fetch_request(topic, 0, 0)
        sessionless.session_epoch = -1
        sessionless.topics[0].topic_id = topic_id
        response = client.request(sessionless, version)
        assert _partition_errors(response) == [(0, ErrorCode.UNKNOWN_TOPIC_ID)]
        create_topic(broker.bootstrap, topic)  # the same name, a new id
        incremental.session_epoch = 2
        response = client.request(incremental, version)
        assert _partition_errors(response) == [(0, ErrorCode.INCONSISTENT_TOPIC_ID)]
