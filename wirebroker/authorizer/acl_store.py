"""Where the ACLs are kept: ZooKeeper in a cluster (as Kafka keeps them), a file when embedded.

Both stores hold `acls`, every resource pattern's entries (the authorizer's cache of them),
and change one pattern at a time with `update`, whose caller serializes the calls.

`ZkAclStore` keeps Kafka's layout, so Kafka's own brokers and tools see the same ACLs:
`/kafka-acl/<ResourceType>/<name>` for literal patterns, `/kafka-acl-extended/prefixed/...` for
prefixed ones, each holding Kafka's ACL JSON. A write is a compare-and-set on the znode's
version (create if absent, delete once empty), re-read and retried on a conflict up to 10
times, 100-150 ms apart, as Kafka's AclAuthorizer; a write that changed something is
announced by a `acl_changes_<seq>` znode under `/kafka-acl-changes` (literal) or
`/kafka-acl-extended-changes` (prefixed). Every broker watches both: `process_changes` reads the
notifications it has not seen and re-reads the patterns they name, and deletes notifications
older than 15 minutes, as Kafka's ZkNodeChangeNotificationListener. After a new ZooKeeper
session `load` runs again (Kafka only replays the notifications: one purged meanwhile would be
missed).

`FileAclStore` is the embedded broker's: one JSON file (`acls.json` in the first log dir),
written whole (temporary file, fsync, rename) in a worker thread on every change.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from wirebroker.authorizer.acls import (
    CONCRETE_RESOURCE_TYPES,
    AccessControlEntry,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_from_json,
    acls_from_json,
    acls_to_json,
    kafka_name,
    parse_name,
)
from wirebroker.zk import znodes
from wirebroker.zk.change_notifications import purge_obsolete

if TYPE_CHECKING:
    from wirebroker.zk.client import ZkClient

log = logging.getLogger(__name__)

Acls = frozenset[AccessControlEntry]
Change = Callable[[Acls], Acls]

FILE_NAME = "acls.json"
MAX_UPDATE_RETRIES = 10  # Kafka's AclAuthorizer.maxUpdateRetries
RETRY_BACKOFF_S = 0.1
RETRY_JITTER_S = 0.05


class AclStoreError(Exception):
    """Raised by `update` when the ACLs could not be written (the ACLs are unchanged here);
    the caller answers that binding with an error."""


class FileAclStore:
    """The embedded broker's ACLs, in one file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.acls: dict[ResourcePattern, Acls] = {}

    async def load(self) -> None:
        self.acls = await trio.to_thread.run_sync(self._read)

    def _read(self) -> dict[ResourcePattern, Acls]:
        if not self.path.exists():
            return {}
        obj = json.loads(self.path.read_text())
        out: dict[ResourcePattern, Acls] = {}
        for item in obj.get("resources") or []:
            pattern = ResourcePattern(
                parse_name(ResourceType, item["resourceType"]),
                item["name"],
                parse_name(PatternType, item["patternType"]),
            )
            entries = frozenset(acl_from_json(a) for a in item.get("acls") or [])
            if entries:
                out[pattern] = entries
        return out

    async def update(self, pattern: ResourcePattern, change: Change) -> Acls:
        current = self.acls.get(pattern, frozenset())
        new = change(current)
        if new == current:
            return current
        acls = dict(self.acls)
        if new:
            acls[pattern] = new
        else:
            acls.pop(pattern, None)
        try:
            await trio.to_thread.run_sync(self._write, acls)
        except OSError as e:
            raise AclStoreError(f"cannot write {self.path}: {e.strerror}") from e
        self.acls = acls
        return new

    def _write(self, acls: dict[ResourcePattern, Acls]) -> None:
        resources = [
            {
                "resourceType": kafka_name(p.resource_type),
                "patternType": p.pattern_type.name,
                "name": p.name,
                "acls": json.loads(acls_to_json(entries))["acls"],
            }
            for p, entries in sorted(acls.items(), key=lambda kv: str(kv[0]))
        ]
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"version": 1, "resources": resources}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class ZkAclStore:
    """A cluster's ACLs, in ZooKeeper as Kafka keeps them."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk
        self.acls: dict[ResourcePattern, Acls] = {}
        #: The znode version of each pattern's ACLs in `acls`.
        self.versions: dict[ResourcePattern, int] = {}
        #: The last notification processed, per changes path.
        self._last_change: dict[str, int] = {}

    async def load(self) -> None:
        """Read every ACL, watching both changes paths first so no change is missed between."""
        for path in znodes.ACL_CHANGES.values():
            await self.zk.ensure_path(path)
            children = await self.zk.get_children(path, watch=True) or []
            self._last_change[path] = max((znodes.sequence_number(c) for c in children), default=-1)
            await purge_obsolete(self.zk, path, children)  # as Kafka's start-up
        acls: dict[ResourcePattern, Acls] = {}
        versions: dict[ResourcePattern, int] = {}
        for pattern_type in znodes.ACL_ROOTS:
            for resource_type in CONCRETE_RESOURCE_TYPES:
                await self.zk.ensure_path(znodes.acl_type_path(pattern_type, resource_type))
            for type_name in await self.zk.get_children(znodes.ACL_ROOTS[pattern_type]) or []:
                resource_type = parse_name(ResourceType, type_name)
                if resource_type == ResourceType.UNKNOWN:
                    log.warning("ignoring the ACLs of unknown resource type %s", type_name)
                    continue
                type_path = znodes.acl_type_path(pattern_type, resource_type)
                for name in await self.zk.get_children(type_path) or []:
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    entries, version = await self._read(pattern)
                    if entries:
                        acls[pattern], versions[pattern] = entries, version
        self.acls, self.versions = acls, versions

    async def _read(self, pattern: ResourcePattern) -> tuple[Acls, int]:
        """The pattern's ACLs and znode version (-1: no znode); unreadable ACLs count as none."""
        got = await self.zk.get(znodes.acl_path(pattern))
        if got is None:
            return frozenset(), -1
        try:
            return acls_from_json(got[0]), got[1].version
        except (ValueError, KeyError, TypeError) as e:
            log.error("ignoring the unreadable ACLs of %s: %s", pattern, e)
            return frozenset(), got[1].version

    def _cache(self, pattern: ResourcePattern, entries: Acls, version: int) -> None:
        if entries:
            self.acls[pattern], self.versions[pattern] = entries, version
        else:
            self.acls.pop(pattern, None)
            self.versions.pop(pattern, None)

    async def update(self, pattern: ResourcePattern, change: Change) -> Acls:
        """Write `change(current)` with a version check, re-reading and retrying on conflict."""
        # Imported here: an embedded broker never loads kazoo.
        from wirebroker.zk.client import BadVersionError, NodeExistsError, NoNodeError

        path = znodes.acl_path(pattern)
        if pattern in self.acls:
            current, version = self.acls[pattern], self.versions[pattern]
        else:
            current, version = await self._read(pattern)
        for attempt in range(MAX_UPDATE_RETRIES + 1):
            if attempt:
                await trio.sleep(RETRY_BACKOFF_S + random.random() * RETRY_JITTER_S)
                current, version = await self._read(pattern)
            new = change(current)
            if new == current:
                return current
            try:
                if not new:
                    await self.zk.delete(path, version=version)
                    new_version = -1
                elif version >= 0:
                    new_version = (
                        await self.zk.set(path, acls_to_json(new), version=version)
                    ).version
                else:
                    await self.zk.create(path, acls_to_json(new), makepath=True)
                    new_version = 0
            except (BadVersionError, NodeExistsError, NoNodeError):
                log.debug("ACLs of %s changed under us (version %d); retrying", pattern, version)
                continue
            self._cache(pattern, new, new_version)
            if new != current:
                log.info("updated the ACLs of %s (version %d)", pattern, new_version)
                await self.zk.create(
                    f"{znodes.ACL_CHANGES[pattern.pattern_type]}/{znodes.ACL_CHANGE_PREFIX}",
                    znodes.encode_acl_change(pattern),
                    sequence=True,
                    makepath=True,
                )
            return new
        raise AclStoreError(
            f"failed to update the ACLs of {pattern} after {MAX_UPDATE_RETRIES} retries"
        )

    async def process_changes(self, changes_path: str) -> bool:
        """Apply the notifications under `changes_path` not seen yet (watching it again);
        True if any was. Deletes the notifications older than 15 minutes."""
        pattern_type = next(t for t, p in znodes.ACL_CHANGES.items() if p == changes_path)
        children = sorted(
            await self.zk.get_children(changes_path, watch=True) or [], key=znodes.sequence_number
        )
        seen = False
        for child in children:
            if znodes.sequence_number(child) <= self._last_change.get(changes_path, -1):
                continue
            self._last_change[changes_path] = znodes.sequence_number(child)
            got = await self.zk.get(f"{changes_path}/{child}")
            if got is None:
                continue
            try:
                pattern = znodes.decode_acl_change(pattern_type, got[0])
            except (ValueError, KeyError, TypeError) as e:
                log.error("ignoring the ACL change notification %s: %s", child, e)
                continue
            entries, version = await self._read(pattern)
            log.info("ACL change notification for %s: %d ACLs now", pattern, len(entries))
            self._cache(pattern, entries, version)
            seen = True
        await purge_obsolete(self.zk, changes_path, children)
        return seen
