"""Retention renames a deleted segment's files to ``.deleted`` on the loop and unlinks them in
a worker thread: an in-process broker whose unlinks are held up keeps answering requests.

Unlinking a 512 MiB segment took 48-124 ms when it ran on the loop."""

from __future__ import annotations

import os
import threading
from functools import partial
from pathlib import Path

import pytest
import trio
from confluent_kafka import Producer

from protocol.errors import ErrorCode
from protocol.messages.metadata import MetadataRequest
from tests.wirebroker.helpers import RawClient
from wirebroker.config import BrokerConfig
from wirebroker.server import serve_broker

TIMEOUT = 30.0


class _HeldUnlinks:
    """Wraps ``os.unlink``: records the thread of every unlink of a ``.deleted`` file and holds
    each until `release` is set."""

    def __init__(self) -> None:
        self.unlink = os.unlink
        self.threads: set[int] = set()
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if os.fspath(path).endswith(".deleted"):
            self.threads.add(threading.get_ident())
            self.started.set()
            assert self.release.wait(TIMEOUT)
        self.unlink(path, *args, **kwargs)  # type: ignore[arg-type]


def _produce(bootstrap: str, topic: str, count: int) -> None:
    """`count` batches of one record each (every one rolls a segment of this topic)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    errors = []
    for _ in range(count):
        producer.produce(topic, b"v" * 100, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(TIMEOUT) == 0
    assert errors == [None] * count


def _metadata(bootstrap: str) -> None:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        response = client.request(MetadataRequest(topics=None), 12)
    assert response.topics and response.topics[0].error_code == ErrorCode.NONE


def test_retention_unlinks_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _HeldUnlinks()
    monkeypatch.setattr(os, "unlink", held)
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path),
            "log.retention.check.interval.ms": "100",
        }
    )
    topic_dir = tmp_path / "t-0"

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            bootstrap = running.bootstrap_servers
            running.broker.create_topic(
                "t",
                1,
                1,
                {"segment.bytes": "200", "retention.bytes": "1", "file.delete.delay.ms": "0"},
            )
            try:
                with trio.fail_after(TIMEOUT):
                    await trio.to_thread.run_sync(_produce, bootstrap, "t", 5)
                    assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
                    # An unlink is held: the loop still answers, and the log already moved on.
                    await trio.to_thread.run_sync(_metadata, bootstrap)
                    assert list(topic_dir.glob("*.log.deleted"))
                    assert running.broker.log_manager.get("t", 0).log_start_offset > 0
            finally:
                held.release.set()
            with trio.fail_after(TIMEOUT):
                while list(topic_dir.glob("*.deleted")):  # the next removal chore's
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        return loop_thread

    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads
