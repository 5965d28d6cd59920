"""kafka-reassign-partitions --throttle on a 3-broker cluster of processes, wirebroker's or,
with ``WIREBROKER_CLUSTER_TARGET=kafka``, Apache Kafka 3.9's (how the scenario was checked).

A partition with data moves from broker 1 to broker 2 under an inter-broker throttle: no faster
than the throttle, and `--verify`, once it is done, removes the throttles with exit code 0.
Everything is seen as a client sees it: Metadata, and Kafka's own tools.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from compat.kafka_process import run_kafka_tool
from tests.cluster.processes import running_cluster, wait_for

pytestmark = pytest.mark.integration

REASSIGN_COMMAND = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
THROTTLE = 250_000  # bytes a second
DATA = 1_600_000  # bytes of record values moved


@pytest.mark.timeout(300)
def test_reassign_partitions_with_a_throttle(kind: str, tmp_path: Path) -> None:
    # Small replica fetches: the throttle holds back each one, not a megabyte at once.
    with running_cluster(kind, overrides={"replica.fetch.max.bytes": "65536"}) as cluster:
        topic = "moving"
        run_kafka_tool(
            TOPIC_COMMAND,
            ["--bootstrap-server", cluster.bootstrap, "--create", "--topic", topic]
            + ["--replica-assignment", "1"],
        )
        wait_for(lambda: cluster.partitions(topic)[0].leader == 1, 60.0, "broker 1 to lead")
        # Batches far smaller than a fetch: a fetch returns at least one whole batch.
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 16384}
        )
        for _ in range(DATA // 1000):
            producer.produce(topic, b"m" * 1000)
            producer.poll(0)
        assert producer.flush(60) == 0
        del producer  # before the cluster stops, or it keeps reconnecting

        plan = tmp_path / "reassign.json"
        plan.write_text(
            json.dumps(
                {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2]}]}
            )
        )
        reassign = [REASSIGN_COMMAND, "--bootstrap-server", cluster.bootstrap]
        reassign += ["--reassignment-json-file", str(plan)]
        started = time.monotonic()
        executed = run_kafka_tool(
            reassign[0], [*reassign[1:], "--execute", "--throttle", str(THROTTLE)]
        )
        assert (
            f"The inter-broker throttle limit was set to {THROTTLE} B/s" in executed.stdout.decode()
        )
        wait_for(
            lambda: cluster.partitions(topic)[0].replicas == [2], 120.0, "the move to broker 2"
        )
        elapsed = time.monotonic() - started
        # No faster than the throttle (the tool's JVM start-up is in `elapsed`: it only slows).
        assert DATA / elapsed <= 1.2 * THROTTLE, elapsed

        verified = run_kafka_tool(reassign[0], [*reassign[1:], "--verify"])
        out = verified.stdout.decode()
        assert verified.returncode == 0
        assert "Reassignment of partition moving-0 is completed." in out
        assert "Clearing broker-level throttles on brokers 1,2" in out
        assert f"Clearing topic-level throttles on topic {topic}" in out
        for entity in (["topics", topic], ["brokers", "1"], ["brokers", "2"]):
            described = run_kafka_tool(
                CONFIG_COMMAND,
                ["--bootstrap-server", cluster.bootstrap, "--describe", "--entity-type", *entity],
            ).stdout.decode()
            assert "throttled" not in described, described
