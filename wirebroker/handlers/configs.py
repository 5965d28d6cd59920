"""DescribeConfigs v0-v4, AlterConfigs v0-v2, IncrementalAlterConfigs v0-v1.

Topic configs are reported as Kafka lists them: every topic-level key with its value and
source (a topic override, the broker's server.properties synonym, or Kafka's default), with
synonyms (v1+) and types and documentation (v3+). Broker configs list the keys of
`wirebroker.config`. Differences from Kafka: broker configs are static (altering one answers
INVALID_REQUEST), and BROKER_LOGGER resources are not supported. In a cluster, altering a
topic's configs writes `/config/topics/<t>` and a `/config/changes` notification, which every
broker applies to its logs.

Authorization, as Kafka: describing a topic's configs needs DESCRIBE_CONFIGS on the topic,
altering them ALTER_CONFIGS (TOPIC_AUTHORIZATION_FAILED); a broker's (or broker logger's) needs
the same operation on the cluster (CLUSTER_AUTHORIZATION_FAILED). DescribeConfigs lists the
refused resources last.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wirebroker.authorizer.acls import AUTHORIZATION_MESSAGES, AclOperation, ResourceType
from wirebroker.config import BROKER_KEYS
from wirebroker.dispatch import RequestContext, handles
from wirebroker.topic_configs import (
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_KEYS,
    TYPE_CODES,
    ConfigValue,
    describe_topic_configs,
    effective_values,
)

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8

#: Broker synonyms Kafka gives no default (their value comes from a coarser key, e.g.
#: log.retention.ms from log.retention.hours), so Kafka lists no DEFAULT_CONFIG synonym for them.
BROKER_KEYS_WITHOUT_DEFAULT = frozenset(
    {"log.retention.ms", "log.roll.ms", "log.roll.jitter.ms", "log.flush.interval.ms"}
)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


@handles(DescribeConfigsRequest, (0, 4))
async def describe_configs(
    ctx: RequestContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    results = []
    refused = []  # listed after the others, as Kafka does
    for resource in request.resources:
        result = Result(resource_type=resource.resource_type, resource_name=resource.resource_name)
        code = _refused(
            ctx, AclOperation.DESCRIBE_CONFIGS, resource.resource_type, resource.resource_name
        )
        if code is not None:
            result.error_code, result.error_message = code, AUTHORIZATION_MESSAGES[code]
            refused.append(result)
            continue
        results.append(result)
        try:
            if ctx.broker.cluster is not None and resource.resource_type == TOPIC:
                overrides = await ctx.broker.cluster.topic_config(resource.resource_name)
                if overrides is None:
                    raise KafkaError(
                        f"unknown topic {resource.resource_name!r}",
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    )
                values = effective_values(ctx.broker.config, overrides)
            else:
                values = _values(ctx, resource.resource_type, resource.resource_name)
        except KafkaError as e:
            result.error_code = e.error_code
            result.error_message = str(e)
            continue
        wanted = resource.configuration_keys
        result.configs = [
            _entry(ctx, v, request, resource.resource_type)
            for v in values
            if wanted is None or v.name in wanted
        ]
    return DescribeConfigsResponse(results=results + refused)


def _refused(
    ctx: RequestContext, operation: AclOperation, resource_type: int, name: str
) -> ErrorCode | None:
    """A topic's configs need `operation` on the topic, a broker's (and its loggers') on the
    cluster: the error a refused resource is answered with, or None."""
    if resource_type == TOPIC:
        allowed = ctx.authorize(operation, ResourceType.TOPIC, name)
        return None if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type in (BROKER, BROKER_LOGGER):
        allowed = ctx.authorize_cluster(operation)
        return None if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


def _values(ctx: RequestContext, resource_type: int, name: str) -> list[ConfigValue]:
    broker = ctx.broker
    if resource_type == TOPIC:
        record = broker.topics.get(name)
        if record is None:
            raise KafkaError(
                f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        return describe_topic_configs(broker, record)
    if resource_type == BROKER:
        if name not in ("", str(broker.node_id)):
            raise KafkaError(
                f"this is broker {broker.node_id}, not {name}", error_code=ErrorCode.INVALID_REQUEST
            )
        out = []
        for key in BROKER_KEYS.values():
            is_set = broker.config.is_set(key.name)
            sensitive = key.type == "password"  # as Kafka: described without its value
            out.append(
                ConfigValue(
                    key.name,
                    None if sensitive else broker.config.get(key.name),
                    STATIC_BROKER_CONFIG if is_set else DEFAULT_CONFIG,
                    key.read_only,
                    sensitive,
                    TYPE_CODES.get(key.type, 0),
                    key.doc,
                    key.default,
                )
            )
        return out
    raise KafkaError(
        f"resource type {resource_type} is not supported", error_code=ErrorCode.INVALID_REQUEST
    )


def _entry(
    ctx: RequestContext, v: ConfigValue, request: DescribeConfigsRequest, resource_type: int
) -> Entry:
    entry = Entry(
        name=v.name,
        value=v.value,
        read_only=v.read_only,
        is_default=ctx.api_version == 0 and v.source == DEFAULT_CONFIG,
        config_source=v.source,
        is_sensitive=v.is_sensitive,
        config_type=v.type,
        documentation=v.doc if request.include_documentation else None,
    )
    if ctx.api_version >= 1 and request.include_synonyms:
        entry.synonyms = _synonyms(ctx, v, resource_type)
    return entry


def _synonyms(ctx: RequestContext, v: ConfigValue, resource_type: int) -> list[Synonym]:
    out = []
    if resource_type == TOPIC:
        key = TOPIC_KEYS[v.name]
        if v.source == DYNAMIC_TOPIC_CONFIG:
            out.append(Synonym(name=v.name, value=v.value, source=DYNAMIC_TOPIC_CONFIG))
        if key.broker_synonym and ctx.broker.config.is_set(key.broker_synonym):
            out.append(
                Synonym(
                    name=key.broker_synonym,
                    value=ctx.broker.config.get(key.broker_synonym),
                    source=STATIC_BROKER_CONFIG,
                )
            )
        if key.broker_synonym and key.broker_synonym not in BROKER_KEYS_WITHOUT_DEFAULT:
            out.append(Synonym(name=key.broker_synonym, value=key.default, source=DEFAULT_CONFIG))
    else:
        out.append(Synonym(name=v.name, value=v.value, source=v.source))
    return out


@handles(AlterConfigsRequest, (0, 2))
async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = []
    for resource in request.resources:
        result = AlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        responses.append(result)
        code = _refused(
            ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        if code is not None:
            result.error_code, result.error_message = code, None
            continue
        try:
            if ctx.broker.cluster is not None:
                await _check_topic_in_zk(ctx, resource.resource_type, resource.resource_name)
                await ctx.broker.cluster.set_topic_config(
                    resource.resource_name,
                    {c.name: c.value for c in resource.configs if c.value is not None},
                    validate_only=request.validate_only,
                )
                continue
            _check_topic(ctx, resource.resource_type, resource.resource_name)
            overrides = {c.name: c.value for c in resource.configs if c.value is not None}
            ctx.broker.set_topic_configs(
                resource.resource_name, overrides, validate_only=request.validate_only
            )
        except KafkaError as e:
            result.error_code = e.error_code
            result.error_message = str(e)
    return AlterConfigsResponse(responses=responses)


@handles(IncrementalAlterConfigsRequest, (0, 1))
async def incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    responses = []
    for resource in request.resources:
        result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        responses.append(result)
        code = _refused(
            ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        if code is not None:
            result.error_code, result.error_message = code, None
            continue
        try:
            if ctx.broker.cluster is not None:
                await _check_topic_in_zk(ctx, resource.resource_type, resource.resource_name)
                current = await ctx.broker.cluster.topic_config(resource.resource_name)
                overrides = dict(current or {})
                for c in resource.configs:
                    _apply(overrides, c.name, c.config_operation, c.value)
                await ctx.broker.cluster.set_topic_config(
                    resource.resource_name, overrides, validate_only=request.validate_only
                )
                continue
            _check_topic(ctx, resource.resource_type, resource.resource_name)
            record = ctx.broker.topics.get(resource.resource_name)
            assert record is not None
            overrides = dict(record.configs)
            for c in resource.configs:
                _apply(overrides, c.name, c.config_operation, c.value)
            ctx.broker.set_topic_configs(
                resource.resource_name, overrides, validate_only=request.validate_only
            )
        except KafkaError as e:
            result.error_code = e.error_code
            result.error_message = str(e)
    return IncrementalAlterConfigsResponse(responses=responses)


def _check_topic(ctx: RequestContext, resource_type: int, name: str) -> None:
    if resource_type == BROKER:
        raise KafkaError(
            "broker configs are static here: change server.properties and restart",
            error_code=ErrorCode.INVALID_REQUEST,
        )
    if resource_type != TOPIC:
        raise KafkaError(
            f"resource type {resource_type} is not supported", error_code=ErrorCode.INVALID_REQUEST
        )
    if ctx.broker.topics.get(name) is None:
        raise KafkaError(f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


async def _check_topic_in_zk(ctx: RequestContext, resource_type: int, name: str) -> None:
    """Cluster mode: the same checks, with the topic looked up in ZooKeeper."""
    if resource_type != TOPIC:
        _check_topic(ctx, resource_type, name)
    assert ctx.broker.cluster is not None
    if await ctx.broker.cluster.topic_config(name) is None:
        raise KafkaError(f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _apply(overrides: dict[str, str], name: str, operation: int, value: str | None) -> None:
    key = TOPIC_KEYS.get(name)
    if key is None:
        raise KafkaError(f"unknown topic config {name!r}", error_code=ErrorCode.INVALID_CONFIG)
    if operation == SET:
        if value is None:
            raise KafkaError(f"null value for {name}", error_code=ErrorCode.INVALID_CONFIG)
        overrides[name] = value
    elif operation == DELETE:
        overrides.pop(name, None)
    elif operation in (APPEND, SUBTRACT):
        if key.type != "list":
            raise KafkaError(
                f"{name} is not a list: APPEND and SUBTRACT apply to list configs only",
                error_code=ErrorCode.INVALID_CONFIG,
            )
        current = [v for v in (overrides.get(name) or key.default or "").split(",") if v]
        items = [v.strip() for v in (value or "").split(",") if v.strip()]
        if operation == APPEND:
            current += [v for v in items if v not in current]
        else:
            current = [v for v in current if v not in items]
        overrides[name] = ",".join(current)
    else:
        raise KafkaError(
            f"unknown config operation {operation}", error_code=ErrorCode.INVALID_REQUEST
        )
