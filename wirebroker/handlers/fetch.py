"""Fetch, v0-v17: a long poll woken by appends, with record data sent by `os.sendfile`.

A consumer fetch (replica id -1) reads up to the high watermark (READ_UNCOMMITTED) or the last
stable offset (READ_COMMITTED: below every transaction still open, equal to the high watermark
while there is none), and every answer from v4 carries the LSO. A READ_COMMITTED answer lists
the aborted transactions (producer id, first offset) its records may hold, taken from the
segments' transaction indexes as Kafka's collectAbortedTransactions does, so that the client
drops their records; control batches go to the client as they are (clients skip them). A long
poll wakes on each append (a marker moves the LSO) and, where followers move the high
watermark, on that too.
Byte limits: each partition's `partition_max_bytes` and the response's `max_bytes`, with at
least one whole batch for the first partition that has data, as Kafka does. When fewer than
`min_bytes` are ready the request waits up to `max_wait_ms` for an append to any of its
partitions, as a :class:`~wirebroker.dispatch.Later` (Kafka's delayed fetch in purgatory): the
connection handles the requests behind it meanwhile, and answers in request order. A partition
error (out of range, unknown partition) ends the wait at once, as in Kafka, and such a partition
carries empty records, never null ones (librdkafka cannot parse a null record set). Record data is never read into Python: storage returns file slices, which the
connection writes with `os.sendfile`.

Fetch sessions (KIP-227), as Kafka: a full fetch with epoch 0 may open one (its id in the
answer); an incremental fetch reads every partition of its session and is answered with those
that have news; the rules and the cache are `wirebroker.fetch_sessions`. From v13 topics are
named by id: an id this broker does not know is UNKNOWN_TOPIC_ID, but a session remembers the
names of its topics, so a topic deleted under it is UNKNOWN_TOPIC_OR_PARTITION, and one created
again under the same name (a new id) is INCONSISTENT_TOPIC_ID, as in Kafka.

A follower's fetch (replica id >= 0, from a replica of the partition) reads up to the log end
offset, not the high watermark, and its fetch offset is recorded as the follower's log end
offset (which may move the high watermark and the ISR: `Partition.update_follower_fetch_state`).
Its long poll also ends when the high watermark moves, so followers learn it promptly; a
consumer's long poll wakes then too, since what it may read grew. A fetch
from a broker that is not a replica gets UNKNOWN_LEADER_EPOCH (with a leader epoch) or
NOT_LEADER_OR_FOLLOWER, as in Kafka. A follower's last fetched epoch (v12+) is checked: where our
log diverges from it the answer is the diverging epoch and where it ends, without records.
A read that fails for its disk answers KAFKA_STORAGE_ERROR and takes the partition's log
directory offline (`storage.log_manager`).
A consumer over its `consumer_byte_rate` (the records' bytes) or `request_percentage` quota is
answered empty with the throttle time, and its connection muted for it, and a fetch never
asks for more than its byte quota lets through at once, as in Kafka (`wirebroker.quotas`).
On a leader, a follower out of the ISR fetching a partition of the topic's
`leader.replication.throttled.replicas` gets no records while that throttle's rate is over
`leader.replication.throttled.rate` (`wirebroker.quotas.replication`).
Authorization, as Kafka: a consumer needs READ on each topic (else its partitions are
TOPIC_AUTHORIZATION_FAILED, after an unknown topic id and before an unknown topic); a follower
(replica id >= 0) must be allowed to act as a broker (`RequestContext.authorize_cluster_action`:
CLUSTER_ACTION, and here also the inter-broker listener of a cluster), else every partition is
TOPIC_AUTHORIZATION_FAILED and nothing of the follower's state changes.
Fetching from followers (KIP-392), as Kafka: a consumer's fetch with client metadata (v11+)
is served by any replica of the partition, a follower reading its own log up to its high
watermark (its last stable offset for READ_COMMITTED; between that and its log end no records
and no error; out of its log: OFFSET_OUT_OF_RANGE),
with the leader epoch checked against its own; an older consumer fetch (v10 and below) still
needs the leader (NOT_LEADER_OR_FOLLOWER). With `replica.selector.class` set, a leader asks
`wirebroker.replica_selector` for each partition of a fetch naming the client's rack: where it
chooses a follower, the answer is that preferred read replica, the offsets and no records, at
once, and the choice is logged at DEBUG with the client's metadata (rack, client id, address,
principal, listener), as Kafka does. A fetch without a client rack does no part of this.
Differences from Kafka: a consumer's byte rate counts the records' bytes (Kafka: the whole
response's).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.fetch import FetchRequest, FetchResponse
from protocol.primitives import ZERO_UUID
from storage.segment import LookupReads
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import Later, RequestContext, handles
from wirebroker.events import Wakeup
from wirebroker.fetch_sessions import INVALID_SESSION_ID, Asked, FetchContext
from wirebroker.partition import Partition
from wirebroker.quotas import throttle
from wirebroker.quotas.client import session_names
from wirebroker.read_ahead import read_ahead
from wirebroker.replica_selector import (
    NO_PREFERRED_REPLICA,
    RACK_AWARE_SELECTOR,
    preferred_read_replica,
)

log = logging.getLogger(__name__)

READ_COMMITTED = 1
EMPTY = memoryview(b"")  # a partition with an error still carries records: empty, never null

PartitionData = FetchResponse.PartitionData


class FileRecords:
    """The record data of one partition in a response: file slices, sized without reading them.

    The transport sends each slice with `os.sendfile`; `release()` unpins the files afterwards.
    """

    __slots__ = ("slices", "size")

    def __init__(self, slices: list[Any]) -> None:
        self.slices = slices
        self.size = slices[0].length if len(slices) == 1 else sum(s.length for s in slices)

    def __len__(self) -> int:
        return self.size

    def release(self) -> None:
        for s in self.slices:
            s.release()
        self.slices = []


@dataclass
class _Wanted:
    topic: str | None
    topic_id: uuid.UUID
    request: FetchRequest.FetchPartition
    partition: Partition | None
    error: ErrorCode = ErrorCode.NONE
    result: PartitionData = field(default_factory=PartitionData)


@dataclass(eq=False)
class _Poll:
    """One fetch between its reads: what it asked for, its limits, and its wait."""

    ctx: RequestContext
    request: FetchRequest
    context: FetchContext
    wanted: list[_Wanted]
    replica_id: int
    #: A v11+ consumer's rack when this broker has a replica selector (else None): where it
    #: leads, each partition asks the selector for a preferred read replica.
    client_rack: str | None
    max_bytes: int
    min_bytes: int
    #: Whether anything can wake it (some partition it reads is hosted here).
    waitable: bool
    #: The trio time its wait ends (`max_wait_ms` after it arrived).
    deadline: float
    #: What wakes it (its partitions' appends, and moves of their high watermarks), made
    #: when it first goes on to wait (`arm`).
    wakeup: Wakeup | None = None
    #: The high watermarks of its first read that found nothing due (a follower's fetch ends
    #: when one moves).
    first_hws: list[int] = field(default_factory=list)

    def read(self) -> tuple[int, bool]:
        """Read every partition; (bytes read, whether the answer is due now). A poll that
        goes on waiting arms its wakeup before it next awaits anything, so that no append
        after this read is missed (a fetch answered at once never arms one)."""
        wanted = self.wanted
        size = _read_all(self)
        if size >= self.min_bytes or self.request.max_wait_ms <= 0 or not self.waitable:
            return size, True
        for w in wanted:
            if w.result.error_code != ErrorCode.NONE or w.result.diverging_epoch.epoch >= 0:
                return size, True
        if self.client_rack is not None and any(
            w.result.preferred_read_replica != NO_PREFERRED_REPLICA for w in wanted
        ):
            return size, True  # sent to another replica: at once, as Kafka
        if self.replica_id < 0:
            return size, False
        hws = [w.result.high_watermark for w in wanted]
        if not self.first_hws:
            self.first_hws = hws
        return size, hws != self.first_hws

    def arm(self) -> Wakeup:
        """Register for the next wake of its sources (made on the first call): appends wake
        everyone; a moved high watermark wakes followers (who must learn it) and, where
        followers move it, consumers (what they may read grew)."""
        if self.wakeup is None:
            partitions = [w.partition for w in self.wanted if w.partition is not None]
            sources = [p.append_waiters for p in partitions]
            sources += [p.state_waiters for p in partitions if self.replica_id >= 0 or p.followers]
            self.wakeup = Wakeup(sources)
        self.wakeup.arm()
        return self.wakeup


@handles(FetchRequest, (0, 17))
async def fetch(ctx: RequestContext, request: FetchRequest) -> FetchResponse | Later:
    version = ctx.api_version
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    sessions = ctx.broker.fetch_sessions
    context = sessions.new_context(
        version, request, replica_id >= 0, ctx.broker.now_ms(), ctx.broker.topic_name
    )
    if context.error:
        return FetchResponse(error_code=context.error, session_id=INVALID_SESSION_ID)
    wanted = _resolve(ctx, context.asked, replica_id)
    client_rack = (
        request.rack_id
        if version >= 11 and request.rack_id and replica_id < 0 and ctx.broker.replica_selector
        else None
    )
    max_bytes = request.max_bytes if version >= 3 else 2**31 - 1
    min_bytes = request.min_bytes
    quota = ctx.broker.quotas.fetch
    if replica_id >= 0:
        throttle.exempt(ctx)
    elif quota.enabled:
        # No more than the client's quota lets through at once (Kafka's maxQuotaWindowBytes).
        user, client_id = session_names(ctx.principal, ctx.client_id)
        cap = quota.max_value_in_window(user, client_id, ctx.broker.now_ms())
        if cap is not None:
            max_bytes = min(max_bytes, int(cap))
            min_bytes = min(min_bytes, max_bytes)
    poll = _Poll(
        ctx,
        request,
        context,
        wanted,
        replica_id,
        client_rack,
        max_bytes,
        min_bytes,
        any(w.partition is not None for w in wanted),
        trio.current_time() + max(request.max_wait_ms, 0) / 1000,
    )
    if lookups := _lookup_reads(wanted):
        return Later(partial(_long_poll, poll, lookups))
    size, due = poll.read()
    if due:
        return _answer(poll, size)
    poll.arm()
    _release(wanted)
    return Later(partial(_long_poll, poll))


def _lookup_reads(wanted: list[_Wanted]) -> list[LookupReads]:
    """What the reads would wait on the disk for to find their fetch offsets (old segments)."""
    found = []
    for w in wanted:
        if w.partition is not None:
            reads = w.partition.log.lookup_reads(w.request.fetch_offset)
            if reads is not None:
                found.append(reads)
    return found


async def _long_poll(poll: _Poll, lookups: list[LookupReads] | None = None) -> FetchResponse:
    """Wait for an append (or a moved high watermark) until the answer is due. With
    `lookups`, first do them in a worker thread and read: the disk reads of a fetch from an
    old segment (its offset index, the batch headers) would hold up every connection."""
    ctx = poll.ctx
    if poll.replica_id < 0:
        throttle.later_started(ctx)  # the time of this task's reads counts too
    size, due = 0, False
    if lookups:
        await read_ahead(lookups)
        size, due = poll.read()
        if not due:
            poll.arm()
            _release(poll.wanted)
    if not due:
        wakeup = poll.wakeup  # armed when the fetch went on to wait
        assert wakeup is not None
        with wakeup, trio.move_on_at(poll.deadline):
            while True:
                await wakeup.wait()
                size, due = poll.read()
                if due:
                    break
                poll.arm()
                _release(poll.wanted)
    response = _answer(poll, size)
    throttle.later_answered(ctx, response)
    return response


def _answer(poll: _Poll, size: int) -> FetchResponse:
    """The response to what the last read found (the session updated, the quotas recorded)."""
    ctx, context, wanted, replica_id = poll.ctx, poll.context, poll.wanted, poll.replica_id
    sessions = ctx.broker.fetch_sessions
    if _needs_final_read(wanted):
        size = _read_all(poll)
    if replica_id < 0 and _throttled(ctx, size):
        # Kafka's throttled fetch: an empty answer (the session stays as it was).
        _release(wanted)
        error, session_id = sessions.throttled_answer(context)
        return FetchResponse(error_code=error, session_id=session_id)
    error, session_id, carried = sessions.answer(
        context, [w.result for w in wanted], ctx.broker.now_ms()
    )
    if error:
        _release(wanted)
        return FetchResponse(error_code=error, session_id=session_id)
    answered = []
    leader_quota = ctx.broker.replication_quotas.leader
    throttled_bytes = 0
    stats = ctx.broker.stats if ctx.broker.stats.on else None
    for w, carry in zip(wanted, carried, strict=True):
        size = 0
        if carry:
            answered.append(w)
            if w.topic and w.result.records is not None:
                size = len(w.result.records)
                if replica_id >= 0 and leader_quota.is_throttled(w.topic, w.request.partition):
                    throttled_bytes += size
        else:
            _release_one(w)
        if stats is not None:
            topic = w.topic if w.partition is not None else None
            stats.fetch_answered(topic, w.result.error_code, size, replica_id >= 0)
    if throttled_bytes:
        # Every follower's bytes count in the throttled rate, those in the ISR too.
        leader_quota.record(throttled_bytes, ctx.broker.now_ms())
    return _response(ctx, answered, session_id)


def _throttled(ctx: RequestContext, size: int) -> bool:
    """Kafka's quota checks of a consumer's fetch once read: its request time and its
    response bytes; a throttled fetch takes its bytes back out of the byte rate."""
    request_ms = throttle.request_throttle(ctx)
    quota = ctx.broker.quotas.fetch
    fetch_ms = throttle.record(ctx, quota, size)
    if not (request_ms or fetch_ms):
        return False
    user, client_id = session_names(ctx.principal, ctx.client_id)
    quota.unrecord(user, client_id, size, ctx.broker.now_ms())
    return True


def _needs_final_read(wanted: list[_Wanted]) -> bool:
    return any(w.error == ErrorCode.NONE and w.result.records is None for w in wanted)


def _resolve(ctx: RequestContext, asked: list[Asked], replica_id: int) -> list[_Wanted]:
    broker = ctx.broker
    # Kafka's FetchParams.fetchOnlyLeader: a consumer with client metadata (v11+) may read
    # from a follower too (KIP-392).
    from_any_replica = replica_id < 0 and ctx.api_version >= 11
    if replica_id >= 0:  # a follower acts as a broker: all or nothing
        follower_allowed = ctx.authorize_cluster_action()
        readable: set[str] = set()
    else:
        follower_allowed = False
        readable = ctx.authorized(
            AclOperation.READ, ResourceType.TOPIC, (a.topic for a in asked if a.topic)
        )
    out = []
    for a in asked:
        name, p = a.topic, a.request
        partition = broker.partition(name, p.partition) if name else None
        w = _Wanted(name, a.topic_id, p, partition)
        if replica_id >= 0 and not follower_allowed:
            w.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif name is None:
            w.error = ErrorCode.UNKNOWN_TOPIC_ID  # v13+: an id this broker never knew
        elif replica_id < 0 and name not in readable:
            w.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif partition is None:
            w.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif ctx.api_version >= 13 and partition.topic_id not in (a.topic_id, ZERO_UUID):
            # The session's name now belongs to another topic (deleted and created again).
            w.error = ErrorCode.INCONSISTENT_TOPIC_ID
        else:
            w.error = partition.leader_error(broker.node_id, p.current_leader_epoch)
            if w.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and from_any_replica:
                w.error = partition.leader_epoch_error(p.current_leader_epoch)
            elif not w.error and replica_id >= 0 and replica_id not in partition.followers:
                # Kafka's followerReplicaOrThrow: not (yet) a replica of this partition.
                w.error = (
                    ErrorCode.UNKNOWN_LEADER_EPOCH
                    if p.current_leader_epoch >= 0
                    else ErrorCode.NOT_LEADER_OR_FOLLOWER
                )
        out.append(w)
    return out


def _read_all(poll: _Poll) -> int:
    """Read every partition within the byte limits; returns the bytes gathered."""
    ctx, request, wanted, replica_id = poll.ctx, poll.request, poll.wanted, poll.replica_id
    client_rack = poll.client_rack
    remaining = poll.max_bytes
    total = 0
    min_one = True
    leader_quota = ctx.broker.replication_quotas.leader
    for w in wanted:
        result = w.result
        result.partition_index = w.request.partition
        result.aborted_transactions = None
        if w.error or w.partition is None:
            # As Kafka's partitionResponse(error): an empty aborted list, not null.
            result.aborted_transactions = []
            result.error_code = w.error
            result.high_watermark = result.last_stable_offset = result.log_start_offset = -1
            result.records = EMPTY
            continue
        p = w.partition
        log = p.log
        result.high_watermark = log.high_watermark
        result.last_stable_offset = log.last_stable_offset
        result.log_start_offset = log.log_start_offset
        committed = replica_id < 0 and request.isolation_level == READ_COMMITTED
        if result.records is not None:
            _release_one(w)
        if client_rack is not None and p.followers and _sent_away(ctx, w, p, client_rack):
            continue
        limit = min(w.request.partition_max_bytes, remaining)
        leader_leo = log.log_end_offset
        if replica_id >= 0 and w.request.last_fetched_epoch >= 0 and _diverged(w, p):
            continue
        # A throttled replica out of the ISR gets no records for now (Kafka's
        # shouldLeaderThrottle); its fetch offset still counts.
        held_back = (
            replica_id >= 0
            and replica_id not in p.isr
            and leader_quota.is_throttled(p.topic, p.index)
            and leader_quota.is_exceeded(ctx.broker.now_ms())
        )
        try:
            read = log.read(
                w.request.fetch_offset,
                0 if held_back else max(limit, 0),
                max_offset=(
                    None
                    if replica_id >= 0
                    else result.last_stable_offset
                    if committed
                    else result.high_watermark
                ),
                min_one_batch=min_one and not held_back,
                aborted_transactions=committed,
            )
        except (KafkaError, OSError) as e:
            # Like Kafka's failed LogReadResult: offsets unknown (-1) next to the error.
            if isinstance(e, KafkaError):
                result.error_code = e.error_code
            else:  # the disk failed under a read: its log directory goes offline
                ctx.broker.log_manager.handle_log_error(p.topic, p.index, e)
                result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            result.high_watermark = result.last_stable_offset = result.log_start_offset = -1
            result.records = EMPTY
            continue
        if replica_id >= 0:
            p.update_follower_fetch_state(
                replica_id,
                w.request.fetch_offset,
                w.request.log_start_offset,
                ctx.broker.now_ms(),
                leader_leo,
            )
            result.high_watermark = p.high_watermark
            result.last_stable_offset = p.last_stable_offset
        result.error_code = ErrorCode.NONE
        result.records = FileRecords(read.slices) if read.slices else memoryview(b"")
        aborted = read.aborted_transactions
        result.aborted_transactions = (
            None
            if aborted is None
            else [
                FetchResponse.AbortedTransaction(
                    producer_id=t.producer_id, first_offset=t.first_offset
                )
                for t in aborted
            ]
        )
        size = len(result.records)
        if size:
            min_one = False
        total += size
        remaining -= size
    return total


def _sent_away(ctx: RequestContext, w: _Wanted, p: Partition, client_rack: str) -> bool:
    """Kafka's preferred read replica: the leader (only a leader has `followers`) answers a
    consumer the selector sends to a follower with that follower and no records (its offsets
    as they are)."""
    result = w.result
    result.preferred_read_replica = preferred = preferred_read_replica(
        p,
        client_rack,
        w.request.fetch_offset,
        ctx.broker.metadata(),
        ctx.listener_name,
        ctx.broker.now_ms(),
    )
    if preferred == NO_PREFERRED_REPLICA:
        return False
    # At DEBUG, as Kafka's ReplicaManager: the selector, its choice and the client's metadata.
    log.debug(
        "%s sends a consumer of %s-%d to replica %d (client rack %s, client id %s, address %s, "
        "principal %s, listener %s)",
        RACK_AWARE_SELECTOR.rpartition(".")[2],
        p.topic,
        p.index,
        preferred,
        client_rack,
        ctx.client_id,
        ctx.client_host,
        ctx.principal,
        ctx.listener_name,
    )
    result.error_code = ErrorCode.NONE
    result.records = EMPTY
    return True


def _diverged(w: _Wanted, p: Partition) -> bool:
    """Kafka's check of a follower's last fetched epoch (v12+): when our log diverges from
    the follower's at that epoch, answer where our epoch ends instead of records (the
    follower truncates there); an epoch older than our log is out of range."""
    result = w.result
    epoch, end = p.end_offset_for_epoch(w.request.last_fetched_epoch)
    if epoch < 0 or end < 0:
        result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
    elif epoch < w.request.last_fetched_epoch or end < w.request.fetch_offset:
        result.error_code = ErrorCode.NONE
        result.diverging_epoch = FetchResponse.EpochEndOffset(epoch=epoch, end_offset=end)
    else:
        return False
    result.records = EMPTY
    return True


def _release_one(w: _Wanted) -> None:
    records = w.result.records
    if isinstance(records, FileRecords):
        records.release()
    w.result.records = None


def _release(wanted: list[_Wanted]) -> None:
    for w in wanted:
        _release_one(w)


def _response(ctx: RequestContext, wanted: list[_Wanted], session_id: int) -> FetchResponse:
    topics: list[FetchResponse.FetchableTopicResponse] = []
    for w in wanted:
        if not topics or topics[-1].topic != (w.topic or "") or topics[-1].topic_id != w.topic_id:
            topics.append(
                FetchResponse.FetchableTopicResponse(
                    topic=w.topic or "",
                    topic_id=w.topic_id if ctx.api_version >= 13 else ZERO_UUID,
                )
            )
        topics[-1].partitions.append(w.result)
    return FetchResponse(error_code=ErrorCode.NONE, session_id=session_id, responses=topics)
