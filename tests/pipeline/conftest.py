"""The Spark tests' fixtures (see tests/pipeline/fixtures.py), against a wirebroker process."""

from tests.pipeline.fixtures import bootstrap, spark, topic

__all__ = ["bootstrap", "spark", "topic"]
