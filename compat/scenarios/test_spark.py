"""Spark's Kafka source and sink, and the pipeline job, against real Kafka and wirebroker.

The scenarios are those of tests/pipeline/test_spark_kafka.py, run here once per compat
target: each must pass against Kafka 3.9 and against wirebroker alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from compat.conftest import Target

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[test]')")

from tests.pipeline.fixtures import spark, topic  # noqa: E402
from tests.pipeline.test_spark_kafka import (  # noqa: E402
    test_assign,
    test_batch_read,
    test_fail_on_data_loss_after_delete_records,
    test_job_restart_from_checkpoint,
    test_sink,
    test_starting_offsets_by_timestamp,
    test_starting_offsets_json,
    test_starting_offsets_latest,
    test_subscribe,
    test_subscribe_pattern,
)

__all__ = [
    "spark",
    "topic",
    "test_assign",
    "test_batch_read",
    "test_fail_on_data_loss_after_delete_records",
    "test_job_restart_from_checkpoint",
    "test_sink",
    "test_starting_offsets_by_timestamp",
    "test_starting_offsets_json",
    "test_starting_offsets_latest",
    "test_subscribe",
    "test_subscribe_pattern",
]

# As in tests/pipeline: a Spark session (a JVM) and its streaming queries need more than the default.
pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def bootstrap(target: Target) -> str:
    """The compat target's bootstrap address, in place of tests/pipeline's own broker."""
    return target.bootstrap
