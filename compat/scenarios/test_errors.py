"""Error cases, as each client reports them: unknown topic, offset out of range, record
too large, invalid config. The observation is the error's name or code as the client
surfaces it (never a message text that embeds a port or a node id).
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

import pytest

from compat.clients import CONSOLE_PRODUCER, TOPIC_COMMAND, Rec, java, produce
from compat.raw import create_topic

BIG = 5000
LIMIT = {"max.message.bytes": "2000"}


def _exception_names(text: str) -> list[str]:
    """Kafka exception class names mentioned in a tool's output, in order, deduplicated."""
    seen: list[str] = []
    for name in re.findall(r"org\.apache\.kafka\.common\.errors\.(\w+)", text):
        if name not in seen:
            seen.append(name)
    return seen


# --------------------------------------------------------------------------- unknown topic


def _unknown_topic(client: str, bootstrap: str) -> Any:
    topic = "no-such-topic"
    if client == "kafka-python":
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.describe_topics([topic])
            return "no error"
        except Exception as exc:  # noqa: BLE001 - the error's type is the observation
            return type(exc).__name__
        finally:
            admin.close()
    if client == "confluent-kafka":
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap})
        from confluent_kafka import TopicCollection

        fut = admin.describe_topics(TopicCollection([topic]))[topic]
        try:
            fut.result(15)
            return "no error"
        except Exception as exc:  # noqa: BLE001
            return exc.args[0].name()
    if client == "java":
        out = java(
            TOPIC_COMMAND,
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--topic",
            topic,
            check=False,
        )
        return [line for line in out.splitlines() if "does not exist" in line][:1]
    raise ValueError(client)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "java"])
def test_unknown_topic(client: str, observe: Any) -> None:
    observe(lambda t: _unknown_topic(client, t.bootstrap))


# --------------------------------------------------------------------------- offset out of range


def _out_of_range(client: str, bootstrap: str, topic: str) -> Any:
    if client == "confluent-kafka":
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "oor", "auto.offset.reset": "error"}
        )
        try:
            c.assign([TopicPartition(topic, 0, 100)])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error():
                    return m.error().name(), "Offset out of range" in m.error().str()
            return "no error"
        finally:
            c.close()
    if client == "kcat":
        done = subprocess.run(
            [
                "kcat",
                "-C",
                "-b",
                bootstrap,
                "-t",
                topic,
                "-p",
                "0",
                "-o",
                "100",
                "-e",
                "-X",
                "auto.offset.reset=error",
            ],
            capture_output=True,
            timeout=20,
        )
        return done.returncode != 0 or b"Offset out of range" in done.stderr, (
            b"Offset out of range" in done.stderr
        )
    if client == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="none")
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 100)
            try:
                c.poll(timeout_ms=5000)
                c.poll(timeout_ms=5000)
                return "no error"
            except Exception as exc:  # noqa: BLE001
                return type(exc).__name__
        finally:
            c.close()
    raise ValueError(client)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "kcat"])
def test_offset_out_of_range(client: str, observe: Any) -> None:
    def run(t: Any) -> Any:
        topic = f"out-of-range-{client}"
        create_topic(t.bootstrap, topic)
        produce("kafka-python", t.bootstrap, topic, [Rec(b"k", b"v", (("h", b"x"),))] * 3)
        return _out_of_range(client, t.bootstrap, topic)

    observe(run)


# --------------------------------------------------------------------------- record too large


def _too_large(client: str, bootstrap: str, topic: str) -> Any:
    value = b"x" * BIG
    if client == "kafka-python":
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
        try:
            p.send(topic, value, partition=0).get(timeout=15)
            return "no error"
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__
        finally:
            p.close(timeout=5)
    if client == "confluent-kafka":
        from confluent_kafka import Producer

        errors: list[str] = []
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce(
            topic,
            value,
            partition=0,
            on_delivery=lambda e, m: errors.append(e.name() if e else "ok"),
        )
        p.flush(15)
        return errors
    if client == "aiokafka":
        import asyncio

        from aiokafka import AIOKafkaProducer

        async def run() -> str:
            p = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await p.start()
            try:
                await p.send_and_wait(topic, value, partition=0)
                return "no error"
            except Exception as exc:  # noqa: BLE001
                return type(exc).__name__
            finally:
                await p.stop()

        return asyncio.run(run())
    if client == "kcat":
        done = subprocess.run(
            ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0"],
            input=value,
            capture_output=True,
            timeout=20,
        )
        return b"too large" in done.stderr.lower() or b"msg_size_too_large" in done.stderr.lower()
    if client == "java":
        out = java(
            CONSOLE_PRODUCER,
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--sync",
            "--producer-property",
            "retries=0",
            input=value + b"\n",
            check=False,
        )
        return _exception_names(out)
    raise ValueError(client)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "aiokafka", "kcat", "java"])
def test_record_too_large(client: str, observe: Any) -> None:
    def run(t: Any) -> Any:
        topic = f"too-large-{client}"
        create_topic(t.bootstrap, topic, configs=LIMIT)
        return _too_large(client, t.bootstrap, topic)

    observe(run)


# --------------------------------------------------------------------------- invalid config


def _invalid_config(client: str, bootstrap: str, topic: str) -> Any:
    bad = {"cleanup.policy": "bogus"}
    if client == "kafka-python":
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(topic, 1, 1, topic_configs=bad)])
            return "no error"
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__
        finally:
            admin.close()
    if client == "confluent-kafka":
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            admin.create_topics([NewTopic(topic, 1, 1, config=bad)])[topic].result(15)
            return "no error"
        except Exception as exc:  # noqa: BLE001
            return exc.args[0].name()
    if client == "java":
        out = java(
            TOPIC_COMMAND,
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            topic,
            "--config",
            "cleanup.policy=bogus",
            check=False,
        )
        return _exception_names(out)
    raise ValueError(client)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "java"])
def test_invalid_config(client: str, observe: Any) -> None:
    observe(lambda t: _invalid_config(client, t.bootstrap, f"invalid-config-{client}"))
