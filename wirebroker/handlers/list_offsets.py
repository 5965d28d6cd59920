"""ListOffsets, v0-v9.

Timestamps: -2 earliest (log start offset), -1 latest (high watermark, or the last stable
offset for READ_COMMITTED; the log end offset for a follower, replica id >= 0), -3 the record with the largest timestamp (v7+), -4 earliest local
(v8+, the log start offset here: there is no tiered storage), -5 latest tiered (v9+, answered
with offset -1 as Kafka does without tiered storage); otherwise the first offset whose
timestamp is at or after the target. v0 answers with `old_style_offsets`.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from wirebroker.dispatch import RequestContext, handles
from wirebroker.partition import Partition

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5
NO_EPOCH = -1

Result = ListOffsetsResponse.ListOffsetsPartitionResponse


@handles(ListOffsetsRequest, (0, 9))
async def list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = Result(partition_index=p.partition_index, timestamp=-1, offset=-1)
            partitions.append(result)
            partition = ctx.broker.partition(topic.name, p.partition_index)
            if partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif error := partition.leader_error(ctx.broker.node_id, p.current_leader_epoch):
                result.error_code = error
            else:
                try:
                    _lookup(ctx, request, partition, p, result)
                except KafkaError as e:
                    result.error_code = e.error_code
        topics.append(
            ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions)
        )
    return ListOffsetsResponse(topics=topics)


def _lookup(
    ctx: RequestContext,
    request: ListOffsetsRequest,
    partition: Partition,
    p: ListOffsetsRequest.ListOffsetsPartition,
    result: Result,
) -> None:
    ts = p.timestamp
    if ts in (EARLIEST, EARLIEST_LOCAL):
        offset, timestamp, epoch = (
            partition.log_start_offset,
            -1,
            _epoch_at(partition, partition.log_start_offset),
        )
    elif ts == LATEST:
        # A follower (replica id >= 0) is told the log end offset, as Kafka does.
        end = partition.log_end_offset if request.replica_id >= 0 else partition.high_watermark
        offset, timestamp, epoch = -1, -1, _epoch_at(partition, end)
        offset = end
    elif ts == LATEST_TIERED:
        offset, timestamp, epoch = -1, -1, NO_EPOCH
    else:
        found = partition.log.offset_for_timestamp(ts)
        if found is None:
            offset, timestamp, epoch = -1, -1, NO_EPOCH
        else:
            offset, timestamp = found.offset, found.timestamp
            epoch = found.leader_epoch if found.leader_epoch is not None else NO_EPOCH
            if ts != MAX_TIMESTAMP and offset >= partition.high_watermark:
                offset, timestamp, epoch = -1, -1, NO_EPOCH
    result.error_code = ErrorCode.NONE
    if ctx.api_version == 0:
        result.old_style_offsets = [offset] if offset >= 0 else []
        return
    result.offset = offset
    result.timestamp = timestamp
    result.leader_epoch = epoch if ctx.api_version >= 4 else -1


def _epoch_at(partition: Partition, offset: int) -> int:
    cache = partition.log.leader_epoch_cache
    found = cache.epoch_for_offset(offset) if cache is not None else None
    return found if found is not None else partition.leader_epoch
