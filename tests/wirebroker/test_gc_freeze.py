"""Partitions made after start-up are frozen out of the cyclic collector's passes once their
creation settled (`wirebroker.gc_freeze`, `Broker.freeze_created`, on in `wirebroker serve`):
a real broker in process, topics created over the wire (CreateTopics, CreatePartitions). The
collector is the process's: each test unfreezes what it froze."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.create_partitions import CreatePartitionsRequest
from tests.wirebroker.helpers import RawClient, create_topic
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig
from wirebroker.server import serve_broker

TIMEOUT = 30.0
PARTITIONS = 40


@pytest.fixture(autouse=True)
def unfreeze() -> Iterator[None]:
    yield
    gc.unfreeze()


def tracked_ids() -> set[int]:
    """The objects the collector's passes walk (tracked, not frozen), after a full one."""
    gc.collect()
    return {id(o) for o in gc.get_objects()}


def partition_objects(broker: Broker, topic: str) -> list[object]:
    """The long-lived objects of `topic`'s partitions: each partition, its log, its segments."""
    found: list[object] = []
    for tp, p in broker.partitions.items():
        if tp.topic == topic:
            found += [p, p.log, *p.log.segments]
    return found


def add_partitions(bootstrap: str, topic: str, count: int) -> None:
    topics = [CreatePartitionsRequest.CreatePartitionsTopic(name=topic, count=count)]
    request = CreatePartitionsRequest(topics=topics, timeout_ms=10_000)
    with RawClient(bootstrap) as raw:
        (result,) = raw.request(request, 3).results
    assert result.error_code == ErrorCode.NONE, result


def test_partitions_created_after_start_are_frozen_once_made(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )

    async def main() -> dict[str, tuple[int, int]]:
        measured: dict[str, tuple[int, int]] = {}
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            broker, bootstrap = running.broker, running.bootstrap_servers
            for topic, freeze in (("loose", False), ("frozen", True)):
                broker.freeze_created = freeze
                before, frozen_before = len(tracked_ids()), gc.get_freeze_count()
                with trio.fail_after(TIMEOUT):
                    await trio.to_thread.run_sync(create_topic, bootstrap, topic, PARTITIONS)
                tracked = tracked_ids()
                measured[topic] = (len(tracked) - before, gc.get_freeze_count() - frozen_before)
                made = partition_objects(broker, topic)
                assert len(made) == 3 * PARTITIONS
                walked = [o for o in made if id(o) in tracked]
                assert len(walked) == (0 if freeze else len(made)), topic
            # CreatePartitions: the new ones frozen too, with one freeze
            frozen_before = gc.get_freeze_count()
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(add_partitions, bootstrap, "frozen", 2 * PARTITIONS)
            tracked = tracked_ids()
            assert not [o for o in partition_objects(broker, "frozen") if id(o) in tracked]
            measured["added"] = (0, gc.get_freeze_count() - frozen_before)
            nursery.cancel_scope.cancel()
        return measured

    measured = trio.run(main)
    # Without the freeze about 52 objects a partition stay walked by the collector; with it
    # none of them (the freeze takes the loose topic's and everything else tracked too).
    loose_tracked, loose_frozen = measured["loose"]
    assert loose_tracked >= 40 * PARTITIONS and loose_frozen == 0, measured
    frozen_tracked, frozen_count = measured["frozen"]
    assert frozen_tracked < 0 and frozen_count >= 40 * PARTITIONS, measured
    assert measured["added"][1] >= 40 * PARTITIONS, measured
    print(f"tracked objects added, frozen by the creation (per {PARTITIONS} partitions):", measured)


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_creations_freeze_frees_the_garbage_cycles_of_the_moment(tmp_path: Path) -> None:
    """A cycle that is garbage when a creation freezes is collected, not frozen for good (the
    automatic collector is off meanwhile, so only the freeze's own pass can free it)."""
    config = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            running.broker.freeze_created = True
            garbage = weakref.ref(_Cycle())
            assert garbage() is not None  # only a collection frees it
            with trio.fail_after(TIMEOUT):
                await trio.to_thread.run_sync(create_topic, running.bootstrap_servers, "t", 2)
            assert garbage() is None
            nursery.cancel_scope.cancel()

    gc.disable()
    try:
        trio.run(main)
    finally:
        gc.enable()
