"""CreateTopics v0-v7, DeleteTopics v0-v6, CreatePartitions v0-v3.

Per-topic failures are answered per topic with Kafka's codes (TOPIC_ALREADY_EXISTS,
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG, INVALID_TOPIC_EXCEPTION,
UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID) and a message from v1 (CreateTopics) or v5
(DeleteTopics). Differences from Kafka: manual replica assignments are accepted only when they
name this broker; `timeout_ms` never expires. The embedded broker answers once the new
partitions' logs exist (made in one worker-thread call, `Broker.create_logs`; a log that cannot
be made is KAFKA_STORAGE_ERROR for its topic) and `topics.json` holds the change (written off
the event loop, `wirebroker.topics`), as Kafka answers once ZooKeeper does; if that write fails (a full disk) the topics of the
request are answered UNKNOWN_SERVER_ERROR, as Kafka answers a failed ZooKeeper write, but unlike
Kafka the change stays in effect (the broker writes the file again later).

The partitions created or deleted count against the client's `controller_mutation_rate`
quota (`wirebroker.quotas.client`), as in Kafka: from CreateTopics v6, DeleteTopics v5 and
CreatePartitions v3 the quota is strict (a topic asked for once it is used up is answered
THROTTLING_QUOTA_EXCEEDED), before that it only throttles; the answer carries the time the
client must wait.

In a cluster (`zookeeper.connect`) the same requests write ZooKeeper as Kafka's AdminZkClient
does (`ClusterMember.create_topic`, `delete_topic`, `add_partitions`): replicas are assigned
over the live brokers (rack-aware when they have racks), the controller makes the partitions,
and the answer waits up to `timeout_ms` for it (REQUEST_TIMED_OUT past that, as in Kafka).

Authorization, as Kafka: CreateTopics needs CREATE on the cluster or the topic, and tells a
created topic's configs only with DESCRIBE_CONFIGS on it; DeleteTopics needs DELETE on the topic
(and DESCRIBE when named by id); CreatePartitions ALTER on the topic. A refused topic is
TOPIC_AUTHORIZATION_FAILED before it is looked up.
"""

from __future__ import annotations

import uuid
from collections import Counter

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from protocol.primitives import ZERO_UUID
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import RequestContext, handles
from wirebroker.quotas import throttle
from wirebroker.quotas.client import MutationQuota, session_names
from wirebroker.topic_configs import describe_topic_configs
from wirebroker.topics import INTERNAL_TOPICS, TopicRecord

#: The versions from which the controller mutation quota is strict (Kafka's KafkaApis).
CREATE_TOPICS_STRICT_SINCE, DELETE_TOPICS_STRICT_SINCE, CREATE_PARTITIONS_STRICT_SINCE = 6, 5, 3
_Topic = CreateTopicsRequest.CreatableTopic
_Result = CreateTopicsResponse.CreatableTopicResult


@handles(CreateTopicsRequest, (0, 7))
async def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    if ctx.broker.cluster is not None:
        return await _create_topics_in_zk(ctx, request)
    broker = ctx.broker
    quota = _mutation_quota(ctx, CREATE_TOPICS_STRICT_SINCE)
    results, to_create, describable = _create_results(ctx, request)
    created = []
    for topic, result in to_create:
        try:
            partitions, replication = _sizes(ctx, topic)
            configs = {c.name: c.value for c in topic.configs if c.value is not None}
            if quota.measured and not request.validate_only:
                # Valid first: only a creation that happens takes from the quota.
                broker.create_topic(
                    topic.name, partitions, replication, configs, validate_only=True
                )
                quota.record(partitions)
            record = broker.register_topic(
                topic.name, partitions, replication, configs, validate_only=request.validate_only
            )
        except KafkaError as e:
            _answer_failed(result, e)
            continue
        created.append((result, record))
        if topic.name in describable:
            _answer_created(ctx, result, record, request.validate_only)
    if created and not request.validate_only:
        # Answered once the registry holds the topics (a failed write leaves none) and their
        # partitions' logs are made off the loop.
        try:
            failed = await broker.create_when_written([record for _result, record in created])
        except KafkaError as e:
            failed = {record.name: e for _result, record in created}
        for result, record in created:
            if record.name in failed:
                _answer_failed(result, failed[record.name])
    _mutation_throttle(ctx, quota)
    return CreateTopicsResponse(topics=results)


def _mutation_quota(ctx: RequestContext, strict_since: int) -> MutationQuota:
    """This request's controller mutation quota: strict from `strict_since` on."""
    user, client_id = session_names(ctx.principal, ctx.client_id)
    return ctx.broker.quotas.controller_mutation.quota_for(
        user, client_id, ctx.api_version >= strict_since, ctx.broker.clock
    )


def _mutation_throttle(ctx: RequestContext, quota: MutationQuota) -> None:
    throttle.throttle(ctx, ctx.broker.quotas.controller_mutation, quota.throttle_time_ms())


def _create_results(
    ctx: RequestContext, request: CreateTopicsRequest
) -> tuple[list[_Result], list[tuple[_Topic, _Result]], set[str]]:
    """One result per requested topic, the (topic, result) pairs still to create, and the
    topics whose configs the client may see. A name listed more than once is answered
    INVALID_REQUEST each time and not created; as Kafka, a topic needs CREATE on the cluster or
    on itself (else TOPIC_AUTHORIZATION_FAILED), and its configs, partition count and
    replication factor are told only with DESCRIBE_CONFIGS on it (else its
    `topic_config_error_code` is TOPIC_AUTHORIZATION_FAILED)."""
    counts = Counter(t.name for t in request.topics)
    creatable = (
        set(counts)
        if ctx.authorize_cluster(AclOperation.CREATE, log_if_denied=False)
        else ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, counts)
    )
    describable = ctx.authorized(
        AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, counts, log_if_denied=False
    )
    results = []
    to_create = []
    for topic in request.topics:
        # Kafka answers a created topic with a null error message (the codec's default is "").
        result = _Result(name=topic.name, error_message=None)
        results.append(result)
        if topic.name not in describable:
            result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if counts[topic.name] > 1:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"topic {topic.name} is listed more than once"
        elif topic.name not in creatable:
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "Authorization failed."
        else:
            to_create.append((topic, result))
    return results, to_create, describable


def _default_sizes(ctx: RequestContext, topic: _Topic) -> tuple[int, int]:
    """The requested partition count and replication factor, the broker's defaults for -1."""
    config = ctx.broker.config
    partitions = topic.num_partitions
    replication = topic.replication_factor
    if partitions == -1:
        partitions = config.get_int("num.partitions")
    if replication == -1:
        replication = config.get_int("default.replication.factor")
    return partitions, replication


def _answer_failed(result: _Result, e: KafkaError) -> None:
    result.error_code = e.error_code
    result.error_message = str(e)
    result.num_partitions = -1
    result.replication_factor = -1
    result.topic_config_error_code = ErrorCode.NONE  # as Kafka, once the creation failed


def _answer_created(
    ctx: RequestContext, result: _Result, record: TopicRecord, validate_only: bool
) -> None:
    """Fill a created (or validated) topic's result; its configs from v5."""
    result.topic_id = record.topic_id if not validate_only else ZERO_UUID
    result.num_partitions = record.partitions
    result.replication_factor = record.replication_factor
    if ctx.api_version >= 5:
        result.configs = [
            CreateTopicsResponse.CreatableTopicConfigs(
                name=c.name,
                value=c.value,
                read_only=c.read_only,
                config_source=c.source,
                is_sensitive=c.is_sensitive,
            )
            for c in describe_topic_configs(ctx.broker, record)
        ]


def _sizes(ctx: RequestContext, topic: _Topic) -> tuple[int, int]:
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise KafkaError(
                "give either replica assignments or num_partitions and replication_factor, not both",
                error_code=ErrorCode.INVALID_REQUEST,
            )
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            raise KafkaError(
                "replica assignment partitions must be 0..n-1",
                error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        for a in topic.assignments:
            if a.broker_ids != [ctx.broker.node_id]:
                raise KafkaError(
                    f"replica assignment {a.broker_ids} names brokers other than {ctx.broker.node_id}",
                    error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                )
        return len(indexes), 1
    return _default_sizes(ctx, topic)


@handles(DeleteTopicsRequest, (0, 6))
async def delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if ctx.broker.cluster is not None:
        return await _delete_topics_in_zk(ctx, request)
    broker = ctx.broker
    quota = _mutation_quota(ctx, DELETE_TOPICS_STRICT_SINCE)
    responses = []
    deleted = []
    for name, topic_id in _deletion_wanted(ctx, request):
        result = DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=topic_id)
        responses.append(result)
        if name is None:
            record = broker.topics.by_id.get(topic_id)
            if record is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                result.error_message = f"no topic has id {topic_id}"
                continue
            name = result.name = record.name
        if _deletion_refused(ctx, name, result, topic_id != ZERO_UUID):
            continue
        try:
            existing = broker.topics.get(name)
            if existing is not None:
                quota.record(existing.partitions)
            record = broker.delete_topic(name)
            result.topic_id = record.topic_id if ctx.api_version >= 6 else ZERO_UUID
            deleted.append(result)
        except KafkaError as e:
            _answer_not_deleted(result, e)
    if deleted:
        try:
            await broker.topics.written()
        except KafkaError as e:
            for result in deleted:
                _answer_not_deleted(result, e)
    _mutation_throttle(ctx, quota)
    return DeleteTopicsResponse(responses=responses)


def _answer_not_deleted(result: DeleteTopicsResponse.DeletableTopicResult, e: KafkaError) -> None:
    result.error_code = e.error_code
    # Kafka answers an unknown topic with the code alone (message null)
    unknown = e.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    result.error_message = None if unknown else str(e)


def _deletion_wanted(
    ctx: RequestContext, request: DeleteTopicsRequest
) -> list[tuple[str | None, uuid.UUID]]:
    """(name, id) per topic to delete: by name or id from v6, by name alone before."""
    if ctx.api_version >= 6:
        return [(t.name, t.topic_id) for t in request.topics]
    return [(name, ZERO_UUID) for name in request.topic_names]


def _deletion_refused(
    ctx: RequestContext, name: str, result: DeleteTopicsResponse.DeletableTopicResult, by_id: bool
) -> bool:
    """Answer `result` and return True if this broker must not delete `name` at all. As Kafka,
    the client needs DELETE on the topic, and DESCRIBE too when it named the topic by id (else
    the name is not told)."""
    if not ctx.broker.config.get_bool("delete.topic.enable"):
        result.error_code = ErrorCode.TOPIC_DELETION_DISABLED
        result.error_message = "delete.topic.enable is false"
        return True
    described = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
    if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name) or (
        by_id and not described
    ):
        result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        result.error_message = None
        if by_id and not described:
            result.name = None
        return True
    if name in INTERNAL_TOPICS:
        result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
        result.error_message = f"{name} is an internal topic"
        return True
    return False


@handles(CreatePartitionsRequest, (0, 3))
async def create_partitions(
    ctx: RequestContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    quota = _mutation_quota(ctx, CREATE_PARTITIONS_STRICT_SINCE)
    alterable = ctx.authorized(
        AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    results = []
    for topic in request.topics:
        result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=topic.name)
        results.append(result)
        if topic.name not in alterable:
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            result.error_message = "The topic authorization is failed."
            continue
        try:
            if quota.measured and not request.validate_only:
                # Valid first: only partitions that are created take from the quota.
                current = await _add_partitions(ctx, topic, validate_only=True)
                quota.record(topic.count - current)
            await _add_partitions(
                ctx, topic, request.validate_only, timeout_s=request.timeout_ms / 1000
            )
        except KafkaError as e:
            result.error_code = e.error_code
            result.error_message = str(e)
    _mutation_throttle(ctx, quota)
    return CreatePartitionsResponse(results=results)


async def _add_partitions(
    ctx: RequestContext,
    topic: CreatePartitionsRequest.CreatePartitionsTopic,
    validate_only: bool,
    timeout_s: float = 0,
) -> int:
    """Add (or check the addition of) partitions; the partition count before. In a cluster, wait
    up to ``timeout_s`` for them to be led."""
    cluster = ctx.broker.cluster
    if cluster is None:
        record = ctx.broker.topics.get(topic.name)
        current = record.partitions if record is not None else 0
        record = ctx.broker.add_partitions(topic.name, topic.count, validate_only=validate_only)
        if record is not None:
            failed = await ctx.broker.create_when_written([record])
            if failed:
                raise failed[topic.name]
        return current
    assignment = await cluster.topic_assignment(topic.name)
    await cluster.add_partitions(
        topic.name,
        topic.count,
        [list(a.broker_ids) for a in topic.assignments] if topic.assignments is not None else None,
        validate_only=validate_only,
    )
    # as Kafka's ZkAdminManager and CreateTopics here: answered once the new partitions have
    # leaders in this broker's metadata, within the request's timeout
    ready = validate_only or timeout_s <= 0
    if not ready and not await cluster.wait_topic_ready(topic.name, topic.count, timeout_s):
        raise KafkaError(
            "the controller did not create the partitions in time",
            error_code=ErrorCode.REQUEST_TIMED_OUT,
        )
    return len(assignment.partitions) if assignment is not None else 0


# cluster mode -----------------------------------------------------------------------------
async def _create_topics_in_zk(
    ctx: RequestContext, request: CreateTopicsRequest
) -> CreateTopicsResponse:
    cluster = ctx.broker.cluster
    assert cluster is not None
    quota = _mutation_quota(ctx, CREATE_TOPICS_STRICT_SINCE)
    results, to_create, describable = _create_results(ctx, request)
    created: list[tuple[_Result, int]] = []
    for topic, result in to_create:
        try:
            assignment = None
            if topic.assignments:
                if topic.num_partitions != -1 or topic.replication_factor != -1:
                    raise KafkaError(
                        "Both numPartitions or replicationFactor and replicasAssignments were set. "
                        "Both cannot be used at the same time.",
                        error_code=ErrorCode.INVALID_REQUEST,
                    )
                assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
            partitions, replication = _default_sizes(ctx, topic)
            configs = {c.name: c.value for c in topic.configs if c.value is not None}
            if quota.measured and not request.validate_only:
                valid = await cluster.create_topic(
                    topic.name, partitions, replication, configs, assignment, validate_only=True
                )
                quota.record(valid.partitions)
            done = await cluster.create_topic(
                topic.name,
                partitions,
                replication,
                configs,
                assignment,
                validate_only=request.validate_only,
            )
        except KafkaError as e:
            _answer_failed(result, e)
            continue
        record = TopicRecord(
            topic.name, done.topic_id, done.partitions, done.replication_factor, done.configs
        )
        if topic.name in describable:
            _answer_created(ctx, result, record, request.validate_only)
        if not request.validate_only:
            created.append((result, done.partitions))
    if request.timeout_ms > 0:
        timeout_s = request.timeout_ms / 1000
        for result, partitions in created:
            assert result.name is not None
            if not await cluster.wait_topic_ready(result.name, partitions, timeout_s):
                result.error_code = ErrorCode.REQUEST_TIMED_OUT
                result.error_message = "the controller did not create the partitions in time"
    _mutation_throttle(ctx, quota)
    return CreateTopicsResponse(topics=results)


async def _delete_topics_in_zk(
    ctx: RequestContext, request: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    cluster = ctx.broker.cluster
    assert cluster is not None
    quota = _mutation_quota(ctx, DELETE_TOPICS_STRICT_SINCE)
    responses = []
    marked: list[DeleteTopicsResponse.DeletableTopicResult] = []
    for name, topic_id in _deletion_wanted(ctx, request):
        result = DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=topic_id)
        responses.append(result)
        if name is None:
            for candidate in await cluster.topic_names():
                assignment = await cluster.topic_assignment(candidate)
                if assignment is not None and assignment.topic_id == topic_id:
                    name = result.name = candidate
                    break
            else:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                result.error_message = f"no topic has id {topic_id}"
                continue
        if _deletion_refused(ctx, name, result, topic_id != ZERO_UUID):
            continue
        try:
            if quota.measured:
                assignment = await cluster.topic_assignment(name)
                if assignment is not None:
                    quota.record(len(assignment.partitions))
            found_id = await cluster.delete_topic(name)
        except KafkaError as e:
            result.error_code = e.error_code
            unknown = e.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = None if unknown else str(e)
            continue
        result.topic_id = found_id if ctx.api_version >= 6 else ZERO_UUID
        marked.append(result)
    if request.timeout_ms > 0:
        with trio.move_on_after(request.timeout_ms / 1000):
            for result in marked:
                assert result.name is not None
                await cluster.wait_topic_deleted(result.name, request.timeout_ms / 1000)
        for result in marked:
            assert result.name is not None
            if await cluster.topic_assignment(result.name) is not None:
                result.error_code = ErrorCode.REQUEST_TIMED_OUT
                result.error_message = "the controller did not delete the topic in time"
    _mutation_throttle(ctx, quota)
    return DeleteTopicsResponse(responses=responses)
