"""`__transaction_state` and the transactional ids it holds (Kafka's TransactionStateManager).

This module owns which partitions of the topic this broker coordinates, the metadata of their
transactional ids, and writing and loading them. The topic is created on first use as
`wirebroker.auto_topics` makes it (`transaction.state.log.num.partitions` partitions, compacted,
uncompressed, ...), by FindCoordinator or a Metadata request naming it. Embedded, it has one
replica and every partition is coordinated here: loaded at start, or, for a topic made on first
use (its logs made off the loop), once its log exists (`partition_moved`; until then its ids
answer NOT_COORDINATOR, as Kafka's before it leads the partition). In a cluster it is created
through ZooKeeper with `transaction.state.log.replication.factor` replicas, and a partition is coordinated by its leader: `partition_moved` loads it when this broker
becomes leader, the coordinator epoch being the partition's leader epoch, and unloads it when
it no longer is. Loading replays the partition off the loop (`CoordinatorStore.replay`, in
chunks of `transaction.state.log.load.buffer.size`); meanwhile its ids answer
COORDINATOR_LOAD_IN_PROGRESS, and a transactional id of a partition neither loaded nor loading
answers NOT_COORDINATOR. Once loaded, the coordinator is told (`on_loaded`) so that it
completes the transactions that were preparing to commit or abort.

A transition is written as in Kafka's appendTransactionToLog: the record is appended (acks=all)
and awaited within the transaction's timeout; only then is it applied to the metadata, and only
if the partition is still loaded at the same coordinator epoch (else NOT_COORDINATOR). A failed
write is mapped as Kafka maps it (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...) and the
pending transition dropped, unless the caller retries it.

Expired ids (`transactional.id.expiration.ms` since their last update, in Empty, CompleteCommit
or CompleteAbort) are removed with a tombstone when `remove_expired` runs.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode
from wirebroker.coordinator_store import (
    CoordinatorStore,
    Origin,
    PartitionLoads,
    partition_for,
    store_error,
)
from wirebroker.partition import TopicPartition
from wirebroker.topics import TXN_TOPIC
from wirebroker.txn import records
from wirebroker.txn.state import TransactionMetadata, TxnState, TxnTransit

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

#: The epoch of every partition of the embedded broker (it never changes leader).
EMBEDDED_EPOCH = 0
#: Partition load times are reported over this window (Kafka's sensor: 30 s), from at most
#: this many loads.
LOAD_TIME_WINDOW_S = 30.0
LOAD_TIMES_KEPT = 256


@dataclass(slots=True)
class TxnPartition:
    """One loaded partition: its coordinator epoch and its transactional ids."""

    coordinator_epoch: int
    ids: dict[str, TransactionMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Lookup:
    """What the cache says about a transactional id: an error (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS), or its metadata (None: unknown) and coordinator epoch."""

    error: ErrorCode
    coordinator_epoch: int = -1
    metadata: TransactionMetadata | None = None


#: Told of a partition just loaded: its index, coordinator epoch and transactional ids.
OnLoaded = Callable[[int, int, list[TransactionMetadata]], None]


class TransactionStateManager:
    """The partitions of `__transaction_state` this broker coordinates (see the module doc)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.num_partitions = config.get_int("transaction.state.log.num.partitions")
        self.max_timeout_ms = config.get_int("transaction.max.timeout.ms")
        self.expiration_ms = config.get_int("transactional.id.expiration.ms")
        self.store = CoordinatorStore(
            TXN_TOPIC,
            broker.partition,
            config.get_int("request.timeout.ms") / 1000,
            chunk_bytes=config.get_int("transaction.state.log.load.buffer.size"),
        )
        self.partitions: dict[int, TxnPartition] = {}
        #: Partitions loading, each at its coordinator epoch.
        self.loading = PartitionLoads(self.store)
        self._nursery: trio.Nursery | None = None
        self.on_loaded: OnLoaded = lambda index, epoch, ids: None
        #: (monotonic time, ms) of the latest partition loads, for Kafka's
        #: partition-load-time-max/avg (`recent_load_times_ms`).
        self.load_times: deque[tuple[float, float]] = deque(maxlen=LOAD_TIMES_KEPT)

    # -- the topic and its partitions -------------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        """Serve from `nursery` (loads run there). Embedded, load every partition of the topic
        served (those whose logs are being made load once they are, `partition_moved`); in a
        cluster, partitions load as this broker becomes their leader."""
        self._nursery = nursery
        if self.broker.cluster_mode:
            return
        record = self.broker.topics.get(TXN_TOPIC)
        if record is not None:
            self.num_partitions = record.partitions
            for index in range(record.partitions):
                if self.broker.partition(TXN_TOPIC, index) is not None:
                    self._start_load(index, EMBEDDED_EPOCH)

    def partition_for(self, transactional_id: str) -> int:
        """The id's partition; in a cluster the topic's real partition count counts, as the
        group metadata manager's `partition_of`."""
        count = self.num_partitions
        if self.broker.cluster_mode:
            count = len(self.broker.metadata_cache.partitions.get(TXN_TOPIC, {})) or count
        return partition_for(transactional_id, count)

    def partition_moved(self, tp: TopicPartition, *, leader: bool, leader_epoch: int) -> bool:
        """A `__transaction_state` partition became led here (loaded, at `leader_epoch`) or no
        longer is (unloaded, or its load cancelled). Whether anything changed."""
        index = tp.partition
        if leader:
            loaded = self.partitions.get(index)
            if (loaded is not None and loaded.coordinator_epoch == leader_epoch) or (
                self.loading.epoch_of(index) == leader_epoch
            ):
                return False
            self._unload(index)
            self._start_load(index, leader_epoch)
            return True
        return self._unload(index)

    def _unload(self, index: int) -> bool:
        cancelled = self.loading.cancel(index)
        gone = self.partitions.pop(index, None)
        if gone is not None:
            log.info("%s-%d: unloaded %d transactional ids", TXN_TOPIC, index, len(gone.ids))
        return cancelled or gone is not None

    def recent_load_times_ms(self) -> list[float]:
        """How long the partition loads of the last `LOAD_TIME_WINDOW_S` took (Kafka's
        TransactionsPartitionLoadTime sensor keeps 30 s)."""
        since = time.monotonic() - LOAD_TIME_WINDOW_S
        return [ms for at, ms in self.load_times if at >= since]

    async def wait_loaded(self, index: int | None = None) -> None:
        """Until partition `index` (default: every one) is not loading."""
        await self.loading.wait(index)

    def _start_load(self, index: int, epoch: int) -> None:
        assert self._nursery is not None, "partitions load once the coordinator serves"
        loaded: dict[str, TransactionMetadata] = {}

        def replay(key: bytes, value: bytes | None, _origin: Origin) -> None:
            tid = records.decode_key(key)
            if tid is None:
                return
            metadata = records.decode_value(tid, value)
            if metadata is None:
                loaded.pop(tid, None)
            else:
                loaded[tid] = metadata

        def install(count: int, elapsed_ms: float) -> None:
            self.partitions[index] = TxnPartition(epoch, loaded)
            self.load_times.append((time.monotonic(), elapsed_ms))
            log.log(
                logging.INFO if count else logging.DEBUG,
                "%s-%d: loaded %d transactional ids from %d records at coordinator epoch %d "
                "in %.0f ms",
                TXN_TOPIC,
                index,
                len(loaded),
                count,
                epoch,
                elapsed_ms,
            )
            self.on_loaded(index, epoch, list(loaded.values()))

        self.loading.start(self._nursery, index, epoch, replay, None, install)

    # -- lookups ----------------------------------------------------------------------------
    def lookup(self, transactional_id: str) -> Lookup:
        """Kafka's getTransactionState."""
        index = self.partition_for(transactional_id)
        if index in self.loading:
            return Lookup(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        entry = self.partitions.get(index)
        if entry is None:
            return Lookup(ErrorCode.NOT_COORDINATOR)
        return Lookup(ErrorCode.NONE, entry.coordinator_epoch, entry.ids.get(transactional_id))

    def put_if_absent(self, metadata: TransactionMetadata) -> Lookup:
        """Add a new id's metadata (unless it is known meanwhile): the lookup of the id."""
        found = self.lookup(metadata.transactional_id)
        if found.error != ErrorCode.NONE or found.metadata is not None:
            return found
        entry = self.partitions[self.partition_for(metadata.transactional_id)]
        entry.ids[metadata.transactional_id] = metadata
        return Lookup(ErrorCode.NONE, entry.coordinator_epoch, metadata)

    def all_ids(self) -> Iterator[TransactionMetadata]:
        for entry in self.partitions.values():
            yield from entry.ids.values()

    def validate_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.max_timeout_ms

    # -- writing ----------------------------------------------------------------------------
    async def append(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        transit: TxnTransit,
        *,
        retry: bool = False,
    ) -> ErrorCode:
        """Write `transit` and, once durable, apply it (see the module doc). With `retry`, a
        COORDINATOR_NOT_AVAILABLE failure keeps the transition pending: the caller tries again."""
        found = self.lookup(transactional_id)
        if found.error != ErrorCode.NONE:
            return found.error
        if found.metadata is None or found.coordinator_epoch != coordinator_epoch:
            return ErrorCode.NOT_COORDINATOR
        write = self.store.append(
            self.partition_for(transactional_id),
            [(records.key(transactional_id), records.value(transit))],
            self.broker.now_ms(),
            f"transactional id {transactional_id}",
        )
        error = store_error(
            await self.store.stored(write, transit.timeout_ms / 1000),
            too_large=ErrorCode.UNKNOWN_SERVER_ERROR,
            timed_out=ErrorCode.COORDINATOR_NOT_AVAILABLE,
        )
        now = self.lookup(transactional_id)
        same = (
            now.error == ErrorCode.NONE
            and now.metadata is not None
            and now.coordinator_epoch == coordinator_epoch
        )
        if error == ErrorCode.NONE:
            if now.error != ErrorCode.NONE:
                return now.error
            if not same:
                log.info(
                    "transactional id %s: coordinator epoch changed while %s was written",
                    transactional_id,
                    transit.state.display_name,
                )
                return ErrorCode.NOT_COORDINATOR
            assert now.metadata is not None
            now.metadata.complete(transit)
            return ErrorCode.NONE
        log.info(
            "transactional id %s: writing %s failed: %s",
            transactional_id,
            transit.state.display_name,
            error.name,
        )
        if same and not (retry and error == ErrorCode.COORDINATOR_NOT_AVAILABLE):
            assert now.metadata is not None
            now.metadata.abort_pending()
        return error

    # -- expiry -----------------------------------------------------------------------------
    def timed_out(self, now_ms: int) -> list[TransactionMetadata]:
        """Ongoing transactions past their timeout, with no transition pending."""
        return [
            m
            for m in self.all_ids()
            if m.pending is None
            and m.state == TxnState.ONGOING
            and m.start_ms + m.timeout_ms < now_ms
        ]

    async def remove_expired(self) -> int:
        """Tombstone and forget the ids idle for `transactional.id.expiration.ms`; how many.
        Each partition's tombstones are one batch, awaited as acks=all."""
        now = self.broker.now_ms()
        removed = 0
        for index, entry in list(self.partitions.items()):
            expired = [
                (m, m.prepare_dead())
                for m in entry.ids.values()
                if m.pending is None
                and m.state.expiration_allowed
                and m.update_ms <= now - self.expiration_ms
            ]
            if not expired:
                continue
            write = self.store.append(
                index,
                [(records.key(m.transactional_id), None) for m, _ in expired],
                now,
                "transactional id expiration",
            )
            error = await self.store.stored(write)
            current = self.partitions.get(index)
            for metadata, transit in expired:
                ok = (
                    error == ErrorCode.NONE
                    and current is entry
                    and metadata.pending == TxnState.DEAD
                    and metadata.producer_epoch == transit.producer_epoch
                )
                if ok:
                    del entry.ids[metadata.transactional_id]
                    removed += 1
                else:
                    metadata.abort_pending()
            if error != ErrorCode.NONE:
                log.warning("%s-%d: expiring ids failed: %s", TXN_TOPIC, index, error.name)
        return removed
