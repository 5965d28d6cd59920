"""Fixtures of the Spark tests: one SparkSession per test session, one broker per module.

The tests skip (with the reason) only when java or the connector jars (`make jars`) are
missing; a broker or Spark failure otherwise fails them. `tests/pipeline/conftest.py` uses
them as they are; `compat/scenarios/test_spark.py` reuses `spark` and `topic` and replaces
`bootstrap` with the compat target's (real Kafka, then wirebroker).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.broker_process import BrokerProcess, serving


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[test]')")
    from pipeline.spark import SparkUnavailable, build_session

    try:
        session = build_session("wirebroker-tests")
    except SparkUnavailable as e:
        pytest.skip(str(e))
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(BrokerProcess(tmp_path_factory.mktemp("broker"), {"num.partitions": "1"})) as b:
        yield b.bootstrap


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (not created)."""
    stem = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:60].strip("-")
    return f"{stem}-{uuid.uuid4().hex[:8]}"
