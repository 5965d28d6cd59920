"""Load for the failure tests, and the checks that nothing acknowledged was lost.

Producers write increasing integers (as text) and record every acknowledgement as
``Acked(partition, offset, value)``: confluent-kafka's idempotent producer in a thread, or
Kafka's own ``VerifiableProducer`` (the Java client, idempotent) in a subprocess, whose JSON
lines are the acknowledgements. :func:`verify` then reads every partition from the start and
checks Kafka's promise under acks=all with min.insync.replicas=2: every acknowledged record is
at its acknowledged offset, no value appears twice, and each partition's values increase
(one producer's order is kept per partition). :class:`LeaderProbe` asks every broker who it
thinks leads a partition, to catch two leaders claiming one leader epoch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from compat.kafka_process import java_command, write_log4j_config
from protocol.errors import ErrorCode
from protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from tests.wirebroker.helpers import RawClient

#: Client settings that keep retrying through failovers for as long as a test runs.
RETRY_FOREVER = {"delivery.timeout.ms": "300000", "request.timeout.ms": "10000"}


class Acked(NamedTuple):
    partition: int
    offset: int
    value: int


@dataclass
class ProducerReport:
    acked: list[Acked] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class ConfluentProducer:
    """confluent-kafka, idempotent, acks=all, round-robin over partitions, ~``rate`` records/s."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int = 500) -> None:
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.report = ProducerReport()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConfluentProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> ProducerReport:
        self._stop.set()
        self._thread.join(timeout=330)
        return self.report

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": RETRY_FOREVER["delivery.timeout.ms"],
                "socket.timeout.ms": RETRY_FOREVER["request.timeout.ms"],
                # Its idempotence log (PID, epoch bumps and why, sequence errors), shown with
                # a failure: a value written twice after an epoch bump is the client's doing
                # (docs/perf-notes.md, "The chaos test's values written twice").
                "debug": "eos",
            }
        )

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.report.errors.append(str(err))
            else:
                self.report.acked.append(Acked(msg.partition(), msg.offset(), int(msg.value())))

        value = 0
        started = time.monotonic()
        while not self._stop.is_set():
            ahead = value - (time.monotonic() - started) * self.rate
            if ahead > 0:
                self._stop.wait(ahead / self.rate)
                continue
            producer.produce(
                self.topic,
                str(value).encode(),
                partition=value % self.partitions,
                on_delivery=delivered,
            )
            value += 1
            producer.poll(0)
        left = producer.flush(320)
        if left:
            self.report.errors.append(f"{left} records never delivered")


class JavaProducer:
    """Kafka's VerifiableProducer (the Java client), idempotent, acks=all, ~``rate`` records/s."""

    MAIN = "org.apache.kafka.tools.VerifiableProducer"

    def __init__(self, bootstrap: str, topic: str, rate: int = 500) -> None:
        self.report = ProducerReport()
        self._dir = Path(tempfile.mkdtemp(prefix="wb-verifiable-"))
        config = self._dir / "producer.properties"
        config.write_text(
            # The tool sets retries=0 itself; idempotence needs them back.
            "enable.idempotence=true\nretries=2147483647\nmax.in.flight.requests.per.connection=5\n"
            + "".join(f"{k}={v}\n" for k, v in RETRY_FOREVER.items())
        )
        log4j = write_log4j_config(self._dir / "log4j.properties", "WARN")
        args = ["--bootstrap-server", bootstrap, "--topic", topic, "--acks", "-1"]
        args += ["--throughput", str(rate), "--producer.config", str(config)]
        self.argv = java_command(self.MAIN, args, heap="256m", log4j_config=log4j)
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> JavaProducer:
        self._proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=open(self._dir / "stderr.log", "w"),  # noqa: SIM115 - the child's
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("name") == "producer_send_success":
                    self.report.acked.append(
                        Acked(event["partition"], event["offset"], int(event["value"]))
                    )
                elif event.get("name") == "producer_send_error":
                    self.report.errors.append(f"{event.get('exception')}: {event.get('message')}")

    def stop(self) -> ProducerReport:
        """SIGTERM: the tool flushes what it sent, reports it, and exits."""
        if self._proc is not None:
            self._proc.terminate()
            try:
                code = self._proc.wait(330)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                code = self._proc.wait()
                self.report.errors.append("VerifiableProducer did not stop on SIGTERM")
            if code not in (0, 143, -signal.SIGTERM):
                stderr = (self._dir / "stderr.log").read_text(errors="replace")[-2000:]
                self.report.errors.append(f"VerifiableProducer exited with {code}: {stderr}")
            self._proc = None
        if self._reader is not None:
            self._reader.join(timeout=30)
        shutil.rmtree(self._dir, ignore_errors=True)
        return self.report

    def wait_acked(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.report.acked) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"VerifiableProducer acked {len(self.report.acked)} < {count}")
            time.sleep(0.1)


class GroupConsumer:
    """A consumer-group member that reads ``topic`` and commits, in a thread."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.seen: list[Acked] = []
        self.errors: list[str] = []
        #: What the member went through, timed from its start: its assignments and
        #: revocations, librdkafka's log lines, and how its thread ended.
        self.history: list[str] = []
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _note(self, what: str) -> None:
        self.history.append(f"{time.monotonic() - self._started:.1f}s {what}")

    def __enter__(self) -> GroupConsumer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 500,
                # A join waiting for the subscription's metadata waits for the answer to its
                # own Metadata request; when that request's broker stops (a restart under
                # test) the answer never comes, and only the periodic refresh (5 minutes by
                # default) lets the member join (librdkafka 2.x, docs/perf-notes.md).
                "topic.metadata.refresh.interval.ms": 5000,
                "logger": _Notes(self._note),
            }
        )

        def assigned(what: str) -> Callable[[Any, list[Any]], None]:
            return lambda _, partitions: self._note(f"{what} {[p.partition for p in partitions]}")

        consumer.subscribe(
            [self.topic],
            on_assign=assigned("assigned"),
            on_revoke=assigned("revoked"),
            on_lost=assigned("lost"),
        )
        try:
            while not self._stop.is_set():
                m = consumer.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(str(m.error()))
                    continue
                self.seen.append(_record(m))
        except BaseException as e:
            self._note(f"stopped polling: {e!r}")
            raise
        finally:
            consumer.close()

    def wait_for(self, acked: Iterable[Acked], timeout: float = 120.0) -> None:
        """Until every acknowledged record was consumed (a group member finishes)."""
        want = {(a.partition, a.offset) for a in acked}
        deadline = time.monotonic() + timeout
        while True:
            missing = want - {(s.partition, s.offset) for s in list(self.seen)}
            if not missing:
                return
            if time.monotonic() > deadline:
                per_partition = Counter(s.partition for s in list(self.seen))
                raise AssertionError(
                    f"the group consumer never saw {len(missing)} acknowledged records, "
                    f"e.g. {sorted(missing)[:5]}; errors: {self.errors[-5:]}; records seen "
                    f"per partition: {dict(sorted(per_partition.items()))}; its history "
                    f"(last 20): {self.history[-20:]}"
                )
            time.sleep(0.2)


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 120.0) -> list[Acked]:
    """Every record of every partition, from the log start to the high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False}
    )
    try:
        ends = {p: _high_watermark(consumer, topic, p, timeout) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[Acked] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic} back timed out; ends {ends}, done {done}")
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            rec = _record(m)
            out.append(rec)
            if rec.offset + 1 >= ends[rec.partition]:
                done.add(rec.partition)
        return out
    finally:
        consumer.close()


def _high_watermark(consumer: Any, topic: str, partition: int, timeout: float) -> int:
    """The partition's high watermark, retried while leadership settles after failures."""
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + timeout
    while True:
        try:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            return int(high)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class _Notes(logging.Logger):
    """librdkafka's log lines (information and worse: debug is off) into a member's history."""

    def __init__(self, note: Callable[[str], None]) -> None:
        super().__init__("group-consumer", logging.INFO)
        self._note_line = note

    def handle(self, record: logging.LogRecord) -> None:
        self._note_line(record.getMessage())


def _record(m: Any) -> Acked:
    return Acked(m.partition(), m.offset(), int(m.value()))


def verify(acked: list[Acked], log: list[Acked]) -> None:
    """Kafka's durability promise, checked against what was read back."""
    assert acked, "the producer got no acknowledgements at all"
    at = {(r.partition, r.offset): r.value for r in log}
    lost = [a for a in acked if at.get((a.partition, a.offset)) != a.value]
    assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {lost[:5]}"
    counts: dict[int, int] = defaultdict(int)
    for r in log:
        counts[r.value] += 1
    dupes = sorted(v for v, n in counts.items() if n > 1)
    assert not dupes, f"{len(dupes)} values written twice, e.g. {dupes[:10]}"
    by_partition: dict[int, list[Acked]] = defaultdict(list)
    for r in sorted(log):
        by_partition[r.partition].append(r)
    for p, recs in by_partition.items():
        values = [r.value for r in recs]
        assert values == sorted(values), f"partition {p} is out of the producer's order"


class LeaderProbe:
    """Asks every broker, over and over, whether it leads a partition and in which epoch.

    A broker answers ListOffsets with no error only while it believes it is the leader, and
    (v4+) says its leader epoch. ``claims`` maps (partition, epoch) to the brokers that ever
    answered as its leader: Kafka's safety rule is that this is never more than one broker.
    """

    def __init__(self, brokers: dict[int, str], topic: str, partitions: int) -> None:
        self.brokers, self.topic, self.partitions = brokers, topic, partitions
        self.claims: dict[tuple[int, int], set[int]] = defaultdict(set)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(node_id, addr), daemon=True)
            for node_id, addr in brokers.items()
        ]

    def __enter__(self) -> LeaderProbe:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=10)

    def conflicts(self) -> dict[tuple[int, int], set[int]]:
        return {k: v for k, v in self.claims.items() if len(v) > 1}

    def _run(self, node_id: int, addr: str) -> None:
        request = ListOffsetsRequest(
            replica_id=-1,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=self.topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=p, current_leader_epoch=-1, timestamp=-1
                        )
                        for p in range(self.partitions)
                    ],
                )
            ],
        )
        client: RawClient | None = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = RawClient(addr, timeout=1.0)
                response: ListOffsetsResponse = client.request(request, 7)
            except (OSError, ConnectionError, AssertionError):
                if client is not None:
                    client.close()
                client = None
                self._stop.wait(0.2)
                continue
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.NONE:
                        self.claims[(p.partition_index, p.leader_epoch)].add(node_id)
            self._stop.wait(0.05)
        if client is not None:
            client.close()
