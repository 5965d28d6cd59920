"""Consumer groups of real clients against a broker process: the classic rebalance protocol.

Every member is its own process (`group_member`), so a "killed" member really is SIGKILLed and
never sends LeaveGroup. Each scenario runs with confluent-kafka, kafka-python and aiokafka
(cooperative-sticky with confluent-kafka only: the two pure-Python clients have no cooperative
assignor): three members on a 6-partition topic consume every record exactly once with
commits; a killed member's partitions move within the session timeout; a restarted group
resumes at its committed offsets; a broker restart keeps the offsets and the group.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import create_topic, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 6
SESSION_MS = 3000
CLIENTS = ["confluent", "kafka-python", "aiokafka"]
BROKER_PROPERTIES = {
    "group.initial.rebalance.delay.ms": "300",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
}


class Member:
    """One member process and what it has reported."""

    def __init__(
        self,
        client: str,
        bootstrap: str,
        group: str,
        topic: str,
        strategy: str = "",
        instance: str | None = None,
    ) -> None:
        cmd = [sys.executable, "-m", "tests.wirebroker.group_member", client, bootstrap, group]
        cmd += [topic, str(SESSION_MS), strategy] + ([instance] if instance else [])
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.assigned: set[int] = set()
        self.revoked: list[int] = []
        self.consumed: list[tuple[int, int, str]] = []
        self.committed: list[str] = []  # the values of the batches whose commit succeeded
        self.log: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        batch: list[list[Any]] = []  # the last consumed
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                self.log.append(line.rstrip())
                continue
            with self.lock:
                if "assign" in event:
                    self.assigned |= set(event["assign"])
                elif "revoke" in event:
                    self.assigned -= set(event["revoke"])
                    self.revoked += event["revoke"]
                elif "consumed" in event:
                    batch = event["consumed"]
                    self.consumed += [tuple(r) for r in batch]
                elif "committed" in event:
                    self.committed += [value for _, _, value in batch]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def members(
    client: str, broker: BrokerProcess, group: str, topic: str, n: int = 3, strategy: str = ""
) -> Iterator[list[Member]]:
    started = [Member(client, broker.bootstrap, group, topic, strategy) for _ in range(n)]
    try:
        yield started
    finally:
        for m in started:
            m.stop()


def stable(group: list[Member]) -> bool:
    """Every live member owns partitions, no partition twice, all partitions owned."""
    live = [m for m in group if m.proc.poll() is None]
    owned = [set(m.assigned) for m in live]
    total = sum(len(s) for s in owned)
    union = set().union(*owned)
    return all(owned) and total == len(union) == PARTITIONS


def consumed_values(group: list[Member]) -> Counter[str]:
    return Counter(v for m in group for _, _, v in list(m.consumed))


def produce(broker: BrokerProcess, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0


def wait_consumed(group: list[Member], values: list[str], timeout: float = 30.0) -> Counter[str]:
    """Until every value is consumed and its offset committed (a restart then resumes after
    it): what the group consumed."""
    wanted = set(values)
    wait_until(
        lambda: wanted <= {v for m in group for v in list(m.committed)},
        timeout,
        what=f"{len(wanted)} records consumed and committed",
    )
    return consumed_values(group)


def debug(group: list[Member]) -> str:
    return "\n".join(f"{m.assigned} {m.log[-5:]}" for m in group)


@pytest.mark.parametrize("client", CLIENTS)
def test_three_members_consume_every_record_once(
    broker: BrokerProcess, topic: str, client: str
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    with members(client, broker, f"g-{topic}", topic) as group:
        wait_until(lambda: stable(group), 30, what="a stable group of three")
        values = [f"v{i}" for i in range(300)]
        produce(broker, topic, values)
        seen = wait_consumed(group, values)
        assert seen == Counter(values), debug(group)
        assert all(m.consumed for m in group)


@pytest.mark.parametrize("client", CLIENTS)
def test_killed_member_partitions_move_within_session_timeout(
    broker: BrokerProcess, topic: str, client: str
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    with members(client, broker, f"g-{topic}", topic) as group:
        wait_until(lambda: stable(group), 30, what="a stable group of three")
        victim, survivors = group[0], group[1:]
        killed_at = time.monotonic()
        victim.kill()
        wait_until(lambda: stable(survivors), 20, what="the victim's partitions reassigned")
        elapsed = time.monotonic() - killed_at
        # Expiry at the session timeout, then one heartbeat interval for the others to rejoin.
        assert elapsed < SESSION_MS / 1000 + 2.0, elapsed
        values = [f"after-kill-{i}" for i in range(60)]
        produce(broker, topic, values)
        assert set(values) <= set(wait_consumed(survivors, values))


@pytest.mark.parametrize("client", CLIENTS)
def test_restarted_group_resumes_at_committed_offsets(
    broker: BrokerProcess, topic: str, client: str
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    first = [f"first-{i}" for i in range(120)]
    second = [f"second-{i}" for i in range(120)]
    produce(broker, topic, first)
    with members(client, broker, f"g-{topic}", topic) as group:
        wait_consumed(group, first)
    produce(broker, topic, second)
    with members(client, broker, f"g-{topic}", topic) as group:
        seen = wait_consumed(group, second)
        assert seen == Counter(second), "records before the commit were consumed again"


def test_cooperative_rebalance_keeps_unaffected_partitions(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    group_id = f"g-{topic}"
    with members("confluent", broker, group_id, topic, 2, "cooperative-sticky") as pair:
        wait_until(lambda: stable(pair), 30, what="a stable group of two")
        before = [set(m.assigned) for m in pair]
        revoked_before = [len(m.revoked) for m in pair]
        with members("confluent", broker, group_id, topic, 1, "cooperative-sticky") as third:
            group = pair + third
            wait_until(lambda: stable(group), 30, what="a stable group of three")
            moved = set(third[0].assigned)
            for m, owned, n in zip(pair, before, revoked_before, strict=True):
                revoked = set(m.revoked[n:])
                # Only the partitions that moved to the newcomer were ever revoked.
                assert revoked <= moved, (revoked, moved)
                assert owned - revoked <= m.assigned
            values = [f"coop-{i}" for i in range(60)]
            produce(broker, topic, values)
            assert wait_consumed(group, values) == Counter(values)


@pytest.mark.parametrize(("client", "clean"), [(c, True) for c in CLIENTS] + [("confluent", False)])
def test_broker_restart_keeps_offsets_and_group(
    tmp_path: Path, topic: str, client: str, clean: bool
) -> None:
    broker = BrokerProcess(tmp_path, BROKER_PROPERTIES)
    broker.start()
    try:
        create_topic(broker.bootstrap, topic, PARTITIONS)
        with members(client, broker, f"g-{topic}", topic) as group:
            wait_until(lambda: stable(group), 30, what="a stable group of three")
            first = [f"first-{i}" for i in range(120)]
            produce(broker, topic, first)
            wait_consumed(group, first)
            broker.restart(clean=clean)  # unclean: kill -9, then log recovery
            second = [f"second-{i}" for i in range(120)]
            produce(broker, topic, second)
            seen = wait_consumed(group, second, timeout=45)
            assert set(seen) == set(first) | set(second)
            assert all(seen[v] == 1 for v in first), "committed records were consumed again"
    finally:
        broker.stop()


def test_confluent_admin_lists_describes_alters_and_deletes_groups(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 2)
    group_id = f"g-{topic}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with members("confluent", broker, group_id, topic, 1) as group:
        wait_until(lambda: group[0].assigned == {0, 1}, 30, what="an assignment")
        listed = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result()
        assert group_id in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group_id])[group_id].result()
        assert described.state == ConsumerGroupState.STABLE
        (member,) = described.members
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
    wanted = [TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 9)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id, wanted)])[
        group_id
    ].result()
    request = ConsumerGroupTopicPartitions(
        group_id, [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    )
    found = admin.list_consumer_group_offsets([request])[group_id].result()
    assert [(tp.partition, tp.offset) for tp in found.topic_partitions] == [(0, 7), (1, 9)]
    admin.delete_consumer_groups([group_id])[group_id].result()
    listed = admin.list_consumer_groups().result()
    assert group_id not in {g.group_id for g in listed.valid}


def test_static_member_restarted_within_session_keeps_its_partitions(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    group_id = f"g-{topic}"
    started = [
        Member("confluent", broker.bootstrap, group_id, topic, instance=f"static-{i}")
        for i in range(3)
    ]
    try:
        wait_until(lambda: stable(started), 30, what="a stable static group of three")
        owned = set(started[0].assigned)
        # Members that joined apart may have been rebalanced while the group formed; only
        # revocations after the restart count.
        before = [len(m.revoked) for m in started[1:3]]
        started[0].kill()  # a static member sends no LeaveGroup; it comes back at once
        back = Member("confluent", broker.bootstrap, group_id, topic, instance="static-0")
        started.append(back)
        wait_until(lambda: back.assigned == owned, 20, what="the same partitions back")
        after = [len(m.revoked) for m in started[1:3]]
        assert after == before, "the others were rebalanced"
        values = [f"static-{i}" for i in range(60)]
        produce(broker, topic, values)
        assert wait_consumed(started[1:], values) == Counter(values)
    finally:
        for m in started:
            m.stop()
