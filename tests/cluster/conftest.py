"""Fixtures of the cluster failure tests: which broker kind runs them, and skips with reasons.

``WIREBROKER_CLUSTER_TARGET=kafka`` runs the same scenarios against Apache Kafka 3.9 (how they
were validated); the default is wirebroker. ZooKeeper comes from the project's jars
(``make jars``), so the tests skip, saying so, where java or the jars are missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from compat.kafka_process import jars_available, jars_dir


def _missing() -> str | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java is not installed: the cluster tests run ZooKeeper from its jars"
    if not jars_available():
        return f"ZooKeeper jars missing in {jars_dir()}: run `make jars`"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    reason = _missing()
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def kind() -> str:
    """The broker implementation under test: ``wirebroker`` (default) or ``kafka``."""
    return os.environ.get("WIREBROKER_CLUSTER_TARGET", "wirebroker")
