"""DescribeConfigs v0-v4, AlterConfigs v0-v2, IncrementalAlterConfigs v0-v1.

Topic configs are reported as Kafka lists them: every topic-level key with its value and
source (a topic override, the broker's synonym -- dynamic or from server.properties -- or
Kafka's default), with synonyms (v1+) and types and documentation (v3+). BROKER resources are
this broker's dynamic configs and the cluster default (`handlers/broker_configs.py`),
BROKER_LOGGER resources its loggers' levels (`wirebroker.broker_loggers`). In a cluster,
altering a topic's configs writes `/config/topics/<t>` and a `/config/changes` notification,
which every broker applies to its logs.

Before any change, as Kafka's ConfigAdminManager: a resource named twice, a config named twice
in one resource or a missing value (other than DELETE's) fail that resource with INVALID_REQUEST.
AlterConfigs does not take BROKER_LOGGER resources (INVALID_REQUEST, as Kafka's "Unknown
resource type 8"). CLIENT_METRICS resources (KIP-714 subscriptions, KRaft-only) are refused
with INVALID_REQUEST and Kafka's ZooKeeper-mode messages, after the cluster's authorization.

Authorization, as Kafka: describing a topic's configs needs DESCRIBE_CONFIGS on the topic,
altering them ALTER_CONFIGS (TOPIC_AUTHORIZATION_FAILED); a broker's (or broker logger's) needs
the same operation on the cluster (CLUSTER_AUTHORIZATION_FAILED). DescribeConfigs lists the
refused resources last.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wirebroker import broker_loggers
from wirebroker.authorizer.acls import AUTHORIZATION_MESSAGES, AclOperation, ResourceType
from wirebroker.config_sources import ConfigValue
from wirebroker.dispatch import RequestContext, handles
from wirebroker.handlers import broker_configs
from wirebroker.topic_configs import TOPIC_KEYS, effective_values

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 4, 8, 16
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


class _Resource(Protocol):
    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...
    @property
    def configs(self) -> Sequence[Any]: ...


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
            values = await _values(ctx, resource.resource_type, resource.resource_name)
        except KafkaError as e:
            result.error_code = e.error_code
            result.error_message = str(e)
            continue
        wanted = resource.configuration_keys
        result.configs = [_entry(ctx, v, request) for v in values if not wanted or v.name in wanted]
    return DescribeConfigsResponse(results=results + refused)


def _refused(
    ctx: RequestContext, operation: AclOperation, resource_type: int, name: str
) -> ErrorCode | None:
    """A topic's configs need `operation` on the topic, a broker's (and its loggers') on the
    cluster: the error a refused resource is answered with, or None."""
    if resource_type == TOPIC:
        allowed = ctx.authorize(operation, ResourceType.TOPIC, name)
        return None if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        allowed = ctx.authorize_cluster(operation)
        return None if allowed else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


async def _values(ctx: RequestContext, resource_type: int, name: str) -> list[ConfigValue]:
    broker = ctx.broker
    if resource_type == TOPIC:
        if broker.cluster is not None:
            overrides = await broker.cluster.topic_config(name)
        else:
            record = broker.topics.get(name)
            overrides = record.configs if record is not None else None
        if overrides is None:
            raise KafkaError(
                f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        return effective_values(broker.config, overrides)
    if resource_type == BROKER:
        return broker_configs.describe(ctx, name)
    if resource_type == BROKER_LOGGER:
        return broker_loggers.describe(broker.node_id, name)
    if resource_type == CLIENT_METRICS:
        raise _client_metrics_refused(name)
    raise KafkaError(
        f"resource type {resource_type} is not supported", error_code=ErrorCode.INVALID_REQUEST
    )


def _entry(ctx: RequestContext, v: ConfigValue, request: DescribeConfigsRequest) -> Entry:
    entry = Entry(
        name=v.name,
        value=v.value,
        read_only=v.read_only,
        is_default=False,  # v0's flag: Kafka 3.9 never sets it
        config_source=v.source,
        is_sensitive=v.is_sensitive,
        config_type=v.type,
        documentation=v.doc if request.include_documentation else None,
    )
    if ctx.api_version >= 1 and request.include_synonyms:
        entry.synonyms = [Synonym(name=n, value=value, source=s) for n, value, s in v.synonyms]
    return entry


@handles(AlterConfigsRequest, (0, 2))
async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = []
    twice = _named_twice(request.resources)
    for resource in request.resources:
        result = AlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            error_message=None,  # Kafka's ApiError.NONE
        )
        responses.append(result)
        code = _refused(
            ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        if code is not None:
            result.error_code, result.error_message = code, None
            continue
        try:
            _preprocess(resource, twice, lambda c: c.value is None)
            values = {c.name: c.value for c in resource.configs if c.value is not None}
            if resource.resource_type == BROKER:
                name = resource.resource_name
                entity = broker_configs.entity(ctx, name)
                await broker_configs.alter(ctx, name, entity, values, request.validate_only)
            elif resource.resource_type == TOPIC:
                await _set_topic_configs(ctx, resource.resource_name, values, request.validate_only)
            else:
                raise _unknown_type(resource.resource_type)
        except KafkaError as e:
            result.error_code = e.error_code
            result.error_message = str(e)
    return AlterConfigsResponse(responses=responses)


@handles(IncrementalAlterConfigsRequest, (0, 1))
async def incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    responses = []
    twice = _named_twice(request.resources)
    for resource in request.resources:
        result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            error_message=None,  # Kafka's ApiError.NONE
        )
        responses.append(result)
        code = _refused(
            ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        if code is not None:
            result.error_code, result.error_message = code, None
            continue
        try:
            _preprocess(resource, twice, lambda c: c.value is None and c.config_operation != DELETE)
            await _incremental(ctx, resource, request.validate_only)
        except KafkaError as e:
            result.error_code = e.error_code
            result.error_message = str(e)
    return IncrementalAlterConfigsResponse(responses=responses)


async def _incremental(
    ctx: RequestContext,
    resource: IncrementalAlterConfigsRequest.AlterConfigsResource,
    validate_only: bool,
) -> None:
    name = resource.resource_name
    operations = [(c.name, c.config_operation, c.value) for c in resource.configs]
    if resource.resource_type == BROKER_LOGGER:
        broker_loggers.alter(ctx.broker.node_id, name, operations, validate_only)
    elif resource.resource_type == BROKER:
        entity = broker_configs.entity(ctx, name)
        values = await broker_configs.stored_values(ctx, entity)
        apply_operations(values, operations, broker_configs.list_default)
        await broker_configs.alter(ctx, name, entity, values, validate_only)
    elif resource.resource_type == TOPIC:
        overrides = await _topic_overrides(ctx, name)
        apply_operations(overrides, operations, _topic_list_default)
        await _set_topic_configs(ctx, name, overrides, validate_only)
    elif resource.resource_type == CLIENT_METRICS:
        raise KafkaError(
            "AlterConfigs is only supported for topics and brokers, but resource type is "
            "CLIENT_METRICS",
            error_code=ErrorCode.INVALID_REQUEST,
        )
    else:
        raise _unknown_type(resource.resource_type)


def _named_twice(resources: Sequence[_Resource]) -> set[tuple[int, str]]:
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {k for k, n in counts.items() if n > 1}


def _preprocess(
    resource: _Resource, twice: set[tuple[int, str]], missing: Callable[[Any], bool]
) -> None:
    """Kafka's ConfigAdminManager.preprocess checks, before anything is looked up."""
    if (resource.resource_type, resource.resource_name) in twice:
        raise KafkaError(
            "Each resource must appear at most once.", error_code=ErrorCode.INVALID_REQUEST
        )
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise KafkaError("Error due to duplicate config keys", error_code=ErrorCode.INVALID_REQUEST)
    nulls = [c.name for c in resource.configs if missing(c)]
    if nulls:
        raise KafkaError(
            "Null value not supported for : " + ", ".join(nulls),
            error_code=ErrorCode.INVALID_REQUEST,
        )


def _client_metrics_refused(name: str) -> KafkaError:
    """Kafka's ZooKeeper-mode answer to describing a client-metrics subscription (KIP-714's
    subscriptions live in KRaft metadata only)."""
    if not name:
        message = "Client metrics subscription name must not be empty"
    else:
        message = "Config type client-metrics is only supported on KRaft clusters"
    return KafkaError(message, error_code=ErrorCode.INVALID_REQUEST)


def _unknown_type(resource_type: int) -> KafkaError:
    return KafkaError(
        f"Unknown resource type {resource_type}", error_code=ErrorCode.INVALID_REQUEST
    )


async def _topic_overrides(ctx: RequestContext, name: str) -> dict[str, str]:
    if ctx.broker.cluster is not None:
        overrides = await ctx.broker.cluster.topic_config(name)
    else:
        record = ctx.broker.topics.get(name)
        overrides = record.configs if record is not None else None
    if overrides is None:
        raise KafkaError(f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return dict(overrides)


async def _set_topic_configs(
    ctx: RequestContext, name: str, overrides: dict[str, str], validate_only: bool
) -> None:
    await _topic_overrides(ctx, name)  # the topic must exist
    if ctx.broker.cluster is not None:
        await ctx.broker.cluster.set_topic_config(name, overrides, validate_only=validate_only)
    else:
        ctx.broker.set_topic_configs(name, overrides, validate_only=validate_only)
        if not validate_only:
            await ctx.broker.topics.written()


def _topic_list_default(name: str) -> tuple[bool, str | None]:
    key = TOPIC_KEYS.get(name)
    if key is None:
        raise KafkaError(f"unknown topic config {name!r}", error_code=ErrorCode.INVALID_CONFIG)
    return key.type == "list", key.default


def apply_operations(
    values: dict[str, str],
    operations: Sequence[tuple[str, int, str | None]],
    list_default: Callable[[str], tuple[bool, str | None]],
) -> None:
    """IncrementalAlterConfigs' SET, DELETE, APPEND and SUBTRACT on a resource's values, as
    Kafka's prepareIncrementalConfigs (APPEND and SUBTRACT start from the key's default when it
    is not set; `list_default(name)` says whether a key is a list and its default)."""
    for name, operation, value in operations:
        if operation == SET:
            assert value is not None  # checked before
            values[name] = value
        elif operation == DELETE:
            values.pop(name, None)
        elif operation in (APPEND, SUBTRACT):
            is_list, default = list_default(name)
            if not is_list:
                verb = "append" if operation == APPEND else "subtract"
                raise KafkaError(
                    f"Config value {verb} is not allowed for config key: {name}",
                    error_code=ErrorCode.INVALID_CONFIG,
                )
            current = [v for v in (values.get(name) or default or "").split(",") if v]
            items = (value or "").split(",")
            if operation == APPEND:
                current += [v for v in items if v not in current]
            else:
                current = [v for v in current if v not in items]
            values[name] = ",".join(current)
        else:
            raise KafkaError(
                f"unknown config operation {operation}", error_code=ErrorCode.INVALID_REQUEST
            )
