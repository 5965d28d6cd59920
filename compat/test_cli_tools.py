"""Kafka 3.9's command-line tools not covered elsewhere, run against Kafka and wirebroker.

Each test runs one tool (by main class, from the jars) with the same arguments against both
targets and compares what its user sees: the exit code and the output's meaningful lines. The
tools' WARN log lines (e.g. a first LEADER_NOT_AVAILABLE while a topic is created) depend on
timing and are dropped, as are stack frames; the bootstrap address, log timestamps and measured
figures (rates, latencies, times) are normalised. Counts (records sent, consumed, offsets) are
kept. Covered here: kafka-leader-election, kafka-features, kafka-cluster,
kafka-producer-perf-test, kafka-consumer-perf-test, kafka-e2e-latency,
kafka-streams-application-reset, kafka-verifiable-consumer and kafka-client-metrics.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple

from compat.clients import Rec, produce
from compat.conftest import Target
from compat.kafka_process import run_kafka_tool
from compat.raw import create_topic

LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"
CLUSTER_TOOL = "org.apache.kafka.tools.ClusterTool"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
END_TO_END_LATENCY = "org.apache.kafka.tools.EndToEndLatency"
STREAMS_RESETTER = "org.apache.kafka.tools.StreamsResetter"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
CLIENT_METRICS = "org.apache.kafka.tools.ClientMetricsCommand"

RECORDS = [Rec(f"k{i}".encode(), f"v{i}".encode()) for i in range(6)]
_LOG_TIME = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\] (?=[A-Z]+ )")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class Ran(NamedTuple):
    """What a tool's user sees: its exit code and its output lines, normalised."""

    code: int
    lines: list[str]


def tool(t: Target, main_class: str, *args: str) -> Ran:
    """Run a tool against ``t``; stdout's lines, then stderr's without WARN records and stack
    frames, with the bootstrap address and log timestamps replaced."""
    done = run_kafka_tool(main_class, args, timeout=60.0, check=False)
    lines = done.stdout.decode(errors="replace").splitlines()
    for line in done.stderr.decode(errors="replace").splitlines():
        record = _LOG_TIME.sub("[time] ", line)
        if not line.startswith("\tat ") and not record.startswith("[time] WARN "):
            lines.append(record)
    kept = [line.replace(t.bootstrap, "BOOTSTRAP").rstrip() for line in lines]
    return Ran(done.returncode, [line for line in kept if line])


def measured(line: str, keep: int = 0) -> str:
    """``line`` with every number after the first ``keep`` replaced by ``N``."""
    seen = 0

    def replace(m: re.Match[str]) -> str:
        nonlocal seen
        seen += 1
        return m.group() if seen <= keep else "N"

    return _NUMBER.sub(replace, line)


def test_leader_election(observe: Any, tmp_path: Path) -> None:
    """kafka-leader-election: preferred and unclean elections of every partition, of one named
    partition (on one broker: nothing to elect, or "Valid replica already elected") and of the
    partitions a JSON file lists, and of a partition that does not exist (exit 1,
    UnknownTopicOrPartitionException). Compared: exit codes and output."""
    listed = tmp_path / "partitions.json"
    listed.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "election", "partition": 0},
                    {"topic": "election", "partition": 1},
                    {"topic": "no-such-topic", "partition": 0},
                ]
            }
        )
    )

    def run(t: Target) -> list[Ran]:
        create_topic(t.bootstrap, "election", 2)
        bs = ("--bootstrap-server", t.bootstrap)
        return [
            tool(t, LEADER_ELECTION, *bs, "--election-type", kind, *which)
            for kind, which in [
                ("preferred", ("--all-topic-partitions",)),
                ("unclean", ("--all-topic-partitions",)),
                ("preferred", ("--topic", "election", "--partition", "1")),
                ("unclean", ("--topic", "election", "--partition", "0")),
                ("preferred", ("--path-to-json-file", str(listed))),
                ("unclean", ("--path-to-json-file", str(listed))),
                ("preferred", ("--topic", "no-such-topic", "--partition", "0")),
            ]
        ]

    observe(run)


def test_features_describe(observe: Any) -> None:
    """kafka-features describe: Kafka 3.9 in ZooKeeper mode supports no features, so nothing is
    listed. Compared: exit code and output."""
    observe(lambda t: tool(t, FEATURES, "--bootstrap-server", t.bootstrap, "describe"))


def test_feature_updates(observe: Any) -> None:
    """kafka-features upgrade and disable: a ZooKeeper-mode cluster refuses each update
    (INVALID_REQUEST: the feature is not supported, or not finalized; exit 1). Compared: exit
    codes and output, the refusals' messages included (finding F14)."""

    def run(t: Target) -> list[Ran]:
        bs = ("--bootstrap-server", t.bootstrap)
        return [
            tool(t, FEATURES, *bs, "upgrade", "--metadata", "3.9"),
            tool(t, FEATURES, *bs, "disable", "--feature", "transaction.version"),
        ]

    observe(run)


def test_cluster_tool(observe: Any) -> None:
    """kafka-cluster cluster-id (the id itself differs: its form is compared) and unregister,
    which a ZooKeeper-mode cluster does not support (exit 0 with a message). Compared: exit
    codes and output."""

    def run(t: Target) -> list[Ran]:
        bs = ("--bootstrap-server", t.bootstrap)
        cluster_id = tool(t, CLUSTER_TOOL, "cluster-id", *bs)
        form = [re.sub(r"^Cluster ID: [\w-]{22}$", "Cluster ID: <22>", x) for x in cluster_id.lines]
        return [
            Ran(cluster_id.code, form),
            tool(t, CLUSTER_TOOL, "unregister", *bs, "--id", "0"),
        ]

    observe(run)


def test_perf_tools(observe: Any, tmp_path: Path) -> None:
    """kafka-producer-perf-test sends 200 records three times, unthrottled: acks=all, acks=1,
    and in transactions (a transactional id, one transaction per 50 ms); then
    kafka-consumer-perf-test reads all 600 with isolation.level=read_committed (every
    transaction was committed). Compared: exit codes, the producer's "200 records sent" and
    the consumer's header, data.consumed.in.MB and data.consumed.in.nMsg (rates and times
    normalised)."""
    read_committed = tmp_path / "consumer.properties"
    read_committed.write_text("isolation.level=read_committed\n")

    def run(t: Target) -> list[Any]:
        topic = "perf"
        create_topic(t.bootstrap, topic)
        perf = ["--topic", topic, "--num-records", "200", "--record-size", "100"]
        perf += ["--throughput", "-1", "--producer-props", f"bootstrap.servers={t.bootstrap}"]
        sent = [
            tool(t, PRODUCER_PERF, *perf, "acks=all"),
            tool(t, PRODUCER_PERF, *perf, "acks=1"),
            tool(
                t,
                PRODUCER_PERF,
                *(*perf, "acks=all", "--transactional-id", "perf-txn"),
                *("--transaction-duration-ms", "50"),
            ),
        ]
        consumed = tool(
            t,
            CONSUMER_PERF,
            *("--bootstrap-server", t.bootstrap, "--topic", topic, "--messages", "600"),
            *("--timeout", "20000", "--consumer.config", str(read_committed)),
        )
        return [Ran(s.code, [measured(x, keep=1) for x in s.lines]) for s in sent] + [
            Ran(consumed.code, [_consumed_columns(x) for x in consumed.lines])
        ]

    observe(run)


def _consumed_columns(line: str) -> str:
    """A consumer-perf line with only data.consumed.in.MB and .nMsg (columns 2 and 4) kept."""
    if line.startswith("start.time"):
        return line
    cells = line.split(", ")
    return ", ".join(c if i in (2, 4) else "N" for i, c in enumerate(cells))


def test_end_to_end_latency(observe: Any) -> None:
    """kafka-e2e-latency: 20 round trips of 100-byte records with acks=all (it creates its
    topic first, and says so) and with acks=1. Compared: exit codes and output, latencies
    normalised."""

    def run(t: Target) -> list[Ran]:
        runs = [
            tool(t, END_TO_END_LATENCY, t.bootstrap, "e2e", "20", acks, "100")
            for acks in ("all", "1")
        ]
        return [
            Ran(r.code, [measured(x) if re.match(r"\d|Avg|Percentiles", x) else x for x in r.lines])
            for r in runs
        ]

    observe(run)


def test_streams_application_reset(observe: Any) -> None:
    """kafka-streams-application-reset of an application (a consumer group) with committed
    offsets on a 2-partition input topic and two internal topics: refused while the group has a
    member (exit 1; the member's id and host normalised), then --to-earliest with --dry-run
    (nothing changes) and for real (the offsets go to 0, the internal topics are deleted).
    Compared: exit codes, output, and after each run the group's committed offsets and the
    application's topics."""
    app, topic = "streams-app", "streams-input"
    internal = [f"{app}-counts-changelog", f"{app}-counts-repartition"]

    def run(t: Target) -> list[Any]:
        create_topic(t.bootstrap, topic, 2)
        for name in internal:
            create_topic(t.bootstrap, name)
        produce("kafka-python", t.bootstrap, topic, RECORDS)
        _commit(t.bootstrap, app, topic, {0: 4, 1: 0})
        reset = ["--bootstrap-server", t.bootstrap, "--application-id", app]
        reset += ["--input-topics", topic, "--to-earliest"]
        seen: list[Any] = []
        with _member(t.bootstrap, app, topic):
            refused = tool(t, STREAMS_RESETTER, *reset)
        member = re.compile(r"\b(memberId|host)=[^,]+")  # the member's id and address
        seen.append(Ran(refused.code, [member.sub(r"\1=*", x) for x in refused.lines]))
        for extra in (("--dry-run",), ()):
            seen.append(tool(t, STREAMS_RESETTER, *reset, *extra))
            seen.append(_application_state(t.bootstrap, app))
        return seen

    observe(run)


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` (partition -> offset) for ``group`` without joining it."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        )
    finally:
        consumer.close(autocommit=False)


class _member:
    """A kafka-python consumer that has joined ``group`` (subscribed to ``topic``) until exit."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
        )

    def __enter__(self) -> None:
        while not self.consumer.assignment():
            self.consumer.poll(timeout_ms=200)

    def __exit__(self, *exc: object) -> None:
        self.consumer.close(autocommit=False)


def _application_state(bootstrap: str, app: str) -> tuple[dict[str, int], list[str]]:
    """The group's committed offsets (by "topic-partition") and the topics named for ``app``."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offsets = admin.list_group_offsets(app)[app]
        topics = sorted(x for x in admin.list_topics() if x.startswith(app))
    finally:
        admin.close()
    return {f"{tp.topic}-{tp.partition}": o.offset for tp, o in offsets.items()}, topics


def test_verifiable_consumer(observe: Any) -> None:
    """kafka-verifiable-consumer reads 6 records in a group from the earliest offset, commits
    and leaves. Compared: exit code, the sequence of its JSON events (timestamps dropped,
    repeated events once), the records it counted, its partitions and its last commit."""

    def run(t: Target) -> Any:
        topic = "verifiable"
        create_topic(t.bootstrap, topic)
        produce("kafka-python", t.bootstrap, topic, RECORDS)
        ran = tool(
            t,
            VERIFIABLE_CONSUMER,
            *("--bootstrap-server", t.bootstrap, "--topic", topic, "--group-id", "verifiable"),
            *("--max-messages", "6", "--reset-policy", "earliest"),
        )
        events = [json.loads(x) for x in ran.lines if x.startswith("{")]
        names = [e["name"] for e in events]
        consumed = sum(
            p["count"] for e in events if e["name"] == "records_consumed" for p in e["partitions"]
        )
        assigned = [e["partitions"] for e in events if e["name"] == "partitions_assigned"]
        committed = [e["offsets"] for e in events if e["name"] == "offsets_committed"]
        deduplicated = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
        return ran.code, deduplicated, consumed, assigned, committed[-1:]

    observe(run)


def test_client_metrics(observe: Any) -> None:
    """kafka-client-metrics on a ZooKeeper-mode cluster: listing needs
    ListClientMetricsResources, which Kafka 3.9 does not offer there; altering and describing a
    subscription are refused (INVALID_REQUEST: client-metrics configs are KRaft-only). Compared:
    exit codes and output, error messages included."""

    def run(t: Target) -> list[Ran]:
        bs = ("--bootstrap-server", t.bootstrap)
        return [
            tool(t, CLIENT_METRICS, *bs, "--list"),
            tool(
                t,
                CLIENT_METRICS,
                *(*bs, "--alter", "--name", "m1", "--metrics", "org.apache.kafka.producer."),
                *("--interval", "1000"),
            ),
            tool(t, CLIENT_METRICS, *bs, "--describe", "--name", "m1"),
        ]

    observe(run)
