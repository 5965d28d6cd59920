"""Exactly-once through failures: a consume-transform-produce loop survives kill -9 of the
transaction coordinator and of a partition leader (3 brokers, RF 3, min.insync.replicas=2).

The loop is Kafka's own ``TransactionalMessageCopier`` (the tool of Kafka's transaction system
tests), one per input partition, each committing the input offsets inside its transactions of
100 records and aborting about a third of them on purpose (``--enable-random-aborts``). While
they copy, the coordinator of their transactional ids is killed and restarted, then the leader
of an output partition. A copier that dies of an error is started again with its transactional
id (fencing nothing but itself, resuming from its committed offsets).

The checker, after Jepsen's and the Bufstream analysis of Kafka transactions, reads each output
partition's log (every batch, with its producer and the markers) and its read_committed view:

- no aborted read: a read_committed consumer sees no record of an aborted transaction, and
  sees every record of a committed one (nothing committed is lost);
- exactly once: every input record is in the committed output once, no more, none missing;
- order: each output partition holds its input partition's records in input order;
- the copiers' group ends with every input offset committed.

With ``WIREBROKER_CLUSTER_TARGET=kafka`` it runs against Apache Kafka 3.9 (how it was checked).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat.kafka_process import kafka_tool_command
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.records import iter_batches, iter_records
from tests.cluster.processes import Cluster, running_cluster, wait_for
from tests.wirebroker.helpers import RawClient, fetch_raw

pytestmark = pytest.mark.integration

COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"
PARTITIONS = 2
RECORDS_PER_PARTITION = 15_000
SOURCE, SINK, GROUP = "eos-in", "eos-out", "eos-copier"


class Copier:
    """One ``TransactionalMessageCopier`` for one input partition, started again after an error."""

    def __init__(self, bootstrap: str, partition: int, workdir: Path) -> None:
        self.partition = partition
        self.argv = kafka_tool_command(
            COPIER,
            [
                "--broker-list", bootstrap,
                "--input-topic", SOURCE,
                "--input-partition", str(partition),
                "--output-topic", SINK,
                "--consumer-group", GROUP,
                "--transactional-id", f"{GROUP}-{partition}",
                "--transaction-size", "100",
                "--enable-random-aborts",
                "--use-group-metadata",
            ],
        )  # fmt: skip
        self.log = workdir / f"copier-{partition}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=log)

    def done(self) -> bool:
        """True once it copied everything (exit 0); after an error exit, starts it again."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            return False
        if code == 0:
            return True
        assert self.restarts < 5, f"copier {self.partition} keeps failing:\n{self.tail()}"
        self.restarts += 1
        self.start()
        return False

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def copiers(bootstrap: str) -> Iterator[list[Copier]]:
    with tempfile.TemporaryDirectory(prefix="wb-copier-") as workdir:
        running = [Copier(bootstrap, p, Path(workdir)) for p in range(PARTITIONS)]
        try:
            for c in running:
                c.start()
            yield running
        except BaseException:
            for c in running:
                print(f"--- copier {c.partition} ---\n{c.tail()}")
            raise
        finally:
            for c in running:
                c.stop()


def fill_input(bootstrap: str) -> dict[int, list[str]]:
    """``RECORDS_PER_PARTITION`` records per input partition (idempotent, acks=all): values."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sent: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for i in range(RECORDS_PER_PARTITION * PARTITIONS):
        p, value = i % PARTITIONS, f"{i:06d}"
        producer.produce(SOURCE, value.encode(), key=value.encode(), partition=p)
        sent[p].append(value)
        producer.poll(0)
    assert producer.flush(120) == 0
    return sent


def committed_input(bootstrap: str) -> int:
    """How many input records the copiers' group has committed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        parts = consumer.committed([TopicPartition(SOURCE, p) for p in range(PARTITIONS)], 10)
        return sum(max(tp.offset, 0) for tp in parts)
    finally:
        consumer.close()


def transaction_coordinator(cluster: Cluster) -> int:
    def ask() -> int:
        with RawClient(cluster.bootstrap.split(",")[0]) as client:
            request = FindCoordinatorRequest(key_type=1, coordinator_keys=[f"{GROUP}-0"])
            (c,) = client.request(request, 4).coordinators
        return int(c.node_id) if c.error_code == 0 else 0

    return int(wait_for(ask, 60.0, "the transaction coordinator"))


def log_outcomes(cluster: Cluster, partition: int) -> tuple[dict[int, str], set[int]]:
    """One output partition's log from its leader: committed records (offset: value) and the
    offsets of aborted ones, from the batches' producer ids and the COMMIT/ABORT markers."""
    leader = cluster.leader(SINK, partition)
    address = f"127.0.0.1:{cluster.node(leader).port}"
    open_txns: dict[int, dict[int, str]] = {}
    committed: dict[int, str] = {}
    aborted: set[int] = set()
    offset, high_watermark = 0, None
    while high_watermark is None or offset < high_watermark:
        p = fetch_raw(address, SINK, partition, offset)
        assert p.error_code == 0, p.error_code
        assert p.last_stable_offset == p.high_watermark, "a transaction is still open"
        high_watermark = p.high_watermark
        for batch in iter_batches(bytes(p.records or b"")):
            for r in iter_records(batch):
                if r.offset < offset:
                    continue
                offset = r.offset + 1
                if not batch.is_control:
                    assert batch.is_transactional, f"non-transactional record at {r.offset}"
                    value = bytes(r.value or b"").decode()
                    open_txns.setdefault(batch.producer_id, {})[r.offset] = value
                    continue
                ended = open_txns.pop(batch.producer_id, {})
                if int.from_bytes(bytes(r.key)[2:4]) == 1:
                    committed.update(ended)
                else:
                    aborted.update(ended)
    assert not open_txns, f"transactions without a marker: {list(open_txns)}"
    return committed, aborted


def read_committed(bootstrap: str, partition: int, end: int) -> dict[int, str]:
    """What a read_committed consumer gets from one output partition, up to ``end``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    got: dict[int, str] = {}
    try:
        consumer.assign([TopicPartition(SINK, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, f"read_committed stalled at {len(got)} records"
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                # End of partition: the consumer is at the last stable offset, the log's end.
                if m.error().code() == -191 and m.offset() >= end:
                    return got
                continue
            got[m.offset()] = m.value().decode()
    finally:
        consumer.close()


def check(cluster: Cluster, sent: dict[int, list[str]]) -> dict[str, Any]:
    """The checker: no aborted read, no committed record lost, exactly once, order kept."""
    summary: dict[str, Any] = {"committed": 0, "aborted": 0}
    everything: Counter[str] = Counter()
    for p in range(PARTITIONS):
        committed, aborted = log_outcomes(cluster, p)
        end = max([*committed, *aborted], default=-1) + 1
        seen = read_committed(cluster.bootstrap, p, end)
        assert not set(seen) & aborted, (
            f"aborted read in {SINK}-{p}: {sorted(set(seen) & aborted)[:10]}"
        )
        lost = sorted(set(committed) - set(seen))
        assert not lost, f"committed records not read from {SINK}-{p}: {lost[:10]}"
        assert seen == committed, f"read_committed of {SINK}-{p} differs from its log's commits"
        values = [committed[o] for o in sorted(committed)]
        assert values == sent[p], (
            f"{SINK}-{p} is not input partition {p} once and in order: "
            f"{len(values)} records for {len(sent[p])}; duplicates "
            f"{[v for v, n in Counter(values).items() if n > 1][:10]}, missing "
            f"{sorted(set(sent[p]) - set(values))[:10]}"
        )
        everything.update(values)
        summary["committed"] += len(committed)
        summary["aborted"] += len(aborted)
    assert everything == Counter(v for values in sent.values() for v in values)
    assert committed_input(cluster.bootstrap) == PARTITIONS * RECORDS_PER_PARTITION
    return summary


@pytest.mark.timeout(900)
def test_copier_survives_killing_the_coordinator_and_a_leader(kind: str) -> None:
    with running_cluster(kind) as cluster:
        cluster.create_topic(SOURCE, PARTITIONS)
        cluster.create_topic(SINK, PARTITIONS)
        sent = fill_input(cluster.bootstrap)
        total = PARTITIONS * RECORDS_PER_PARTITION
        kills: list[tuple[str, int, int]] = []  # (what, broker, input records committed then)

        def copied() -> int:
            return int(wait_for(lambda: str(committed_input(cluster.bootstrap)), 60, "offsets"))

        with copiers(cluster.bootstrap) as running:
            for what, share in (("transaction coordinator", 0.2), (f"leader of {SINK}", 0.5)):
                wait_for(lambda: copied() >= total * share, 180, f"{share:.0%} copied")  # noqa: B023
                coordinator = transaction_coordinator(cluster)
                if what == "transaction coordinator":
                    victim = coordinator
                else:  # a leader that is not the coordinator, when there is one
                    leaders = [cluster.leader(SINK, p) for p in range(PARTITIONS)]
                    victim = next((b for b in leaders if b != coordinator), leaders[0])
                kills.append((what, victim, copied()))
                cluster.kill_and_restart(victim)
            wait_for(lambda: all([c.done() for c in running]), 300, "the copiers to finish")
        assert all(at < total for _, _, at in kills), f"a kill came after the copy ended: {kills}"
        cluster.wait_fully_replicated(SINK)
        summary = check(cluster, sent)
        assert summary["aborted"] > 0, "no transaction was aborted: the checker saw no abort"
        print(f"kills {kills}, {summary}, restarts {[c.restarts for c in running]}")
