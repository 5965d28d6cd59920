"""Kafka's AclAuthorizer: may this principal, from this host, do this operation on this resource?

The rules, as Kafka 3.9's `kafka.security.authorizer.AclAuthorizer`:

- a principal listed in `super.users` (`User:a;User:b`) may do everything;
- otherwise the ACLs that apply to a resource are those of its literal name, of the wildcard
  `*`, and of every prefixed pattern the name starts with. With none at all the answer is
  `allow.everyone.if.no.acl.found` (default false);
- a DENY entry for the principal (or `User:*`), the host (or `*`) and the operation (or ALL)
  wins; else an ALLOW entry for the operation, or for one that implies it (READ, WRITE,
  DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS), or ALL, allows it;
- `authorize_any` (Kafka's authorizeByResourceType, for idempotent producers) asks whether
  some resource of a type could be allowed.

Every decision is logged on the `wirebroker.authorizer.logger` logger (Kafka's
`kafka.authorizer.logger`): denials at INFO, grants at DEBUG, and those that only compute
authorized-operations bit fields or filter lists at neither. A line names the principal,
operation, host, resource and request, never a secret. Decisions are memoized until the ACLs
change, so the produce and fetch paths pay one dictionary lookup per topic.

Writes (CreateAcls, DeleteAcls) go through the store (`acl_store`) one at a time; in a cluster
the other brokers follow through ZooKeeper's change notifications (`process_changes`).
Differences from Kafka: `authorizer.zookeeper.*` (ACLs in another ZooKeeper) is not read.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import trio

from wirebroker.authorizer.acl_store import Acls, AclStoreError, FileAclStore, ZkAclStore
from wirebroker.authorizer.acls import (
    ALLOWED_BY,
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    kafka_name,
    operations_bits,
    parse_principal,
)

if TYPE_CHECKING:
    from wirebroker.config import BrokerConfig
    from wirebroker.zk.client import ZkClient

log = logging.getLogger(__name__)
audit = logging.getLogger("wirebroker.authorizer.logger")

#: `authorizer.class.name` values that mean this authorizer.
ACL_AUTHORIZER_NAMES = (
    "kafka.security.authorizer.AclAuthorizer",
    "wirebroker.authorizer.AclAuthorizer",
)
#: Memoized decisions kept before the memo starts over.
MAX_MEMO = 100_000

Binding = tuple[ResourcePattern, AccessControlEntry]


def parse_super_users(text: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons; ValueError for one without a type."""
    users = set()
    for item in (text or "").split(";"):
        if item.strip():
            kind, name = parse_principal(item.strip())
            users.add(f"{kind}:{name}")
    return frozenset(users)


def host_address(host: str) -> str:
    """A client address as Java's InetAddress.getHostAddress prints it, which is what ACL hosts
    are compared with: IPv6 without `::` compression, IPv4-mapped IPv6 as IPv4."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.split("%", 1)[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":"))


class AclAuthorizer:
    """The ACL cache of one broker and the decisions taken from it."""

    def __init__(
        self, store: FileAclStore | ZkAclStore, super_users: frozenset[str], allow_if_no_acl: bool
    ) -> None:
        self.store = store
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._memo: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self._writing = trio.Lock()

    @classmethod
    async def open(cls, config: BrokerConfig, zk: ZkClient | None) -> AclAuthorizer:
        """The authorizer of `config`, its ACLs loaded (from ZooKeeper in a cluster)."""
        store = (
            ZkAclStore(zk) if zk is not None else FileAclStore(config.log_dirs()[0] / "acls.json")
        )
        await store.load()
        authorizer = cls(
            store,
            parse_super_users(config.get("super.users")),
            config.get_bool("allow.everyone.if.no.acl.found"),
        )
        log.info(
            "authorizer: %d ACLs loaded; super users: %s; allow.everyone.if.no.acl.found=%s",
            sum(len(a) for a in store.acls.values()),
            ", ".join(sorted(authorizer.super_users)) or "none",
            str(authorizer.allow_if_no_acl).lower(),
        )
        return authorizer

    # decisions ------------------------------------------------------------------------------
    def authorized_names(
        self,
        principal: str,
        host: str,
        request: str,
        operation: AclOperation,
        resource_type: ResourceType,
        names: Iterable[str],
        *,
        log_if_denied: bool = True,
    ) -> set[str]:
        """Kafka's filterByAuthorized: the distinct names allowed, each decided (and logged) once
        with the number of times the request names it."""
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        return {
            name
            for name, count in counts.items()
            if self.authorize(
                principal,
                host,
                request,
                operation,
                resource_type,
                name,
                count=count,
                log_if_denied=log_if_denied,
            )
        }

    def authorize(
        self,
        principal: str,
        host: str,
        request: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        count: int = 1,
        log_if_allowed: bool = True,
        log_if_denied: bool = True,
    ) -> bool:
        """Kafka's authorize() for one action on a literal resource; logged as Kafka does."""
        key = (principal, host, operation, resource_type, name)
        allowed = self._memo.get(key)
        if allowed is None:
            allowed = self._decide(principal, host_address(host), operation, resource_type, name)
            if len(self._memo) >= MAX_MEMO:
                self._memo.clear()
            self._memo[key] = allowed
        if (log_if_allowed if allowed else log_if_denied) and audit.isEnabledFor(
            logging.DEBUG if allowed else logging.INFO
        ):
            resource = f"{kafka_name(resource_type)}:LITERAL:{name}"
            _audit(principal, allowed, operation, host, resource, request, count)
        return allowed

    def _decide(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        entries = self._matching(resource_type, name)
        if not entries:
            return self.allow_if_no_acl
        if self._exists(entries, principal, host, (operation,), AclPermissionType.DENY):
            return False
        allowed_by = ALLOWED_BY.get(operation, (operation,))
        return self._exists(entries, principal, host, allowed_by, AclPermissionType.ALLOW)

    def _matching(self, resource_type: ResourceType, name: str) -> list[Acls]:
        """The ACLs of the literal name, the wildcard, and every prefix of the name."""
        acls = self.store.acls
        found = [
            acls.get(ResourcePattern(resource_type, name, PatternType.LITERAL)),
            acls.get(ResourcePattern(resource_type, WILDCARD, PatternType.LITERAL)),
        ]
        found += [
            acls.get(ResourcePattern(resource_type, name[:end], PatternType.PREFIXED))
            for end in range(1, len(name) + 1)
        ]
        return [entries for entries in found if entries]

    @staticmethod
    def _exists(
        found: list[Acls],
        principal: str,
        host: str,
        operations: tuple[AclOperation, ...],
        permission: AclPermissionType,
    ) -> bool:
        return any(
            e.permission_type == permission
            and e.principal in (principal, WILDCARD_PRINCIPAL)
            and (e.operation in operations or e.operation == AclOperation.ALL)
            and e.host in (host, WILDCARD)
            for entries in found
            for e in entries
        )

    def authorize_any(
        self,
        principal: str,
        host: str,
        request: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Kafka's authorizeByResourceType: could some resource of this type be allowed the
        operation? (A literal DENY of `*` says no; a DENY prefix covers the names it starts.)"""
        allowed = self._decide_any(principal, host_address(host), operation, resource_type)
        if audit.isEnabledFor(logging.DEBUG if allowed else logging.INFO):
            resource = f"{kafka_name(resource_type)}:UNKNOWN:NONE"
            _audit(principal, allowed, operation, host, resource, request, 0)
        return allowed

    def _decide_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        if principal in self.super_users:
            return True
        names: dict[tuple[AclPermissionType, PatternType], set[str]] = {}
        for pattern, entries in self.store.acls.items():
            if pattern.resource_type != resource_type:
                continue
            for e in entries:
                if (
                    e.principal in (principal, WILDCARD_PRINCIPAL)
                    and e.host in (host, WILDCARD)
                    and e.operation in (operation, AclOperation.ALL)
                ):
                    names.setdefault((e.permission_type, pattern.pattern_type), set()).add(
                        pattern.name
                    )
        deny_literals = names.get((AclPermissionType.DENY, PatternType.LITERAL), set())
        deny_prefixes = names.get((AclPermissionType.DENY, PatternType.PREFIXED), set())
        allow_literals = names.get((AclPermissionType.ALLOW, PatternType.LITERAL), set())
        allow_prefixes = names.get((AclPermissionType.ALLOW, PatternType.PREFIXED), set())
        if WILDCARD in deny_literals:
            return False
        if self.allow_if_no_acl:
            return True

        def denied_by_prefix(name: str) -> bool:
            return any(name[:end] in deny_prefixes for end in range(1, len(name) + 1))

        return any(not denied_by_prefix(p) for p in allow_prefixes) or any(
            literal == WILDCARD or (literal not in deny_literals and not denied_by_prefix(literal))
            for literal in allow_literals
        )

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """Kafka's authorized-operations bit field: bit N for each allowed operation of code N."""
        return operations_bits(
            op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(
                principal,
                host,
                "",
                op,
                resource_type,
                name,
                log_if_allowed=False,
                log_if_denied=False,
            )
        )

    # the ACLs ---------------------------------------------------------------------------------
    def acls(self, binding_filter: AclBindingFilter) -> list[Binding]:
        """Every binding the filter matches (DescribeAcls)."""
        return [
            (pattern, entry)
            for pattern, entries in self.store.acls.items()
            for entry in entries
            if binding_filter.matches(pattern, entry)
        ]

    async def create_acls(self, bindings: list[Binding]) -> list[str | None]:
        """Add the bindings, grouped per pattern; per binding None or why it failed."""
        results: list[str | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, (pattern, _) in enumerate(bindings):
            by_pattern.setdefault(pattern, []).append(i)
        async with self._writing:
            for pattern, indexes in by_pattern.items():
                added = frozenset(bindings[i][1] for i in indexes)
                try:
                    await self.store.update(pattern, added.union)
                except AclStoreError as e:
                    for i in indexes:
                        results[i] = str(e)
                self._memo.clear()
        return results

    async def delete_acls(
        self, filters: list[AclBindingFilter]
    ) -> list[list[tuple[Binding, str | None]]]:
        """Remove what each filter matches; per filter the bindings it deleted (with why one
        could not be, or None). A binding two filters match is reported by the first."""
        deleted: dict[Binding, tuple[int, str | None]] = {}
        async with self._writing:
            patterns = set(self.store.acls)
            for f in filters:
                if f.pattern.matches_at_most_one():
                    patterns.update(f.pattern.candidates())
            for pattern in sorted(patterns, key=str):
                matching = [i for i, f in enumerate(filters) if f.pattern.matches(pattern)]
                if not matching:
                    continue
                without, removed = _removal(pattern, filters, matching)
                try:
                    await self.store.update(pattern, without)
                    error = None
                except AclStoreError as e:
                    error = str(e)
                for binding, i in removed.items():
                    deleted.setdefault(binding, (i, error))
                self._memo.clear()
        results: list[list[tuple[Binding, str | None]]] = [[] for _ in filters]
        for binding, (i, error) in deleted.items():
            results[i].append((binding, error))
        return results

    async def process_changes(self, changes_path: str) -> None:
        """A change notification arrived (cluster mode): re-read what it names."""
        assert isinstance(self.store, ZkAclStore)
        if await self.store.process_changes(changes_path):
            self._memo.clear()

    async def reload(self) -> None:
        """Read every ACL again (a new ZooKeeper session)."""
        async with self._writing:
            await self.store.load()
            self._memo.clear()


def _removal(
    pattern: ResourcePattern, filters: list[AclBindingFilter], matching: list[int]
) -> tuple[Callable[[Acls], Acls], dict[Binding, int]]:
    """The change that removes what the matching filters match from a pattern's ACLs, and the
    bindings it removed (by the first filter that matched each), filled when it runs."""
    removed: dict[Binding, int] = {}

    def without(current: Acls) -> Acls:
        removed.clear()  # a retried update starts over
        for entry in current:
            for i in matching:
                if filters[i].entry.matches(entry):
                    removed.setdefault((pattern, entry), i)
        return current - {entry for _, entry in removed}

    return without, removed


def _audit(
    principal: str,
    allowed: bool,
    operation: AclOperation,
    host: str,
    resource: str,
    request: str,
    count: int,
) -> None:
    audit.log(
        logging.DEBUG if allowed else logging.INFO,
        "Principal = %s is %s Operation = %s from host = %s on resource = %s for request = %s "
        "with resourceRefCount = %d",
        principal,
        "Allowed" if allowed else "Denied",
        kafka_name(operation),
        host,
        resource,
        request,
        count,
    )


__all__ = ["ACL_AUTHORIZER_NAMES", "CLUSTER_NAME", "AclAuthorizer"]
