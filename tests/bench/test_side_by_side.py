"""Smoke test of the side-by-side benchmark: a ``--quick`` run of cheap rows on both targets.

Checks the harness end to end (both brokers start, both load generators run, the report and
chart are written), not the figures: ``--quick`` sizes are too small to mean anything.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.side_by_side.report import BEGIN, END
from bench.side_by_side.targets import REPO_ROOT
from compat.kafka_process import jars_available, jars_dir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed"),
    pytest.mark.skipif(
        not jars_available(), reason=f"Kafka jars missing in {jars_dir()}: run `make jars`"
    ),
]


def quick_run(out: Path, *options: str, env: dict[str, str] | None = None) -> str:
    """``python -m bench.side_by_side --quick OPTIONS --out OUT``: its stderr, once it passed."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.side_by_side", "--quick", *options, "--out", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return run.stderr


def test_quick_run_writes_the_report_and_chart(tmp_path: Path) -> None:
    hand_written = "## Limits\n\nKept between runs.\n"
    (tmp_path / "BENCHMARKS.md").write_text(
        f"# Benchmarks\n\n{BEGIN}\nold\n{END}\n\n{hand_written}"
    )
    # wirebroker-metrics too (row 1 with the Prometheus endpoint on): the cost of metrics
    # table, in the same run (each run of its own starts the brokers and clients again).
    stderr = quick_run(
        tmp_path, "--rows", "1,6", "--targets", "kafka,wirebroker,wirebroker-metrics"
    )
    assert "repeat 1/1" in stderr  # progress on stderr
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert text.endswith(hand_written) and "\nold\n" not in text
    # The host's reference: the broker's own request path timed before the run.
    assert re.search(r"row 4's request path in process .* took [1-9][0-9]* µs\.", text)
    for needle in (
        "Produce 1 KiB, acks=1 (Java ProducerPerformance)",
        "Broker RSS, idle",
        "| CPU |",
        "ProducerPerformance --topic",
    ):
        assert needle in text
    table_row = next(
        line for line in text.splitlines() if "Produce 1 KiB, acks=1 (librdkafka)" in line
    )
    assert table_row.count("MB/s") == 2  # a figure for each target, so a ratio too
    assert (tmp_path / "benchmarks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "### The cost of metrics" in text
    assert "wirebroker.metrics.listener=127.0.0.1:0" in text  # the command shown
    cost = next(
        line
        for line in text.splitlines()
        if line.startswith("| 1 | Produce 1 KiB, acks=1 (librdkafka)") and "≥ 0.97" in line
    )
    assert cost.count("MB/s") == 2


def test_quick_failover_row_on_a_wirebroker_cluster(tmp_path: Path) -> None:
    """Row 11 alone against wirebroker: ZooKeeper + 3 brokers start, a leader is killed and
    replaced, the figure reaches the report, and nothing is left running."""
    scratch = tmp_path / "scratch"  # the run's temporary folder: every broker's argv names it
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    stderr = quick_run(tmp_path, "--rows", "11", "--targets", "wirebroker", env=env)
    assert "row 11 leader kill -9 to new leader | repeat 1/1" in stderr
    text = (tmp_path / "BENCHMARKS.md").read_text()
    repeats = next(
        line
        for line in text.splitlines()
        if line.startswith("| 11: Leader kill -9") and "| wirebroker |" in line
    )
    seconds = float(repeats.split("|")[3].strip().removesuffix(" s"))
    assert 1.0 < seconds < 60.0  # the session timeout (6 s) bounds it from below
    assert "| 11 | Of which: ZooKeeper session expiry to first produce" in text
    assert "zookeeper.session.timeout.ms=6000" in text
    assert "--override broker.id=$ID" in text
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(scratch) in (proc / "cmdline").read_text():
                left.append(proc.name)
        except OSError:
            continue
    assert not left, f"processes left running: {left}"


def test_quick_transaction_and_move_rows_on_wirebroker(tmp_path: Path) -> None:
    """Rows 15, 16 and 17 alone against wirebroker: both clients' transactional produce and
    read_committed consume give their figures, with the commands that made them, and a broker
    with two log dirs moves a replica from one to the other."""
    quick_run(tmp_path, "--rows", "15,16,17", "--targets", "wirebroker")
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert (
        "| 17: Move a 10 MiB replica to the broker's other log dir (AlterReplicaLogDirs) |" in text
    )
    assert ".alter_replica_log_dirs(" in text and "$BOOTSTRAP" in text
    for client in ("Java ProducerPerformance", "librdkafka"):
        assert f"| 15: Transactional produce, 100 ms transactions ({client}) | wirebroker |" in text
    for client in ("Java ConsumerPerformance", "librdkafka"):
        assert (
            f"read_committed, 10 MiB written in 100 ms transactions ({client}) | wirebroker" in text
        )
    assert "--transactional-id bench-transactional-java" in text
    assert "--transaction-duration-ms 100" in text
    assert "--transaction-ms 100" in text
    assert "--consumer.config" in text and "isolation.level=read_committed" in text
