"""ListOffsets, v0-v9.

Timestamps: -2 earliest (log start offset), -1 latest (the high watermark; under READ_COMMITTED,
v2+, the last stable offset; the log end offset for a follower, replica id >= 0) with the
current leader epoch, -3 the record with the largest timestamp (v7+), -4 earliest local
(v8+, the log start offset here: there is no tiered storage), -5 latest tiered (v9+, answered
with offset -1 as Kafka does without tiered storage); otherwise the first offset whose
timestamp is at or after the target; lookups (-3 too) find only records below that same
bound (the high watermark, or the LSO under READ_COMMITTED), as Kafka's
fetchOffsetForTimestamp. As
Kafka, a new leader whose high watermark lags the start of its epoch answers clients' latest
and unanswerable lookups with OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before v5). v0 answers
with `old_style_offsets`. A topic the client may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED in
every partition, listed after the others, as Kafka.

A lookup by timestamp (or of the largest, -3) in old segments would read their time indexes,
offset indexes and batch headers from the disk (after a start, or once their pages were
evicted): the log says what it would wait for (`PartitionLog.timestamp_reads`) and the answer is
then a `Later` whose worker thread reads that first (as a Fetch's from an old segment), so the
loop never waits on it.
The `Later`'s time on the loop counts in the client's request quota (`request_percentage`) as
the handler's does, and its answer carries the throttle time.
"""

from __future__ import annotations

from functools import partial

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from storage.partition_log import PartitionLog
from storage.segment import LookupReads, TimestampReads
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import Later, RequestContext, handles
from wirebroker.handlers.fetch import read_ahead
from wirebroker.partition import Partition
from wirebroker.quotas import throttle

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5
READ_COMMITTED = 1
NO_EPOCH = -1

Result = ListOffsetsResponse.ListOffsetsPartitionResponse


#: Rounds of worker reads before a lookup reads the rest itself (a segment's time index,
#: then the offset index and headers its entry points to, and one more for a segment whose
#: records all lie below the log start offset).
MAX_READ_ROUNDS = 3

Reads = TimestampReads | LookupReads


@handles(ListOffsetsRequest, (0, 9))
async def list_offsets(
    ctx: RequestContext, request: ListOffsetsRequest
) -> ListOffsetsResponse | Later:
    described = ctx.authorized(
        AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    lookups = _timestamp_lookups(ctx, request, described)
    if lookups and (reads := _reads(lookups)):
        return Later(partial(_answer_after_reads, ctx, request, described, lookups, reads))
    return _answer(ctx, request, described)


def _timestamp_lookups(
    ctx: RequestContext, request: ListOffsetsRequest, described: set[str]
) -> list[tuple[PartitionLog, int]]:
    """The logs this request looks a timestamp up in (as their leader), with the timestamp."""
    lookups = []
    node_id = ctx.broker.node_id
    for topic in request.topics:
        if topic.name not in described:
            continue
        for p in topic.partitions:
            if p.timestamp >= 0 or p.timestamp == MAX_TIMESTAMP:
                partition = ctx.broker.partition(topic.name, p.partition_index)
                if partition is not None and not partition.leader_error(
                    node_id, p.current_leader_epoch
                ):
                    lookups.append((partition.log, p.timestamp))
    return lookups


def _reads(lookups: list[tuple[PartitionLog, int]]) -> list[Reads]:
    return [r for log, ts in lookups if (r := log.timestamp_reads(ts)) is not None]


async def _answer_after_reads(
    ctx: RequestContext,
    request: ListOffsetsRequest,
    described: set[str],
    lookups: list[tuple[PartitionLog, int]],
    reads: list[Reads],
) -> ListOffsetsResponse:
    """Do the lookups' disk reads in a worker thread (round after round, each finding what
    the last one's entries point to), then answer on the loop. This task's time counts in
    the request quota, as the handler's."""
    throttle.later_started(ctx)
    for _round in range(MAX_READ_ROUNDS):
        await read_ahead(reads)
        reads = _reads(lookups)
        if not reads:
            break
    response = _answer(ctx, request, described)
    throttle.later_answered(ctx, response)
    return response


def _answer(
    ctx: RequestContext, request: ListOffsetsRequest, described: set[str]
) -> ListOffsetsResponse:
    topics: list[ListOffsetsResponse.ListOffsetsTopicResponse] = []
    refused: list[
        ListOffsetsResponse.ListOffsetsTopicResponse
    ] = []  # as Kafka, the topics refused come after the others
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = Result(partition_index=p.partition_index, timestamp=-1, offset=-1)
            partitions.append(result)
            partition = ctx.broker.partition(topic.name, p.partition_index)
            if topic.name not in described:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif error := partition.leader_error(ctx.broker.node_id, p.current_leader_epoch):
                result.error_code = error
            else:
                try:
                    _lookup(ctx, request, partition, p, result)
                except KafkaError as e:
                    result.error_code = e.error_code
        (topics if topic.name in described else refused).append(
            ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions)
        )
    return ListOffsetsResponse(topics=topics + refused)


def _lookup(
    ctx: RequestContext,
    request: ListOffsetsRequest,
    partition: Partition,
    p: ListOffsetsRequest.ListOffsetsPartition,
    result: Result,
) -> None:
    ts = p.timestamp
    client = request.replica_id == -1
    # A follower (replica id >= 0) is told the log end offset, a client the high watermark, or
    # under READ_COMMITTED (v2+) the last stable offset.
    if not client:
        last_fetchable = partition.log_end_offset
    elif request.isolation_level == READ_COMMITTED:
        last_fetchable = partition.last_stable_offset
    else:
        last_fetchable = partition.high_watermark
    # As Kafka: a new leader whose high watermark still lags the start of its epoch cannot
    # say yet where its log ends, so clients are told to retry instead of given a stale end.
    start = partition.leader_epoch_start_offset
    lagging = client and start is not None and start > partition.high_watermark
    offset, timestamp, epoch = -1, -1, NO_EPOCH
    if ts in (EARLIEST, EARLIEST_LOCAL):
        offset = partition.log_start_offset
        epoch = _epoch_at(partition, offset)
    elif ts == LATEST:
        if lagging:
            raise _offset_not_available(ctx)
        offset, epoch = last_fetchable, partition.leader_epoch
    elif ts != LATEST_TIERED:
        found = partition.log.offset_for_timestamp(ts)
        if found is not None and found.offset < last_fetchable:
            offset, timestamp = found.offset, found.timestamp
            epoch = found.leader_epoch if found.leader_epoch is not None else NO_EPOCH
        elif lagging:
            raise _offset_not_available(ctx)
    result.error_code = ErrorCode.NONE
    if ctx.api_version == 0:
        result.old_style_offsets = [offset] if offset >= 0 else []
        return
    result.offset = offset
    result.timestamp = timestamp
    result.leader_epoch = epoch if ctx.api_version >= 4 else -1


def _offset_not_available(ctx: RequestContext) -> KafkaError:
    """OFFSET_NOT_AVAILABLE from v5, LEADER_NOT_AVAILABLE before (older clients lack it)."""
    code = (
        ErrorCode.OFFSET_NOT_AVAILABLE if ctx.api_version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
    )
    return KafkaError("the high watermark lags the start of the leader epoch", error_code=code)


def _epoch_at(partition: Partition, offset: int) -> int:
    cache = partition.log.leader_epoch_cache
    found = cache.epoch_for_offset(offset) if cache is not None else None
    return found if found is not None else partition.leader_epoch
