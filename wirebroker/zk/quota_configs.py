"""Client quota configs in ZooKeeper, read and written as Kafka's AdminZkClient does.

An entity's config is the `{"version":1,"config":{...}}` of `/config/users/<user>`,
`/config/users/<user>/clients/<client>` or `/config/clients/<client>` (a user's znode holds its
SCRAM credentials too: a change of its quotas keeps them). A change writes the znode, then a
`/config/changes/config_change_<seq>` notification naming the entity's path, which every
broker follows (`ClusterMember`). A quota znode left with an empty config and no children is
deleted, with its `clients` parent and its user when they are left empty too (Kafka's
tryCleanQuotaNodes), so removed quotas leave no znodes behind.
"""

from __future__ import annotations

from collections.abc import Mapping

from wirebroker.quotas.entities import QuotaEntity
from wirebroker.zk import znodes
from wirebroker.zk.client import NodeExistsError, NoNodeError, ZkClient
from wirebroker.zk.znodes import EntityConfig

CONFIG = "/config"


def _path(entity: QuotaEntity) -> str:
    return f"{CONFIG}/{entity.path}"


async def read_config(zk: ZkClient, entity: QuotaEntity) -> dict[str, str]:
    got = await zk.get(_path(entity))
    return EntityConfig.decode(got[0] if got else None).config


async def read_all(zk: ZkClient) -> dict[QuotaEntity, dict[str, str]]:
    """Every user, user and client, and client entity's config (empty ones too)."""
    out: dict[QuotaEntity, dict[str, str]] = {}
    for user in await zk.get_children(znodes.CONFIG_USERS) or []:
        out[QuotaEntity(user, None)] = await read_config(zk, QuotaEntity(user, None))
        for client in await zk.get_children(f"{znodes.CONFIG_USERS}/{user}/clients") or []:
            entity = QuotaEntity(user, client)
            out[entity] = await read_config(zk, entity)
    for client in await zk.get_children(znodes.CONFIG_CLIENTS) or []:
        out[QuotaEntity(None, client)] = await read_config(zk, QuotaEntity(None, client))
    return out


async def write_config(zk: ZkClient, entity: QuotaEntity, config: Mapping[str, str]) -> None:
    """Replace the entity's config (Kafka's changeEntityConfig) and notify every broker."""
    if config or not await _delete_if_empty(zk, entity):
        data = EntityConfig(dict(config)).encode()
        try:
            await zk.set(_path(entity), data)
        except NoNodeError:
            try:
                await zk.create(_path(entity), data, makepath=True)
            except NodeExistsError:  # another writer came first: ours is the last word
                await zk.set(_path(entity), data)
    await zk.create(
        f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
        znodes.ConfigChangeNotification(entity.path).encode(),
        sequence=True,
        makepath=True,
    )


async def _delete_if_empty(zk: ZkClient, entity: QuotaEntity) -> bool:
    """Kafka's tryCleanQuotaNodes: delete an entity znode without children (and its empty
    `clients` parent and user); False when it has children and must stay."""
    path = _path(entity)
    if await zk.get_children(path):
        return False
    doomed = path
    if entity.user is not None and entity.client_id is not None:
        user_path = f"{znodes.CONFIG_USERS}/{entity.user}"
        clients = await zk.get_children(f"{user_path}/clients") or []
        if clients == [entity.client_id]:
            doomed = f"{user_path}/clients"
            user_config = await read_config(zk, QuotaEntity(entity.user, None))
            if not user_config and (await zk.get_children(user_path) or []) == ["clients"]:
                doomed = user_path
    await zk.delete(doomed, recursive=True)
    return True
