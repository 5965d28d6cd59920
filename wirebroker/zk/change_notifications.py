"""The clean-up every change-notification path shares (`/config/changes`, `/kafka-acl-changes`,
`/kafka-acl-extended-changes`, `/delegation_token/token_changes`), as Kafka 3.9's
ZkNodeChangeNotificationListener does it: after processing a batch (the one found at start-up
too), each notification of that batch older than 15 minutes (its znode's ctime, ZooKeeper's
clock) is deleted, by whichever broker gets there first (a notification already gone is fine).

Every call goes through `ZkClient`, so a worker thread waits on ZooKeeper, never the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an embedded broker (the file ACL store's) never loads kazoo
    from wirebroker.zk.client import ZkClient

log = logging.getLogger(__name__)

#: Change notifications older than this are deleted (Kafka's changeExpirationMs).
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


async def purge_obsolete(zk: ZkClient, changes_path: str, children: Iterable[str]) -> None:
    """Kafka's purgeObsoleteNotifications: delete the `children` of `changes_path` (the batch
    just processed) created more than `CHANGE_EXPIRATION_MS` ago."""
    now_ms = int(time.time() * 1000)
    for child in children:
        path = f"{changes_path}/{child}"
        stat = await zk.exists(path)
        if stat is not None and now_ms - stat.ctime > CHANGE_EXPIRATION_MS:
            log.debug("purging change notification %s", path)
            await zk.delete(path)
