"""Generated application log events, produced as JSON into a topic with confluent-kafka.

An event is `{"ts": <epoch ms>, "service": ..., "level": ..., "host": ..., "message": ...}`,
keyed by its service. `ts` is the event time the job aggregates on; it is also the record's
timestamp, so `startingTimestamp` and event time agree.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Iterator
from typing import Any

from confluent_kafka import Producer

SERVICES = ("checkout", "payments", "search", "auth")
LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
_LEVEL_WEIGHTS = (30, 55, 10, 5)
_MESSAGES = {
    "DEBUG": "cache lookup",
    "INFO": "request served",
    "WARN": "slow upstream",
    "ERROR": "upstream failed",
}

Event = dict[str, Any]


def generate(
    count: int, *, start_ms: int | None = None, spacing_ms: int = 250, seed: int | None = 0
) -> Iterator[Event]:
    """`count` events whose event times start at `start_ms` (now) and step by `spacing_ms`."""
    rng = random.Random(seed)
    ts = int(time.time() * 1000) if start_ms is None else start_ms
    for _ in range(count):
        level = rng.choices(LEVELS, _LEVEL_WEIGHTS)[0]
        service = rng.choice(SERVICES)
        yield {
            "ts": ts,
            "service": service,
            "level": level,
            "host": f"{service}-{rng.randrange(3)}",
            "message": _MESSAGES[level],
        }
        ts += spacing_ms


def producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})


def produce(
    bootstrap: str, topic: str, events: Iterable[Event], *, partition: int | None = None
) -> int:
    """Produce `events` to `topic` (keyed by service), wait for every ack; returns the count."""
    p = producer(bootstrap)
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    n = 0
    for event in events:
        kwargs: dict[str, Any] = {"timestamp": event["ts"], "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        p.produce(topic, json.dumps(event).encode(), event["service"].encode(), **kwargs)
        p.poll(0)
        n += 1
    remaining = p.flush(30)
    if remaining or errors:
        raise RuntimeError(f"{remaining} events unacknowledged, errors: {errors[:5]}")
    return n
