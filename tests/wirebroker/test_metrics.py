"""The Prometheus endpoint (`wirebroker.metrics.listener`): a real broker process, real clients,
and the scrape read by prometheus_client's own text parser.

Each test scrapes before and after what it does and checks the difference, so the tests of the
module share one broker without depending on their order.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from protocol.errors import ErrorCode
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess, broker_process
from tests.wirebroker.helpers import (
    RawClient,
    Samples,
    create_topic,
    fetch_request,
    metrics_url,
    produce_request,
    scrape,
    value,
    wait_until,
)
from wirebroker.config import BrokerConfig, ConfigError

pytestmark = pytest.mark.integration

BROKER_PROPERTIES = {"wirebroker.metrics.listener": "127.0.0.1:0"}


@pytest.fixture(scope="module", name="metrics_url")
def metrics_url_of_the_broker(broker: BrokerProcess) -> str:
    return metrics_url(broker)


def produce(bootstrap: str, topic: str, count: int, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"v" * size, key=str(i).encode())
    assert producer.flush(30) == 0


def test_produce_moves_messages_in_and_bytes_in(
    broker: BrokerProcess, metrics_url: str, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    before = scrape(metrics_url)
    produce(broker.bootstrap, topic, 50)
    after = scrape(metrics_url)

    messages_in = "kafka_server_brokertopicmetrics_messagesin_total"
    assert value(after, messages_in, topic=topic) - value(before, messages_in, topic=topic) == 50
    assert value(after, messages_in) - value(before, messages_in) == 50
    bytes_in = "kafka_server_brokertopicmetrics_bytesin_total"
    assert value(after, bytes_in, topic=topic) > value(before, bytes_in, topic=topic) + 50 * 100
    produces = sum(
        v - before.get(k, 0.0)
        for k, v in after.items()
        if k[0] == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in k[1]
    )
    assert produces >= 1
    assert value(after, "kafka_log_log_size", topic=topic, partition="0") > 50 * 100
    assert value(after, "kafka_log_log_logendoffset", topic=topic, partition="0") == 50
    assert value(after, "kafka_network_requestmetrics_totaltimems_count", request="Produce") > 0
    p99 = value(
        after, "kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.99"
    )
    assert p99 > 0
    assert value(after, "kafka_server_replicamanager_leadercount") >= 1
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(after, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0


def test_consumer_group_lag_appears_and_drops_to_zero(
    broker: BrokerProcess, metrics_url: str, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, 40)
    group = f"{topic}-group"
    bytes_out = "kafka_server_brokertopicmetrics_bytesout_total"
    start = scrape(metrics_url)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
        labels = {"consumergroup": group, "topic": topic, "partition": "0"}
        halfway = scrape(metrics_url)
        assert value(halfway, "kafka_consumergroup_current_offset", **labels) == 10
        assert value(halfway, "kafka_consumergroup_lag", **labels) == 30
        assert value(halfway, "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == 30

        got = 0
        while got < 40:
            batch = consumer.consume(num_messages=100, timeout=10)
            assert batch, f"consumed only {got} of 40"
            got += sum(1 for m in batch if m.error() is None)
        consumer.commit(asynchronous=False)
        done = scrape(metrics_url)
    finally:
        consumer.close()
    assert value(done, "kafka_consumergroup_current_offset", **labels) == 40
    assert done[("kafka_consumergroup_lag", frozenset(labels.items()))] == 0
    sent = value(done, bytes_out, topic=topic) - value(start, bytes_out, topic=topic)
    assert sent >= 40 * 100
    fetches = [
        k
        for k in done
        if k[0] == "kafka_network_requestmetrics_requests_total"
        and ("request", "FetchConsumer") in k[1]
    ]
    assert fetches


def test_request_counts_and_errors_per_api(broker: BrokerProcess, metrics_url: str) -> None:
    before = scrape(metrics_url)
    with RawClient(broker.bootstrap) as client:
        response: HeartbeatResponse = client.request(
            HeartbeatRequest(group_id="no-such-group", generation_id=1, member_id="m"), 4
        )
    assert response.error_code != ErrorCode.NONE
    error = ErrorCode(response.error_code).name
    after = scrape(metrics_url)
    requests = "kafka_network_requestmetrics_requests_total"
    assert (
        value(after, requests, request="Heartbeat", version="4")
        - value(before, requests, request="Heartbeat", version="4")
        == 1
    )
    errors = "kafka_network_requestmetrics_errors_total"
    assert (
        value(after, errors, request="Heartbeat", error=error)
        - value(before, errors, request="Heartbeat", error=error)
        == 1
    )
    assert value(after, "kafka_server_socket_server_metrics_connection_count") >= 0


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_failed_produce_and_fetch_requests_per_topic(
    broker: BrokerProcess, metrics_url: str, topic: str
) -> None:
    """Kafka's Total/Failed Produce/FetchRequestsPerSec per topic: a keyless record on a
    compacted topic is a failed produce (invalid record); a fetch out of range is an error of
    the Fetch API but, as in Kafka, not a failed fetch."""
    create_topic(broker.bootstrap, topic, configs={"cleanup.policy": "compact"})
    before = scrape(metrics_url)
    with RawClient(broker.bootstrap) as client:
        keyed = produce_request(topic, 0, [SimpleRecord(b"k", b"v")], acks=1)
        assert client.request(keyed, 9).responses[0].partition_responses[0].error_code == 0
        keyless = produce_request(topic, 0, [SimpleRecord(None, b"v")], acks=1)
        failed = client.request(keyless, 9).responses[0].partition_responses[0]
        assert failed.error_code == ErrorCode.INVALID_RECORD
        fetched = client.request(fetch_request(topic, 0, offset=1), 12)
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.NONE
        beyond = client.request(fetch_request(topic, 0, offset=99), 12)
        assert beyond.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    after = scrape(metrics_url)
    topic_metrics = "kafka_server_brokertopicmetrics_"
    assert delta(before, after, f"{topic_metrics}totalproducerequests_total", topic=topic) == 2
    assert delta(before, after, f"{topic_metrics}failedproducerequests_total", topic=topic) == 1
    assert delta(before, after, f"{topic_metrics}failedproducerequests_total") == 1
    assert delta(before, after, f"{topic_metrics}totalfetchrequests_total", topic=topic) == 2
    assert delta(before, after, f"{topic_metrics}failedfetchrequests_total", topic=topic) == 0
    errors = "kafka_network_requestmetrics_errors_total"
    assert delta(before, after, errors, request="Produce", error="INVALID_RECORD") == 1
    assert delta(before, after, errors, request="Fetch", error="OFFSET_OUT_OF_RANGE") == 1
    assert delta(before, after, errors, request="FetchConsumer", error="OFFSET_OUT_OF_RANGE") == 0


def test_connections_per_listener(broker: BrokerProcess, metrics_url: str) -> None:
    labels = {"listener": "PLAINTEXT", "networkProcessor": "0"}
    prefix = "kafka_server_socket_server_metrics_"
    before = scrape(metrics_url)
    clients = [RawClient(broker.bootstrap) for _ in range(3)]
    try:
        for client in clients:  # each connection has been accepted once it answers
            client.request(ApiVersionsRequest(), 3)
        opened = scrape(metrics_url)
    finally:
        for client in clients:
            client.close()
    assert delta(before, opened, f"{prefix}connection_count", **labels) == 3
    assert delta(before, opened, f"{prefix}connection_creation_total", **labels) == 3
    assert value(opened, f"{prefix}connection_creation_rate", **labels) > 0
    closed = wait_until(
        lambda: (
            (s := scrape(metrics_url))
            and delta(before, s, f"{prefix}connection_close_total", **labels) == 3
            and s
        ),
        what="the three connections closed",
    )
    assert delta(before, closed, f"{prefix}connection_count", **labels) == 0
    assert value(closed, f"{prefix}connection_close_rate", **labels) > 0


def test_request_times_split_a_long_poll(tmp_path: Path, topic: str) -> None:
    """A consumer's fetch that waits for records: its wait is remote time, its handling local
    time, and the total covers both (a broker of its own, so the quantiles are this fetch's)."""
    with broker_process(tmp_path, BROKER_PROPERTIES) as own:
        url = metrics_url(own)
        create_topic(own.bootstrap, topic)
        waiting = fetch_request(topic, 0)
        waiting.max_wait_ms, waiting.min_bytes = 400, 1
        with RawClient(own.bootstrap) as client:
            response = client.request(waiting, 12)
        assert response.responses[0].partitions[0].error_code == ErrorCode.NONE
        samples = scrape(url)
    times = "kafka_network_requestmetrics_"
    fetch = {"request": "FetchConsumer", "quantile": "0.50"}
    assert value(samples, f"{times}totaltimems_count", request="FetchConsumer") == 1
    remote = value(samples, f"{times}remotetimems", **fetch)
    local = value(samples, f"{times}localtimems", **fetch)
    total = value(samples, f"{times}totaltimems", **fetch)
    assert 350 <= remote <= total
    assert 0 < local < remote
    parts = ["requestqueuetimems", "responsequeuetimems", "responsesendtimems"]
    assert all(value(samples, f"{times}{part}", **fetch) >= 0 for part in parts)
    assert total == pytest.approx(
        remote + local + sum(value(samples, f"{times}{part}", **fetch) for part in parts)
    )
    assert value(samples, f"{times}throttletimems", **fetch) == 0
    assert value(samples, f"{times}remotetimems", request="CreateTopics", quantile="0.50") == 0


def test_transaction_coordinator_metrics(
    broker: BrokerProcess, metrics_url: str, topic: str
) -> None:
    """Kafka's transaction coordinator metrics: verifications (KIP-890) counted and timed,
    the marker queues empty once the transactions completed."""
    create_topic(broker.bootstrap, topic)
    before = scrape(metrics_url)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    for _ in range(2):
        producer.begin_transaction()
        producer.produce(topic, b"v", partition=0)
        producer.commit_transaction(30)
    after = scrape(metrics_url)
    verification = "kafka_server_addpartitionstotxnmanager_verificationtimems"
    assert value(after, f"{verification}_count") - value(before, f"{verification}_count") == 2
    assert value(after, verification, quantile="0.99") >= 0
    failures = "kafka_server_addpartitionstotxnmanager_verificationfailurerate_count"
    assert value(after, failures) == value(before, failures)
    queues = "kafka_coordinator_transaction_transactionmarkerchannelmanager_"
    assert value(after, f"{queues}unknowndestinationqueuesize") == 0
    assert value(after, f"{queues}logappendretryqueuesize") == 0
    load = "kafka_server_transaction_coordinator_metrics_partition_load_time_max"
    assert (load, frozenset()) in after  # NaN: nothing loaded in the last 30 s


def test_only_get_metrics_is_served(metrics_url: str) -> None:
    base = metrics_url.removesuffix("/metrics")
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{base}/other", timeout=10)
    assert missing.value.code == 404
    post = urllib.request.Request(metrics_url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=10)
    assert refused.value.code == 405
    head = urllib.request.Request(metrics_url, method="HEAD")
    with urllib.request.urlopen(head, timeout=10) as response:
        assert response.status == 200
        assert response.read() == b""


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on: its socket inodes matched in /proc/net/tcp*."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_the_endpoint_is_off_by_default(tmp_path: Path) -> None:
    with broker_process(tmp_path) as plain:
        assert plain.proc is not None
        assert _listening_ports(plain.proc.pid) == {plain.port}
        assert plain.wait_for_log("metrics endpoint", timeout=0) is None
        with socket.create_connection(("127.0.0.1", plain.port), timeout=10):
            pass


@pytest.mark.parametrize("bad", ["9404", "localhost", "127.0.0.1:http", "127.0.0.1:70000"])
def test_a_bad_listener_is_a_configuration_error(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="wirebroker.metrics.listener"):
        BrokerConfig.from_properties({"wirebroker.metrics.listener": bad})
    command = [sys.executable, "-m", "wirebroker", "serve", "--log-dirs", str(tmp_path)]
    command += ["--override", f"wirebroker.metrics.listener={bad}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "configuration error" in done.stderr
    assert "wirebroker.metrics.listener" in done.stderr


def test_the_grafana_dashboard_uses_served_names(metrics_url: str) -> None:
    dashboard = Path(__file__).parents[2] / "config" / "grafana" / "wirebroker.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"] for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"\b(kafka_[a-z_]+)\{", e)}
    assert len(names) >= 10
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        families = {f.name for f in text_string_to_metric_families(response.read().decode())}
    served = families | {f"{n}_total" for n in families}
    # Client quota metrics are served once a quota is set (test_dashboard.py sets one).
    assert {n for n in names - served if not n.startswith("kafka_server_quota_")} == set()
