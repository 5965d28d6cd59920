"""Spark's built-in Kafka source and sink against wirebroker, and the pipeline job.

Every streaming read runs with `trigger(availableNow=True)` into a memory table, so a test
waits for exactly the data present and never sleeps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[test]')")

from pipeline import events as ev  # noqa: E402
from pipeline import job  # noqa: E402

# A Spark session (a JVM) starts with the first test and streaming queries run for tens of seconds.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


# ---- helpers ------------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce_values(
    bootstrap: str, topic: str, values: list[str], *, partition: int = 0, ts: int | None = None
) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for v in values:
        kwargs: dict[str, Any] = {"partition": partition}
        if ts is not None:
            kwargs["timestamp"] = ts
        p.produce(topic, v.encode(), **kwargs)
    assert p.flush(30) == 0


def consume_all(bootstrap: str, topic: str, partitions: int = 1) -> list[tuple[str, str]]:
    """Every record of `topic` as (key, value), reading each partition to its end."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    out: list[tuple[str, str]] = []
    try:
        for p in range(partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            c.assign([TopicPartition(topic, p, low)])
            pos = low
            deadline = time.monotonic() + 30
            while pos < high and time.monotonic() < deadline:
                msg = c.poll(1)
                if msg is None or msg.error():
                    continue
                out.append(((msg.key() or b"").decode(), (msg.value() or b"").decode()))
                offset = msg.offset()
                assert offset is not None
                pos = offset + 1
            assert pos >= high, f"timed out reading {topic}[{p}] at {pos}/{high}"
    finally:
        c.close()
    return out


def stream_rows(
    spark: Any, options: dict[str, str], checkpoint: Path, name: str
) -> list[tuple[int, int, str]]:
    """A streaming Kafka read run with availableNow: the (partition, offset, value) it saw."""
    reader = spark.readStream.format("kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
    rows: list[tuple[int, int, str]] = []

    def collect(batch: Any, _batch_id: int) -> None:
        rows.extend((r.partition, r.offset, r.value) for r in batch.collect())

    # foreachBatch (unlike the memory sink) restarts from a checkpoint.
    query = (
        df.writeStream.foreachBatch(collect)
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive, "the availableNow query did not finish"
    error = query.exception()
    if error is not None:
        raise error
    return sorted(rows)


def qname(topic: str) -> str:
    return "t_" + "".join(ch if ch.isalnum() else "_" for ch in topic)


# ---- the source ---------------------------------------------------------------------------


def test_subscribe(spark: Any, bootstrap: str, topic: str, tmp_path: Path) -> None:
    create_topic(bootstrap, topic, 2)
    produce_values(bootstrap, topic, ["a0", "a1"], partition=0)
    produce_values(bootstrap, topic, ["b0"], partition=1)
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    rows = stream_rows(spark, opts, tmp_path / "cp", qname(topic))
    assert rows == [(0, 0, "a0"), (0, 1, "a1"), (1, 0, "b0")]


def test_subscribe_pattern(spark: Any, bootstrap: str, topic: str, tmp_path: Path) -> None:
    for suffix in ("x", "y"):
        create_topic(bootstrap, f"{topic}.{suffix}")
        produce_values(bootstrap, f"{topic}.{suffix}", [f"v-{suffix}"])
    create_topic(bootstrap, f"other-{topic}")
    produce_values(bootstrap, f"other-{topic}", ["not-matched"])
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribePattern": f"{topic}\\..*",
        "startingOffsets": "earliest",
    }
    rows = stream_rows(spark, opts, tmp_path / "cp", qname(topic))
    assert sorted(r[2] for r in rows) == ["v-x", "v-y"]


def test_assign(spark: Any, bootstrap: str, topic: str, tmp_path: Path) -> None:
    create_topic(bootstrap, topic, 3)
    for p in range(3):
        produce_values(bootstrap, topic, [f"p{p}-0", f"p{p}-1"], partition=p)
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "assign": json.dumps({topic: [0, 2]}),
        "startingOffsets": "earliest",
    }
    rows = stream_rows(spark, opts, tmp_path / "cp", qname(topic))
    assert rows == [(0, 0, "p0-0"), (0, 1, "p0-1"), (2, 0, "p2-0"), (2, 1, "p2-1")]


def test_starting_offsets_latest(spark: Any, bootstrap: str, topic: str, tmp_path: Path) -> None:
    create_topic(bootstrap, topic)
    produce_values(bootstrap, topic, ["old-0", "old-1"])
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "latest"}
    # The first run resolves "latest" (offset 2) into the checkpoint and reads nothing ...
    assert stream_rows(spark, opts, tmp_path / "cp", qname(topic) + "_1") == []
    produce_values(bootstrap, topic, ["new-2"])
    # ... the second, from the checkpoint, reads what came after.
    assert stream_rows(spark, opts, tmp_path / "cp", qname(topic) + "_2") == [(0, 2, "new-2")]


def test_starting_offsets_json(spark: Any, bootstrap: str, topic: str, tmp_path: Path) -> None:
    create_topic(bootstrap, topic, 3)
    for p in range(3):
        produce_values(bootstrap, topic, [f"p{p}-{i}" for i in range(3)], partition=p)
    # Partition 0 from offset 2, partition 1 from earliest (-2), partition 2 from latest (-1).
    starting = json.dumps({topic: {"0": 2, "1": -2, "2": -1}})
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": starting}
    rows = stream_rows(spark, opts, tmp_path / "cp", qname(topic))
    assert rows == [(0, 2, "p0-2"), (1, 0, "p1-0"), (1, 1, "p1-1"), (1, 2, "p1-2")]


def test_starting_offsets_by_timestamp(
    spark: Any, bootstrap: str, topic: str, tmp_path: Path
) -> None:
    create_topic(bootstrap, topic)
    base = 1_700_000_000_000
    for i in range(4):
        produce_values(bootstrap, topic, [f"t{i}"], ts=base + i * 1000)
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsetsByTimestamp": json.dumps({topic: {"0": base + 1500}}),
    }
    rows = stream_rows(spark, opts, tmp_path / "cp", qname(topic))
    assert rows == [(0, 2, "t2"), (0, 3, "t3")]
    # The global form (Spark 3.3+) answers the same through ListOffsets by timestamp.
    opts2 = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingTimestamp": str(base + 1000),
    }
    rows = stream_rows(spark, opts2, tmp_path / "cp2", qname(topic) + "_g")
    assert rows == [(0, 1, "t1"), (0, 2, "t2"), (0, 3, "t3")]


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, before)])
    for f in futures.values():
        f.result(30)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_after_delete_records(
    spark: Any, bootstrap: str, topic: str, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    create_topic(bootstrap, topic)
    produce_values(bootstrap, topic, ["r0", "r1"])
    opts = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "failOnDataLoss": str(fail_on_data_loss).lower(),
    }
    assert stream_rows(spark, opts, tmp_path / "cp", qname(topic) + "_1") == [
        (0, 0, "r0"),
        (0, 1, "r1"),
    ]
    # The query has committed offset 2; r2..r4 are produced and r2, r3 deleted before it runs again.
    produce_values(bootstrap, topic, ["r2", "r3", "r4"])
    delete_records(bootstrap, topic, 0, 4)
    if fail_on_data_loss:
        # The fetch at offset 2 gets OFFSET_OUT_OF_RANGE; Spark reports the lost range [2, 4).
        with pytest.raises(Exception, match="Some data may have been lost"):
            stream_rows(spark, opts, tmp_path / "cp", qname(topic) + "_2")
    else:
        rows = stream_rows(spark, opts, tmp_path / "cp", qname(topic) + "_2")
        assert rows == [(0, 4, "r4")]


def test_batch_read(spark: Any, bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 2)
    produce_values(bootstrap, topic, [f"a{i}" for i in range(5)], partition=0)
    produce_values(bootstrap, topic, [f"b{i}" for i in range(3)], partition=1)
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 1, "1": -2}}))
        .option("endingOffsets", json.dumps({topic: {"0": 4, "1": -1}}))
        .load()
    )
    rows = sorted(
        (r.partition, r.offset, r.value)
        for r in df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect()
    )
    assert rows == [
        (0, 1, "a1"),
        (0, 2, "a2"),
        (0, 3, "a3"),
        (1, 0, "b0"),
        (1, 1, "b1"),
        (1, 2, "b2"),
    ]
    all_rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    assert all_rows.count() == 8


# ---- the sink -----------------------------------------------------------------------------


def test_sink(spark: Any, bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 2)
    df = spark.createDataFrame(
        [(f"k{i}", f"v{i}", i % 2) for i in range(20)], "key STRING, value STRING, partition INT"
    )
    (
        df.write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .options(**job.SINK_PRODUCER_OPTIONS)
        .save()
    )
    got = consume_all(bootstrap, topic, 2)
    assert sorted(got) == sorted((f"k{i}", f"v{i}") for i in range(20))


# ---- the pipeline job ---------------------------------------------------------------------

MINUTE = 60_000
T0 = 1_700_000_040_000 // MINUTE * MINUTE  # a minute boundary


def expected_counts(events: list[dict[str, Any]]) -> dict[tuple[str, str, int], int]:
    out: dict[tuple[str, str, int], int] = {}
    for e in events:
        k = (e["service"], e["level"], e["ts"] // MINUTE * MINUTE)
        out[k] = out.get(k, 0) + 1
    return out


def sink_counts(bootstrap: str, topic: str) -> list[tuple[tuple[str, str, int], int]]:
    from datetime import datetime

    out = []
    for _key, value in consume_all(bootstrap, topic):
        row = job.decode_aggregate(value)
        start = datetime.strptime(row["window_start"], "%Y-%m-%dT%H:%M:%S%z")
        out.append(((row["service"], row["level"], int(start.timestamp() * 1000)), row["count"]))
    return out


def test_job_restart_from_checkpoint(
    spark: Any, bootstrap: str, topic: str, tmp_path: Path
) -> None:
    source, sink = f"{topic}-events", f"{topic}-counts"
    create_topic(bootstrap, source, 2)
    create_topic(bootstrap, sink)
    checkpoint = str(tmp_path / "checkpoint")
    # Run 1: minutes 0-2. Run 2 (restarted from the checkpoint): one event for minute 0, behind
    # the watermark and so dropped, minutes 3-5, and one far ahead that closes their windows.
    first = list(ev.generate(120, start_ms=T0, spacing_ms=1500, seed=1))
    second = list(ev.generate(120, start_ms=T0 + 3 * MINUTE, spacing_ms=1500, seed=2))
    late = {"ts": T0 + 5000, "service": "auth", "level": "ERROR", "host": "h", "message": "late"}
    closer = {
        "ts": T0 + 10 * MINUTE,
        "service": "auth",
        "level": "INFO",
        "host": "h",
        "message": "m",
    }

    ev.produce(bootstrap, source, first)
    q = job.start_job(spark, bootstrap, source, sink, checkpoint, available_now=True)
    q.awaitTermination(180)
    assert q.exception() is None
    after_first = sink_counts(bootstrap, sink)

    ev.produce(bootstrap, source, [late, *second, closer])
    # The second run emits every window the closer's watermark closed (availableNow ends with
    # a no-data batch); a third run, with no new events, must write nothing more.
    for _ in range(2):
        q = job.start_job(spark, bootstrap, source, sink, checkpoint, available_now=True)
        q.awaitTermination(180)
        assert q.exception() is None
    got = sink_counts(bootstrap, sink)

    keys = [k for k, _ in got]
    assert len(keys) == len(set(keys)), "an aggregate was written twice"
    want = expected_counts(first + second)
    # The first run emitted the windows its own watermark closed, and only those.
    assert 0 < len(after_first) < len(expected_counts(first))
    assert all(want[k] == n for k, n in after_first)
    assert dict(got) == want
