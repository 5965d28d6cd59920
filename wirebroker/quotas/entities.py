"""Client quota entities and their configs, as Kafka keeps them in ZooKeeper.

A quota entity is a user, a client id, or a user and a client id, each either named or the
default (`<default>`); its config lives at `/config/users/<user>`, `/config/clients/<client>`
or `/config/users/<user>/clients/<client>` (names URL-encoded by Kafka's Sanitizer), and the
`/config/changes` notification of a change names that path without `/config/`
(`users/alice/clients/app`). A user's config holds its SCRAM credentials too; the quota keys
sit beside them. An `ip` entity (an IP address, a host name, or the default; never with a user
or client id) holds `connection_creation_rate` (KIP-612) at `/config/ips/<ip>`. :class:`QuotaEntity` keeps the sanitized names, so it maps one to one onto
those paths; the wire names (AlterClientQuotas, DescribeClientQuotas) are the desanitized
ones, with null for the default.

This module owns Kafka's rules for them (ZkAdminManager): which entity combinations and keys
an alteration may name, how values are checked and written (a long quota must be a whole
number), and how a DescribeClientQuotas filter selects entities. Pure: no I/O.

An `ip` entity's host name must resolve (checked where the resolver may be asked,
`wirebroker.handlers.client_quotas`, as `check_ip_resolved`); its quota applies to the address
it resolves to, as Kafka's.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from protocol.errors import ErrorCode, KafkaError
from wirebroker.config import INT_MAX, LONG_MAX
from wirebroker.zk.sanitizer import desanitize, sanitize

#: ZooKeeperInternals.DEFAULT_STRING: the default user or client id in paths and configs.
DEFAULT = "<default>"
USER, CLIENT_ID, IP = "user", "client-id", "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
#: The client quota keys and their types (Kafka's QuotaConfigs.userAndClientQuotaConfigs).
QUOTA_KEYS = {
    PRODUCER_BYTE_RATE: "long",
    CONSUMER_BYTE_RATE: "long",
    REQUEST_PERCENTAGE: "double",
    CONTROLLER_MUTATION_RATE: "double",
}
#: An ip entity's quota key and its type (Kafka's QuotaConfigs.ipConfigs).
IP_QUOTA_KEYS = {CONNECTION_CREATION_RATE: "int"}
#: Keys a user's config may also hold (its SCRAM credentials), which are not quotas.
SCRAM_KEYS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaEntity(NamedTuple):
    """A user, a client id or both, or an ip, by sanitized name (`DEFAULT` for the default);
    None where the entity has no such part."""

    user: str | None
    client_id: str | None
    ip: str | None = None

    @property
    def path(self) -> str:
        """Where its config lives under `/config` (and the notification's entity path)."""
        if self.ip is not None:
            return f"ips/{self.ip}"
        if self.user is None:
            return f"clients/{self.client_id}"
        if self.client_id is None:
            return f"users/{self.user}"
        return f"users/{self.user}/clients/{self.client_id}"

    @classmethod
    def from_path(cls, path: str) -> QuotaEntity | None:
        """The entity of `users/<u>`, `users/<u>/clients/<c>`, `clients/<c>` or `ips/<ip>`;
        None for any other path (topics, brokers)."""
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == "ips":
            return cls(None, None, parts[1])
        if len(parts) == 2 and parts[0] == "users":
            return cls(parts[1], None)
        if len(parts) == 2 and parts[0] == "clients":
            return cls(None, parts[1])
        if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
            return cls(parts[1], parts[3])
        return None

    def components(self) -> list[tuple[str, str | None]]:
        """(entity type, name) as the wire carries them: desanitized, None for the default."""
        out = []
        if self.user is not None:
            out.append((USER, _wire_name(self.user)))
        if self.client_id is not None:
            out.append((CLIENT_ID, _wire_name(self.client_id)))
        if self.ip is not None:
            out.append((IP, _wire_name(self.ip)))
        return out

    @classmethod
    def from_components(cls, components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
        """An AlterClientQuotas entity, checked as Kafka checks it (INVALID_REQUEST)."""
        named: dict[str, str | None] = {}
        for entity_type, name in components:
            if entity_type not in (USER, CLIENT_ID, IP):
                raise _invalid(f"Unhandled client quota entity type: {entity_type}")
            if name == "":
                raise _invalid(f"Empty {entity_type} not supported")
            named[entity_type] = name  # a type given twice: the last one, as Kafka's map
        if not named:
            raise _invalid("Invalid empty client quota entity")
        if IP in named:
            if len(named) > 1:
                raise _invalid(
                    "Invalid quota entity combination, IP entity should not be used with "
                    "user/client ID entity."
                )
            return cls(None, None, _sanitized(named[IP]))
        return cls(
            _sanitized(named[USER]) if USER in named else None,
            _sanitized(named[CLIENT_ID]) if CLIENT_ID in named else None,
        )

    def allowed_keys(self) -> frozenset[str]:
        """Keys its config may hold (Kafka's DynamicConfig.User, .Client or .Ip)."""
        if self.ip is not None:
            return _IP_KEYS
        if self.client_id is None and self.user not in (None, DEFAULT):
            return _USER_KEYS
        return _CLIENT_KEYS

    def quota_keys(self) -> Mapping[str, str]:
        """Its quota keys and their types."""
        return IP_QUOTA_KEYS if self.ip is not None else QUOTA_KEYS


_CLIENT_KEYS = frozenset(QUOTA_KEYS)
_USER_KEYS = _CLIENT_KEYS | SCRAM_KEYS
_IP_KEYS = frozenset(IP_QUOTA_KEYS)


def ip_address(name: str) -> str | None:
    """The canonical text of an IP address (an IPv4-mapped IPv6 one as IPv4, as Java's
    InetAddress has it); None when `name` is not one."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def check_ip_resolved(entity: QuotaEntity, address: str | None) -> None:
    """Kafka's DynamicConfig.Ip.isValidIpEntity: a named ip entity must be an address or a
    host name that resolves (`address`, what it resolved to)."""
    if entity.ip is not None and entity.ip != DEFAULT and address is None:
        raise _invalid(f"{desanitize(entity.ip)} is not a valid IP or resolvable host.")


def _sanitized(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


def _wire_name(sanitized: str) -> str | None:
    return None if sanitized == DEFAULT else desanitize(sanitized)


def _invalid(message: str) -> KafkaError:
    return KafkaError(message, error_code=ErrorCode.INVALID_REQUEST)


def quota_values(entity: QuotaEntity, config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's config, as numbers (a user's SCRAM keys left out); a
    value that is not a number is skipped."""
    out = {}
    keys = entity.quota_keys()
    for key, text in config.items():
        if key in keys:
            try:
                out[key] = float(text)
            except ValueError:
                continue
    return out


def altered(
    entity: QuotaEntity, config: Mapping[str, str], ops: Iterable[tuple[str, float | None]]
) -> dict[str, str]:
    """The entity's config after AlterClientQuotas' (key, value or None to remove) ops, as
    Kafka's ZkAdminManager applies them: a removal of any key is fine; a set names a key the
    entity may hold, and a long quota's value must be a whole number."""
    out = dict(config)
    allowed = entity.allowed_keys()
    for key, value in ops:
        if value is None:
            out.pop(key, None)
            continue
        if key not in allowed:
            raise _invalid(f"Invalid configuration key {key}")
        kind = entity.quota_keys().get(key)
        if kind is None:  # a SCRAM key: Kafka fails on its STRING type
            raise KafkaError(
                "Unexpected config type STRING", error_code=ErrorCode.UNKNOWN_SERVER_ERROR
            )
        if kind == "double":
            out[key] = repr(float(value))
            continue
        whole = _to_whole(value + 1e-6, INT_MAX if kind == "int" else LONG_MAX)
        if abs(float(whole) - value) > 1e-6:  # never for NaN, which Kafka takes as 0
            raise _invalid(f"Configuration {key} must be a {kind.upper()} value")
        out[key] = str(whole)
    return out


def _to_whole(value: float, most: int) -> int:
    """Scala's Double.toInt or toLong (`most` the type's largest): NaN is 0, beyond the type's
    range (infinities too) its bound, else the value truncated."""
    if math.isnan(value):
        return 0
    if value >= most:
        return most
    if value <= -most - 1:
        return -most - 1
    return int(value)


def check_stored(entity: QuotaEntity, config: Mapping[str, str]) -> None:
    """Kafka's AdminZkClient.validateIpConfig before an ip entity's config is written (not
    for validate_only): `connection_creation_rate` is at least 0. Its ConfigException is no
    API error: UNKNOWN_SERVER_ERROR."""
    rate = config.get(CONNECTION_CREATION_RATE)
    if entity.ip is not None and rate is not None and int(rate) < 0:
        raise KafkaError(
            f"Invalid value {rate} for configuration {CONNECTION_CREATION_RATE}: "
            "Value must be at least 0",
            error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
        )


class FilterComponent(NamedTuple):
    """One DescribeClientQuotas filter component: an entity type and how its name matches."""

    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: list[FilterComponent]) -> None:
    """Kafka's checks of a DescribeClientQuotas filter (INVALID_REQUEST, or
    UNSUPPORTED_VERSION for an entity type it does not know)."""
    seen: set[str] = set()
    for c in components:
        if c.entity_type in (USER, CLIENT_ID, IP):
            if c.entity_type in seen:
                kind = "client" if c.entity_type == CLIENT_ID else c.entity_type
                raise _invalid(f"Duplicate {kind} filter component entity type")
            seen.add(c.entity_type)
        elif c.entity_type == "":
            raise _invalid("Unexpected empty filter component entity type")
        else:
            raise KafkaError(
                f"Custom entity type '{c.entity_type}' not supported",
                error_code=ErrorCode.UNSUPPORTED_VERSION,
            )
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED) or (
            c.match_type == MATCH_EXACT and c.match is None
        ):
            # Kafka fails to build the filter (an unexpected error, as there)
            raise KafkaError(
                f"Unexpected match type {c.match_type} with match {c.match!r}",
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            )
    if IP in seen and len(seen) > 1:
        raise _invalid(
            "Invalid entity filter component combination, IP filter component should not be "
            "used with user or clientId filter component."
        )


def described(
    configs: Mapping[QuotaEntity, Mapping[str, str]],
    components: list[FilterComponent],
    strict: bool,
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities a (checked) filter selects, with their quota values, in path order.

    As Kafka: a component matches its part of an entity by exact name, as the default, or
    as any name given (the default included); a part the filter does not name is matched
    only when absent if `strict`, and always otherwise; entities without quota values are
    left out (a user with only SCRAM credentials). So a filter with an `ip` component selects
    only ip entities, one with a user or client id component no ip entity."""
    wanted = {c.entity_type: c for c in components}
    out = []
    for entity, config in sorted(configs.items(), key=lambda kv: kv[0].path):
        values = quota_values(entity, config)
        if (
            values
            and _matches(wanted.get(USER), entity.user, strict)
            and _matches(wanted.get(CLIENT_ID), entity.client_id, strict)
            and _matches(wanted.get(IP), entity.ip, strict)
        ):
            out.append((entity, values))
    return out


def _matches(component: FilterComponent | None, name: str | None, strict: bool) -> bool:
    if component is None:
        return name is None or not strict
    if component.match_type == MATCH_SPECIFIED:
        return name is not None
    if component.match_type == MATCH_DEFAULT:
        return name == DEFAULT
    return name == sanitize(component.match or "")
