"""`python -m pipeline` (`make pipeline`): the log-aggregation pipeline end to end.

Uses the broker on --bootstrap (default 127.0.0.1:9092) or, if nothing answers there, starts
an embedded wirebroker; feeds generated log events into the source topic on a thread; runs the
Spark job (checkpointed, so running it again continues where it stopped); and prints each
aggregate as it arrives on the sink topic. Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

EPILOG = """\
Each aggregate is printed when its minute is final: once the watermark (the newest event
time minus --watermark-delay) passes the end of the window. Events are generated with
event times that advance --speedup times faster than the clock, so minutes close quickly.

The checkpoint (--checkpoint) keeps the source offsets and the open windows: stop with
Ctrl-C and run again to continue where it stopped. The embedded broker keeps its data in
.cache/pipeline/broker, next to its checkpoint; `rm -rf .cache/pipeline` starts over.
Needs java (17+) and the connector jars: `make jars` fetches them into .cache/jars/spark/.
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m pipeline",
        description="Log aggregation with Spark Structured Streaming over wirebroker: "
        "generated application log events -> Kafka source -> per service, level and "
        "minute counts (watermarked) -> Kafka sink, printed as they arrive.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--bootstrap",
        default="127.0.0.1:9092",
        help="broker to use (default: %(default)s); an embedded broker is started if nothing answers there",
    )
    ap.add_argument(
        "--source-topic", default="app-logs", help="events topic (default: %(default)s)"
    )
    ap.add_argument(
        "--sink-topic",
        default="app-logs-per-minute",
        help="aggregates topic (default: %(default)s)",
    )
    ap.add_argument(
        "--checkpoint",
        default=None,
        help="Spark checkpoint folder (default: .cache/pipeline/checkpoint-embedded with the "
        "embedded broker, .cache/pipeline/checkpoint-<host>-<port> with another one)",
    )
    ap.add_argument(
        "--rate",
        type=float,
        default=50.0,
        help="events per second fed (default: %(default)s; 0 feeds none)",
    )
    ap.add_argument(
        "--speedup",
        type=float,
        default=20.0,
        help="event-time seconds per wall-clock second (default: %(default)s)",
    )
    ap.add_argument(
        "--watermark-delay",
        default="30 seconds",
        help="how late an event may be (default: %(default)s)",
    )
    ap.add_argument(
        "--trigger", default="2 seconds", help="micro-batch interval (default: %(default)s)"
    )
    ap.add_argument(
        "--duration",
        type=float,
        default=0.0,
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    return ap.parse_args(argv)


def answers(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def broker_for(bootstrap: str) -> Iterator[str]:
    if answers(bootstrap):
        print(f"pipeline: using the broker on {bootstrap}", file=sys.stderr)
        yield bootstrap
        return
    from wirebroker.embed import run_broker

    data_dir = Path(".cache/pipeline/broker").resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    with run_broker(log_dirs=str(data_dir)) as embedded:
        print(
            f"pipeline: nothing on {bootstrap}; started an embedded broker on {embedded}"
            " (data in .cache/pipeline/broker)",
            file=sys.stderr,
        )
        yield embedded


def newest_event_time(bootstrap: str, topic: str) -> int:
    """The newest record timestamp in `topic` (0 if empty): a rerun's events start after it."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-feeder"})
    newest = 0
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, high - 1)])
            msg = consumer.poll(10)
            if msg is not None and not msg.error():
                newest = max(newest, msg.timestamp()[1])
    finally:
        consumer.close()
    return newest


def feed(bootstrap: str, topic: str, rate: float, speedup: float, stop: threading.Event) -> None:
    """Produce events at `rate` per second until `stop`; event time runs `speedup` times fast.

    Event time starts at the later of now and the topic's newest event, so a rerun (same
    checkpoint) feeds events the job's watermark still accepts.
    """
    from pipeline import events

    producer = events.producer(bootstrap)
    start = time.time()
    start_ms = max(int(start * 1000), newest_event_time(bootstrap, topic) + 1)
    generated = events.generate(sys.maxsize, start_ms=start_ms, spacing_ms=0, seed=None)
    sent = 0
    while not stop.is_set():
        now = time.time()
        while sent < int((now - start) * rate):
            event = next(generated)
            event["ts"] = start_ms + int((now - start) * speedup * 1000)
            value = json.dumps(event).encode()
            producer.produce(topic, value, event["service"].encode(), timestamp=event["ts"])
            sent += 1
        producer.poll(0)
        stop.wait(0.05)
    producer.flush(10)


def print_aggregates(bootstrap: str, topic: str, stop: threading.Event) -> None:
    from confluent_kafka import Consumer

    from pipeline.job import decode_aggregate

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pipeline-printer",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            row = decode_aggregate(msg.value() or b"{}")
            print(
                f"{row['window_start']}  {row['service']:<9} {row['level']:<5} {row['count']:>6}",
                flush=True,
            )
    finally:
        consumer.close()


def ensure_topics(bootstrap: str, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics
    new = [NewTopic(t, 2, 1) for t in topics if t not in existing]
    for future in admin.create_topics(new).values() if new else []:
        future.result(30)


def default_checkpoint(asked: str, used: str) -> str:
    """One checkpoint per broker: offsets in a checkpoint only make sense on their broker."""
    if asked != used:
        return ".cache/pipeline/checkpoint-embedded"
    return ".cache/pipeline/checkpoint-" + used.replace(":", "-")


def wait_until_stopped(query: StreamingQuery, stop: threading.Event, duration: float) -> None:
    """Until Ctrl-C (`stop`), the end of `duration` seconds (if > 0), or the query ends."""
    deadline = time.monotonic() + duration if duration > 0 else None
    while not stop.is_set() and query.isActive:
        if deadline is not None and time.monotonic() >= deadline:
            break
        stop.wait(0.5)
    if stop.is_set():
        print("pipeline: stopping", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pipeline import job
    from pipeline.spark import SparkUnavailable, build_session

    try:
        spark = build_session()
    except SparkUnavailable as e:
        print(f"pipeline: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    # Our own SIGINT handler (pyspark's raises KeyboardInterrupt inside whatever py4j call is
    # running): Ctrl-C only sets `stop`, and the query is then stopped between micro-batches.
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads: list[threading.Thread] = []
    try:
        with broker_for(args.bootstrap) as bootstrap:
            ensure_topics(bootstrap, args.source_topic, args.sink_topic)
            if args.rate > 0:
                threads.append(
                    threading.Thread(
                        target=feed,
                        args=(bootstrap, args.source_topic, args.rate, args.speedup, stop),
                        daemon=True,
                    )
                )
            threads.append(
                threading.Thread(
                    target=print_aggregates, args=(bootstrap, args.sink_topic, stop), daemon=True
                )
            )
            for t in threads:
                t.start()
            checkpoint = Path(args.checkpoint or default_checkpoint(args.bootstrap, bootstrap))
            checkpoint.mkdir(parents=True, exist_ok=True)
            query = job.start_job(
                spark,
                bootstrap,
                args.source_topic,
                args.sink_topic,
                str(checkpoint.resolve()),
                processing_time=args.trigger,
                watermark_delay=args.watermark_delay,
            )
            print(
                f"pipeline: {args.source_topic} -> {args.sink_topic}; window start, service, level, count (Ctrl-C stops)",
                file=sys.stderr,
            )
            try:
                wait_until_stopped(query, stop, args.duration)
            finally:
                stop.set()
                query.stop()
                for t in threads:
                    t.join(10)
            error = query.exception()
            if error is not None:
                print(f"pipeline: the query failed: {error}", file=sys.stderr)
                return 1
    finally:
        stop.set()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
