"""Kafka's ACL vocabulary: resource and pattern types, operations, permissions, bindings, filters.

The enums carry Kafka's wire codes (org.apache.kafka.common.acl / .resource); their names in
ZooKeeper paths, JSON and logs are Kafka's Pascal case (`TransactionalId`, `IdempotentWrite`),
read back in either that form or upper case, as Kafka's SecurityUtils does. A binding is a
`ResourcePattern` plus an `AccessControlEntry`; filters match bindings as Kafka's
`AclBindingFilter` does (ANY matches everything of its field, MATCH matches the patterns that
would apply to a literal name: that name, the wildcard, and every prefix of it). The JSON of a
resource's ACLs is Kafka's AclEntry JSON (`{"version":1,"acls":[...]}`), as ZooKeeper holds it.

Pure: no I/O, no trio.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from protocol.errors import ErrorCode


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The one name of the CLUSTER resource.
CLUSTER_NAME = "kafka-cluster"
#: A resource name or host that matches every one.
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
#: Resource types an ACL may name (not UNKNOWN or ANY).
CONCRETE_RESOURCE_TYPES = tuple(t for t in ResourceType if t > ResourceType.ANY)

#: What each resource type can be asked for (Kafka's AclEntry.supportedOperations); the
#: authorized-operations bit fields list these.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

#: The operations whose ALLOW also allows the key (READ, WRITE, DELETE and ALTER imply
#: DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS). ALL allows everything; DENY is never
#: implied.
ALLOWED_BY: dict[AclOperation, tuple[AclOperation, ...]] = {
    AclOperation.DESCRIBE: (
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    ),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}

#: The error a request refused on a resource of each type is answered with (Kafka's
#: AclEntry.authorizationError).
AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}
#: Kafka's messages of the authorization errors (its Errors enum), where a response carries one.
AUTHORIZATION_MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}

#: The authorized-operations value of a response that was not asked for them (Int.MinValue).
NOT_REQUESTED = -(2**31)

E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)


def operations_bits(operations: Iterable[AclOperation]) -> int:
    """Kafka's authorized-operations bit field: bit N set for the operation of code N."""
    bits = 0
    for op in operations:
        bits |= 1 << op
    return bits


def from_code(kind: type[E], code: int) -> E:
    """The member with this wire code; UNKNOWN for a code Kafka does not know."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def kafka_name(value: IntEnum) -> str:
    """Kafka's Pascal-case name: `TRANSACTIONAL_ID` -> `TransactionalId`."""
    return "".join(part.capitalize() for part in value.name.split("_"))


def parse_name(kind: type[E], text: str) -> E:
    """A member from its Pascal-case or upper-case name (Kafka's SecurityUtils); else UNKNOWN."""
    for member in kind:
        if text in (kafka_name(member), kafka_name(member).upper()):
            return member
    return kind(0)


def parse_principal(text: str) -> tuple[str, str]:
    """`Type:name` as Kafka's SecurityUtils.parseKafkaPrincipal: ValueError without a colon."""
    kind, sep, name = text.partition(":")
    if not text or not sep:
        raise ValueError(f"expected a principal as principalType:principalName, got {text!r}")
    return kind, name


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """The resources an ACL applies to: one name (LITERAL, or `*` for all) or a PREFIXED one."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"{kafka_name(self.resource_type)}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (principal, from which host) is allowed or denied which operation."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def to_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": kafka_name(self.permission_type),
            "operation": kafka_name(self.operation),
            "host": self.host,
        }


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Matches resource patterns; ANY type or pattern type, and a None name, match all."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns that apply to the literal name
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD)
        return self.name.startswith(pattern.name)

    def matches_at_most_one(self) -> bool:
        """Names exactly one pattern (no ANY/UNKNOWN type, a name, no MATCH/UNKNOWN pattern)."""
        return (
            self.resource_type > ResourceType.ANY
            and self.name is not None
            and self.pattern_type not in (PatternType.MATCH, PatternType.UNKNOWN)
        )

    def candidates(self) -> list[ResourcePattern]:
        """The patterns a filter that matches at most one can name (Kafka's filterToResources:
        ANY names both the literal and the prefixed pattern)."""
        assert self.name is not None
        if self.pattern_type == PatternType.ANY:
            kinds = [PatternType.LITERAL, PatternType.PREFIXED]
        else:
            kinds = [self.pattern_type]
        return [ResourcePattern(self.resource_type, self.name, kind) for kind in kinds]


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Matches entries; a None principal or host and ANY operation or permission match all."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def matches(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and self.operation in (AclOperation.ANY, entry.operation)
            and self.permission_type in (AclPermissionType.ANY, entry.permission_type)
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    def matches(self, pattern: ResourcePattern, entry: AccessControlEntry) -> bool:
        return self.pattern.matches(pattern) and self.entry.matches(entry)


def storable(pattern: ResourcePattern, entry: AccessControlEntry) -> bool:
    """Whether Kafka's authorizer stores the binding: no UNKNOWN element, no `/` in the name."""
    return (
        pattern.resource_type != ResourceType.UNKNOWN
        and pattern.pattern_type != PatternType.UNKNOWN
        and entry.operation != AclOperation.UNKNOWN
        and entry.permission_type != AclPermissionType.UNKNOWN
        and "/" not in pattern.name
    )


def acls_to_json(entries: frozenset[AccessControlEntry]) -> bytes:
    """Kafka's JSON of one resource's ACLs, compact, in a stable order."""
    acls = [e.to_json() for e in sorted(entries, key=_entry_order)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def acls_from_json(data: bytes | None) -> frozenset[AccessControlEntry]:
    """Parse Kafka's JSON of one resource's ACLs (empty data: none); ValueError if malformed."""
    if not data:
        return frozenset()
    obj = json.loads(data)
    if not isinstance(obj, dict) or obj.get("version") != 1:
        raise ValueError(f"unsupported ACL JSON: {data[:200]!r}")
    return frozenset(acl_from_json(item) for item in obj.get("acls") or [])


def acl_from_json(item: dict[str, str]) -> AccessControlEntry:
    kind, name = parse_principal(str(item["principal"]))
    return AccessControlEntry(
        f"{kind}:{name}",
        str(item["host"]),
        parse_name(AclOperation, str(item["operation"])),
        parse_name(AclPermissionType, str(item["permissionType"])),
    )


def _entry_order(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission_type))
