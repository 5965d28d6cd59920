"""The embedding API and the pytest fixture, used the way a user would.

`run_broker()` from plain (threaded) code and `open_broker()` from trio code, each serving real
clients; overrides as keywords and as a properties mapping; temporary data removed on exit and
explicit `log_dirs` kept; a bad setting failing at start with the reason. The
`wirebroker_bootstrap` fixture is used here directly, and from a separate project that only has
wirebroker installed (the plugin is registered by its entry point).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from protocol.api import decode_response
from protocol.errors import ErrorCode
from protocol.framing import NEED_DATA, FrameBuffer
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.record_batch import SimpleRecord
from tests.wirebroker.helpers import (
    BASE_TS,
    RawClient,
    host_port,
    list_offset,
    produce_request,
    request_frame,
)
from wirebroker.config import ConfigError
from wirebroker.embed import open_broker, run_broker

pytestmark = pytest.mark.integration

TIMEOUT = 15.0


def roundtrip_kafka_python(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    try:
        for i in range(3):
            producer.send(
                topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, timestamp_ms=BASE_TS
            )
        producer.flush(timeout=TIMEOUT)
    finally:
        producer.close(timeout=TIMEOUT)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[tuple[int, bytes, bytes]] = []
        for _ in range(50):
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.offset, r.key, r.value) for r in records]
            if len(out) >= 3:
                break
        return out
    finally:
        consumer.close()


def log_dir_of(bootstrap: str) -> Path:
    with RawClient(bootstrap) as client:
        response = client.request(DescribeLogDirsRequest(topics=None), 4)
    (result,) = response.results
    return Path(result.log_dir)


def refuses_connections(bootstrap: str) -> bool:
    try:
        socket.create_connection(host_port(bootstrap), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_run_broker_serves_clients_and_cleans_up() -> None:
    with run_broker() as bootstrap:
        assert bootstrap.startswith("127.0.0.1:")
        data_dir = log_dir_of(bootstrap)
        assert data_dir.is_dir() and (data_dir / "meta.properties").exists()
        assert roundtrip_kafka_python(bootstrap, "embedded") == [
            (0, b"k0", b"v0"),
            (1, b"k1", b"v1"),
            (2, b"k2", b"v2"),
        ]
    assert not data_dir.exists()  # the temporary data directory went with the broker
    assert refuses_connections(bootstrap)


def test_run_broker_takes_overrides_as_keywords_and_as_properties() -> None:
    with (
        run_broker({"message.max.bytes": "5000"}, num_partitions="3") as bootstrap,
        RawClient(bootstrap) as client,
    ):
        wanted = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="auto")])
        created = client.request(wanted, 12)  # creates it: LEADER_NOT_AVAILABLE, as Kafka
        assert created.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
        metadata = client.request(wanted, 12)
        assert len(metadata.topics[0].partitions) == 3  # num.partitions
        big = [SimpleRecord(None, os.urandom(6000))]
        response = client.request(produce_request("auto", 0, big), 9)
        assert (
            response.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
        )


def test_run_broker_keeps_explicit_log_dirs(tmp_path: Path) -> None:
    with run_broker(log_dirs=str(tmp_path)) as bootstrap:
        assert log_dir_of(bootstrap) == tmp_path.resolve()
        assert roundtrip_kafka_python(bootstrap, "kept")[-1] == (2, b"k2", b"v2")
    assert (tmp_path / "kept-0").is_dir()
    with run_broker(log_dirs=str(tmp_path)) as bootstrap:  # a new port, the same data
        assert list_offset(bootstrap, "kept", 0, -1) == (ErrorCode.NONE, 3)


def test_run_broker_reports_a_bad_setting() -> None:
    with (
        pytest.raises(RuntimeError, match="failed to start") as raised,
        run_broker(message_max_bytes="0"),
    ):
        pytest.fail("the broker started")
    assert isinstance(raised.value.__cause__, ConfigError)
    assert "message.max.bytes" in str(raised.value.__cause__)


def test_open_broker_in_trio() -> None:
    """A trio program: raw requests on a trio stream, and a blocking client in a thread."""

    async def main() -> None:
        async with open_broker(num_partitions="2") as bootstrap:
            host, port = host_port(bootstrap)
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                await stream.send_all(request_frame(ApiVersionsRequest(), 0, 7))
                frames = FrameBuffer()
                frame = NEED_DATA
                with trio.fail_after(TIMEOUT):
                    while frame is NEED_DATA:
                        frames.receive_data(await stream.receive_some(65536))
                        frame = frames.next_frame()
                response = decode_response(frame, ApiVersionsRequest.API_KEY, 0)  # type: ignore[arg-type]
                assert response.header.correlation_id == 7
                assert response.body.error_code == ErrorCode.NONE
            records = await trio.to_thread.run_sync(roundtrip_kafka_python, bootstrap, "in-trio")
            assert [offset for offset, _, _ in records] == [0, 1, 2]
        assert refuses_connections(bootstrap)

    trio.run(main)


def test_the_pytest_fixture(wirebroker_bootstrap: str) -> None:
    """A fresh broker for this test: no topics yet, and real clients work against it."""
    with RawClient(wirebroker_bootstrap) as client:
        assert client.request(MetadataRequest(topics=None), 12).topics == []
    producer = Producer({"bootstrap.servers": wirebroker_bootstrap})
    producer.produce("fixture", b"value", b"key", partition=0)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": wirebroker_bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition("fixture", 0, 0)])
        messages = []
        for _ in range(50):
            messages += consumer.consume(1, timeout=0.2)
            if messages:
                break
        (msg,) = messages
        assert (msg.error(), msg.offset(), msg.key(), msg.value()) == (None, 0, b"key", b"value")
    finally:
        consumer.close()


def test_the_pytest_fixture_in_a_users_project(tmp_path: Path) -> None:
    """A project of its own, with no conftest: the installed plugin provides the fixture."""
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            from kafka import KafkaProducer

            def test_produce(wirebroker_bootstrap):
                producer = KafkaProducer(
                    bootstrap_servers=wirebroker_bootstrap, enable_idempotence=False
                )
                metadata = producer.send("user-topic", b"hello").get(timeout=10)
                producer.close()
                assert metadata.offset == 0

            def test_each_test_gets_a_fresh_broker(wirebroker_bootstrap):
                producer = KafkaProducer(
                    bootstrap_servers=wirebroker_bootstrap, enable_idempotence=False
                )
                metadata = producer.send("user-topic", b"hello").get(timeout=10)
                producer.close()
                assert metadata.offset == 0
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
