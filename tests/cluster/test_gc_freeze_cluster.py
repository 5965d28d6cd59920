"""In a cluster a broker's partitions are made by the controller's LeaderAndIsr (every one
after a start, and each new replica): once such a LeaderAndIsr made them, they are frozen out
of the cyclic collector's passes (`wirebroker.gc_freeze`). Two brokers in process, a real
ZooKeeper; the collector is the process's, so what was frozen is unfrozen after."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import trio

from tests.cluster.harness import create_topic, eventually, start_broker
from tests.wirebroker.test_gc_freeze import (  # noqa: F401 (`unfreeze`: the fixture, by name)
    partition_objects,
    tracked_ids,
    unfreeze,
)

pytestmark = pytest.mark.integration
PARTITIONS = 20


def test_partitions_a_leader_and_isr_made_are_frozen(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> int:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2)
            b2.broker.freeze_created = True  # as `wirebroker serve` after its start-up freeze
            await eventually(
                lambda: len(list(b1.broker.metadata_cache.alive_brokers())) == 2,
                what="2 live brokers",
            )
            frozen_before = gc.get_freeze_count()
            await create_topic(b1, "replicated", PARTITIONS, 2)
            await eventually(
                lambda: len(partition_objects(b2.broker, "replicated")) >= 3 * PARTITIONS,
                what="broker 2's replicas made",
            )
            tracked = tracked_ids()
            made = partition_objects(b2.broker, "replicated")
            assert not [o for o in made if id(o) in tracked]
            nursery.cancel_scope.cancel()
        return gc.get_freeze_count() - frozen_before

    frozen = trio.run(main)
    assert frozen >= 40 * PARTITIONS
