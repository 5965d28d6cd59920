"""Produce and consume: keys, headers, timestamps, compression, seek by time.

Each client writes records to a topic of its own and reads them back; the observation is
the consumed records (partition, offset, key, value, headers, timestamp) plus, for
compression, the codec and producer id of every batch as the broker stored it (read with
a raw Fetch), so "stored as sent" is compared too.
"""

from __future__ import annotations

from typing import Any

import pytest

from compat.clients import CLIENTS, CODECS, Rec, consume, normalise_ts, produce
from compat.raw import create_topic, offsets_for_time, stored_batches

BASE_TS = 1_700_000_000_000


def records(n: int = 5) -> list[Rec]:
    return [
        Rec(
            key=f"key-{i}".encode(),
            value=f"value-{i}-".encode() + b"x" * (i * 7),
            headers=(("trace", f"t{i}".encode()), ("seq", str(i).encode())),
            timestamp=BASE_TS + i * 1000,
        )
        for i in range(n)
    ]


def _roundtrip(
    client: str, bootstrap: str, topic: str, reader: str | None = None, **opts: Any
) -> list[tuple[Any, ...]]:
    recs = records()
    create_topic(bootstrap, topic)
    produce(client, bootstrap, topic, recs, **opts)
    got = consume(reader or client, bootstrap, topic, len(recs))
    return [g._replace(timestamp=normalise_ts(g.timestamp)) for g in got]


@pytest.mark.parametrize("client", CLIENTS)
def test_keys_headers_timestamps(client: str, observe: Any) -> None:
    observe(lambda t: _roundtrip(client, t.bootstrap, f"records-{client}"))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_compression(client: str, codec: str, observe: Any) -> None:
    if client == "kafka-python" and codec == "snappy":
        from kafka.codec import has_snappy

        if not has_snappy():
            pytest.skip("kafka-python needs python-snappy for snappy, which is not installed")

    def run(t: Any) -> Any:
        topic = f"compressed-{codec}-{client}"
        # The console consumer's own read path is covered above; a JVM per read is slow.
        reader = "confluent-kafka" if client == "java" else client
        got = _roundtrip(client, t.bootstrap, topic, reader, compression=codec)
        return got, sorted({b.codec for b in stored_batches(t.bootstrap, topic)})

    observe(run)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "java"])
def test_seek_by_time(client: str, observe: Any) -> None:
    """Offsets for timestamps: before, exactly at, between, and after the records."""
    stamps = [BASE_TS - 1, BASE_TS + 2000, BASE_TS + 2500, BASE_TS + 99_000]

    def run(t: Any) -> Any:
        topic = f"by-time-{client}"
        create_topic(t.bootstrap, topic)
        produce("kafka-python", t.bootstrap, topic, records())
        return offsets_for_time(client, t.bootstrap, topic, stamps)

    observe(run)
