"""The embedded broker's client quota configs, kept in `client-quotas.json`.

One file in the first log dir holds every quota entity's config by its ZooKeeper path
(`{"version":1,"entities":{"users/alice":{"producer_byte_rate":"1048576"},
"clients/<default>":{...},"ips/<default>":{"connection_creation_rate":"10"}}}`), written atomically (temporary file, fsync, rename) in a worker
thread. An entity whose config becomes empty is dropped, as Kafka deletes an empty quota
znode. In a cluster the configs live in ZooKeeper instead (`wirebroker.zk.entity_configs`).
SCRAM credentials, which Kafka keeps in the same user znodes, stay in the embedded broker's
`scram-credentials.json`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

import trio

from wirebroker.json_file import write_json_in_thread
from wirebroker.quotas.entities import QuotaEntity

log = logging.getLogger(__name__)

FILE_NAME = "client-quotas.json"


class ClientQuotaStore:
    """Quota configs by entity, persisted to `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entities: dict[QuotaEntity, dict[str, str]] = {}
        self._lock = trio.Lock()
        if path.exists():
            obj = json.loads(path.read_text())
            for entity_path, config in (obj.get("entities") or {}).items():
                entity = QuotaEntity.from_path(entity_path)
                if entity is None:
                    log.warning("%s: ignoring the unknown entity %r", path, entity_path)
                    continue
                self.entities[entity] = {str(k): str(v) for k, v in config.items()}

    def configs(self) -> dict[QuotaEntity, dict[str, str]]:
        return {entity: dict(config) for entity, config in self.entities.items()}

    async def set(self, entity: QuotaEntity, config: Mapping[str, str]) -> None:
        """Replace the entity's config (empty: forget the entity) and save."""
        if config:
            self.entities[entity] = dict(config)
        else:
            self.entities.pop(entity, None)
        obj = {
            "version": 1,
            "entities": {e.path: dict(c) for e, c in self.entities.items()},
        }
        async with self._lock:
            await write_json_in_thread(self.path, obj, sort_keys=True)
