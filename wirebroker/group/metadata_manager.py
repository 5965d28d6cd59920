"""The group coordinator's offsets side and its groups' store (Kafka's GroupMetadataManager):
owns the groups of the `__consumer_offsets` partitions loaded here, what they keep in that topic
and the offsets committed to them. The membership side (`group.coordinator`) asks it for groups
and has it write a group's metadata.

Which groups it holds: those of the `__consumer_offsets` partitions this broker leads and
has loaded. Embedded that is every partition: all are loaded at start, and a topic made on first
use (by FindCoordinator or Metadata, as `wirebroker.auto_topics` makes it:
`offsets.topic.num.partitions` partitions, compacted; its logs made off the loop) has each
partition loaded once its log exists (`partition_moved`); until then its groups answer
NOT_COORDINATOR, as Kafka's before it leads the partition. In a cluster the replica manager
calls `partition_moved` when this broker becomes leader (the partition is loaded, Kafka's
onElection) or follower, or stops the partition (its groups are unloaded, Kafka's
onResignation, and the membership side answers their parked requests NOT_COORDINATOR).

Loading runs beside the loop: the store replays the partition in a worker thread and the groups
are installed on the loop when it is done. Meanwhile the partition's groups answer
COORDINATOR_LOAD_IN_PROGRESS (ListGroups too, as Kafka's); a leadership change cancels the
load and drops what it read. Any group of a partition neither loaded nor loading gets
NOT_COORDINATOR. Writing and replaying the topic is the store's (`wirebroker.coordinator_store`),
turning records into groups the loader's (`group.loader`), their format `group.records`'.

Writes are appended to the local leader at once, as acks=all; what must be durable before it
is answered — an offset commit and the SyncGroup replies of a new generation — waits for the
high watermark to pass the write, within `offsets.commit.timeout.ms`, and append errors are
mapped as Kafka's GroupMetadataManager maps them. Group deletions and offset deletions are not
waited for (Kafka appends those tombstones with acks=0).

Offsets expire as in Kafka 3.x (`Group.expire_offsets`): every
`offsets.retention.check.interval.ms` (first at start), offsets older than
`offsets.retention.minutes` are deleted with tombstones, and an Empty group left without
offsets, committed or being committed, is removed (a tombstone for its metadata too if it had a
generation). OffsetDelete, DeleteGroups and a topic's deletion end the same way, and drop the
commits of their partitions still being written (Kafka's removeOffsets). Offsets committed in a
transaction stay pending until its end (`group.txn_offsets`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Set
from functools import partial
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode
from protocol.messages.group_coordinator.offset_commit import OffsetCommitValue
from protocol.record_batch import NO_SEQUENCE
from storage.producer_state import VerificationGuard
from wirebroker.coordinator_store import (
    CoordinatorStore,
    PartitionLoads,
    Write,
    partition_for,
    store_error,
)
from wirebroker.group import records
from wirebroker.group.loader import GroupLoad
from wirebroker.group.state import CommittedOffset, Group, GroupState
from wirebroker.group.txn_offsets import PendingTxnOffsets
from wirebroker.partition import TopicPartition
from wirebroker.topics import OFFSETS_TOPIC

if TYPE_CHECKING:
    from wirebroker.broker import Broker
    from wirebroker.txn.verification import TransactionalWriter

log = logging.getLogger(__name__)


class GroupMetadataManager:
    """The groups of the `__consumer_offsets` partitions loaded here, and their offsets."""

    def __init__(
        self,
        broker: Broker,
        *,
        on_loaded: Callable[[Iterable[Group]], None],
        on_unloaded: Callable[[Set[str]], None],
    ) -> None:
        """`on_loaded` is told the groups a partition's load installed, `on_unloaded` the ids
        of those an unload forgot (Kafka's onGroupLoaded and onGroupUnloaded)."""
        self.broker = broker
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self.groups: dict[str, Group] = {}
        #: The `__consumer_offsets` partitions loaded (in a cluster: led by us, and loaded).
        self.owned: set[int] = set()
        #: Per group, the log offset of the commit each partition's offset came from: a commit
        #: acknowledged after a later one must not overwrite it.
        self._commit_positions: dict[str, dict[tuple[str, int], int]] = {}
        #: Per group, the partitions of commits written but not yet durable, each with those
        #: commits (Kafka's pendingOffsetCommits): OffsetFetch `require_stable` calls them
        #: unstable, expiry keeps their offsets and their group, and a commit is installed
        #: once durable only if its partition was not removed from here meanwhile.
        self._pending_commits: dict[str, dict[tuple[str, int], set[object]]] = {}
        #: Offsets committed in transactions that have not ended yet.
        self.txn_offsets = PendingTxnOffsets()
        self._nursery: trio.Nursery | None = None  # where loads run, once serving
        config = broker.config
        self.store = CoordinatorStore(
            OFFSETS_TOPIC,
            broker.partition,
            config.get_int("offsets.commit.timeout.ms") / 1000,
        )
        #: The partitions being loaded.
        self.loading = PartitionLoads(self.store)
        self.num_partitions = config.get_int("offsets.topic.num.partitions")
        self.initial_delay_ms = config.get_int("group.initial.rebalance.delay.ms")
        self.max_metadata_bytes = config.get_int("offset.metadata.max.bytes")
        self.retention_ms = config.get_int("offsets.retention.minutes") * 60_000
        self.retention_check_s = config.get_int("offsets.retention.check.interval.ms") / 1000

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        """Serve from `nursery`: start loading `__consumer_offsets` (embedded) and expire
        offsets there until it ends."""
        self._nursery = nursery
        self._load_all()
        nursery.start_soon(self._expire_offsets_periodically)

    def _load_all(self) -> None:
        """Embedded: load every partition of `__consumer_offsets` served (those whose logs are
        being made load once they are, `partition_moved`). In a cluster nothing is loaded
        here: partitions load as this broker becomes leader."""
        if self.broker.cluster_mode:
            return
        record = self.broker.topics.get(OFFSETS_TOPIC)
        if record is None:
            return
        self.num_partitions = record.partitions
        for index in range(record.partitions):
            if self.broker.partition(OFFSETS_TOPIC, index) is not None:
                self._start_load(index)

    def partition_moved(self, tp: TopicPartition, *, leader: bool) -> None:
        """The replica manager made `tp` leader or follower here, or stopped it (`leader`
        False). For a `__consumer_offsets` partition, load its groups when we newly lead it
        (Kafka's onElection) and unload them, or cancel their load, when we no longer do
        (onResignation)."""
        if tp.topic != OFFSETS_TOPIC:
            return
        index = tp.partition
        if leader:
            if index not in self.owned and index not in self.loading:
                self._start_load(index)
            return
        self.loading.cancel(index)
        if index in self.owned:
            self.owned.discard(index)
            self._unload_partition(index)

    async def wait_loaded(self, index: int | None = None) -> None:
        """Until partition `index` of `__consumer_offsets` (default: every one) is not loading."""
        await self.loading.wait(index)

    def _start_load(self, index: int) -> None:
        """Replay partition `index` off the loop, then install its groups, unless the load was
        cancelled (leadership moved) meanwhile; a load that failed leaves them unavailable."""
        assert self._nursery is not None, "partitions load once the coordinator serves"
        load = GroupLoad(self.initial_delay_ms)
        self.loading.start(
            self._nursery, index, 0, load.replay, load.marker, partial(self._loaded, index, load)
        )

    def _loaded(self, index: int, load: GroupLoad, count: int, elapsed_ms: float) -> None:
        load.finish()
        self.groups.update(load.groups)
        self._commit_positions.update(load.positions)
        self.txn_offsets.merge(load.pending)
        self.owned.add(index)
        self._on_loaded(load.groups.values())
        log.log(
            logging.INFO if count else logging.DEBUG,
            "%s-%d: loaded %d groups from %d records in %.0f ms",
            OFFSETS_TOPIC,
            index,
            len(load.groups),
            count,
            elapsed_ms,
        )

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates `group_id`; COORDINATOR_LOAD_IN_PROGRESS while its
        partition loads; else NOT_COORDINATOR."""
        index = self.partition_of(group_id)
        if index in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if index in self.owned:
            return ErrorCode.NONE
        return ErrorCode.NOT_COORDINATOR

    def partition_of(self, group_id: str) -> int:
        """The group's `__consumer_offsets` partition. In a cluster the topic's real partition
        count counts (it may have been created by a broker configured otherwise), as Kafka's
        getGroupMetadataTopicPartitionCount; `offsets.topic.num.partitions` until it is known."""
        count = self.num_partitions
        if self.broker.cluster_mode:
            count = len(self.broker.metadata_cache.partitions.get(OFFSETS_TOPIC, {})) or count
        return partition_for(group_id, count)

    def _unload_partition(self, index: int) -> None:
        """Forget the groups of one partition (`on_unloaded` answers their parked requests)."""
        gone = {gid for gid in self.groups if self.partition_of(gid) == index}
        if not gone:
            return
        for gid in gone:
            del self.groups[gid]
            self._commit_positions.pop(gid, None)
            self.txn_offsets.drop_group(gid)
        self._on_unloaded(gone)
        log.info("%s-%d: unloaded %d groups", OFFSETS_TOPIC, index, len(gone))

    # -- offsets expiry ---------------------------------------------------------------------
    async def _expire_offsets_periodically(self) -> None:
        while True:
            self.expire_offsets(self.broker.now_ms())
            await trio.sleep(self.retention_check_s)

    def expire_offsets(self, now: int) -> None:
        """Delete the offsets whose retention passed, and the Empty groups left without any
        (Kafka's cleanupGroupMetadata). An offset with a commit of its partition in flight
        stays until the next check, so that no tombstone lands behind a commit it would
        undo, and keeps its group."""
        expired = removed = 0
        for group in list(self.groups.values()):
            pending = self._pending_commits.get(group.group_id, {})
            gone = group.expire_offsets(now, self.retention_ms, pending)
            expired += len(gone)
            removed += self._cleanup(group, gone)
        if expired or removed:
            log.info("expired %d offsets, removed %d groups", expired, removed)

    def on_partitions_deleted(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Partitions of deleted topics: every group here forgets its offsets of them, those
        committed and those being committed, in transactions or not, and a group left Empty
        without offsets is removed (Kafka's handleDeletedPartitions), so that a topic made
        again under the name is read from where `auto.offset.reset` says, not from the old
        topic's offsets."""
        deleted = set(partitions)
        removed = sum(self._remove_offsets(g, deleted) for g in list(self.groups.values()))
        if removed:
            log.info("removed %d offsets of deleted partitions", removed)

    def _remove_offsets(self, group: Group, partitions: Set[tuple[str, int]]) -> int:
        """The group forgets its offsets of `partitions`: those committed, and its commits of
        them still being written, in transactions or not (Kafka's removeOffsets), so that
        those are not installed when they complete; then `_cleanup`. How many committed
        offsets it had."""
        group_id = group.group_id
        removed = [tp for tp in group.offsets if tp in partitions]
        for tp in removed:
            del group.offsets[tp]
        pending = self._pending_commits.get(group_id, {})
        fenced = [tp for tp in pending if tp in partitions]
        for tp in fenced:
            del pending[tp]
        if not pending:
            self._pending_commits.pop(group_id, None)
        self.txn_offsets.drop_partitions(group_id, [*partitions])
        self._cleanup(group, [*removed, *fenced])
        return len(removed)

    def _cleanup(self, group: Group, tombstoned: list[tuple[str, int]]) -> bool:
        """Tombstones for the group's offsets of partitions `tombstoned` (removed, or being
        committed behind them in the log), and an Empty group left without offsets, committed
        or being committed (Kafka's hasOffsets), is Dead: removed, with a tombstone for its
        metadata if it ever had a generation (a group that only stored offsets wrote none).
        Kafka's cleanupGroupMetadata; not awaited, as its acks=0 tombstones. Whether the group
        is Dead."""
        group_id = group.group_id
        kvs: list[tuple[bytes, bytes | None]] = [
            (records.offset_key(group_id, t, p), None) for t, p in dict.fromkeys(tombstoned)
        ]  # one tombstone a partition, committed and being committed alike
        positions = self._commit_positions.get(group_id, {})
        for tp in tombstoned:
            positions.pop(tp, None)
        if group.state == GroupState.EMPTY and not (
            group.offsets
            or group_id in self._pending_commits
            or self.txn_offsets.has_group(group_id)
        ):
            group.state = GroupState.DEAD
        dead = group.state == GroupState.DEAD
        if dead:
            self.groups.pop(group_id, None)
            self._commit_positions.pop(group_id, None)
            self.txn_offsets.drop_group(group_id)
            if group.generation_id > 0:
                kvs.append((records.group_key(group_id), None))
        if kvs:
            self._append(group_id, kvs)
        return dead

    # -- groups -----------------------------------------------------------------------------
    def group(self, group_id: str, *, create: bool = False) -> Group | None:
        """The group, made first if unknown and `create` (Kafka's getGroup and addGroup)."""
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = Group(group_id, self.initial_delay_ms)
        return group

    def forget_if_unused(self, group: Group) -> None:
        """Drop a group that never formed: nothing of it was written, so nothing to delete."""
        if (
            group.state == GroupState.EMPTY
            and group.generation_id == 0
            and not group.members
            and not group.pending_members
            and not group.offsets
            and group.group_id not in self._pending_commits
            and not self.txn_offsets.has_group(group.group_id)
        ):
            self.groups.pop(group.group_id, None)

    def store_group(self, group: Group) -> Write:
        """Write the group's metadata (Kafka's storeGroup); `group_write_error` once durable."""
        return self._append(
            group.group_id,
            [
                (
                    records.group_key(group.group_id),
                    records.group_value(records.group_metadata(group)),
                )
            ],
        )

    async def group_write_error(self, write: Write) -> ErrorCode:
        """How a write of a group's metadata ended once durable, as storeGroup maps it: a
        timeout is a coordinator that is not available."""
        return store_error(
            await self.store.stored(write),
            too_large=ErrorCode.UNKNOWN_SERVER_ERROR,
            timed_out=ErrorCode.COORDINATOR_NOT_AVAILABLE,
        )

    def _append(
        self,
        group_id: str,
        kvs: list[tuple[bytes, bytes | None]],
        *,
        producer: tuple[int, int] | None = None,
        guard: VerificationGuard | None = None,
    ) -> Write:
        """Append to the group's partition; with `producer` (id, epoch) as that producer's
        transactional batch, bringing KIP-890's `guard`."""
        return self.store.append(
            self.partition_of(group_id),
            kvs,
            self.broker.now_ms(),
            f"group {group_id}",
            producer=producer,
            verification_guard=guard,
        )

    # -- offsets ----------------------------------------------------------------------------
    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of one group: an Empty group goes with its offsets (`_remove_offsets`)."""
        if (error := self.coordinator_error(group_id)) != ErrorCode.NONE:
            return error
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state != GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        group.state = GroupState.DEAD  # its offsets go, and its commits being written
        self._remove_offsets(group, {*group.offsets, *self._pending_commits.get(group_id, ())})
        return ErrorCode.NONE

    async def commit(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: list[tuple[str, int, CommittedOffset]],
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Validate and write a commit: (group-level error, per-partition errors). The offsets
        are visible once durable (the high watermark passed them), as Kafka's storeOffsets."""
        if (error := self.coordinator_error(group_id)) != ErrorCode.NONE:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:  # not a simple (admin) commit: a stale generation
                return ErrorCode.ILLEGAL_GENERATION, []
            group = self.group(group_id, create=True)
            assert group is not None
        error = group.check_commit(member_id, instance_id, generation_id)
        if error is not ErrorCode.NONE:
            return error, []
        now = self.broker.now_ms()
        group.touch(member_id, now)
        codes: list[ErrorCode] = []
        kvs: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[str, int, CommittedOffset]] = []
        for topic, partition, committed in offsets:
            if len(committed.metadata.encode()) > self.max_metadata_bytes:
                codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            codes.append(ErrorCode.NONE)
            kvs.append(
                (
                    records.offset_key(group_id, topic, partition),
                    records.offset_value(_offset_value(committed)),
                )
            )
            accepted.append((topic, partition, committed))
        if not kvs:
            return ErrorCode.NONE, codes
        in_flight = [(topic, partition) for topic, partition, _ in accepted]
        this_commit = object()
        pending = self._pending_commits.setdefault(group_id, {})
        for tp in in_flight:
            pending.setdefault(tp, set()).add(this_commit)
        try:
            write = self._append(group_id, kvs)
            stored = _offset_store_error(await self.store.stored(write))
            kept = {tp for tp in in_flight if this_commit in pending.get(tp, ())}
        finally:
            for tp in in_flight:
                commits = pending.get(tp)
                if commits is not None:
                    commits.discard(this_commit)
                    if not commits:
                        del pending[tp]
            if not pending and self._pending_commits.get(group_id) is pending:
                del self._pending_commits[group_id]
        if stored != ErrorCode.NONE:
            return ErrorCode.NONE, [stored if c == ErrorCode.NONE else c for c in codes]
        if self.groups.get(group_id) is not group:
            return ErrorCode.NONE, codes  # unloaded or deleted meanwhile; the log has it
        positions = self._commit_positions.setdefault(group_id, {})
        for topic, partition, committed in accepted:
            tp = (topic, partition)
            # not if its offset was removed meanwhile (a tombstone follows it in the log)
            if tp in kept and positions.get(tp, -1) < _position(write):
                positions[tp] = _position(write)
                group.offsets[tp] = committed
        return ErrorCode.NONE, codes

    def fetch(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        """The group's committed offsets (the handler answers NOT_COORDINATOR before asking)."""
        group = self.groups.get(group_id)
        return {} if group is None else group.offsets

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        if (error := self.coordinator_error(group_id)) != ErrorCode.NONE:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group.state != GroupState.EMPTY and group.protocol_type not in (None, "", "consumer"):
            return ErrorCode.NON_EMPTY_GROUP, []
        subscribed = set() if group.state == GroupState.EMPTY else group.subscribed_topics()
        if subscribed is None:
            return ErrorCode.NON_EMPTY_GROUP, []
        codes: list[ErrorCode] = []
        eligible: set[tuple[str, int]] = set()
        for topic, partition in partitions:
            if topic in subscribed:
                codes.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            codes.append(ErrorCode.NONE)
            eligible.add((topic, partition))
        if ErrorCode.NONE in codes:  # as Kafka, even if none of them had an offset
            self._remove_offsets(group, eligible)
        return ErrorCode.NONE, codes

    # -- transactional offsets --------------------------------------------------------------
    async def commit_transactional(
        self,
        group_id: str,
        txn: TransactionalWriter,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        offsets: list[tuple[str, int, CommittedOffset]],
    ) -> list[ErrorCode]:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): per-partition codes. The offsets
        are written as a transactional batch of the producer and stay pending -- not fetched,
        UNSTABLE_OFFSET_COMMIT for require_stable -- until its transaction ends
        (`complete_transaction`)."""
        count = len(offsets)
        if not group_id:
            return [ErrorCode.INVALID_GROUP_ID] * count
        if (error := self.coordinator_error(group_id)) != ErrorCode.NONE:
            return [error] * count
        self.group(group_id, create=True)
        offsets_tp = TopicPartition(OFFSETS_TOPIC, self.partition_of(group_id))
        verified = await txn.verify({offsets_tp: NO_SEQUENCE})
        if verified.errors:
            (error,) = verified.errors.values()
            return [_txn_offset_store_error(error)] * count
        group = self.groups.get(group_id)
        if group is None:  # unloaded while verifying
            return [self.coordinator_error(group_id) or ErrorCode.NOT_COORDINATOR] * count
        error = group.check_txn_commit(member_id, instance_id, generation_id)
        if error != ErrorCode.NONE:
            return [error] * count
        codes: list[ErrorCode] = []
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        for topic, partition, committed in offsets:
            if len(committed.metadata.encode()) > self.max_metadata_bytes:
                codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                codes.append(ErrorCode.NONE)
                accepted[(topic, partition)] = committed
        if not accepted:
            return codes
        producer_id = txn.producer_id
        self.txn_offsets.add(group_id, producer_id, accepted)
        write = self._append(
            group_id,
            [
                (records.offset_key(group_id, t, p), records.offset_value(_offset_value(c)))
                for (t, p), c in accepted.items()
            ],
            producer=(producer_id, txn.producer_epoch),
            guard=verified.guard(offsets_tp),
        )
        stored = _txn_offset_store_error(await self.store.stored(write))
        if stored != ErrorCode.NONE:
            self.txn_offsets.forget(group_id, producer_id, list(accepted))
            return [stored if c == ErrorCode.NONE else c for c in codes]
        self.txn_offsets.written(group_id, producer_id, accepted, _position(write))
        return codes

    def complete_transaction(self, producer_id: int, partitions: list[int], commit: bool) -> None:
        """A marker of `producer_id` was written to these `__consumer_offsets` partitions: make
        its transactional offsets in their groups the groups' offsets (commit; unless a later
        commit already replaced one) or drop them (abort), as Kafka's onTransactionCompleted."""
        done = set(partitions)
        taken = self.txn_offsets.take(producer_id, lambda g: self.partition_of(g) in done)
        for group_id, pending in taken:
            group = self.groups.get(group_id)
            if not commit or group is None:
                continue
            positions = self._commit_positions.setdefault(group_id, {})
            for tp, p in pending.items():
                if p.position >= 0 and positions.get(tp, -1) < p.position:
                    positions[tp] = p.position
                    group.offsets[tp] = p.offset
        if taken:
            log.debug(
                "producer %d: %s offsets of %d groups",
                producer_id,
                "committed" if commit else "aborted",
                len(taken),
            )

    def unstable(self, group_id: str, tp: tuple[str, int]) -> bool:
        """Whether an offset of `tp` for the group is not settled: a commit of it is being
        written, or an open transaction holds one (Kafka's
        hasPendingOffsetCommitsForTopicPartition)."""
        pending = self._pending_commits.get(group_id, {})
        return tp in pending or self.txn_offsets.has_pending(group_id, tp)


def _offset_value(committed: CommittedOffset) -> OffsetCommitValue:
    return OffsetCommitValue(
        offset=committed.offset,
        leader_epoch=committed.leader_epoch,
        metadata=committed.metadata,
        commit_timestamp=committed.commit_timestamp_ms,
        expire_timestamp=committed.expire_timestamp_ms,
    )


def _position(write: Write) -> int:
    """An offset inside the write's batch: positions order the commits of a partition (a load
    records each batch's base offset)."""
    return write.end_offset - 1


def _offset_store_error(error: ErrorCode) -> ErrorCode:
    """storeOffsets' mapping: a timeout stays REQUEST_TIMED_OUT, which consumers treat as a
    lost coordinator."""
    return store_error(
        error,
        too_large=ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
        timed_out=ErrorCode.REQUEST_TIMED_OUT,
    )


def _txn_offset_store_error(error: ErrorCode) -> ErrorCode:
    """A transactional commit's failure (Kafka's maybeConvertOffsetCommitError): as an offset
    commit's, and a verification that could not reach the transaction's coordinator
    (NETWORK_EXCEPTION) is COORDINATOR_LOAD_IN_PROGRESS, which clients retry without a new
    coordinator lookup."""
    if error == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return _offset_store_error(error)
