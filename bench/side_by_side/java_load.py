"""Kafka's own load generators, run from the project's jars against either broker.

``org.apache.kafka.tools.ProducerPerformance`` and ``ConsumerPerformance`` (the classes
behind ``kafka-producer-perf-test.sh`` and ``kafka-consumer-perf-test.sh``) run in their
own JVM with the options those scripts give them (``-Xmx512M`` plus ``kafka-run-class.sh``'s
G1 settings) and log4j at WARN on stderr. Each run returns its figure and the exact argv, so
the report can show the command.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.side_by_side.targets import KAFKA_JVM_PERFORMANCE_OPTS
from compat.kafka_process import jars_dir, java_executable

PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"
TOOL_HEAP = "-Xmx512M"
"""The heap ``kafka-producer-perf-test.sh`` and ``kafka-consumer-perf-test.sh`` set."""

_TOOLS_LOG4J = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

# ProducerPerformance's summary: "N records sent, R records/sec (M MB/sec), A ms avg latency,
# X ms max latency, P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
_PRODUCER_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms 50th, ([\d.]+) ms 95th, "
    r"([\d.]+) ms 99th"
)


class LoadError(RuntimeError):
    """A load generator failed or printed something the harness cannot read."""


@dataclass(frozen=True)
class Run:
    """One load-generator run: records per second, bytes per second, and how it was run.

    ProducerPerformance also reports the latency from ``send()`` to the acknowledgement's
    callback over all records (``p50_ms``, ``p99_ms``); None for ConsumerPerformance.
    """

    records_per_s: float
    bytes_per_s: float
    argv: list[str]
    p50_ms: float | None = None
    p99_ms: float | None = None


def tool_argv(main_class: str, args: list[str], log4j: Path) -> list[str]:
    """The argv of a Kafka tool, as the ``bin/kafka-*-perf-test.sh`` scripts would build it."""
    return [
        java_executable(),
        TOOL_HEAP,
        *KAFKA_JVM_PERFORMANCE_OPTS,
        f"-Dlog4j.configuration=file:{log4j}",
        "-cp",
        str(jars_dir() / "*"),
        main_class,
        *args,
    ]


def tools_log4j(workdir: Path) -> Path:
    """Write the tools' log4j config (WARN, stderr) into ``workdir``."""
    path = workdir / "tools-log4j.properties"
    path.write_text(_TOOLS_LOG4J)
    return path


def _run(argv: list[str], timeout: float) -> str:
    try:
        result = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise LoadError(f"{argv[-1]}... timed out after {timeout:.0f} s") from exc
    if result.returncode != 0:
        raise LoadError(f"exit {result.returncode}:\n{result.stderr[-3000:]}")
    return result.stdout


def producer_performance(
    bootstrap: str,
    topic: str,
    *,
    records: int,
    record_size: int,
    props: Mapping[str, object],
    log4j: Path,
    timeout: float,
    transaction_ms: int | None = None,
) -> Run:
    """Produce ``records`` records of ``record_size`` bytes as fast as possible (no throttle);
    with ``transaction_ms``, in transactions of that long (``--transactional-id``)."""
    producer_props = [f"bootstrap.servers={bootstrap}", *(f"{k}={v}" for k, v in props.items())]
    args = ["--topic", topic, "--num-records", str(records), "--record-size", str(record_size)]
    args += ["--throughput", "-1"]
    if transaction_ms is not None:
        args += ["--transactional-id", f"bench-{topic}"]
        args += ["--transaction-duration-ms", str(transaction_ms)]
    args += ["--producer-props", *producer_props]
    argv = tool_argv(PRODUCER_PERFORMANCE, args, log4j)
    out = _run(argv, timeout)
    match = next((m for m in map(_PRODUCER_SUMMARY.search, out.splitlines()) if m), None)
    if match is None or int(match[1]) != records:
        raise LoadError(f"no summary for {records} records in ProducerPerformance output:\n{out}")
    rate = float(match[2])
    return Run(rate, rate * record_size, argv, p50_ms=float(match[3]), p99_ms=float(match[5]))


def consumer_performance(
    bootstrap: str,
    topic: str,
    *,
    messages: int,
    group: str,
    log4j: Path,
    timeout: float,
    props: Mapping[str, object] | None = None,
) -> Run:
    """Consume ``messages`` records from the start of ``topic``; the fetch-phase rate.

    ConsumerPerformance reports both a total rate and a fetch rate that leaves out the
    group join (``rebalance.time.ms``); the fetch rate is the broker's serving speed.
    ``props`` (e.g. TLS settings) go to its ``--consumer.config`` file, beside ``log4j``.
    """
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(messages)]
    args += ["--group", group, "--timeout", "30000"]
    if props:
        config = log4j.with_name("consumer.properties")
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        args += ["--consumer.config", str(config)]
    argv = tool_argv(CONSUMER_PERFORMANCE, args, log4j)
    out = _run(argv, timeout)
    lines = [line for line in out.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if line.startswith("start.time")), None)
    if header_at is None or header_at + 1 >= len(lines):
        raise LoadError(f"no stats in ConsumerPerformance output:\n{out}")
    header = [h.strip() for h in lines[header_at].split(",")]
    values = dict(zip(header, (v.strip() for v in lines[header_at + 1].split(",")), strict=True))
    consumed = int(values["data.consumed.in.nMsg"])
    if consumed < messages:
        raise LoadError(f"ConsumerPerformance read {consumed} of {messages} records:\n{out}")
    fetch_seconds = float(values["fetch.time.ms"]) / 1000
    mebibytes = float(values["data.consumed.in.MB"])
    return Run(consumed / fetch_seconds, mebibytes * (1 << 20) / fetch_seconds, argv)
