"""OffsetCommit, OffsetFetch and OffsetDelete — every version Kafka 3.9 accepts.

- OffsetCommit v0-9: v0 commits without a generation (an "admin" commit, allowed only while the
  group is Empty); v1 carries a per-partition commit timestamp (-1: now); v2-v4 carry a
  retention time: unless -1, the offsets expire that long after the commit (the sum wrapping
  as Kafka's Long: a huge or negative retention expires them at the next check), instead of by
  `offsets.retention.minutes` (see `Group.expire_offsets`), as Kafka; v6+ leader epochs; v7+ static members. Metadata is stored
  verbatim (null is stored as ""), up to `offset.metadata.max.bytes`. Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION.
- OffsetFetch v0-9: v0 reads the same store (Kafka v0 read ZooKeeper); v2+ `topics` null means
  every committed partition; v7+ `require_stable` answers UNSTABLE_OFFSET_COMMIT for a
  partition whose offset is not settled: an open transaction committed one (TxnOffsetCommit),
  or a commit of it is still being written (Kafka's pending offset commits); v8+ batches groups. v9's member id and
  epoch belong to the consumer (KIP-848) protocol and are ignored for classic groups.
- OffsetDelete v0: refused with GROUP_SUBSCRIBED_TO_TOPIC per partition for topics the group's
  consumers still subscribe to, as Kafka does.

In a cluster a group this broker does not coordinate gets NOT_COORDINATOR (per partition in
OffsetCommit, per group in OffsetFetch v8+, top-level in OffsetFetch v2-7 and OffsetDelete, per
partition in OffsetFetch v0-1), partitions are known from the metadata cache, and a commit is
answered once replicated (see `wirebroker.group.metadata_manager`).

Authorization, as Kafka: OffsetCommit needs READ on the group (else GROUP_AUTHORIZATION_FAILED
in every partition) and READ on each topic (else TOPIC_AUTHORIZATION_FAILED in its partitions);
OffsetFetch DESCRIBE on the group (v0: in every partition, v1: an empty answer, v2-7 at the top,
v8+ per group) and DESCRIBE on each topic (a topic asked for is TOPIC_AUTHORIZATION_FAILED in
its partitions; an all-partitions fetch leaves it out); OffsetDelete DELETE on the group (at the
top) and READ on each topic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from protocol.errors import ErrorCode
from protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import RequestContext, handles
from wirebroker.group.state import CommittedOffset

NO_OFFSET = -1


def _expire_timestamp(now: int, retention: int) -> int:
    """When a commit with `retention` (v2-v4; -1 the broker's) expires: -1 for the broker's,
    else now + retention as Kafka's Long sum, which wraps (a retention of Long.MAX_VALUE
    expires at once)."""
    if retention == -1:
        return -1
    return (now + retention + 2**63) % 2**64 - 2**63


@handles(OffsetCommitRequest, (0, 9))
async def offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
    now = ctx.broker.now_ms()
    retention = request.retention_time_ms if 2 <= ctx.api_version <= 4 else -1

    def committed(p: OffsetCommitRequest.OffsetCommitRequestPartition) -> CommittedOffset:
        timestamp = p.commit_timestamp if ctx.api_version == 1 else -1
        return CommittedOffset(
            p.committed_offset,
            p.committed_leader_epoch,
            p.committed_metadata or "",
            now if timestamp < 0 else timestamp,
            _expire_timestamp(now, retention),
        )

    results, wanted = sort_commits(ctx, request.topics, committed)
    error, codes = ErrorCode.NONE, list[ErrorCode]()
    if not request.group_id:
        error = ErrorCode.INVALID_GROUP_ID
    elif wanted:
        error, codes = await ctx.broker.groups.group_manager.commit(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            request.generation_id_or_member_epoch,
            wanted,
        )
    for (topic_name, index, _), code in zip(wanted, codes or [error] * len(wanted), strict=True):
        results[(topic_name, index)] = code if error is ErrorCode.NONE else error
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=results[(topic.name, p.partition_index)],
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def sort_commits(
    ctx: RequestContext, topics: Sequence[Any], committed: Callable[[Any], CommittedOffset]
) -> tuple[dict[tuple[str, int], ErrorCode], list[tuple[str, int, CommittedOffset]]]:
    """The partitions of an (Txn)OffsetCommit request's `topics` that may not be committed, each
    with its error (a topic not READable, an unknown partition), and those that may, each with
    its offset (`committed` of the request's partition)."""
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.name for t in topics))
    refused: dict[tuple[str, int], ErrorCode] = {}
    wanted: list[tuple[str, int, CommittedOffset]] = []
    for topic in topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if topic.name not in readable:
                refused[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not partition_known(ctx, *key):
                refused[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append((topic.name, p.partition_index, committed(p)))
    return refused, wanted


def partition_known(ctx: RequestContext, topic: str, index: int) -> bool:
    """Whether the partition exists: in a cluster, as the metadata cache knows it (it may be
    hosted elsewhere); embedded, as a partition of this broker."""
    broker = ctx.broker
    if broker.cluster_mode:
        return broker.metadata_cache.partition(topic, index) is not None
    return broker.partition(topic, index) is not None


@handles(OffsetFetchRequest, (0, 9))
async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    coordinator_error = ctx.broker.groups.group_manager.coordinator_error
    stable = ctx.api_version >= 7 and request.require_stable
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            wanted = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id):
                error = ErrorCode.GROUP_AUTHORIZATION_FAILED
            else:
                error = coordinator_error(g.group_id)
            groups.append(
                OffsetFetchResponse.OffsetFetchResponseGroup(
                    group_id=g.group_id,
                    error_code=error,
                    topics=[
                        OffsetFetchResponse.OffsetFetchResponseTopics(
                            name=name,
                            partitions=[
                                OffsetFetchResponse.OffsetFetchResponsePartitions(
                                    partition_index=index,
                                    committed_offset=offset,
                                    committed_leader_epoch=epoch,
                                    metadata=metadata,
                                    error_code=code,
                                )
                                for index, offset, epoch, metadata, code in partitions
                            ],
                        )
                        for name, partitions in _described(ctx, g.group_id, wanted, stable)
                        if error == ErrorCode.NONE
                    ],
                )
            )
        return OffsetFetchResponse(groups=groups)
    wanted = (
        None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
    )
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
        if ctx.api_version == 1:  # Kafka's answer has no error to carry it, nor partitions
            return OffsetFetchResponse(topics=[])
        return _fetch_error(ctx.api_version, ErrorCode.GROUP_AUTHORIZATION_FAILED, wanted)
    error = coordinator_error(request.group_id)
    if error != ErrorCode.NONE:
        return _fetch_error(ctx.api_version, error, wanted)
    return OffsetFetchResponse(
        error_code=ErrorCode.NONE,
        topics=[
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name=name,
                partitions=[
                    OffsetFetchResponse.OffsetFetchResponsePartition(
                        partition_index=index,
                        committed_offset=offset,
                        committed_leader_epoch=epoch,
                        metadata=metadata,
                        error_code=code,
                    )
                    for index, offset, epoch, metadata, code in partitions
                ],
            )
            for name, partitions in _described(ctx, request.group_id, wanted, stable)
        ],
    )


def _fetch_error(
    version: int, error: ErrorCode, wanted: list[tuple[str, list[int]]] | None
) -> OffsetFetchResponse:
    """Kafka's error answer: v2+ carries it at the top; v0-1 have no top-level error, so every
    requested partition carries it (with offset -1)."""
    if version >= 2:
        return OffsetFetchResponse(error_code=error, topics=[])
    return OffsetFetchResponse(
        topics=[
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name=name,
                partitions=[
                    OffsetFetchResponse.OffsetFetchResponsePartition(
                        partition_index=index,
                        committed_offset=NO_OFFSET,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=error,
                    )
                    for index in indexes
                ],
            )
            for name, indexes in wanted or []
        ]
    )


Row = tuple[int, int, int, str, ErrorCode]  # partition, offset, leader epoch, metadata, error


def _described(
    ctx: RequestContext,
    group_id: str,
    wanted: list[tuple[str, list[int]]] | None,
    require_stable: bool,
) -> list[tuple[str, list[Row]]]:
    """`_lookup` as the client may see it (Kafka): every committed partition leaves out the
    topics it may not DESCRIBE; a topic asked for by name is answered TOPIC_AUTHORIZATION_FAILED
    in each partition (offset -1), after the others."""
    if wanted is None:
        found = list(_lookup(ctx, group_id, None, require_stable))
        described = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in found))
        return [(t, rows) for t, rows in found if t in described]
    described = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in wanted))
    allowed = [(t, indexes) for t, indexes in wanted if t in described]
    out = list(_lookup(ctx, group_id, allowed, require_stable))
    out += [
        (t, [(i, NO_OFFSET, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED) for i in indexes])
        for t, indexes in wanted
        if t not in described
    ]
    return out


def _lookup(
    ctx: RequestContext,
    group_id: str,
    wanted: list[tuple[str, list[int]]] | None,
    require_stable: bool,
) -> Iterable[tuple[str, list[Row]]]:
    """(topic, rows) for the requested partitions, or for every committed one if `wanted` is
    None; a partition without a commit answers offset -1 and metadata "". With
    `require_stable`, a partition whose offset is not settled (`GroupMetadataManager.unstable`)
    answers UNSTABLE_OFFSET_COMMIT (offset -1), as Kafka."""
    groups = ctx.broker.groups.group_manager
    offsets = groups.fetch(group_id)

    def row(topic: str, index: int) -> Row:
        if require_stable and groups.unstable(group_id, (topic, index)):
            return (index, NO_OFFSET, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT)
        found = offsets.get((topic, index))
        if found is None:
            return (index, NO_OFFSET, -1, "", ErrorCode.NONE)
        return (index, found.offset, found.leader_epoch, found.metadata, ErrorCode.NONE)

    if wanted is None:
        by_topic: dict[str, list[Row]] = {}
        for topic, index in sorted(offsets):
            by_topic.setdefault(topic, []).append(row(topic, index))
        return by_topic.items()
    return [(topic, [row(topic, index) for index in indexes]) for topic, indexes in wanted]


@handles(OffsetDeleteRequest, (0, 0))
async def offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = ctx.authorized(
        AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    partitions = [
        (t.name, p.partition_index)
        for t in request.topics
        if t.name in readable
        for p in t.partitions
    ]
    error, codes = ctx.broker.groups.group_manager.delete_offsets(request.group_id, partitions)
    by_key = dict(zip(partitions, codes, strict=True)) if error is ErrorCode.NONE else {}
    for t in request.topics:
        if t.name not in readable:
            by_key.update(
                {
                    (t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    for p in t.partitions
                }
            )
    return OffsetDeleteResponse(
        error_code=error,
        topics=[
            OffsetDeleteResponse.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=[
                    OffsetDeleteResponse.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index,
                        error_code=by_key.get((t.name, p.partition_index), error),
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
