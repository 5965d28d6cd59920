"""Metadata, v0-v12.

Topics by name or (v12+) by id; null topics (v1+) or an empty list (v0) mean all topics. A v10
or v11 request naming a topic by id or with a null name is INVALID_REQUEST, as Kafka 3.9 answers.
Auto-creation follows `auto.create.topics.enable` and, from v4, the request's
`allow_auto_topic_creation`; the request that creates a topic is answered LEADER_NOT_AVAILABLE
without partitions and the next one lists them, as Kafka answers (its AutoTopicCreationManager
does not wait for leaders), even though the embedded broker has them at once. The topic is made
as `wirebroker.auto_topics` makes it: `__consumer_offsets` and `__transaction_state` as
FindCoordinator would (their coordinator's partitions, replication factor and configs), any
other with `num.partitions` and `default.replication.factor`; a topic that cannot be made is
answered with why (INVALID_REPLICATION_FACTOR with fewer live brokers). A missing topic
not created is UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION when its name cannot be a
topic's (Kafka's answer; a topic is never answered without error and without partitions).

Authorization, as Kafka: a topic the client may not DESCRIBE is left out of an all-topics
answer, and answered TOPIC_AUTHORIZATION_FAILED when named (without its id when named by name,
without its name when named by id); a missing topic is created only with CREATE on the cluster
or on the topic (else TOPIC_AUTHORIZATION_FAILED). The authorized-operations bit fields (v8+)
come from the ACLs; the cluster's is 0 without DESCRIBE on the cluster.

Brokers, partitions and the controller come from the metadata cache (`Broker.metadata()`): in a
cluster what the controller's UpdateMetadata said, embedded the broker itself; an answer costs
the partitions it tells (each leader judged once per topic, the cache's replica lists told
as they are, not copied), not the cluster's size, and a topic already told on the same
listener and version band costs nothing more: its answer, and its encoding by version, are kept
with the cache until the topic or the brokers change (an answer's topics array is the kept
encodings spliced, `protocol.spliced`; a topic with the caller's authorized operations is
encoded afresh). A partition whose
leader is not a live broker is LEADER_NOT_AVAILABLE with leader -1 (v0 lists only live replicas,
REPLICA_NOT_AVAILABLE when some are missing), as Kafka's ZkMetadataCache answers; brokers are
listed with their endpoint on the listener the request came in on (a leader without one is
LISTENER_NOT_FOUND from v6). In a cluster, auto-creation writes ZooKeeper and the topic is
LEADER_NOT_AVAILABLE until the controller elects its leaders, as in Kafka.

A cluster member that just (re)started knows nothing until the controller's first
UpdateMetadata: Metadata asked before it waits for it (up to `FIRST_UPDATE_WAIT_S`, then the
answer is what the cache holds), rather than answer no brokers and every topic unknown, which
makes librdkafka fail records during a fast rolling restart. Kafka narrows that window by
processing no request until its start-up is done (the controller's UpdateMetadata is usually
first in line); here the listener serves at once, because the controller's requests come in
through it too.
"""

from __future__ import annotations

from functools import partial

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.primitives import ZERO_UUID
from protocol.spliced import item_bytes
from wirebroker import auto_topics
from wirebroker.authorizer.acls import CLUSTER_NAME, AclOperation, ResourceType
from wirebroker.dispatch import Later, RequestContext, handles
from wirebroker.metadata_cache import MetadataCache
from wirebroker.topics import INTERNAL_TOPICS, validate_topic_name

Topic = MetadataResponse.MetadataResponseTopic
#: How long Metadata waits for a starting cluster member's first UpdateMetadata.
FIRST_UPDATE_WAIT_S = 10.0
#: This handler's keys in `MetadataCache.derived`: a told topic, and its encoding by version.
_DESCRIBED = "metadata"
_ENCODED = "metadata-encoded"


@handles(MetadataRequest, (0, 12))
async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse | Later:
    if ctx.api_version < 12 and request.topics:
        _check_named_by_name(request.topics, ctx.api_version)
    broker = ctx.broker
    if broker.cluster_mode and not broker.metadata_cache.populated.is_set():
        return Later(partial(_after_first_update, ctx, request))
    return await _answer(ctx, request)


def _check_named_by_name(topics: list[MetadataRequest.MetadataRequestTopic], version: int) -> None:
    """Before v12 a topic is asked by name only (v10 and v11 carry an id field that Kafka 3.9
    refuses to read): a null name or an id is INVALID_REQUEST for the whole request, each
    topic answered with it (a null name as "")."""
    for t in topics:
        if t.name is None:
            raise KafkaError(
                f"Topic name can not be null for version {version}",
                error_code=ErrorCode.INVALID_REQUEST,
            )
        if t.topic_id != ZERO_UUID:
            raise KafkaError(
                f"Topic IDs are not supported in requests for version {version}",
                error_code=ErrorCode.INVALID_REQUEST,
            )


async def _after_first_update(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    with trio.move_on_after(FIRST_UPDATE_WAIT_S):
        await ctx.broker.metadata_cache.populated.wait()
    return await _answer(ctx, request)


async def _answer(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    version = ctx.api_version
    all_topics = request.topics is None or (version == 0 and not request.topics)
    cache = broker.metadata()
    if all_topics:
        # Topics the client may not describe are left out without a word.
        names = cache.topics()
        described = ctx.authorized(
            AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_if_denied=False
        )
        topics = [_describe(ctx, cache, name) for name in names if name in described]
    else:
        topics = await _named(ctx, request)
    if version >= 8 and request.include_topic_authorized_operations:
        topics = [
            _with_operations(t, ctx.authorized_operations(ResourceType.TOPIC, t.name))
            if t.name is not None and t.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else t
            for t in topics
        ]
    brokers = []
    for b in cache.alive_brokers():
        endpoint = b.endpoint(ctx.listener_name)  # brokers without this listener are left out
        if endpoint is not None:
            brokers.append(
                MetadataResponse.MetadataResponseBroker(
                    node_id=b.id, host=endpoint.host, port=endpoint.port, rack=b.rack
                )
            )
    response = MetadataResponse(
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        topics=topics,
    )
    if version <= 10 and version >= 8 and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = (
            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.authorize_cluster(AclOperation.DESCRIBE)
            else 0
        )
    ctx.spliced = ("topics", [_encoded(ctx, cache, t) for t in topics])
    return response


async def _named(ctx: RequestContext, request: MetadataRequest) -> list[Topic]:
    """The topics a request names, as Kafka orders them: unknown ids, the topics described (or
    auto-created), those the client may not create, those it may not describe."""
    broker = ctx.broker
    cache = broker.metadata_cache  # refreshed by the caller
    allow_create = broker.config.get_bool("auto.create.topics.enable") and (
        ctx.api_version < 4 or request.allow_auto_topic_creation
    )
    unknown_ids: list[Topic] = []
    wanted: dict[str, bool] = {}  # name -> named by id
    for t in request.topics or []:
        if t.name is not None:
            wanted.setdefault(t.name, False)
            continue
        name = cache.topic_name(t.topic_id)
        if name is None:
            unknown_ids.append(
                Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id)
            )
        else:
            wanted.setdefault(name, True)
    described = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, wanted)
    creatable: set[str] = set()
    missing = [n for n in wanted if n in described and not cache.has_topic(n)]
    if allow_create and missing:
        creatable = (
            set(missing)
            if ctx.authorize_cluster(AclOperation.CREATE, log_if_denied=False)
            else ctx.authorized(AclOperation.CREATE, ResourceType.TOPIC, missing)
        )
    found, not_creatable, not_described = [], [], []
    for name, by_id in wanted.items():
        if name not in described:
            # Ids are not secret (and a name is not told for one); a name is not confirmed.
            not_described.append(
                Topic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    name=None if by_id else name,
                    topic_id=cache.topic_id(name) if by_id else ZERO_UUID,
                )
            )
        elif name in missing and allow_create and name not in creatable:
            not_creatable.append(
                Topic(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    name=name,
                    is_internal=name in INTERNAL_TOPICS,
                )
            )
        else:
            found.append(await _lookup(ctx, name, allow_create))
    return unknown_ids + found + not_creatable + not_described


async def _lookup(ctx: RequestContext, name: str, allow_create: bool) -> Topic:
    broker = ctx.broker
    cache = broker.metadata_cache
    if cache.has_topic(name):
        return _describe(ctx, cache, name)
    if not allow_create:
        return _not_created(name)
    # Answered LEADER_NOT_AVAILABLE once created, also when a cluster has it and this broker
    # does not know it yet, as Kafka answers with timeout 0.
    internal = name in INTERNAL_TOPICS
    try:
        await auto_topics.create(broker, name)
    except KafkaError as e:
        if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
            return Topic(error_code=e.error_code, name=name, is_internal=internal)
    return Topic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, is_internal=internal)


def _not_created(name: str) -> Topic:
    """A missing topic that is not auto-created: INVALID_TOPIC_EXCEPTION when its name could not
    be a topic's, else UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers."""
    try:
        validate_topic_name(name)
    except KafkaError as e:
        return Topic(error_code=e.error_code, name=name)
    return Topic(
        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        name=name,
        is_internal=name in INTERNAL_TOPICS,
    )


def _describe(ctx: RequestContext, cache: MetadataCache, name: str) -> Topic:
    """A known topic as told on the client's listener and version, built once and kept in the
    cache's `derived` until the topic or the brokers change (answers share it: never changed
    after it is made)."""
    kept = cache.derived.setdefault(name, {})
    key = _described_key(ctx)
    topic = kept.get(key)
    if topic is None:
        topic = kept[key] = _described(ctx, cache, name)
    assert isinstance(topic, Topic)
    return topic


def _described_key(ctx: RequestContext) -> tuple[str, str, bool, bool, bool]:
    version = ctx.api_version
    return (_DESCRIBED, ctx.listener_name, version == 0, version >= 6, version >= 10)


def _encoded(ctx: RequestContext, cache: MetadataCache, topic: Topic) -> bytes:
    """`topic` encoded at the request's version: kept beside it when it is the kept description
    (`_describe`), encoded afresh otherwise (errors, and the copies that carry this caller's
    authorized operations, which no other answer may tell)."""
    version = ctx.api_version
    kept = cache.derived.get(topic.name) if topic.name is not None else None
    if kept is None or kept.get(_described_key(ctx)) is not topic:
        return item_bytes(topic, version)
    key = (_ENCODED, ctx.listener_name, version)
    encoded = kept.get(key)
    if encoded is None:
        encoded = kept[key] = item_bytes(topic, version)
    assert isinstance(encoded, bytes)
    return encoded


def _with_operations(t: Topic, operations: int) -> Topic:
    """`t` with its authorized operations (v8+), a new answer: a described topic is shared."""
    return Topic(
        error_code=t.error_code,
        name=t.name,
        topic_id=t.topic_id,
        is_internal=t.is_internal,
        partitions=t.partitions,
        topic_authorized_operations=operations,
    )


def _described(ctx: RequestContext, cache: MetadataCache, name: str) -> Topic:
    v0 = ctx.api_version == 0
    told: dict[int, tuple[ErrorCode, int]] = {}  # leader -> (its error, the leader told)
    partitions = []
    for p in cache.partitions_of(name):
        leader_told = told.get(p.leader)
        if leader_told is None:
            leader_told = told[p.leader] = _leader(ctx, cache, p.leader)
        error, leader = leader_told
        # The cache's lists, not copies: it replaces a partition's, never changes them.
        replicas, isr = p.replicas, p.isr
        if v0:
            replicas = [r for r in replicas if cache.is_alive(r)]
            isr = [r for r in isr if cache.is_alive(r)]
            if error == ErrorCode.NONE and (
                len(replicas) < len(p.replicas) or len(isr) < len(p.isr)
            ):
                error = ErrorCode.REPLICA_NOT_AVAILABLE
        partitions.append(
            MetadataResponse.MetadataResponsePartition(
                error_code=error,
                partition_index=p.partition,
                leader_id=leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=replicas,
                isr_nodes=isr,
                offline_replicas=p.offline_replicas,
            )
        )
    return Topic(
        error_code=ErrorCode.NONE,
        name=name,
        topic_id=cache.topic_id(name) if ctx.api_version >= 10 else ZERO_UUID,
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
    )


def _leader(ctx: RequestContext, cache: MetadataCache, leader: int) -> tuple[ErrorCode, int]:
    """A partition's error and the leader it is told with: LEADER_NOT_AVAILABLE and -1 when its
    leader is not alive; when alive but without an endpoint on the client's listener,
    LISTENER_NOT_FOUND (v6+, else LEADER_NOT_AVAILABLE) and -1."""
    if not cache.is_alive(leader):
        return ErrorCode.LEADER_NOT_AVAILABLE, -1
    if cache.endpoint(leader, ctx.listener_name) is None:
        if ctx.api_version >= 6:
            return ErrorCode.LISTENER_NOT_FOUND, -1
        return ErrorCode.LEADER_NOT_AVAILABLE, -1
    return ErrorCode.NONE, leader
