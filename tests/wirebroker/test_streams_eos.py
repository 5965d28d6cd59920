"""Kafka Streams' own WordCount example with ``processing.guarantee=exactly_once_v2`` counts
exactly: ``org.apache.kafka.streams.examples.wordcount.WordCountDemo`` from Maven Central (the
``streams`` jar set, `make jars`), unmodified, given its config file as its one argument.

Known text goes to ``streams-plaintext-input`` (two partitions, so the count goes through a
repartition topic and a changelog, both created by Streams); the demo runs with its state store
cache off, so it emits every count it reaches. A read_committed consumer of
``streams-wordcount-output`` must then see, for each word, exactly 1, 2, ... n in order: no
count twice (no duplicate), none skipped (no loss), and n the word's true count; and the
output was written in transactions (COMMIT markers in it). With
``WIREBROKER_CLUSTER_TARGET=kafka`` the test runs against Apache Kafka 3.9 (how it was checked).
"""

from __future__ import annotations

import random
import signal
import struct
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from compat import transactions
from compat.kafka_process import kafka_tool_command
from compat.transactions import log_layout
from tests.wirebroker.helpers import create_topic
from wirebroker.zookeeper_server import jars_available, jars_dir

pytestmark = pytest.mark.integration

WORD_COUNT = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"
INPUT, OUTPUT = "streams-plaintext-input", "streams-wordcount-output"
BROKER_PROPERTIES = transactions.BROKER_PROPERTIES
WORDS = ["kafka", "broker", "stream", "count", "exactly", "once", "log", "offset", "topic", "wire"]
LINES = 3000


def streams_jars() -> Path:
    return jars_dir().parent / "streams"


@pytest.fixture
def bootstrap(target_bootstrap: str) -> str:
    if not jars_available() or not any(streams_jars().glob("kafka-streams-examples-*.jar")):
        pytest.skip("no Kafka and Kafka Streams jars: run `make jars`")
    return target_bootstrap


def text() -> list[str]:
    """``LINES`` lines of two to eight words (fixed seed), mixed case as the demo lower-cases."""
    rng = random.Random(13)
    return [
        " ".join(
            rng.choice(WORDS).upper() if rng.random() < 0.1 else rng.choice(WORDS)
            for _ in range(rng.randint(2, 8))
        )
        for _ in range(LINES)
    ]


def produce_lines(bootstrap: str, lines: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, line in enumerate(lines):
        producer.produce(INPUT, line.encode(), key=str(i).encode())
    assert producer.flush(60) == 0


def read_counts(bootstrap: str, expected: Counter[str], timeout: float) -> dict[str, list[int]]:
    """Every committed count per word, until each word's last one is its expected count."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "wordcount-check",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([OUTPUT])
    seen: dict[str, list[int]] = defaultdict(list)
    deadline = time.monotonic() + timeout
    try:
        while any(not seen[w] or seen[w][-1] < n for w, n in expected.items()):
            assert time.monotonic() < deadline, (
                f"counts so far: { {w: v[-3:] for w, v in seen.items()} }"
            )
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert not m.error(), m.error()
            seen[m.key().decode()].append(struct.unpack(">q", m.value())[0])
        return seen
    finally:
        consumer.close()


@pytest.mark.timeout(300)
def test_word_count_with_exactly_once_v2_counts_exactly(bootstrap: str, tmp_path: Path) -> None:
    create_topic(bootstrap, INPUT, 2)
    create_topic(bootstrap, OUTPUT, 2)
    lines = text()
    expected = Counter(word.lower() for line in lines for word in line.split())
    config = tmp_path / "wordcount.properties"
    config.write_text(
        f"bootstrap.servers={bootstrap}\n"
        "application.id=wordcount-eos\n"
        "processing.guarantee=exactly_once_v2\n"
        f"state.dir={tmp_path / 'state'}\n"
    )
    argv = kafka_tool_command(WORD_COUNT, [str(config)], heap="512m")
    argv[argv.index("-cp") + 1] += f":{streams_jars() / '*'}"
    with open(tmp_path / "wordcount.log", "w") as log:
        demo = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        produce_lines(bootstrap, lines[: LINES // 2])
        # The second half once the application runs: it joins and counts while input arrives.
        read_counts(
            bootstrap, Counter(w.lower() for line in lines[: LINES // 2] for w in line.split()), 120
        )
        produce_lines(bootstrap, lines[LINES // 2 :])
        seen = read_counts(bootstrap, expected, 120)
    except BaseException:
        print((tmp_path / "wordcount.log").read_text()[-5000:])
        raise
    finally:
        demo.send_signal(signal.SIGTERM)  # its shutdown hook closes the streams
        try:
            code = demo.wait(60)
        except subprocess.TimeoutExpired:
            demo.kill()
            code = demo.wait()
    assert {w: v for w, v in seen.items() if v != list(range(1, expected[w] + 1))} == {}
    # Written in transactions: every output record transactional, and COMMIT markers between.
    for partition in (0, 1):
        kinds = Counter(kind for _, kind, _ in log_layout(bootstrap, OUTPUT, partition))
        assert set(kinds) == {"txn", "COMMIT"}, kinds
    # The JVM's status after SIGTERM is 143 even when its shutdown hook closed everything.
    assert code == 143, (tmp_path / "wordcount.log").read_text()[-5000:]
