"""The BROKER resources of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

A BROKER resource is this broker (its id as the name) or the cluster-wide default (the empty
name); another broker's id is INVALID_REQUEST, as in Kafka, since the admin client sends each
broker's resource to that broker. DescribeConfigs of this broker lists every key with its
source and synonyms (`wirebroker.config_sources`); of the default, the keys set there.
AlterConfigs replaces the entity's whole set of dynamic configs, IncrementalAlterConfigs
changes the ones named. A change is validated (`wirebroker.dynamic_config`: Kafka's rules and
messages, INVALID_REQUEST); for this broker's own entity, the listeners' store files modified
since they were read are read again and checked (INVALID_CONFIG, as Kafka's
reloadUpdatedFilesWithoutConfigChange, whichever keys the change sets); the change is encoded
(INVALID_CONFIG without `password.encoder.secret`), stored (ZooKeeper in a cluster, whose
notification reaches every broker; the embedded broker's file) and applied here at once. A
validate-only request stops after the validation, as Kafka's (ZkAdminManager): no file is read
again and no password encoded, so a password key is answered without `password.encoder.secret`.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from protocol.errors import ErrorCode, KafkaError
from wirebroker.config import BROKER_KEYS, ConfigError
from wirebroker.config_sources import ConfigValue, describe_broker
from wirebroker.dispatch import RequestContext
from wirebroker.dynamic_config import DEFAULT_ENTITY, entity_of


def describe(ctx: RequestContext, name: str) -> list[ConfigValue]:
    """The configs of this broker (`name` its id) or of the cluster default (`name` "")."""
    broker = ctx.broker
    if name:
        try:
            requested = int(name)
        except ValueError:
            raise _invalid_request(f"Broker id must be an integer, but it is: {name}") from None
        if requested != broker.node_id:
            raise _invalid_request(
                f"Unexpected broker id, expected {broker.node_id} or empty string, but "
                f"received {name}"
            )
    return describe_broker(broker.config, per_broker=bool(name))


def entity(ctx: RequestContext, name: str) -> str:
    """The entity an alteration names (INVALID_REQUEST for another broker's id)."""
    try:
        return entity_of(name, ctx.broker.node_id)
    except ConfigError as e:
        raise _invalid_request(str(e)) from None


async def stored_values(ctx: RequestContext, entity: str) -> dict[str, str]:
    """The entity's current dynamic configs (passwords decrypted), read from where they are
    kept: ZooKeeper in a cluster (another broker may have changed the default just now), the
    embedded broker's file (read in a worker thread, as it is written)."""
    broker = ctx.broker
    if broker.cluster is not None:
        stored = await broker.cluster.broker_config(entity)
    else:
        stored = (await trio.to_thread.run_sync(broker.dynamic_config.read_local)).get(entity, {})
    return broker.dynamic_config.from_persistent(entity, stored)


async def alter(
    ctx: RequestContext, name: str, entity: str, values: Mapping[str, str], validate_only: bool
) -> None:
    """Validate, store and apply a new set of dynamic configs for one entity."""
    broker = ctx.broker
    dynamic = broker.dynamic_config
    try:
        # In a worker thread: a listener's new keystore is read (and kept for `apply`).
        await trio.to_thread.run_sync(dynamic.validate, entity, values)
    except ConfigError as e:
        raise _invalid_request(str(e)) from None
    if validate_only:  # as Kafka: neither reloaded nor encoded (no secret needed)
        return
    reloaded: frozenset[str] = frozenset()
    try:
        if entity != DEFAULT_ENTITY:
            reloaded = await trio.to_thread.run_sync(dynamic.reload, entity, values)
        persistent = dynamic.to_persistent(entity, values)
    except ConfigError as e:
        raise KafkaError(
            f"Invalid config value for resource ConfigResource(type=BROKER, name='{name}'): {e}",
            error_code=ErrorCode.INVALID_CONFIG,
        ) from None
    if broker.cluster is not None:
        await broker.cluster.set_broker_config(entity, persistent)
    else:
        await trio.to_thread.run_sync(dynamic.write_local, entity, persistent)
    dynamic.apply(entity, persistent, reload=reloaded)


def list_default(name: str) -> tuple[bool, str | None]:
    """(is a list, its default) of a broker key, for APPEND and SUBTRACT."""
    key = BROKER_KEYS.get(name)
    if key is None:
        raise KafkaError(f"Unknown config name: {name}", error_code=ErrorCode.INVALID_CONFIG)
    return key.type == "list", key.default


def _invalid_request(message: str) -> KafkaError:
    return KafkaError(message, error_code=ErrorCode.INVALID_REQUEST)
