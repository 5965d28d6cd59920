"""kcat (Debian's package; `make tools` installs it) against a broker process.

Produce from stdin with keys, null values (-Z), headers (-H) and each codec; consume as JSON
(-J) from the beginning, from an offset, from the end backwards and from a timestamp (s@, e@);
query offsets by time (-Q) and list metadata (-L). kcat sets no explicit timestamps, so records
with explicit timestamps are written with our codec and read back with kcat.
"""

from __future__ import annotations

import json
import subprocess
import time
import zlib
from typing import Any

import pytest

from protocol.compression import CompressionType
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    BASE_TS,
    RawClient,
    assert_stored_as_sent,
    create_topic,
    needs_kcat,
    produce_request,
)

pytestmark = [pytest.mark.integration, needs_kcat]

TIMEOUT = 15.0


def kcat(broker: BrokerProcess, *args: str, data: bytes = b"") -> str:
    done = subprocess.run(
        ["kcat", "-b", broker.bootstrap, *args],
        input=data,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def consume(broker: BrokerProcess, topic: str, *args: str) -> list[dict[str, Any]]:
    """Records as kcat's JSON envelopes (-J), until the end of the partition(s) (-e)."""
    out = kcat(broker, "-C", "-t", topic, "-e", "-J", *args)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def view(record: dict[str, Any]) -> tuple[Any, ...]:
    return (
        record["partition"],
        record["offset"],
        record["key"],
        record["payload"],
        record["headers"],
    )


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume(broker: BrokerProcess, topic: str, codec: str) -> None:
    create_topic(broker.bootstrap, topic)
    lines = b"k1:v1\nk2:\n:no key\nk4:" + "\u00fcnic\u00f6de".encode() + b"\n"
    before = int(time.time() * 1000)
    kcat(
        broker,
        "-P", "-t", topic, "-p", "0", "-K", ":", "-Z",
        "-H", "h=1", "-H", "h=2", "-H", "empty=",
        "-X", f"compression.codec={codec}", "-X", "linger.ms=20",
        data=lines,
    )  # fmt: skip
    after = int(time.time() * 1000)
    records = consume(broker, topic, "-p", "0", "-o", "beginning")
    headers = ["h", "1", "h", "2", "empty", ""]
    assert [view(r) for r in records] == [
        (0, 0, "k1", "v1", headers),
        (0, 1, "k2", None, headers),  # -Z: an empty value is sent as null
        (0, 2, None, "no key", headers),
        (0, 3, "k4", "\u00fcnic\u00f6de", headers),
    ]
    for r in records:
        assert r["tstype"] == "create" and before <= r["ts"] <= after
    assert_stored_as_sent(broker.bootstrap, topic, CompressionType[codec.upper()])


def test_many_partitions_with_the_key_partitioner(broker: BrokerProcess, topic: str) -> None:
    partitions, count = 12, 120
    create_topic(broker.bootstrap, topic, partitions)
    data = b"".join(b"key-%d:value-%d\n" % (i, i) for i in range(count))
    kcat(broker, "-P", "-t", topic, "-K", ":", data=data)
    records = consume(broker, topic, "-o", "beginning")  # every partition
    assert sorted(r["key"] for r in records) == sorted(f"key-{i}" for i in range(count))
    by_partition: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        # librdkafka's default partitioner: CRC-32 of the key modulo the partition count.
        assert r["partition"] == zlib.crc32(r["key"].encode()) % partitions
        assert r["payload"] == r["key"].replace("key", "value")
        by_partition.setdefault(r["partition"], []).append(r)
    for p, rs in by_partition.items():
        assert sorted(r["offset"] for r in rs) == list(range(len(rs))), p
    metadata = json.loads(kcat(broker, "-L", "-J", "-t", topic))
    (described,) = metadata["topics"]
    assert sorted(p["partition"] for p in described["partitions"]) == list(range(partitions))
    assert metadata["brokers"] == [{"id": 0, "name": broker.bootstrap}]


def test_seek_by_offset_and_by_time(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        batch = [
            SimpleRecord(b"k%d" % i, b"v%d" % i, timestamp=BASE_TS + 1000 * i) for i in range(10)
        ]
        response = client.request(produce_request(topic, 0, batch), 9)
        assert response.responses[0].partition_responses[0].base_offset == 0

    def offsets(*args: str) -> list[int]:
        return [r["offset"] for r in consume(broker, topic, "-p", "0", *args)]

    assert offsets("-o", "7") == [7, 8, 9]
    assert offsets("-o", "-2") == [8, 9]  # relative to the end
    assert offsets("-o", f"s@{BASE_TS + 4000}") == [4, 5, 6, 7, 8, 9]
    assert offsets("-o", f"s@{BASE_TS + 4001}") == [5, 6, 7, 8, 9]
    assert offsets("-o", "beginning", "-o", f"e@{BASE_TS + 2000}") == [0, 1]
    (first,) = consume(broker, topic, "-p", "0", "-o", f"s@{BASE_TS + 3500}", "-c", "1")
    assert (first["key"], first["payload"], first["ts"], first["tstype"]) == (
        "k4",
        "v4",
        BASE_TS + 4000,
        "create",
    )
    assert kcat(broker, "-Q", "-t", f"{topic}:0:{BASE_TS + 6000}") == f"{topic} [0] offset 6\n"
    assert kcat(broker, "-Q", "-t", f"{topic}:0:-2") == f"{topic} [0] offset 0\n"
    assert kcat(broker, "-Q", "-t", f"{topic}:0:-1") == f"{topic} [0] offset 10\n"
