"""One suite's results on one target, kept as JSON in ``compat/suites/results/`` (committed, so
that ``compat/REPORT.md`` can be rendered again, and a partial run keeps the other rows)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "suites"
RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = (
    "kafka",
    "wirebroker",
    "kafka-cluster",
    "wirebroker-cluster",
    "kafka-secured",
    "wirebroker-secured",
    "kafka-secured-cluster",
    "wirebroker-secured-cluster",
    "kafka-sasl",
    "wirebroker-sasl",
)
#: What each wirebroker target is compared with (``kafka`` when that one has not run).
REFERENCE = {
    "wirebroker": "kafka",
    "wirebroker-cluster": "kafka-cluster",
    "wirebroker-secured": "kafka-secured",
    "wirebroker-secured-cluster": "kafka-secured-cluster",
    "wirebroker-sasl": "kafka-sasl",
}

#: A test's outcome: ``pass``, ``fail``, ``skip`` (the suite itself skipped it, e.g. no SASL
#: listener), or ``timeout`` (killed at its bound; a failure).
OUTCOMES = ("pass", "fail", "skip", "timeout")


@dataclass
class Outcome:
    status: str
    seconds: float
    detail: str = ""  # why it failed or was skipped, one line


@dataclass
class SuiteRun:
    suite: str
    target: str
    version: str  # what ran: the suite's version and mode
    how: str  # where the target ran
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    seconds: float = 0.0  # the whole run's
    reran: str = ""  # "N tests re-ran <when>" after ``--only``
    tests: dict[str, Outcome] = field(default_factory=dict)

    def path(self) -> Path:
        return RESULTS / f"{self.suite}-{self.target}.json"

    def save(self) -> None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        self.path().write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(OUTCOMES, 0)
        for outcome in self.tests.values():
            out[outcome.status] += 1
        return out


def load(suite: str, target: str) -> SuiteRun | None:
    path = RESULTS / f"{suite}-{target}.json"
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    tests = {name: Outcome(**o) for name, o in raw.pop("tests").items()}
    return SuiteRun(**raw, tests=tests)
