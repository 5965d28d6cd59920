"""The pure classic-group state machine, as tables: no trio, no clock, time passed in.

Each test drives a `Group` through JoinGroup / SyncGroup / Heartbeat / LeaveGroup / tick with
explicit millisecond timestamps and checks the replies and states Kafka's classic coordinator
gives in the same situation. The `__consumer_offsets` record codec and offsets expiry (Kafka
3.x's removeExpiredOffsets) are checked here too.
"""

from __future__ import annotations

import struct

import pytest

from protocol.errors import ErrorCode
from protocol.messages.group_coordinator.group_metadata import GroupMetadataValue
from protocol.messages.group_coordinator.offset_commit import OffsetCommitValue
from wirebroker.coordinator_store import partition_for
from wirebroker.group import records
from wirebroker.group.state import CommittedOffset, Group, GroupState, JoinRequest, Outcome

E = ErrorCode
S = GroupState
SESSION, REBALANCE = 10_000, 30_000
RANGE = [("range", b"r")]


def join(
    group: Group,
    member_id: str = "",
    now: int = 0,
    *,
    new: str = "m",
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    require_known: bool = True,
    session: int = SESSION,
    rebalance: int = REBALANCE,
) -> Outcome:
    request = JoinRequest(
        member_id,
        instance,
        "client",
        "/127.0.0.1",
        rebalance,
        session,
        protocol_type,
        RANGE if protocols is None else protocols,
        require_known,
        new,
    )
    return group.join(request, now)


def sync(group: Group, member_id: str, now: int = 0, generation: int | None = None, **a: bytes):
    gen = group.generation_id if generation is None else generation
    return group.sync(member_id, None, gen, None, None, dict(a), now)


def form(group: Group, members: dict[str, list[tuple[str, bytes]]]) -> None:
    """Members join at time 0 (no initial delay), then all rejoin: CompletingRebalance."""
    for mid, protocols in members.items():
        join(group, new=mid, require_known=False, protocols=protocols)
    for mid, protocols in members.items():
        join(group, mid, protocols=protocols)
    assert group.state == S.COMPLETING_REBALANCE


def stable_group(*ids: str) -> Group:
    """A Stable group whose members are `ids` (the first is the leader), at time 0."""
    group = Group("g", 0)
    form(group, dict.fromkeys(ids, RANGE))
    out = sync(group, ids[0], **{mid: mid.encode() for mid in ids})
    assert group.state == S.STABLE, out
    assert group.leader_id == ids[0]
    return group


def test_member_id_required_then_join_with_initial_delay() -> None:
    group = Group("g", initial_rebalance_delay_ms=3000)
    out = join(group, new="a")
    assert out.join_reply is not None
    assert (out.join_reply.error, out.join_reply.member_id) == (E.MEMBER_ID_REQUIRED, "a")
    assert group.state == S.EMPTY and "a" in group.pending_members
    out = join(group, "a", now=10)
    assert out.join_reply is None and not out.joins  # parked for the initial delay
    assert group.state == S.PREPARING_REBALANCE
    assert group.next_deadline() == 3010
    assert not group.tick(3009).joins
    out = group.tick(3010)
    reply = out.joins["a"]
    assert (reply.error, reply.generation_id, reply.leader, reply.protocol_name) == (
        E.NONE,
        1,
        "a",
        "range",
    )
    assert [m.member_id for m in reply.members] == ["a"]
    assert group.state == S.COMPLETING_REBALANCE


def test_old_clients_join_without_member_id_round_trip() -> None:
    group = Group("g", 0)
    out = join(group, new="a", require_known=False)
    assert out.joins["a"].error == E.NONE and group.state == S.COMPLETING_REBALANCE


def test_second_member_triggers_rebalance_completed_when_all_rejoin() -> None:
    group = stable_group("a")
    join(group, new="b")
    out = join(group, "b", now=5)
    assert group.state == S.PREPARING_REBALANCE and not out.joins
    assert group.heartbeat("a", None, 1, 6).error == E.REBALANCE_IN_PROGRESS
    out = join(group, "a", now=7)
    assert set(out.joins) == {"a", "b"}
    assert out.joins["a"].generation_id == 2 and len(out.joins["a"].members) == 2
    assert out.joins["b"].members == ()  # only the leader gets the member list
    follower = sync(group, "b", now=8)
    assert follower.sync_reply is None and not follower.syncs  # waits for the leader
    out = sync(group, "a", now=9, a=b"A", b=b"B")
    assert out.syncs["b"].assignment == b"B" and out.syncs["a"].assignment == b"A"
    assert out.write_group and group.state == S.STABLE


@pytest.mark.parametrize(
    ("case", "member", "generation", "expected"),
    [
        ("stable", "a", 1, E.NONE),
        ("stable", "zz", 1, E.UNKNOWN_MEMBER_ID),
        ("stable", "a", 0, E.ILLEGAL_GENERATION),
        ("preparing", "a", 1, E.REBALANCE_IN_PROGRESS),
        ("completing", "a", 2, E.NONE),
        ("empty", "a", 0, E.UNKNOWN_MEMBER_ID),
    ],
)
def test_heartbeat(case: str, member: str, generation: int, expected: ErrorCode) -> None:
    group = stable_group("a", "b")
    group.generation_id = 1
    if case == "preparing":
        join(group, "a")  # the leader rejoining starts a rebalance
    elif case == "completing":
        join(group, "a")
        join(group, "b")
        assert group.state == S.COMPLETING_REBALANCE
    elif case == "empty":
        group.leave([("a", None), ("b", None)], 0)
        assert group.state == S.EMPTY
    assert group.heartbeat(member, None, generation, 1).error == expected


@pytest.mark.parametrize(
    ("state", "member", "generation", "expected"),
    [
        ("stable", "a", 1, E.NONE),
        ("stable", "a", 7, E.ILLEGAL_GENERATION),
        ("stable", "", -1, E.UNKNOWN_MEMBER_ID),
        ("stable", "zz", 1, E.UNKNOWN_MEMBER_ID),
        ("preparing", "a", 1, E.NONE),  # eager clients commit before rejoining
        ("completing", "a", 2, E.REBALANCE_IN_PROGRESS),
        ("empty", "", -1, E.NONE),  # a simple (admin) commit
    ],
)
def test_commit_validation(state: str, member: str, generation: int, expected: ErrorCode) -> None:
    group = stable_group("a", "b")
    group.generation_id = 1
    if state == "preparing":
        join(group, "a")
    elif state == "completing":
        join(group, "a")
        join(group, "b")
    elif state == "empty":
        group.leave([("a", None), ("b", None)], 0)
    assert group.check_commit(member, None, generation) == expected


def test_session_expiry_removes_member_and_rebalances() -> None:
    group = stable_group("a", "b")
    assert group.next_deadline() == SESSION
    group.heartbeat("a", None, group.generation_id, 4000)
    out = group.tick(SESSION)  # b never heartbeated
    assert "b" not in group.members and group.state == S.PREPARING_REBALANCE
    out = join(group, "a", now=SESSION + 1)
    assert out.joins["a"].generation_id == 3 and len(out.joins["a"].members) == 1


def test_member_not_rejoining_is_dropped_at_rebalance_timeout() -> None:
    group = stable_group("a", "b")
    join(group, "a", now=100)
    # b keeps heartbeating but never rejoins.
    group.heartbeat("b", None, group.generation_id, 9000)
    group.heartbeat("b", None, group.generation_id, 18000)
    group.heartbeat("b", None, group.generation_id, 27000)
    out = group.tick(100 + REBALANCE)
    assert list(group.members) == ["a"] and out.joins["a"].error == E.NONE


def test_leader_that_never_syncs_is_dropped_at_rebalance_timeout() -> None:
    group = stable_group("a", "b")
    join(group, "a", now=0)
    join(group, "b", now=0)
    assert sync(group, "b", now=1).sync_reply is None
    group.heartbeat("b", None, group.generation_id, 9000)
    out = group.tick(REBALANCE)
    assert "a" not in group.members
    assert out.syncs["b"].error == E.REBALANCE_IN_PROGRESS
    assert group.state == S.PREPARING_REBALANCE


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong-generation", E.ILLEGAL_GENERATION),
        ("unknown-member", E.UNKNOWN_MEMBER_ID),
        ("preparing", E.REBALANCE_IN_PROGRESS),
        ("stable", E.NONE),
    ],
)
def test_sync_errors(case: str, expected: ErrorCode) -> None:
    group = stable_group("a", "b")
    gen = group.generation_id
    if case == "wrong-generation":
        out = sync(group, "a", generation=gen - 1)
    elif case == "unknown-member":
        out = sync(group, "zz")
    elif case == "preparing":
        join(group, "a")
        out = sync(group, "b", generation=gen)
    else:
        out = sync(group, "b")
    assert out.sync_reply is not None and out.sync_reply.error == expected
    if case == "stable":
        assert out.sync_reply.assignment == b"b"


def test_leave_then_last_leave_empties_group() -> None:
    group = stable_group("a", "b")
    gen = group.generation_id
    out = group.leave([("b", None), ("nobody", None)], 5)
    assert out.member_errors == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert group.state == S.PREPARING_REBALANCE
    out = group.leave([("a", None)], 6)
    assert group.state == S.EMPTY and group.generation_id == gen + 1 and out.write_group


def test_static_member_rejoin_keeps_assignment_without_rebalance() -> None:
    group = Group("g", 0)
    join(group, new="a1", instance="i-a")
    join(group, new="b1", instance="i-b")
    join(group, "a1", instance="i-a")
    sync(group, "a1", a1=b"A", b1=b"B")
    assert group.state == S.STABLE
    gen = group.generation_id
    out = join(group, new="b2", instance="i-b", now=10)  # restarted with the same instance id
    assert out.join_reply is not None and out.join_reply.member_id == "b2"
    assert group.state == S.STABLE and group.generation_id == gen
    assert group.heartbeat("b1", "i-b", gen, 11).error == E.FENCED_INSTANCE_ID
    assert sync(group, "b2").sync_reply.assignment == b"B"  # type: ignore[union-attr]


def test_static_member_does_not_need_member_id_round_trip() -> None:
    group = Group("g", 0)
    out = join(group, new="a1", instance="i-a")
    assert out.joins["a1"].error == E.NONE


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        ([["range", "roundrobin"], ["roundrobin", "range"], ["roundrobin"]], "roundrobin"),
        ([["range", "roundrobin"], ["range", "roundrobin"]], "range"),
        ([["cooperative-sticky", "range"], ["range", "cooperative-sticky"]], "cooperative-sticky"),
    ],
)
def test_protocol_selection_by_vote(members: list[list[str]], expected: str) -> None:
    group = Group("g", 0)
    form(group, {f"m{i}": [(n, b"") for n in names] for i, names in enumerate(members)})
    assert group.protocol_name == expected


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [("connect", RANGE), ("consumer", [("sticky", b"")]), ("consumer", []), ("", RANGE)],
)
def test_inconsistent_protocol(protocol_type: str, protocols: list[tuple[str, bytes]]) -> None:
    group = stable_group("a")
    out = join(group, new="b", protocol_type=protocol_type, protocols=protocols)
    assert out.join_reply is not None
    assert out.join_reply.error == E.INCONSISTENT_GROUP_PROTOCOL


def test_records_round_trip() -> None:
    value = OffsetCommitValue(offset=42, leader_epoch=3, metadata="m", commit_timestamp=7)
    decoded = records.decode(records.offset_key("g", "t", 5), records.offset_value(value))
    assert decoded == records.OffsetRecord("g", "t", 5, value)
    tomb = records.decode(records.offset_key("g", "t", 5), None)
    assert tomb == records.OffsetRecord("g", "t", 5, None)
    meta = GroupMetadataValue(protocol_type="consumer", generation=3, protocol="range", leader="a")
    decoded_group = records.decode(records.group_key("g"), records.group_value(meta))
    assert decoded_group == records.GroupRecord("g", meta)
    assert records.offset_key("g", "t", 5)[:2] == b"\x00\x01"
    assert records.group_key("g")[:2] == b"\x00\x02"


@pytest.mark.parametrize(
    ("group_id", "expected"), [("test", 48), ("my-group", 12), ("", 0), ("polygenelubricants", 0)]
)
def test_partition_for_matches_java_hash(group_id: str, expected: int) -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0.
    assert partition_for(group_id, 50) == expected


def test_record_bytes_are_kafkas_layout() -> None:
    # key: int16 version 1, then group, topic (int16-length strings) and int32 partition
    assert records.offset_key("g", "t", 2) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x02"
    # value v3: int64 offset, int32 leader epoch, string metadata, int64 commit timestamp
    value = OffsetCommitValue(offset=5, leader_epoch=-1, metadata="m", commit_timestamp=9)
    assert records.offset_value(value) == (
        b"\x00\x03" + (5).to_bytes(8, "big") + b"\xff\xff\xff\xff\x00\x01m" + (9).to_bytes(8, "big")
    )
    assert records.group_key("g") == b"\x00\x02\x00\x01g"


def subscribed(*topics: str) -> list[tuple[str, bytes]]:
    """The range protocol with a ConsumerProtocolSubscription v0 of `topics`."""
    data = struct.pack(">hi", 0, len(topics))
    for t in topics:
        data += struct.pack(">h", len(t)) + t.encode()
    return [("range", data + struct.pack(">i", -1))]


def committed(group: Group, *at: tuple[str, int]) -> None:
    """Offsets of partition 0 of each topic, committed at the given times."""
    for topic, timestamp in at:
        group.offsets[(topic, 0)] = CommittedOffset(1, -1, "", timestamp)


RETENTION = 1_000


def test_offsets_of_a_group_without_protocol_expire_each_after_its_commit() -> None:
    group = Group("simple", 0)  # offsets committed without group management
    committed(group, ("old", 0), ("new", 500))
    assert group.expire_offsets(999, RETENTION) == []
    assert group.expire_offsets(1_000, RETENTION) == [("old", 0)]
    assert group.expire_offsets(1_499, RETENTION) == []
    assert group.expire_offsets(1_500, RETENTION) == [("new", 0)]
    assert group.offsets == {}


def test_offsets_of_an_empty_group_expire_retention_after_it_became_empty() -> None:
    group = stable_group("a")
    committed(group, ("t", 0))
    group.leave([("a", None)], 5_000)
    assert group.state == S.EMPTY and group.state_timestamp_ms == 5_000
    # the commit is old, but the group was in use until 5 000: kept until 6 000
    assert group.expire_offsets(5_999, RETENTION) == []
    assert group.expire_offsets(6_000, RETENTION) == [("t", 0)]


def test_offsets_of_an_empty_group_of_unknown_empty_time_expire_after_their_commit() -> None:
    group = Group("g", 0, protocol_type="consumer", generation_id=3)  # restored, time unknown
    committed(group, ("t", 200))
    assert group.expire_offsets(1_199, RETENTION) == []
    assert group.expire_offsets(1_200, RETENTION) == [("t", 0)]


def test_a_stable_consumer_group_keeps_the_offsets_of_topics_it_subscribes_to() -> None:
    group = Group("g", 0)
    form(group, {"a": subscribed("mine")})
    sync(group, "a", a=b"")
    assert group.state == S.STABLE
    committed(group, ("mine", 0), ("dropped", 0))
    assert group.expire_offsets(10 * RETENTION, RETENTION) == [("dropped", 0)]
    assert list(group.offsets) == [("mine", 0)]


def test_nothing_expires_while_a_group_rebalances() -> None:
    group = stable_group("a", "b")
    committed(group, ("t", 0))
    group.leave([("b", None)], 0)
    assert group.state == S.PREPARING_REBALANCE
    assert group.expire_offsets(10 * RETENTION, RETENTION) == []


def test_an_offset_with_its_own_expiry_time_expires_then() -> None:
    group = Group("simple", 0)
    group.offsets[("t", 0)] = CommittedOffset(1, -1, "", 0, expire_timestamp_ms=300)
    group.offsets[("u", 0)] = CommittedOffset(1, -1, "", 0, expire_timestamp_ms=RETENTION * 5)
    assert group.expire_offsets(299, RETENTION) == []
    assert group.expire_offsets(300, RETENTION) == [("t", 0)]
    assert group.expire_offsets(RETENTION, RETENTION) == []  # its own time, not the retention
    # as in Kafka, only where offsets expire at all: not in a group rebalancing
    busy = stable_group("a", "b")
    busy.offsets[("t", 0)] = CommittedOffset(1, -1, "", 0, expire_timestamp_ms=300)
    busy.leave([("b", None)], 0)
    assert busy.expire_offsets(300, RETENTION) == []


def test_an_offset_with_a_commit_in_flight_waits() -> None:
    """As Kafka's getExpiredOffsets: not while a commit of its partition is being written."""
    group = Group("simple", 0)
    committed(group, ("busy", 0), ("idle", 0))
    assert group.expire_offsets(RETENTION, RETENTION, pending={("busy", 0)}) == [("idle", 0)]
    assert group.expire_offsets(RETENTION, RETENTION) == [("busy", 0)]


def test_an_offset_value_with_an_expiry_time_is_written_at_version_1() -> None:
    value = OffsetCommitValue(offset=5, leader_epoch=-1, metadata="m", commit_timestamp=9)
    value.expire_timestamp = 100
    data = records.offset_value(value)
    assert data[:2] == b"\x00\x01" and data.endswith((100).to_bytes(8, "big"))
    decoded = records.decode(records.offset_key("g", "t", 0), data)
    assert isinstance(decoded, records.OffsetRecord) and decoded.value == value
