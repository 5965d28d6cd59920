"""The transaction coordinator's operations (Kafka's TransactionCoordinator) and its timers.

What each transactional request does to a transactional id, with Kafka 3.9's checks in
Kafka's order: InitProducerId (a new id gets a producer id; a known one an epoch bump, which
fences the previous instance; KIP-360 retries with the client's current id and epoch; an
exhausted epoch a new producer id; an ongoing transaction is first aborted by the coordinator
with a bumped epoch and the client told CONCURRENT_TRANSACTIONS until the abort is complete),
AddPartitionsToTxn and AddOffsetsToTxn (`add_partitions`), the KIP-890 verification of
AddPartitionsToTxn v4 (`verify_partitions`), EndTxn (`end_transaction`: PrepareCommit or
PrepareAbort is written, the client answered once it is durable, then the markers are written
by `markers.MarkerSender`), DescribeTransactions and ListTransactions. The state machine is
`state.TransactionMetadata`'s; `__transaction_state` is the state manager's.

Timers run on the broker's clock (a test's `MockClock` moves them): every
`transaction.abort.timed.out.transaction.cleanup.interval.ms` the transactions past their
`transaction.timeout.ms` are aborted with a bumped epoch (so the producer is fenced), and every
`transaction.remove.expired.transaction.cleanup.interval.ms` ids idle for
`transactional.id.expiration.ms` are removed.

Producer ids come from `ProducerIdManager`'s blocks (in a cluster, fetched from ZooKeeper as
needed; COORDINATOR_LOAD_IN_PROGRESS while ZooKeeper gives none, as before; embedded, reserved
in its file, UNKNOWN_SERVER_ERROR when that cannot be written). Errors are the
coordinator's; the handlers map PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for old versions.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_transactions import DescribeTransactionsResponse
from protocol.messages.list_transactions import ListTransactionsResponse
from wirebroker.partition import TopicPartition
from wirebroker.topics import TXN_TOPIC
from wirebroker.txn.markers import MarkerSender
from wirebroker.txn.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnState,
    TxnTransit,
    epoch_exhausted,
)
from wirebroker.txn.state_manager import TransactionStateManager
from wirebroker.txn.verification import Verifier

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

S = TxnState


@dataclass(frozen=True, slots=True)
class InitResult:
    producer_id: int
    producer_epoch: int
    error: ErrorCode = ErrorCode.NONE


def _init_error(error: ErrorCode) -> InitResult:
    return InitResult(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, error)


class TransactionCoordinator:
    """The transactional ids this broker coordinates (see the module doc)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.state = TransactionStateManager(broker)
        self.state.on_loaded = self._complete_loaded
        self.markers = MarkerSender(broker, self.state)
        self.verifier = Verifier(broker)
        config = broker.config
        self.abort_interval_s = (
            config.get_int("transaction.abort.timed.out.transaction.cleanup.interval.ms") / 1000
        )
        self.expire_interval_s = (
            config.get_int("transaction.remove.expired.transaction.cleanup.interval.ms") / 1000
        )
        self.verification_enabled = config.get_bool("transaction.partition.verification.enable")

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        """Serve from `nursery`: start loading `__transaction_state` (embedded), and send
        markers, verify and run the timers there until it ends."""
        self.markers.start(nursery)
        self.verifier.start(nursery)
        self.state.start(nursery)
        nursery.start_soon(self._every, self.abort_interval_s, self.abort_timed_out)
        nursery.start_soon(self._every, self.expire_interval_s, self._remove_expired)

    @staticmethod
    async def _every(interval_s: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await trio.sleep(interval_s)
            try:
                await job()
            except Exception:  # a bug must not take the broker down
                log.exception("transaction coordinator: %s failed", getattr(job, "__name__", job))

    def partition_moved(self, tp: TopicPartition, *, leader: bool) -> None:
        """The replica manager made `tp` leader or follower here, or stopped it: for a
        `__transaction_state` partition, load (Kafka's onElection) or unload (onResignation)
        its transactional ids, and forget the markers this broker was sending for them."""
        if tp.topic != TXN_TOPIC:
            return
        partition = self.broker.partitions.get(tp)
        epoch = partition.leader_epoch if partition is not None else -1
        if self.state.partition_moved(tp, leader=leader, leader_epoch=epoch):
            self.markers.remove_for_partition(tp.partition)

    def _complete_loaded(
        self, index: int, coordinator_epoch: int, ids: list[TransactionMetadata]
    ) -> None:
        """A partition loaded: write the markers of the transactions that were preparing to
        commit or abort, then complete them."""
        now = self.broker.now_ms()
        for metadata in ids:
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                commit = metadata.state == S.PREPARE_COMMIT
                log.info(
                    "%s-%d: completing the %s of transactional id %s after loading",
                    TXN_TOPIC,
                    index,
                    "commit" if commit else "abort",
                    metadata.transactional_id,
                )
                transit = metadata.prepare_complete(now)
                self.markers.add(coordinator_epoch, commit, metadata, transit)

    # -- producer ids -----------------------------------------------------------------------
    async def generate_producer_id(self) -> int:
        """A producer id never handed out before; in a cluster from a ZooKeeper block, fetched
        when the current one is used up (KafkaError COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        fetch = self._zookeeper_block if self.broker.cluster_mode else None
        return await self.broker.producer_ids.next_producer_id(fetch)

    async def _zookeeper_block(self) -> tuple[int, int]:
        cluster = self.broker.cluster
        try:
            if cluster is None:
                raise RuntimeError("not a member of the cluster yet")
            return await cluster.allocate_producer_id_block()
        except Exception as e:  # ZooKeeper unreachable or slow: the client retries
            log.warning("no producer id block from ZooKeeper: %s", e)
            raise KafkaError(
                "no producer id block yet", error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            ) from e

    # -- InitProducerId ---------------------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str | None, timeout_ms: int, expected: tuple[int, int] | None
    ) -> InitResult:
        """Kafka's handleInitProducerId; `expected` is the client's (producer id, epoch)."""
        try:
            if transactional_id is None:
                return InitResult(await self.generate_producer_id(), 0)
            if transactional_id == "":
                return _init_error(ErrorCode.INVALID_REQUEST)
            if not self.state.validate_timeout(timeout_ms):
                return _init_error(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
            found = self.state.lookup(transactional_id)
            if found.error == ErrorCode.NONE and found.metadata is None:
                created = TransactionMetadata(
                    transactional_id,
                    producer_id=await self.generate_producer_id(),
                    producer_epoch=NO_PRODUCER_EPOCH,
                    timeout_ms=timeout_ms,
                    state=S.EMPTY,
                    update_ms=self.broker.now_ms(),
                )
                found = self.state.put_if_absent(created)
            if found.error != ErrorCode.NONE:
                return _init_error(found.error)
            assert found.metadata is not None
            metadata, epoch = found.metadata, found.coordinator_epoch
            prepared = await self._prepare_init(metadata, timeout_ms, expected)
        except KafkaError as e:
            return _init_error(e.error_code)
        if isinstance(prepared, ErrorCode):
            return _init_error(prepared)
        if prepared.state == S.PREPARE_EPOCH_FENCE:
            # abort the ongoing transaction first; the client retries (and bumps again)
            error = await self._end_transaction(
                transactional_id,
                prepared.producer_id,
                prepared.producer_epoch,
                commit=False,
                from_client=False,
            )
            return _init_error(
                ErrorCode.CONCURRENT_TRANSACTIONS if error == ErrorCode.NONE else error
            )
        error = await self.state.append(transactional_id, epoch, prepared)
        if error != ErrorCode.NONE:
            log.info(
                "transactional id %s: InitProducerId answered %s", transactional_id, error.name
            )
            return _init_error(error)
        log.info(
            "initialized transactional id %s with producer id %d and epoch %d on partition %s-%d",
            transactional_id,
            prepared.producer_id,
            prepared.producer_epoch,
            TXN_TOPIC,
            self.state.partition_for(transactional_id),
        )
        return InitResult(prepared.producer_id, prepared.producer_epoch)

    async def _prepare_init(
        self,
        metadata: TransactionMetadata,
        timeout_ms: int,
        expected: tuple[int, int] | None,
    ) -> TxnTransit | ErrorCode:
        """Kafka's prepareInitProducerIdTransit."""
        if metadata.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected is not None:
            expected_id, expected_epoch = expected
            valid = (
                metadata.producer_epoch == NO_PRODUCER_EPOCH
                or expected_id == metadata.producer_id
                or (expected_id == metadata.last_producer_id and epoch_exhausted(expected_epoch))
            )
            if not valid:
                return ErrorCode.PRODUCER_FENCED
        state = metadata.state
        if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if metadata.producer_epoch_exhausted and (
                expected is None or expected[1] == metadata.producer_epoch
            ):
                producer_id = await self.generate_producer_id()
                if metadata.pending is not None or metadata.state != state:
                    return ErrorCode.CONCURRENT_TRANSACTIONS  # it moved on while we waited
                return metadata.prepare_producer_id_rotation(
                    producer_id, timeout_ms, self.broker.now_ms(), expected is not None
                )
            return metadata.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], self.broker.now_ms()
            )
        if state == S.ONGOING:
            return metadata.prepare_fence_producer_epoch()
        raise KafkaError(
            f"transactional id {metadata.transactional_id} is {state.display_name}",
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
        )

    def _held_by(
        self, transactional_id: str, producer_id: int
    ) -> tuple[TransactionMetadata, int] | ErrorCode:
        """The id's metadata and coordinator epoch if `producer_id` holds it; else why not:
        INVALID_REQUEST for an empty id, the cache's error (coordinated elsewhere, loading), or
        INVALID_PRODUCER_ID_MAPPING for an unknown id or another producer id."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        found = self.state.lookup(transactional_id)
        if found.error != ErrorCode.NONE:
            return found.error
        if found.metadata is None or found.metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        return found.metadata, found.coordinator_epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------
    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> ErrorCode:
        """Kafka's handleAddPartitionsToTransaction."""
        held = self._held_by(transactional_id, producer_id)
        if isinstance(held, ErrorCode):
            return held
        metadata, coordinator_epoch = held
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if metadata.pending is not None or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state == S.ONGOING and partitions <= metadata.partitions:
            return ErrorCode.NONE
        transit = metadata.prepare_add_partitions(partitions, self.broker.now_ms())
        return await self.state.append(transactional_id, coordinator_epoch, transit)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's handleVerifyPartitionsInTransaction: per partition, NONE if it is in the
        transaction, TRANSACTION_ABORTABLE if not, or the id's error."""

        def every(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(partitions, error)

        held = self._held_by(transactional_id, producer_id)
        if isinstance(held, ErrorCode):
            return every(held)
        metadata, _ = held
        if metadata.producer_epoch != producer_epoch:
            return every(ErrorCode.PRODUCER_FENCED)
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return every(ErrorCode.CONCURRENT_TRANSACTIONS)
        return {
            tp: ErrorCode.NONE if tp in metadata.partitions else ErrorCode.TRANSACTION_ABORTABLE
            for tp in partitions
        }

    # -- EndTxn -----------------------------------------------------------------------------
    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        """Kafka's handleEndTransaction: answered once the Prepare record is durable."""
        return await self._end_transaction(
            transactional_id, producer_id, producer_epoch, commit=commit, from_client=True
        )

    async def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        from_client: bool,
    ) -> ErrorCode:
        held = self._held_by(transactional_id, producer_id)
        if isinstance(held, ErrorCode):
            return held
        metadata, coordinator_epoch = held
        # clients must not bump the epoch; the coordinator's own abort may carry a bumped one
        if (from_client and producer_epoch != metadata.producer_epoch) or (
            producer_epoch < metadata.producer_epoch
        ):
            return ErrorCode.PRODUCER_FENCED
        # the coordinator's own abort follows its epoch fence at once (no await in between)
        fencing = metadata.pending == S.PREPARE_EPOCH_FENCE and not from_client and not commit
        if metadata.pending is not None and not fencing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = metadata.state
        if state == S.ONGOING:
            if fencing:
                metadata.begin_epoch_fence_abort(producer_epoch)
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            transit = metadata.prepare_abort_or_commit(target, self.broker.now_ms())
        elif state == S.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else self._invalid(metadata, commit)
        elif state == S.COMPLETE_ABORT:
            return ErrorCode.NONE if not commit else self._invalid(metadata, commit)
        elif state == S.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else self._invalid(metadata, commit)
        elif state == S.PREPARE_ABORT:
            return (
                ErrorCode.CONCURRENT_TRANSACTIONS if not commit else self._invalid(metadata, commit)
            )
        elif state == S.EMPTY:
            return self._invalid(metadata, commit)
        else:
            raise KafkaError(
                f"transactional id {transactional_id} is {state.display_name}",
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            )
        error = await self.state.append(transactional_id, coordinator_epoch, transit)
        if error != ErrorCode.NONE:
            if fencing:
                now = self.state.lookup(transactional_id)
                if now.metadata is not None and now.coordinator_epoch == coordinator_epoch:
                    now.metadata.failed_epoch_fence = True
                    log.warning(
                        "transactional id %s: the epoch fence was not written (%s); the epoch "
                        "was raised to %d but not given to any producer",
                        transactional_id,
                        error.name,
                        transit.producer_epoch,
                    )
            return error
        return await self._send_markers(transactional_id, coordinator_epoch, producer_id, commit)

    async def _send_markers(
        self, transactional_id: str, coordinator_epoch: int, producer_id: int, commit: bool
    ) -> ErrorCode:
        """The Prepare record is durable: hand the transaction to the marker sender, unless it
        changed meanwhile (Kafka's sendTxnMarkersCallback). On the embedded broker its markers
        and Complete record are written before this returns (`MarkerSender.complete_at_once`)."""
        found = self.state.lookup(transactional_id)
        if found.error != ErrorCode.NONE:
            return found.error
        metadata = found.metadata
        if metadata is None or found.coordinator_epoch != coordinator_epoch:
            return ErrorCode.NOT_COORDINATOR
        if metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.pending is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        wanted = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if metadata.state != wanted:
            return self._invalid(metadata, commit)
        transit = metadata.prepare_complete(self.broker.now_ms())
        await self.markers.complete_at_once(coordinator_epoch, commit, metadata, transit)
        return ErrorCode.NONE

    @staticmethod
    def _invalid(metadata: TransactionMetadata, commit: bool) -> ErrorCode:
        log.debug(
            "transactional id %s is %s: cannot %s",
            metadata.transactional_id,
            metadata.state.display_name,
            "commit" if commit else "abort",
        )
        return ErrorCode.INVALID_TXN_STATE

    # -- timers -----------------------------------------------------------------------------
    async def abort_timed_out(self) -> None:
        """Abort every ongoing transaction past its timeout, fencing its producer (Kafka's
        abortTimedOutTransactions)."""
        expired = self.state.timed_out(self.broker.now_ms())
        if not expired:
            return
        async with trio.open_nursery() as nursery:
            for metadata in expired:
                nursery.start_soon(self._abort_timed_out, metadata.transactional_id)

    async def _abort_timed_out(self, transactional_id: str) -> None:
        found = self.state.lookup(transactional_id)
        metadata = found.metadata
        if metadata is None or metadata.pending is not None or metadata.state != S.ONGOING:
            return  # it moved on meanwhile
        transit = metadata.prepare_fence_producer_epoch()
        log.info(
            "transactional id %s: aborting its transaction after %d ms (producer %d fenced "
            "with epoch %d)",
            transactional_id,
            metadata.timeout_ms,
            metadata.producer_id,
            transit.producer_epoch,
        )
        error = await self._end_transaction(
            transactional_id,
            transit.producer_id,
            transit.producer_epoch,
            commit=False,
            from_client=False,
        )
        if error not in (
            ErrorCode.NONE,
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            ErrorCode.PRODUCER_FENCED,
            ErrorCode.CONCURRENT_TRANSACTIONS,
        ):
            log.warning(
                "transactional id %s: aborting the timed-out transaction failed: %s",
                transactional_id,
                error.name,
            )

    async def _remove_expired(self) -> None:
        removed = await self.state.remove_expired()
        if removed:
            log.info("removed %d expired transactional ids", removed)

    # -- admin ------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> DescribeTransactionsResponse.TransactionState:
        """Kafka's handleDescribeTransactions."""
        out = DescribeTransactionsResponse.TransactionState(transactional_id=transactional_id)
        if not transactional_id:
            out.error_code = ErrorCode.INVALID_REQUEST
            return out
        found = self.state.lookup(transactional_id)
        metadata = found.metadata
        if found.error != ErrorCode.NONE:
            out.error_code = found.error
        elif metadata is None or metadata.state == S.DEAD:
            out.error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        else:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(metadata.partitions, key=lambda t: (t.topic, t.partition)):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            out.topics = [
                DescribeTransactionsResponse.TopicData(topic=topic, partitions=indexes)
                for topic, indexes in by_topic.items()
            ]
            out.producer_id = metadata.producer_id
            out.producer_epoch = metadata.producer_epoch
            out.transaction_state = metadata.state.display_name
            out.transaction_timeout_ms = metadata.timeout_ms
            out.transaction_start_time_ms = metadata.start_ms
        return out

    def list_transactions(
        self, producer_ids: set[int], states: set[str], duration_ms: int
    ) -> ListTransactionsResponse:
        """Kafka's listTransactionStates: the ids coordinated here, filtered by producer id,
        state name and (v1) how long the transaction has been running."""
        response = ListTransactionsResponse()
        if self.state.loading:
            response.error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            return response
        wanted = set()
        for name in states:
            state = S.from_name(name)
            if state is None:
                response.unknown_state_filters.append(name)
            else:
                wanted.add(state)
        now = self.broker.now_ms()
        for metadata in self.state.all_ids():
            if metadata.state == S.DEAD:
                continue
            if producer_ids and metadata.producer_id not in producer_ids:
                continue
            if states and metadata.state not in wanted:
                continue
            if duration_ms >= 0 and now - metadata.start_ms <= duration_ms:
                continue
            response.transaction_states.append(
                ListTransactionsResponse.TransactionState(
                    transactional_id=metadata.transactional_id,
                    producer_id=metadata.producer_id,
                    transaction_state=metadata.state.display_name,
                )
            )
        return response

    def statistics(self) -> dict[str, int]:
        """Transactional ids by state, partitions loaded and loading, and the marker queues."""
        stats = {state.display_name: 0 for state in S}
        for metadata in self.state.all_ids():
            stats[metadata.state.display_name] += 1
        stats["partitions_loaded"] = len(self.state.partitions)
        stats["partitions_loading"] = len(self.state.loading)
        stats.update(self.markers.statistics())
        return stats
