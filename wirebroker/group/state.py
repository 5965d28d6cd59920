"""The classic group protocol as a pure state machine: one `Group`, its members and offsets.

No I/O, no trio, no clock: every operation takes `now_ms` and returns an :class:`Outcome` —
the reply for the caller (if it can be answered now), replies owed to members waiting in an
earlier JoinGroup or SyncGroup, and whether the group's metadata must be written. Timers are
deadlines the group reports (`next_deadline`) and the coordinator honours by calling `tick`.
New member ids are minted by the caller and passed in, so the machine stays deterministic.

States follow Kafka's ClassicGroupState: Empty → PreparingRebalance → CompletingRebalance →
Stable, and Dead once deleted. Semantics follow Kafka 3.9's classic group coordinator: member
ids required on join (KIP-394), static membership (KIP-345), generation fencing, the initial
rebalance delay for a group formed from Empty, rebalance and session timeouts.

One deliberate difference: the initial delay is a single window (capped by the rebalance
timeout). Kafka extends a brand-new group's window by another delay whenever a member arrived
during the last one, so a group whose members all arrive at once completes after two windows;
ours completes after one, which is what the join-latency target of the issue asks for.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Container
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

NO_GENERATION = -1


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    heartbeat_deadline_ms: int = 0

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class Outcome:
    """What an operation produced: the caller's reply, replies owed to waiting members (by
    member id), and whether the group's metadata record must be (re)written."""

    join_reply: JoinResult | None = None
    sync_reply: SyncResult | None = None
    error: ErrorCode = ErrorCode.NONE
    member_errors: list[ErrorCode] = field(default_factory=list)
    joins: dict[str, JoinResult] = field(default_factory=dict)
    syncs: dict[str, SyncResult] = field(default_factory=dict)
    write_group: bool = False


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool
    new_member_id: str  # the id to hand out if this is a new member


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    #: When the offset expires, from OffsetCommit v2-v4's retention time; -1: by the retention
    #: rules of `Group.expire_offsets`.
    expire_timestamp_ms: int = -1


@dataclass(eq=False)
class Group:
    group_id: str
    initial_rebalance_delay_ms: int = 3000
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    pending_sync: set[str] = field(default_factory=set)  # not yet synced this generation
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    state_timestamp_ms: int = -1
    rebalance_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None
    new_member_joined: bool = False  # a new member arrived during this rebalance
    initial_join: bool = False  # rebalancing from Empty: wait out the initial delay

    # -- queries --------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self.members

    def next_deadline(self) -> int | None:
        deadlines = [
            d for d in (self.rebalance_deadline_ms, self.sync_deadline_ms) if d is not None
        ]
        deadlines += self.pending_members.values()
        deadlines += (
            m.heartbeat_deadline_ms
            for m in self.members.values()
            if not m.awaiting_join and not m.awaiting_sync
        )
        return min(deadlines, default=None)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the consumer members subscribe to; None if that can't be known."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None if self.members else set()
        topics: set[str] = set()
        for m in self.members.values():
            parsed = _subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    # -- JoinGroup ------------------------------------------------------------------------
    def join(self, req: JoinRequest, now_ms: int) -> Outcome:
        out = Outcome()
        if self.state == GroupState.DEAD:
            out.join_reply = JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
            return out
        if not req.protocol_type or not req.protocols or not self._supports(req):
            out.join_reply = JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
            return out
        if req.member_id == "":
            self._join_unknown(req, now_ms, out)
        else:
            self._join_known(req, now_ms, out)
        self._try_complete_join(now_ms, out)
        return out

    def _supports(self, req: JoinRequest) -> bool:
        if self.state == GroupState.EMPTY and not self.members:
            return True
        if req.protocol_type != self.protocol_type:
            return False
        others = [m for m in self.members.values() if m.member_id != req.member_id]
        if not others:
            return True
        common = {n for n, _ in others[0].protocols}
        for m in others[1:]:
            common &= {n for n, _ in m.protocols}
        return bool(common & {name for name, _ in req.protocols})

    def _join_unknown(self, req: JoinRequest, now_ms: int, out: Outcome) -> None:
        instance = req.group_instance_id
        if instance is not None and instance in self.static_members:
            self._replace_static_member(req, now_ms, out)
            return
        if instance is None and req.require_known_member_id:
            self.pending_members[req.new_member_id] = now_ms + req.session_timeout_ms
            out.join_reply = JoinResult(ErrorCode.MEMBER_ID_REQUIRED, req.new_member_id)
            return
        self._add_member(req, req.new_member_id, now_ms)
        self._prepare_rebalance(now_ms, out)

    def _replace_static_member(self, req: JoinRequest, now_ms: int, out: Outcome) -> None:
        assert req.group_instance_id is not None
        old_id = self.static_members[req.group_instance_id]
        old = self.members.pop(old_id)
        if old.awaiting_join:
            out.joins[old_id] = JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id)
        if old.awaiting_sync:
            out.syncs[old_id] = SyncResult(ErrorCode.FENCED_INSTANCE_ID)
        new = Member(
            req.new_member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            list(req.protocols),
            old.assignment,
        )
        self.members[new.member_id] = new
        self.static_members[req.group_instance_id] = new.member_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new.member_id)
        was_leader = self.leader_id == old_id
        if was_leader:
            self.leader_id = new.member_id
        if self.state == GroupState.STABLE and self._select_protocol() == self.protocol_name:
            # The group's protocol stays: no rebalance; hand back the current generation and
            # the old member's assignment (KIP-345). Changed metadata alone (a restarted
            # consumer owns no partitions yet) does not rebalance, as in Kafka.
            new.heartbeat_deadline_ms = now_ms + new.session_timeout_ms
            out.join_reply = self._join_result(new, skip_assignment=was_leader)
            out.write_group = True
            return
        new.awaiting_join = True
        self._prepare_rebalance(now_ms, out)

    def _join_known(self, req: JoinRequest, now_ms: int, out: Outcome) -> None:
        mid = req.member_id
        if mid in self.pending_members:
            del self.pending_members[mid]
            self._add_member(req, mid, now_ms)
            self._prepare_rebalance(now_ms, out)
            return
        member = self.members.get(mid)
        error = self._check_member(mid, req.group_instance_id)
        if member is None or error is not ErrorCode.NONE:
            out.join_reply = JoinResult(error, mid)
            return
        changed = member.protocols != req.protocols
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        if self.state == GroupState.PREPARING_REBALANCE:
            member.awaiting_join = True
        elif self.state == GroupState.COMPLETING_REBALANCE and not changed:
            out.join_reply = self._join_result(member)
        elif self.state == GroupState.STABLE and not changed and mid != self.leader_id:
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            out.join_reply = self._join_result(member)
        else:
            member.awaiting_join = True
            self._prepare_rebalance(now_ms, out)

    def _add_member(self, req: JoinRequest, member_id: str, now_ms: int) -> None:
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            list(req.protocols),
            awaiting_join=True,
        )
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[member_id] = member
        if req.group_instance_id is not None:
            self.static_members[req.group_instance_id] = member_id
        self.new_member_joined = True

    def _check_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _prepare_rebalance(self, now_ms: int, out: Outcome) -> None:
        if self.state == GroupState.PREPARING_REBALANCE:
            return
        if self.state == GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                if m.awaiting_sync:
                    out.syncs[m.member_id] = SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
                    m.awaiting_sync = False
        self.sync_deadline_ms = None
        self.pending_sync.clear()
        self.initial_join = self.state == GroupState.EMPTY
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        if self.initial_join:
            timeout = min(self.initial_rebalance_delay_ms, timeout)
        self.rebalance_deadline_ms = now_ms + timeout
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)

    def _try_complete_join(self, now_ms: int, out: Outcome) -> None:
        if self.state != GroupState.PREPARING_REBALANCE:
            return
        assert self.rebalance_deadline_ms is not None
        expired = now_ms >= self.rebalance_deadline_ms
        all_joined = not self.pending_members and all(
            m.awaiting_join for m in self.members.values()
        )
        if not expired and (self.initial_join or not all_joined):
            return
        for m in list(self.members.values()):
            if not m.awaiting_join:
                self._remove(m.member_id)
        self.rebalance_deadline_ms = None
        self.new_member_joined = False
        self.initial_join = False
        self.generation_id += 1
        if not self.members:
            self.protocol_name = None
            self.leader_id = None
            self._transition(GroupState.EMPTY, now_ms)
            out.write_group = True
            return
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        self.sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in self.members.values())
        self.pending_sync = set(self.members)
        for m in self.members.values():
            m.awaiting_join = False
            m.awaiting_sync = False
            m.assignment = b""
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
            out.joins[m.member_id] = self._join_result(m)

    def _select_protocol(self) -> str:
        members = list(self.members.values())
        common = [n for n, _ in members[0].protocols]
        for m in members[1:]:
            names = {n for n, _ in m.protocols}
            common = [n for n in common if n in names]
        votes = dict.fromkeys(common, 0)
        for m in members:
            vote = next(n for n, _ in m.protocols if n in votes)
            votes[vote] += 1
        return max(common, key=lambda n: votes[n])

    def _join_result(self, member: Member, *, skip_assignment: bool = False) -> JoinResult:
        is_leader = member.member_id == self.leader_id
        members: tuple[JoinMember, ...] = ()
        if is_leader:
            members = tuple(
                JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()
            )
        return JoinResult(
            ErrorCode.NONE,
            member.member_id,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            skip_assignment,
            members,
        )

    # -- SyncGroup ------------------------------------------------------------------------
    def sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        now_ms: int,
    ) -> Outcome:
        out = Outcome()
        error = self._check_member(member_id, instance_id)
        if self.state == GroupState.DEAD:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif error is ErrorCode.NONE and generation_id != self.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        elif error is ErrorCode.NONE and (
            (protocol_type is not None and protocol_type != self.protocol_type)
            or (protocol_name is not None and protocol_name != self.protocol_name)
        ):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        elif error is ErrorCode.NONE and self.state == GroupState.PREPARING_REBALANCE:
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not ErrorCode.NONE:
            out.sync_reply = SyncResult(error)
            return out
        member = self.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        self.pending_sync.discard(member_id)
        if not self.pending_sync:
            self.sync_deadline_ms = None
        if self.state == GroupState.STABLE:
            member.awaiting_sync = False
            out.sync_reply = self._sync_result(member)
            return out
        # CompletingRebalance: wait for the leader's assignment.
        member.awaiting_sync = True
        if member_id == self.leader_id:
            for m in self.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self._transition(GroupState.STABLE, now_ms)
            out.write_group = True
            for m in self.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
                    out.syncs[m.member_id] = self._sync_result(m)
        return out

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.NONE, self.protocol_type, self.protocol_name, member.assignment)

    # -- Heartbeat, LeaveGroup --------------------------------------------------------------
    def heartbeat(
        self, member_id: str, instance_id: str | None, generation_id: int, now_ms: int
    ) -> Outcome:
        out = Outcome()
        if self.state == GroupState.DEAD:
            out.error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif self.state == GroupState.EMPTY:
            out.error = ErrorCode.UNKNOWN_MEMBER_ID
        else:
            out.error = self._check_member(member_id, instance_id)
        if out.error is ErrorCode.NONE and generation_id != self.generation_id:
            out.error = ErrorCode.ILLEGAL_GENERATION
        if out.error is not ErrorCode.NONE:
            return out
        member = self.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state == GroupState.PREPARING_REBALANCE:
            out.error = ErrorCode.REBALANCE_IN_PROGRESS
        return out

    def leave(self, leaving: list[tuple[str, str | None]], now_ms: int) -> Outcome:
        """Members leave (member id, instance id); one code per member in `member_errors`."""
        out = Outcome()
        removed = False
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = self.static_members.get(instance_id)
                if known is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and member_id != known:
                    code = ErrorCode.FENCED_INSTANCE_ID
                else:
                    code = ErrorCode.NONE
                    member_id = known
            elif member_id in self.pending_members:
                del self.pending_members[member_id]
                out.member_errors.append(ErrorCode.NONE)
                continue
            else:
                code = ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID
            out.member_errors.append(code)
            if code is ErrorCode.NONE:
                self._answer_removed(member_id, out)
                self._remove(member_id)
                removed = True
        if removed:
            self._after_removal(now_ms, out)
        return out

    def _answer_removed(self, member_id: str, out: Outcome) -> None:
        member = self.members[member_id]
        if member.awaiting_join:
            out.joins[member_id] = JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        if member.awaiting_sync:
            out.syncs[member_id] = SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        self.pending_sync.discard(member_id)
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    def _after_removal(self, now_ms: int, out: Outcome) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms, out)
        self._try_complete_join(now_ms, out)

    # -- timers -----------------------------------------------------------------------------
    def tick(self, now_ms: int) -> Outcome:
        """Expire whatever is due at `now_ms`: sessions, pending members, rebalance and sync
        timeouts."""
        out = Outcome()
        for mid, deadline in list(self.pending_members.items()):
            if deadline <= now_ms:
                del self.pending_members[mid]
        expired = [
            m.member_id
            for m in self.members.values()
            if not m.awaiting_join and not m.awaiting_sync and m.heartbeat_deadline_ms <= now_ms
        ]
        if self.sync_deadline_ms is not None and self.sync_deadline_ms <= now_ms:
            # Members that never sent SyncGroup within the rebalance timeout are dropped.
            expired += sorted(self.pending_sync)
            self.sync_deadline_ms = None
        expired = [mid for mid in dict.fromkeys(expired) if mid in self.members]
        for mid in expired:
            self._answer_removed(mid, out)
            self._remove(mid)
        if expired:
            self._after_removal(now_ms, out)
        self._try_complete_join(now_ms, out)
        return out

    # -- offsets ----------------------------------------------------------------------------
    def check_commit(
        self, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Whether an OffsetCommit may write (Kafka's classic validation order)."""
        if self.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if generation_id < 0 and self.state == GroupState.EMPTY:
            return ErrorCode.NONE
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if self.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def check_txn_commit(
        self, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Whether a TxnOffsetCommit may write (Kafka's validateOffsetCommit for transactional
        commits): the member and generation are checked when the commit names them (v3+);
        one that names none (v0-2, or a producer outside the group) is accepted in any state."""
        if self.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state == GroupState.EMPTY:
            return ErrorCode.NONE
        if generation_id >= 0 or member_id or instance_id is not None:
            if instance_id is not None:
                known = self.static_members.get(instance_id)
                if known is None:
                    return ErrorCode.UNKNOWN_MEMBER_ID
                if known != member_id:
                    return ErrorCode.FENCED_INSTANCE_ID
            if member_id not in self.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation_id != self.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def expire_offsets(
        self, now_ms: int, retention_ms: int, pending: Container[tuple[str, int]] = ()
    ) -> list[tuple[str, int]]:
        """Remove and return the offsets whose retention passed (Kafka 3.x): in an Empty group,
        `retention_ms` after it became Empty (after each commit if that time is unknown); in a
        Stable consumer group, offsets of topics no member subscribes to, after their commit;
        in a group without a protocol (offsets committed by a simple consumer or an admin),
        after each commit. Nothing expires in any other group, nor an offset of a partition in
        `pending` (a commit of it is being written). An offset committed with its own expiry
        time (OffsetCommit v2-v4) expires then instead."""
        topics: set[str] = set()
        if self.protocol_type and self.state == GroupState.EMPTY:
            since = self.state_timestamp_ms
        elif self.protocol_type == "consumer" and self.state == GroupState.STABLE:
            subscribed = self.subscribed_topics()
            if subscribed is None:
                return []
            since, topics = -1, subscribed
        elif not self.protocol_type:
            since = -1
        else:
            return []

        def expired(c: CommittedOffset) -> bool:
            if c.expire_timestamp_ms != -1:  # Kafka's None; a sum that wrapped is in the past
                return now_ms >= c.expire_timestamp_ms
            return now_ms - (since if since >= 0 else c.commit_timestamp_ms) >= retention_ms

        gone = [
            tp
            for tp, c in self.offsets.items()
            if tp[0] not in topics and tp not in pending and expired(c)
        ]
        for tp in gone:
            del self.offsets[tp]
        return gone

    def touch(self, member_id: str, now_ms: int) -> None:
        member = self.members.get(member_id)
        if member is not None:
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def _transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms


def _subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (int16 version, then [string] topics)."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            topics.add(metadata[pos : pos + length].decode())
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
