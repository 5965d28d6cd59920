"""AlterReplicaLogDirs (moving a replica between a broker's log dirs) over TCP, with real
clients: kafka-python's admin (alter_replica_log_dirs, describe_log_dirs), confluent-kafka's
idempotent producer writing through the move, its consumer reading everything back."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import kafka.errors
import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kafka import KafkaAdminClient, TopicPartitionReplica
from kafka.admin import NewTopic

from compat.kafka_process import run_kafka_tool
from storage.clock import wall_clock_ms
from storage.config import LogConfig
from storage.log_manager import LogManager
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import wait_until

pytestmark = pytest.mark.integration

TOPIC = "moving"


def placement(admin: KafkaAdminClient) -> dict[str, list[tuple[int, bool, int]]]:
    """Per log dir: (partition, is future, offset lag) of TOPIC."""
    (described,) = admin.describe_log_dirs()
    return {
        d["log_dir"]: [
            (p["partition_index"], p["is_future_key"], p["offset_lag"])
            for t in d["topics"]
            if t["name"] == TOPIC
            for p in t["partitions"]
        ]
        for d in described["log_dirs"]
    }


def fill_and_move(
    admin: KafkaAdminClient,
    bootstrap: str,
    dirs: tuple[str, str],
    count: int,
    delivered: Callable[[object, Message], None] | None = None,
) -> tuple[str, str]:
    """TOPIC made with `count` records of 1 KB (acks=all, each told to `delivered`), in
    batches far smaller than the log (a copy step takes one at least at a time), then moved
    to the other of `dirs`: (its dir, the destination)."""
    admin.create_topics([NewTopic(TOPIC, 1, 1)])
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.size": 16384})
    for i in range(count):
        producer.produce(TOPIC, b"%08d" % i + b"." * 1000, on_delivery=delivered)
    assert producer.flush(30) == 0
    (source,) = [d for d, parts in placement(admin).items() if parts]
    dest = dirs[1] if source == dirs[0] else dirs[0]
    replica = TopicPartitionReplica(TOPIC, 0, 0)
    assert admin.alter_replica_log_dirs({replica: dest}) == {replica: kafka.errors.NoError}
    return source, dest


def wait_for_placement(
    bootstrap: str, wanted: dict[str, list[tuple[int, bool, int]]], what: str
) -> None:
    """Wait (20 s at most) until TOPIC's :func:`placement` is `wanted`; a timeout says the
    last placement seen."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    seen: dict[str, list[tuple[int, bool, int]]] = {}

    def placed() -> bool:
        nonlocal seen
        seen = placement(admin)
        return seen == wanted

    try:
        wait_until(placed, 20, what=what)
    except AssertionError as e:
        e.add_note(f"the last placement seen: {seen}")
        raise
    finally:
        admin.close()


def consume_all(bootstrap: str, count: int) -> list[bytes]:
    """Every record of TOPIC's partitions from their start: `count` expected, and no more."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False}
    )
    values: list[bytes] = []
    try:
        partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in partitions])  # no group join
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
        assert consumer.consume(10, 0.3) == []  # nothing more (no duplicates)
    finally:
        consumer.close()
    return values


@pytest.mark.timeout(60)
def test_a_replica_moves_between_log_dirs_while_an_idempotent_producer_writes(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    # Small copy steps and segments: the copy rolls the future log.
    properties = {"replica.fetch.max.bytes": "65536", "log.segment.bytes": "1048576"}
    process = BrokerProcess(Path(f"{a},{b}"), properties)
    with serving(process) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2}
        )
        failures: list[str] = []
        sent = 0

        def delivered(error: object, _message: object) -> None:
            if error is not None:
                failures.append(str(error))

        def send(count: int) -> None:
            nonlocal sent
            for _ in range(count):
                producer.produce(TOPIC, b"%08d" % sent + b"." * 200, on_delivery=delivered)
                sent += 1
                producer.poll(0)

        try:
            admin.create_topics([NewTopic(TOPIC, 1, 1)])
            send(20_000)  # some 4 MB before the move
            assert producer.flush(30) == 0
            (source,) = [d for d, parts in placement(admin).items() if parts]
            dest = str(b.resolve()) if source == str(a.resolve()) else str(a.resolve())

            # Errors first: an unknown dir, a relative path.
            replica = TopicPartitionReplica(TOPIC, 0, 0)
            for wrong in (str(tmp_path / "c"), "a"):
                answer = admin.alter_replica_log_dirs({replica: wrong})
                assert answer == {replica: kafka.errors.LogDirNotFoundError}
            # A partition not hosted (yet): remembered, REPLICA_NOT_AVAILABLE.
            later = TopicPartitionReplica(f"{TOPIC}-later", 0, 0)
            answer = admin.alter_replica_log_dirs({later: dest})
            assert answer == {later: kafka.errors.ReplicaNotAvailableError}

            stop = threading.Event()

            def keep_sending() -> None:
                while not stop.is_set():
                    send(50)
                    time.sleep(0.002)

            writer = threading.Thread(target=keep_sending)
            writer.start()
            try:
                answer = admin.alter_replica_log_dirs({replica: dest})
                assert answer == {replica: kafka.errors.NoError}
                assert admin.alter_replica_log_dirs({replica: dest}) == {
                    replica: kafka.errors.NoError
                }  # the same move again: nothing new
                wait_until(
                    lambda: placement(admin) == {source: [], dest: [(0, False, 0)]},
                    30,
                    what="the partition only in the new dir",
                )
            finally:
                stop.set()
                writer.join()
            assert broker.wait_for_log(f"Moved {TOPIC}-0 from {source} to {dest}", 5)
            send(1000)  # after the move
            assert producer.flush(30) == 0
            assert failures == []
            # The same dir as now: nothing to do.
            assert admin.alter_replica_log_dirs({replica: dest}) == {replica: kafka.errors.NoError}

            values = consume_all(broker.bootstrap, sent)
            assert [int(v[:8]) for v in values] == list(range(sent))
            old = Path(source) / f"{TOPIC}-0"
            wait_until(
                lambda: not list(Path(source).glob(f"{TOPIC}-0*")), 30, what="the old dir gone"
            )
            assert not old.exists() and (Path(dest) / f"{TOPIC}-0").is_dir()
            assert not list(Path(dest).glob("*-future"))

            # The topic created after its dir was asked for goes there.
            admin.create_topics([NewTopic(later.topic, 1, 1)])
            assert (Path(dest) / f"{later.topic}-0").is_dir()
        finally:
            admin.close()

        broker.restart()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            assert placement(admin) == {source: [], dest: [(0, False, 0)]}
        finally:
            admin.close()
        values = consume_all(broker.bootstrap, sent)
        assert [int(v[:8]) for v in values] == list(range(sent))

        # A move the broker's stop interrupts (begun and half copied here, as the broker
        # would): the next start resumes it from its copy.
        broker.stop()
        interrupt_a_move(Path(dest), Path(source))
        broker.start()
        wait_for_placement(broker.bootstrap, {source: [(0, False, 0)], dest: []}, "the move")
        assert broker.wait_for_log(f"Resuming the move of {TOPIC}-0", 1)
        values = consume_all(broker.bootstrap, sent)
        assert [int(v[:8]) for v in values] == list(range(sent))


def interrupt_a_move(log_dir: Path, dest: Path) -> None:
    """Begin moving TOPIC-0 from `log_dir` to `dest` and stop half way (the broker is down)."""
    manager = LogManager([log_dir, dest], LogConfig())
    manager.open()
    move = manager.begin_move(TOPIC, 0, dest)
    assert manager.future_made(move, move.make_future(manager.handles, wall_clock_ms, 0))
    assert move.future is not None
    for _ in range(3):
        with move.next_read(65536) as result:  # type: ignore[union-attr]
            move.future.append_as_follower(result.read())
    assert 0 < move.future.log_end_offset < move.current.log_end_offset
    manager.close()


REASSIGN_COMMAND = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
LOG_DIRS_COMMAND = "org.apache.kafka.tools.LogDirsCommand"


@pytest.mark.timeout(60)
def test_kafka_reassign_partitions_moves_a_replica_to_the_log_dir_of_its_plan(
    tmp_path: Path,
) -> None:
    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    with serving(BrokerProcess(Path(f"{a},{b}"))) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            admin.create_topics([NewTopic(TOPIC, 2, 1)])  # one in each dir
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for i in range(1000):
                producer.produce(TOPIC, b"%08d" % i, partition=i % 2)
            assert producer.flush(30) == 0
            where = {p: d for d, parts in placement(admin).items() for p, _f, _l in parts}
        finally:
            admin.close()
        other = {str(a): str(b), str(b): str(a)}
        plan = tmp_path / "plan.json"
        partitions = [
            {"topic": TOPIC, "partition": p, "replicas": [0], "log_dirs": [other[where[p]]]}
            for p in (0, 1)
        ]
        plan.write_text(json.dumps({"version": 1, "partitions": partitions}))
        tool = ["--bootstrap-server", broker.bootstrap, "--reassignment-json-file", str(plan)]
        executed = run_kafka_tool(REASSIGN_COMMAND, [*tool, "--execute"]).stdout.decode()
        assert "Successfully started partition reassignment" in executed, executed
        verified = ""

        def done() -> bool:
            nonlocal verified
            verified = run_kafka_tool(REASSIGN_COMMAND, [*tool, "--verify"]).stdout.decode()
            return "is still in progress" not in verified

        wait_until(done, 40, what="the moves")
        for p in (0, 1):
            assert f"Reassignment of replica moving-{p}-0 completed successfully" in verified
        described = run_kafka_tool(
            LOG_DIRS_COMMAND, ["--bootstrap-server", broker.bootstrap, "--describe"]
        ).stdout.decode()
        report = json.loads(described.splitlines()[-1])
        (listed,) = report["brokers"]
        found = {
            p["partition"]: (d["logDir"], p["isFuture"])
            for d in listed["logDirs"]
            for p in d["partitions"]
        }
        assert found == {f"{TOPIC}-{p}": (other[where[p]], False) for p in (0, 1)}
        assert sorted(consume_all(broker.bootstrap, 1000)) == [b"%08d" % i for i in range(1000)]


@pytest.mark.timeout(30)
def test_moving_a_replica_needs_alter_on_the_cluster(tmp_path: Path) -> None:
    authorizer = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    with serving(BrokerProcess(Path(f"{a},{b}"), authorizer)) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            replica = TopicPartitionReplica(TOPIC, 0, 0)
            answer = admin.alter_replica_log_dirs({replica: str(b)})
            assert answer == {replica: kafka.errors.ClusterAuthorizationFailedError}
        finally:
            admin.close()


@pytest.mark.timeout(30)
def test_a_throttled_move_shows_its_future_replica_until_the_throttle_is_raised(
    tmp_path: Path,
) -> None:
    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    properties = {
        "replica.alter.log.dirs.io.max.bytes.per.second": "10000",
        "replica.fetch.max.bytes": "16384",
        "replica.fetch.backoff.ms": "50",
    }
    with serving(BrokerProcess(Path(f"{a},{b}"), properties)) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            source, dest = fill_and_move(admin, broker.bootstrap, (str(a), str(b)), 500)
            # 500 KB at 10 KB/s (after the rate's first windows' allowance, some 100 KB): the
            # future replica is listed, behind, for half a minute.
            wait_until(
                lambda: any(f and lag > 0 for _p, f, lag in placement(admin)[dest]),
                5,
                what="the future replica listed with its lag",
            )
            assert [(p, f) for p, f, _lag in placement(admin)[source]] == [(0, False)]
            raised = ConfigResource(
                ResourceType.BROKER,
                "0",
                incremental_configs=[
                    ConfigEntry(
                        "replica.alter.log.dirs.io.max.bytes.per.second",
                        "100000000",
                        incremental_operation=AlterConfigOpType.SET,
                    )
                ],
            )
            configs = AdminClient({"bootstrap.servers": broker.bootstrap})
            for future in configs.incremental_alter_configs([raised]).values():
                future.result(10)  # dynamic: the move speeds up at once
            wait_until(
                lambda: placement(admin) == {source: [], dest: [(0, False, 0)]}, 10, what="the move"
            )
        finally:
            admin.close()
        assert consume_all(broker.bootstrap, 500) == [b"%08d" % i + b"." * 1000 for i in range(500)]


@pytest.mark.timeout(60)
def test_a_move_a_kill_interrupts_resumes_and_loses_no_acknowledged_record(
    tmp_path: Path,
) -> None:
    a, b = (tmp_path / "a").resolve(), (tmp_path / "b").resolve()
    throttle = "replica.alter.log.dirs.io.max.bytes.per.second"
    properties = {
        throttle: "20000",  # 1 MB at 20 KB/s: the kill lands mid-copy
        "replica.fetch.max.bytes": "16384",
        "replica.fetch.backoff.ms": "50",
        "log.segment.bytes": "200000",  # the copy rolls the future log
    }
    process = BrokerProcess(Path(f"{a},{b}"), properties)
    with serving(process) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            acked: dict[int, bytes] = {}

            def delivered(error: object, message: Message) -> None:
                assert error is None, error
                acked[message.offset()] = message.value()

            dirs = (str(a), str(b))
            source, dest = fill_and_move(admin, broker.bootstrap, dirs, 1000, delivered)
            wait_until(
                lambda: any(f and 0 < lag < 1000 for _p, f, lag in placement(admin)[dest]),
                10,
                what="the copy under way",
            )
        finally:
            admin.close()
        broker.kill()  # SIGKILL, mid-copy
        (future,) = Path(dest).glob(f"{TOPIC}-0.*-future")
        assert any(future.glob("*.log"))
        broker.properties[throttle] = "100000000"
        broker.start()
        assert broker.wait_for_log(f"Resuming the move of {TOPIC}-0", 10)
        wait_for_placement(broker.bootstrap, {source: [], dest: [(0, False, 0)]}, "the move")
        assert not future.exists() and not (Path(source) / f"{TOPIC}-0").exists()
        values = consume_all(broker.bootstrap, len(acked))
        assert dict(enumerate(values)) == acked  # each acknowledged record at its offset
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        after: list[int] = []
        producer.produce(TOPIC, b"after", on_delivery=lambda _e, m: after.append(m.offset()))
        assert producer.flush(10) == 0
        assert after == [len(acked)]  # no offset reused
