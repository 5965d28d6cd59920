"""The group coordinator's trio side: owns every group, their timers, and `__consumer_offsets`.

The pure machine (`group.state`) decides; this module does what it cannot: it mints member ids,
parks JoinGroup/SyncGroup requests until the machine answers them, runs the one timer task that
calls `Group.tick` at each group's next deadline, and writes the records the machine asks for
to `__consumer_offsets` before any reply leaves (the append is synchronous). The topic is created
on first use with `offsets.topic.num.partitions` partitions and `cleanup.policy=compact`, and is
replayed on start so groups and offsets survive restarts.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import trio

from protocol.errors import ErrorCode
from protocol.messages.group_coordinator.group_metadata import GroupMetadataValue
from protocol.messages.group_coordinator.offset_commit import OffsetCommitValue
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from protocol.records import RecordBatchView, iter_batches, iter_records
from wirebroker.group import records
from wirebroker.group.records import GroupRecord, OffsetRecord
from wirebroker.group.state import (
    CommittedOffset,
    Group,
    GroupState,
    JoinRequest,
    JoinResult,
    Member,
    Outcome,
    SyncResult,
)

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK_BYTES = 4 << 20
T = TypeVar("T")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(eq=False)
class _Waiter(Generic[T]):
    event: trio.Event
    result: T | None = None


class GroupCoordinator:
    """Every group of this broker (it coordinates them all), and their offsets."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.groups: dict[str, Group] = {}
        self._joins: dict[tuple[str, str], _Waiter[JoinResult]] = {}
        self._syncs: dict[tuple[str, str], _Waiter[SyncResult]] = {}
        self._wake = trio.Event()
        self._sleeping_until: float = math.inf  # the timer task's next deadline (ms)
        config = broker.config
        self.num_partitions = config.get_int("offsets.topic.num.partitions")
        self.initial_delay_ms = config.get_int("group.initial.rebalance.delay.ms")
        self.min_session_ms = config.get_int("group.min.session.timeout.ms")
        self.max_session_ms = config.get_int("group.max.session.timeout.ms")
        self.max_metadata_bytes = config.get_int("offset.metadata.max.bytes")

    # -- lifecycle --------------------------------------------------------------------------
    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load `__consumer_offsets`, report started, then run the group timers forever."""
        self.load()
        task_status.started()
        while True:
            deadline = min(
                (d for g in self.groups.values() if (d := g.next_deadline()) is not None),
                default=None,
            )
            wake = self._wake = trio.Event()
            self._sleeping_until = math.inf if deadline is None else deadline
            delay = math.inf if deadline is None else (deadline - now_ms()) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await wake.wait()
            else:
                await trio.lowlevel.checkpoint()
            now = now_ms()
            for group in list(self.groups.values()):
                due = group.next_deadline()
                if due is not None and due <= now:
                    try:
                        self._apply(group, group.tick(now))
                        self._forget_if_unused(group)
                    except Exception:  # a bug must not take the broker down, nor spin
                        log.exception("group %s: timer failed", group.group_id)
                        await trio.sleep(1)

    def load(self) -> None:
        """Replay every partition of `__consumer_offsets` into groups and offsets."""
        record = self.broker.topics.get(OFFSETS_TOPIC)
        if record is None:
            return
        self.num_partitions = record.partitions
        count = 0
        now = now_ms()
        for index in range(record.partitions):
            partition = self.broker.partition(OFFSETS_TOPIC, index)
            if partition is None:
                continue
            plog = partition.log
            offset = plog.log_start_offset
            while offset < plog.log_end_offset:
                with plog.read(offset, LOAD_CHUNK_BYTES) as result:
                    data = result.read()
                start = offset
                for batch in iter_batches(data):
                    offset = batch.last_offset + 1
                    if isinstance(batch, RecordBatchView) and batch.is_control:
                        continue
                    for r in iter_records(batch):
                        if r.key is not None:
                            count += 1
                            value = None if r.value is None else bytes(r.value)
                            self._replay(records.decode(bytes(r.key), value), now)
                if offset == start:
                    log.warning("%s-%d: no whole batch at offset %d", OFFSETS_TOPIC, index, offset)
                    break
        for group in self.groups.values():
            for m in group.members.values():
                m.heartbeat_deadline_ms = now + m.session_timeout_ms
        log.info("loaded %d groups from %d records of %s", len(self.groups), count, OFFSETS_TOPIC)

    def _replay(self, rec: OffsetRecord | GroupRecord | None, now: int) -> None:
        if isinstance(rec, OffsetRecord):
            group = self._group(rec.group, create=True)
            assert group is not None
            tp = (rec.topic, rec.partition)
            if rec.value is None:
                group.offsets.pop(tp, None)
            else:
                v = rec.value
                group.offsets[tp] = CommittedOffset(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                )
        elif isinstance(rec, GroupRecord):
            if rec.value is None:
                self.groups.pop(rec.group, None)
                return
            old = self.groups.get(rec.group)
            group = _restore(rec.group, rec.value, self.initial_delay_ms, now)
            if old is not None:
                group.offsets = old.offsets
            self.groups[rec.group] = group

    def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if this is its first use."""
        if self.broker.topics.get(OFFSETS_TOPIC) is None:
            self.broker.create_topic(
                OFFSETS_TOPIC,
                self.num_partitions,
                1,
                {"cleanup.policy": "compact", "segment.bytes": "104857600"},
            )

    def statistics(self) -> dict[str, int]:
        """Groups by state, members, and JoinGroup/SyncGroup requests parked right now."""
        stats = {state.value: 0 for state in GroupState}
        for group in self.groups.values():
            stats[group.state.value] += 1
        stats["members"] = sum(len(g.members) for g in self.groups.values())
        stats["parked_joins"] = len(self._joins)
        stats["parked_syncs"] = len(self._syncs)
        return stats

    # -- groups -----------------------------------------------------------------------------
    def _group(self, group_id: str, *, create: bool = False) -> Group | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = Group(group_id, self.initial_delay_ms)
        return group

    def _forget_if_unused(self, group: Group) -> None:
        """Drop a group that never formed: nothing of it was written, so nothing to delete."""
        if (
            group.state == GroupState.EMPTY
            and group.generation_id == 0
            and not group.members
            and not group.pending_members
            and not group.offsets
        ):
            self.groups.pop(group.group_id, None)

    def _apply(self, group: Group, out: Outcome) -> None:
        """Write what the machine asked for, then hand replies to parked requests."""
        if out.write_group:
            self._append(
                group.group_id,
                [(records.group_key(group.group_id), records.group_value(_group_value(group)))],
            )
        for member_id, join in out.joins.items():
            join_waiter = self._joins.pop((group.group_id, member_id), None)
            if join_waiter is not None:
                join_waiter.result = join
                join_waiter.event.set()
        for member_id, sync in out.syncs.items():
            sync_waiter = self._syncs.pop((group.group_id, member_id), None)
            if sync_waiter is not None:
                sync_waiter.result = sync
                sync_waiter.event.set()
        deadline = group.next_deadline()
        if deadline is not None and deadline < self._sleeping_until:
            self._wake.set()  # only an earlier deadline needs the timer task to wake

    def _append(self, group_id: str, kvs: list[tuple[bytes, bytes | None]]) -> None:
        self.ensure_topic()
        index = records.partition_for(group_id, self.num_partitions)
        partition = self.broker.partition(OFFSETS_TOPIC, index)
        assert partition is not None
        now = now_ms()
        batch = build_record_batch([SimpleRecord(k, v, timestamp=now) for k, v in kvs])
        partition.append_to_leader(memoryview(bytearray(batch)), now)

    async def join(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        group = self._group(group_id, create=member_id == "")
        if group is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        prefix = group_instance_id if group_instance_id is not None else client_id
        request = JoinRequest(
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
            require_known_member_id,
            f"{prefix}-{uuid.uuid4()}",
        )
        out = group.join(request, now_ms())
        key = member_id or request.new_member_id
        self._apply(group, out)
        self._forget_if_unused(group)
        if out.join_reply is not None:
            return out.join_reply
        if key in out.joins:
            return out.joins[key]
        retry = JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, key)
        return await self._park(self._joins, (group_id, key), retry)

    async def sync(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        out = group.sync(
            member_id,
            group_instance_id,
            generation_id,
            protocol_type,
            protocol_name,
            assignments,
            now_ms(),
        )
        self._apply(group, out)
        if out.sync_reply is not None:
            return out.sync_reply
        if member_id in out.syncs:
            return out.syncs[member_id]
        retry = SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        return await self._park(self._syncs, (group_id, member_id), retry)

    async def _park(
        self, waiters: dict[tuple[str, str], _Waiter[T]], key: tuple[str, str], retry: T
    ) -> T:
        waiter: _Waiter[T] = _Waiter(trio.Event())
        earlier = waiters.get(key)
        if earlier is not None:  # the same member asked again: the earlier request retries
            earlier.result = retry
            earlier.event.set()
        waiters[key] = waiter
        try:
            await waiter.event.wait()
        finally:
            if waiters.get(key) is waiter:
                del waiters[key]
        assert waiter.result is not None
        return waiter.result

    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        out = group.heartbeat(member_id, instance_id, generation_id, now_ms())
        self._apply(group, out)
        return out.error

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        group = self.groups.get(group_id)
        if group is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        out = group.leave(members, now_ms())
        self._apply(group, out)
        return out.member_errors

    def describe(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def list_groups(self) -> Iterable[Group]:
        return [g for g in self.groups.values() if g.state != GroupState.DEAD]

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state != GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        kvs: list[tuple[bytes, bytes | None]] = [
            (records.offset_key(group_id, t, p), None) for t, p in group.offsets
        ]
        kvs.append((records.group_key(group_id), None))
        self._append(group_id, kvs)
        group.state = GroupState.DEAD
        del self.groups[group_id]
        return ErrorCode.NONE

    # -- offsets ----------------------------------------------------------------------------
    def commit(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: list[tuple[str, int, CommittedOffset]],
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Validate and write a commit: (group-level error, per-partition errors)."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:  # not a simple (admin) commit: a stale generation
                return ErrorCode.ILLEGAL_GENERATION, []
            group = self._group(group_id, create=True)
            assert group is not None
        error = group.check_commit(member_id, instance_id, generation_id)
        if error is not ErrorCode.NONE:
            return error, []
        now = now_ms()
        group.touch(member_id, now)
        codes: list[ErrorCode] = []
        kvs: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[str, int, CommittedOffset]] = []
        for topic, partition, committed in offsets:
            if len(committed.metadata.encode()) > self.max_metadata_bytes:
                codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            codes.append(ErrorCode.NONE)
            value = OffsetCommitValue(
                offset=committed.offset,
                leader_epoch=committed.leader_epoch,
                metadata=committed.metadata,
                commit_timestamp=committed.commit_timestamp_ms,
            )
            kvs.append(
                (records.offset_key(group_id, topic, partition), records.offset_value(value))
            )
            accepted.append((topic, partition, committed))
        if kvs:
            self._append(group_id, kvs)
        for topic, partition, committed in accepted:
            group.offsets[(topic, partition)] = committed
        return ErrorCode.NONE, codes

    def fetch(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self.groups.get(group_id)
        return {} if group is None else group.offsets

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.state != GroupState.EMPTY and group.protocol_type not in (None, "", "consumer"):
            return ErrorCode.NON_EMPTY_GROUP, []
        subscribed = set() if group.state == GroupState.EMPTY else group.subscribed_topics()
        if subscribed is None:
            return ErrorCode.NON_EMPTY_GROUP, []
        codes: list[ErrorCode] = []
        kvs: list[tuple[bytes, bytes | None]] = []
        for topic, partition in partitions:
            if topic in subscribed:
                codes.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            codes.append(ErrorCode.NONE)
            if group.offsets.pop((topic, partition), None) is not None:
                kvs.append((records.offset_key(group_id, topic, partition), None))
        if kvs:
            self._append(group_id, kvs)
        return ErrorCode.NONE, codes


def _group_value(group: Group) -> GroupMetadataValue:
    members = [
        GroupMetadataValue.MemberMetadata(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata(group.protocol_name),
            assignment=m.assignment,
        )
        for m in group.members.values()
    ]
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=group.state_timestamp_ms,
        members=members,
    )


def _restore(group_id: str, value: GroupMetadataValue, initial_delay_ms: int, now: int) -> Group:
    group = Group(
        group_id,
        initial_delay_ms,
        state=GroupState.STABLE if value.members else GroupState.EMPTY,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader,
        state_timestamp_ms=value.current_state_timestamp,
    )
    for m in value.members:
        protocols = [(value.protocol, bytes(m.subscription))] if value.protocol else []
        member = Member(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout,
            m.session_timeout,
            protocols,
            bytes(m.assignment),
            heartbeat_deadline_ms=now + m.session_timeout,
        )
        group.members[m.member_id] = member
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    return group
