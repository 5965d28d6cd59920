"""The replica manager: what the controller's requests do to this broker's partitions.

This module owns the transitions a controller orders (Kafka's ReplicaManager): LeaderAndIsr
makes partitions leaders or followers — creating the log, with its topic id, when it is missing
— StopReplica stops (and maybe deletes) them, UpdateMetadata feeds the metadata cache; all
three are refused when they come from an older controller epoch. Their disk work runs in worker
threads before they apply (the logs made, the topic ids read and stored), and a follower's
truncation and its fetchers' appends write in one too (`run_log_work`), each the log's one
writer until it commits: LeaderAndIsr and StopReplica wait for it. It owns the fetchers (one task
per source broker and fetcher id, `num.replica.fetchers`), the periodic ISR shrink check, and the
AlterPartition requests that carry the leaders' ISR changes to the controller (applied when the
controller answers). Decisions about one partition's ISR and high watermark are the
partition's (`wirebroker.partition`); the bytes are storage's. Every leader or follower
transition and every stop is reported to the coordinators (`Broker.partition_moved`), which
load or unload the groups of `__consumer_offsets` and the transactional ids of
`__transaction_state` partitions.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from protocol.messages.update_metadata import UpdateMetadataRequest
from protocol.primitives import ZERO_UUID
from storage.chore import Chore
from storage.errors import KafkaStorageError
from storage.layout import partition_dir_problem
from wirebroker.java_hashing import string_hash
from wirebroker.partition import Partition, PendingIsr, TopicPartition
from wirebroker.peer import PeerClient, PeerError, PeerSecurity
from wirebroker.replication.fetcher import ReplicaFetcher
from wirebroker.replication.partition_metadata import store_topic_id, write_new_topic_id
from wirebroker.topic_configs import log_config_for

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 3
#: StopReplica leader epochs that skip the epoch check (Kafka's LeaderAndIsr.NoEpoch and
#: EpochDuringDelete).
NO_EPOCH, EPOCH_DURING_DELETE = -1, -2
NO_LEADER = -1

LeaderAndIsrState = LeaderAndIsrRequest.LeaderAndIsrPartitionState


class ReplicaManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        #: The newest controller epoch seen; requests from older controllers are refused.
        self.controller_epoch = 0
        self.num_fetchers = max(1, config.get_int("num.replica.fetchers"))
        self.lag_ms = config.get_int("replica.lag.time.max.ms")
        self.backoff_s = config.get_int("replica.fetch.backoff.ms") / 1000
        self.inter_broker_listener = config.inter_broker_listener() or config.listeners()[0].name
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        #: Leaders' addresses from LeaderAndIsr, when the metadata cache does not know them.
        self.live_leaders: dict[int, tuple[str, int]] = {}
        self._nursery: trio.Nursery | None = None
        self._isr_queue: dict[TopicPartition, Partition] = {}
        self._isr_wake = trio.Event()
        #: The partitions whose log a worker thread writes (`run_log_work`), set when done.
        self._log_work: dict[TopicPartition, trio.Event] = {}
        self.controller = PeerClient(
            "controller",
            self._controller_address,
            client_id=f"broker-{broker.node_id}-alter-partition",
            timeout_s=config.get_int("replica.socket.timeout.ms") / 1000,
            backoff_s=self.backoff_s,
            security=broker.peer_security,
        )

    # addresses ----------------------------------------------------------------------------
    def address_of(self, broker_id: int) -> tuple[str, int] | None:
        cache = self.broker.metadata_cache
        endpoint = cache.endpoint(broker_id, self.inter_broker_listener) or cache.endpoint(
            broker_id, None
        )
        if endpoint is not None:
            return endpoint.host, endpoint.port
        return self.live_leaders.get(broker_id)

    def peer_client(
        self, broker_id: int, purpose: str, *, timeout_s: float, backoff_s: float
    ) -> PeerClient:
        """A connection to broker `broker_id` over the inter-broker listener (TLS and the SASL
        login as configured: `Broker.peer_security`), its address looked up at each connect;
        `purpose` names it in the log and in its client id (e.g. "txn-markers")."""
        return PeerClient(
            f"{purpose} to broker {broker_id}",
            lambda: self.address_of(broker_id),
            client_id=f"broker-{self.broker.node_id}-{purpose}",
            timeout_s=timeout_s,
            backoff_s=backoff_s,
            security=self.broker.peer_security,
        )

    def _controller_address(self) -> tuple[str, int] | None:
        controller = self.broker.controller_id
        return None if controller < 0 else self.address_of(controller)

    # the tasks ----------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetchers, the ISR shrink check and the AlterPartition sender, until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for fetcher in self.fetchers.values():
                    nursery.start_soon(fetcher.run)
                nursery.start_soon(self._shrink_isr_loop)
                nursery.start_soon(self._alter_partition_loop)
                task_status.started()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                await self.controller.aclose()

    async def _shrink_isr_loop(self) -> None:
        # Kafka checks every replica.lag.time.max.ms / 2.
        interval = max(self.lag_ms / 2000, 0.01)
        while True:
            await trio.sleep(interval)
            now = self.broker.now_ms()
            for partition in list(self.broker.partitions.values()):
                if partition.is_local_leader and partition.followers:
                    try:
                        partition.maybe_shrink_isr(now)
                    except Exception:  # a bug: log it, keep checking the others
                        log.exception("%s-%d: ISR check failed", partition.topic, partition.index)

    def _enqueue_isr_change(self, partition: Partition) -> None:
        self._isr_queue[TopicPartition(partition.topic, partition.index)] = partition
        self._isr_wake.set()

    async def _alter_partition_loop(self) -> None:
        while True:
            if not self._isr_queue:
                self._isr_wake = trio.Event()
                await self._isr_wake.wait()
                continue
            batch = {
                tp: (p, p.pending_isr)
                for tp, p in self._isr_queue.items()
                if p.pending_isr is not None and p.is_local_leader
            }
            self._isr_queue.clear()
            if not batch:
                continue
            try:
                retry = await self._send_alter_partition(batch)
            except Exception:  # a bug: log it and try again later rather than stop the broker
                log.exception("AlterPartition failed")
                retry = batch
            for tp, (p, pending) in retry.items():
                if p.pending_isr is pending and self.broker.partitions.get(tp) is p:
                    self._isr_queue.setdefault(tp, p)
            if retry:
                await trio.sleep(self.backoff_s)

    async def _send_alter_partition(
        self, batch: dict[TopicPartition, tuple[Partition, PendingIsr]]
    ) -> dict[TopicPartition, tuple[Partition, PendingIsr]]:
        """Send one AlterPartition; returns the changes to send again."""
        topics: dict[uuid.UUID, list[AlterPartitionRequest.PartitionData]] = {}
        for tp, (p, pending) in batch.items():
            topics.setdefault(p.topic_id, []).append(
                AlterPartitionRequest.PartitionData(
                    partition_index=tp.partition,
                    leader_epoch=pending.leader_epoch,
                    new_isr_with_epochs=[
                        AlterPartitionRequest.BrokerState(broker_id=r, broker_epoch=-1)
                        for r in pending.isr
                    ],
                    leader_recovery_state=0,
                    partition_epoch=pending.partition_epoch,
                )
            )
        request = AlterPartitionRequest(
            broker_id=self.broker.node_id,
            broker_epoch=self.broker.broker_epoch,
            topics=[
                AlterPartitionRequest.TopicData(topic_id=tid, partitions=ps)
                for tid, ps in topics.items()
            ],
        )
        if self.controller.address != self._controller_address():
            await self.controller.aclose()  # the controller moved
        try:
            response: AlterPartitionResponse = await self.controller.request(
                request, ALTER_PARTITION_VERSION
            )
        except PeerError as e:
            log.info("AlterPartition not sent: %s", e)
            return batch
        if response.error_code != ErrorCode.NONE:
            log.info("AlterPartition failed: %s", ErrorCode(response.error_code).name)
            if response.error_code == ErrorCode.NOT_CONTROLLER:
                await self.controller.aclose()
            return batch
        retry = dict(batch)
        by_id = {p.topic_id: p.topic for p, _ in batch.values()}
        now = self.broker.now_ms()
        for topic in response.topics:
            name = by_id.get(topic.topic_id)
            if name is None:
                continue
            for r in topic.partitions:
                tp = TopicPartition(name, r.partition_index)
                entry = retry.pop(tp, None)
                if entry is None:
                    continue
                p, pending = entry
                was_pending = p.pending_isr is pending
                again = p.complete_isr_change(
                    pending,
                    ErrorCode(r.error_code),
                    leader_epoch=r.leader_epoch,
                    isr=list(r.isr),
                    partition_epoch=r.partition_epoch,
                    now_ms=now,
                )
                if again:
                    retry[tp] = entry
                elif was_pending and not r.error_code and p.pending_isr is None:  # committed
                    self.broker.stats.isr_changed(len(pending.isr) > len(pending.committed))
        return retry

    # fetchers -----------------------------------------------------------------------------
    def _fetcher_id(self, tp: TopicPartition) -> int:
        return abs(31 * string_hash(tp.topic) + tp.partition) % self.num_fetchers

    def _fetcher(self, source: int, tp: TopicPartition) -> ReplicaFetcher:
        key = (source, self._fetcher_id(tp))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = self.fetchers[key] = ReplicaFetcher(self, source, key[1])
            if self._nursery is not None:
                self._nursery.start_soon(fetcher.run)
        return fetcher

    def _add_fetcher(self, tp: TopicPartition, p: Partition) -> None:
        self._fetcher(p.leader, tp).add(tp, p.topic_id, p.log_end_offset, p.leader_epoch)

    def use_peer_security(self, security: PeerSecurity) -> None:
        """The fetchers' and AlterPartition's next connections use `security` (the
        inter-broker listener's stores or login changed at run time)."""
        self.controller.security = security
        for fetcher in self.fetchers.values():
            fetcher.peer.security = security

    def fetcher_count_changed(self, changed: frozenset[str]) -> None:
        """`num.replica.fetchers` changed at run time: every followed partition moves to its
        fetcher under the new count, keeping its fetch state (Kafka's
        resizeFetcherThreadPool)."""
        self.num_fetchers = max(1, self.broker.config.get_int("num.replica.fetchers"))
        old, self.fetchers = self.fetchers, {}
        for fetcher in old.values():
            fetcher.stop()
            for tp, state in fetcher.partitions.items():
                self._fetcher(fetcher.source_id, tp).adopt(tp, state)
        log.info("%d replica fetchers per source broker now", self.num_fetchers)

    def _remove_fetcher(self, tp: TopicPartition) -> None:
        for key, fetcher in list(self.fetchers.items()):
            fetcher.remove(tp)
            if not fetcher.partitions:
                fetcher.stop()
                del self.fetchers[key]

    async def truncate(
        self, tp: TopicPartition, p: Partition, offset: int, *, fully: bool = False
    ) -> None:
        """Truncate the follower `p`'s log to `offset` -- with `fully`, start it over empty
        at `offset` (`PartitionLog.begin_full_truncation`: behind the leader's log start) --
        cut in memory now, its file work (the segment's cut, or the old segments' renames and
        the new one's files; the producer snapshots above `offset`, the producer state's
        rebuild) in a worker thread (`PartitionLog.begin_truncation`, `run_log_work`),
        committed here; its fetcher does not fetch it meanwhile. Raises KafkaStorageError
        if the work failed (an I/O error has taken the log directory offline by then), or,
        without truncating, if a worker thread writes the log already (work a fetcher the
        partition moved from left: the caller tries again later)."""
        if tp in self._log_work:
            raise KafkaStorageError(f"{tp.topic}-{tp.partition} is being written already")
        log = p.log
        truncation = log.begin_full_truncation(offset) if fully else log.begin_truncation(offset)
        if truncation is None:
            return
        try:
            await self.run_log_work([tp], truncation)
        except KafkaStorageError as e:
            self.broker.log_manager.handle_log_error(tp.topic, tp.partition, e)
            raise

    async def run_log_work(self, tps: list[TopicPartition], chore: Chore) -> None:
        """Run `chore` -- the file work begun on the logs of `tps`: a truncation, a fetch
        response's appends -- in a worker thread, and commit it here; a cancellation skips
        neither (the caller meets it at its next checkpoint). Meanwhile each of those logs has
        this one writer: a LeaderAndIsr or StopReplica naming one waits for the commit
        (`_settle`), as Kafka's removal of a partition from its fetcher waits for the
        fetcher's work in progress. The commit's errors are raised."""
        done = trio.Event()
        for tp in tps:
            self._log_work[tp] = done
        try:
            # Shielded: the work was begun on the loop (an append checked, a truncation cut in
            # memory), so its file work is made before the commit whatever happens. Unshielded,
            # a cancellation already delivered (a shutdown, the fetcher stopped) stopped
            # `to_thread.run_sync` before the worker started, and the commit below still ran:
            # an append counted (log end offset, index entry) but never written. The worker is
            # never abandoned anyway, so no wait gets longer.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(chore.prepare)
        finally:
            try:
                chore.commit()
            finally:
                for tp in tps:
                    del self._log_work[tp]
                done.set()

    async def _settle(self, tps: list[TopicPartition]) -> None:
        """Until no worker thread writes the log of any of `tps` (see `run_log_work`); the
        caller applies its change without awaiting anything after."""
        while True:
            busy = next((self._log_work[tp] for tp in tps if tp in self._log_work), None)
            if busy is None:
                return
            await busy.wait()

    def fetcher_state(self, tp: TopicPartition) -> str | None:
        """'truncating', 'fetching', 'failed' or None: for tests and logs."""
        for fetcher in self.fetchers.values():
            state = fetcher.partitions.get(tp)
            if state is not None:
                return (
                    "failed" if state.failed else "truncating" if state.truncating else "fetching"
                )
        return None

    # LeaderAndIsr ------------------------------------------------------------------------
    async def become_leader_or_follower(
        self, request: LeaderAndIsrRequest, version: int
    ) -> LeaderAndIsrResponse:
        """Apply a LeaderAndIsr, answered once what it needs is on disk (as Kafka answers
        once the logs are made): the missing logs made and the topic ids stored in worker
        threads first, then -- after any truncation of these partitions' logs under way in a
        worker thread is over (one writer per log) -- the transitions, on the loop."""
        await self.create_new_logs(request, version)
        stored = await self._store_topic_ids(request, version)
        await self._settle(
            [
                TopicPartition(s.topic_name, s.partition_index)
                for s in _leader_and_isr_states(request, version)
            ]
        )
        hosted = len(self.broker.partitions)
        response = self._apply_leader_and_isr(request, version, stored)
        if len(self.broker.partitions) > hosted:  # partitions made here (none is removed)
            self.broker.partitions_made()
        return response

    def _apply_leader_and_isr(
        self,
        request: LeaderAndIsrRequest,
        version: int,
        stored: dict[TopicPartition, uuid.UUID | OSError | None],
    ) -> LeaderAndIsrResponse:
        states = _leader_and_isr_states(request, version)
        topic_ids = {t.topic_name: t.topic_id for t in request.topic_states} if version >= 5 else {}
        if request.controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring LeaderAndIsr from controller %d: its epoch %d is older than %d",
                request.controller_id,
                request.controller_epoch,
                self.controller_epoch,
            )
            return refused_leader_and_isr(request, version, ErrorCode.STALE_CONTROLLER_EPOCH)
        self.controller_epoch = request.controller_epoch
        for leader in request.live_leaders:
            self.live_leaders[leader.broker_id] = (leader.host_name, leader.port)
        broker = self.broker
        node_id = broker.node_id
        errors: dict[tuple[str, int], ErrorCode] = {}
        now = broker.now_ms()
        for s in states:
            key = (s.topic_name, s.partition_index)
            tp = TopicPartition(*key)
            p = broker.partitions.get(tp)
            request_id = topic_ids.get(s.topic_name, ZERO_UUID)
            current_epoch = p.leader_epoch if p is not None else -1
            if (
                p is not None
                and request_id != ZERO_UUID
                and p.topic_id not in (ZERO_UUID, request_id)
            ):
                log.error(
                    "%s-%d: topic id %s in LeaderAndIsr, %s here", *key, request_id, p.topic_id
                )
                errors[key] = ErrorCode.INCONSISTENT_TOPIC_ID
                continue
            if p is not None and p.log.offline:
                # First, as Kafka's HostedPartition.Offline: the controller learns of the failed
                # log directory from this answer, whatever the leader epoch.
                errors[key] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if s.leader_epoch <= current_epoch:
                # As Kafka 3.9's ReplicaManager: an old or equal leader epoch is a stale request.
                log.info(
                    "%s-%d: ignoring leader epoch %d (ours is %d)",
                    *key,
                    s.leader_epoch,
                    current_epoch,
                )
                if (
                    p is not None
                    and s.leader_epoch == current_epoch
                    and p.topic_id == ZERO_UUID
                    and request_id != ZERO_UUID
                ):
                    # Kafka: the controller may add a topic id without a new epoch.
                    p.topic_id = request_id
                    errors[key] = ErrorCode.NONE
                else:
                    errors[key] = ErrorCode.STALE_CONTROLLER_EPOCH
                continue
            if node_id not in s.replicas:
                log.warning("%s-%d: not in the assigned replicas %s", *key, s.replicas)
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if p is None and (problem := partition_dir_problem(*key)) is not None:
                # No controller of Kafka's sends one (its topic creation refuses the name). Kafka
                # 3.9 would make a directory its restart refuses (`-0`) or loads as another
                # partition (`t--4` as t-'s 4), or fail the whole request (a NUL); here it is a
                # log that cannot be made, answered for its partition as Kafka's makeLeaders.
                log.warning("%r partition %d: no log can be made: %s", *key, problem)
                errors[key] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            try:
                if p is None:
                    p = self._create_partition(tp, request_id, stored.get(tp))
                    if request_id not in (ZERO_UUID, p.topic_id):
                        log.error(
                            "%s-%d: topic id %s in LeaderAndIsr, %s on disk",
                            *key,
                            request_id,
                            p.topic_id,
                        )
                        del broker.partitions[tp]
                        errors[key] = ErrorCode.INCONSISTENT_TOPIC_ID
                        continue
                elif p.topic_id == ZERO_UUID:
                    p.topic_id = request_id
                if p.log.offline:  # a log the broker did not serve yet
                    raise KafkaStorageError(f"{p.log.dir} is in an offline log directory")
                outcome = stored.get(tp)
                if isinstance(outcome, OSError):
                    raise KafkaStorageError(f"cannot store the topic id: {outcome}") from outcome
                if outcome is not None and outcome == p.topic_id:
                    p.topic_id_stored = True
                if s.leader == node_id:
                    self._make_leader(tp, p, s, now)
                else:
                    self._make_follower(tp, p, s)
            except (KafkaStorageError, OSError) as e:
                log.error("%s-%d: the log is unavailable: %s", *key, e)
                errors[key] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            errors[key] = ErrorCode.NONE
        return _leader_and_isr_response(version, ErrorCode.NONE, errors, topic_ids)

    async def _store_topic_ids(
        self, request: LeaderAndIsrRequest, version: int
    ) -> dict[TopicPartition, uuid.UUID | OSError | None]:
        """The topic id in each log of `request` here (`partition.metadata`), read -- and
        the request's written where there is none -- in one worker-thread call; a failure is
        the OSError (an I/O error takes the log directory offline, as Kafka's
        PartitionMetadataFile write does). Logs whose partition already stored its id are
        not looked at again."""
        if request.controller_epoch < self.controller_epoch:
            return {}
        broker = self.broker
        topic_ids = {t.topic_name: t.topic_id for t in request.topic_states} if version >= 5 else {}
        wanted: dict[TopicPartition, tuple[Path, uuid.UUID]] = {}
        for s in _leader_and_isr_states(request, version):
            tp = TopicPartition(s.topic_name, s.partition_index)
            p = broker.partitions.get(tp)
            if broker.node_id not in s.replicas or (p is not None and p.topic_id_stored):
                continue
            plog = p.log if p is not None else broker.log_manager.get(tp.topic, tp.partition)
            if plog is None or plog.offline:
                continue
            request_id = topic_ids.get(tp.topic, ZERO_UUID)
            known = p.topic_id if p is not None and p.topic_id != ZERO_UUID else request_id
            wanted[tp] = (plog.dir, known)

        def store() -> dict[TopicPartition, uuid.UUID | OSError | None]:
            out: dict[TopicPartition, uuid.UUID | OSError | None] = {}
            for tp, (directory, topic_id) in wanted.items():
                try:
                    out[tp] = store_topic_id(directory, topic_id)
                except OSError as e:
                    out[tp] = e
            return out

        stored = await trio.to_thread.run_sync(store) if wanted else {}
        for tp, outcome in stored.items():
            if isinstance(outcome, OSError):
                log.error("%s-%d: cannot store the topic id: %s", tp.topic, tp.partition, outcome)
                broker.log_manager.handle_log_error(tp.topic, tp.partition, outcome)
        return stored

    async def create_new_logs(self, request: LeaderAndIsrRequest, version: int) -> None:
        """Make the logs `request` names here that do not exist yet, with their topic ids, off
        the loop (`Broker.make_logs`, one call for all), before `_apply_leader_and_isr`
        applies it: it then finds them. A log that could not be made is left to it (it tries
        again and answers KAFKA_STORAGE_ERROR), as is one no directory can be named for."""
        if request.controller_epoch < self.controller_epoch:
            return
        broker = self.broker
        topic_ids = {t.topic_name: t.topic_id for t in request.topic_states} if version >= 5 else {}
        wanted = {}
        for s in _leader_and_isr_states(request, version):
            tp = TopicPartition(s.topic_name, s.partition_index)
            if (
                broker.node_id in s.replicas
                and tp not in broker.partitions
                and broker.log_manager.get(tp.topic, tp.partition) is None
                and partition_dir_problem(tp.topic, tp.partition) is None
            ):
                wanted[(tp.topic, tp.partition)] = log_config_for(
                    broker.config, broker.topic_overrides(tp.topic)
                )
        if wanted:

            def init(tp: tuple[str, int], directory: Path) -> None:
                write_new_topic_id(directory, topic_ids.get(tp[0], ZERO_UUID))

            await broker.make_logs(wanted, init)

    def _create_partition(
        self, tp: TopicPartition, topic_id: uuid.UUID, outcome: uuid.UUID | OSError | None
    ) -> Partition:
        """The partition over its log (opened or created), with the topic id the log has
        (`outcome` of `_store_topic_ids`; none known: `topic_id`)."""
        broker = self.broker
        plog = broker.log_manager.get_or_create(
            tp.topic, tp.partition, log_config_for(broker.config, broker.topic_overrides(tp.topic))
        )
        stored = outcome if isinstance(outcome, uuid.UUID) else None
        p = Partition(
            tp.topic,
            tp.partition,
            stored if stored is not None else topic_id,
            plog,
            leader=NO_LEADER,
            leader_epoch=-1,
            node_id=broker.node_id,
            min_isr_source=partial(broker.min_insync_replicas, tp.topic),
            replica_lag_ms=self.lag_ms,
            on_isr_change=self._enqueue_isr_change,
            is_broker_alive=broker.metadata_cache.is_alive,
            clock=broker.clock,
        )
        broker.partitions[tp] = p
        log.info("%s-%d: created (log end offset %d)", tp.topic, tp.partition, plog.log_end_offset)
        return p

    def _make_leader(
        self, tp: TopicPartition, p: Partition, s: LeaderAndIsrState, now: int
    ) -> None:
        self._remove_fetcher(tp)
        p.make_leader(
            leader_epoch=s.leader_epoch,
            partition_epoch=s.partition_epoch,
            controller_epoch=s.controller_epoch,
            isr=list(s.isr),
            replicas=list(s.replicas),
            now_ms=now,
        )
        log.info(
            "%s-%d: leader at epoch %d from offset %d, ISR %s, high watermark %d",
            tp.topic,
            tp.partition,
            p.leader_epoch,
            p.log_end_offset,
            p.isr,
            p.high_watermark,
        )
        self.broker.partition_moved(tp, leader=True)

    def _make_follower(self, tp: TopicPartition, p: Partition, s: LeaderAndIsrState) -> None:
        restart = p.make_follower(
            leader=s.leader,
            leader_epoch=s.leader_epoch,
            partition_epoch=s.partition_epoch,
            controller_epoch=s.controller_epoch,
            replicas=list(s.replicas),
        )
        log.info(
            "%s-%d: follower of %d at epoch %d, log end offset %d",
            tp.topic,
            tp.partition,
            s.leader,
            s.leader_epoch,
            p.log_end_offset,
        )
        self.broker.partition_moved(tp, leader=False)
        if restart:
            self._remove_fetcher(tp)
            if s.leader >= 0:
                self._add_fetcher(tp, p)

    # StopReplica -------------------------------------------------------------------------
    async def stop_replicas(self, request: StopReplicaRequest, version: int) -> StopReplicaResponse:
        """Apply a StopReplica once no worker thread writes the logs it names (`_settle`):
        a deletion renames the partition's directory at once (a restart never takes it for
        data) and removes it in the removal chore's worker thread."""
        await self._settle(
            [
                TopicPartition(t, i)
                for t, i, _epoch, _delete in _stop_replica_states(request, version)
            ]
        )
        if request.controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring StopReplica from controller %d: its epoch %d is older than %d",
                request.controller_id,
                request.controller_epoch,
                self.controller_epoch,
            )
            return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self.controller_epoch = request.controller_epoch
        results = []
        for topic, index, epoch, delete in _stop_replica_states(request, version):
            tp = TopicPartition(topic, index)
            p = self.broker.partitions.get(tp)
            code = ErrorCode.NONE
            if (
                p is not None
                and epoch not in (NO_EPOCH, EPOCH_DURING_DELETE)
                and epoch < p.leader_epoch
            ):
                log.info(
                    "%s-%d: ignoring StopReplica at epoch %d (ours is %d)",
                    topic,
                    index,
                    epoch,
                    p.leader_epoch,
                )
                code = ErrorCode.FENCED_LEADER_EPOCH
            else:
                try:
                    self._stop(tp, p, delete)
                except (KafkaStorageError, OSError) as e:
                    log.error("%s-%d: cannot delete: %s", topic, index, e)
                    code = ErrorCode.KAFKA_STORAGE_ERROR
            results.append(
                StopReplicaResponse.StopReplicaPartitionError(
                    topic_name=topic, partition_index=index, error_code=code
                )
            )
        return StopReplicaResponse(error_code=ErrorCode.NONE, partition_errors=results)

    def _stop(self, tp: TopicPartition, p: Partition | None, delete: bool) -> None:
        self._remove_fetcher(tp)
        self.broker.partition_moved(tp, leader=False)
        self._isr_queue.pop(tp, None)
        if not delete:
            log.info("%s-%d: stopped", tp.topic, tp.partition)
            return
        if p is not None:
            del self.broker.partitions[tp]
            p.leader = NO_LEADER
            p.notify_changed()
            p.notify_append()
        if self.broker.log_manager.delete_partition(tp.topic, tp.partition):
            log.info("%s-%d: stopped and deleted", tp.topic, tp.partition)

    # UpdateMetadata ----------------------------------------------------------------------
    def update_metadata(self, request: UpdateMetadataRequest, version: int) -> ErrorCode:
        if request.controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring UpdateMetadata from controller %d: its epoch %d is older than %d",
                request.controller_id,
                request.controller_epoch,
                self.controller_epoch,
            )
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if deleted := self.broker.metadata_cache.update(request, version):
            self.broker.on_partitions_deleted(deleted)
        self.broker.controller_id = max(request.controller_id, -1)
        self.controller_epoch = request.controller_epoch
        # A follower that was caught up holds the watermark only while its broker is alive;
        # when it goes, nothing else would move the watermark of an idle partition.
        now = self.broker.now_ms()
        for partition in self.broker.partitions.values():
            if partition.is_local_leader and partition.followers:
                partition.maybe_advance_high_watermark(now)
        return ErrorCode.NONE

    def check_broker_epoch(self, broker_epoch: int) -> None:
        """Kafka's isBrokerEpochStale: a request meant for an earlier registration of ours. Kafka
        lets a request without an epoch (-1, from controllers older than KIP-380) through; here
        it is stale once this broker has an epoch (registered in ZooKeeper)."""
        current = self.broker.broker_epoch
        if broker_epoch < current:
            raise KafkaError(
                f"broker epoch {broker_epoch} is older than ours ({current})",
                error_code=ErrorCode.STALE_BROKER_EPOCH,
            )


def _leader_and_isr_states(request: LeaderAndIsrRequest, version: int) -> list[LeaderAndIsrState]:
    if version < 2:
        return list(request.ungrouped_partition_states)
    out = []
    for topic in request.topic_states:
        for s in topic.partition_states:
            s.topic_name = topic.topic_name
            out.append(s)
    return out


def refused_leader_and_isr(
    request: LeaderAndIsrRequest, version: int, error: ErrorCode
) -> LeaderAndIsrResponse:
    """`error` for the request and each of its partitions (Kafka's
    LeaderAndIsrRequest.getErrorResponse): nothing of it applied."""
    topic_ids = {t.topic_name: t.topic_id for t in request.topic_states} if version >= 5 else {}
    errors = {
        (s.topic_name, s.partition_index): error for s in _leader_and_isr_states(request, version)
    }
    return _leader_and_isr_response(version, error, errors, topic_ids)


def refused_stop_replica(
    request: StopReplicaRequest, version: int, error: ErrorCode
) -> StopReplicaResponse:
    """`error` for the request and each of its partitions (Kafka's
    StopReplicaRequest.getErrorResponse): nothing of it applied."""
    return StopReplicaResponse(
        error_code=error,
        partition_errors=[
            StopReplicaResponse.StopReplicaPartitionError(
                topic_name=topic, partition_index=index, error_code=error
            )
            for topic, index, _epoch, _delete in _stop_replica_states(request, version)
        ],
    )


def _leader_and_isr_response(
    version: int,
    error: ErrorCode,
    errors: dict[tuple[str, int], ErrorCode],
    topic_ids: dict[str, uuid.UUID],
) -> LeaderAndIsrResponse:
    Error = LeaderAndIsrResponse.LeaderAndIsrPartitionError
    if version < 5:
        return LeaderAndIsrResponse(
            error_code=error,
            partition_errors=[
                Error(topic_name=t, partition_index=i, error_code=code)
                for (t, i), code in errors.items()
            ],
        )
    topics: dict[uuid.UUID, list[LeaderAndIsrResponse.LeaderAndIsrPartitionError]] = {}
    for (t, i), code in errors.items():
        topics.setdefault(topic_ids.get(t, ZERO_UUID), []).append(
            Error(partition_index=i, error_code=code)
        )
    return LeaderAndIsrResponse(
        error_code=error,
        topics=[
            LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=tid, partition_errors=ps)
            for tid, ps in topics.items()
        ],
    )


def _stop_replica_states(
    request: StopReplicaRequest, version: int
) -> Iterable[tuple[str, int, int, bool]]:
    """(topic, partition, leader epoch, delete) for every partition, whatever the version."""
    if version == 0:
        for p in request.ungrouped_partitions:
            yield p.topic_name, p.partition_index, NO_EPOCH, request.delete_partitions
    elif version <= 2:
        for t in request.topics:
            for index in t.partition_indexes:
                yield t.name, index, NO_EPOCH, request.delete_partitions
    else:
        for ts in request.topic_states:
            for ps in ts.partition_states:
                yield ts.topic_name, ps.partition_index, ps.leader_epoch, ps.delete_partition
