"""`make soak` (``bench.soak``): its judgement of samples, and a short run end to end.

The run checks the harness (a broker with its three listeners, every workload loop doing its
part without a client error, the samples written), not the verdict: half a minute is inside
the warm-up a verdict needs (``file.delete.delay.ms`` alone keeps deleted segments' files
open for a minute).
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.side_by_side.targets import REPO_ROOT
from bench.soak import Sample, judge

WARM_UP_S = 120.0


def samples(rss: list[float], fds: int = 40, fd_step: int = 0) -> list[Sample]:
    """One sample every 10 s from the start, after a warm-up at 200 MiB."""
    warm = [Sample(t, "b", 200.0, 500, 9) for t in range(0, int(WARM_UP_S), 10)]
    return warm + [
        Sample(WARM_UP_S + 10 * i, "b", mib, fds + i * fd_step, 3) for i, mib in enumerate(rss)
    ]


def test_flat_or_noisy_memory_passes() -> None:
    assert judge(samples([38.0] * 60), WARM_UP_S) == []
    noisy = [38.0 + (0.8 if i % 3 == 0 else -0.4) for i in range(60)]
    assert judge(samples(noisy), WARM_UP_S) == []


def test_the_deleted_segments_leak_fails() -> None:
    # What a soak measured before 4e38568: about 0.35 MiB a minute under its churn.
    leak = [38.0 + 0.35 * i / 6 for i in range(60)]
    (problem,) = judge(samples(leak), WARM_UP_S)
    assert problem.startswith("resident memory grows 21.0 MiB an hour")


def test_growing_descriptors_fail_and_a_short_run_says_so() -> None:
    (problem,) = judge(samples([38.0] * 30, fd_step=6), WARM_UP_S)  # the index descriptors' leak
    assert problem == "fds grow: 67 → 187 from the first third to the last (limit +16)"
    (short,) = judge(samples([38.0] * 2), WARM_UP_S)
    assert "run longer" in short


@pytest.mark.integration
def test_a_short_soak_runs_every_workload_without_client_errors(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.soak", "--minutes", "0.4", "--sample-seconds", "5"]
        + ["--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )
    progress = [line for line in run.stderr.splitlines() if " min  wirebroker " in line]
    assert len(progress) >= 4, run.stderr[-3000:]
    counts = re.search(
        r"([\d,]+) produced, ([\d,]+) consumed, (\d+) topics, (\d+) members, "
        r"(\d+) connections, (\d+) errors",
        progress[-1],
    )
    assert counts is not None, progress[-1]
    *done, errors = (int(n.replace(",", "")) for n in counts.groups())
    assert all(done) and errors == 0, run.stderr[-3000:]
    assert "client error" not in run.stderr and "logged:" not in run.stderr
    with (tmp_path / "soak-wirebroker.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(progress) and float(rows[-1]["rss_mib"]) > 10
