"""What the metrics cost: the broker's CPU per record with the endpoint on and off, back to back.

    .venv/bin/python bench/bench_metrics.py [--records N] [--rounds R] [--scrape-interval S]

Each round starts two fresh `wirebroker serve` processes one after the other (which goes first
alternates): one with `wirebroker.metrics.listener` (requests counted and timed, /metrics
served) and one without (nothing counted). librdkafka, in a process of its own, produces
`--records` records of 1 KiB to a fresh one-partition topic with row 1's producer settings
(acks=1, 64 KiB batches, linger 5 ms: `bench/side_by_side`); with the endpoint on, a scraper
reads /metrics every `--scrape-interval` seconds meanwhile (Prometheus scrapes every 15 s by
default; 1 s here, so that scraping is costed generously). The figure is the broker process's
CPU time (user + system, from /proc) per record, the measure least disturbed by other load on
a shared machine; the load average before each round is printed with it. The result is the
median of each mode and their ratio, off/on: the share of its throughput a CPU-bound broker
keeps with metrics on (the issue's goal is at least 0.97).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.side_by_side import rdkafka_load  # noqa: E402
from bench.side_by_side.targets import REPO_ROOT, Broker, free_port  # noqa: E402
from bench.side_by_side.workloads import ACKS_1, KiB  # noqa: E402


def broker(base: Path, metrics: bool) -> Broker:
    port = free_port()
    argv = [sys.executable, "-m", "wirebroker", "serve", "--log-dirs", str(base / "data")]
    argv += ["--listeners", f"PLAINTEXT://127.0.0.1:{port}"]
    if metrics:
        argv += ["--override", "wirebroker.metrics.listener=127.0.0.1:0"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return Broker("wirebroker", argv, port, base / "wirebroker.log", env=env)


def metrics_url(b: Broker) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in b.log_path.read_text().splitlines():
            if "metrics endpoint on " in line:
                return line.rsplit(" ", 1)[1]
        time.sleep(0.05)
    raise RuntimeError(f"no metrics endpoint in {b.log_path}")


def scrape_every(url: str, interval: float, stop: threading.Event) -> list[int]:
    """Scrape `url` every `interval` s until `stop`; the sizes of the answers."""
    sizes = []
    while not stop.wait(interval):
        with urllib.request.urlopen(url, timeout=10) as response:
            sizes.append(len(response.read()))
    return sizes


def cpu_us_per_record(metrics: bool, args: argparse.Namespace) -> tuple[float, float, int]:
    """(broker CPU us per record, records/s, scrapes) of one run."""
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        b = broker(Path(tmp), metrics)
        b.spawn()
        try:
            b.wait_ready()
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            admin.create_topics([NewTopic("bench", 1, 1)])["bench"].result(30)
            stop = threading.Event()
            scrapes: list[int] = []
            scraper = None
            if metrics:
                url = metrics_url(b)
                scraper = threading.Thread(
                    target=lambda: scrapes.extend(scrape_every(url, args.scrape_interval, stop))
                )
                scraper.start()
            cpu = b.cpu_seconds()
            try:
                run = rdkafka_load.produce(
                    b.bootstrap,
                    "bench",
                    records=args.records,
                    record_size=KiB,
                    config=ACKS_1["rdkafka"],
                    timeout=600,
                )
            finally:
                stop.set()
                if scraper is not None:
                    scraper.join()
            used = b.cpu_seconds() - cpu
        finally:
            b.stop()
    return used / args.records * 1e6, run.figures["records_per_s"], len(scrapes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    args = parser.parse_args()
    figures: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for metrics in (True, False) if r % 2 == 0 else (False, True):
            load = os.getloadavg()[0]
            us, rate, scrapes = cpu_us_per_record(metrics, args)
            figures[metrics].append(us)
            mode = f"on ({scrapes} scrapes)" if metrics else "off"
            print(
                f"round {r + 1} metrics {mode:<16} {us:6.2f} CPU us/record, "
                f"{rate:9.0f} records/s, load average {load:.1f}",
                flush=True,
            )
    on, off = statistics.median(figures[True]), statistics.median(figures[False])
    print(f"median: on {on:.2f} CPU us/record, off {off:.2f}; off/on {off / on:.3f}")


if __name__ == "__main__":
    main()
