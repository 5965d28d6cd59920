"""A fetch of old records never waits for the disk on the loop, which keeps answering everyone
else meanwhile (a consumer catching up on old records from a slow disk must not stall the
broker): records no longer in the page cache are read in by a worker thread before the loop
sends them, and an old segment's offset index not in memory is loaded by one before the read.
Real broker in process, real clients; the segments' pages are dropped with
`posix_fadvise(DONTNEED)` after a sync, and the worker's call is held until the test has seen
the loop answer another client."""

from __future__ import annotations

import os
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

import wirebroker.transport
from storage import page_cache
from storage.segment import LookupReads
from tests.wirebroker.held_worker import Held
from tests.wirebroker.pki import KEY_PASSWORD, Pki
from wirebroker.config import BrokerConfig
from wirebroker.server import serve_broker

TIMEOUT = 30.0
RECORDS = 400
VALUE = 1_000


def _values() -> list[bytes]:
    return [i.to_bytes(4, "big") * (VALUE // 4) for i in range(RECORDS)]


def _produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16_384})
    errors: list[Any] = []
    for value in _values():
        producer.produce("t", value, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(TIMEOUT) == 0
    assert not [e for e in errors if e is not None], [str(e) for e in errors if e is not None][:3]
    assert len(errors) == RECORDS


def _drop_pages(topic_dir: Path) -> None:
    """Make the segments' pages clean, then drop them from the page cache."""
    os.sync()
    for path in topic_dir.glob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            cold = not page_cache.cached(fd, 0, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        if not cold:
            pytest.skip(f"the pages of {path} cannot be dropped here (tmpfs?)")


def _consume(bootstrap: str, common: dict[str, Any]) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cold", "enable.auto.commit": False, **common}
    )
    consumer.assign([TopicPartition("t", 0, 0)])
    got: list[bytes] = []
    try:
        while len(got) < RECORDS:
            message = consumer.poll(TIMEOUT)
            assert message is not None, f"{len(got)} records of {RECORDS}"
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None
            got.append(value)
    finally:
        consumer.close()
    return got


async def _consume_while_held(
    held: Held, bootstrap: str, common: dict[str, Any], probe: str
) -> list[bytes]:
    """Consume the topic from its start while a held call waits in its worker thread: the
    loop meanwhile answers Metadata on `probe`, and no record arrives before the release."""
    consumed: list[list[bytes]] = []
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as clients:

            async def consume() -> None:
                consumed.append(await trio.to_thread.run_sync(_consume, bootstrap, common))

            clients.start_soon(consume)
            async with held.answering(probe):
                assert not consumed
    return consumed[0]


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_a_cold_fetch_is_read_in_a_worker_while_the_loop_answers_others(
    listener: str, tmp_path: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = Held(page_cache.load)
    monkeypatch.setattr(wirebroker.transport, "load", held)
    data = tmp_path / "data"
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "log.dirs": str(data),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server_pem),
            "ssl.key.password": KEY_PASSWORD,
        }
    )
    common: dict[str, Any] = {}
    if listener == "SSL":
        common = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}

    async def main() -> tuple[int, list[bytes]]:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            ports = {lst.name: lst.port for lst in running.listeners}
            plain = f"127.0.0.1:{ports['PLAINTEXT']}"
            bootstrap = f"127.0.0.1:{ports[listener]}"
            running.broker.create_topic("t", 1, 1, {"segment.bytes": "65536"})
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(_produce, plain)
                await trio.to_thread.run_sync(_drop_pages, data / "t-0")
            got = await _consume_while_held(held, bootstrap, common, plain)
            nursery.cancel_scope.cancel()
        return loop_thread, got

    loop_thread, got = trio.run(main)
    assert got == _values()
    assert held.threads and loop_thread not in held.threads


@pytest.mark.parametrize("cold", ["restarted", "pages dropped"])
def test_finding_an_old_offset_reads_in_a_worker_while_the_loop_answers_others(
    cold: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch from an old segment first has a worker thread do the reads that find its
    offset: after a restart the segment's offset index is on disk only (a check of up to
    ~260,000 entries to load), and with its pages dropped the batch headers from the index
    entry on are not in the page cache."""
    held = Held(LookupReads.run)
    monkeypatch.setattr(LookupReads, "run", lambda reads: held(reads))
    config = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )

    async def fill() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            running.broker.create_topic("t", 1, 1, {"segment.bytes": "65536"})
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(_produce, running.bootstrap_servers)
            nursery.cancel_scope.cancel()

    async def main() -> tuple[int, list[bytes]]:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            bootstrap = running.bootstrap_servers
            if cold == "pages dropped":
                running.broker.create_topic("t", 1, 1, {"segment.bytes": "65536"})
                await trio.to_thread.run_sync(_produce, bootstrap)
                await trio.to_thread.run_sync(_drop_pages, tmp_path / "t-0")
            reads = running.broker.log_manager.get("t", 0).lookup_reads(0)
            assert reads is not None and (reads.position is None) == (cold == "restarted")
            got = await _consume_while_held(held, bootstrap, {}, bootstrap)
            nursery.cancel_scope.cancel()
        return loop_thread, got

    if cold == "restarted":
        trio.run(fill)
    loop_thread, got = trio.run(main)
    assert got == _values()
    assert held.threads and loop_thread not in held.threads
