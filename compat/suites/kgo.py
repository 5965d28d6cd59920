"""franz-go's ``pkg/kgo`` test suite, from the Go module proxy.

The module's source includes its tests: ``go mod download`` fetches it (into Go's module cache),
``go test -c`` builds the test binary once into ``build/suites/``. Each top-level test then runs
as its own process, from the package's folder (some tests read its source), with ``KGO_SEEDS``
set to the target, ``KGO_TEST_RF`` to its replication factor and ``KGO_TEST_RECORDS`` to
``RECORDS`` (the suite's default, 500000, is sized for a JVM broker on many cores). On a secured
target every test client connects over TLS with its certificate (``KGO_TEST_TLS``) and the
SCRAM and OAUTHBEARER tests log in on its SASL listener (``KGO_TEST_SCRAM_SEEDS``,
``KGO_TEST_SCRAM``, ``KGO_TEST_OAUTH_SEEDS``); elsewhere the suite skips those. Its own other
skips (KIP-848 and share groups on a 3.9 broker) are reported as skips.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from compat.suites.results import BUILD, Outcome
from compat.suites.targets import SCRAM_MECHANISM, Target

MODULE = "github.com/twmb/franz-go"
VERSION = "v1.22.3"
RECORDS = 20_000
TEST_TIMEOUT_S = 180  # 3x the slowest test on the wirebroker cluster (59 s)
BINARY = BUILD / f"kgo-{VERSION}.test"
_RESULT = re.compile(r"^--- (PASS|FAIL|SKIP): (\S+) \(([\d.]+)s\)")
_SKIP_REASON = re.compile(r"^\s+\S+\.go:\d+: (.*)$")


def describe() -> str:
    return f"franz-go {VERSION} `pkg/kgo` (KGO_TEST_RECORDS={RECORDS})"


def module_dir() -> Path:
    """Download the module (a no-op when cached); its folder in Go's module cache."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    return Path(json.loads(out.stdout)["Dir"])


def build() -> Path:
    """The test binary, built once; returns the package folder the tests run from."""
    package = module_dir() / "pkg" / "kgo"
    if not BINARY.exists():
        BINARY.parent.mkdir(parents=True, exist_ok=True)
        print(f"suites: building {describe()}", flush=True)
        subprocess.run(
            ["nice", "-n", "10", "go", "test", "-c", "-o", str(BINARY), "."],
            cwd=package,
            check=True,
        )
    return package


def tests(package: Path) -> list[str]:
    out = subprocess.run(
        [str(BINARY), "-test.list", ".*"], cwd=package, check=True, capture_output=True, text=True
    )
    return [line for line in out.stdout.split() if line.startswith("Test")]


def run_one(package: Path, name: str, target: Target, log: Path) -> Outcome:
    """Run top-level test ``name`` against ``target``; its output is appended to ``log``."""
    env = {
        **os.environ,
        "KGO_SEEDS": target.bootstrap,
        "KGO_TEST_RF": str(target.replication_factor),
        "KGO_TEST_RECORDS": str(RECORDS),
        "KGO_LOG_LEVEL": "none",
    }
    if (secured := target.secured) is not None:
        env["KGO_TEST_TLS"] = f"ca:{secured.ca},cert:{secured.client_cert},key:{secured.client_key}"
        bits = SCRAM_MECHANISM.removeprefix("SCRAM-SHA-")
        env["KGO_TEST_SCRAM"] = f"{secured.scram_user}:{secured.scram_password}:{bits}"
        env["KGO_TEST_SCRAM_SEEDS"] = env["KGO_TEST_OAUTH_SEEDS"] = secured.sasl_bootstrap
    argv = ["nice", "-n", "10", str(BINARY), "-test.v", "-test.count=1"]
    argv += ["-test.run", f"^{name}$", "-test.timeout", f"{TEST_TIMEOUT_S}s"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=package, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    with log.open("a") as out:
        out.write(f"\n===== {name}\n{proc.stdout}{proc.stderr}")
    lines = (proc.stdout + proc.stderr).splitlines()  # a panic's message is on stderr
    if "panic: test timed out" in proc.stdout + proc.stderr:
        first = _detail(lines, len(lines), "fail")
        return Outcome("timeout", seconds, f"still running after {TEST_TIMEOUT_S} s; {first}")
    for i, line in enumerate(lines):
        match = _RESULT.match(line)
        if not match or match.group(2) != name:
            continue
        status = {"PASS": "pass", "FAIL": "fail", "SKIP": "skip"}[match.group(1)]
        return Outcome(status, seconds, _detail(lines, i, status))
    return Outcome("fail", seconds, f"exit {proc.returncode} with no result line")


def _detail(lines: list[str], at: int, status: str) -> str:
    """A skip's reason, or a failure's first message and which subtests failed."""
    if status == "pass":
        return ""
    if status == "skip":  # t.Skip's message: the last before the result but the clean-ups'
        for line in reversed(lines[:at]):
            if (match := _SKIP_REASON.match(line)) and not match.group(1).startswith("deleting"):
                return match.group(1)[:160]
        return ""
    failed_subtests = [
        m.group(2) for line in lines if (m := re.match(r"^\s+--- FAIL: (\S+)", line))
    ]
    messages = [m.group(1) for line in lines if (m := _SKIP_REASON.match(line))]
    errors = [m for m in messages if re.search(r"err|unable|expect|fail|!=|timed out", m, re.I)]
    panics = [ln for ln in lines if ln.startswith("panic: ") and "test timed out" not in ln]
    first = (panics or errors or messages or [""])[0][:160]
    if failed_subtests:
        first += f" (subtests failed: {', '.join(failed_subtests[:4])})"
    return first.strip()
