"""Shared helpers of the broker tests: deadlines, a clock that follows trio's, a raw Kafka client
over our codec, topics, a SASL listener's JAAS entries.

`RawClient` speaks the wire protocol with `protocol.api` and `protocol.framing` over a plain
blocking socket, so tests can send exactly the bytes they mean (malformed frames, unknown
versions, oversize prefixes) and see exactly what comes back. `create_topic` and friends use it
to set up topics without the start-up cost of a real client.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

import pytest
import trio
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from protocol.api import decode_response, encode_request
from protocol.compression import CompressionType
from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from protocol.messages.alter_configs import AlterConfigsRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from protocol.messages.fetch import FetchRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.headers import RequestHeader
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.metadata import MetadataResponse
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_delete import OffsetDeleteRequest
from protocol.messages.produce import ProduceRequest
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from protocol.records import iter_batches, iter_records
from protocol.schema import Message
from storage.clock import Clock, wall_clock_ms
from storage.log_manager import CreateLogs
from wirebroker import auto_topics
from wirebroker.sasl.mechanism import SaslClient
from wirebroker.sasl.scram import ScramClient
from wirebroker.sasl.settings import LOGIN_MODULES
from wirebroker.topics import OFFSETS_TOPIC

if TYPE_CHECKING:
    from tests.broker_process import BrokerProcess
    from wirebroker.broker import Broker
    from wirebroker.config import BrokerConfig
    from wirebroker.server import RunningBroker

T = TypeVar("T")


def trio_clock() -> Clock:
    """Wall-clock milliseconds that advance with trio's clock, for a broker under test: on a
    `trio.testing.MockClock` its timers (and the time its code reads) move with virtual time.
    Call it inside `trio.run`."""
    start_ms, start = wall_clock_ms(), trio.current_time()
    return lambda: start_ms + round((trio.current_time() - start) * 1000)


class HeldCreation:
    """Wraps `CreateLogs.prepare` (installed by `held_in_process`): records each call's thread
    and partitions, and holds the `hold`th (of those making a log of `topic`, if given) until
    `release` is set. `ask` runs a client call in a thread, its answer in `answers`."""

    def __init__(self, topic: str | None = None, hold: int = 1) -> None:
        self.prepare = CreateLogs.prepare
        self.topic = topic
        self.hold = hold
        self.calls: list[tuple[int, int]] = []  # (thread, partitions)
        self.counted = 0  # calls of `topic`
        self.started = threading.Event()
        self.release = threading.Event()
        self.answers: dict[str, Any] = {}

    async def ask(self, what: str, call: Callable[[], Any]) -> None:
        self.answers[what] = await trio.to_thread.run_sync(call)

    def __call__(self, creation: CreateLogs) -> None:
        self.calls.append((threading.get_ident(), len(creation.pending)))
        if self.topic is None or self.topic in {topic for topic, _ in creation.pending}:
            self.counted += 1
            if self.counted == self.hold:
                self.started.set()
                assert self.release.wait(HOLD_TIMEOUT)
        self.prepare(creation)


#: How long a held log creation may wait for its release.
HOLD_TIMEOUT = 60.0


def held_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, topic: str | None = None, hold: int = 1
) -> tuple[BrokerConfig, HeldCreation]:
    """The config of an in-process broker (`serving_in_process`) in `tmp_path` whose log
    creations are wrapped by a `HeldCreation` of `topic` and `hold`."""
    from wirebroker.config import BrokerConfig

    held = HeldCreation(topic, hold)
    monkeypatch.setattr(CreateLogs, "prepare", lambda c: held(c))
    config = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )
    return config, held


async def make_internal_topics(broker: Broker, *names: str) -> None:
    """Create the coordinators' topics `names` as their first use does (their logs made off
    the loop) and wait until the coordinators loaded them."""
    for name in names:
        await auto_topics.create(broker, name)
        if name == OFFSETS_TOPIC:
            await broker.groups.group_manager.wait_loaded()
        else:
            await broker.transactions.state.wait_loaded()


#: For tests that run kcat, which `make tools` (part of `make test`) installs from Debian.
needs_kcat = pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat is not installed: run `make tools`"
)

DEFAULT_TIMEOUT = 15.0


@asynccontextmanager
async def serving_in_process(
    config: BrokerConfig, release: threading.Event, timeout: float
) -> AsyncIterator[RunningBroker]:
    """Serve `config` on this trio loop for the block (within `timeout`), then stop it;
    `release` (what a test holds a worker thread with) is set however the block ends."""
    from wirebroker.server import serve_broker

    async with trio.open_nursery() as nursery:
        running = await nursery.start(partial(serve_broker, config))
        try:
            with trio.fail_after(timeout):
                yield running
        finally:
            release.set()
        nursery.cancel_scope.cancel()


def wait_until(
    predicate: Callable[[], T],
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.02,
    what: str = "",
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Poll `predicate` until it returns something truthy (returned); fail at the deadline.
    An exception of `ignoring` counts as not yet (a cluster restarting refuses connections);
    the last one is the failure's cause."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = predicate()
        except ignoring as e:
            last = e
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what or predicate) from last
        time.sleep(interval)


async def eventually(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.02,
    what: str = "",
) -> T:
    """`wait_until` for trio code: `predicate` may be async (a request, say), the other tasks
    run between polls, and the deadline is on trio's clock (virtual under a MockClock)."""
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return cast(T, value)
            await trio.sleep(interval)
    raise _timed_out(timeout, what or predicate)


def _timed_out(timeout: float, what: object) -> AssertionError:
    return AssertionError(f"timed out after {timeout} s waiting for {what}")


async def receive_frame(stream: trio.SocketStream) -> bytes:
    """One response frame (without its size) from a trio stream; fails if the broker closes."""
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        chunk = await stream.receive_some()
        assert chunk, "the broker closed the connection"
        data += chunk
    return data[4:]


def fill(path: Path) -> None:
    """Write zeros to `path` until its file system (the 16 MiB `disk` fixture) is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    chunk = bytes(4096)
    try:
        for _ in range(16 * 1024 * 1024 // len(chunk) + 1):
            os.write(fd, chunk)
    except OSError:
        return
    finally:
        os.close(fd)
    raise AssertionError("a 16 MiB file system did not fill up")


def assert_refused_for_a_full_disk(code: int, message: str | None, disk: Path) -> None:
    """An answer to a change whose write found `disk` (the `disk` fixture) full:
    UNKNOWN_SERVER_ERROR with the reason, and not the broker's paths."""
    assert code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert message is not None and "No space left on device" in message
    assert str(disk) not in message


def server_jaas(listener: str, *mechanisms: str) -> dict[str, str]:
    """`listener.name.<l>.<mechanism>.sasl.jaas.config` of each of `mechanisms`: its login
    module without options, as a Kafka user gives a mechanism whose server side reads none
    (SCRAM, OAUTHBEARER's unsecured validator): Kafka, as wirebroker, refuses to start a
    listener with an enabled mechanism that has no JAAS entry."""
    return {
        f"listener.name.{listener.lower()}.{m.lower()}.sasl.jaas.config": (
            f"{LOGIN_MODULES[m]} required;"
        )
        for m in mechanisms
    }


def host_port(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def request_frame(
    body: Message, version: int, correlation_id: int, client_id: str | None = "raw-test"
) -> bytes:
    """A whole request frame (with its size prefix)."""
    header = RequestHeader(
        request_api_key=body.API_KEY,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    return frame(encode_request(header, body))


class RawClient:
    """One blocking connection speaking Kafka frames with our codec; with `plain` (user,
    password) it logs in with SASL/PLAIN first (a SASL_PLAINTEXT listener); with `source` it
    connects from that local address (e.g. 127.0.0.2: another client IP on the loopback)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str | None = "raw-test",
        timeout: float = 10.0,
        plain: tuple[str, str] | None = None,
        source: str | None = None,
    ):
        self.sock = socket.create_connection(
            host_port(bootstrap), timeout=timeout, source_address=(source, 0) if source else None
        )
        self.client_id = client_id
        self.timeout = timeout
        self._correlation_id = 0
        self._buf = bytearray()
        if plain is not None:
            try:
                self.login_plain(*plain)
            except BaseException:
                self.close()
                raise

    def login_plain(self, user: str, password: str) -> Any:
        """SaslHandshake v1 and SaslAuthenticate v2 with PLAIN; the SaslAuthenticate answer."""
        handshake = self.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert handshake.error_code == ErrorCode.NONE, handshake
        token = f"\0{user}\0{password}".encode()
        answer = self.request(SaslAuthenticateRequest(auth_bytes=token), 2)
        if answer.error_code != ErrorCode.NONE:
            raise ConnectionError(f"SASL/PLAIN login of {user} failed: {answer.error_message}")
        return answer

    def login_scram(
        self, mechanism: str, user: str, password: str, *, tokenauth: bool = False
    ) -> None:
        """SaslHandshake v1 and SaslAuthenticate v2 rounds of SCRAM, the broker's signature
        checked (it knows the password): ConnectionError if the broker refuses. `tokenauth`:
        with a delegation token (its id and HMAC in base64)."""
        self.login_sasl(ScramClient(mechanism, user, password, tokenauth=tokenauth), user)

    def login_sasl(self, sasl: SaslClient, user: str) -> Any:
        """SaslHandshake v1 and SaslAuthenticate v2 rounds of `sasl`'s mechanism, logging in
        as `user`; the last SaslAuthenticate answer, ConnectionError if the broker refuses."""
        handshake = self.request(SaslHandshakeRequest(mechanism=sasl.mechanism), 1)
        assert handshake.error_code == ErrorCode.NONE, handshake
        token: bytes | None = sasl.initial()
        while token is not None:
            answer = self.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            if answer.error_code != ErrorCode.NONE:
                raise ConnectionError(
                    f"SASL/{sasl.mechanism} login of {user} failed: {answer.error_message}"
                )
            token = sasl.evaluate(answer.auth_bytes)
        assert sasl.complete
        return answer

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    # sending ------------------------------------------------------------------------------
    def next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def encode(self, body: Message, version: int, correlation_id: int) -> bytes:
        """A whole request frame (with its size prefix) from this client."""
        return request_frame(body, version, correlation_id, self.client_id)

    def send(self, body: Message, version: int) -> int:
        """Send a request; returns its correlation id."""
        correlation_id = self.next_correlation_id()
        self.sock.sendall(self.encode(body, version, correlation_id))
        return correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    # receiving ----------------------------------------------------------------------------
    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"connection closed with {len(self._buf)} of {n} bytes read")
            self._buf += chunk

    def receive_frame(self) -> bytes:
        """The next response frame (without its size prefix)."""
        self._fill(4)
        (size,) = struct.unpack_from(">i", self._buf)
        self._fill(4 + size)
        data = bytes(self._buf[4 : 4 + size])
        del self._buf[: 4 + size]
        return data

    def receive(self, body_class: type[Message], version: int, correlation_id: int) -> Any:
        """The next response, decoded as a response to `body_class` at `version`."""
        response = decode_response(self.receive_frame(), body_class.API_KEY, version)
        assert response.header.correlation_id == correlation_id
        return response.body

    def request(self, body: Message, version: int) -> Any:
        """Send a request and return the decoded response body."""
        correlation_id = self.send(body, version)
        return self.receive(type(body), version, correlation_id)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf)

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True once the broker closed this connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self._buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        finally:
            self.sock.settimeout(self.timeout)


def find_coordinator(c: RawClient, request: FindCoordinatorRequest, version: int) -> Any:
    """The answer to `request` once no key's coordinator is COORDINATOR_NOT_AVAILABLE: the
    lookup that creates a coordinator's topic is answered so until the key's partition exists
    (its logs made off the loop), as Kafka's, and is asked again, as clients do."""

    def answered() -> Any:
        r = c.request(request, version)
        codes = [x.error_code for x in r.coordinators] if version >= 4 else [r.error_code]
        return None if ErrorCode.COORDINATOR_NOT_AVAILABLE in codes else r

    return wait_until(answered, what=f"an answer to {request}")


def make_coordinator_topics(bootstrap: str, key_types: Sequence[int] = (0, 1)) -> None:
    """Create the coordinators' topics (group: 0, transaction: 1) as clients do, by looking a
    coordinator up, for tests whose raw requests skip the lookup."""
    with RawClient(bootstrap) as c:
        for key_type in key_types:
            find_coordinator(c, FindCoordinatorRequest(key="any", key_type=key_type), 3)


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    """Create a topic (and fail the test unless it was created)."""
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in (configs or {}).items()
                ],
            )
        ],
        timeout_ms=10_000,
    )
    with RawClient(bootstrap) as client:
        response: CreateTopicsResponse = client.request(request, 7)
    (result,) = response.topics
    assert result.error_code == ErrorCode.NONE, (result.error_code, result.error_message)


def describe_configs(
    bootstrap: str,
    resource_type: int,
    name: str,
    keys: list[str] | None = None,
    plain: tuple[str, str] | None = None,
) -> DescribeConfigsResponse.DescribeConfigsResult:
    """DescribeConfigs v4 (with synonyms) of one resource: 2 topic, 4 broker, 8 broker loggers
    (logged in with SASL/PLAIN as `plain`'s user and password, if given)."""
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=keys
            )
        ],
        include_synonyms=True,
    )
    with RawClient(bootstrap, plain=plain) as client:
        (result,) = client.request(request, 4).results
    return result


#: ConfigResource's types, and IncrementalAlterConfigs' SET and DELETE operations.
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE = 0, 1


def alter_configs(
    bootstrap: str,
    resource_type: int,
    name: str,
    operations: Sequence[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
) -> tuple[int, str | None]:
    """(error code, message) of IncrementalAlterConfigs v1 on one resource; each operation is
    (name, 0 SET / 1 DELETE / 2 APPEND / 3 SUBTRACT, value)."""
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=resource_type,
        resource_name=name,
        configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name=n, config_operation=op, value=value)
            for n, op, value in operations
        ],
    )
    request = IncrementalAlterConfigsRequest(resources=[resource], validate_only=validate_only)
    with RawClient(bootstrap) as client:
        (response,) = client.request(request, 1).responses
    return response.error_code, response.error_message


def replace_configs(
    bootstrap: str,
    resource_type: int,
    name: str,
    values: Mapping[str, str],
    *,
    validate_only: bool = False,
) -> tuple[int, str | None]:
    """(error code, message) of AlterConfigs v1 on one resource: its whole set of configs
    replaced by `values` (the legacy request; `alter_configs` is the incremental one)."""
    resource = AlterConfigsRequest.AlterConfigsResource(
        resource_type=resource_type,
        resource_name=name,
        configs=[AlterConfigsRequest.AlterableConfig(name=n, value=v) for n, v in values.items()],
    )
    request = AlterConfigsRequest(resources=[resource], validate_only=validate_only)
    with RawClient(bootstrap) as client:
        (response,) = client.request(request, 1).responses
    return response.error_code, response.error_message


def list_offset(
    bootstrap: str, topic: str, partition: int, timestamp: int, isolation_level: int = 0
) -> tuple[int, int]:
    """(error code, offset) of ListOffsets v9 for one partition (-2 earliest, -1 latest)."""
    request = list_offsets_request(topic, partition, timestamp, isolation_level)
    with RawClient(bootstrap) as client:
        response = client.request(request, 9)
    (p,) = response.topics[0].partitions
    return p.error_code, p.offset


def list_offsets_request(
    topic: str, partition: int, timestamp: int, isolation_level: int = 0
) -> ListOffsetsRequest:
    """A consumer's ListOffsets (replica id -1) for one partition and timestamp."""
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=partition, timestamp=timestamp
                    )
                ],
            )
        ],
    )


#: A partition as Metadata tells it: (error, leader, replicas, ISR, offline replicas).
ToldPartition = tuple[int, int, list[int], list[int], list[int]]


def told_partitions(topic: MetadataResponse.MetadataResponseTopic) -> dict[int, ToldPartition]:
    """A Metadata answer's topic, partition by partition (in the order told)."""
    return {
        p.partition_index: (
            p.error_code,
            p.leader_id,
            p.replica_nodes,
            p.isr_nodes,
            p.offline_replicas,
        )
        for p in topic.partitions
    }


def end_offset(bootstrap: str, topic: str, partition: int = 0, isolation_level: int = 0) -> int:
    """The latest offset: the high watermark, or the last stable offset under READ_COMMITTED."""
    code, offset = list_offset(bootstrap, topic, partition, -1, isolation_level)
    assert code == ErrorCode.NONE
    return offset


def produce_request(
    topic: str,
    partition: int,
    records: Sequence[SimpleRecord],
    *,
    acks: int = -1,
    **batch_args: Any,
) -> ProduceRequest:
    """A Produce request carrying one v2 batch of `records`."""
    return ProduceRequest(
        acks=acks,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=partition, records=build_record_batch(records, **batch_args)
                    )
                ],
            )
        ],
    )


def init_producer_id(bootstrap: str, version: int = 4, **fields: Any) -> Any:
    """An InitProducerId answer (no transactional id unless given) on a new connection."""
    request = InitProducerIdRequest(
        transactional_id=fields.pop("transactional_id", None),
        transaction_timeout_ms=fields.pop("transaction_timeout_ms", 60_000),
        **fields,
    )
    with RawClient(bootstrap) as c:
        return c.request(request, version)


def offset_commit_request(
    group: str, topic: str, offsets: dict[int, int], metadata: str = "", **fields: Any
) -> OffsetCommitRequest:
    """OffsetCommit of `offsets` by partition of `topic`; without `fields` (the generation and
    member id) an admin commit, as a group without members takes it."""
    return OffsetCommitRequest(
        group_id=group,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=o, committed_metadata=metadata
                    )
                    for p, o in offsets.items()
                ],
            )
        ],
        **fields,
    )


def offset_delete_request(group: str, topic: str, partitions: Sequence[int]) -> OffsetDeleteRequest:
    """OffsetDelete of the group's offsets of `partitions` of `topic`."""
    return OffsetDeleteRequest(
        group_id=group,
        topics=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=topic,
                partitions=[
                    OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p)
                    for p in partitions
                ],
            )
        ],
    )


def add_partitions_request(
    transactional_id: str, producer_id: int, producer_epoch: int, partitions: dict[str, list[int]]
) -> AddPartitionsToTxnRequest:
    """AddPartitionsToTxn as a client sends it (v3 and below)."""
    return AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch,
        v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
            for t, ps in partitions.items()
        ],
    )


def txn_offset_commit_request(
    transactional_id: str,
    group: str,
    producer_id: int,
    producer_epoch: int,
    offsets: dict[tuple[str, int], int],
    metadata: str = "",
    **fields: Any,
) -> TxnOffsetCommitRequest:
    """TxnOffsetCommit of `offsets` by (topic, partition); `fields` set the group generation's."""
    by_topic: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
    for (t, p), offset in offsets.items():
        by_topic.setdefault(t, []).append(
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=offset, committed_metadata=metadata
            )
        )
    return TxnOffsetCommitRequest(
        transactional_id=transactional_id,
        group_id=group,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
        **fields,
    )


def txn_markers_request(
    markers: list[tuple[int, int, int, bool, dict[str, list[int]]]],
) -> WriteTxnMarkersRequest:
    """WriteTxnMarkers of (producer id, producer epoch, coordinator epoch, commit, partitions)."""
    return WriteTxnMarkersRequest(
        markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=commit,
                coordinator_epoch=coordinator_epoch,
                topics=[
                    WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in topics.items()
                ],
            )
            for pid, epoch, coordinator_epoch, commit, topics in markers
        ]
    )


def decode_records(data: Any) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in a fetched records blob."""
    out = []
    for batch in iter_batches(bytes(data or b"")):
        for r in iter_records(batch, verify_crc=True):
            key = None if r.key is None else bytes(r.key)
            value = None if r.value is None else bytes(r.value)
            out.append((r.offset, key, value))
    return out


# Records the client tests send and expect back --------------------------------------------------

CREATE_TIME, LOG_APPEND_TIME = 0, 1
BASE_TS = 1_700_000_000_000

Headers = list[tuple[str, bytes | None]]


class Sample(NamedTuple):
    """A record as a test sends it."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


class Seen(NamedTuple):
    """A record as a consumer saw it, in one shape for every client."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    timestamp_type: int


def sample_records(null_header_values: bool = True) -> list[Sample]:
    """Keys, null keys and values, empty ones, repeated and unicode headers, binary data.

    kafka-python cannot send a null header value: it gets an empty one instead.
    """
    null = None if null_header_values else b""
    return [
        Sample(b"key-0", b"value-0", [], BASE_TS),
        Sample(None, b"no key", [("h", b"1")], BASE_TS + 1),
        Sample(b"tombstone", None, [], BASE_TS + 2),
        Sample(b"", b"", [], BASE_TS + 3),
        Sample(
            b"headers",
            b"v",
            [
                ("a", b"1"),
                ("a", b"2"),
                ("\u00fcn\u00ef", b"\x00\xff"),
                ("empty", b""),
                ("null", null),
            ],
            BASE_TS + 4,
        ),
        Sample(bytes(range(256)), bytes(range(256)) * 40, [], BASE_TS + 5),
        Sample(b"older", b"timestamps need not increase", [], BASE_TS - 86_400_000),
        Sample(
            "\u043a\u043b\u044e\u0447".encode(),
            "\u0437\u043d\u0430\u0447".encode(),
            [],
            BASE_TS + 6,
        ),
    ]


def expected(samples: Sequence[Sample], partition: int = 0, first_offset: int = 0) -> list[Seen]:
    return [
        Seen(partition, first_offset + i, s.key, s.value, list(s.headers), s.timestamp, CREATE_TIME)
        for i, s in enumerate(samples)
    ]


def fetch_request(
    topic: str,
    partition: int = 0,
    offset: int = 0,
    isolation_level: int = 0,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    replica_id: int = -1,
) -> FetchRequest:
    """A Fetch of one partition from `offset` (by default a consumer's that does not wait)."""
    return FetchRequest(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        isolation_level=isolation_level,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=16 << 20
                    )
                ],
            )
        ],
    )


def fetch_raw(
    bootstrap: str,
    topic: str,
    partition: int = 0,
    offset: int = 0,
    isolation_level: int = 0,
    version: int = 12,
) -> Any:
    """One Fetch (v12) of a partition: its PartitionData (records left as bytes)."""
    request = fetch_request(topic, partition, offset, isolation_level)
    with RawClient(bootstrap) as client:
        response = client.request(request, version)
    assert response.responses, (  # a throttled Fetch is answered without partitions
        f"Fetch answered no partitions: error {response.error_code}, "
        f"throttled {response.throttle_time_ms} ms"
    )
    return response.responses[0].partitions[0]


def stored_codecs(bootstrap: str, topic: str, partition: int = 0) -> set[int]:
    """The compression codec of every batch stored in a partition (as the producer sent it)."""
    data = fetch_raw(bootstrap, topic, partition).records
    return {batch.compression for batch in iter_batches(bytes(data or b""))}


def assert_stored_as_sent(bootstrap: str, topic: str, codec: int) -> None:
    """The partition's batches carry the producer's codec: the broker does not recompress.

    librdkafka sends a batch uncompressed when compressing would not make it smaller (a batch
    of one small record, when its linger splits the records), so batches without a codec are
    allowed beside those with it; at least one batch must carry it.
    """
    codecs = stored_codecs(bootstrap, topic)
    assert codec in codecs and codecs <= {codec, CompressionType.NONE}, codecs


def read_partition(
    bootstrap: str, topic: str, partition: int = 0
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from the log start to the high watermark, (offset, key, value), via Fetch."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    code, offset = list_offset(bootstrap, topic, partition, -2)
    assert code == ErrorCode.NONE
    while True:
        p = fetch_raw(bootstrap, topic, partition, offset)
        assert p.error_code == ErrorCode.NONE, p.error_code
        records = [r for r in decode_records(p.records) if r[0] >= offset]
        out += records
        if not records:
            assert offset == p.high_watermark, (offset, p.high_watermark)
            return out
        offset = records[-1][0] + 1


def advertised_api_keys(bootstrap: str) -> set[int]:
    """The API keys the broker advertises in ApiVersions."""
    with RawClient(bootstrap) as client:
        response = client.request(ApiVersionsRequest(), 0)
    return {k.api_key for k in response.api_keys}


# Prometheus scrapes ------------------------------------------------------------------------
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """Every sample of one scrape, parsed by prometheus_client's text parser."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def metrics_url(broker: BrokerProcess) -> str:
    """The URL of the broker's Prometheus endpoint (`wirebroker.metrics.listener` set)."""
    line = broker.wait_for_log("metrics endpoint on")
    assert line is not None, "the broker did not print its metrics endpoint"
    m = re.search(r"metrics endpoint on (?P<url>http://\S+/metrics)", line)
    assert m is not None, line
    return m["url"]


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def round_trip_confluent(bootstrap: str, topic: str, count: int = 3) -> list[bytes]:
    """Produce `count` records (m0, m1, ...) with confluent-kafka, acks=all, and consume them
    back from the beginning in a group of the topic's name; the values read."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        while len(got) < count:
            msg = consumer.poll(30)
            assert msg is not None, f"no record after {got}"
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        return got
    finally:
        consumer.close()
