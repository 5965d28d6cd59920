"""Broker benchmark with confluent-kafka (librdkafka) as the load generator.

    make bench-broker

Starts a real broker process on a temporary data dir and measures, on this machine:
produce of 1 KiB records with acks=1 (MB/s), consume of what was produced (MB/s), the broker's
resident memory idle and after the load, and start-to-ready time. Figures are medians of
several runs; they go to docs/broker.md by hand.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.broker_process import BrokerProcess  # noqa: E402

RECORD = b"x" * 1024


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def produce(bootstrap: str, topic: str, count: int) -> float:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 65536,
            "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, RECORD)
                break
            except BufferError:
                p.poll(0.01)
    p.flush()
    elapsed = time.perf_counter() - start
    return count * len(RECORD) / elapsed / 1e6


def consume(bootstrap: str, topic: str, count: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    while got < count:
        batch = c.consume(num_messages=10_000, timeout=5)
        if not batch:
            raise RuntimeError(f"consumed only {got} of {count}")
        got += len(batch)
    elapsed = time.perf_counter() - start
    c.close()
    return got * len(RECORD) / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000, help="records per run")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    produce_rates, consume_rates, ready_ms, rss_after = [], [], [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as data:
            broker = BrokerProcess(Path(data))
            t0 = time.perf_counter()
            broker.start()
            ready_ms.append((time.perf_counter() - t0) * 1000)
            try:
                assert broker.proc is not None
                idle = rss_mib(broker.proc.pid)
                admin = AdminClient({"bootstrap.servers": broker.bootstrap})
                admin.create_topics([NewTopic("bench", 1, 1)])["bench"].result(10)
                produce_rates.append(produce(broker.bootstrap, "bench", args.records))
                consume_rates.append(consume(broker.bootstrap, "bench", args.records))
                rss_after.append(rss_mib(broker.proc.pid))
                print(
                    f"run {run + 1}: produce {produce_rates[-1]:.0f} MB/s, consume "
                    f"{consume_rates[-1]:.0f} MB/s, RSS idle {idle:.0f} MiB, after {rss_after[-1]:.0f} MiB",
                    flush=True,
                )
            finally:
                broker.stop()
    print("broker benchmark (confluent-kafka, 1 KiB records, acks=1, one partition)")
    print(f"  produce            : {statistics.median(produce_rates):8.0f} MB/s   (goal 100)")
    print(f"  consume            : {statistics.median(consume_rates):8.0f} MB/s   (goal 300)")
    print(f"  RSS after the load : {statistics.median(rss_after):8.0f} MiB")
    print(f"  start to ready     : {statistics.median(ready_ms):8.0f} ms (process start included)")


if __name__ == "__main__":
    main()
