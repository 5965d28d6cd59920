"""The group and offset APIs at every version, over the wire with our codec (no client library).

Real clients each pick one version per API; these tests walk all the others: FindCoordinator
v0-6 (batched keys from v4), a whole join/sync/heartbeat/leave life at each JoinGroup version,
OffsetCommit and OffsetFetch v0-9 (metadata kept verbatim, multi-group fetch from v8),
DescribeGroups, ListGroups (state filter), DeleteGroups and OffsetDelete.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.heartbeat import HeartbeatRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.leave_group import LeaveGroupRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.sync_group import SyncGroupRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    find_coordinator,
    make_coordinator_topics,
    offset_commit_request,
    offset_delete_request,
)

pytestmark = pytest.mark.integration

E = ErrorCode
BROKER_PROPERTIES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


@pytest.fixture(autouse=True)
def _offsets_topic(broker: BrokerProcess) -> None:
    """The raw requests below skip the coordinator lookup that creates `__consumer_offsets`."""
    make_coordinator_topics(broker.bootstrap, (0,))


def new_group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def join(
    c: RawClient, group: str, version: int, topic: str, instance: str | None = None
) -> tuple[str, int, str]:
    """Join (with the MEMBER_ID_REQUIRED round trip at v4+); (member id, generation, leader)."""
    request = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=subscription(topic))
        ],
    )
    r = c.request(request, version)
    if version >= 4 and instance is None:
        assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id
        request.member_id = r.member_id
        r = c.request(request, version)
    assert r.error_code == E.NONE, r
    assert r.protocol_name == "range"
    return r.member_id, r.generation_id, r.leader


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator(broker: BrokerProcess, version: int) -> None:
    with RawClient(broker.bootstrap) as c:
        if version >= 4:
            request = FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"])
            r = find_coordinator(c, request, version)
            assert [(x.key, x.error_code, x.port) for x in r.coordinators] == [
                ("a", E.NONE, broker.port),
                ("b", E.NONE, broker.port),
            ]
            request = FindCoordinatorRequest(key_type=1, coordinator_keys=["txn"])
            r = find_coordinator(c, request, version)
            assert r.coordinators[0].error_code == E.NONE
            r = c.request(FindCoordinatorRequest(key_type=7, coordinator_keys=["x"]), version)
            assert r.coordinators[0].error_code == E.INVALID_REQUEST
        else:
            r = find_coordinator(c, FindCoordinatorRequest(key="a", key_type=0), version)
            assert (r.error_code, r.host, r.port) == (E.NONE, "127.0.0.1", broker.port)
            if version >= 1:
                request = FindCoordinatorRequest(key="t", key_type=1)
                assert find_coordinator(c, request, version).error_code == E.NONE


@pytest.mark.parametrize("version", range(10))
def test_group_life_at_every_join_version(broker: BrokerProcess, topic: str, version: int) -> None:
    create_topic(broker.bootstrap, topic, 2)
    group = new_group()
    sync_v, hb_v, leave_v = min(version, 5), min(version, 4), min(version, 5)
    with RawClient(broker.bootstrap) as c:
        member, generation, leader = join(c, group, version, topic)
        assert leader == member and generation == 1
        r = c.request(
            SyncGroupRequest(
                group_id=group,
                generation_id=generation,
                member_id=member,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[
                    SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"A")
                ],
            ),
            sync_v,
        )
        assert (r.error_code, bytes(r.assignment)) == (E.NONE, b"A")
        hb = HeartbeatRequest(group_id=group, generation_id=generation, member_id=member)
        assert c.request(hb, hb_v).error_code == E.NONE
        hb.generation_id = generation + 5
        assert c.request(hb, hb_v).error_code == E.ILLEGAL_GENERATION
        described = c.request(DescribeGroupsRequest(groups=[group]), min(version, 5)).groups[0]
        assert (described.group_state, described.protocol_data) == ("Stable", "range")
        assert bytes(described.members[0].member_assignment) == b"A"
        if leave_v < 3:
            r = c.request(LeaveGroupRequest(group_id=group, member_id=member), leave_v)
            assert r.error_code == E.NONE
        else:
            leave = LeaveGroupRequest(
                group_id=group,
                members=[
                    LeaveGroupRequest.MemberIdentity(member_id=member),
                    LeaveGroupRequest.MemberIdentity(member_id="nobody"),
                ],
            )
            r = c.request(leave, leave_v)
            assert [m.error_code for m in r.members] == [E.NONE, E.UNKNOWN_MEMBER_ID]
        described = c.request(DescribeGroupsRequest(groups=[group]), 0).groups[0]
        assert described.group_state == "Empty" and not described.members


@pytest.mark.parametrize("version", range(10))
def test_offset_commit_and_fetch_every_version(
    broker: BrokerProcess, topic: str, version: int
) -> None:
    create_topic(broker.bootstrap, topic, 3)
    group = new_group()
    metadata = 'meta: ünïcödé {"k": 1}'
    with RawClient(broker.bootstrap) as c:
        commit = OffsetCommitRequest(
            group_id=group,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=17,
                            committed_leader_epoch=0,
                            committed_metadata=metadata,
                        ),
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=1, committed_offset=4, committed_metadata=None
                        ),
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=9, committed_offset=1
                        ),
                    ],
                )
            ],
        )
        r = c.request(commit, version)
        codes = [p.error_code for p in r.topics[0].partitions]
        assert codes == [E.NONE, E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]
        indexes = [0, 1, 2]
        if version >= 8:
            request = OffsetFetchRequest(
                groups=[
                    OffsetFetchRequest.OffsetFetchRequestGroup(
                        group_id=group,
                        topics=[
                            OffsetFetchRequest.OffsetFetchRequestTopics(
                                name=topic, partition_indexes=indexes
                            )
                        ],
                    ),
                    OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None),
                    OffsetFetchRequest.OffsetFetchRequestGroup(group_id=new_group(), topics=None),
                ],
                require_stable=True,
            )
            groups = c.request(request, version).groups
            partitions = groups[0].topics[0].partitions
            assert [p.partition_index for p in groups[1].topics[0].partitions] == [0, 1]
            assert groups[2].error_code == E.NONE and groups[2].topics == []
        else:
            request = OffsetFetchRequest(
                group_id=group,
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopic(
                        name=topic, partition_indexes=indexes
                    )
                ],
                require_stable=version >= 7,
            )
            partitions = c.request(request, version).topics[0].partitions
            if version >= 2:
                request.topics = None
                every = c.request(request, version).topics
                assert [p.partition_index for p in every[0].partitions] == [0, 1]
        found = [(p.committed_offset, p.metadata) for p in partitions]
        assert found == [(17, metadata), (4, ""), (-1, "")]
        if version >= 5:
            assert partitions[0].committed_leader_epoch == (0 if version >= 6 else -1)


def test_commit_generation_fencing(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    group = new_group()
    with RawClient(broker.bootstrap) as c:
        member, generation, _ = join(c, group, 9, topic)

        def commit(member_id: str, gen: int) -> ErrorCode:
            request = offset_commit_request(
                group, topic, {0: 1}, generation_id_or_member_epoch=gen, member_id=member_id
            )
            return ErrorCode(c.request(request, 9).topics[0].partitions[0].error_code)

        assert commit(member, generation) == E.REBALANCE_IN_PROGRESS  # not synced yet
        c.request(SyncGroupRequest(group_id=group, generation_id=generation, member_id=member), 5)
        assert commit(member, generation) == E.NONE
        assert commit(member, generation - 1) == E.ILLEGAL_GENERATION
        assert commit("stranger", generation) == E.UNKNOWN_MEMBER_ID
        assert commit("", -1) == E.UNKNOWN_MEMBER_ID  # admin commits only while Empty


@pytest.mark.parametrize("version", [5, 8, 9])
def test_static_member_replaced_fences_the_old_one(
    broker: BrokerProcess, topic: str, version: int
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    group = new_group()
    with RawClient(broker.bootstrap) as c:
        old, generation, _ = join(c, group, 5, topic, instance="inst-1")
        c.request(SyncGroupRequest(group_id=group, generation_id=generation, member_id=old), 3)
        new, generation2, leader = join(c, group, version, topic, instance="inst-1")
        assert new != old and generation2 == generation  # no rebalance for a static rejoin
        assert leader == new  # the leader came back
        hb = HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=old, group_instance_id="inst-1"
        )
        assert c.request(hb, 4).error_code == E.FENCED_INSTANCE_ID


def test_list_describe_delete_and_offset_delete(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    group = new_group()
    with RawClient(broker.bootstrap) as c:
        member, generation, _ = join(c, group, 9, topic)
        c.request(SyncGroupRequest(group_id=group, generation_id=generation, member_id=member), 5)
        c.request(
            offset_commit_request(
                group, topic, {0: 3}, generation_id_or_member_epoch=generation, member_id=member
            ),
            9,
        )
        for version in range(6):
            listed = c.request(ListGroupsRequest(), version).groups
            assert group in {g.group_id for g in listed}
        stable = c.request(ListGroupsRequest(states_filter=["stable"]), 4).groups
        empty = c.request(ListGroupsRequest(states_filter=["Empty"]), 4).groups
        assert group in {g.group_id for g in stable} and group not in {g.group_id for g in empty}
        classic = c.request(ListGroupsRequest(types_filter=["classic"]), 5).groups
        assert group in {g.group_id for g in classic}
        assert c.request(ListGroupsRequest(types_filter=["consumer"]), 5).groups == []

        delete_offsets = offset_delete_request(group, topic, [0])
        r = c.request(delete_offsets, 0)
        assert r.topics[0].partitions[0].error_code == E.GROUP_SUBSCRIBED_TO_TOPIC
        for version in range(3):
            r = c.request(DeleteGroupsRequest(groups_names=[group]), version)
            assert r.results[0].error_code == E.NON_EMPTY_GROUP
        c.request(LeaveGroupRequest(group_id=group, member_id=member), 0)
        r = c.request(delete_offsets, 0)
        assert (r.error_code, r.topics[0].partitions[0].error_code) == (E.NONE, E.NONE)
        # Its last offset deleted, the Empty group is gone too (Kafka's cleanupGroupMetadata).
        assert group not in {g.group_id for g in c.request(ListGroupsRequest(), 4).groups}
        simple = new_group()  # offsets only, committed without a generation
        commit = offset_commit_request(simple, topic, {0: 3})
        assert c.request(commit, 9).topics[0].partitions[0].error_code == E.NONE
        r = c.request(DeleteGroupsRequest(groups_names=[simple, group, "no-such-group"]), 2)
        assert [x.error_code for x in r.results] == [
            E.NONE,
            E.GROUP_ID_NOT_FOUND,
            E.GROUP_ID_NOT_FOUND,
        ]
        for version in range(6):
            for gone in (simple, group):
                described = c.request(DescribeGroupsRequest(groups=[gone]), version).groups[0]
                assert (described.error_code, described.group_state) == (E.NONE, "Dead")


def test_session_timeout_out_of_bounds_is_refused(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as c:
        for timeout in (1, 10**9):
            request = JoinGroupRequest(
                group_id=new_group(),
                session_timeout_ms=timeout,
                rebalance_timeout_ms=1000,
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            )
            assert c.request(request, 9).error_code == E.INVALID_SESSION_TIMEOUT


def test_a_failed_first_join_leaves_no_group(broker: BrokerProcess) -> None:
    group = new_group()
    with RawClient(broker.bootstrap) as c:
        request = JoinGroupRequest(
            group_id=group, session_timeout_ms=10_000, protocol_type="consumer", protocols=[]
        )
        assert c.request(request, 9).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert group not in {g.group_id for g in c.request(ListGroupsRequest(), 5).groups}
