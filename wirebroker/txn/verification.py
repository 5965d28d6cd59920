"""KIP-890 part 1: asking a transaction's coordinator whether partitions are in the transaction
(Kafka's AddPartitionsToTxnManager), before a transactional write starts a transaction there.

`TransactionalWriter.verify` first takes, on each partition where the producer has no
transaction going on, the verification guard its append must bring (Kafka's verification
state entry, `storage.producer_state`): a marker of the producer landing meanwhile -- its
transaction ended while the coordinator was asked -- voids the guard, and the append is then
refused (INVALID_TXN_STATE) rather than opening a transaction no marker will close.

`Verifier.verify` finds the coordinator of the transactional id (the leader of its
`__transaction_state` partition) and asks it: in-process when it is this broker, else with
AddPartitionsToTxn v5 `verify_only` over the inter-broker listener. Requests to one broker are
batched as Kafka batches them: at most one request in flight per broker, and the transactions
that arrive meanwhile go together in the next one. A transactional id already waiting is
replaced by a newer request for it (the older is answered INVALID_PRODUCER_EPOCH if the newer
has a higher epoch, NETWORK_EXCEPTION if the same: the client retries); a request with an older
epoch than the waiting one is answered INVALID_PRODUCER_EPOCH at once.

The answer is per partition, only for the partitions that failed, mapped as Kafka maps the
coordinator's answers for a writer: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, and
TRANSACTION_ABORTABLE (not in the transaction) INVALID_TXN_STATE unless the caller's version
understands TRANSACTION_ABORTABLE (`abortable_ok`: Produce v11+, TxnOffsetCommit v4+). A broker
that cannot be reached gives NETWORK_EXCEPTION; no coordinator at all COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode
from protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from storage.producer_state import SENTINEL, VerificationGuard
from wirebroker.metrics import TIME_WINDOW
from wirebroker.partition import TopicPartition
from wirebroker.peer import PeerClient, PeerError
from wirebroker.topics import TXN_TOPIC

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

VERIFY_VERSION = 5

Errors = dict[TopicPartition, ErrorCode]


@dataclass(frozen=True, slots=True)
class Verified:
    """A verification's outcome: the partitions refused, each with why, and the guards the
    appends of the others must bring (None: verification is off, nothing is checked)."""

    errors: Errors
    guards: dict[TopicPartition, VerificationGuard] | None

    def guard(self, tp: TopicPartition) -> VerificationGuard | None:
        """What the append to `tp` brings: its guard, SENTINEL if it needed no verification
        (its transaction is ongoing there), None if verification is off."""
        return None if self.guards is None else self.guards.get(tp, SENTINEL)


OFF = Verified({}, None)


@dataclass(frozen=True, slots=True)
class TransactionalWriter:
    """A transactional write about to happen (a Produce, a TxnOffsetCommit): who writes, and
    whether the writer's request version understands TRANSACTION_ABORTABLE."""

    broker: Broker
    transactional_id: str | None
    producer_id: int
    producer_epoch: int
    abortable_ok: bool

    async def verify(self, partitions: Mapping[TopicPartition, int]) -> Verified:
        """KIP-890, when `transaction.partition.verification.enable`: on the partitions of
        this broker (each with the first sequence of the batch about to be appended) where the
        producer has no transaction going on, a guard is taken and the coordinator asked;
        those not in the transaction come back with their error."""
        broker = self.broker
        if not self.transactional_id or not broker.transactions.verification_enabled:
            return OFF
        now = broker.now_ms()
        guards: dict[TopicPartition, VerificationGuard] = {}
        for tp, sequence in partitions.items():
            partition = broker.partition(tp.topic, tp.partition)
            if partition is None:
                continue  # the append answers for it
            guard = partition.log.producer_state.start_verification(
                self.producer_id, sequence, self.producer_epoch, now
            )
            if guard is not SENTINEL:
                guards[tp] = guard
        if not guards:
            return Verified({}, guards)
        errors = await broker.transactions.verifier.verify(
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            list(guards),
            abortable_ok=self.abortable_ok,
        )
        return Verified(errors, guards)


@dataclass(eq=False, slots=True)
class _Waiting:
    transaction: AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    partitions: list[TopicPartition]
    done: trio.Event = field(default_factory=trio.Event)
    result: Errors = field(default_factory=dict)

    def answer(self, result: Errors) -> None:
        self.result = result
        self.done.set()


@dataclass(slots=True)
class _Node:
    waiting: dict[str, _Waiting] = field(default_factory=dict)
    in_flight: bool = False


class Verifier:
    """Verifies transactional writes with their coordinators (see the module doc)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.timeout_s = broker.config.get_int("request.timeout.ms") / 1000
        self._nodes: dict[int, _Node] = {}
        self._clients: dict[int, PeerClient] = {}
        self._nursery: trio.Nursery | None = None
        #: Kafka's AddPartitionsToTxnManager metrics, kept while metrics are served:
        #: partitions that failed verification (VerificationFailureRate), and the time each
        #: verification took (VerificationTimeMs: the last `TIME_WINDOW`, and a count).
        self.failures = 0
        self.verifications = 0
        self.times_ms: deque[float] = deque(maxlen=TIME_WINDOW)

    def start(self, nursery: trio.Nursery) -> None:
        """Send verification requests from `nursery`, until it ends."""
        self._nursery = nursery
        nursery.start_soon(self._close_clients_at_end)

    async def _close_clients_at_end(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            for client in self._clients.values():
                await client.aclose()

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        *,
        abortable_ok: bool,
    ) -> Errors:
        """The partitions that are not verified, each with why (see the module doc)."""
        broker = self.broker
        started = perf_counter()
        coordinator = self._coordinator_of(transactional_id)
        if coordinator is None:
            answered = dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        elif coordinator == broker.node_id:
            answered = broker.transactions.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        else:
            answered = await self._ask(
                coordinator, transactional_id, producer_id, producer_epoch, partitions
            )
        failed = {
            tp: _for_writer(error, abortable_ok)
            for tp, error in answered.items()
            if error != ErrorCode.NONE
        }
        if broker.stats.on:
            self.failures += len(failed)
            self.verifications += 1
            self.times_ms.append((perf_counter() - started) * 1000)
        return failed

    def _coordinator_of(self, transactional_id: str) -> int | None:
        broker = self.broker
        if not broker.cluster_mode:
            return broker.node_id
        index = broker.transactions.state.partition_for(transactional_id)
        info = broker.metadata_cache.partition(TXN_TOPIC, index)
        if info is None or info.leader < 0:
            return None
        if info.leader != broker.node_id and broker.replica_manager.address_of(info.leader) is None:
            return None
        return info.leader

    async def _ask(
        self,
        node_id: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
    ) -> Errors:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        waiting = _Waiting(
            AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                verify_only=True,
                topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            ),
            partitions,
        )
        node = self._nodes.setdefault(node_id, _Node())
        earlier = node.waiting.get(transactional_id)
        if earlier is not None:
            if earlier.transaction.producer_epoch > producer_epoch:
                return dict.fromkeys(partitions, ErrorCode.INVALID_PRODUCER_EPOCH)
            stale = earlier.transaction.producer_epoch < producer_epoch
            earlier.answer(
                dict.fromkeys(
                    earlier.partitions,
                    ErrorCode.INVALID_PRODUCER_EPOCH if stale else ErrorCode.NETWORK_EXCEPTION,
                )
            )
        node.waiting[transactional_id] = waiting
        self._maybe_send(node_id, node)
        await waiting.done.wait()
        return waiting.result

    def _maybe_send(self, node_id: int, node: _Node) -> None:
        if node.in_flight or not node.waiting:
            return
        assert self._nursery is not None, "verification runs once the broker serves"
        batch, node.waiting = node.waiting, {}
        node.in_flight = True
        self._nursery.start_soon(self._send, node_id, node, batch)

    async def _send(self, node_id: int, node: _Node, batch: dict[str, _Waiting]) -> None:
        request = AddPartitionsToTxnRequest(transactions=[w.transaction for w in batch.values()])
        try:
            response: AddPartitionsToTxnResponse = await self._client(node_id).request(
                request, VERIFY_VERSION
            )
        except PeerError as e:
            log.warning("verification with broker %d failed: %s", node_id, e)
            for w in batch.values():
                w.answer(dict.fromkeys(w.partitions, ErrorCode.NETWORK_EXCEPTION))
        else:
            _answer(node_id, batch, response)
        finally:
            node.in_flight = False
            self._maybe_send(node_id, node)

    def _client(self, node_id: int) -> PeerClient:
        client = self._clients.get(node_id)
        if client is None:
            client = self._clients[node_id] = self.broker.replica_manager.peer_client(
                node_id, "txn-verification", timeout_s=self.timeout_s, backoff_s=0.1
            )
        return client


def _answer(node_id: int, batch: dict[str, _Waiting], response: AddPartitionsToTxnResponse) -> None:
    if response.error_code != ErrorCode.NONE:
        error = ErrorCode(response.error_code)
        log.error("verification with broker %d answered %s", node_id, error.name)
        if error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
            error = ErrorCode.INVALID_TXN_STATE  # the client must not see the broker's rights
        for w in batch.values():
            w.answer(dict.fromkeys(w.partitions, error))
        return
    for result in response.results_by_transaction:
        if result.transactional_id not in batch:
            continue
        w = batch.pop(result.transactional_id)
        w.answer(
            {
                TopicPartition(topic.name, p.partition_index): ErrorCode(p.partition_error_code)
                for topic in result.topic_results
                for p in topic.results_by_partition
            }
        )
    for w in batch.values():  # not answered: treat as not verified, the client retries
        w.answer(dict.fromkeys(w.partitions, ErrorCode.NETWORK_EXCEPTION))


def _for_writer(error: ErrorCode, abortable_ok: bool) -> ErrorCode:
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error == ErrorCode.TRANSACTION_ABORTABLE and not abortable_ok:
        return ErrorCode.INVALID_TXN_STATE
    return error
