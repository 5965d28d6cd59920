"""ZooKeeper trouble never yields two leaders for one partition epoch.

A broker whose ZooKeeper session expires (it is paused past `zookeeper.session.timeout.ms`) loses
its leaderships to the others; a ZooKeeper restart leaves brokers to reconnect. Meanwhile every
broker is asked, continuously, whether it leads each partition and in which epoch; no epoch may
ever have two brokers claiming it, and acknowledged records survive.
"""

from __future__ import annotations

from functools import partial

import pytest

from tests.cluster.processes import LOOPBACK, Cluster, running_cluster, wait_for
from tests.cluster.workload import ConfluentProducer, LeaderProbe, read_all, verify

pytestmark = pytest.mark.integration

PARTITIONS = 3
SESSION_TIMEOUT_S = 6.0  # harness.CLUSTER_PROPERTIES["zookeeper.session.timeout.ms"]


def test_session_expiry_of_a_leader_and_of_the_controller(kind: str) -> None:
    with running_cluster(kind) as cluster:
        topic = "expiry"
        cluster.create_topic(topic, PARTITIONS)
        brokers = {i: f"{LOOPBACK}:{n.port}" for i, n in cluster.nodes.items()}
        with (
            LeaderProbe(brokers, topic, PARTITIONS) as probe,
            ConfluentProducer(cluster.bootstrap, topic, PARTITIONS, rate=200) as producer,
        ):
            # Every replica must know the producer before its leader goes: librdkafka takes a
            # later batch's success as proof that an earlier failed one was written (its
            # "implicit ack"), and a new leader that never saw the producer accepts any
            # sequence, so the first records, sent to a paused leader, would be reported
            # delivered without being anywhere (confluentinc/confluent-kafka-go#921; Kafka too).
            wait_for(
                lambda: {a.partition for a in producer.report.acked} == set(range(PARTITIONS)),
                60,
                "acknowledged records on every partition before the outage",
            )
            for victim in (cluster.leader(topic, 0), cluster.controller()):
                cluster.pause(victim)
                try:
                    # Past the session timeout the others must take the partitions over.
                    wait_for(
                        partial(_led_by_other, cluster, topic, victim),
                        SESSION_TIMEOUT_S * 5,
                        f"a leader other than the paused broker {victim}",
                    )
                finally:
                    cluster.resume(victim)
                cluster.wait_fully_replicated(topic)
            report = producer.stop()
        assert not probe.conflicts(), f"two leaders in one epoch: {probe.conflicts()}"
        assert not report.errors, report.errors[:10]
        verify(report.acked, read_all(cluster.bootstrap, topic, PARTITIONS))


def test_zookeeper_restart(kind: str) -> None:
    with running_cluster(kind) as cluster:
        topic = "zk-restart"
        cluster.create_topic(topic, PARTITIONS)
        brokers = {i: f"{LOOPBACK}:{n.port}" for i, n in cluster.nodes.items()}
        with (
            LeaderProbe(brokers, topic, PARTITIONS) as probe,
            ConfluentProducer(cluster.bootstrap, topic, PARTITIONS, rate=200) as producer,
        ):
            wait_for(lambda: len(producer.report.acked) >= 100, 60, "traffic before the outage")
            cluster.restart_zookeeper(down_for=2.0)
            cluster.wait_fully_replicated(topic)
            acked_before = len(producer.report.acked)
            wait_for(
                lambda: len(producer.report.acked) > acked_before + 100,
                60,
                "produce to go on after ZooKeeper came back",
            )
            report = producer.stop()
        assert not probe.conflicts(), f"two leaders in one epoch: {probe.conflicts()}"
        assert not report.errors, report.errors[:10]
        verify(report.acked, read_all(cluster.bootstrap, topic, PARTITIONS))


def _led_by_other(cluster: Cluster, topic: str, victim: int) -> bool:
    return cluster.partitions(topic)[0].leader not in (-1, victim)
