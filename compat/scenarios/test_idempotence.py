"""The idempotent producer: the Java console producer (idempotent by default in 3.9) and the
Python clients with idempotence on. Observed: the records read back and, per stored batch,
its codec, whether it carries a producer id, its base sequence and record count.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from compat.clients import Rec, consume, normalise_ts, produce
from compat.raw import create_topic, stored_batches

RECORDS = [Rec(f"k{i}".encode(), f"v{i}".encode(), (("h", b"1"),)) for i in range(5)]


def _produce_idempotent(client: str, bootstrap: str, topic: str) -> None:
    if client == "java":
        produce("java", bootstrap, topic, RECORDS, extra=["--sync"])
    elif client == "kafka-python":
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
        for r in RECORDS:
            p.send(topic, r.value, r.key, list(r.headers), 0).get(timeout=20)
        p.close(timeout=5)
    elif client == "confluent-kafka":
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for r in RECORDS:
            p.produce(topic, r.value, r.key, partition=0, headers=list(r.headers))
            p.flush(20)
    elif client == "aiokafka":
        from aiokafka import AIOKafkaProducer

        async def run() -> None:
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
            await p.start()
            try:
                for r in RECORDS:
                    await p.send_and_wait(topic, r.value, r.key, 0, headers=list(r.headers))
            finally:
                await p.stop()

        asyncio.run(run())


@pytest.mark.parametrize("client", ["java", "kafka-python", "confluent-kafka", "aiokafka"])
def test_idempotent_producer(client: str, observe: Any) -> None:
    def run(t: Any) -> Any:
        topic = f"idempotent-{client}"
        create_topic(t.bootstrap, topic)
        _produce_idempotent(client, t.bootstrap, topic)
        got = consume("kafka-python", t.bootstrap, topic, len(RECORDS))
        return [g._replace(timestamp=normalise_ts(g.timestamp)) for g in got], stored_batches(
            t.bootstrap, topic
        )

    observe(run)
