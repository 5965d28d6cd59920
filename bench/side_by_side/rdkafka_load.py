"""The librdkafka (confluent-kafka) load generators, each in its own Python process.

The harness calls ``produce``, ``consume`` and ``end_to_end_latency``; each starts
``python -m bench.side_by_side.rdkafka_load MODE ...`` (this module's ``main``), which does
the work with nothing else in the process and prints one JSON line with its figures. So
the client's Python loop never shares a GIL with the harness's samplers, and the printed
argv is the exact command the report shows.

Modes:

- ``produce``: ``--records`` records of ``--record-size`` bytes as fast as the client goes,
  timed from the first ``produce()`` to the end of ``flush()`` (with ``--wait-stored``, to
  when partition 0's end offset reaches ``--records``: with acks=0 ``flush()`` returns
  while the last records may still sit in socket buffers); with ``--partitions N`` the
  records go round-robin over partitions 0..N-1, else to the client's partitioner; with
  ``--keys N`` record i has the key ``key<i mod N>`` (a topic to compact), else no key; with
  ``--transaction-ms T``, transactional (``transactional.id`` ``bench-<topic>``): a
  transaction is committed once it has been open T ms, the last when every record is sent.
- ``consume``: ``--records`` records from the start of partition 0, timed from the first
  record received, as ConsumerPerformance's fetch rate leaves out its start: the client's
  connection, metadata and offset query (about 0.5 s, its offset query timer) are not the
  broker's serving speed (``--config`` may set e.g. ``isolation.level``).
- ``latency-consume`` / ``latency-produce``: end-to-end latency. The producer sends at a
  fixed ``--rate`` for ``--seconds``, each record's value starting with the
  ``CLOCK_MONOTONIC`` nanoseconds of its ``produce()`` call (one clock for all processes on
  the machine); the consumer, already fetching, takes receive time minus that stamp for
  each record after the first ``--warmup`` seconds and prints p50 and p99.
- ``failover``: one record to ``--partition`` every ``--interval-ms`` (each value starting
  with its ``CLOCK_MONOTONIC`` send time); prints ``ready`` once ``--warmup-acks`` records
  are acknowledged, then reads ``killed T_KILL T_DEAD`` (monotonic seconds: just before the
  SIGKILL of the partition's leader, and once it was reaped) on stdin. It stops at the first
  acknowledgement of a record sent after T_DEAD, which only a new leader can give, and
  prints ``failover_s`` (that acknowledgement minus T_KILL), ``gap_s`` (minus the last
  acknowledgement before T_KILL) and ``first_ack_at`` (its monotonic time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE = "bench.side_by_side.rdkafka_load"
STAMP = struct.Struct(">q")


class RdkafkaLoadError(RuntimeError):
    """A librdkafka load process failed."""


@dataclass(frozen=True)
class Run:
    """One run's figures and the argv that produced them."""

    figures: dict[str, float]
    argv: list[str]


# --------------------------------------------------------------------------- harness side


def _argv(mode: str, bootstrap: str, topic: str, options: Mapping[str, object]) -> list[str]:
    argv = [sys.executable, "-m", MODULE, mode, "--bootstrap", bootstrap, "--topic", topic]
    for key, value in options.items():
        if key == "config":
            assert isinstance(value, Mapping)
            for k, v in value.items():
                argv += ["--config", f"{k}={v}"]
        else:
            argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def _result(proc: subprocess.Popen[str], argv: list[str], timeout: float) -> Run:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise RdkafkaLoadError(f"{' '.join(argv[2:4])} timed out after {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise RdkafkaLoadError(f"{' '.join(argv[2:4])} exited {proc.returncode}:\n{err[-3000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise RdkafkaLoadError(f"{' '.join(argv[2:4])} printed no figures:\n{out}\n{err[-3000:]}")
    return Run(json.loads(lines[-1]), argv)


@contextlib.contextmanager
def _spawn(argv: list[str], stdin: int = subprocess.DEVNULL) -> Iterator[subprocess.Popen[str]]:
    """The load process, killed if the harness leaves the block on an error or Ctrl-C."""
    with subprocess.Popen(
        argv,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=REPO_ROOT,
    ) as proc:
        try:
            yield proc
        except BaseException:
            proc.kill()
            raise


def produce(
    bootstrap: str,
    topic: str,
    *,
    records: int,
    record_size: int,
    config: Mapping[str, object],
    timeout: float,
    partitions: int | None = None,
    wait_stored: bool = False,
    latency: bool = False,
    keys: int | None = None,
    transaction_ms: int | None = None,
) -> Run:
    """Figures ``records_per_s`` and ``bytes_per_s`` of one produce run (``latency``: and
    ``p50_ms``, ``p99_ms`` of the delivery reports)."""
    options: dict[str, object] = {"records": records, "record_size": record_size}
    if partitions is not None:
        options["partitions"] = partitions
    if keys is not None:
        options["keys"] = keys
    if transaction_ms is not None:
        options["transaction_ms"] = transaction_ms
    argv = _argv("produce", bootstrap, topic, {**options, "config": config})
    if wait_stored:
        argv.append("--wait-stored")
    if latency:
        argv.append("--latency")
    with _spawn(argv) as proc:
        return _result(proc, argv, timeout)


def consume(
    bootstrap: str,
    topic: str,
    *,
    records: int,
    timeout: float,
    config: Mapping[str, object] | None = None,
) -> Run:
    """Figures ``records_per_s`` and ``bytes_per_s`` of reading ``records`` from the start
    (``config``: more client settings, e.g. TLS)."""
    argv = _argv("consume", bootstrap, topic, {"records": records, "config": config or {}})
    with _spawn(argv) as proc:
        return _result(proc, argv, timeout)


def end_to_end_latency(
    bootstrap: str,
    topic: str,
    *,
    rate: int,
    seconds: float,
    record_size: int,
    warmup: float,
    producer_config: Mapping[str, object],
) -> tuple[Run, list[str]]:
    """Figures ``p50_ms`` and ``p99_ms``; also the producer's argv (the run has the consumer's)."""
    records = int(rate * seconds)
    consumer_argv = _argv(
        "latency-consume",
        bootstrap,
        topic,
        {"records": records, "warmup_records": int(rate * warmup)},
    )
    producer_argv = _argv(
        "latency-produce",
        bootstrap,
        topic,
        {"rate": rate, "seconds": seconds, "record_size": record_size, "config": producer_config},
    )
    with _spawn(consumer_argv) as consumer:
        assert consumer.stdout is not None
        line = consumer.stdout.readline()
        if line.strip() != "ready":
            consumer.kill()
            _, err = consumer.communicate()
            raise RdkafkaLoadError(f"latency consumer did not start: {line!r}\n{err[-3000:]}")
        with _spawn(producer_argv) as producer:
            _result(producer, producer_argv, seconds * 3 + 60)
        return _result(consumer, consumer_argv, 60), producer_argv


def failover(
    bootstrap: str,
    topic: str,
    *,
    partition: int,
    interval_ms: float,
    config: Mapping[str, object],
    kill: Callable[[], tuple[float, float]],
    timeout: float,
) -> Run:
    """Figures ``failover_s`` and ``gap_s``: ``kill`` runs once the producer is acknowledged.

    ``kill`` SIGKILLs the partition's leader and returns ``time.monotonic()`` just before the
    signal and once the process was reaped.
    """
    options = {"partition": partition, "interval_ms": interval_ms, "seconds": timeout}
    argv = _argv("failover", bootstrap, topic, {**options, "config": config})
    with _spawn(argv, stdin=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            _, err = proc.communicate()
            raise RdkafkaLoadError(f"failover producer did not start: {line!r}\n{err[-3000:]}")
        killed_at, dead_at = kill()
        proc.stdin.write(f"killed {killed_at!r} {dead_at!r}\n")
        proc.stdin.flush()
        return _result(proc, argv, timeout + 30)


# --------------------------------------------------------------------------- child side


def _config(pairs: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs)


def _produce(args: argparse.Namespace) -> dict[str, float]:
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []
    latencies: list[float] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        elif args.latency:
            latencies.append(msg.latency())

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "delivery.report.only.error": not args.latency,
        "on_delivery": on_delivery,
        **_config(args.config),
    }
    transaction_s = args.transaction_ms / 1000 if args.transaction_ms else None
    if transaction_s is not None:
        config["transactional.id"] = f"bench-{args.topic}"
    p = Producer(config)
    value = b"x" * args.record_size
    topic, n, keys = args.topic, args.partitions, args.keys
    stored = _end_offset_reader(args) if args.wait_stored else None
    if transaction_s is not None:
        p.init_transactions(60)
    start = time.perf_counter()
    if transaction_s is not None:
        p.begin_transaction()
        opened = start
    for i in range(args.records):
        if transaction_s is not None and time.perf_counter() - opened >= transaction_s:
            p.commit_transaction(300)
            p.begin_transaction()
            opened = time.perf_counter()
        while True:
            try:
                if n:
                    p.produce(topic, value, partition=i % n)
                elif keys:
                    p.produce(topic, value, b"key%d" % (i % keys))
                else:
                    p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.005)
    if transaction_s is not None:
        p.commit_transaction(300)
    if p.flush(300) != 0:
        raise KafkaException(f"{len(p)} records still undelivered after flush")
    while stored is not None and stored() < args.records:
        time.sleep(0.002)
    elapsed = time.perf_counter() - start
    if errors:
        raise KafkaException(f"{len(errors)} records failed, e.g. {errors[0]}")
    figures = {
        "records_per_s": args.records / elapsed,
        "bytes_per_s": args.records * args.record_size / elapsed,
    }
    if args.latency:
        latencies.sort()
        for name, q in (("p50_ms", 0.50), ("p99_ms", 0.99)):
            figures[name] = latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1e3
    return figures


def _end_offset_reader(args: argparse.Namespace) -> Callable[[], int]:
    """A function returning partition 0's end offset, its connection already made."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench-rdkafka-stored"})
    partition = TopicPartition(args.topic, 0)
    c.get_watermark_offsets(partition, timeout=30)
    return lambda: int(c.get_watermark_offsets(partition, timeout=30)[1])


def _consumer(args: argparse.Namespace, group: str) -> Any:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # Once its fetch queue holds queued.max.messages.kbytes (64 MiB), librdkafka waits
            # this long before it fetches again: 1 s by default, which a read of 1 GiB hits
            # whenever the broker fills the queue faster than Python drains it, so the faster
            # broker was paused for whole seconds (2x between identical runs). 10 ms keeps the
            # queue bound and lets the figure be the client's and the broker's work.
            "fetch.queue.backoff.ms": 10,
            **_config(args.config),
        }
    )
    c.assign([TopicPartition(args.topic, 0, OFFSET_BEGINNING)])
    return c


def _consume(args: argparse.Namespace) -> dict[str, float]:
    c = _consumer(args, "bench-rdkafka-consume")
    got = 0
    start = 0.0
    timed = size_timed = 0  # records and bytes after the first: what the clock covers
    while got < args.records:
        # No more than what is left: consume() waits its whole timeout for a batch it cannot
        # fill, and the last 30 s wait was once most of row 3's figure. The first call takes
        # one record: it starts the clock.
        want = min(10_000, args.records - got) if got else 1
        batch = c.consume(num_messages=want, timeout=30)
        if not batch:
            raise RuntimeError(f"consumed only {got} of {args.records} records")
        n = 0
        for m in batch:
            if m.error():
                raise RuntimeError(str(m.error()))
            n += len(m)
        if got:
            timed += len(batch)
            size_timed += n
        else:
            start = time.perf_counter()
        got += len(batch)
    elapsed = time.perf_counter() - start
    c.close()
    if not timed:
        raise RuntimeError("one record is too few to time")
    return {"records_per_s": timed / elapsed, "bytes_per_s": size_timed / elapsed}


def _latency_consume(args: argparse.Namespace) -> dict[str, float]:
    from confluent_kafka import TopicPartition

    c = _consumer(args, "bench-rdkafka-latency")
    c.get_watermark_offsets(TopicPartition(args.topic, 0), timeout=30)  # connected, leader known
    c.poll(0.1)
    print("ready", flush=True)
    latencies: list[int] = []
    got = 0
    while got < args.records:
        # One record per poll: a batch call would hold early records until the batch fills.
        m = c.poll(30)
        now = time.monotonic_ns()
        if m is None:
            raise RuntimeError(f"received only {got} of {args.records} records")
        if m.error():
            raise RuntimeError(str(m.error()))
        got += 1
        if got > args.warmup_records:
            latencies.append(now - STAMP.unpack_from(m.value())[0])
    c.close()
    latencies.sort()

    def quantile(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e6

    return {"p50_ms": quantile(0.50), "p99_ms": quantile(0.99), "samples": len(latencies)}


def _latency_produce(args: argparse.Namespace) -> dict[str, float]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": args.bootstrap, **_config(args.config)})
    padding = b"x" * (args.record_size - STAMP.size)
    total = int(args.rate * args.seconds)
    tick = 0.001  # send every millisecond what the rate owes by then
    start = time.monotonic()
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - start) * args.rate) + 1)
        while sent < due:
            p.produce(args.topic, STAMP.pack(time.monotonic_ns()) + padding)
            sent += 1
        p.poll(0)
        time.sleep(max(0.0, start + sent / args.rate - time.monotonic(), tick / 10))
    p.flush(60)
    return {"records": sent, "seconds": time.monotonic() - start}


def _failover(args: argparse.Namespace) -> dict[str, float]:
    import threading

    from confluent_kafka import Producer

    killed: list[float] = []  # T_KILL, T_DEAD once the harness has said
    got_kill = threading.Event()

    def read_kill() -> None:
        words = sys.stdin.readline().split()
        if len(words) == 3 and words[0] == "killed":
            killed.extend(map(float, words[1:]))
        got_kill.set()

    acks: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic seconds
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acks.append((STAMP.unpack_from(msg.value())[0] / 1e9, time.monotonic()))

    p = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "on_delivery": on_delivery,
            "error_cb": lambda _err: None,  # the dead leader's refused connections
            **_config(args.config),
        }
    )
    padding = b"x" * (args.record_size - STAMP.size)
    interval = args.interval_ms / 1000
    ready = False
    next_send = time.monotonic()
    deadline = next_send + args.seconds
    while True:
        now = time.monotonic()
        if now >= next_send:
            p.produce(
                args.topic, STAMP.pack(time.monotonic_ns()) + padding, partition=args.partition
            )
            next_send += interval
        p.poll(max(0.0, min(next_send - time.monotonic(), interval)))
        if not ready and len(acks) >= args.warmup_acks:
            print("ready", flush=True)
            threading.Thread(target=read_kill, daemon=True).start()
            ready = True
        if got_kill.is_set():
            if len(killed) != 2:
                raise RuntimeError("no kill times on stdin")
            after = [a for a in acks if a[0] > killed[1]]
            if after:
                break
        if time.monotonic() > deadline:
            raise RuntimeError(f"no acknowledgement within {args.seconds:.0f} s of the start")
    p.flush(10)
    first_after = min(acked for _, acked in after)
    before = [acked for _, acked in acks if acked < killed[0]]
    return {
        "failover_s": first_after - killed[0],
        "first_ack_at": first_after,
        "gap_s": first_after - max(before) if before else float("nan"),
        "acks": len(acks),
        "errors": len(errors),
    }


MODES = {
    "produce": _produce,
    "consume": _consume,
    "latency-consume": _latency_consume,
    "latency-produce": _latency_produce,
    "failover": _failover,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, default=0)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=0, help="produce round-robin over N")
    parser.add_argument("--keys", type=int, default=0, help="produce: keys key0..key<N-1>")
    parser.add_argument(
        "--transaction-ms", type=int, default=0, help="produce: in transactions of T ms"
    )
    parser.add_argument("--rate", type=int, default=5000, help="latency-produce: records/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency-produce: how long")
    parser.add_argument("--warmup-records", type=int, default=0, help="latency-consume: skip")
    parser.add_argument("--partition", type=int, default=0, help="failover: the partition")
    parser.add_argument("--interval-ms", type=float, default=5.0, help="failover: send period")
    parser.add_argument("--warmup-acks", type=int, default=20, help="failover: acks before ready")
    parser.add_argument("--config", action="append", default=[], help="client KEY=VALUE")
    parser.add_argument(
        "--latency", action="store_true", help="produce: also p50/p99 of delivery reports"
    )
    parser.add_argument(
        "--wait-stored",
        action="store_true",
        help="produce: stop the clock when partition 0 holds every record (for acks=0)",
    )
    args = parser.parse_args(argv)
    print(json.dumps(MODES[args.mode](args)), flush=True)


if __name__ == "__main__":
    main()
