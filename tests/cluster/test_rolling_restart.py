"""A rolling restart under load: each broker in turn shuts down cleanly and comes back.

A clean stop is a controlled shutdown: leadership moves away before the broker goes, so the
producer sees at most retriable errors (none reach the application) and nothing is lost. A
broker coming back answers Metadata only with the cluster it learned from the controller, never
with no brokers and unknown topics (which makes librdkafka fail records).
"""

from __future__ import annotations

import threading
import time

import pytest

from compat.kafka_process import LOOPBACK
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.cluster.processes import running_cluster
from tests.cluster.workload import ConfluentProducer, GroupConsumer, read_all, verify
from tests.wirebroker.helpers import RawClient

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.mark.timeout(600)  # three restarts, each waiting for full replication
def test_rolling_restart_under_load(kind: str) -> None:
    with running_cluster(kind) as cluster:
        topic = "rolling"
        cluster.create_topic(topic, PARTITIONS)
        with (
            ConfluentProducer(cluster.bootstrap, topic, PARTITIONS) as producer,
            GroupConsumer(cluster.bootstrap, topic, "rolling-group") as consumer,
        ):
            for node in cluster.nodes.values():
                node.stop()
                node.start()
                cluster.wait_fully_replicated(topic)
            report = producer.stop()
            assert not report.errors, report.errors[:10]
            consumer.wait_for(report.acked)
        verify(report.acked, read_all(cluster.bootstrap, topic, PARTITIONS))


def _first_metadata(port: int, topic: str, answers: list[MetadataResponse], until: float) -> None:
    """Ask Metadata on `port` as soon as a connection is accepted there (retrying until then)."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    while time.monotonic() < until:
        try:
            with RawClient(f"{LOOPBACK}:{port}", timeout=30.0) as client:
                answers.append(client.request(request, 12))
                return
        except OSError:  # not listening yet: retry at once, the race with the start is the test
            time.sleep(0.005)


def test_a_restarted_broker_answers_metadata_once_it_knows_the_cluster(kind: str) -> None:
    with running_cluster(kind) as cluster:
        topic = "known"
        cluster.create_topic(topic, PARTITIONS)
        node = cluster.node(3)
        node.stop()
        answers: list[MetadataResponse] = []
        racer = threading.Thread(
            target=_first_metadata, args=(node.port, topic, answers, time.monotonic() + 90)
        )
        racer.start()
        try:
            node.start()
        finally:
            racer.join(timeout=90)
        (first,) = answers
        assert {b.node_id for b in first.brokers} == {1, 2, 3}
        (described,) = first.topics
        assert described.error_code == 0
        assert len(described.partitions) == PARTITIONS
