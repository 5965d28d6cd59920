"""DeleteRecords v0-v2, OffsetForLeaderEpoch v0-v4, DescribeLogDirs v0-v4,
AlterReplicaLogDirs v0-v2.

DeleteRecords advances a partition's log start offset (-1 means the high watermark) and never
past the high watermark (OFFSET_OUT_OF_RANGE). OffsetForLeaderEpoch answers from the leader
epoch cache (KIP-101/KIP-279): the end offset of the requested epoch, or of the largest epoch
below it. DescribeLogDirs lists each log dir with its partitions' sizes, and a replica being
moved there (`IsFutureKey`, its size and how far it lags the current log). AlterReplicaLogDirs
moves replicas between this broker's log dirs (`wirebroker.log_dir_moves`).

Authorization, as Kafka: DeleteRecords needs DELETE on each topic, OffsetForLeaderEpoch
DESCRIBE on each topic unless the sender acts as a broker (refused topics come last, each
partition TOPIC_AUTHORIZATION_FAILED), DescribeLogDirs DESCRIBE on the cluster (else
CLUSTER_AUTHORIZATION_FAILED and no log dirs), AlterReplicaLogDirs ALTER on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for every partition).
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
)
from protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import RequestContext, handles
from wirebroker.log_dir_moves import alter_replica_log_dir

HIGH_WATERMARK = -1


@handles(DeleteRecordsRequest, (0, 2))
async def delete_records(
    ctx: RequestContext, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    deletable = ctx.authorized(
        AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    topics = []
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            result = DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1
            )
            results.append(result)
            partition = ctx.broker.partition(topic.name, p.partition_index)
            if topic.name not in deletable:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if not partition.is_leader(ctx.broker.node_id):
                result.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            offset = partition.high_watermark if p.offset == HIGH_WATERMARK else p.offset
            if offset < 0 or offset > partition.high_watermark:
                result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            try:
                result.low_watermark = partition.log.delete_records_before(offset)
            except KafkaError as e:
                result.error_code = e.error_code
        topics.append(
            DeleteRecordsResponse.DeleteRecordsTopicResult(name=topic.name, partitions=results)
        )
    return DeleteRecordsResponse(topics=topics)


@handles(OffsetForLeaderEpochRequest, (0, 4))
async def offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    # Brokers may ask about any topic; consumers (KIP-320) about those they may DESCRIBE.
    if ctx.authorize_cluster_action(log_if_denied=False):
        described = {t.topic for t in request.topics}
    else:
        described = ctx.authorized(
            AclOperation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics)
        )
    topics: list[OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult] = []
    refused: list[
        OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    ] = []  # listed after the others, as Kafka does
    for topic in request.topics:
        results = []
        for p in topic.partitions:
            result = OffsetForLeaderEpochResponse.EpochEndOffset(
                partition=p.partition, leader_epoch=-1, end_offset=-1
            )
            results.append(result)
            partition = ctx.broker.partition(topic.topic, p.partition)
            if topic.topic not in described:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif error := partition.leader_error(ctx.broker.node_id, p.current_leader_epoch):
                result.error_code = error
            else:
                epoch, end_offset = partition.end_offset_for_epoch(p.leader_epoch)
                result.leader_epoch = epoch
                result.end_offset = end_offset
        (topics if topic.topic in described else refused).append(
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
                topic=topic.topic, partitions=results
            )
        )
    return OffsetForLeaderEpochResponse(topics=topics + refused)


@handles(DescribeLogDirsRequest, (0, 4))
async def describe_log_dirs(
    ctx: RequestContext, request: DescribeLogDirsRequest
) -> DescribeLogDirsResponse:
    broker = ctx.broker
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, i) for t in request.topics for i in t.partitions}
    by_dir: dict[str, dict[str, list[DescribeLogDirsResponse.DescribeLogDirsPartition]]] = {
        str(d.resolve()): {} for d in broker.config.log_dirs()
    }
    for tp, partition in sorted(
        broker.partitions.items(), key=lambda kv: (kv[0].topic, kv[0].partition)
    ):
        if wanted is not None and (tp.topic, tp.partition) not in wanted:
            continue
        log_dir = str(partition.log.dir.parent.resolve())
        by_dir.setdefault(log_dir, {}).setdefault(tp.topic, []).append(
            DescribeLogDirsResponse.DescribeLogDirsPartition(
                partition_index=tp.partition,
                partition_size=partition.log.size_in_bytes,
                offset_lag=0,
                is_future_key=False,
            )
        )
        move = broker.log_manager.moves.get((tp.topic, tp.partition))
        if move is not None and move.future is not None:
            by_dir.setdefault(str(move.dest_dir.resolve()), {}).setdefault(tp.topic, []).append(
                DescribeLogDirsResponse.DescribeLogDirsPartition(
                    partition_index=tp.partition,
                    partition_size=move.size_in_bytes,
                    offset_lag=move.offset_lag,
                    is_future_key=True,
                )
            )
    results = []
    for log_dir, topics in by_dir.items():
        usage = _usage(log_dir)
        results.append(
            DescribeLogDirsResponse.DescribeLogDirsResult(
                error_code=ErrorCode.NONE,
                log_dir=log_dir,
                topics=[
                    DescribeLogDirsResponse.DescribeLogDirsTopic(name=name, partitions=parts)
                    for name, parts in sorted(topics.items())
                ],
                total_bytes=usage[0],
                usable_bytes=usage[1],
            )
        )
    return DescribeLogDirsResponse(error_code=ErrorCode.NONE, results=results)


@handles(AlterReplicaLogDirsRequest, (0, 2))
async def alter_replica_log_dirs(
    ctx: RequestContext, request: AlterReplicaLogDirsRequest
) -> AlterReplicaLogDirsResponse:
    allowed = ctx.authorize_cluster(AclOperation.ALTER)
    # One destination per partition, the last named (Kafka reads them into a map).
    wanted = {
        (topic.name, index): log_dir.path
        for log_dir in request.dirs
        for topic in log_dir.topics
        for index in topic.partitions
    }
    results: dict[str, list[AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult]] = {}
    for (topic, index), path in wanted.items():
        code = (
            alter_replica_log_dir(ctx.broker, topic, index, path)
            if allowed
            else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
        results.setdefault(topic, []).append(
            AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult(
                partition_index=index, error_code=code
            )
        )
    return AlterReplicaLogDirsResponse(
        results=[
            AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult(
                topic_name=name, partitions=partitions
            )
            for name, partitions in results.items()
        ]
    )


def _usage(path: str) -> tuple[int, int]:
    import os

    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
