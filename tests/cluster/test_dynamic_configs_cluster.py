"""Dynamic broker configs on a 3-broker cluster, changed with Kafka's kafka-configs.

A value set on the cluster default reaches every broker (through `/config/brokers/<default>`
and its `/config/changes` notification), a per-broker value wins on its broker, both survive a
restart, and `message.max.bytes` takes effect on each partition's leader at once. Broker
loggers change on the one broker named. Run against Kafka 3.9 too with
`WIREBROKER_CLUSTER_TARGET=kafka` (how the scenario was checked).
"""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from compat.kafka_process import run_kafka_tool
from protocol.errors import ErrorCode
from protocol.record_batch import SimpleRecord
from tests.cluster.processes import Cluster, running_cluster, wait_for, zk_session
from tests.wirebroker.helpers import (
    BROKER,
    BROKER_LOGGER,
    RawClient,
    describe_configs,
    produce_request,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3


def kafka_configs(cluster: Cluster, *args: str) -> str:
    done = run_kafka_tool(
        "kafka.admin.ConfigCommand", ["--bootstrap-server", cluster.bootstrap, *args]
    )
    return done.stdout.decode()


def own_value(cluster: Cluster, node_id: int, name: str, resource_type: int = BROKER) -> tuple:
    """(value, source) of a key as the broker itself describes it."""
    bootstrap = f"127.0.0.1:{cluster.node(node_id).port}"
    result = describe_configs(bootstrap, resource_type, str(node_id), [name])
    (config,) = result.configs
    return config.value, config.config_source


def produce_to_leader(cluster: Cluster, topic: str, partition: int, size: int) -> int:
    leader = cluster.leader(topic, partition)
    record = SimpleRecord(None, b"x" * size, timestamp=int(time.time() * 1000))
    with RawClient(f"127.0.0.1:{cluster.node(leader).port}") as client:
        response = client.request(produce_request(topic, partition, [record]), 9)
    return int(response.responses[0].partition_responses[0].error_code)


def test_default_reaches_every_broker_and_per_broker_wins(kind: str) -> None:
    with running_cluster(kind) as cluster:
        kafka_configs(
            cluster, "--alter", "--entity-type", "brokers", "--entity-default",
            "--add-config", "message.max.bytes=5000,num.replica.fetchers=2",
        )  # fmt: skip
        kafka_configs(
            cluster, "--alter", "--entity-type", "brokers", "--entity-name", "2",
            "--add-config", "message.max.bytes=30000",
        )  # fmt: skip
        expected = {
            1: ("5000", DYNAMIC_DEFAULT_BROKER_CONFIG),
            2: ("30000", DYNAMIC_BROKER_CONFIG),
            3: ("5000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        }
        for node_id, value in expected.items():
            wait_for(
                lambda n=node_id, v=value: own_value(cluster, n, "message.max.bytes") == v,  # type: ignore[misc]
                30.0,
                f"broker {node_id} to have message.max.bytes {value}",
            )
        assert own_value(cluster, 3, "num.replica.fetchers") == (
            "2",
            DYNAMIC_DEFAULT_BROKER_CONFIG,
        )
        # Stored as Kafka stores them.
        with zk_session(KazooClient(hosts=cluster.zk.connect), 30) as zk:
            default = json.loads(zk.get("/config/brokers/<default>")[0])
            assert default == {
                "version": 1,
                "config": {"message.max.bytes": "5000", "num.replica.fetchers": "2"},
            }
            two = json.loads(zk.get("/config/brokers/2")[0])
            assert two["config"] == {"message.max.bytes": "30000"}
            changes = [
                json.loads(zk.get(f"/config/changes/{c}")[0])["entity_path"]
                for c in sorted(zk.get_children("/config/changes"))
            ]
            assert changes[-2:] == ["brokers/<default>", "brokers/2"]

        # message.max.bytes on each leader: 20 KB refused by brokers 1 and 3, taken by 2.
        cluster.create_topic("sized", partitions=3)
        for partition in range(3):
            leader = cluster.leader("sized", partition)
            code = produce_to_leader(cluster, "sized", partition, 20_000)
            assert code == (ErrorCode.NONE if leader == 2 else ErrorCode.MESSAGE_TOO_LARGE), (
                f"leader {leader}"
            )

        # Broker loggers: broker 3 only.
        kafka_configs(
            cluster, "--alter", "--entity-type", "broker-loggers", "--entity-name", "3",
            "--add-config", "root=ERROR",
        )  # fmt: skip
        assert own_value(cluster, 3, "root", BROKER_LOGGER)[0] == "ERROR"
        assert own_value(cluster, 1, "root", BROKER_LOGGER)[0] != "ERROR"

        # A restart keeps both levels of broker configs.
        cluster.node(2).stop()
        cluster.node(2).start()
        wait_for(lambda: cluster.brokers() == {1, 2, 3}, 90.0, "broker 2 back")
        assert own_value(cluster, 2, "message.max.bytes") == ("30000", DYNAMIC_BROKER_CONFIG)
        assert own_value(cluster, 2, "num.replica.fetchers") == (
            "2",
            DYNAMIC_DEFAULT_BROKER_CONFIG,
        )
        described = kafka_configs(
            cluster, "--describe", "--entity-type", "brokers", "--entity-name", "2"
        )
        assert "message.max.bytes=30000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:" in (
            described
        )


def test_unclean_election_turned_on_at_run_time(kind: str) -> None:
    """A partition whose only in-sync replica is gone stays offline; turning
    unclean.leader.election.enable on as the cluster default elects the out-of-sync replica
    at once (Kafka's controller does so since 2.0)."""
    with running_cluster(kind) as cluster:
        run_kafka_tool(
            "org.apache.kafka.tools.TopicCommand",
            ["--bootstrap-server", cluster.bootstrap, "--create", "--topic", "lost"]
            + ["--replica-assignment", "1:2"],
        )
        cluster.wait_isr("lost", 0, {1, 2})
        cluster.node(2).stop()  # controlled shutdown: out of the ISR
        cluster.wait_isr("lost", 0, {1})
        cluster.node(1).stop()  # the last in-sync replica: the partition is offline
        cluster.node(2).start()
        wait_for(lambda: cluster.brokers() == {2, 3}, 90.0, "broker 2 back, broker 1 gone")
        # (the broker answering may learn the live brokers before the partition's leader)
        wait_for(lambda: cluster.partitions("lost")[0].leader == -1, 30.0, "lost-0 offline")
        kafka_configs(
            cluster, "--alter", "--entity-type", "brokers", "--entity-default",
            "--add-config", "unclean.leader.election.enable=true",
        )  # fmt: skip
        wait_for(
            lambda: cluster.partitions("lost")[0].leader == 2, 60.0, "an unclean election of 2"
        )
