"""One test of a client's pytest suite (kafka-python's, aiokafka's) run as its own process: its
time bound, its output appended to the run's log, its outcome read from pytest's JUnit XML."""

from __future__ import annotations

import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

from compat.suites.results import Outcome


def run_test(
    python: Path | str,
    plugins: Sequence[str],
    test: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: int,
    log: Path,
    options: Sequence[str] = (),
) -> Outcome:
    """Run pytest test ``test`` (its id from ``cwd``) with ``python``, only ``plugins`` loaded
    (the environment's others are not: the suite's configuration asks for those) and
    pytest-timeout's bound ``timeout_s``; the process is killed a minute after that."""
    with tempfile.TemporaryDirectory(prefix="suite-test-") as tmp:
        junit = Path(tmp) / "junit.xml"
        argv = ["nice", "-n", "10", str(python), "-m", "pytest", "-p", "no:cacheprovider"]
        for plugin in plugins:
            argv += ["-p", plugin]
        argv += [*options, f"--timeout={timeout_s}", f"--junitxml={junit}", "-q", test]
        start = time.monotonic()
        try:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env={**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout_s + 60,
            )
            output, killed = proc.stdout + proc.stderr, False
        except subprocess.TimeoutExpired as e:
            output, killed = _text(e.stdout) + _text(e.stderr), True
        seconds = time.monotonic() - start
        with log.open("a") as out:
            out.write(f"\n===== {test}\n{output}")
        if killed or "+ Timeout +" in output:
            return Outcome("timeout", seconds, f"still running after {timeout_s} s")
        if not junit.exists():
            return Outcome("fail", seconds, f"pytest exited {proc.returncode} with no report")
        return _outcome(ET.parse(junit).getroot(), seconds)


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def _outcome(report: ET.Element, seconds: float) -> Outcome:
    """The worst of the test's phases in pytest's JUnit XML: a failure or a setup/teardown
    error fails it, else a skip skips it."""
    for tag, status in (("failure", "fail"), ("error", "fail"), ("skipped", "skip")):
        for found in report.iter(tag):
            message = (found.get("message") or found.text or "").strip().splitlines()
            return Outcome(status, seconds, (message[0] if message else tag)[:200])
    if not any(True for _ in report.iter("testcase")):
        return Outcome("fail", seconds, "no test ran")
    return Outcome("pass", seconds)
