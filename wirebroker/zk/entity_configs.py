"""Entity configs in ZooKeeper, read and written as Kafka's AdminZkClient does.

A topic's, broker's, user's or client's config is the `{"version":1,"config":{...}}` of
`/config/<type>/<name>` (a user and client: `/config/users/<user>/clients/<client>`; names of
users and clients URL-encoded by Kafka's Sanitizer). A change writes the znode, then a
`/config/changes/config_change_<seq>` notification naming the entity's path without `/config/`,
which every broker follows (`ClusterMember`).

Users and clients (Kafka's changeUserOrUserClientIdConfig): a user's znode holds its SCRAM
credentials and its quotas side by side, and a user or client znode left with an empty config
and no children is deleted, with its `clients` parent and its user when they are left empty
too (Kafka's tryCleanQuotaNodes), so removed quotas leave no znodes behind. An ip's config
(`/config/ips/<ip>`, its connection rate quota) is written as any entity's, and stays, emptied,
when its quota is removed (Kafka's changeIpConfig).
"""

from __future__ import annotations

from collections.abc import Mapping

from wirebroker.quotas.entities import QuotaEntity
from wirebroker.zk import znodes
from wirebroker.zk.client import NodeExistsError, NoNodeError, ZkClient
from wirebroker.zk.znodes import EntityConfig

CONFIG = "/config"


async def read_entity_config(zk: ZkClient, path: str) -> dict[str, str]:
    """The config map of a `/config/<type>/<name>` znode ({} when there is none)."""
    got = await zk.get(path)
    return EntityConfig.decode(got[0] if got else None).config


async def change_entity_config(zk: ZkClient, entity_path: str, config: Mapping[str, str]) -> None:
    """Write `/config/<entity_path>` and a `/config/changes` notification naming it (Kafka's
    changeEntityConfig): every broker follows the notification."""
    await _write(zk, f"{CONFIG}/{entity_path}", config)
    await _notify(zk, entity_path)


async def _write(zk: ZkClient, path: str, config: Mapping[str, str]) -> None:
    data = EntityConfig(dict(config)).encode()
    try:
        await zk.set(path, data)
    except NoNodeError:
        try:
            await zk.create(path, data, makepath=True)
        except NodeExistsError:  # another writer came first: ours is the last word
            await zk.set(path, data)


async def _notify(zk: ZkClient, entity_path: str) -> None:
    await zk.create(
        f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
        znodes.ConfigChangeNotification(entity_path).encode(),
        sequence=True,
        makepath=True,
    )


# users and clients ------------------------------------------------------------------------------
async def read_user_or_client_config(zk: ZkClient, entity: QuotaEntity) -> dict[str, str]:
    return await read_entity_config(zk, f"{CONFIG}/{entity.path}")


async def read_quota_entities(zk: ZkClient) -> dict[QuotaEntity, dict[str, str]]:
    """Every user, user and client, client and ip entity's config (empty ones too)."""
    out: dict[QuotaEntity, dict[str, str]] = {}
    for user in await zk.get_children(znodes.CONFIG_USERS) or []:
        entities = [QuotaEntity(user, None)]
        clients = await zk.get_children(f"{znodes.CONFIG_USERS}/{user}/clients") or []
        entities += [QuotaEntity(user, client) for client in clients]
        for entity in entities:
            out[entity] = await read_user_or_client_config(zk, entity)
    for client in await zk.get_children(znodes.CONFIG_CLIENTS) or []:
        entity = QuotaEntity(None, client)
        out[entity] = await read_user_or_client_config(zk, entity)
    for ip in await zk.get_children(znodes.CONFIG_IPS) or []:
        entity = QuotaEntity(None, None, ip)
        out[entity] = await read_user_or_client_config(zk, entity)
    return out


async def change_user_or_client_config(
    zk: ZkClient, entity: QuotaEntity, config: Mapping[str, str]
) -> None:
    """Replace a user's, client's or ip's config and notify every broker; an emptied user's
    or client's znodes go (Kafka's changeUserOrUserClientIdConfig)."""
    if config or entity.ip is not None or not await _delete_if_empty(zk, entity):
        await _write(zk, f"{CONFIG}/{entity.path}", config)
    await _notify(zk, entity.path)


async def _delete_if_empty(zk: ZkClient, entity: QuotaEntity) -> bool:
    """Kafka's tryCleanQuotaNodes: delete an entity znode without children (and its empty
    `clients` parent and user); False when it has children and must stay."""
    path = f"{CONFIG}/{entity.path}"
    if await zk.get_children(path):
        return False
    doomed = path
    if entity.user is not None and entity.client_id is not None:
        user_path = f"{znodes.CONFIG_USERS}/{entity.user}"
        clients = await zk.get_children(f"{user_path}/clients") or []
        if clients == [entity.client_id]:
            doomed = f"{user_path}/clients"
            user_config = await read_user_or_client_config(zk, QuotaEntity(entity.user, None))
            if not user_config and (await zk.get_children(user_path) or []) == ["clients"]:
                doomed = user_path
    await zk.delete(doomed, recursive=True)
    return True
