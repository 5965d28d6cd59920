"""The group coordinator's membership side (Kafka's GroupCoordinator): JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, DescribeGroups and ListGroups of the groups this broker coordinates, and
their rebalance and session timers.

The pure machine (`group.state`) decides; this module does what it cannot: it mints member ids,
parks JoinGroup/SyncGroup requests until the machine answers them, runs the one timer task that
calls `Group.tick` at each group's next deadline, and has the group records the machine asks for
written. The groups themselves, their loading and their offsets are the metadata manager's
(`group.metadata_manager`): a group's requests answer as it says whether this broker
coordinates the group, and a SyncGroup of a new generation answers once the manager's write of
the group is durable.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import trio

from protocol.errors import ErrorCode
from wirebroker.coordinator_store import WRITTEN, Write
from wirebroker.group.metadata_manager import GroupMetadataManager
from wirebroker.group.state import (
    Group,
    GroupState,
    JoinRequest,
    JoinResult,
    Outcome,
    SyncResult,
)

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(eq=False)
class _Waiter(Generic[T]):
    event: trio.Event
    result: T | None = None
    write: Write = WRITTEN


class GroupCoordinator:
    """The membership of the groups this broker coordinates (all of them when embedded)."""

    def __init__(self, broker: Broker) -> None:
        self._now_ms = broker.now_ms
        #: The groups, their loading and their offsets (Kafka's groupManager).
        self.group_manager = GroupMetadataManager(
            broker, on_loaded=self._loaded, on_unloaded=self._unloaded
        )
        self._joins: dict[tuple[str, str], _Waiter[JoinResult]] = {}
        self._syncs: dict[tuple[str, str], _Waiter[SyncResult]] = {}
        self._wake = trio.Event()
        self._sleeping_until: float = math.inf  # the timer task's next deadline (ms)
        config = broker.config
        self.min_session_ms = config.get_int("group.min.session.timeout.ms")
        self.max_session_ms = config.get_int("group.max.session.timeout.ms")

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        """Serve from `nursery`: start the metadata manager (loading, offsets expiry) and run
        the group timers there until it ends."""
        self.group_manager.start(nursery)
        nursery.start_soon(self._run_timers)

    async def _run_timers(self) -> None:
        groups = self.group_manager.groups
        while True:
            deadline = min(
                (d for g in groups.values() if (d := g.next_deadline()) is not None),
                default=None,
            )
            wake = self._wake = trio.Event()
            self._sleeping_until = math.inf if deadline is None else deadline
            delay = math.inf if deadline is None else (deadline - self._now_ms()) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await wake.wait()
            else:
                await trio.lowlevel.checkpoint()
            now = self._now_ms()
            for group in list(groups.values()):
                due = group.next_deadline()
                if due is not None and due <= now:
                    try:
                        self._apply(group, group.tick(now))
                        self.group_manager.forget_if_unused(group)
                    except Exception:  # a bug must not take the broker down, nor spin
                        log.exception("group %s: timer failed", group.group_id)
                        await trio.sleep(1)

    def _loaded(self, groups: Iterable[Group]) -> None:
        """Loaded groups' members have a session from now (Kafka's onGroupLoaded)."""
        now = self._now_ms()
        for group in groups:
            for m in group.members.values():
                m.heartbeat_deadline_ms = now + m.session_timeout_ms
        self._wake.set()  # the loaded groups' deadlines

    def _unloaded(self, gone: Set[str]) -> None:
        """The parked requests of unloaded groups answer NOT_COORDINATOR."""
        for (gid, member_id), join in list(self._joins.items()):
            if gid in gone:
                join.result = JoinResult(ErrorCode.NOT_COORDINATOR, member_id)
                join.event.set()
        for (gid, _), sync in list(self._syncs.items()):
            if gid in gone:
                sync.result = SyncResult(ErrorCode.NOT_COORDINATOR)
                sync.write = WRITTEN
                sync.event.set()

    def statistics(self) -> dict[str, int]:
        """Groups by state, members, and JoinGroup/SyncGroup requests parked right now."""
        stats = {state.value: 0 for state in GroupState}
        for group in self.group_manager.groups.values():
            stats[group.state.value] += 1
        stats["members"] = sum(len(g.members) for g in self.group_manager.groups.values())
        stats["parked_joins"] = len(self._joins)
        stats["parked_syncs"] = len(self._syncs)
        return stats

    # -- groups -----------------------------------------------------------------------------
    def _apply(self, group: Group, out: Outcome) -> Write:
        """Write what the machine asked for, then hand replies to parked requests (a parked
        SyncGroup waits for the group's write to be durable before it answers)."""
        write = self.group_manager.store_group(group) if out.write_group else WRITTEN
        for member_id, join in out.joins.items():
            join_waiter = self._joins.pop((group.group_id, member_id), None)
            if join_waiter is not None:
                join_waiter.result = join
                join_waiter.event.set()
        for member_id, sync in out.syncs.items():
            sync_waiter = self._syncs.pop((group.group_id, member_id), None)
            if sync_waiter is not None:
                sync_waiter.result = sync
                sync_waiter.write = write
                sync_waiter.event.set()
        deadline = group.next_deadline()
        if deadline is not None and deadline < self._sleeping_until:
            self._wake.set()  # only an earlier deadline needs the timer task to wake
        return write

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
        if (error := self.group_manager.coordinator_error(group_id)) != ErrorCode.NONE:
            return JoinResult(error, member_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        group = self.group_manager.group(group_id, create=member_id == "")
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
        out = group.join(request, self._now_ms())
        key = member_id or request.new_member_id
        self._apply(group, out)
        self.group_manager.forget_if_unused(group)
        if out.join_reply is not None:
            return out.join_reply
        if key in out.joins:
            return out.joins[key]
        retry = JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, key)
        waiter = await self._park(self._joins, (group_id, key), retry)
        assert waiter.result is not None
        return waiter.result

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
        if (error := self.group_manager.coordinator_error(group_id)) != ErrorCode.NONE:
            return SyncResult(error)
        group = self.group_manager.group(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        out = group.sync(
            member_id,
            group_instance_id,
            generation_id,
            protocol_type,
            protocol_name,
            assignments,
            self._now_ms(),
        )
        write = self._apply(group, out)
        if out.sync_reply is not None:
            result = out.sync_reply
        elif member_id in out.syncs:
            result = out.syncs[member_id]
        else:
            waiter = await self._park(
                self._syncs, (group_id, member_id), SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
            )
            assert waiter.result is not None
            result, write = waiter.result, waiter.write
        return await self._durable_sync(result, write)

    async def _durable_sync(self, result: SyncResult, write: Write) -> SyncResult:
        """A SyncGroup reply once the group's write is durable; if it is not, the write's error
        as Kafka's storeGroup maps it (the members rejoin through the coordinator lookup)."""
        if result.error != ErrorCode.NONE:
            return result
        error = await self.group_manager.group_write_error(write)
        return result if error == ErrorCode.NONE else SyncResult(error)

    async def _park(
        self, waiters: dict[tuple[str, str], _Waiter[T]], key: tuple[str, str], retry: T
    ) -> _Waiter[T]:
        """Park a request until `_apply` (or an unload) answers it; the waiter, answered."""
        waiter: _Waiter[T] = _Waiter(trio.Event())
        earlier = waiters.get(key)
        if earlier is not None:  # the same member asked again: the earlier request retries
            earlier.result = retry
            earlier.write = WRITTEN
            earlier.event.set()
        waiters[key] = waiter
        try:
            await waiter.event.wait()
        finally:
            if waiters.get(key) is waiter:
                del waiters[key]
        return waiter

    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if (error := self.group_manager.coordinator_error(group_id)) != ErrorCode.NONE:
            # Kafka answers a heartbeat blindly while the group loads
            return ErrorCode.NONE if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else error
        group = self.group_manager.group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        out = group.heartbeat(member_id, instance_id, generation_id, self._now_ms())
        self._apply(group, out)
        return out.error

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """Per-member errors (the handler answers NOT_COORDINATOR before asking)."""
        group = self.group_manager.group(group_id)
        if group is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        out = group.leave(members, self._now_ms())
        self._apply(group, out)
        return out.member_errors

    def describe(self, group_id: str) -> Group | None:
        return self.group_manager.group(group_id)

    def list_groups(self) -> Iterable[Group]:
        return [g for g in self.group_manager.groups.values() if g.state != GroupState.DEAD]
