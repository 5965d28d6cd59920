"""One transactional id's state machine (Kafka's TransactionMetadata): pure, no I/O, no clock.

`TransactionMetadata` is what the coordinator knows of a transactional id: its producer id and
epoch (and the previous ones, for KIP-360 retries), the transaction timeout, the state, the
partitions of the ongoing transaction and its start and last-update times. Every change takes
two steps, as in Kafka: a `prepare_*` method checks that the target state may follow the current
one (`VALID_PREVIOUS`; otherwise `IllegalTransition`), marks it pending and returns the target
as a `TxnTransit` -- what the coordinator writes to `__transaction_state`; once that record is
durable, `complete(transit)` makes it current (again checked, as Kafka's completeTransitionTo),
or `abort_pending()` forgets it after a failed write. While a transition is pending no other
can be prepared: the coordinator answers CONCURRENT_TRANSACTIONS.

The states (`TxnState`, with Kafka's ids as stored in the log and names as DescribeTransactions
shows them): Empty -> Ongoing (partitions added) -> PrepareCommit / PrepareAbort (EndTxn, the
record written before any marker) -> CompleteCommit / CompleteAbort (every marker written) ->
Ongoing again, or Empty after InitProducerId. PrepareEpochFence is the transient state of a
coordinator-side abort (a new producer instance, or a timeout): it is never written, the abort
is (PrepareAbort with the bumped epoch). Dead is the transient state of an expiring id: its
tombstone is written and the id removed, never Dead itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from protocol.errors import ErrorCode
from wirebroker.partition import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767


class TxnState(enum.Enum):
    """A transaction state: its id in `__transaction_state` and its name in the admin APIs."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def display_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return next((s for s in cls if s.display_name == name), None)

    @property
    def expiration_allowed(self) -> bool:
        """An idle id in this state may expire (`transactional.id.expiration.ms`)."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def in_transaction(self) -> bool:
        """A transaction is open: not yet ended (Ongoing) or its markers not all written."""
        return self in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


S = TxnState
#: The states each state may be entered from (Kafka's validPreviousStates).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTransition(Exception):
    """A transition the state machine forbids. Raised by `prepare_*` and `complete`; the
    coordinator checks states before preparing, so this means a bug (it is logged and the
    request answered UNKNOWN_SERVER_ERROR)."""


def epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MAX_VALUE for fencing: an epoch of MAX-1 or more needs a new id."""
    return epoch >= SHORT_MAX - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """A target state: what is written to the log, and applied once it is durable."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    update_ms: int


@dataclass(eq=False, slots=True)
class TransactionMetadata:
    """What the coordinator knows of one transactional id (see the module doc)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    update_ms: int
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    #: The state a prepared transition leads to, until it completes or is abandoned.
    pending: TxnState | None = None
    #: A coordinator-side epoch fence was not written: the next fence reuses its epoch.
    failed_epoch_fence: bool = False

    # -- preparing --------------------------------------------------------------------------
    def prepare_fence_producer_epoch(self) -> TxnTransit:
        """Bump the epoch to abort the ongoing transaction from the coordinator's side."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransition("cannot fence a producer whose epoch is Short.MAX_VALUE")
        epoch = self.producer_epoch if self.failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            S.PREPARE_EPOCH_FENCE,
            self.producer_id,
            epoch,
            NO_PRODUCER_EPOCH,
            self.timeout_ms,
            frozenset(self.partitions),
            self.start_ms,
            self.update_ms,
        )

    def prepare_increment_producer_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | ErrorCode:
        """InitProducerId on a finished transaction: the next epoch (Empty). With the
        client's current epoch (KIP-360): a bump if it is current, the same epoch again if it
        is the previous one (a retry), else PRODUCER_FENCED."""
        if self.producer_epoch_exhausted:
            raise IllegalTransition(f"producer {self.producer_id} has no epochs left")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._prepare(
            S.EMPTY, self.producer_id, epoch, last_epoch, timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_producer_id_rotation(
        self, producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """A new producer id at epoch 0, when the epochs of the current one ran out."""
        if self.state.in_transaction:
            raise IllegalTransition("cannot rotate producer ids during a transaction")
        last_epoch = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(
            S.EMPTY, producer_id, 0, last_epoch, timeout_ms, frozenset(), -1, now_ms
        )

    def prepare_add_partitions(self, added: frozenset[TopicPartition], now_ms: int) -> TxnTransit:
        """Partitions join the transaction (Ongoing); a new transaction starts now."""
        finished = (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT)
        start = now_ms if self.state in finished else self.start_ms
        return self._prepare_same_producer(
            S.ONGOING, frozenset(self.partitions) | added, start, now_ms
        )

    def prepare_abort_or_commit(self, state: TxnState, now_ms: int) -> TxnTransit:
        """EndTxn: PrepareCommit or PrepareAbort, with the transaction's partitions."""
        return self._prepare_same_producer(state, frozenset(self.partitions), self.start_ms, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Every marker is written: CompleteCommit or CompleteAbort, no partitions left."""
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.failed_epoch_fence = False
        return self._prepare_same_producer(state, frozenset(), self.start_ms, now_ms)

    def prepare_dead(self) -> TxnTransit:
        """The id expires: its tombstone is written, then it is removed."""
        return self._prepare_same_producer(S.DEAD, frozenset(), self.start_ms, self.update_ms)

    def begin_epoch_fence_abort(self, fenced_epoch: int) -> None:
        """A prepared epoch fence becomes the abort it was for: the pending fence is dropped
        and the bumped epoch made current, so that `prepare_abort_or_commit` writes it (Kafka's
        endTransaction with isEpochFence). Only from Ongoing with a fence pending."""
        if self.pending != S.PREPARE_EPOCH_FENCE:
            raise IllegalTransition(f"no epoch fence pending (pending: {self.pending})")
        self.pending = None
        self.producer_epoch = fenced_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH

    def _prepare_same_producer(
        self,
        state: TxnState,
        partitions: frozenset[TopicPartition],
        start_ms: int,
        update_ms: int,
    ) -> TxnTransit:
        """A transition that keeps the producer id, its epochs and the timeout."""
        return self._prepare(
            state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
            partitions,
            start_ms,
            update_ms,
        )

    def _prepare(
        self,
        state: TxnState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[TopicPartition],
        start_ms: int,
        update_ms: int,
    ) -> TxnTransit:
        if self.pending is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: transition to {state.display_name} while one to "
                f"{self.pending.display_name} is pending"
            )
        if producer_id < 0:
            raise IllegalTransition(f"illegal producer id {producer_id}")
        if state != S.DEAD and epoch < 0:
            raise IllegalTransition(f"illegal producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: {state.display_name} cannot follow "
                f"{self.state.display_name}"
            )
        self.pending = state
        return TxnTransit(
            producer_id,
            self.producer_id,
            epoch,
            last_epoch,
            timeout_ms,
            state,
            partitions,
            start_ms,
            update_ms,
        )

    # -- completing -------------------------------------------------------------------------
    def complete(self, transit: TxnTransit) -> None:
        """The transit's record is durable: make it current (Kafka's completeTransitionTo)."""
        target = self.pending
        if target is None or target != transit.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state.display_name} but the "
                f"pending transition is {target.display_name if target else 'none'}"
            )
        same_producer = (
            transit.producer_epoch == self.producer_epoch
            and transit.producer_id == self.producer_id
        )
        if target == S.EMPTY:
            bump = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id
            )
            if (
                (transit.producer_epoch != self.producer_epoch and not bump)
                or transit.partitions
                or transit.start_ms != -1
            ):
                self._refuse(transit)
            self.timeout_ms = transit.timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif target == S.ONGOING:
            if (
                not same_producer
                or not self.partitions <= transit.partitions
                or self.timeout_ms != transit.timeout_ms
            ):
                self._refuse(transit)
            self.start_ms = transit.start_ms
            self.partitions |= transit.partitions
        elif target in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            if (
                not same_producer
                or self.partitions != transit.partitions
                or self.timeout_ms != transit.timeout_ms
                or self.start_ms != transit.start_ms
            ):
                self._refuse(transit)
        elif target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if not same_producer or self.timeout_ms != transit.timeout_ms or transit.start_ms == -1:
                self._refuse(transit)
            self.start_ms = transit.start_ms
            self.partitions.clear()
        else:  # PrepareEpochFence and Dead are never completed
            self._refuse(transit)
        self.update_ms = transit.update_ms
        self.pending = None
        self.state = target

    def _refuse(self, transit: TxnTransit) -> None:
        raise IllegalTransition(f"{self.transactional_id}: cannot complete {transit} from {self}")

    def abort_pending(self) -> None:
        """The transit's record was not written: nothing changes (Kafka resets pendingState)."""
        self.pending = None

    def remove_partition(self, tp: TopicPartition) -> None:
        """A marker reached `tp` (or it is gone): only while the transaction ends."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransition(
                f"{self.transactional_id}: removing {tp} in state {self.state.display_name}"
            )
        self.partitions.discard(tp)

    @property
    def producer_epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)
