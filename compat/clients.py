"""The clients of the compat scenarios, behind one small interface.

Each client can ``produce`` a list of :class:`Rec` to partition 0 of a topic and ``consume``
a partition from the beginning; both return plain, comparable data. The Java client runs
through Kafka's own CLI tools (by main class, see ``compat.kafka_process``), kcat through
its binary. ``Got`` is the normalised form of a consumed record: no client-specific types.

Clients that cannot set a record's timestamp (kcat, the console producer) leave it to the
producer's clock; :func:`normalise_ts` turns such a "now" into the word ``now`` so two
runs compare equal.
"""

from __future__ import annotations

import asyncio
import collections
import json
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from compat.kafka_process import run_kafka_tool

CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka", "kcat", "java")
CODECS = ("gzip", "snappy", "lz4", "zstd")
TIMEOUT = 20.0

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"


@dataclass(frozen=True)
class Rec:
    """A record to produce; ``timestamp=None`` lets the producer choose."""

    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None


class Got(NamedTuple):
    """A consumed record, normalised."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | str


def normalise_ts(ts: int) -> int | str:
    """A timestamp within ten minutes of now is the producer's clock: ``now``."""
    return "now" if abs(ts - time.time() * 1000) < 600_000 else ts


def java(main_class: str, *args: str, input: bytes | None = None, check: bool = True) -> str:
    """Run a Kafka CLI tool; its stdout (stderr appended when ``check`` is off)."""
    done = run_kafka_tool(main_class, args, input=input, timeout=60.0, check=check)
    out = done.stdout.decode(errors="replace")
    if not check:
        out += done.stderr.decode(errors="replace")
    return out


# --------------------------------------------------------------------------- produce


def produce(client: str, bootstrap: str, topic: str, recs: Sequence[Rec], **opts: Any) -> None:
    """Send ``recs`` in order to partition 0 with acks=all; ``compression=`` a codec name."""
    {
        "kafka-python": _produce_kafka_python,
        "confluent-kafka": _produce_confluent,
        "aiokafka": _produce_aiokafka,
        "kcat": _produce_kcat,
        "java": _produce_java,
    }[client](bootstrap, topic, recs, **opts)


def _produce_kafka_python(
    bootstrap: str, topic: str, recs: Sequence[Rec], compression: str | None = None
) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", compression_type=compression, linger_ms=50
    )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers),
                partition=0,
                timestamp_ms=r.timestamp,
            )
            for r in recs
        ]
        for f in futures:
            f.get(timeout=TIMEOUT)
    finally:
        producer.close(timeout=5)


def _produce_confluent(
    bootstrap: str, topic: str, recs: Sequence[Rec], compression: str | None = None
) -> None:
    from confluent_kafka import Producer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50}
    if compression:
        conf["compression.type"] = compression
    producer = Producer(conf)
    # Learn the leader first, so every record is queued before the linger ends and they all
    # go out in one batch: a lone first record would be sent uncompressed (librdkafka skips a
    # codec that does not shrink the batch), and the stored codecs would depend on timing.
    producer.list_topics(topic, timeout=TIMEOUT)
    errors: list[Any] = []
    for r in recs:
        producer.produce(
            topic,
            value=r.value,
            key=r.key,
            headers=list(r.headers),
            partition=0,
            timestamp=r.timestamp or 0,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(TIMEOUT) == 0, "confluent-kafka: messages left undelivered"
    assert not errors, errors


def _produce_aiokafka(
    bootstrap: str, topic: str, recs: Sequence[Rec], compression: str | None = None
) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", compression_type=compression, linger_ms=50
        )
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    headers=list(r.headers),
                    partition=0,
                    timestamp_ms=r.timestamp,
                )
                for r in recs
            ]
            for f in futures:
                await asyncio.wait_for(f, TIMEOUT)
        finally:
            await producer.stop()

    asyncio.run(run())


def _produce_kcat(
    bootstrap: str, topic: str, recs: Sequence[Rec], compression: str | None = None
) -> None:
    # One kcat per record: kcat's -H applies to every message of a run.
    for r in recs:
        assert r.key is not None, "kcat -K cannot send a null key"
        argv = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-K", "|"]
        argv += ["-X", "acks=all"]
        if compression:
            argv += ["-z", compression]
        for name, value in r.headers:
            argv += ["-H", f"{name}={value.decode()}"]
        subprocess.run(argv, input=r.key + b"|" + r.value, check=True, timeout=TIMEOUT)


def _produce_java(
    bootstrap: str,
    topic: str,
    recs: Sequence[Rec],
    compression: str | None = None,
    extra: Sequence[str] = (),
) -> None:
    with_headers = any(r.headers for r in recs)
    lines = []
    for r in recs:
        key = "null" if r.key is None else r.key.decode()
        line = f"{key}|{r.value.decode()}"
        if with_headers:
            line = ",".join(f"{k}:{v.decode()}" for k, v in r.headers) + "\t" + line
        lines.append(line)
    args = ["--bootstrap-server", bootstrap, "--topic", topic]
    args += ["--property", "parse.key=true", "--property", "key.separator=|"]
    args += ["--property", f"parse.headers={str(with_headers).lower()}"]
    args += ["--property", "null.marker=null"]
    args += ["--producer-property", "acks=all"]
    if compression:
        args += ["--compression-codec", compression]
    args += list(extra)
    java(CONSOLE_PRODUCER, *args, input=("\n".join(lines) + "\n").encode())


# --------------------------------------------------------------------------- consume


def consume(client: str, bootstrap: str, topic: str, count: int) -> list[Got]:
    """The first ``count`` records of partition 0 (no consumer group)."""
    got = {
        "kafka-python": _consume_kafka_python,
        "confluent-kafka": _consume_confluent,
        "aiokafka": _consume_aiokafka,
        "kcat": _consume_kcat,
        "java": _consume_java,
    }[client](bootstrap, topic, count)
    assert len(got) == count, f"{client} consumed {len(got)} of {count} records: {got}"
    return got


def _hdrs(headers: Any) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, bytes(v) if v is not None else b"") for k, v in headers or ())


def _consume_kafka_python(bootstrap: str, topic: str, count: int) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out = []
        for m in consumer:
            out.append(Got(m.partition, m.offset, m.key, m.value, _hdrs(m.headers), m.timestamp))
            if len(out) == count:
                break
        return out
    finally:
        consumer.close()


def _consume_confluent(bootstrap: str, topic: str, count: int) -> list[Got]:
    # A fresh consumer gets a second chance: in two of the first full runs, on real Kafka
    # and under load, one consumer read nothing for 40 s without reporting any error.
    # librdkafka's own debug log is kept and shown if both attempts fail, so the cause of
    # the silence is in the failure report.
    errors: list[str] = []
    for _attempt in range(2):
        log = _RingLog()
        out = _consume_confluent_once(bootstrap, topic, count, errors, log)
        if len(out) == count:
            return out
    raise AssertionError(
        f"confluent-kafka read {len(out)} of {count}; errors: {errors}\n"
        "librdkafka debug log of the last attempt:\n" + "\n".join(log.lines)
    )


class _RingLog:
    """A ``logging.Logger`` stand-in that keeps librdkafka's last log lines."""

    def __init__(self, keep: int = 300) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self.lines.append(fmt % args if args else fmt)


def _consume_confluent_once(
    bootstrap: str, topic: str, count: int, errors: list[str], log: _RingLog
) -> list[Got]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("compat"),
            "enable.auto.commit": False,
            "debug": "consumer,cgrp,topic,fetch,metadata",
        },
        logger=log,
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[Got] = []
        deadline = time.monotonic() + TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                errors.append(str(m.error()))
                continue
            out.append(
                Got(
                    m.partition(),
                    m.offset(),
                    m.key(),
                    m.value(),
                    _hdrs(m.headers()),
                    m.timestamp()[1],
                )
            )
        return out
    finally:
        consumer.close()


def _consume_aiokafka(bootstrap: str, topic: str, count: int) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Got]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out: list[Got] = []
            deadline = time.monotonic() + TIMEOUT
            while len(out) < count and time.monotonic() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500)
                for m in batch.get(tp, []):
                    out.append(
                        Got(m.partition, m.offset, m.key, m.value, _hdrs(m.headers), m.timestamp)
                    )
            return out[:count]
        finally:
            await consumer.stop()

    return asyncio.run(run())


def _consume_kcat(bootstrap: str, topic: str, count: int) -> list[Got]:
    argv = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning"]
    argv += ["-c", str(count), "-e", "-J"]
    done = subprocess.run(argv, capture_output=True, check=True, timeout=TIMEOUT)
    out = []
    for line in done.stdout.decode().splitlines():
        m = json.loads(line)
        h = m.get("headers") or []
        headers = tuple((h[i], (h[i + 1] or "").encode()) for i in range(0, len(h), 2))
        key = None if m["key"] is None else m["key"].encode()
        out.append(
            Got(m["partition"], m["offset"], key, (m["payload"] or "").encode(), headers, m["ts"])
        )
    return out


def _consume_java(bootstrap: str, topic: str, count: int) -> list[Got]:
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0"]
    args += ["--offset", "earliest", "--max-messages", str(count), "--timeout-ms", "15000"]
    for prop in (
        "print.key",
        "print.headers",
        "print.timestamp",
        "print.offset",
        "print.partition",
    ):
        args += ["--property", f"{prop}=true"]
    args += ["--property", "null.literal=null"]
    out = []
    for line in java(CONSOLE_CONSUMER, *args, check=False).splitlines():
        if not line.startswith(("CreateTime:", "LogAppendTime:")):
            continue
        ts, part, off, headers, key, value = line.split("\t", 5)
        hs: tuple[tuple[str, bytes], ...] = ()
        if headers != "NO_HEADERS":
            pairs = [h.partition(":") for h in headers.split(",")]
            hs = tuple((k, v.encode()) for k, _, v in pairs)
        out.append(
            Got(
                int(part.split(":")[1]),
                int(off.split(":")[1]),
                None if key == "null" else key.encode(),
                value.encode(),
                hs,
                int(ts.split(":")[1]),
            )
        )
    return out


def unique(stem: str) -> str:
    """A group id unique to one run (topic names need not be: each target is its own broker)."""
    return f"{stem}-{uuid.uuid4().hex[:6]}"
