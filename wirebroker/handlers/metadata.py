"""Metadata, v0-v12.

Topics by name or (v10+) by id; null topics (v1+) or an empty list (v0) mean all topics.
Auto-creation follows `auto.create.topics.enable` and, from v4, the request's
`allow_auto_topic_creation`. Differences from Kafka: a topic created by this request is
answered as ready (error NONE with its partitions) instead of LEADER_NOT_AVAILABLE, because
leaders are assigned synchronously here; authorized operations are all those the resource type
supports, as Kafka reports them without an authorizer. In a cluster, auto-creation writes
ZooKeeper and answers LEADER_NOT_AVAILABLE, as Kafka does, and `controller_id` is the broker
holding `/controller`.
"""

from __future__ import annotations

import uuid

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from wirebroker import authorized_operations as ops
from wirebroker.dispatch import RequestContext, handles
from wirebroker.topics import INTERNAL_TOPICS, TopicRecord

Topic = MetadataResponse.MetadataResponseTopic
ZERO_UUID = uuid.UUID(int=0)


@handles(MetadataRequest, (0, 12))
async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    version = ctx.api_version
    all_topics = request.topics is None or (version == 0 and not request.topics)
    topics: list[Topic] = []
    if all_topics:
        topics = [_describe(ctx, r, request) for _, r in sorted(broker.topics.topics.items())]
    else:
        allow_create = broker.config.get_bool("auto.create.topics.enable") and (
            version < 4 or request.allow_auto_topic_creation
        )
        for wanted in request.topics or []:
            topics.append(await _lookup(ctx, wanted, request, allow_create))
    response = MetadataResponse(
        brokers=_brokers(ctx),
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        topics=topics,
    )
    if version <= 10 and version >= 8 and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = ops.CLUSTER
    return response


def _brokers(ctx: RequestContext) -> list[MetadataResponse.MetadataResponseBroker]:
    broker = ctx.broker
    if broker.cluster is None:
        return [
            MetadataResponse.MetadataResponseBroker(
                node_id=broker.node_id, host=listener.host, port=listener.port, rack=None
            )
            for listener in broker.advertised[:1]
        ]
    # Cluster mode: the registered brokers, at their endpoint for this request's listener (the
    # replica side's metadata cache, fed by UpdateMetadata, is the long-term source).
    out = []
    for broker_id, registration in sorted(broker.cluster.registrations.items()):
        try:
            ep = registration.endpoint(ctx.listener_name)
        except KeyError:
            continue
        out.append(
            MetadataResponse.MetadataResponseBroker(
                node_id=broker_id, host=ep.host, port=ep.port, rack=registration.rack
            )
        )
    return out


async def _lookup(
    ctx: RequestContext,
    wanted: MetadataRequest.MetadataRequestTopic,
    request: MetadataRequest,
    allow_create: bool,
) -> Topic:
    broker = ctx.broker
    if wanted.name is None:
        record = broker.topics.by_id.get(wanted.topic_id)
        if record is None:
            return Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id)
        return _describe(ctx, record, request)
    record = broker.topics.get(wanted.name)
    if record is None:
        if not allow_create or wanted.name in INTERNAL_TOPICS:
            return Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=wanted.name)
        if broker.cluster is not None:
            return await _auto_create_in_zk(ctx, wanted.name)
        try:
            record = broker.create_topic(
                wanted.name,
                broker.config.get_int("num.partitions"),
                broker.config.get_int("default.replication.factor"),
                {},
            )
        except KafkaError as e:
            return Topic(error_code=e.error_code, name=wanted.name)
    return _describe(ctx, record, request)


def _describe(ctx: RequestContext, record: TopicRecord, request: MetadataRequest) -> Topic:
    broker = ctx.broker
    partitions = []
    for index in range(record.partitions):
        p = broker.partition(record.name, index)
        if p is None:
            continue
        partitions.append(
            MetadataResponse.MetadataResponsePartition(
                error_code=ErrorCode.NONE,
                partition_index=index,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=list(p.isr),
                offline_replicas=[],
            )
        )
    return Topic(
        error_code=ErrorCode.NONE,
        name=record.name,
        topic_id=record.topic_id if ctx.api_version >= 10 else ZERO_UUID,
        is_internal=record.name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=(
            ops.TOPIC if request.include_topic_authorized_operations else ops.NOT_REQUESTED
        ),
    )


async def _auto_create_in_zk(ctx: RequestContext, name: str) -> Topic:
    """Cluster mode: create the topic in ZooKeeper; it is answered LEADER_NOT_AVAILABLE (also when
    it already exists but this broker does not know it yet), as Kafka answers with timeout 0."""
    broker = ctx.broker
    assert broker.cluster is not None
    try:
        await broker.cluster.create_topic(
            name,
            broker.config.get_int("num.partitions"),
            broker.config.get_int("default.replication.factor"),
            {},
        )
    except KafkaError as e:
        if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
            return Topic(error_code=e.error_code, name=name, is_internal=name in INTERNAL_TOPICS)
    return Topic(
        error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, is_internal=name in INTERNAL_TOPICS
    )
