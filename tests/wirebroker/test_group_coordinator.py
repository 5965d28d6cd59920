"""The trio coordinator in-process: parked JoinGroup/SyncGroup requests, the initial delay
timer, `__consumer_offsets` written and replayed across a broker restart, and offsets expiry.

The broker runs on trio's MockClock (autojump) with a clock that follows it, so its timers
pass at once and the tests wait for events, never for wall-clock time.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import trio
import trio.testing

from protocol.errors import ErrorCode
from tests.wirebroker.helpers import make_internal_topics, trio_clock
from wirebroker.config import BrokerConfig
from wirebroker.group.coordinator import GroupCoordinator
from wirebroker.group.state import CommittedOffset, GroupState, JoinResult, SyncResult
from wirebroker.server import serve_broker
from wirebroker.topics import OFFSETS_TOPIC

DELAY_MS = 100


def config(data_dir: Path) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(data_dir),
            "group.initial.rebalance.delay.ms": str(DELAY_MS),
            "offsets.topic.num.partitions": "3",
        }
    )


async def join(groups: GroupCoordinator, client_id: str, out: dict[str, JoinResult]) -> None:
    out[client_id] = await groups.join(
        "g",
        member_id="",
        group_instance_id=None,
        client_id=client_id,
        client_host="/127.0.0.1",
        rebalance_timeout_ms=5000,
        session_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[("range", b"sub")],
        require_known_member_id=False,
    )


def test_parked_requests_timers_and_reload(tmp_path: Path) -> None:
    async def first_life() -> tuple[int, set[str]]:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(
                partial(serve_broker, config(tmp_path), clock=trio_clock())
            )
            broker = running.broker
            broker.create_topic("t", 2, 1, {})
            groups = broker.groups
            # Its topic made and saved first: the mock clock would jump while a thread works.
            await make_internal_topics(broker, OFFSETS_TOPIC)
            joined: dict[str, JoinResult] = {}
            with trio.fail_after(5):
                async with trio.open_nursery() as members:
                    started = trio.current_time()
                    members.start_soon(join, groups, "a", joined)
                    members.start_soon(join, groups, "b", joined)
                    await trio.testing.wait_all_tasks_blocked()
                    assert groups.statistics()["parked_joins"] == 2  # the initial delay
                assert trio.current_time() - started >= DELAY_MS / 1000 * 0.9
            a, b = joined["a"], joined["b"]
            assert a.error == b.error == ErrorCode.NONE and a.generation_id == 1
            leader = a if a.member_id == a.leader else b
            follower = b if leader is a else a
            assert len(leader.members) == 2 and follower.members == ()

            synced: dict[str, SyncResult] = {}

            async def sync(result: JoinResult, assignments: dict[str, bytes]) -> None:
                synced[result.member_id] = await groups.sync(
                    "g",
                    member_id=result.member_id,
                    group_instance_id=None,
                    generation_id=1,
                    protocol_type="consumer",
                    protocol_name="range",
                    assignments=assignments,
                )

            with trio.fail_after(5):
                async with trio.open_nursery() as members:
                    members.start_soon(sync, follower, {})
                    await trio.testing.wait_all_tasks_blocked()
                    assert groups.statistics()["parked_syncs"] == 1
                    members.start_soon(
                        sync, leader, {leader.member_id: b"L", follower.member_id: b"F"}
                    )
            assert synced[follower.member_id].assignment == b"F"
            error, codes = await groups.group_manager.commit(
                "g", leader.member_id, None, 1, [("t", 1, CommittedOffset(42, 0, "meta", 7))]
            )
            assert (error, codes) == (ErrorCode.NONE, [ErrorCode.NONE])
            assert groups.statistics()["Stable"] == 1
            nursery.cancel_scope.cancel()
        return 1, {a.member_id, b.member_id}

    async def second_life(generation: int, member_ids: set[str]) -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(serve_broker, config(tmp_path))
            with trio.fail_after(10):
                await running.broker.groups.group_manager.wait_loaded()
            group = running.broker.groups.describe("g")
            assert group is not None
            assert (group.state, group.generation_id) == (GroupState.STABLE, generation)
            assert set(group.members) == member_ids
            assert group.offsets[("t", 1)] == CommittedOffset(42, 0, "meta", 7)
            assignments = {m.assignment for m in group.members.values()}
            assert assignments == {b"L", b"F"}
            nursery.cancel_scope.cancel()

    generation, member_ids = trio.run(
        first_life, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    trio.run(second_life, generation, member_ids)


def test_expired_offsets_and_their_empty_group_are_gone_across_a_restart(tmp_path: Path) -> None:
    """Expiry writes tombstones: the group left without offsets stays gone after a restart,
    the group whose offsets are recent stays with them."""
    day_ms = 24 * 3_600_000

    async def first_life() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(serve_broker, config(tmp_path))
            groups: GroupCoordinator = running.broker.groups
            manager = groups.group_manager
            await make_internal_topics(running.broker, OFFSETS_TOPIC)
            now = running.broker.now_ms()
            for group_id, committed_at in (("old", now - 8 * day_ms), ("recent", now)):
                error, codes = await manager.commit(
                    group_id, "", None, -1, [("t", 0, CommittedOffset(1, -1, "", committed_at))]
                )
                assert (error, codes) == (ErrorCode.NONE, [ErrorCode.NONE])
            manager.expire_offsets(now)  # the default retention: 7 days
            assert groups.describe("old") is None and manager.fetch("old") == {}
            assert manager.fetch("recent")[("t", 0)].offset == 1
            nursery.cancel_scope.cancel()

    async def second_life() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(serve_broker, config(tmp_path))
            groups = running.broker.groups
            with trio.fail_after(10):
                await groups.group_manager.wait_loaded()
            assert groups.describe("old") is None
            assert groups.group_manager.fetch("recent")[("t", 0)].offset == 1
            nursery.cancel_scope.cancel()

    trio.run(first_life)
    trio.run(second_life)
