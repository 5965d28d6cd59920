"""One partition as the broker sees it: its log plus leader, leader epoch, replicas and ISR.

Even with a single broker every partition carries the replication state a cluster needs — the
leader, a leader epoch, the replica set, the in-sync replicas and the high watermark — so that
the cluster adds brokers without reshaping this class. As a leader it tracks each follower's
log end offset and last caught-up time (from their fetches), computes the high watermark as the
minimum log end offset over the ISR, and decides when a follower joins or leaves the ISR
(Kafka's Partition): the change is *proposed* here and sent to the controller by the replica
manager (AlterPartition), and only committed when the controller accepts it. It owns waking
fetchers when data arrives (`append_event`) and produce waiters when the high watermark, the
ISR or the leadership changes (`state_event`). Storage does the bytes; this class must not
encode or decode anything, nor do I/O besides its log.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from protocol.errors import ErrorCode, KafkaError
from storage.clock import Clock, wall_clock_ms
from storage.partition_log import AppendInfo, PartitionLog
from storage.producer_state import VerificationGuard
from storage.validation import AppendOrigin
from wirebroker.events import Waiters

log = logging.getLogger(__name__)

DEFAULT_REPLICA_LAG_MS = 30_000


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


class FollowerState:
    """What the leader knows of one follower, from its fetches (Kafka's ReplicaState)."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = (
        "last_caught_up_ms",
        "last_fetch_leader_leo",
        "last_fetch_ms",
        "log_end_offset",
        "log_start_offset",
    )

    def __init__(self, last_fetch_leader_leo: int = 0) -> None:
        self.log_end_offset = -1
        self.log_start_offset = -1
        self.last_fetch_leader_leo = last_fetch_leader_leo
        self.last_fetch_ms = 0
        self.last_caught_up_ms = 0

    def is_caught_up(self, leader_leo: int, now_ms: int, max_lag_ms: int) -> bool:
        return leader_leo == self.log_end_offset or now_ms - self.last_caught_up_ms <= max_lag_ms


class PendingIsr:
    """An ISR change sent (or about to be sent) to the controller and not answered yet.

    While one is in flight no other is proposed. An expansion counts the new replica for the
    high watermark at once (the "maximal" ISR, KIP-497: stricter, so safe); a shrink does not
    until the controller accepts it.
    """

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = ("committed", "isr", "leader_epoch", "maximal", "partition_epoch")

    def __init__(
        self,
        isr: list[int],
        maximal: frozenset[int],
        committed: list[int],
        leader_epoch: int,
        partition_epoch: int,
    ) -> None:
        self.isr = isr
        self.maximal = maximal
        self.committed = committed
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch


def _any_broker_alive(_id: int) -> bool:
    return True


class Partition:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`); compared by
    # identity.
    __slots__ = (
        "append_waiters",
        "clock",
        "controller_epoch",
        "followers",
        "index",
        "is_broker_alive",
        "isr",
        "leader",
        "leader_epoch",
        "leader_epoch_start_offset",
        "log",
        "min_isr",
        "min_isr_source",
        "node_id",
        "on_isr_change",
        "partition_epoch",
        "pending_isr",
        "replica_lag_ms",
        "replicas",
        "state_waiters",
        "topic",
        "topic_id",
        "topic_id_stored",
    )

    def __init__(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        log: PartitionLog,
        leader: int,
        leader_epoch: int = 0,
        replicas: list[int] | None = None,
        isr: list[int] | None = None,
        node_id: int | None = None,
        partition_epoch: int = 0,
        controller_epoch: int = 0,
        min_isr: int = 1,
        min_isr_source: Callable[[], int] | None = None,
        replica_lag_ms: int = DEFAULT_REPLICA_LAG_MS,
        on_isr_change: Callable[[Partition], None] | None = None,
        is_broker_alive: Callable[[int], bool] = _any_broker_alive,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        #: `topic_id` is in the log's `partition.metadata` (the replica manager wrote or read
        #: it there): a LeaderAndIsr does not look again.
        self.topic_id_stored = False
        self.log = log
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.replicas = [] if replicas is None else replicas
        self.isr = [] if isr is None else isr
        self.node_id = leader if node_id is None else node_id
        self.partition_epoch = partition_epoch
        self.controller_epoch = controller_epoch
        self.min_isr = min_isr
        #: The topic's current `min.insync.replicas` (configs change at run time); else
        #: `min_isr`.
        self.min_isr_source = min_isr_source
        self.replica_lag_ms = replica_lag_ms
        self.followers: dict[int, FollowerState] = {}
        self.leader_epoch_start_offset: int | None = None
        self.pending_isr: PendingIsr | None = None
        #: Called with this partition when it has an ISR change to send (the replica manager).
        self.on_isr_change = on_isr_change
        #: Whether replicas other than the leader may be alive (refined by the metadata cache).
        self.is_broker_alive = is_broker_alive
        self.clock = clock
        #: Fetches long-polling on this partition, woken by every append.
        self.append_waiters = Waiters()
        #: Produces and fetches waiting on the high watermark, the ISR or the leadership.
        self.state_waiters = Waiters()
        if self.is_leader(self.node_id):
            self.leader_epoch_start_offset = self.log.log_end_offset
        # As Kafka's makeLeader: a leader whose ISR is itself has its whole log replicated. The
        # checkpointed high watermark lags after kill -9; without this, acknowledged records
        # would stay invisible to consumers until the next append.
        self._advance_high_watermark()

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """What read_committed consumers may read (see `PartitionLog.last_stable_offset`)."""
        return self.log.last_stable_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def is_leader(self, node_id: int | None = None) -> bool:
        return self.leader == (self.node_id if node_id is None else node_id)

    @property
    def is_local_leader(self) -> bool:
        return self.leader == self.node_id

    def leader_error(self, node_id: int, current_leader_epoch: int = -1) -> ErrorCode:
        """Kafka's checks before a leader serves a client: NONE, or why not.

        NOT_LEADER_OR_FOLLOWER when another broker leads; with a known current leader epoch
        (>= 0), UNKNOWN_LEADER_EPOCH when the client is ahead of us, FENCED_LEADER_EPOCH when
        it is behind.
        """
        if not self.is_leader(node_id):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return self.leader_epoch_error(current_leader_epoch)

    def leader_epoch_error(self, current_leader_epoch: int) -> ErrorCode:
        """Kafka's checkCurrentLeaderEpoch, on a leader or a follower: UNKNOWN_LEADER_EPOCH
        when the client's epoch (>= 0) is ahead of ours, FENCED_LEADER_EPOCH when behind."""
        if current_leader_epoch >= 0 and current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if current_leader_epoch >= 0 and current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.NONE

    # events -------------------------------------------------------------------------------
    def notify_append(self) -> None:
        """Wake every fetch long-polling on this partition."""
        self.append_waiters.notify()

    def notify_changed(self) -> None:
        """Wake every produce waiting on the high watermark, the ISR or the leadership."""
        self.state_waiters.notify()

    # ISR ----------------------------------------------------------------------------------
    @property
    def maximal_isr(self) -> frozenset[int]:
        if self.pending_isr is not None:
            return self.pending_isr.maximal
        return frozenset(self.isr)

    @property
    def effective_min_isr(self) -> int:
        """`min.insync.replicas`, but never more than the replicas there are (as Kafka)."""
        if not self.followers:
            return 1  # (every append asks: no topic config is read for a lone leader)
        configured = self.min_isr_source() if self.min_isr_source is not None else self.min_isr
        return max(1, min(configured, len(self.followers) + 1))

    @property
    def under_min_isr(self) -> bool:
        return self.is_local_leader and len(self.isr) < self.effective_min_isr

    # leader appends -----------------------------------------------------------------------
    def append_to_leader(
        self,
        records: memoryview,
        now_ms: int,
        acks: int = 1,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendInfo:
        """Validate, assign offsets and append; the high watermark moves as the ISR allows.

        With acks=all (-1), an ISR smaller than `min.insync.replicas` refuses the append
        (NOT_ENOUGH_REPLICAS). The batch has reached the OS (os.write returned) when this
        returns. `origin` COORDINATOR: a coordinator of this broker appends (transaction
        markers), skipping the client rules. `verification_guard`: KIP-890's guard of a
        transactional append (`storage.producer_state`; None: verification is off).
        """
        if self.leader != self.node_id:
            raise KafkaError(
                f"{self.topic}-{self.index}: broker {self.node_id} is not the leader",
                error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
            )
        if acks == -1 and len(self.isr) < self.effective_min_isr:
            raise KafkaError(
                f"the ISR {self.isr} of {self.topic}-{self.index} is smaller than "
                f"min.insync.replicas ({self.effective_min_isr})",
                error_code=ErrorCode.NOT_ENOUGH_REPLICAS,
            )
        info = self.log.append_as_leader(
            records,
            self.leader_epoch,
            now_ms,
            origin=origin,
            verification_guard=verification_guard,
        )
        self._advance_high_watermark(now_ms)
        self.notify_append()
        return info

    def maybe_advance_high_watermark(self, now_ms: int | None = None) -> None:
        """Recompute the high watermark after something besides a fetch or an append changed
        (a broker died: a caught-up follower on it no longer counts)."""
        self._advance_high_watermark(now_ms)

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """For acks=all: (done, error) once the high watermark passed `required_offset`."""
        if not self.is_local_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if self.effective_min_isr <= len(self.maximal_isr):
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if self.under_min_isr:
            # Kafka 3.9 freezes the high watermark under min ISR, so its produce would only
            # time out; we answer at once with the error Kafka gave before (and clients retry).
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    def _advance_high_watermark(self, now_ms: int | None = None) -> bool:
        """Kafka's maybeIncrementLeaderHW: the minimum log end offset over the (maximal) ISR
        and the caught-up followers about to join it; never while under min ISR."""
        if self.leader != self.node_id:
            return False
        followers = self.followers
        if not followers:  # a lone leader (min ISR 1): its log end offset, every append
            if not self.isr:
                return False
            new_hw = self.log.log_end_offset
            if new_hw > self.log.high_watermark:
                self.log.update_high_watermark(new_hw)
                self.state_waiters.notify_reached(new_hw)
                return True
            return False
        if now_ms is None:
            now_ms = self.clock()
        leo = self.log.log_end_offset
        new_hw = leo
        maximal = self.maximal_isr
        for replica_id, state in followers.items():
            if state.log_end_offset >= new_hw:
                continue
            if replica_id in maximal or (
                state.is_caught_up(leo, now_ms, self.replica_lag_ms)
                and self.is_broker_alive(replica_id)
            ):
                new_hw = state.log_end_offset
        # (under min ISR asked only when the watermark would move: it reads the topic's config)
        if new_hw > self.log.high_watermark and not self.under_min_isr:
            self.log.update_high_watermark(new_hw)
            self.state_waiters.notify_reached(new_hw)
            return True
        return False

    # followers' fetches -------------------------------------------------------------------
    def update_follower_fetch_state(
        self,
        replica_id: int,
        fetch_offset: int,
        log_start_offset: int,
        now_ms: int,
        leader_leo: int,
    ) -> None:
        """A follower fetched from `fetch_offset` (its log end offset) while our log ended at
        `leader_leo`: record it, maybe propose it for the ISR, maybe advance the watermark."""
        state = self.followers.get(replica_id)
        if state is None:
            return
        previous_leo = state.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_start_offset = log_start_offset
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_leo = max(leader_leo, state.last_fetch_leader_leo)
        state.last_fetch_ms = now_ms
        self.maybe_expand_isr(replica_id)
        if previous_leo != fetch_offset:
            self._advance_high_watermark(now_ms)

    def maybe_expand_isr(self, replica_id: int) -> None:
        """A follower at or past the high watermark and the start of our leader epoch joins."""
        if self.pending_isr is not None or replica_id in self.isr:
            return
        state = self.followers.get(replica_id)
        if state is None or not self.is_broker_alive(replica_id):
            return
        start = self.leader_epoch_start_offset
        if state.log_end_offset < self.high_watermark or start is None:
            return
        if state.log_end_offset < start:
            return
        log.info(
            "%s-%d: expanding the ISR from %s to add %d",
            self.topic,
            self.index,
            self.isr,
            replica_id,
        )
        new_isr = [*self.isr, replica_id]
        self._propose(new_isr, frozenset(new_isr))

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        if self.pending_isr is not None or not self.is_local_leader:
            return []
        leo = self.log.log_end_offset
        out = []
        for replica_id in self.isr:
            if replica_id == self.node_id:
                continue
            state = self.followers.get(replica_id)
            if state is None or not state.is_caught_up(leo, now_ms, self.replica_lag_ms):
                out.append(replica_id)
        return out

    def maybe_shrink_isr(self, now_ms: int) -> None:
        """Followers not caught up for `replica.lag.time.max.ms` leave the ISR."""
        stale = self.out_of_sync_replicas(now_ms)
        if not stale:
            return
        new_isr = [r for r in self.isr if r not in stale]
        log.info(
            "%s-%d: shrinking the ISR from %s to %s (leader end offset %d, high watermark %d)",
            self.topic,
            self.index,
            self.isr,
            new_isr,
            self.log.log_end_offset,
            self.high_watermark,
        )
        self._propose(new_isr, frozenset(self.isr))

    def _propose(self, new_isr: list[int], maximal: frozenset[int]) -> None:
        self.pending_isr = PendingIsr(
            new_isr, maximal, list(self.isr), self.leader_epoch, self.partition_epoch
        )
        if self.on_isr_change is not None:
            self.on_isr_change(self)

    def complete_isr_change(
        self,
        pending: PendingIsr,
        error: ErrorCode,
        *,
        leader_epoch: int = -1,
        isr: list[int] | None = None,
        partition_epoch: int = -1,
        now_ms: int | None = None,
    ) -> bool:
        """Apply the controller's answer to `pending`; True when it should be sent again."""
        if self.pending_isr is not pending:
            return False  # overtaken by a LeaderAndIsr meanwhile
        if error != ErrorCode.NONE:
            if error in (ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA):
                self.pending_isr = None  # the controller says: not applied, epoch is right
                # The refused replica no longer holds the watermark back (when it is not
                # caught up, or gone): nothing else may come to move it.
                self._advance_high_watermark(now_ms)
                self.notify_changed()
                return False
            if error in (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.UNKNOWN_TOPIC_ID,
                ErrorCode.FENCED_LEADER_EPOCH,
                ErrorCode.INVALID_UPDATE_VERSION,
                ErrorCode.INVALID_REQUEST,
                ErrorCode.NEW_LEADER_ELECTED,
            ):
                log.info(
                    "%s-%d: the controller refused the ISR %s: %s; awaiting new metadata",
                    self.topic,
                    self.index,
                    pending.isr,
                    error.name,
                )
                return False  # stay pending until LeaderAndIsr tells us the truth
            return True
        if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
            log.info("%s-%d: ignoring a stale ISR answer", self.topic, self.index)
            return False
        self.pending_isr = None
        self.isr = list(isr or [])
        self.partition_epoch = partition_epoch
        log.info(
            "%s-%d: ISR is now %s (partition epoch %d)%s",
            self.topic,
            self.index,
            self.isr,
            partition_epoch,
            " (under min ISR)" if self.under_min_isr else "",
        )
        self._advance_high_watermark(now_ms)
        self.notify_changed()
        return False

    # leadership ---------------------------------------------------------------------------
    def make_leader(
        self,
        *,
        leader_epoch: int,
        partition_epoch: int,
        controller_epoch: int,
        isr: list[int],
        replicas: list[int],
        now_ms: int,
    ) -> bool:
        """Become (or stay) the leader; False if the partition epoch is older than ours."""
        if partition_epoch < self.partition_epoch:
            return False
        self.controller_epoch = controller_epoch
        was_leader = self.is_local_leader
        new_epoch = leader_epoch > self.leader_epoch or not was_leader
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.pending_isr = None
        followers = [r for r in replicas if r != self.node_id]
        if not was_leader:
            self.followers = {}
        self.followers = {r: self.followers.get(r, FollowerState()) for r in followers}
        if new_epoch:
            start = self.log.log_end_offset
            self.log.leader_epoch_cache.assign(leader_epoch, start)
            for r, state in self.followers.items():
                in_sync = r in isr
                if not was_leader:
                    self.followers[r] = state = FollowerState(last_fetch_leader_leo=-1)
                else:
                    state.last_fetch_leader_leo = start
                    state.last_fetch_ms = now_ms if in_sync else 0
                state.last_caught_up_ms = now_ms if in_sync else 0
            self.leader_epoch = leader_epoch
            self.leader_epoch_start_offset = start
        self.partition_epoch = partition_epoch
        self.leader = self.node_id
        self._advance_high_watermark(now_ms)
        self.notify_changed()
        self.notify_append()
        return not was_leader

    def make_follower(
        self,
        *,
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        controller_epoch: int,
        replicas: list[int],
    ) -> bool:
        """Follow `leader`; True when fetching must (re)start (a new leader epoch)."""
        if partition_epoch < self.partition_epoch:
            return False
        self.controller_epoch = controller_epoch
        new_epoch = leader_epoch > self.leader_epoch or self.is_local_leader
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.leader_epoch_start_offset = None
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = []
        self.pending_isr = None
        self.followers = {}
        self.notify_changed()
        self.notify_append()
        return new_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch: the requested epoch's end, or the
        end of the largest epoch below it; (-1, -1) when the epoch is older than the log."""
        return self.log.end_offset_for_epoch(epoch)
