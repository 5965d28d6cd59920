"""The streaming job: log events in, counts per service, level and minute out.

    source topic (JSON events) -> readStream.format("kafka") -> parse -> watermark on event time
    -> count per (1-minute window, service, level) -> writeStream.format("kafka") -> sink topic

The aggregation runs in append mode: a window's count is written once, when the watermark
(the newest event time seen minus `watermark_delay`) passes the window's end, so the sink
topic holds each (window, service, level) exactly once. The checkpoint directory keeps the
source offsets and the aggregation state, so a restarted job continues where it stopped.
The sink is Spark's Kafka sink, i.e. the Java producer, configured idempotent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType

EVENT_SCHEMA = StructType(
    [
        StructField("ts", LongType()),
        StructField("service", StringType()),
        StructField("level", StringType()),
        StructField("host", StringType()),
        StructField("message", StringType()),
    ]
)

#: Options of the Kafka sink's producer: the idempotent Java producer.
SINK_PRODUCER_OPTIONS = {"kafka.enable.idempotence": "true", "kafka.acks": "all"}


def read_events(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    *,
    starting_offsets: str = "earliest",
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The source topic as a streaming DataFrame of Kafka records (key, value, topic, ...)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
    )
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load()


def parse(records: DataFrame) -> DataFrame:
    """Kafka records -> one row per event with an `event_time` timestamp; bad JSON is dropped."""
    events = records.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    return (
        events.select("e.*")
        .where(F.col("ts").isNotNull() & F.col("service").isNotNull())
        .withColumn("event_time", F.timestamp_millis(F.col("ts")))
    )


def aggregate(
    events: DataFrame, *, window: str = "1 minute", watermark_delay: str = "30 seconds"
) -> DataFrame:
    """Counts per (window, service, level), final once the watermark passes the window."""
    counted = (
        events.withWatermark("event_time", watermark_delay)
        .groupBy(F.window("event_time", window), "service", "level")
        .count()
    )
    return counted.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        "service",
        "level",
        "count",
    )


def to_kafka_records(counts: DataFrame) -> DataFrame:
    """Aggregates as Kafka records: key `service|level|window start`, value the JSON row."""
    value = F.to_json(
        F.struct(
            F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
            F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
            "service",
            "level",
            "count",
        )
    )
    key = F.concat_ws(
        "|", "service", "level", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'")
    )
    return counts.select(key.alias("key"), value.alias("value"))


def start_job(
    spark: SparkSession,
    bootstrap: str,
    source_topic: str,
    sink_topic: str,
    checkpoint_dir: str,
    *,
    available_now: bool = False,
    processing_time: str = "2 seconds",
    watermark_delay: str = "30 seconds",
    source_options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start the job: source topic -> counts -> sink topic, checkpointed in `checkpoint_dir`.

    With `available_now` the query processes what the source holds and stops (tests, batch
    catch-up); otherwise it runs a micro-batch every `processing_time` until stopped.
    """
    records = read_events(spark, bootstrap, source_topic, options=source_options)
    counts = aggregate(parse(records), watermark_delay=watermark_delay)
    writer = (
        to_kafka_records(counts)
        .writeStream.format("kafka")
        .outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink_topic)
        .option("checkpointLocation", checkpoint_dir)
        .options(**SINK_PRODUCER_OPTIONS)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.queryName(f"log-aggregates-{sink_topic}").start()


def decode_aggregate(value: bytes | str) -> dict[str, Any]:
    """One sink record's value as a dict (for printing and tests)."""
    result: dict[str, Any] = json.loads(value)
    return result
