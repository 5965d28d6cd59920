"""Writing a transaction's COMMIT or ABORT markers to its partitions' leaders, then completing it
(Kafka's TransactionMarkerChannelManager and its completion handler).

Once a PrepareCommit or PrepareAbort is durable the coordinator hands the transaction over
(`add`). Its partitions are grouped by leader -- from the metadata cache in a cluster, this
broker itself when embedded -- and each leader gets one WriteTxnMarkers request at a time
carrying every transaction queued for it (the markers carry the producer id and epoch and the
coordinator epoch). Partitions this broker leads are written in-process
(`wirebroker.txn_markers`, the WriteTxnMarkers handler's core); the
others go over the inter-broker listener with `PeerClient` (TLS or SASL as configured for the
replica fetchers). As each leader answers, its partitions leave the transaction; the ones it
could not write yet (not leader, not enough replicas, timed out, unreachable) are queued again
for whoever leads them now, after `RETRY_BACKOFF_S`. A partition that no longer exists is
dropped (its topic was deleted), as is the whole transaction if this broker stopped
coordinating it, or the coordinator epoch moved on (a new coordinator took over), or a leader
answers that the producer epoch or our coordinator epoch is stale.

When the last partition has its marker, CompleteCommit or CompleteAbort is written; if that
write finds too few replicas it is tried again, and a coordinator that lost the partition
leaves it to the next one (which completes it after loading). Nothing here answers a client:
EndTxn was answered when the Prepare record became durable.

The embedded broker leads every partition and its appends are replicated at once, so there
`complete_at_once` writes the markers and the Complete record in the caller's task (the
EndTxn's), with no request, no task switch and no wait: the client's next AddPartitionsToTxn
then finds the transaction complete instead of answering CONCURRENT_TRANSACTIONS, which
clients retry only after a backoff (Kafka answers EndTxn before its markers are written; here
the answer comes a few appends later, after the Complete record).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from wirebroker.partition import TopicPartition
from wirebroker.peer import PeerClient, PeerError
from wirebroker.txn.state import TransactionMetadata, TxnTransit
from wirebroker.txn.state_manager import TransactionStateManager
from wirebroker.txn_markers import (
    MarkerEntry,
    append_markers,
    complete,
    complete_now,
    write_txn_markers,
)

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
#: The wait before markers a leader could not take are sent again (Kafka's retry.backoff.ms).
RETRY_BACKOFF_S = 0.1
#: The queue of partitions whose leader is not known (or not reachable) yet.
UNKNOWN = -1

#: A leader's answer for one transaction's markers: each partition's error (None: no answer).
Answer = dict[TopicPartition, ErrorCode] | None

_RETRIABLE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)
_STALE = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
_GONE = frozenset({ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION})


@dataclass(eq=False, slots=True)
class Completion:
    """A transaction whose markers are being written (Kafka's PendingCompleteTxn)."""

    transactional_id: str
    coordinator_epoch: int
    metadata: TransactionMetadata
    transit: TxnTransit  # CompleteCommit or CompleteAbort, written once every marker is
    commit: bool
    txn_partition: int


@dataclass(eq=False, slots=True)
class Entry:
    """The markers of one transaction for one leader."""

    completion: Completion
    partitions: set[TopicPartition]


@dataclass(slots=True)
class _Destination:
    entries: list[Entry] = field(default_factory=list)
    in_flight: bool = False


def _completion(waiting: Entry | Completion) -> Completion:
    return waiting.completion if isinstance(waiting, Entry) else waiting


class MarkerSender:
    """Sends markers and completes transactions from the nursery `start` gives it (see the
    module doc)."""

    def __init__(self, broker: Broker, state: TransactionStateManager) -> None:
        self.broker = broker
        self.state = state
        self.timeout_s = broker.config.get_int("request.timeout.ms") / 1000
        #: Transactions with markers still to write, by transactional id.
        self.pending: dict[str, Completion] = {}
        self._destinations: dict[int, _Destination] = {}
        #: What waits for a retry: markers to queue again for their (new) leaders, and
        #: completions to write again, each with the trio time it is due.
        self._later: list[tuple[float, Entry | Completion]] = []
        self._clients: dict[int, PeerClient] = {}
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None

    # -- queueing ---------------------------------------------------------------------------
    def add(
        self,
        coordinator_epoch: int,
        commit: bool,
        metadata: TransactionMetadata,
        transit: TxnTransit,
    ) -> None:
        """Write the markers of `metadata`'s transaction, then `transit` (Kafka's
        addTxnMarkersToSend)."""
        completion = self._pending(coordinator_epoch, commit, metadata, transit)
        self._enqueue(completion, set(metadata.partitions))
        self._maybe_complete(completion.transactional_id)

    async def complete_at_once(
        self,
        coordinator_epoch: int,
        commit: bool,
        metadata: TransactionMetadata,
        transit: TxnTransit,
    ) -> None:
        """`add`; on the embedded broker the markers and then `transit` are written in this
        task before it returns (see the module doc). Whatever cannot be done at once (a
        marker refused for a retriable reason) is left to the sender task, as after `add`."""
        if self.broker.cluster_mode:
            self.add(coordinator_epoch, commit, metadata, transit)
            return
        completion = self._pending(coordinator_epoch, commit, metadata, transit)
        entry = Entry(completion, set(metadata.partitions))
        write = append_markers(self.broker, _marker(entry), sorted(entry.partitions, key=_key))
        if not complete_now(self.broker, [write]):
            await complete(self.broker, [write], self.timeout_s)
        self._handle(self.broker.node_id, entry, write.errors)
        tid = completion.transactional_id
        if self.pending.get(tid) is completion and not metadata.partitions:
            del self.pending[tid]
            await self._write_completion(completion)

    def _pending(
        self,
        coordinator_epoch: int,
        commit: bool,
        metadata: TransactionMetadata,
        transit: TxnTransit,
    ) -> Completion:
        """A new completion for `metadata`'s transaction, replacing any pending one."""
        tid = metadata.transactional_id
        completion = Completion(
            tid,
            coordinator_epoch,
            metadata,
            transit,
            commit,
            self.state.partition_for(tid),
        )
        if self.pending.get(tid) is not None:
            log.info("transactional id %s: replacing its pending markers", tid)
        self.pending[tid] = completion
        return completion

    def _enqueue(self, completion: Completion, partitions: set[TopicPartition]) -> None:
        """Queue markers for each partition's current leader (Kafka's
        addTxnMarkersToBrokerQueue); partitions that no longer exist leave the transaction."""
        by_leader: dict[int, set[TopicPartition]] = {}
        deleted: set[TopicPartition] = set()
        for tp in partitions:
            leader = self._leader_of(tp)
            if leader is None:
                deleted.add(tp)
            else:
                by_leader.setdefault(leader, set()).add(tp)
        for leader, tps in by_leader.items():
            self._destinations.setdefault(leader, _Destination()).entries.append(
                Entry(completion, tps)
            )
        if deleted:
            tid = completion.transactional_id
            if not self._still_current(completion):
                self._drop(completion)
            else:
                log.info(
                    "transactional id %s: no leader for %s (deleted?): no marker needed",
                    tid,
                    sorted((tp.topic, tp.partition) for tp in deleted),
                )
                for tp in deleted:
                    completion.metadata.remove_partition(tp)
                self._maybe_complete(tid)
        self._wake.set()

    def _leader_of(self, tp: TopicPartition) -> int | None:
        """The broker to send `tp`'s marker to: its leader, UNKNOWN while it has none (or its
        address is unknown), None if the partition does not exist."""
        broker = self.broker
        if not broker.cluster_mode:
            return broker.node_id if broker.partition(tp.topic, tp.partition) is not None else None
        info = broker.metadata_cache.partition(tp.topic, tp.partition)
        if info is None:
            return None
        if info.leader < 0 or (
            info.leader != broker.node_id and broker.replica_manager.address_of(info.leader) is None
        ):
            return UNKNOWN
        return info.leader

    def remove_for_partition(self, index: int) -> None:
        """Stop writing markers for the transactions of `__transaction_state`-`index` (this
        broker no longer coordinates them)."""
        for destination in self._destinations.values():
            destination.entries = [
                e for e in destination.entries if e.completion.txn_partition != index
            ]
        self._later = [(t, w) for t, w in self._later if _completion(w).txn_partition != index]
        self.pending = {
            tid: c for tid, c in self.pending.items() if c.txn_partition != index
        }  # what is in flight is dropped when its answer comes

    def _drop(self, completion: Completion) -> None:
        if self.pending.get(completion.transactional_id) is completion:
            del self.pending[completion.transactional_id]

    def _still_current(self, completion: Completion) -> bool:
        """Whether this coordinator still owns the transaction at the same epoch."""
        found = self.state.lookup(completion.transactional_id)
        return (
            found.error == ErrorCode.NONE
            and found.metadata is not None
            and found.coordinator_epoch == completion.coordinator_epoch
        )

    # -- the task ---------------------------------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        """Send what is queued from `nursery`, one request per leader at a time, until it
        ends."""
        self._nursery = nursery
        nursery.start_soon(self._run, nursery)

    async def _run(self, nursery: trio.Nursery) -> None:
        try:
            while True:
                wake = self._wake = trio.Event()
                deadline = self._dispatch(nursery)
                with trio.move_on_at(deadline):
                    await wake.wait()
        finally:
            for client in self._clients.values():
                await client.aclose()

    def _dispatch(self, nursery: trio.Nursery) -> float:
        """Start a request for each leader with markers queued and none in flight, and what
        is due for a retry; the time the next retry is due (inf: none waits)."""
        now = trio.current_time()
        due = [w for t, w in self._later if t <= now]
        self._later = [(t, w) for t, w in self._later if t > now]
        for waiting in due:
            if isinstance(waiting, Entry):
                self._requeue(waiting.completion, waiting.partitions)
            else:
                nursery.start_soon(self._write_completion, waiting)
        retry_at = min((t for t, _ in self._later), default=math.inf)
        for broker_id, destination in self._destinations.items():
            if destination.in_flight or not destination.entries:
                continue
            if broker_id == UNKNOWN:
                entries, destination.entries = destination.entries, []
                self._later.extend((now + RETRY_BACKOFF_S, e) for e in entries)
                retry_at = min(retry_at, now + RETRY_BACKOFF_S)
                continue
            entries, destination.entries = destination.entries, []
            destination.in_flight = True
            nursery.start_soon(self._send, broker_id, destination, entries)
        return retry_at

    async def _send(self, broker_id: int, destination: _Destination, entries: list[Entry]) -> None:
        try:
            if broker_id == self.broker.node_id:
                answers = await self._write_here(entries)
            else:
                answers = await self._write_there(broker_id, entries)
        except PeerError as e:
            log.info("transaction markers to broker %d failed: %s", broker_id, e)
            self._retry_later(entries)
        except Exception:  # a bug must not stop every transaction's markers
            log.exception("transaction markers to broker %d failed", broker_id)
            self._retry_later(entries)
        else:
            for entry, errors in zip(entries, answers, strict=True):
                self._handle(broker_id, entry, errors)
                self._maybe_complete(entry.completion.transactional_id)
        finally:
            destination.in_flight = False
            self._wake.set()

    async def _write_here(self, entries: list[Entry]) -> list[Answer]:
        """The markers of partitions this broker leads, written in-process, all at once."""
        answers: list[Answer] = [None] * len(entries)

        async def write(i: int, entry: Entry) -> None:
            answers[i] = await write_txn_markers(
                self.broker, _marker(entry), sorted(entry.partitions, key=_key), self.timeout_s
            )

        async with trio.open_nursery() as nursery:
            for i, entry in enumerate(entries):
                nursery.start_soon(write, i, entry)
        return answers

    async def _write_there(self, broker_id: int, entries: list[Entry]) -> list[Answer]:
        """One WriteTxnMarkers request for every marker queued for `broker_id`."""
        request = WriteTxnMarkersRequest(
            markers=[
                WriteTxnMarkersRequest.WritableTxnMarker(
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    transaction_result=m.commit,
                    topics=_topics(e.partitions),
                    coordinator_epoch=m.coordinator_epoch,
                )
                for e in entries
                for m in [_marker(e)]
            ]
        )
        response: WriteTxnMarkersResponse = await self._client(broker_id).request(
            request, WRITE_TXN_MARKERS_VERSION
        )
        by_producer: dict[int, dict[TopicPartition, ErrorCode]] = {}
        for m in response.markers:  # a producer's markers may come back in several results
            by_producer.setdefault(m.producer_id, {}).update(
                (TopicPartition(t.name, p.partition_index), ErrorCode(p.error_code))
                for t in m.topics
                for p in t.partitions
            )
        return [by_producer.get(e.completion.metadata.producer_id) for e in entries]

    def _client(self, broker_id: int) -> PeerClient:
        client = self._clients.get(broker_id)
        if client is None:
            client = self._clients[broker_id] = self.broker.replica_manager.peer_client(
                broker_id, "txn-markers", timeout_s=self.timeout_s, backoff_s=RETRY_BACKOFF_S
            )
        return client

    def _retry_later(self, entries: list[Entry]) -> None:
        """Queue these markers again for their leaders (which may have moved) after a while."""
        due = trio.current_time() + RETRY_BACKOFF_S
        self._later.extend((due, entry) for entry in entries)
        self._wake.set()

    def _requeue(self, completion: Completion, partitions: set[TopicPartition]) -> None:
        """After a failed request: queue again, unless the transaction is no longer ours."""
        if (
            self._still_current(completion)
            and self.pending.get(completion.transactional_id) is completion
        ):
            self._enqueue(completion, partitions)
        else:
            self._drop(completion)

    def _handle(self, broker_id: int, entry: Entry, errors: Answer) -> None:
        """A leader's answer for one transaction's markers (Kafka's
        TransactionMarkerRequestCompletionHandler): the partitions written leave the
        transaction, the others wait for a retry (the caller completes it once none is
        left)."""
        completion = entry.completion
        tid = completion.transactional_id
        if not self._still_current(completion) or self.pending.get(tid) is not completion:
            self._drop(completion)
            return
        if errors is None:
            log.error("broker %d answered no markers for transactional id %s", broker_id, tid)
            self._retry_later([entry])
            return
        retry: set[TopicPartition] = set()
        for tp in entry.partitions:
            error = errors.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
            if error == ErrorCode.NONE or error in _GONE:
                completion.metadata.remove_partition(tp)
            elif error in _STALE:
                log.info(
                    "transactional id %s: %s-%d refused its marker (%s): no more are sent",
                    tid,
                    tp.topic,
                    tp.partition,
                    error.name,
                )
                self._drop(completion)
                return
            else:
                if error not in _RETRIABLE:
                    log.error(
                        "transactional id %s: marker for %s-%d failed: %s",
                        tid,
                        tp.topic,
                        tp.partition,
                        error.name,
                    )
                retry.add(tp)
        if retry:
            self._retry_later([Entry(completion, retry)])

    # -- completing -------------------------------------------------------------------------
    def _maybe_complete(self, transactional_id: str) -> None:
        completion = self.pending.get(transactional_id)
        if completion is None or completion.metadata.partitions:
            return
        del self.pending[transactional_id]
        assert self._nursery is not None, "markers are sent once the coordinator serves"
        self._nursery.start_soon(self._write_completion, completion)

    async def _write_completion(self, completion: Completion) -> None:
        if not self._still_current(completion):
            log.info(
                "transactional id %s: no longer coordinated here at epoch %d: its completion "
                "is left to its coordinator",
                completion.transactional_id,
                completion.coordinator_epoch,
            )
            return
        error = await self.state.append(
            completion.transactional_id,
            completion.coordinator_epoch,
            completion.transit,
            retry=True,
        )
        if error == ErrorCode.COORDINATOR_NOT_AVAILABLE:
            self._later.append((trio.current_time() + RETRY_BACKOFF_S, completion))
            self._wake.set()
        elif error == ErrorCode.NONE:
            log.debug(
                "transactional id %s: %s",
                completion.transactional_id,
                completion.transit.state.display_name,
            )
        else:
            log.info(
                "transactional id %s: not completed here (%s)",
                completion.transactional_id,
                error.name,
            )

    def statistics(self) -> dict[str, int]:
        """Transactions with markers to write, markers queued per leader, markers waiting for
        a leader (Kafka's UnknownDestinationQueueSize: no leader yet, or queued again after a
        failed request) and completions waiting to be written again (LogAppendRetryQueueSize)."""
        unknown = self._destinations.get(UNKNOWN)
        return {
            "transactions_with_pending_markers": len(self.pending),
            "queued_markers": sum(len(d.entries) for d in self._destinations.values()),
            "unknown_destination_markers": (0 if unknown is None else len(unknown.entries))
            + sum(isinstance(w, Entry) for _, w in self._later),
            "log_append_retries": sum(isinstance(w, Completion) for _, w in self._later),
        }


def _marker(entry: Entry) -> MarkerEntry:
    c = entry.completion
    return MarkerEntry(
        c.metadata.producer_id, c.metadata.producer_epoch, c.coordinator_epoch, c.commit
    )


def _key(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


def _topics(partitions: set[TopicPartition]) -> list[WriteTxnMarkersRequest.WritableTxnMarkerTopic]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions, key=_key):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [
        WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
        for name, indexes in by_topic.items()
    ]
