"""Leaders die; acknowledged records survive (RF=3, min.insync.replicas=2, acks=all).

The issue's chaos test: kill -9 the leader of a partition every 10 s for two minutes while an
idempotent producer of each client (confluent-kafka and Kafka's Java client, at once, each on
its own topic) writes and a consumer group reads; then zero acknowledged records lost, zero
duplicates, per-partition order kept, and the consumers finish. And KIP-101's double
failover: two leaders lost in quick succession under acks=1 leave every replica's log
identical once they are back.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import pytest

from protocol.record_batch import RecordBatchView
from protocol.records import iter_batches, iter_records
from tests.cluster.processes import Cluster, running_cluster, wait_for
from tests.cluster.workload import (
    Acked,
    ConfluentProducer,
    GroupConsumer,
    JavaProducer,
    read_all,
    verify,
)

pytestmark = pytest.mark.integration

CHAOS_SECONDS = float(os.environ.get("WIREBROKER_CHAOS_SECONDS", "120"))
KILL_EVERY_S = 10.0
PARTITIONS = 3
CLIENTS = ("confluent-kafka", "java")


@pytest.mark.timeout(CHAOS_SECONDS * 3 + 300)  # restarts run late on a loaded machine
def test_kill_leader_every_10s(kind: str) -> None:
    """Both clients at once, each with its own topic and group, through the same kills: a kill
    takes the leader of one client's partition, the two clients in turn."""
    with running_cluster(kind) as cluster:
        for client in CLIENTS:
            cluster.create_topic(f"chaos-{client}", PARTITIONS)
        producers: dict[str, ConfluentProducer | JavaProducer] = {
            "confluent-kafka": ConfluentProducer(
                cluster.bootstrap, "chaos-confluent-kafka", PARTITIONS
            ),
            "java": JavaProducer(cluster.bootstrap, "chaos-java"),
        }
        kills: list[tuple[str, int, int]] = []
        with ExitStack() as running:
            consumers = {}
            for client in CLIENTS:
                running.enter_context(producers[client])
                consumers[client] = running.enter_context(
                    GroupConsumer(cluster.bootstrap, f"chaos-{client}", f"group-{client}")
                )
            started = time.monotonic()
            while (
                next_kill := started + KILL_EVERY_S * (len(kills) + 1)
            ) < started + CHAOS_SECONDS:
                # The chaos's own pace (a kill every 10 s, counted from the start), not a wait for
                # an event; a restart waits for the cluster to notice the kill, so it may run late.
                time.sleep(max(0.0, next_kill - time.monotonic()))
                client = CLIENTS[len(kills) % len(CLIENTS)]
                partition = len(kills) // len(CLIENTS) % PARTITIONS
                victim = cluster.leader(f"chaos-{client}", partition)
                cluster.kill_and_restart(victim)
                kills.append((client, partition, victim))
            reports = {client: producers[client].stop() for client in CLIENTS}
            for client, report in reports.items():
                assert not report.errors, (client, report.errors[:10])
                consumers[client].wait_for(report.acked)
        for client, report in reports.items():
            _verify(cluster, client, report.acked)
        # Restarts wait for the old registration to expire, so a kill may come late; not rarely.
        assert len(kills) >= CHAOS_SECONDS // KILL_EVERY_S // 2, kills


def _verify(cluster: Cluster, client: str, acked: list[Acked]) -> None:
    """`verify` of one client's topic, naming the client, and on a failure the batches holding
    a value twice, on every replica."""
    topic = f"chaos-{client}"
    records = read_all(cluster.bootstrap, topic, PARTITIONS)
    try:
        verify(acked, records)
    except AssertionError as e:
        twice = {v for v, n in Counter(r.value for r in records).items() if n > 1}
        holders = [
            _holders(node_id, node.data_dir, topic, partition, twice)
            for node_id, node in cluster.nodes.items()
            for partition in range(PARTITIONS)
        ]
        raise AssertionError(f"{client}: {e}; batches holding them:\n" + "\n".join(holders)) from e


def _batches(data_dir: Path, topic: str, partition: int) -> list[bytes]:
    """Every batch of one replica, straight from its segment files, in offset order."""
    folder = data_dir / f"{topic}-{partition}"
    out: list[bytes] = []
    for segment in sorted(folder.glob("*.log")):
        data = segment.read_bytes()
        out += [bytes(b.buf) for b in iter_batches(memoryview(data))]
    return out


def _holders(node_id: int, data_dir: Path, topic: str, partition: int, values: set[int]) -> str:
    """The batches of one replica holding any of `values`: their offsets, leader epoch and
    producer id, epoch and sequence (a retry with a new producer epoch is the client's
    doing; the same epoch and sequence twice, the leader's dedup failing)."""
    held = []
    for data in _batches(data_dir, topic, partition):
        batch = RecordBatchView(data)
        got = [int(bytes(r.value or b"0")) for r in iter_records(batch)]
        if values.intersection(got):
            held.append(
                f"  broker {node_id} p{partition} offsets {batch.base_offset}-"
                f"{batch.last_offset} leader epoch {batch.partition_leader_epoch} producer "
                f"{batch.producer_id} epoch {batch.producer_epoch} sequence "
                f"{batch.base_sequence}: {got}"
            )
    return "\n".join(held)


def test_double_failover_leaves_replicas_identical(kind: str) -> None:
    overrides = {"min.insync.replicas": "1"}
    with running_cluster(kind, overrides=overrides) as cluster:
        topic = "kip-101"
        cluster.create_topic(topic, 1)
        stop = threading.Event()
        acked = [0]  # acknowledged records, counted by the delivery callback

        def delivered(err: object, _msg: object) -> None:
            if err is None:
                acked[0] += 1

        def write() -> None:
            from confluent_kafka import Producer

            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1, "linger.ms": 1})
            i = 0
            while not stop.is_set():
                producer.produce(topic, str(i).encode(), partition=0, on_delivery=delivered)
                producer.poll(0.001)
                i += 1
            producer.flush(60)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            wait_for(lambda: acked[0] >= 1000, 60, "data before the first failure")
            first = cluster.leader(topic, 0)
            cluster.node(first).kill()
            second = cluster.leader(topic, 0)
            cluster.node(second).kill()
            for node_id in (first, second):
                cluster.wait_gone(node_id)
                cluster.node(node_id).start()
            before = acked[0]
            wait_for(lambda: acked[0] >= before + 1000, 60, "more data under the new leader")
        finally:
            stop.set()
            writer.join(90)
        cluster.wait_fully_replicated(topic)
        replicas = [n.data_dir for n in cluster.nodes.values()]
        wait_for(
            lambda: len({tuple(_batches(d, topic, 0)) for d in replicas}) == 1,
            60,
            "every replica's log to be identical",
        )
        assert _batches(replicas[0], topic, 0), "nothing was written"
