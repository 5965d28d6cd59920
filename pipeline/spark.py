"""A local SparkSession with Spark's Kafka connector, from jars fetched by `make jars`.

The connector (spark-sql-kafka-0-10 and its dependencies, matching the installed pyspark) is
fetched from Maven Central into `.cache/jars/spark/` by `bash jars/fetch.sh spark` and passed
to Spark with `spark.jars`; Spark's own Ivy resolution (`--packages`) is never used.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pyspark.sql import SparkSession

#: Where `bash jars/fetch.sh spark` puts the connector; WIREBROKER_SPARK_JARS overrides it.
DEFAULT_JARS_DIR = Path(__file__).resolve().parent.parent / ".cache" / "jars" / "spark"


class SparkUnavailable(RuntimeError):
    """Raised by `build_session` when java or the connector jars are missing.

    The message says what to install or fetch; callers (tests) skip on it, `python -m pipeline`
    prints it and exits.
    """


def jars_dir() -> Path:
    return Path(os.environ.get("WIREBROKER_SPARK_JARS", DEFAULT_JARS_DIR))


def connector_jars(directory: Path | None = None) -> list[Path]:
    """The connector's jars, or SparkUnavailable saying how to fetch them."""
    directory = directory or jars_dir()
    jars = sorted(directory.glob("*.jar"))
    if not any(j.name.startswith("spark-sql-kafka-0-10_") for j in jars):
        raise SparkUnavailable(
            f"no spark-sql-kafka-0-10 jar in {directory}: run `make jars` "
            "(or `bash jars/fetch.sh spark`)"
        )
    return jars


def check_java() -> None:
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        raise SparkUnavailable("java is not installed (pyspark 4 needs Java 17 or newer)")


def build_session(app_name: str = "wirebroker-pipeline", *, cores: int = 2) -> SparkSession:
    """A local[cores] session with the Kafka connector, two shuffle partitions and quiet logs."""
    check_java()
    jars = connector_jars()
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.log.level", "ERROR")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
