"""Command line of the side-by-side benchmark: ``python -m bench.side_by_side --help``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_request_path import cycle_us
from bench.side_by_side import report, workloads
from bench.side_by_side.targets import (
    DEFAULT_TARGETS,
    REPO_ROOT,
    TARGET_NAMES,
    target_session,
)

ROWS_HELP = """\
rows (ratio wirebroker/Kafka, goal):
  1  produce 1 KiB records, acks=1, batch 64 KiB, linger 5 ms: MB/s (>= 1.0)
  2  the Kafka paper: 200-byte records, 1 and 50 per batch, acks=0: records/s
     (>= 1.0, and above the paper's 50,000 and 400,000 records/s)
  3  consume a 1 GiB topic from its start: MB/s (>= 1.0)
  4  end-to-end latency at 5,000 records/s, p50 and p99 (<= 1.0)
  5  idempotent producer, acks=all: MB/s (>= 1.0)
  6  broker RSS idle and under row 1 (<= 0.2)           [runs row 1]
  7  process spawn to first acknowledged produce (<= 0.1)
  8  broker CPU seconds per GiB produced / consumed (<= 1.0)  [runs rows 1 and 3]
  9  10, 100, 1,000 partitions written round-robin: MB/s and RSS
 10  3-broker cluster: produce 1 KiB, acks=all, RF 3, min.insync.replicas=2: MB/s (>= 1.0)
     and p99 send-to-ack latency (<= 1.0)
 11  3-broker cluster: kill -9 a partition's leader under a producer; seconds until a
     produce succeeds through the new leader (<= 1.0; bounded by the ZooKeeper session
     timeout, 6 s on both; also given from the session expiry on)
 12  Metadata round trip p99 and max while the broker flushes a 1 GiB rolled segment
     and compacts a 512 MiB topic (<= 1.0)
 13  over an SSL listener: produce 1 KiB, acks=1, and consume 512 MiB from the start:
     MB/s (>= 1.0; neither broker can use sendfile on TLS)
 14  SASL_SSL (PLAIN) connections set up per second: TLS handshake, ApiVersions,
     SaslHandshake, SaslAuthenticate, close; 4 client processes at once (>= 1.0), and
     the broker's CPU per connection (<= 1.0)
 15  transactional produce, 1 KiB records, acks=all, each transaction committed after
     100 ms (ProducerPerformance --transactional-id --transaction-duration-ms 100): MB/s
     (>= 1.0)
 16  consume read_committed from the start of 1 GiB written in 100 ms transactions:
     MB/s (>= 1.0)
 17  a broker with two log dirs moves a 1 GiB partition's replica from one to the other
     (AlterReplicaLogDirs), back and forth, one move a repeat: MB/s (>= 1.0)

Rows 1, 2, 3, 5, 10, 13, 15 and 16 run both Java (ProducerPerformance / ConsumerPerformance) and
librdkafka (confluent-kafka in its own process) load generators. Rows 10 and 11 start one
ZooKeeper and three brokers of each kind; rows 13 and 14 a broker with SSL and SASL_SSL
listeners (a PKCS12 keystore made for the run); row 17 a broker with two log dirs. Progress
goes to stderr.
"""


def _rows(text: str) -> set[int]:
    rows = {int(r) for r in text.split(",") if r.strip()}
    unknown = rows - set(workloads.ALL_ROWS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown rows {sorted(unknown)}; rows are 1-{max(workloads.ALL_ROWS)}"
        )
    return rows


def _targets(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = set(names) - set(TARGET_NAMES)
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"targets are {', '.join(TARGET_NAMES)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.side_by_side",
        description="Measure wirebroker against real Apache Kafka 3.9 on this machine, with the "
        "same load generators, in one run; write BENCHMARKS.md and benchmarks.png.",
        epilog=ROWS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--rows",
        type=_rows,
        default=set(workloads.ALL_ROWS),
        help=f"comma-separated rows to run (default: all, 1-{max(workloads.ALL_ROWS)})",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repeats of each workload; figures are medians (default 3; 1 with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and 1 repeat: a smoke test of the harness, not figures",
    )
    parser.add_argument(
        "--targets",
        type=_targets,
        default=list(DEFAULT_TARGETS),
        help="comma-separated, in run order (default: kafka,wirebroker; wirebroker-metrics is "
        "wirebroker with its Prometheus endpoint on, for the cost of metrics: "
        "--targets wirebroker,wirebroker-metrics --rows 1)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "docs",
        help="folder for BENCHMARKS.md and benchmarks.png (default: docs/)",
    )
    parser.add_argument("--verbose", action="store_true", help="also log failing runs' tracebacks")
    args = parser.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    sys.exit(128 + signum)  # unwinds the context managers: brokers and ZooKeeper stop


#: Cycles of each of the reference's three runs (~0.2-1 s each on this machine).
REFERENCE_CYCLES = 2000


def reference_cycle_us() -> float:
    """Row 4's request path in process (`bench.bench_request_path`), µs per Produce + Fetch
    cycle, best of three, in the report: hosts differ (the same commit has cost three times
    the CPU per byte from one day to the next on this VM, which neither the load average nor
    a small arithmetic loop showed), and this is the broker's own work without sockets."""
    broker_log = logging.getLogger("wirebroker")  # its brokers' start-up lines
    level = broker_log.level
    broker_log.setLevel(logging.WARNING)
    try:
        return min(cycle_us(REFERENCE_CYCLES) for _ in range(3))
    finally:
        broker_log.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="[bench %(asctime)s] %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.WARNING)  # row 11's registration watch
    logging.getLogger("kafka").setLevel(logging.WARNING)  # row 17's admin (kafka-python)
    log = logging.getLogger("bench")
    sizes = workloads.QUICK if args.quick else workloads.Sizes()
    catalogue = workloads.figures(sizes)
    results = workloads.Results()
    started, began = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.monotonic()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    reference_us = reference_cycle_us()
    log.info(
        "host reference: row 4's request path in process, %.0f µs per Produce + Fetch cycle"
        " (the report's first line; the same code has taken 64-84 µs and 265-330 µs on"
        " this VM's hosts)",
        reference_us,
    )
    broker_commands: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="wb-side-by-side-") as scratch:
        ctx = workloads.Context(sizes, args.repeats, results, Path(scratch))
        for name in args.targets:
            log.info(
                "%-10s | rows %s, %d repeat(s)",
                name,
                ",".join(map(str, sorted(args.rows))),
                args.repeats,
            )
            try:
                with target_session(name, Path(scratch) / name) as target:
                    workloads.run_target(ctx, target, args.rows)
                    broker_commands[name] = target.describe()
            except KeyboardInterrupt:  # brokers, ZooKeeper and load processes are stopped by now
                log.error("interrupted: every broker and ZooKeeper stopped; no report written")
                return 130
    info = report.RunInfo(
        repeats=args.repeats,
        targets=args.targets,
        quick=args.quick,
        started=started,
        minutes=(time.monotonic() - began) / 60,
        load_before=load_before,
        reference_us=reference_us,
    )
    markdown, chart = args.out / "BENCHMARKS.md", args.out / "benchmarks.png"
    generated = report.render(catalogue, results, info, broker_commands, chart.name, ctx.workdir)
    report.write_markdown(markdown, generated)
    report.write_chart(chart, catalogue, results)
    log.info("wrote %s and %s in %.1f min", markdown, chart, info.minutes)
    for error in results.errors:
        log.error("failed: %s", error)
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
