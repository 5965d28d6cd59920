"""A rolling restart under load: each broker in turn shuts down cleanly and comes back.

A clean stop is a controlled shutdown: leadership moves away before the broker goes, so the
producer sees at most retriable errors (none reach the application) and nothing is lost.
"""

from __future__ import annotations

import pytest

from tests.cluster.processes import running_cluster
from tests.cluster.workload import ConfluentProducer, GroupConsumer, read_all, verify

pytestmark = pytest.mark.integration

PARTITIONS = 3


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
