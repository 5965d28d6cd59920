"""`make soak`: brokers under steady load and churn for many minutes, and whether they leak.

What a benchmark row cannot see is behaviour over time: memory or descriptors a broker keeps
for every topic, connection or group member that came and went. This runs one broker (with
SSL and SASL_SSL listeners beside PLAINTEXT, ``Secured``) or a 3-broker cluster of
``bench.side_by_side.targets`` (the same launch as ``make bench``; Kafka 3.9 too with
``--targets``) under, at once, from librdkafka clients (confluent-kafka):

- a steady idempotent producer (``STEADY_RATE`` records/s) and a group consumer reading it;
- topic churn: create a topic, write it, commit a transaction (a new transactional producer
  of one id each time), read it read_committed in a group, delete it, again;
- group churn: a consumer joins the steady topic's second group beside a permanent member,
  waits for its assignment and leaves;
- connection churn (one broker): a producer over SASL_SSL (TLS handshake and PLAIN login)
  writes one record and closes, and an admin client over SSL lists the topics, again.

Segments are small and retention short (``SOAK_PROPERTIES``), so segments roll and are
deleted all along; topics are not auto-created (clients ask for deleted topics again).
Every ``--sample-seconds`` it prints each broker's resident memory, descriptors and threads,
the workload's counts and errors. At the end it judges each wirebroker broker (``judge``) on
the samples after the warm-up: memory growing (a least-squares slope over
``RSS_SLOPE_LIMIT`` MiB an hour, and more than ``RSS_GROWTH_FLOOR`` MiB gained from the first
third of them to the last), descriptors or threads growing, a client error, or an ERROR or
traceback in its log fail the run (exit status 1). Kafka's brokers are shown beside it, not judged: a
JVM's resident memory grows into its heap. The samples are written as CSV to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import logging
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.side_by_side.targets import (
    SASL_PASSWORD,
    SASL_USER,
    TARGET_NAMES,
    Broker,
    BrokerError,
    Secured,
    running,
    running_cluster,
    target_session,
)

log = logging.getLogger("soak")

SOAK_PROPERTIES: dict[str, str] = {
    # A client that wrote to a topic asks for its metadata again after the topic is deleted
    # (librdkafka every topic.metadata.refresh.interval.ms): auto-creation would bring the
    # churned topics back, and they would stay.
    "auto.create.topics.enable": "false",
    "log.segment.bytes": str(1 << 20),
    "log.retention.bytes": str(4 << 20),
    "log.retention.check.interval.ms": "5000",
}
"""Every broker's settings beyond the shared ones: segments roll and are deleted all along."""

STEADY_TOPIC = "soak-steady"
STEADY_PARTITIONS = 6
STEADY_RATE = 1000  # records a second, 200 bytes each
CHURN_RECORDS = 300
RSS_SLOPE_LIMIT = 10.0  # MiB an hour: the leak of deleted segments was 21 under this load
RSS_GROWTH_FLOOR = 2.0  # MiB: below this, a slope is the allocator's noise
FDS_GROWTH_LIMIT = 16
THREADS_GROWTH_LIMIT = 4
ERROR_LINE = re.compile(r"\bERROR\b|^Traceback")


@dataclass(frozen=True)
class Sample:
    """One broker's process at one moment of the run."""

    seconds: float
    broker: str
    rss_mib: float
    fds: int
    threads: int


def sample(name: str, broker: Broker, seconds: float) -> Sample:
    status = Path(f"/proc/{broker.pid}/status").read_text().splitlines()
    threads = int(next(line for line in status if line.startswith("Threads:")).split()[1])
    fds = sum(1 for _ in Path(f"/proc/{broker.pid}/fd").iterdir())
    return Sample(seconds, name, broker.rss_bytes() / 2**20, fds, threads)


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    if var == 0:
        return 0.0
    cov = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return cov / var * 3600


def judge(samples: Sequence[Sample], warm_up_s: float) -> list[str]:
    """What is wrong with one broker's samples after ``warm_up_s``: [] if nothing. Growth is
    the mean of the last third of them less the first third's (single samples vary: the
    files of deleted segments wait ``file.delete.delay.ms`` to close)."""
    steady = [s for s in samples if s.seconds >= warm_up_s]
    if len(steady) < 3:
        return [f"only {len(steady)} samples after the {warm_up_s:.0f} s warm-up: run longer"]
    third = len(steady) // 3

    def thirds(what: str) -> tuple[float, float]:
        values = [float(getattr(s, what)) for s in steady]
        return sum(values[:third]) / third, sum(values[-third:]) / third

    problems = []
    rate = slope_per_hour([(s.seconds, s.rss_mib) for s in steady])
    first, last = thirds("rss_mib")
    if rate > RSS_SLOPE_LIMIT and last - first > RSS_GROWTH_FLOOR:
        problems.append(
            f"resident memory grows {rate:.1f} MiB an hour ({first:.1f} → {last:.1f} MiB from "
            f"the first third to the last; limit {RSS_SLOPE_LIMIT:.0f} MiB an hour)"
        )
    for what, limit in (("fds", FDS_GROWTH_LIMIT), ("threads", THREADS_GROWTH_LIMIT)):
        first, last = thirds(what)
        if last - first > limit:
            problems.append(
                f"{what} grow: {first:.0f} → {last:.0f} from the first third to the last "
                f"(limit +{limit})"
            )
    return problems


@dataclass
class Counts:
    """What the workload did, and what went wrong in it (shared by its threads)."""

    produced: int = 0
    consumed: int = 0
    topics: int = 0
    members: int = 0
    connections: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, what, getattr(self, what) + n)

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.append(text)
        log.warning("client error: %s", text)

    def line(self) -> str:
        return (
            f"{self.produced:,} produced, {self.consumed:,} consumed, {self.topics} topics, "
            f"{self.members} members, {self.connections} connections, "
            f"{len(self.errors)} errors"
        )


@dataclass
class Workload:
    """The soak's clients: each a thread looping until ``stop`` is set."""

    bootstrap: str
    replicas: int
    secured: Secured | None
    ssl_bootstrap: str | None
    sasl_bootstrap: str | None
    counts: Counts = field(default_factory=Counts)
    stop: threading.Event = field(default_factory=threading.Event)

    def config(self, **extra: Any) -> dict[str, Any]:
        def on_error(err: object) -> None:
            self.counts.error(f"librdkafka: {err}")

        return {"bootstrap.servers": self.bootstrap, "error_cb": on_error, **extra}

    def loops(self) -> list[Callable[[], None]]:
        loops = [self.steady_producer, self.steady_consumer, self.topic_churn, self.member_churn]
        loops += [self.connection_churn] if self.secured else []
        return [self.guarded(loop) for loop in loops]

    def guarded(self, loop: Callable[[], None]) -> Callable[[], None]:
        """``loop``, counting what it raises as an error and starting it again."""

        def run() -> None:
            while not self.stop.is_set():
                try:
                    loop()
                except Exception as e:  # a client's refusal: counted, and the loop goes on
                    self.counts.error(f"{loop.__name__}: {e!r}")
                    self.stop.wait(1.0)

        return run

    def prepare(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self.config())
        topic = NewTopic(STEADY_TOPIC, STEADY_PARTITIONS, self.replicas)
        admin.create_topics([topic])[STEADY_TOPIC].result(30)

    def delivered(self, err: object, _msg: object) -> None:
        if err is None:
            self.counts.add("produced")
        else:
            self.counts.error(f"steady delivery: {err}")

    def steady_producer(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(self.config(**{"enable.idempotence": True, "linger.ms": 5}))
        n, began = 0, time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - began) * STEADY_RATE)
            for _ in range(due - n):
                producer.produce(
                    STEADY_TOPIC, b"x" * 200, str(n % 97).encode(), on_delivery=self.delivered
                )
                n += 1
            producer.poll(0.05)
        producer.flush(30)

    def steady_consumer(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            self.config(**{"group.id": "soak-steady", "auto.offset.reset": "earliest"})
        )
        consumer.subscribe([STEADY_TOPIC])
        try:
            while not self.stop.is_set():
                for message in consumer.consume(500, 0.5):
                    if message.error():
                        self.counts.error(f"steady consumer: {message.error()}")
                    else:
                        self.counts.add("consumed")
        finally:
            consumer.close()

    def topic_churn(self) -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self.config())
        i = 0
        while not self.stop.is_set():
            i += 1
            topic = f"soak-churn-{i}"
            admin.create_topics([NewTopic(topic, 3, self.replicas)])[topic].result(30)
            producer = Producer(self.config(**{"enable.idempotence": True}))
            for _ in range(CHURN_RECORDS):
                producer.produce(topic, b"y" * 100)
            if producer.flush(30):
                self.counts.error(f"{topic}: records not delivered in 30 s")
            # a new producer each time: the coordinator fences the last one (an epoch bump)
            transactional = Producer(self.config(**{"transactional.id": "soak-churn"}))
            transactional.init_transactions(30)
            transactional.begin_transaction()
            for _ in range(50):
                transactional.produce(topic, b"t")
            transactional.commit_transaction(30)
            group = {"group.id": f"soak-churn-{i}", "isolation.level": "read_committed"}
            consumer = Consumer(self.config(**{"auto.offset.reset": "earliest", **group}))
            consumer.subscribe([topic])
            got, deadline = 0, time.monotonic() + 30
            while got < CHURN_RECORDS + 50 and time.monotonic() < deadline:
                got += sum(1 for m in consumer.consume(500, 0.5) if not m.error())
            consumer.close()
            if got != CHURN_RECORDS + 50:
                self.counts.error(f"{topic}: consumed {got} of {CHURN_RECORDS + 50} records")
            admin.delete_topics([topic])[topic].result(30)
            self.counts.add("topics")

    def member_churn(self) -> None:
        from confluent_kafka import Consumer

        # no commits: each member starts at the end (a commit would fall behind retention)
        group = {"group.id": "soak-members", "enable.auto.commit": False}
        permanent = Consumer(self.config(**group))
        permanent.subscribe([STEADY_TOPIC])
        try:
            while not self.stop.is_set():
                member = Consumer(self.config(**group))
                member.subscribe([STEADY_TOPIC])
                deadline = time.monotonic() + 30
                while not member.assignment() and time.monotonic() < deadline:
                    member.poll(0.2)
                    permanent.poll(0)
                if not member.assignment():
                    self.counts.error("group churn: no assignment in 30 s")
                member.close()
                self.counts.add("members")
                permanent.poll(0.5)
        finally:
            permanent.close()

    def connection_churn(self) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        assert self.secured is not None
        tls = {"ssl.ca.location": str(self.secured.certificate)}
        sasl = {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": SASL_USER,
            "sasl.password": SASL_PASSWORD,
        }
        ssl = {"bootstrap.servers": self.ssl_bootstrap, "security.protocol": "SSL"}
        while not self.stop.is_set():
            producer = Producer(self.config(**tls, **sasl, **{"enable.idempotence": True}))
            producer.produce(STEADY_TOPIC, b"z")
            if producer.flush(30):
                self.counts.error("connection churn: record not delivered in 30 s")
            AdminClient(self.config(**tls, **ssl)).list_topics(timeout=30)
            self.counts.add("connections", 2)
            self.stop.wait(0.5)


class LogWatch:
    """The ERROR and traceback lines a broker's log gained since the last look."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.lines = path, 0, list[str]()

    def read(self) -> None:
        with contextlib.suppress(OSError), self.path.open("rb") as f:
            f.seek(self.offset)
            text = f.read()
            self.offset += len(text)
        self.lines += [
            line for line in text.decode(errors="replace").splitlines() if ERROR_LINE.search(line)
        ]


@contextlib.contextmanager
def brokers(
    target_name: str, brokers_n: int, workdir: Path
) -> Iterator[tuple[dict[str, Broker], Workload]]:
    """The target's brokers, running, by name, and the workload for them (not started)."""
    with target_session(target_name, workdir / target_name, SOAK_PROPERTIES) as target:
        if brokers_n == 1:
            secured = Secured.create(workdir)
            with running(target, secured) as broker:
                ports = broker.ports
                yield (
                    {target_name: broker},
                    Workload(
                        broker.bootstrap,
                        1,
                        secured,
                        f"127.0.0.1:{ports['SSL']}",
                        f"127.0.0.1:{ports['SASL_SSL']}",
                    ),
                )
        else:
            with running_cluster(target, brokers_n) as cluster:
                named = {f"{target_name}-{i}": b for i, b in cluster.brokers.items()}
                yield named, Workload(cluster.bootstrap, 3, None, None, None)


def soak(target_name: str, args: argparse.Namespace, workdir: Path) -> list[str]:
    """One target's soak; the problems found in its wirebroker brokers."""
    log.info("%s: starting %d broker(s)", target_name, args.brokers)
    with brokers(target_name, args.brokers, workdir) as (running_brokers, workload):
        watches = {name: LogWatch(b.log_path) for name, b in running_brokers.items()}
        for watch in watches.values():
            watch.read()  # the start-up's lines are the start's, not the soak's
        workload.prepare()
        threads = [threading.Thread(target=loop, daemon=True) for loop in workload.loops()]
        for thread in threads:
            thread.start()
        samples: list[Sample] = []
        began = time.monotonic()
        end = began + args.minutes * 60
        try:
            while True:
                now = time.monotonic() - began
                for name, broker in running_brokers.items():
                    broker.check_alive()
                    samples.append(sample(name, broker, now))
                    watches[name].read()
                shown = " | ".join(
                    f"{s.broker} {s.rss_mib:.1f} MiB {s.fds} fds {s.threads} threads"
                    for s in samples[-len(running_brokers) :]
                )
                log.info("%5.1f min  %s  ·  %s", now / 60, shown, workload.counts.line())
                if time.monotonic() >= end:
                    break
                time.sleep(min(args.sample_seconds, max(0.0, end - time.monotonic())))
        finally:
            workload.stop.set()
            for thread in threads:
                thread.join(60)
        for watch in watches.values():
            watch.read()  # what the clients' last requests and closes made it log
        write_csv(args.out / f"soak-{target_name}.csv", samples)
        return verdict(target_name, args, samples, watches, workload.counts)


def verdict(
    target_name: str,
    args: argparse.Namespace,
    samples: Sequence[Sample],
    watches: dict[str, LogWatch],
    counts: Counts,
) -> list[str]:
    problems = [f"{target_name}: client error: {e}" for e in counts.errors[:10]]
    for name, watch in watches.items():
        by_broker = [s for s in samples if s.broker == name]
        first = [s for s in by_broker if s.seconds >= args.warm_up_minutes * 60][:1]
        log.info(
            "%s: %.1f → %.1f MiB after the warm-up, %d → %d fds, %d → %d threads",
            name,
            first[0].rss_mib if first else 0,
            by_broker[-1].rss_mib,
            first[0].fds if first else 0,
            by_broker[-1].fds,
            first[0].threads if first else 0,
            by_broker[-1].threads,
        )
        if not target_name.startswith("wirebroker"):
            continue
        problems += [f"{name}: {p}" for p in judge(by_broker, args.warm_up_minutes * 60)]
        problems += [f"{name}: logged: {line}" for line in watch.lines[:10]]
    return problems


def write_csv(path: Path, samples: Sequence[Sample]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["seconds", "broker", "rss_mib", "fds", "threads"])
        for s in samples:
            out.writerow([f"{s.seconds:.1f}", s.broker, f"{s.rss_mib:.2f}", s.fds, s.threads])
    log.info("samples in %s", path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description="Run brokers under steady load plus topic, group and connection churn for "
        "many minutes; fail if a wirebroker broker's memory, descriptors or threads grow, a "
        "client sees an error, or the broker logs an ERROR.",
        epilog="examples:\n"
        "  make soak                                   one broker, 20 minutes\n"
        "  make soak SOAK='--brokers 3 --minutes 30'  a 3-broker cluster (RF 3, min ISR 2)\n"
        "  python -m bench.soak --targets kafka,wirebroker --minutes 15   Kafka 3.9 beside it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="length of each soak (20)")
    parser.add_argument(
        "--warm-up-minutes",
        type=float,
        default=None,
        help="samples before this are not judged (default: a quarter of --minutes, at least 2)",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        default=1,
        help="1: one broker with SSL and SASL_SSL listeners too; 3: a cluster (PLAINTEXT)",
    )
    parser.add_argument(
        "--targets",
        default="wirebroker",
        help=f"comma-separated, run one after the other (of {', '.join(TARGET_NAMES)}; "
        "default wirebroker)",
    )
    parser.add_argument(
        "--sample-seconds", type=float, default=10.0, help="seconds between samples (10)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("build/soak"), help="folder for the samples' CSV"
    )
    args = parser.parse_args(argv)
    if args.warm_up_minutes is None:
        args.warm_up_minutes = max(2.0, args.minutes / 4)
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(args.targets) - set(TARGET_NAMES)
    if unknown or not args.targets:
        parser.error(f"--targets are of {', '.join(TARGET_NAMES)}")
    return args


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)  # unwinds the context managers: brokers and ZooKeeper stop


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(
        level=logging.INFO,
        format="[soak %(asctime)s] %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="wb-soak-") as scratch:
        try:
            for name in args.targets:
                try:
                    problems += soak(name, args, Path(scratch))
                except BrokerError as e:  # exited, or did not start
                    problems.append(f"{name}: {e}")
        except KeyboardInterrupt:
            log.error("interrupted: every broker stopped")
            return 130
    for problem in problems:
        log.error("%s", problem)
    log.info("soak %s", "FAILED" if problems else "passed: nothing grew, nothing failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
