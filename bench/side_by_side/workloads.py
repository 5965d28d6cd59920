"""The rows of the comparison: what each one runs against a target and which figures it yields.

``figures(sizes)`` is the table's catalogue (row, label, unit, goal on the ratio
wirebroker/Kafka); ``run_target`` runs the selected rows against one target and adds every
repeat's figure to ``Results``. Rows 1-6, 8, 12, 15 and 16 share one broker per target (started fresh,
idle memory read before any load); row 7 starts a fresh broker per repeat (it times the
start itself) and row 9 one per partition count (its memory is the figure); rows 13 and 14
share one broker with SSL and SASL_SSL listeners (``targets.Secured``). Rows 10 and 11
share one fresh 3-broker cluster per target; row 11 kills a broker per repeat and starts it
again before the next. Every run writes to a fresh topic, created through the admin API and
waited on until each partition has a leader (and, in the cluster, a full ISR), except row
9's, which all write to the one wide topic of their broker. Row 17 starts a broker with two
log dirs and moves one filled topic's replica between them, once per repeat.

A failing run is logged and recorded in ``Results.errors``; the other rows still run.
"""

from __future__ import annotations

import functools
import logging
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafka.errors
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaAdminClient, TopicPartitionReplica

from bench.side_by_side import connect_load, java_load, rdkafka_load
from bench.side_by_side.targets import (
    CLUSTER_SIZE,
    SASL_PASSWORD,
    SASL_USER,
    Broker,
    Cluster,
    Secured,
    Target,
    running,
    running_cluster,
)
from compat.kafka_process import jars_dir

log = logging.getLogger("bench")

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10
PAPER_RECORD_SIZE = 200
PAPER_BATCHES = (1, 50)
PAPER_RECORDS_PER_S = {1: 50_000, 50: 400_000}
"""Kafka's producer throughput in Kreps, Narkhede & Rao, "Kafka: a Distributed Messaging
System for Log Processing" (NetDB 2011), 200-byte messages, batch size 1 and 50."""

LATENCY_RATE = 5_000
LATENCY_RECORD_SIZE = 200
LATENCY_PRODUCER: dict[str, object] = {
    "acks": 1,
    "linger.ms": 0,
    # One request in flight: records that arrive meanwhile go out together in the next one.
    # With more in flight and no linger, each record becomes its own Produce request and the
    # figure turns into requests/s, not latency.
    "max.in.flight.requests.per.connection": 1,
    "compression.type": "none",
}
RUN_TIMEOUT = 900.0
ALL_ROWS = tuple(range(1, 18))
CLUSTER_ROWS = {10, 11}
SECURED_ROWS = {13, 14}
CONNECT_PROCESSES = 4
"""Row 14's load generators at once: enough to keep either broker busy on two cores."""
CLIENTS = ("java", "rdkafka")
CLIENT_NAMES = {"java": "Java ProducerPerformance", "rdkafka": "librdkafka"}
CONSUMER_NAMES = {"java": "Java ConsumerPerformance", "rdkafka": "librdkafka"}

# Client settings of rows 1, 5, 8 and 9 (1 KiB records, batch 64 KiB, linger 5 ms), per client.
_BATCHING: dict[str, object] = {"batch.size": 65536, "linger.ms": 5, "compression.type": "none"}
_RDKAFKA_QUEUE: dict[str, object] = {
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}
ACKS_1: dict[str, dict[str, object]] = {
    "java": {"acks": 1, "enable.idempotence": "false", **_BATCHING},
    "rdkafka": {"acks": 1, "enable.idempotence": "false", **_BATCHING, **_RDKAFKA_QUEUE},
}
REPLICATED: dict[str, dict[str, object]] = {
    # Row 10: acks=all without idempotence (row 5 has it), the batching of row 1. librdkafka's
    # queue is capped at the Java producer's 32 MiB buffer.memory: under a saturating load the
    # delivery latency is mostly time in that queue, so both clients queue as much.
    "java": {"acks": "all", "enable.idempotence": "false", **_BATCHING},
    "rdkafka": {
        "acks": "all",
        "enable.idempotence": "false",
        **_BATCHING,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 32 * KiB,
    },
}
FAILOVER_INTERVAL_MS = 5.0
FAILOVER_PRODUCER: dict[str, object] = {
    # Row 11's probe: one record in flight, acks=all, and the client's own waits (retry,
    # reconnect, metadata refresh) short. Its one-second leader query of a partition whose
    # leader is down is fixed, so up to 2 s of the figure stay the client's (docs/perf-notes.md).
    "acks": "all",
    "enable.idempotence": "false",
    "linger.ms": 0,
    "max.in.flight.requests.per.connection": 1,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 10,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "topic.metadata.refresh.fast.interval.ms": 10,
    "message.timeout.ms": 120_000,
    "log_level": 0,
}
FAILOVER_TIMEOUT = 120.0
PROBE_INTERVAL_S = 0.01  # row 12: a pause between Metadata round trips (a probe, not a load)
IDEMPOTENT: dict[str, dict[str, object]] = {
    "java": {"acks": "all", "enable.idempotence": "true", **_BATCHING},
    "rdkafka": {"acks": "all", "enable.idempotence": "true", **_BATCHING, **_RDKAFKA_QUEUE},
}
TRANSACTION_MS = 100
"""Rows 15 and 16: how long each transaction stays open before it is committed."""


def paper_batch_size(records: int) -> int:
    """A Java ``batch.size`` that holds exactly ``records`` 200-byte records, not one more.

    An uncompressed v2 batch is a 61-byte header plus, per 200-byte record with no key,
    209 or 210 bytes (the varint of its timestamp delta grows after 64 ms); adding 100
    bytes of slack keeps ``records`` in and the next one out.
    """
    return 61 + records * 209 + 100


def paper_config(client: str, batch: int) -> dict[str, object]:
    """Producer settings of row 2: ``batch`` records per batch, linger only for 50.

    acks=0 as in the paper ("the producer doesn't wait for acknowledgements from the
    broker"): the client sends as fast as the broker takes the bytes. librdkafka's clock
    stops when the log holds every record; ProducerPerformance's when its last send
    returns, with up to a socket buffer's worth still on its way. ``paper`` then checks
    that every record reached the log.
    """
    common: dict[str, object] = {
        "acks": 0,
        "enable.idempotence": "false",
        "linger.ms": 0 if batch == 1 else 5,
        "compression.type": "none",
    }
    if client == "java":
        return {**common, "batch.size": paper_batch_size(batch)}
    return {**common, "batch.num.messages": batch, **_RDKAFKA_QUEUE}


@dataclass(frozen=True)
class Sizes:
    """How much each row moves; ``QUICK`` is for smoke tests, not for figures."""

    produce_records: int = 512 * MiB // KiB
    paper_records: Mapping[tuple[int, str], int] = field(
        default_factory=lambda: {
            # The Java client sends small records several times slower than librdkafka on
            # a 2-core machine: fewer records keep its runs as long, not longer. Both
            # targets get the same counts, so each client's ratio stays like for like.
            (1, "java"): 50_000,
            (1, "rdkafka"): 200_000,
            (50, "java"): 500_000,
            (50, "rdkafka"): 2_000_000,
        }
    )
    consume_records: int = GiB // KiB
    latency_seconds: float = 15.0
    latency_warmup: float = 2.0
    idempotent_records: int = 256 * MiB // KiB
    scale_records: int = 128 * MiB // KiB
    scale_partitions: tuple[int, ...] = (10, 100, 1000)
    idle_settle: float = 3.0
    replicated_records: int = 128 * MiB // KiB
    busy_flush_bytes: int = GiB
    busy_compact_bytes: int = 512 * MiB
    busy_keys: int = 10_000
    tls_produce_records: int = 256 * MiB // KiB
    tls_consume_records: int = 512 * MiB // KiB
    connect_seconds: float = 10.0
    transactional_records: int = 256 * MiB // KiB
    read_committed_records: int = GiB // KiB  # as row 3: at 200 MB/s, 256 MiB was a 1 s run
    move_records: int = GiB // KiB


QUICK = Sizes(
    produce_records=20_000,
    paper_records={
        (1, "java"): 5_000,
        (1, "rdkafka"): 5_000,
        (50, "java"): 50_000,
        (50, "rdkafka"): 50_000,
    },
    consume_records=20_000,
    latency_seconds=3.0,
    latency_warmup=0.5,
    idempotent_records=10_000,
    scale_records=10_000,
    scale_partitions=(10, 100),
    idle_settle=0.5,
    replicated_records=10_000,
    busy_flush_bytes=16 * MiB,
    busy_compact_bytes=8 * MiB,
    busy_keys=1_000,
    tls_produce_records=20_000,
    tls_consume_records=20_000,
    connect_seconds=2.0,
    transactional_records=10_000,
    read_committed_records=10_000,
    move_records=10_000,
)


def size_text(n: int) -> str:
    """``n`` bytes as GiB when it is at least one, else MiB."""
    return f"{n / GiB:g} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


@dataclass(frozen=True)
class Figure:
    """One row of the table: its figure and the goal on the ratio wirebroker/Kafka."""

    key: str
    row: int
    label: str
    unit: str
    higher_is_better: bool
    goal: float | None
    """Ratio wirebroker/Kafka to reach (``>=`` when higher is better, else ``<=``); None: none."""
    reference: float | None = None
    """An absolute figure wirebroker must also beat (the Kafka paper's), or None."""
    note: str = ""


def figures(sizes: Sizes) -> list[Figure]:
    """The catalogue of table rows, in order."""
    out: list[Figure] = []
    for c in CLIENTS:
        out.append(
            Figure(f"1/{c}", 1, f"Produce 1 KiB, acks=1 ({CLIENT_NAMES[c]})", "MB/s", True, 1.0)
        )
    for batch in PAPER_BATCHES:
        for c in CLIENTS:
            out.append(
                Figure(
                    f"2/{batch}/{c}",
                    2,
                    f"Kafka paper: 200 B, batch {batch} ({CLIENT_NAMES[c]})",
                    "records/s",
                    True,
                    1.0,
                    reference=PAPER_RECORDS_PER_S[batch],
                )
            )
    for c in CLIENTS:
        size = size_text(sizes.consume_records * KiB)
        out.append(
            Figure(
                f"3/{c}",
                3,
                f"Consume {size} from the start ({CONSUMER_NAMES[c]})",
                "MB/s",
                True,
                1.0,
            )
        )
    for q in ("p50", "p99"):
        label = f"End-to-end latency {q} at {LATENCY_RATE:,} records/s (librdkafka)"
        out.append(Figure(f"4/{q}", 4, label, "ms", False, 1.0))
    for c in CLIENTS:
        out.append(
            Figure(
                f"5/{c}", 5, f"Idempotent produce, acks=all ({CLIENT_NAMES[c]})", "MB/s", True, 1.0
            )
        )
    out.append(Figure("6/idle", 6, "Broker RSS, idle", "MiB", False, 0.2))
    out.append(Figure("6/load", 6, "Broker RSS, under row 1 (peak)", "MiB", False, 0.2))
    out.append(Figure("7", 7, "Spawn to first acknowledged produce", "s", False, 0.1))
    for c in CLIENTS:
        out.append(
            Figure(
                f"8/produce/{c}",
                8,
                f"Broker CPU per GiB produced ({CLIENT_NAMES[c]})",
                "CPU s/GiB",
                False,
                1.0,
            )
        )
    for c in CLIENTS:
        out.append(
            Figure(
                f"8/consume/{c}",
                8,
                f"Broker CPU per GiB consumed ({CONSUMER_NAMES[c]})",
                "CPU s/GiB",
                False,
                1.0,
            )
        )
    for n in sizes.scale_partitions:
        for c in CLIENTS:
            out.append(
                Figure(
                    f"9/{n}/{c}",
                    9,
                    f"{n:,} partitions, round-robin produce ({CLIENT_NAMES[c]})",
                    "MB/s",
                    True,
                    1.0,
                    note="goal as row 1",
                )
            )
        out.append(
            Figure(
                f"9/{n}/rss",
                9,
                f"{n:,} partitions: broker RSS under that load (peak)",
                "MiB",
                False,
                0.2,
                note="goal as row 6",
            )
        )
    for c in CLIENTS:
        out.append(
            Figure(
                f"10/{c}",
                10,
                f"Produce 1 KiB, acks=all, RF 3, 3 brokers ({CLIENT_NAMES[c]})",
                "MB/s",
                True,
                1.0,
            )
        )
    for c in CLIENTS:
        out.append(
            Figure(
                f"10/p99/{c}",
                10,
                f"Produce acks=all, RF 3: p99 send-to-ack latency ({CLIENT_NAMES[c]})",
                "ms",
                False,
                1.0,
            )
        )
    out.append(
        Figure("11", 11, "Leader kill -9 to first produce through the new leader", "s", False, 1.0)
    )
    out.append(
        Figure(
            "11/after-expiry",
            11,
            "Of which: ZooKeeper session expiry to first produce through the new leader",
            "s",
            False,
            1.0,
            note="row 11 without the session timeout",
        )
    )
    flushed, compacted = size_text(sizes.busy_flush_bytes), size_text(sizes.busy_compact_bytes)
    for q in ("p99", "max"):
        out.append(
            Figure(
                f"12/{q}",
                12,
                f"Metadata round trip {q} while the broker flushes a {flushed} segment and "
                f"compacts a {compacted} topic (librdkafka)",
                "ms",
                False,
                1.0,
            )
        )
    for c in CLIENTS:
        label = f"TLS: produce 1 KiB, acks=1 ({CLIENT_NAMES[c]})"
        out.append(Figure(f"13/produce/{c}", 13, label, "MB/s", True, 1.0))
    for c in CLIENTS:
        size = size_text(sizes.tls_consume_records * KiB)
        label = f"TLS: consume {size} from the start ({CONSUMER_NAMES[c]})"
        out.append(Figure(f"13/consume/{c}", 13, label, "MB/s", True, 1.0))
    label = f"SASL_SSL (PLAIN) connections set up per second, {CONNECT_PROCESSES} clients at once"
    out.append(Figure("14", 14, label, "connections/s", True, 1.0))
    label = "Broker CPU per SASL_SSL connection set up"
    note = "the clients bound row 14 on two cores; this is the broker's own work"
    out.append(Figure("14/cpu", 14, label, "ms", False, 1.0, note=note))
    for c in CLIENTS:
        label = f"Transactional produce, {TRANSACTION_MS} ms transactions ({CLIENT_NAMES[c]})"
        out.append(Figure(f"15/{c}", 15, label, "MB/s", True, 1.0))
    for c in CLIENTS:
        size = size_text(sizes.read_committed_records * KiB)
        label = (
            f"Consume read_committed, {size} written in {TRANSACTION_MS} ms transactions "
            f"({CONSUMER_NAMES[c]})"
        )
        out.append(Figure(f"16/{c}", 16, label, "MB/s", True, 1.0))
    size = size_text(sizes.move_records * KiB)
    label = f"Move a {size} replica to the broker's other log dir (AlterReplicaLogDirs)"
    out.append(Figure("17", 17, label, "MB/s", True, 1.0))
    return out


@dataclass
class Results:
    """Every repeat's figure per (figure key, target), the commands run, and the failures."""

    values: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, key: str, target: str, value: float) -> None:
        self.values.setdefault((key, target), []).append(value)

    def command(self, what: str, argv: list[str], bootstrap: str) -> None:
        """Keep the first command of ``what``, with the address and paths made generic."""
        if what in self.commands:
            return
        text = shlex.join(argv)
        text = text.replace(bootstrap, "$BOOTSTRAP").replace(str(jars_dir()), ".cache/jars/kafka")
        self.commands[what] = text.replace(sys.executable, "python")


@dataclass
class Context:
    """What every workload needs: sizes, repeats, the results, a scratch folder."""

    sizes: Sizes
    repeats: int
    results: Results
    workdir: Path
    log4j: Path = field(init=False)
    #: Rows 13-14's listeners, made once so both targets get the same keystore.
    secured: Secured = field(init=False)
    _topics: int = 0

    def __post_init__(self) -> None:
        self.log4j = java_load.tools_log4j(self.workdir)
        self.secured = Secured.create(self.workdir)

    @property
    def cluster_repeats(self) -> int:
        """Repeats of rows 10 and 11: 2n+1 for n > 1. Five processes share two cores there,
        and a failover waits on ZooKeeper's and the client's timers, so one run's figure
        moves by a third either way; a median of seven holds still where three did not."""
        return self.repeats if self.repeats == 1 else 2 * self.repeats + 1

    def topic(
        self,
        broker: Broker,
        stem: str,
        partitions: int = 1,
        configs: Mapping[str, str] | None = None,
    ) -> str:
        """Create a fresh topic (with `configs`) and wait until every partition has a leader."""
        self._topics += 1
        name = f"{stem}-{self._topics}"
        create_topic(broker.bootstrap, name, partitions, configs=configs)
        return name

    def cluster_topic(self, cluster: Cluster, stem: str, replicas: list[int] | None = None) -> str:
        """A fresh one-partition topic, RF 3 (on ``replicas``, the first the leader, if given),
        once its leader is elected and every replica is in the ISR."""
        self._topics += 1
        name = f"{stem}-{self._topics}"
        create_topic(cluster.bootstrap, name, 1, replicas=replicas or CLUSTER_SIZE)
        return name


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    timeout: float = 120.0,
    replicas: int | list[int] = 1,
    configs: Mapping[str, str] | None = None,
) -> None:
    """CreateTopics, then Metadata until every partition reports a leader and a full ISR.

    ``replicas`` is the replication factor, or partition 0's replica list (its first the
    preferred leader, which a fresh partition gets).
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = dict(configs or {})
    if isinstance(replicas, int):
        new, rf = NewTopic(name, partitions, replicas, config=config), replicas
    else:
        new, rf = NewTopic(name, 1, replica_assignment=[replicas], config=config), len(replicas)
    admin.create_topics([new])[name].result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(name, timeout=10).topics.get(name)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(
                p.leader >= 0 and p.error is None and len(p.isrs) == rf
                for p in meta.partitions.values()
            )
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name}: partitions without a leader after {timeout:.0f} s")
        time.sleep(0.1)


def wait_end_offset(bootstrap: str, topic: str, records: int, timeout: float = 60.0) -> None:
    """Wait until partition 0 of ``topic`` holds ``records`` records (acks=0 runs' check)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check"})
    try:
        deadline = time.monotonic() + timeout
        while (
            end := consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        ) < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} holds {end} of the {records} records sent with acks=0")
            time.sleep(0.1)
    finally:
        consumer.close()


def _progress(target: str, what: str, repeat: int, repeats: int, figure: str) -> None:
    log.info("%-10s | %-34s | repeat %d/%d | %s", target, what, repeat, repeats, figure)


@contextmanager
def peak_rss(broker: Broker, every: float = 0.1) -> Iterator[list[int]]:
    """Sample the broker's RSS until the block ends; the list's one item is the peak (bytes)."""
    peak = [broker.rss_bytes()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every):
            try:
                peak[0] = max(peak[0], broker.rss_bytes())
            except OSError:
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()


def _produce(
    ctx: Context,
    broker: Broker,
    client: str,
    topic: str,
    *,
    records: int,
    record_size: int,
    config: Mapping[str, object],
    what: str,
    partitions: int | None = None,
    transaction_ms: int | None = None,
) -> float:
    """One produce run by ``client``; bytes per second. Records the command under ``what``."""
    return _produce_to(
        ctx,
        broker.bootstrap,
        client,
        topic,
        records=records,
        record_size=record_size,
        config=config,
        what=what,
        partitions=partitions,
        transaction_ms=transaction_ms,
    )[0]


def _produce_to(
    ctx: Context,
    bootstrap: str,
    client: str,
    topic: str,
    *,
    records: int,
    record_size: int,
    config: Mapping[str, object],
    what: str,
    partitions: int | None = None,
    latency: bool = False,
    transaction_ms: int | None = None,
) -> tuple[float, float | None]:
    """One produce run by ``client``: bytes per second and, with ``latency``, the p99 in ms
    from send to acknowledgement (with ``transaction_ms``: in transactions that long).
    Records the command under ``what``."""
    if client == "java":
        props = dict(config)
        if partitions is not None:
            props["partitioner.class"] = "org.apache.kafka.clients.producer.RoundRobinPartitioner"
            # Round-robin keeps a batch open on every partition; the default 32 MiB buffer
            # holds only 512 of 64 KiB, so with more partitions every send would block.
            props["buffer.memory"] = max(32 * MiB, 2 * partitions * 64 * KiB)
        run = java_load.producer_performance(
            bootstrap,
            topic,
            records=records,
            record_size=record_size,
            props=props,
            log4j=ctx.log4j,
            timeout=RUN_TIMEOUT,
            transaction_ms=transaction_ms,
        )
        ctx.results.command(f"{what} ({CLIENT_NAMES[client]})", run.argv, bootstrap)
        return run.bytes_per_s, run.p99_ms if latency else None
    rd = rdkafka_load.produce(
        bootstrap,
        topic,
        records=records,
        record_size=record_size,
        config=config,
        timeout=RUN_TIMEOUT,
        partitions=partitions,
        wait_stored=config.get("acks") == 0,
        latency=latency,
        transaction_ms=transaction_ms,
    )
    ctx.results.command(f"{what} ({CLIENT_NAMES[client]})", rd.argv, bootstrap)
    return rd.figures["bytes_per_s"], rd.figures["p99_ms"] if latency else None


def _filled_topic(
    ctx: Context,
    broker: Broker,
    stem: str,
    records: int,
    what: str,
    config: Mapping[str, object] = ACKS_1["rdkafka"],
    transaction_ms: int | None = None,
) -> str:
    """A fresh topic holding ``records`` 1 KiB records, written by librdkafka over PLAINTEXT
    (with ``transaction_ms``: in transactions that long)."""
    topic = ctx.topic(broker, stem)
    fill = rdkafka_load.produce(
        broker.bootstrap,
        topic,
        records=records,
        record_size=KiB,
        config=config,
        timeout=RUN_TIMEOUT,
        transaction_ms=transaction_ms,
    )
    ctx.results.command(what, fill.argv, broker.bootstrap)
    return topic


def _consume(
    ctx: Context,
    bootstrap: str,
    client: str,
    topic: str,
    *,
    records: int,
    group: str,
    config: Mapping[str, object] | None = None,
) -> tuple[list[str], float]:
    """One read of ``records`` from the start of ``topic`` by ``client``: argv, bytes/s."""
    if client == "java":
        run = java_load.consumer_performance(
            bootstrap,
            topic,
            messages=records,
            group=group,
            log4j=ctx.log4j,
            timeout=RUN_TIMEOUT,
            props=config,
        )
        return run.argv, run.bytes_per_s
    rd = rdkafka_load.consume(bootstrap, topic, records=records, timeout=RUN_TIMEOUT, config=config)
    return rd.argv, rd.figures["bytes_per_s"]


# --------------------------------------------------------------------------- the rows


def idle_memory(ctx: Context, broker: Broker) -> None:
    """Row 6, idle: one RSS reading of the fresh broker once settled, before any topic or load."""
    time.sleep(ctx.sizes.idle_settle)
    rss = broker.rss_bytes() / MiB
    ctx.results.add("6/idle", broker.target, rss)
    _progress(broker.target, "row 6 idle RSS", 1, 1, f"{rss:.0f} MiB")


def produce_1kib(ctx: Context, broker: Broker) -> None:
    """Row 1 (and row 6 under load, row 8 produce): 1 KiB records, acks=1."""
    records = ctx.sizes.produce_records
    for i in range(1, ctx.repeats + 1):
        for client in CLIENTS:
            topic = ctx.topic(broker, f"produce-{client}")
            cpu = broker.cpu_seconds()
            with peak_rss(broker) as peak:
                rate = _produce(
                    ctx,
                    broker,
                    client,
                    topic,
                    records=records,
                    record_size=KiB,
                    config=ACKS_1[client],
                    what="Row 1: produce 1 KiB, acks=1",
                )
            cpu_per_gib = (broker.cpu_seconds() - cpu) / (records * KiB / GiB)
            ctx.results.add(f"1/{client}", broker.target, rate / 1e6)
            ctx.results.add("6/load", broker.target, peak[0] / MiB)
            ctx.results.add(f"8/produce/{client}", broker.target, cpu_per_gib)
            _progress(
                broker.target,
                f"row 1 produce ({client})",
                i,
                ctx.repeats,
                f"{rate / 1e6:.1f} MB/s, peak RSS {peak[0] / MiB:.0f} MiB, {cpu_per_gib:.2f} CPU s/GiB",
            )


def paper(ctx: Context, broker: Broker) -> None:
    """Row 2: the Kafka paper's producer test, 200-byte records, 1 and 50 per batch."""
    for batch in PAPER_BATCHES:
        for i in range(1, ctx.repeats + 1):
            for client in CLIENTS:
                records = ctx.sizes.paper_records[batch, client]
                topic = ctx.topic(broker, f"paper-{batch}-{client}")
                rate = _produce(
                    ctx,
                    broker,
                    client,
                    topic,
                    records=records,
                    record_size=PAPER_RECORD_SIZE,
                    config=paper_config(client, batch),
                    what=f"Row 2: Kafka paper, batch {batch}",
                )
                wait_end_offset(broker.bootstrap, topic, records)
                per_s = rate / PAPER_RECORD_SIZE
                ctx.results.add(f"2/{batch}/{client}", broker.target, per_s)
                _progress(
                    broker.target,
                    f"row 2 batch {batch} ({client})",
                    i,
                    ctx.repeats,
                    f"{per_s:,.0f} records/s",
                )


def consume(ctx: Context, broker: Broker) -> None:
    """Row 3 (and row 8 consume): read a whole 1 KiB-record topic from its start."""
    records = ctx.sizes.consume_records
    topic = _filled_topic(ctx, broker, "consume", records, "Row 3: fill the topic (librdkafka)")
    _progress(broker.target, "row 3 fill", 1, 1, f"{records * KiB / MiB:.0f} MiB written")
    for i in range(1, ctx.repeats + 1):
        for client in CLIENTS:
            cpu = broker.cpu_seconds()
            argv, rate = _consume(
                ctx, broker.bootstrap, client, topic, records=records, group=f"bench-consume-{i}"
            )
            ctx.results.command(
                f"Row 3: consume from the start ({CONSUMER_NAMES[client]})", argv, broker.bootstrap
            )
            cpu_per_gib = (broker.cpu_seconds() - cpu) / (records * KiB / GiB)
            ctx.results.add(f"3/{client}", broker.target, rate / 1e6)
            ctx.results.add(f"8/consume/{client}", broker.target, cpu_per_gib)
            _progress(
                broker.target,
                f"row 3 consume ({client})",
                i,
                ctx.repeats,
                f"{rate / 1e6:.1f} MB/s, {cpu_per_gib:.2f} CPU s/GiB",
            )


def latency(ctx: Context, broker: Broker) -> None:
    """Row 4: end-to-end latency at a fixed rate, librdkafka producer and consumer."""
    for i in range(1, ctx.repeats + 1):
        topic = ctx.topic(broker, "latency")
        run, producer_argv = rdkafka_load.end_to_end_latency(
            broker.bootstrap,
            topic,
            rate=LATENCY_RATE,
            seconds=ctx.sizes.latency_seconds,
            record_size=LATENCY_RECORD_SIZE,
            warmup=ctx.sizes.latency_warmup,
            producer_config=LATENCY_PRODUCER,
        )
        ctx.results.command(
            "Row 4: latency, paced producer (librdkafka)", producer_argv, broker.bootstrap
        )
        ctx.results.command("Row 4: latency, consumer (librdkafka)", run.argv, broker.bootstrap)
        p50, p99 = run.figures["p50_ms"], run.figures["p99_ms"]
        ctx.results.add("4/p50", broker.target, p50)
        ctx.results.add("4/p99", broker.target, p99)
        _progress(
            broker.target, "row 4 latency", i, ctx.repeats, f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
        )


def _acks_all_rows(
    ctx: Context, broker: Broker, row: int, stem: str, records: int, transaction_ms: int | None
) -> None:
    """Rows 5 and 15: idempotent producers, acks=all, 1 KiB records (15: in transactions)."""
    what = {5: "Row 5: idempotent produce, acks=all", 15: "Row 15: transactional produce"}[row]
    for i in range(1, ctx.repeats + 1):
        for client in CLIENTS:
            topic = ctx.topic(broker, f"{stem}-{client}")
            rate = _produce(
                ctx,
                broker,
                client,
                topic,
                records=records,
                record_size=KiB,
                config=IDEMPOTENT[client],
                what=what,
                transaction_ms=transaction_ms,
            )
            ctx.results.add(f"{row}/{client}", broker.target, rate / 1e6)
            _progress(
                broker.target,
                f"row {row} {stem} ({client})",
                i,
                ctx.repeats,
                f"{rate / 1e6:.1f} MB/s",
            )


def idempotent(ctx: Context, broker: Broker) -> None:
    """Row 5: the idempotent producer with acks=all, 1 KiB records."""
    _acks_all_rows(ctx, broker, 5, "idempotent", ctx.sizes.idempotent_records, None)


def transactional(ctx: Context, broker: Broker) -> None:
    """Row 15: as row 5, each transaction committed once open 100 ms."""
    records = ctx.sizes.transactional_records
    _acks_all_rows(ctx, broker, 15, "transactional", records, TRANSACTION_MS)


def read_committed(ctx: Context, broker: Broker) -> None:
    """Row 16: read_committed consumers read a topic written in 100 ms transactions (one
    COMMIT marker after each) from its start."""
    records = ctx.sizes.read_committed_records
    what = "Row 16: fill the topic in transactions (librdkafka)"
    config = IDEMPOTENT["rdkafka"]
    topic = _filled_topic(ctx, broker, "read-committed", records, what, config, TRANSACTION_MS)
    _progress(broker.target, "row 16 fill", 1, 1, f"{records * KiB / MiB:.0f} MiB written")
    for i in range(1, ctx.repeats + 1):
        for client in CLIENTS:
            argv, rate = _consume(
                ctx,
                broker.bootstrap,
                client,
                topic,
                records=records,
                group=f"bench-read-committed-{i}",
                config={"isolation.level": "read_committed"},
            )
            ctx.results.command(
                f"Row 16: consume read_committed ({CONSUMER_NAMES[client]})",
                argv,
                broker.bootstrap,
            )
            ctx.results.add(f"16/{client}", broker.target, rate / 1e6)
            _progress(
                broker.target,
                f"row 16 read_committed ({client})",
                i,
                ctx.repeats,
                f"{rate / 1e6:.1f} MB/s",
            )


def first_produce(ctx: Context, target: Target) -> None:
    """Row 7: spawn a fresh broker and time until a produce to a new topic is acknowledged.

    The client exists before the spawn and retries every 10 ms, so the figure is the
    broker's start plus one topic auto-creation; Kafka's ZooKeeper is already running.
    """
    for i in range(1, ctx.repeats + 1):
        broker = target.new_broker()
        acked: list[float] = []

        def on_delivery(err: Any, _msg: Any, acked: list[float] = acked) -> None:
            if err is None:
                acked.append(time.monotonic())

        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": 1,
                "linger.ms": 0,
                "reconnect.backoff.ms": 10,
                "reconnect.backoff.max.ms": 10,
                "retry.backoff.ms": 10,
                "retry.backoff.max.ms": 10,
                "topic.metadata.refresh.fast.interval.ms": 10,
                "message.timeout.ms": 120_000,
                "log_level": 0,
                "error_cb": lambda _err: None,  # refused connections until the broker listens
            }
        )
        broker.spawn()
        try:
            producer.produce("first", b"x" * KiB, on_delivery=on_delivery)
            while not acked:
                broker.check_alive()
                producer.poll(0.005)
                if time.monotonic() - broker.spawned_at > 120:
                    raise TimeoutError("no acknowledged produce 120 s after the spawn")
            seconds = acked[0] - broker.spawned_at
            ctx.results.add("7", target.name, seconds)
            _progress(
                target.name, "row 7 spawn to first produce", i, ctx.repeats, f"{seconds:.3f} s"
            )
        finally:
            producer.flush(5)
            broker.stop()
    ctx.results.commands.setdefault(
        "Row 7: first produce (librdkafka, in the harness)",
        "Producer(acks=1, linger.ms=0, reconnect/retry backoff 10 ms) created before the spawn; "
        "produce('first', 1 KiB) right after it; time of the delivery report minus spawn time",
    )


def scale(ctx: Context, target: Target) -> None:
    """Row 9: one topic of N partitions per fresh broker, produced to round-robin."""
    records = ctx.sizes.scale_records
    for n in ctx.sizes.scale_partitions:
        with running(target) as broker:
            topic = ctx.topic(broker, "scale", partitions=n)
            for i in range(1, ctx.repeats + 1):
                for client in CLIENTS:
                    with peak_rss(broker) as peak:
                        rate = _produce(
                            ctx,
                            broker,
                            client,
                            topic,
                            records=records,
                            record_size=KiB,
                            config=ACKS_1[client],
                            what="Row 9: round-robin over N partitions",
                            partitions=n,
                        )
                    ctx.results.add(f"9/{n}/{client}", broker.target, rate / 1e6)
                    ctx.results.add(f"9/{n}/rss", broker.target, peak[0] / MiB)
                    _progress(
                        broker.target,
                        f"row 9 {n} partitions ({client})",
                        i,
                        ctx.repeats,
                        f"{rate / 1e6:.1f} MB/s, peak RSS {peak[0] / MiB:.0f} MiB",
                    )


def move_replica(ctx: Context, target: Target) -> None:
    """Row 17: a broker with two log dirs moves a filled partition's replica from one to the
    other (AlterReplicaLogDirs, through kafka-python's admin), back and forth, one move per
    repeat; timed from the request to the partition's directory being in the destination
    alone (both brokers rename the finished copy into place, then the original away)."""
    records = ctx.sizes.move_records
    with running(target, log_dirs=2) as broker:
        what = "Row 17: fill the topic (librdkafka)"
        topic = _filled_topic(ctx, broker, "move", records, what)
        name = f"{topic}-0"
        move = f"KafkaAdminClient(bootstrap_servers='{broker.bootstrap}')"
        move += f".alter_replica_log_dirs({{('{topic}', 0, 0): THE_OTHER_LOG_DIR}})"
        what = "Row 17: the move (kafka-python)"
        ctx.results.command(what, ["python", "-c", move], broker.bootstrap)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="bench-move")
        try:
            for i in range(1, ctx.repeats + 1):
                source = next(d for d in broker.log_dirs if (d / name).is_dir())
                dest = next(d for d in broker.log_dirs if d != source)
                size = sum(f.stat().st_size for f in (source / name).glob("*.log"))
                started = time.monotonic()
                replica = TopicPartitionReplica(topic, 0, broker.broker_id)
                answer = admin.alter_replica_log_dirs({replica: str(dest)})
                if answer != {replica: kafka.errors.NoError}:
                    raise RuntimeError(f"AlterReplicaLogDirs to {dest} answered {answer}")
                deadline = started + RUN_TIMEOUT
                while (source / name).exists() or not (dest / name).is_dir():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{name} still not moved to {dest}")
                    time.sleep(0.005)
                rate = size / (time.monotonic() - started)
                ctx.results.add("17", broker.target, rate / 1e6)
                _progress(
                    broker.target,
                    "row 17 log dir move",
                    i,
                    ctx.repeats,
                    f"{size / MiB:.0f} MiB at {rate / 1e6:.1f} MB/s",
                )
        finally:
            admin.close()


def replicated(ctx: Context, cluster: Cluster) -> None:
    """Row 10: 1 KiB records, acks=all, to a one-partition topic of RF 3 (min ISR 2)."""
    records = ctx.sizes.replicated_records
    target = next(iter(cluster.brokers.values())).target
    for i in range(1, ctx.cluster_repeats + 1):
        for client in CLIENTS:
            topic = ctx.cluster_topic(cluster, f"replicated-{client}")
            rate, p99 = _produce_to(
                ctx,
                cluster.bootstrap,
                client,
                topic,
                records=records,
                record_size=KiB,
                config=REPLICATED[client],
                what="Row 10: produce 1 KiB, acks=all, RF 3",
                latency=True,
            )
            assert p99 is not None
            ctx.results.add(f"10/{client}", target, rate / 1e6)
            ctx.results.add(f"10/p99/{client}", target, p99)
            _progress(
                target,
                f"row 10 acks=all RF 3 ({client})",
                i,
                ctx.cluster_repeats,
                f"{rate / 1e6:.1f} MB/s, p99 {p99:.1f} ms",
            )


def failover(ctx: Context, cluster: Cluster) -> None:
    """Row 11: kill -9 a partition's leader under a producer; time to its first new ack.

    Each repeat makes a fresh RF 3 topic led by a broker that is not the controller (the
    controller's own failover would add its election), rotating over those brokers, kills
    that broker while the probe produces every ``FAILOVER_INTERVAL_MS``, and starts it
    again on its data before the next repeat.
    """
    target = next(iter(cluster.brokers.values())).target
    for i in range(1, ctx.cluster_repeats + 1):
        controller = cluster.controller_id()
        others = sorted(b for b in cluster.brokers if b != controller)
        leader = others[(i - 1) % len(others)]
        replicas = [leader, *sorted(b for b in cluster.brokers if b != leader)]
        topic = ctx.cluster_topic(cluster, "failover", replicas=replicas)
        victim = cluster.brokers[leader]

        def kill(victim: Broker = victim) -> tuple[float, float]:
            killed_at = time.monotonic()
            victim.kill()
            return killed_at, time.monotonic()

        with cluster.deregistration(leader) as deregistered:
            run = rdkafka_load.failover(
                cluster.bootstrap,
                topic,
                partition=0,
                interval_ms=FAILOVER_INTERVAL_MS,
                config=FAILOVER_PRODUCER,
                kill=kill,
                timeout=FAILOVER_TIMEOUT,
            )
            waited = time.monotonic() + 10.0
            while not deregistered and time.monotonic() < waited:
                time.sleep(0.01)
        if not deregistered:
            raise RuntimeError(f"broker {leader}'s registration was never deleted")
        ctx.results.command(
            "Row 11: failover probe (librdkafka; the harness kill -9s the leader once it is acked)",
            run.argv,
            cluster.bootstrap,
        )
        seconds, gap = run.figures["failover_s"], run.figures["gap_s"]
        after_expiry = run.figures["first_ack_at"] - deregistered[0]
        ctx.results.add("11", target, seconds)
        ctx.results.add("11/after-expiry", target, after_expiry)
        _progress(
            target,
            "row 11 leader kill -9 to new leader",
            i,
            ctx.cluster_repeats,
            f"{seconds:.3f} s, of which {after_expiry:.3f} s after the session expired "
            f"(broker {leader} killed; last ack before to first after: {gap:.3f} s)",
        )
        if i < ctx.cluster_repeats:
            cluster.restart(leader)


def busy_metadata(ctx: Context, broker: Broker) -> None:
    """Row 12: Metadata round trips (librdkafka's ``list_topics``, 10 ms apart) while the
    broker fsyncs a big rolled segment and compacts a big topic.

    Both topics are filled first with ``segment.bytes`` at its maximum, so nothing rolls;
    then the probe starts, ``segment.bytes`` drops to 1 MiB and one more record goes to each
    topic: both active segments roll, the broker flushes the first (Kafka at once, wirebroker
    within a second) and its cleaner compacts the second (within ``log.cleaner.backoff.ms``,
    15 s on both). The probe stops once the compacted partition's ``.log`` files hold less
    than half of what was written. Figures: p99 and max of the round trips in that window.
    """
    sizes = ctx.sizes
    assert broker.log_dir is not None
    largest = {"segment.bytes": str(2**31 - 1)}
    for i in range(1, ctx.repeats + 1):
        flushed = ctx.topic(broker, "busy-flush", configs=largest)
        compacted = ctx.topic(
            broker, "busy-compact", configs={**largest, "cleanup.policy": "compact"}
        )
        for topic, size, keys in (
            (flushed, sizes.busy_flush_bytes, None),
            (compacted, sizes.busy_compact_bytes, sizes.busy_keys),
        ):
            run = rdkafka_load.produce(
                broker.bootstrap,
                topic,
                records=size // KiB,
                record_size=KiB,
                config=ACKS_1["rdkafka"],
                timeout=RUN_TIMEOUT,
                keys=keys,
            )
            ctx.results.command(
                f"Row 12: fill the {'compacted' if keys else 'flushed'} topic (librdkafka)",
                run.argv,
                broker.bootstrap,
            )
        partition_dir = broker.log_dir / f"{compacted}-0"
        with _metadata_probe(broker.bootstrap) as round_trips:
            _roll(broker.bootstrap, broker.log_dir, flushed, compacted)
            deadline = time.monotonic() + RUN_TIMEOUT
            while sum(p.stat().st_size for p in partition_dir.glob("*.log")) > (
                sizes.busy_compact_bytes // 2
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{compacted} was not compacted in {RUN_TIMEOUT:.0f} s")
                time.sleep(0.1)
        round_trips.sort()
        p99 = round_trips[min(len(round_trips) - 1, int(0.99 * len(round_trips)))] * 1e3
        slowest = round_trips[-1] * 1e3
        ctx.results.add("12/p99", broker.target, p99)
        ctx.results.add("12/max", broker.target, slowest)
        _progress(
            broker.target,
            "row 12 Metadata while busy",
            i,
            ctx.repeats,
            f"p99 {p99:.1f} ms, max {slowest:.1f} ms over {len(round_trips)} round trips",
        )


def connected_admin(bootstrap: str, timeout: float = 30.0) -> AdminClient:
    """An AdminClient whose Metadata requests already go to the broker by its id.

    librdkafka answers its first calls through the bootstrap connection; once it has learned
    the brokers it closes that connection and opens one to each broker by id, but only
    ``reconnect.backoff.ms`` / 2 (50 ms) after its last connection attempt, and the call that
    needs it waits that long. Whether one call crosses that point is a race with the broker's
    reply, so this calls until a reply comes from a broker by id (``orig_broker_id`` >= 0).
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while admin.list_topics(timeout=timeout).orig_broker_id < 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no broker of {bootstrap} answered by its id in {timeout:.0f} s")
    return admin


@contextmanager
def _metadata_probe(bootstrap: str) -> Iterator[list[float]]:
    """Time Metadata round trips, one every ``PROBE_INTERVAL_S`` or so, in a thread until the
    block ends (seconds)."""
    admin = connected_admin(bootstrap)  # connected before the clock starts
    round_trips: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            started = time.perf_counter()
            admin.list_topics(timeout=RUN_TIMEOUT)
            round_trips.append(time.perf_counter() - started)
            done.wait(PROBE_INTERVAL_S)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        yield round_trips
    finally:
        done.set()
        thread.join(RUN_TIMEOUT)


def _roll(bootstrap: str, log_dir: Path, *topics: str) -> None:
    """Make each topic's active segment roll: lower its `segment.bytes`, then append until its
    partition directory holds a new segment (Kafka applies a topic config change when its
    ZooKeeper notification arrives, so an append right after the change may not roll yet:
    one such run once waited out the whole timeout)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry("segment.bytes", str(MiB), incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for topic in topics
    ]
    segments = {topic: len(list((log_dir / f"{topic}-0").glob("*.log"))) for topic in topics}
    for future in admin.incremental_alter_configs(resources).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})
    deadline = time.monotonic() + 60
    while segments:
        for topic in segments:
            producer.produce(topic, b"roll", b"roll")
        if producer.flush(60) != 0:
            raise RuntimeError("the records that roll the segments were not acknowledged")
        for topic, before in list(segments.items()):
            if len(list((log_dir / f"{topic}-0").glob("*.log"))) > before:
                del segments[topic]
        if segments and time.monotonic() > deadline:
            raise TimeoutError(f"no new segment in {', '.join(segments)} after 60 s")
        if segments:
            time.sleep(0.2)


def tls_clients(secured: Secured) -> dict[str, dict[str, object]]:
    """Each client's settings to reach the SSL listener, trusting the run's certificate."""
    return {
        "java": {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(secured.certificate),
        },
        "rdkafka": {"security.protocol": "SSL", "ssl.ca.location": str(secured.certificate)},
    }


def tls(ctx: Context, broker: Broker) -> None:
    """Row 13: rows 1 and 3 over the SSL listener (neither broker can use sendfile there)."""
    sizes, clients = ctx.sizes, tls_clients(ctx.secured)
    bootstrap = f"127.0.0.1:{broker.ports['SSL']}"
    for i in range(1, ctx.repeats + 1):
        for client in CLIENTS:
            topic = ctx.topic(broker, f"tls-produce-{client}")
            rate, _ = _produce_to(
                ctx,
                bootstrap,
                client,
                topic,
                records=sizes.tls_produce_records,
                record_size=KiB,
                config={**ACKS_1[client], **clients[client]},
                what="Row 13: produce 1 KiB over TLS, acks=1",
            )
            ctx.results.add(f"13/produce/{client}", broker.target, rate / 1e6)
            figure = f"{rate / 1e6:.1f} MB/s"
            _progress(broker.target, f"row 13 TLS produce ({client})", i, ctx.repeats, figure)
    records = sizes.tls_consume_records
    what = "Row 13: fill the topic (librdkafka, PLAINTEXT)"
    topic = _filled_topic(ctx, broker, "tls-consume", records, what)
    for i in range(1, ctx.repeats + 1):
        for client in CLIENTS:
            argv, rate = _consume(
                ctx,
                bootstrap,
                client,
                topic,
                records=records,
                group=f"bench-tls-consume-{i}",
                config=clients[client],
            )
            what = f"Row 13: consume over TLS ({CONSUMER_NAMES[client]})"
            ctx.results.command(what, argv, bootstrap)
            ctx.results.add(f"13/consume/{client}", broker.target, rate / 1e6)
            figure = f"{rate / 1e6:.1f} MB/s"
            _progress(broker.target, f"row 13 TLS consume ({client})", i, ctx.repeats, figure)


def sasl_connections(ctx: Context, broker: Broker) -> None:
    """Row 14: TLS handshake plus SASL/PLAIN login, over and over, from several processes,
    after a warm-up as long (Kafka's JIT compiles its TLS path during the first seconds); also
    the broker's CPU seconds per connection, which the clients' own cost does not bound."""
    bootstrap = f"127.0.0.1:{broker.ports['SASL_SSL']}"

    def load(seconds: float) -> tuple[float, int, list[str]]:
        return connect_load.connections_per_s(
            bootstrap,
            cafile=str(ctx.secured.certificate),
            user=SASL_USER,
            password=SASL_PASSWORD,
            seconds=seconds,
            processes=CONNECT_PROCESSES,
        )

    load(ctx.sizes.connect_seconds)  # as long as a measured run: Kafka's JIT settles in it
    for i in range(1, ctx.repeats + 1):
        cpu = broker.cpu_seconds()
        rate, connections, argv = load(ctx.sizes.connect_seconds)
        cpu_ms = (broker.cpu_seconds() - cpu) * 1000 / max(connections, 1)
        what = f"Row 14: SASL_SSL connection set-up ({CONNECT_PROCESSES} of these at once)"
        ctx.results.command(what, argv, bootstrap)
        ctx.results.add("14", broker.target, rate)
        ctx.results.add("14/cpu", broker.target, cpu_ms)
        figure = f"{rate:,.0f} connections/s, {cpu_ms:.2f} ms broker CPU each"
        _progress(broker.target, "row 14 SASL_SSL connections", i, ctx.repeats, figure)


def on_secured_broker(ctx: Context, target: Target, rows: set[int]) -> None:
    """Rows 13 and 14 on one fresh broker with SSL and SASL_SSL listeners."""
    shown = ",".join(map(str, sorted(rows & SECURED_ROWS)))
    log.info(
        "%-10s | starting a fresh broker with SSL and SASL_SSL listeners for rows %s",
        target.name,
        shown,
    )
    with running(target, ctx.secured) as broker:
        if 13 in rows:
            _attempt(ctx, target.name, "row 13 TLS", lambda: tls(ctx, broker))
        if 14 in rows:
            _attempt(ctx, target.name, "row 14 SASL_SSL", lambda: sasl_connections(ctx, broker))


def _attempt(ctx: Context, target: str, what: str, work: Callable[[], None]) -> None:
    try:
        work()
    except Exception as exc:  # one failing row must not lose the others' figures
        log.error("%s | %s failed: %s", target, what, exc)
        log.debug("%s", traceback.format_exc())
        ctx.results.errors.append(
            f"{target}, {what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        )


def run_target(ctx: Context, target: Target, rows: set[int]) -> None:
    """Run ``rows`` against ``target``; rows 6 and 8 bring in the runs they are measured on."""
    shared: list[tuple[set[int], str, Callable[[Context, Broker], None]]] = [
        ({6}, "row 6 idle memory", idle_memory),
        ({1, 6, 8}, "row 1 produce", produce_1kib),
        ({2}, "row 2 Kafka paper", paper),
        ({3, 8}, "row 3 consume", consume),
        ({4}, "row 4 latency", latency),
        ({5}, "row 5 idempotent", idempotent),
        ({12}, "row 12 Metadata while busy", busy_metadata),
        ({15}, "row 15 transactional produce", transactional),
        ({16}, "row 16 read_committed consume", read_committed),
    ]
    wanted = [(what, work) for needs, what, work in shared if needs & rows]

    def on_one_broker() -> None:
        shown = ", ".join(map(str, sorted(rows - {7, 9} - CLUSTER_ROWS - SECURED_ROWS)))
        log.info("%-10s | starting a fresh broker for rows %s", target.name, shown)
        with running(target) as broker:
            for what, work in wanted:
                _attempt(ctx, target.name, what, functools.partial(work, ctx, broker))

    if wanted:
        _attempt(ctx, target.name, "starting the broker", on_one_broker)
    if 7 in rows:
        _attempt(ctx, target.name, "row 7 first produce", lambda: first_produce(ctx, target))
    if 9 in rows:
        _attempt(ctx, target.name, "row 9 scale", lambda: scale(ctx, target))
    if 17 in rows:
        _attempt(ctx, target.name, "row 17 log dir move", lambda: move_replica(ctx, target))
    if rows & SECURED_ROWS:
        _attempt(ctx, target.name, "secured rows", lambda: on_secured_broker(ctx, target, rows))
    if rows & CLUSTER_ROWS:
        _attempt(ctx, target.name, "cluster rows", lambda: on_cluster(ctx, target, rows))


def on_cluster(ctx: Context, target: Target, rows: set[int]) -> None:
    """Rows 10 and 11 on one fresh cluster of ``target`` (row 11 last: it kills brokers)."""
    shown = ",".join(map(str, sorted(rows & CLUSTER_ROWS)))
    log.info(
        "%-10s | starting a fresh %d-broker cluster for rows %s", target.name, CLUSTER_SIZE, shown
    )
    began = time.monotonic()
    with running_cluster(target) as cluster:
        log.info("%-10s | cluster ready in %.1f s", target.name, time.monotonic() - began)
        if 10 in rows:
            _attempt(ctx, target.name, "row 10 acks=all RF 3", lambda: replicated(ctx, cluster))
        if 11 in rows:
            _attempt(ctx, target.name, "row 11 failover", lambda: failover(ctx, cluster))
