"""Fixtures of the compat suite: one real Kafka 3.9 and one wirebroker per session.

Every scenario test takes the ``target`` fixture (params ``kafka`` then ``wirebroker``).
Because ``target`` is session-scoped, pytest runs every scenario on Kafka first and then
on wirebroker; each test hands its normalised observation to ``observe``, which stores
Kafka's and asserts that wirebroker's is equal to it (computing Kafka's on demand when a
partial run, e.g. ``-k wirebroker``, skipped it). Both brokers live for the whole session.

Kafka runs in a container of the local Kafka image (``make image``) when Docker works, from
the jars otherwise (``compat.kafka_process.kafka_reference``); the scenarios are the same.
Both targets use the same topic names (they are different brokers), so observations can
name topics. The suite skips, with the reason, only when java or the Kafka jars are
missing. ``WIREBROKER_COMPAT_REPORT=path`` writes the scenario x client x target table.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compat import report
from compat.kafka_process import jars_available, jars_dir, kafka_reference
from tests.broker_process import BrokerProcess, serving

#: The same broker settings on both sides (Kafka's are in ``kafka_process.kafka_properties``).
WIREBROKER_PROPERTIES = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "true",
    # kafka_process sets this on Kafka; it then shows as STATIC_BROKER_CONFIG in describes.
    "log.flush.interval.messages": "9223372036854775807",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
}
TARGETS = ("kafka", "wirebroker")


def _missing() -> str | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java is not installed: the compat suite needs a JDK 17 to run real Kafka"
    if not jars_available():
        return f"Kafka jars missing in {jars_dir()}: run `make jars`"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    reason = _missing()
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@dataclass(frozen=True)
class Target:
    """One broker under test: ``name`` is ``kafka`` or ``wirebroker``."""

    name: str
    bootstrap: str

    def __str__(self) -> str:
        return self.name


@pytest.fixture(scope="session")
def kafka_target() -> Iterator[Target]:
    with kafka_reference() as kafka:
        report.note(f"Kafka ran {kafka.how}.")
        yield Target("kafka", kafka.bootstrap_servers)


@pytest.fixture(scope="session")
def wirebroker_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    process = BrokerProcess(tmp_path_factory.mktemp("compat-wirebroker"), WIREBROKER_PROPERTIES)
    with serving(process):
        yield Target("wirebroker", process.bootstrap)


@pytest.fixture(scope="session", params=TARGETS)
def target(request: pytest.FixtureRequest) -> Target:
    return request.getfixturevalue(f"{request.param}_target")  # type: ignore[no-any-return]


_observations: dict[tuple[str, str], Any] = {}
_FAILED = object()


@pytest.fixture
def observe(
    request: pytest.FixtureRequest, target: Target
) -> Callable[[Callable[[Target], Any]], Any]:
    """``observe(fn)``: run ``fn(target)``; on wirebroker, assert it equals Kafka's result."""
    params = getattr(request.node, "callspec", None)
    others = sorted((k, str(v)) for k, v in (params.params if params else {}).items())
    key = f"{request.node.path}::{request.node.originalname}{[kv for kv in others if kv[0] != 'target']}"

    def run(
        fn: Callable[[Target], Any], explain: Callable[[Any, Any], list[str]] | None = None
    ) -> Any:
        if target.name == "kafka":
            _observations[(key, "kafka")] = _FAILED  # until it completes
        got = fn(target)
        _observations[(key, target.name)] = got
        if target.name == "wirebroker":
            if (key, "kafka") not in _observations:
                _observations[(key, "kafka")] = _FAILED
                _observations[(key, "kafka")] = fn(request.getfixturevalue("kafka_target"))
            expected = _observations[(key, "kafka")]
            if expected is _FAILED:
                pytest.fail("this scenario failed on Kafka: there is no reference to compare with")
            if got != expected and explain is not None:
                detail = "\n".join(explain(got, expected))
                raise AssertionError(f"wirebroker differs from kafka:\n{detail}")
            assert got == expected, f"wirebroker differs from kafka:\n{got!r}\n!=\n{expected!r}"
        return got

    return run


pytest_runtest_makereport = report.pytest_runtest_makereport
pytest_sessionfinish = report.pytest_sessionfinish
