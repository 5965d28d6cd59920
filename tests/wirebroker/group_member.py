"""One consumer-group member as its own process, so tests can kill it with SIGKILL.

Run as ``python -m tests.wirebroker.group_member CLIENT BOOTSTRAP GROUP TOPIC SESSION_MS
STRATEGY [INSTANCE_ID]``, with CLIENT one of confluent, kafka-python, aiokafka (an instance id,
for static membership, with confluent only). It subscribes, and after every
batch it consumes it commits synchronously. It reports on stdout, one JSON object a line:
``{"assign": [partitions]}`` / ``{"revoke": [partitions]}`` (the deltas its client reports),
``{"consumed": [[partition, offset, value], ...]}``, then ``{"committed": true}`` once that
batch's offsets are committed, or ``{"commit_failed": "..."}``. SIGTERM
closes the consumer cleanly (it leaves the group).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

stopping = False


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def _stop(*_: object) -> None:
    global stopping
    stopping = True


def run_confluent(
    bootstrap: str, group: str, topic: str, session_ms: int, strategy: str, instance: str = ""
) -> None:
    from confluent_kafka import Consumer, KafkaException

    static = {"group.instance.id": instance} if instance else {}
    consumer = Consumer(
        {
            **static,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, session_ms // 4),
            "partition.assignment.strategy": strategy or "range",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )

    def on_assign(c: Any, partitions: list[Any]) -> None:
        emit(assign=sorted(p.partition for p in partitions))

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        emit(revoke=sorted(p.partition for p in partitions))

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stopping:
        batch = consumer.consume(100, 0.1)
        good = [m for m in batch if m.error() is None]
        if good:
            emit(consumed=[[m.partition(), m.offset(), m.value().decode()] for m in good])
            try:
                consumer.commit(asynchronous=False)
                emit(committed=True)
            except KafkaException as e:
                emit(commit_failed=str(e))
    consumer.close()


def run_kafka_python(
    bootstrap: str, group: str, topic: str, session_ms: int, strategy: str
) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_assigned(self, assigned: Any) -> None:
            emit(assign=sorted(tp.partition for tp in assigned))

        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(revoke=sorted(tp.partition for tp in revoked))

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(100, session_ms // 4),
        metadata_max_age_ms=1000,
    )
    consumer.subscribe([topic], listener=Listener())
    while not stopping:
        polled = consumer.poll(timeout_ms=100)
        records = [r for rs in polled.values() for r in rs]
        if records:
            emit(consumed=[[r.partition, r.offset, r.value.decode()] for r in records])
            try:
                consumer.commit()
                emit(committed=True)
            except KafkaError as e:
                emit(commit_failed=repr(e))
    consumer.close()


def run_aiokafka(bootstrap: str, group: str, topic: str, session_ms: int, strategy: str) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_assigned(self, assigned: Any) -> None:
            emit(assign=sorted(tp.partition for tp in assigned))

        def on_partitions_revoked(self, revoked: Any) -> None:
            emit(revoke=sorted(tp.partition for tp in revoked))

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=max(100, session_ms // 4),
            metadata_max_age_ms=1000,
        )
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        try:
            while not stopping:
                polled = await consumer.getmany(timeout_ms=100)
                records = [r for rs in polled.values() for r in rs]
                if records:
                    emit(consumed=[[r.partition, r.offset, r.value.decode()] for r in records])
                    try:
                        await consumer.commit()
                        emit(committed=True)
                    except KafkaError as e:
                        emit(commit_failed=repr(e))
        finally:
            await consumer.stop()

    asyncio.run(main())


RUNNERS = {
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


def main(argv: list[str]) -> None:
    client, bootstrap, group, topic, session_ms, strategy, *instance = argv
    signal.signal(signal.SIGTERM, _stop)
    if instance:
        run_confluent(bootstrap, group, topic, int(session_ms), strategy, instance[0])
    else:
        RUNNERS[client](bootstrap, group, topic, int(session_ms), strategy)
    emit(closed=True)


if __name__ == "__main__":
    main(sys.argv[1:])
