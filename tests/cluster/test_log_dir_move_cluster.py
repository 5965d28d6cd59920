"""AlterReplicaLogDirs in a cluster, in-process: broker 1 of two has two `log.dirs` and moves
the replica it leads and the one it follows to its other dir while acks=all producers write
to both leaders. Every acknowledged record is read back, once and in order; the follower's
replication goes on into its new log, and the leader's followers keep fetching from it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest
from tests.cluster.harness import call, create_topic, eventually, start_broker
from tests.cluster.test_log_dir_failure_cluster import TOPIC, fetch_values, produce
from wirebroker.server import RunningBroker

pytestmark = pytest.mark.integration


async def keep_producing(running: RunningBroker, partition: int, acked: list[bytes]) -> None:
    """acks=all records to `partition` on `running` (its leader), until cancelled."""
    i = 0
    while True:
        value = b"p%d-%06d" % (partition, i)
        if await produce(running, partition, value) == ErrorCode.NONE:
            acked.append(value)
            i += 1
        else:
            await trio.sleep(0.02)  # a producer's retry pacing until the follower is in the ISR


@pytest.mark.timeout(60)
def test_moving_a_leader_and_a_follower_replica_between_log_dirs(
    zk_connect: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            dirs = [tmp_path / "b1-a", tmp_path / "b1-b"]
            b1 = await start_broker(
                nursery,
                zk_connect,
                tmp_path,
                1,
                log_dirs=",".join(map(str, dirs)),
                **{"log.segment.bytes": "65536", "replica.fetch.max.bytes": "16384"},
            )
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2)
            await create_topic(b1, TOPIC, 2, assignments={0: [1, 2], 1: [2, 1]})
            manager = b1.broker.log_manager
            await eventually(
                lambda: all(manager.log_dir_of(TOPIC, p) for p in (0, 1)), what="broker 1's logs"
            )
            acked: dict[int, list[bytes]] = {0: [], 1: []}
            async with trio.open_nursery() as producers:
                producers.start_soon(keep_producing, b1, 0, acked[0])
                producers.start_soon(keep_producing, b2, 1, acked[1])
                await eventually(lambda: min(map(len, acked.values())) > 300, 30, what="records")
                before = {p: manager.log_dir_of(TOPIC, p) for p in (0, 1)}
                request = AlterReplicaLogDirsRequest(
                    dirs=[
                        AlterReplicaLogDirsRequest.AlterReplicaLogDir(
                            path=str(next(d for d in dirs if d != before[p]).resolve()),
                            topics=[
                                AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(
                                    name=TOPIC, partitions=[p]
                                )
                            ],
                        )
                        for p in (0, 1)
                    ]
                )
                answer = await call(b1, request, 2)
                assert [
                    (p.partition_index, p.error_code) for r in answer.results for p in r.partitions
                ] == [(0, 0), (1, 0)]
                moved = await eventually(
                    lambda: (
                        not manager.moves
                        and all(manager.log_dir_of(TOPIC, p) != before[p] for p in (0, 1))
                    ),
                    30,
                    what="the moves",
                )
                assert moved
                counts = {p: len(acked[p]) for p in (0, 1)}
                await eventually(
                    lambda: all(len(acked[p]) > counts[p] + 100 for p in (0, 1)),
                    20,
                    what="records after the moves",
                )
                producers.cancel_scope.cancel()
            for p, leader in ((0, b1), (1, b2)):
                values = await fetch_values(leader, p)
                assert values[: len(acked[p])] == acked[p]
            follower = manager.get(TOPIC, 1)
            leader_log = b2.broker.log_manager.get(TOPIC, 1)
            assert follower is not None and leader_log is not None
            assert follower.dir.parent != before[1]
            await eventually(
                lambda: follower.log_end_offset == leader_log.log_end_offset,
                10,
                what="the follower caught up in its new dir",
            )
            await eventually(
                lambda: not any(list(before[p].glob(f"{TOPIC}-{p}*")) for p in (0, 1)),  # type: ignore[union-attr]
                10,
                what="the old copies removed",
            )
            nursery.cancel_scope.cancel()

    trio.run(main)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
