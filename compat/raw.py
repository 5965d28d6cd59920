"""Raw-protocol helpers of the compat scenarios (our own codec over a socket).

Used to set up topics without a client's start-up cost and to look at what a broker
stored (batch codec, producer id, sequence), which no client shows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from compat.clients import GET_OFFSETS, java
from protocol.messages.fetch import FetchRequest, FetchResponse
from protocol.records import iter_batches
from tests.wirebroker import helpers
from tests.wirebroker.helpers import RawClient

__all__ = ["BROKER_CONFIGS", "StoredBatch", "create_topic", "offsets_for_time", "stored_batches"]

#: Broker configs compared in DescribeConfigs of a BROKER resource: keys both know that neither
#: side's test properties set, so values, sources, flags and synonyms must agree (Kafka lists
#: 315 keys, wirebroker the ~130 it knows: finding F9).
BROKER_CONFIGS = frozenset(
    {
        "message.max.bytes",
        "log.retention.ms",
        "log.retention.hours",
        "log.retention.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.roll.jitter.ms",
        "log.segment.bytes",
        "log.cleanup.policy",
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.min.cleanable.ratio",
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "compression.type",
        "max.connections",
        "max.connections.per.ip",
        "leader.replication.throttled.rate",
        "ssl.keystore.password",
        "sasl.jaas.config",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.ticket.renew.window.factor",
        "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.min.time.before.relogin",
        "password.encoder.secret",
        "socket.request.max.bytes",
        "zookeeper.session.timeout.ms",
        "delegation.token.secret.key",
        "delegation.token.master.key",
        "delegation.token.max.lifetime.ms",
        "delegation.token.expiry.time.ms",
        "delegation.token.expiry.check.interval.ms",
    }
)


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    """Create a scenario topic that keeps its records (``retention.ms=-1``).

    Scenario records carry fixed 2023 timestamps, and Kafka's time retention deletes a segment
    whose records are all older than ``retention.ms`` -- the active one too, rolling first --
    so its check (every 5 minutes) once emptied a topic between produce and consume in CI (the
    earliest offset became 5). Topic-level, so broker config describes stay untouched.
    """
    helpers.create_topic(bootstrap, name, partitions, {"retention.ms": "-1", **(configs or {})})


class StoredBatch(NamedTuple):
    codec: int
    has_producer_id: bool
    base_sequence: int
    records: int


def fetch_partition(bootstrap: str, topic: str, partition: int = 0) -> FetchResponse.PartitionData:
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=10_000_000,
        isolation_level=0,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=partition, fetch_offset=0, partition_max_bytes=10_000_000
                    )
                ],
            )
        ],
    )
    with RawClient(bootstrap) as client:
        response = client.request(request, 12)
    (p,) = response.responses[0].partitions
    return p  # type: ignore[no-any-return]


def stored_batches(bootstrap: str, topic: str, partition: int = 0) -> list[StoredBatch]:
    """Every batch of the partition as the broker stored it."""
    data = fetch_partition(bootstrap, topic, partition).records
    out = []
    for b in iter_batches(bytes(data or b"")):
        out.append(
            StoredBatch(
                int(b.compression),
                b.producer_id >= 0,
                b.base_sequence,
                b.last_offset_delta + 1,
            )
        )
    return out


def offsets_for_time(client: str, bootstrap: str, topic: str, stamps: list[int]) -> list[Any]:
    """Partition 0's first offset with a timestamp >= each stamp, per ``client`` (None: none)."""
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap)
        try:
            tp = TopicPartition(topic, 0)
            found = [consumer.offsets_for_times({tp: ts})[tp] for ts in stamps]
            return [None if f is None else (f.offset, f.timestamp) for f in found]
        finally:
            consumer.close()
    if client == "confluent-kafka":
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compat-unused"})
        try:
            out = []
            for ts in stamps:
                (r,) = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
                out.append(None if r.offset < 0 else r.offset)
            return out
        finally:
            consumer.close()
    if client == "java":
        return [
            java(GET_OFFSETS, "--bootstrap-server", bootstrap, "--topic", topic, "--time", str(ts))
            .strip()
            .splitlines()
            for ts in stamps
        ]
    raise ValueError(client)
