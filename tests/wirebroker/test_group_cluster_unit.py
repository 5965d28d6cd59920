"""The group coordinator in cluster mode, in-process (the test plays the controller): one
`__consumer_offsets` partition loaded when this broker becomes its leader and unloaded when it
follows or stops it, NOT_COORDINATOR from every group API for groups led elsewhere,
COORDINATOR_LOAD_IN_PROGRESS while their partition loads (in a worker thread, held here), and
writes that wait for the high watermark (unstable for `require_stable` meanwhile)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.api import decode_response, encode_response_chunks
from protocol.errors import ErrorCode
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.headers import RequestHeader, ResponseHeader
from protocol.messages.heartbeat import HeartbeatRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.leave_group import LeaveGroupRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_delete import OffsetDeleteRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.sync_group import SyncGroupRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from tests.wirebroker.helpers import eventually
from tests.wirebroker.test_replication_unit import _materialize, roundtrip, update_metadata
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig, Listener
from wirebroker.coordinator_store import Origin, partition_for
from wirebroker.dispatch import RequestContext, dispatch
from wirebroker.group.coordinator import GroupCoordinator
from wirebroker.group.loader import GroupLoad
from wirebroker.group.metadata_manager import GroupMetadataManager
from wirebroker.group.state import CommittedOffset, JoinResult, SyncResult
from wirebroker.partition import TopicPartition
from wirebroker.topics import OFFSETS_TOPIC

OFFSETS_ID = uuid.UUID(int=0x0FF5E7)
PARTITIONS = 2


def group_on(index: int) -> str:
    """A group id whose offsets partition is `index`."""
    return next(f"g{i}" for i in range(1000) if partition_for(f"g{i}", PARTITIONS) == index)


G0, G1 = group_on(0), group_on(1)


@asynccontextmanager
async def cluster_broker(tmp_path: Path, **extra: str) -> AsyncIterator[Broker]:
    """Broker 1 in cluster mode (the test is its controller), its coordinator running."""
    props = {
        "broker.id": "1",
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / "data"),
        "wirebroker.external.controller": "true",
        "offsets.topic.num.partitions": str(PARTITIONS),
        "offsets.commit.timeout.ms": "300",
        "group.initial.rebalance.delay.ms": "5000",
    }
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    b = Broker.open(BrokerConfig.from_properties(props))
    b.advertised = [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    b.replica_manager.update_metadata(update_metadata(), 8)  # topic "t" exists (led by 2)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(b.serve_coordinators)
            yield b
            nursery.cancel_scope.cancel()
    finally:
        b.close()


def run(tmp_path: Path, test: Callable[[Broker], Awaitable[None]], **extra: str) -> None:
    async def main() -> None:
        async with cluster_broker(tmp_path, **extra) as b:
            with trio.fail_after(10):
                await test(b)

    trio.run(main)


def leader_and_isr(
    index: int, leader: int, epoch: int, replicas: list[int], isr: list[int] | None = None
) -> LeaderAndIsrRequest:
    state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name=OFFSETS_TOPIC,
        partition_index=index,
        controller_epoch=1,
        leader=leader,
        leader_epoch=epoch,
        isr=isr if isr is not None else replicas,
        partition_epoch=epoch,
        replicas=replicas,
    )
    return LeaderAndIsrRequest(
        controller_id=9,
        controller_epoch=1,
        broker_epoch=-1,
        topic_states=[
            LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name=OFFSETS_TOPIC, topic_id=OFFSETS_ID, partition_states=[state]
            )
        ],
        live_leaders=[
            LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=2, host_name="h", port=1)
        ],
    )


async def lead(b: Broker, index: int, epoch: int, replicas: list[int] | None = None) -> None:
    """Make broker 1 the leader of offsets partition `index`, and wait for its load."""
    response = await b.replica_manager.become_leader_or_follower(
        leader_and_isr(index, 1, epoch, replicas or [1]), 7
    )
    assert [p.error_code for t in response.topics for p in t.partition_errors] == [0]
    with trio.fail_after(10):
        await b.groups.group_manager.wait_loaded(index)  # replayed in a worker thread


async def follow(b: Broker, index: int, epoch: int) -> None:
    await b.replica_manager.become_leader_or_follower(leader_and_isr(index, 2, epoch, [1, 2]), 7)


async def call(b: Broker, body: Any, version: int) -> Any:
    """Through the codec and the dispatcher, as on the wire."""
    header = RequestHeader(
        request_api_key=body.API_KEY, request_api_version=version, correlation_id=7, client_id="c"
    )
    ctx = RequestContext(b, header, "127.0.0.1", "PLAINTEXT")
    response = await dispatch(ctx, roundtrip(body, version))
    chunks = encode_response_chunks(
        ResponseHeader(correlation_id=7), response, body.API_KEY, version
    )
    data = b"".join(_materialize(chunk) for chunk in chunks)
    return decode_response(data, body.API_KEY, version).body


async def commit(groups: GroupMetadataManager, group: str, offset: int) -> list[ErrorCode]:
    error, codes = await groups.commit(
        group, "", None, -1, [("t", 0, CommittedOffset(offset, -1, "m", 1))]
    )
    assert error == ErrorCode.NONE
    return codes


async def join(groups: GroupCoordinator, group: str) -> JoinResult:
    return await groups.join(
        group,
        member_id="",
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        rebalance_timeout_ms=10_000,
        session_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=[("range", b"")],
        require_known_member_id=False,
    )


def test_partition_loads_on_election_and_unloads_on_resignation(tmp_path: Path) -> None:
    run(tmp_path, _partition_loads_on_election_and_unloads_on_resignation)


async def _partition_loads_on_election_and_unloads_on_resignation(broker: Broker) -> None:
    groups = broker.groups
    manager = groups.group_manager
    assert manager.coordinator_error(G0) == ErrorCode.NOT_COORDINATOR  # nothing led yet
    await lead(broker, 0, 0)
    await lead(broker, 1, 0)
    assert manager.owned == {0, 1}
    assert await commit(manager, G0, 5) == [ErrorCode.NONE]
    assert await commit(manager, G1, 7) == [ErrorCode.NONE]
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            parked: list[JoinResult] = []

            async def park() -> None:
                parked.append(await join(groups, G0))

            nursery.start_soon(park)
            await eventually(  # for the initial rebalance delay
                lambda: groups.statistics()["parked_joins"] == 1, 1, what="the join parked"
            )
            await follow(broker, 0, 1)  # partition 0 moves to broker 2: its groups go
    assert parked[0].error == ErrorCode.NOT_COORDINATOR
    assert manager.owned == {1} and G0 not in manager.groups and G1 in manager.groups
    assert manager.coordinator_error(G0) == ErrorCode.NOT_COORDINATOR
    assert await manager.commit(G0, "", None, -1, []) == (ErrorCode.NOT_COORDINATOR, [])
    assert groups.statistics()["parked_joins"] == 0

    # Leader again: the partition is replayed from its log, offsets and all.
    await lead(broker, 0, 2)
    assert manager.owned == {0, 1}
    assert manager.fetch(G0)[("t", 0)].offset == 5
    # A new leader epoch while leading keeps what is in memory (nothing was lost).
    manager.groups[G0].offsets[("t", 0)] = CommittedOffset(6, -1, "", 1)
    await lead(broker, 0, 3)
    assert manager.fetch(G0)[("t", 0)].offset == 6

    # StopReplica unloads too (Kafka's onResignation), with or without deletion.
    stop = StopReplicaRequest(
        controller_id=9,
        controller_epoch=1,
        topic_states=[
            StopReplicaRequest.StopReplicaTopicState(
                topic_name=OFFSETS_TOPIC,
                partition_states=[
                    StopReplicaRequest.StopReplicaPartitionState(
                        partition_index=1, leader_epoch=0, delete_partition=False
                    )
                ],
            )
        ],
    )
    await broker.replica_manager.stop_replicas(stop, 4)
    assert manager.owned == {0} and G1 not in manager.groups


def test_every_group_api_answers_not_coordinator(tmp_path: Path) -> None:
    run(tmp_path, _every_group_api_answers_not_coordinator)


async def _every_group_api_answers_not_coordinator(broker: Broker) -> None:
    await lead(broker, 1, 0)  # we coordinate G1, not G0
    not_coordinator = ErrorCode.NOT_COORDINATOR
    assert broker.groups.group_manager.coordinator_error(G1) == ErrorCode.NONE
    await commit(broker.groups.group_manager, G1, 3)

    joined = await call(
        broker,
        JoinGroupRequest(
            group_id=G0,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        ),
        9,
    )
    assert joined.error_code == not_coordinator
    synced = await call(broker, SyncGroupRequest(group_id=G0, generation_id=1, member_id="m"), 5)
    assert synced.error_code == not_coordinator
    beat = await call(broker, HeartbeatRequest(group_id=G0, generation_id=1, member_id="m"), 4)
    assert beat.error_code == not_coordinator
    left = await call(broker, LeaveGroupRequest(group_id=G0, member_id="m"), 0)
    assert left.error_code == not_coordinator
    members = [LeaveGroupRequest.MemberIdentity(member_id="m")]
    left = await call(broker, LeaveGroupRequest(group_id=G0, members=members), 5)
    assert left.error_code == not_coordinator and left.members == []

    described = await call(broker, DescribeGroupsRequest(groups=[G0, G1]), 5)
    assert [(d.group_id, d.error_code, d.group_state) for d in described.groups] == [
        (G0, not_coordinator, ""),
        (G1, ErrorCode.NONE, "Empty"),
    ]
    listed = await call(broker, ListGroupsRequest(), 4)
    assert [g.group_id for g in listed.groups] == [G1]
    deleted = await call(broker, DeleteGroupsRequest(groups_names=[G0]), 2)
    assert [r.error_code for r in deleted.results] == [not_coordinator]

    partitions = [OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0)]
    committed = await call(
        broker,
        OffsetCommitRequest(
            group_id=G0,
            generation_id_or_member_epoch=-1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=partitions)],
        ),
        8,
    )
    assert [p.error_code for t in committed.topics for p in t.partitions] == [not_coordinator]

    wanted = [OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]
    old = await call(broker, OffsetFetchRequest(group_id=G0, topics=wanted), 1)
    assert [(p.error_code, p.committed_offset) for t in old.topics for p in t.partitions] == [
        (not_coordinator, -1)
    ]
    v7 = await call(broker, OffsetFetchRequest(group_id=G0, topics=wanted), 7)
    assert v7.error_code == not_coordinator and v7.topics == []
    batched = [
        OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=g,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name="t", partition_indexes=[0])],
        )
        for g in (G0, G1)
    ]
    v8 = await call(broker, OffsetFetchRequest(groups=batched), 8)
    assert [(g.group_id, g.error_code) for g in v8.groups] == [
        (G0, not_coordinator),
        (G1, ErrorCode.NONE),
    ]
    assert v8.groups[1].topics[0].partitions[0].committed_offset == 3

    topics = [
        OffsetDeleteRequest.OffsetDeleteRequestTopic(
            name="t",
            partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)],
        )
    ]
    dropped = await call(broker, OffsetDeleteRequest(group_id=G0, topics=topics), 0)
    assert dropped.error_code == not_coordinator


def test_writes_wait_for_the_high_watermark(tmp_path: Path) -> None:
    run(tmp_path, _writes_wait_for_the_high_watermark)


async def _writes_wait_for_the_high_watermark(broker: Broker) -> None:
    groups = broker.groups.group_manager
    await lead(broker, 0, 0, [1, 2])  # ISR [1, 2]: broker 2 must fetch before a write is durable
    p = broker.partitions[TopicPartition(OFFSETS_TOPIC, 0)]

    # Broker 2 never fetches: the commit times out (offsets.commit.timeout.ms), not applied.
    assert await commit(groups, G0, 5) == [ErrorCode.REQUEST_TIMED_OUT]
    assert groups.fetch(G0) == {}

    # Broker 2 fetches the write: the commit is answered and visible.
    codes: list[ErrorCode] = []
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:

            async def committing() -> None:
                codes.extend(await commit(groups, G0, 6))

            written = p.log_end_offset
            nursery.start_soon(committing)
            await eventually(lambda: p.log_end_offset > written, 1, what="the commit in the log")
            assert not codes and groups.fetch(G0) == {}
            # in flight: OffsetFetch require_stable calls it unstable (pendingOffsetCommits)
            assert groups.unstable(G0, ("t", 0)) and not groups.unstable(G0, ("t", 1))
            leo = p.log_end_offset
            p.update_follower_fetch_state(2, leo, 0, broker.now_ms(), leo)
    assert codes == [ErrorCode.NONE] and groups.fetch(G0)[("t", 0)].offset == 6
    assert not groups.unstable(G0, ("t", 0))

    # Leadership lost while waiting: NOT_COORDINATOR, as Kafka maps NOT_LEADER_OR_FOLLOWER.
    codes.clear()
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:

            async def lost() -> None:
                codes.extend(await commit(groups, G0, 7))

            written = p.log_end_offset
            nursery.start_soon(lost)
            await eventually(lambda: p.log_end_offset > written, 1, what="the commit in the log")
            await follow(broker, 0, 1)
    assert codes == [ErrorCode.NOT_COORDINATOR]


def test_under_min_insync_replicas_the_coordinator_is_not_available(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        await lead(broker, 0, 0, [1, 2])  # ISR [1, 2]
        request = leader_and_isr(0, 1, 1, [1, 2], isr=[1])
        await broker.replica_manager.become_leader_or_follower(request, 7)
        assert await commit(broker.groups.group_manager, G0, 5) == [
            ErrorCode.COORDINATOR_NOT_AVAILABLE
        ]
        assert broker.groups.group_manager.fetch(G0) == {}

    run(tmp_path, test, min_insync_replicas="2")


def test_sync_group_answers_once_the_group_is_replicated(tmp_path: Path) -> None:
    async def test(broker: Broker) -> None:
        groups = broker.groups
        await lead(broker, 0, 0, [1, 2])
        p = broker.partitions[TopicPartition(OFFSETS_TOPIC, 0)]

        async def generation(member_id: str = "") -> tuple[str, int]:
            joined = await groups.join(
                G0,
                member_id=member_id,
                group_instance_id=None,
                client_id="c",
                client_host="/127.0.0.1",
                rebalance_timeout_ms=10_000,
                session_timeout_ms=10_000,
                protocol_type="consumer",
                protocols=[("range", b"")],
                require_known_member_id=False,
            )
            assert joined.error == ErrorCode.NONE, joined
            return joined.member_id, joined.generation_id

        async def sync(member_id: str, generation_id: int) -> SyncResult:
            return await groups.sync(
                G0,
                member_id=member_id,
                group_instance_id=None,
                generation_id=generation_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments={member_id: b"mine"},
            )

        # Broker 2 does not fetch: the group record never commits, the member is told the
        # coordinator is not available (Kafka's storeGroup mapping of a timeout).
        member_id, generation_id = await generation()
        synced = await sync(member_id, generation_id)
        assert synced.error == ErrorCode.COORDINATOR_NOT_AVAILABLE

        # Broker 2 catches up; the next generation's reply (with the assignment) waits for
        # its next fetch.
        leo = p.log_end_offset
        p.update_follower_fetch_state(2, leo, 0, broker.now_ms(), leo)
        member_id, generation_id = await generation(member_id)  # the member rejoins
        answers: list[SyncResult] = []
        async with trio.open_nursery() as nursery:

            async def syncing() -> None:
                answers.append(await sync(member_id, generation_id))

            written = p.log_end_offset
            nursery.start_soon(syncing)
            await eventually(
                lambda: p.log_end_offset > written, 5, what="the group's assignment in the log"
            )
            assert not answers
            leo = p.log_end_offset
            p.update_follower_fetch_state(2, leo, 0, broker.now_ms(), leo)
        assert answers[0].error == ErrorCode.NONE and answers[0].assignment == b"mine"

    run(tmp_path, test, group_initial_rebalance_delay_ms="0")


def test_the_topics_partition_count_decides_over_the_config(tmp_path: Path) -> None:
    """As Kafka: once `__consumer_offsets` exists, its partition count maps groups (it may
    have been created by a broker with another `offsets.topic.num.partitions`)."""

    async def test(broker: Broker) -> None:
        group = next(
            g
            for g in (f"g{i}" for i in range(1000))
            if partition_for(g, 3) != partition_for(g, PARTITIONS)
        )
        assert broker.groups.group_manager.partition_of(group) == partition_for(group, PARTITIONS)
        request = update_metadata()
        states = [
            UpdateMetadataRequest.UpdateMetadataPartitionState(
                topic_name=OFFSETS_TOPIC,
                partition_index=i,
                controller_epoch=1,
                leader=2,
                leader_epoch=0,
                isr=[2],
                zk_version=0,
                replicas=[2],
                offline_replicas=[],
            )
            for i in range(3)
        ]
        request.topic_states = [
            UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=OFFSETS_TOPIC, topic_id=OFFSETS_ID, partition_states=states
            )
        ]
        broker.replica_manager.update_metadata(request, 8)
        assert broker.groups.group_manager.partition_of(group) == partition_for(group, 3)
        found = await call(broker, FindCoordinatorRequest(key=group, key_type=0), 3)
        assert found.error_code == ErrorCode.NONE and found.node_id == 2

    run(tmp_path, test)


def test_a_loading_partition_answers_load_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay runs in a worker thread, held here by an event: meanwhile the loop answers,
    with COORDINATOR_LOAD_IN_PROGRESS for the partition's groups; leadership lost during the
    load drops it."""
    entered, release = threading.Event(), threading.Event()
    replay = GroupLoad.replay

    def held(self: GroupLoad, key: bytes, value: bytes | None, origin: Origin) -> None:
        entered.set()
        release.wait(10)
        replay(self, key, value, origin)

    async def test(broker: Broker) -> None:
        groups = broker.groups.group_manager
        await lead(broker, 0, 0)
        await lead(broker, 1, 0)
        assert await commit(groups, G0, 5) == [ErrorCode.NONE]
        await follow(broker, 0, 1)
        monkeypatch.setattr(GroupLoad, "replay", held)
        await broker.replica_manager.become_leader_or_follower(leader_and_isr(0, 1, 2, [1]), 7)
        assert groups.coordinator_error(G0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert await trio.to_thread.run_sync(entered.wait, 5)
        await _every_group_api_answers(broker, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        assert groups.coordinator_error(G1) == ErrorCode.NONE  # its partition is loaded

        await follow(broker, 0, 3)  # leadership moves on while the thread still reads
        assert groups.coordinator_error(G0) == ErrorCode.NOT_COORDINATOR
        release.set()
        nursery = groups._nursery
        assert nursery is not None
        await eventually(
            lambda: not any("PartitionLoads._run" in t.name for t in nursery.child_tasks),
            5,
            0.01,
            "the cancelled load's task to end",
        )
        assert G0 not in groups.groups and groups.owned == {1}  # what it read was dropped

        await lead(broker, 0, 4)
        assert groups.owned == {0, 1} and groups.fetch(G0)[("t", 0)].offset == 5

    run(tmp_path, test)


async def _every_group_api_answers(broker: Broker, error: ErrorCode) -> None:
    """Every group API about G0 answers `error` (Heartbeat NONE while loading, as Kafka's)."""
    joined = await call(
        broker,
        JoinGroupRequest(
            group_id=G0,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        ),
        9,
    )
    assert joined.error_code == error
    synced = await call(broker, SyncGroupRequest(group_id=G0, generation_id=1, member_id="m"), 5)
    assert synced.error_code == error
    beat = await call(broker, HeartbeatRequest(group_id=G0, generation_id=1, member_id="m"), 4)
    assert beat.error_code == ErrorCode.NONE
    left = await call(broker, LeaveGroupRequest(group_id=G0, member_id="m"), 0)
    assert left.error_code == error
    described = await call(broker, DescribeGroupsRequest(groups=[G0]), 5)
    assert [(d.error_code, d.group_state) for d in described.groups] == [(error, "")]
    listed = await call(broker, ListGroupsRequest(), 4)
    assert listed.error_code == error
    deleted = await call(broker, DeleteGroupsRequest(groups_names=[G0]), 2)
    assert [r.error_code for r in deleted.results] == [error]
    partitions = [OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0)]
    committed = await call(
        broker,
        OffsetCommitRequest(
            group_id=G0,
            generation_id_or_member_epoch=-1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=partitions)],
        ),
        8,
    )
    assert [p.error_code for t in committed.topics for p in t.partitions] == [error]
    wanted = [OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]
    v7 = await call(broker, OffsetFetchRequest(group_id=G0, topics=wanted), 7)
    assert v7.error_code == error and v7.topics == []
    topics = [
        OffsetDeleteRequest.OffsetDeleteRequestTopic(
            name="t",
            partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)],
        )
    ]
    dropped = await call(broker, OffsetDeleteRequest(group_id=G0, topics=topics), 0)
    assert dropped.error_code == error
