"""The znodes of a Kafka cluster in ZooKeeper: their paths and their JSON, exactly as Kafka 3.9 writes it.

One small dataclass per kind of znode, each with `encode() -> bytes` and `decode(bytes)`. The
JSON is compact (no spaces) with the keys Kafka uses, so Kafka's own tools (kafka-topics
--zookeeper, zookeeper-shell) read what we write and we read what they write. This module is
pure: no ZooKeeper client, no trio. See docs/cluster.md for the layout.

Kafka's quirks kept on purpose: `/controller_epoch` holds a bare decimal number; timestamps
and producer id block bounds are JSON strings; `/cluster/id`'s version is the string "1";
a broker's `rack` key is absent when it has no rack; a partition state's
`leader_recovery_state` is written only when it is not RECOVERED (0); a topic's
`adding_replicas`/`removing_replicas` list only partitions being reassigned.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from wirebroker.authorizer.acls import (
    PatternType,
    ResourcePattern,
    ResourceType,
    kafka_name,
)

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_BROKERS = "/config/brokers"
CONFIG_IPS = "/config/ips"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
DELEGATION_TOKENS = "/delegation_token/tokens"
# ACLs (AclAuthorizer): literal patterns under /kafka-acl, prefixed ones under
# /kafka-acl-extended/prefixed, each /<ResourceType>/<name>; a change of either kind is announced
# by a sequential znode under its own changes path.
ACL_ROOTS = {
    PatternType.LITERAL: "/kafka-acl",
    PatternType.PREFIXED: "/kafka-acl-extended/prefixed",
}
ACL_CHANGES = {
    PatternType.LITERAL: "/kafka-acl-changes",
    PatternType.PREFIXED: "/kafka-acl-extended-changes",
}
ACL_CHANGE_PREFIX = "acl_changes_"

#: The persistent paths Kafka creates at start-up (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (
    "/consumers",
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    "/admin",
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    CONFIG_CLIENTS,
    CONFIG_TOPICS,
    CONFIG_USERS,
    CONFIG_BROKERS,
    CONFIG_IPS,
    LOG_DIR_EVENT_NOTIFICATION,
    LATEST_PRODUCER_ID_BLOCK,
)

NO_LEADER = -1
#: The leader a partition of a topic being deleted is reported with (Kafka's LeaderDuringDelete).
LEADER_DURING_DELETE = -2


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _load(data: bytes | None) -> Any:
    if not data:
        raise ValueError("empty znode")
    return json.loads(data)


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


# paths ------------------------------------------------------------------------------------
def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """`/config/brokers/<id>`, or `/config/brokers/<default>` for the cluster-wide default."""
    return f"{CONFIG_BROKERS}/{entity}"


def user_config_path(sanitized_user: str) -> str:
    return f"{CONFIG_USERS}/{sanitized_user}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def sequence_number(child: str) -> int:
    """The number ZooKeeper appended to a sequential znode's name (`config_change_0000000007`
    -> 7); -1 for a name without one."""
    try:
        return int(child.rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return -1


def acl_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{ACL_ROOTS[pattern_type]}/{kafka_name(resource_type)}"


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of one resource pattern's ACLs (their JSON: `acls.acls_to_json`)."""
    return f"{acl_type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


# znodes -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClusterIdZNode:
    """`/cluster/id`."""

    id: str

    def encode(self) -> bytes:
        return _json({"version": "1", "id": self.id})

    @classmethod
    def decode(cls, data: bytes) -> ClusterIdZNode:
        return cls(str(_load(data)["id"]))


@dataclass(frozen=True)
class Endpoint:
    """One advertised endpoint of a broker: listener name, host, port (security protocol)."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    """`/brokers/ids/<id>` (ephemeral), version 5. Its czxid is the broker epoch."""

    id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    timestamp: int = 0
    jmx_port: int = -1
    version: int = 5

    def encode(self) -> bytes:
        # Kafka's top-level host/port: the first PLAINTEXT endpoint, else null and -1.
        plain = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        obj: dict[str, Any] = {
            "features": {},
            "listener_security_protocol_map": {
                e.listener: e.security_protocol for e in self.endpoints
            },
            "endpoints": [e.connection_string() for e in self.endpoints],
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        obj.update(
            {
                "jmx_port": self.jmx_port,
                "port": plain.port if plain else -1,
                "host": plain.host if plain else None,
                "version": self.version,
                "timestamp": str(self.timestamp),
            }
        )
        return _json(obj)

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        obj = _load(data)
        protocols: dict[str, str] = obj.get("listener_security_protocol_map") or {}
        endpoints = []
        for text in obj.get("endpoints") or []:
            name, _, rest = str(text).partition("://")
            host, _, port = rest.rpartition(":")
            endpoints.append(Endpoint(name, host.strip("[]"), int(port), protocols.get(name, name)))
        if not endpoints and obj.get("host"):
            endpoints.append(Endpoint("PLAINTEXT", obj["host"], int(obj["port"])))
        return cls(
            broker_id,
            tuple(endpoints),
            obj.get("rack"),
            int(obj.get("timestamp") or 0),
            int(obj.get("jmx_port", -1)),
            int(obj.get("version", 1)),
        )

    def endpoint(self, listener: str | None = None) -> Endpoint:
        """The endpoint of `listener` (default: PLAINTEXT, else the first)."""
        for e in self.endpoints:
            if e.listener == (listener or "PLAINTEXT"):
                return e
        if listener is not None:
            raise KeyError(f"broker {self.id} has no endpoint for listener {listener}")
        return self.endpoints[0]


@dataclass(frozen=True)
class ControllerZNode:
    """`/controller` (ephemeral): who the controller is."""

    broker_id: int
    timestamp: int = 0
    kraft_controller_epoch: int = -1

    def encode(self) -> bytes:
        return _json(
            {
                "version": 2,
                "brokerid": self.broker_id,
                "timestamp": str(self.timestamp),
                "kraftControllerEpoch": self.kraft_controller_epoch,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> ControllerZNode:
        obj = _load(data)
        return cls(
            int(obj["brokerid"]),
            int(obj.get("timestamp") or 0),
            int(obj.get("kraftControllerEpoch", -1)),
        )


def encode_controller_epoch(epoch: int) -> bytes:
    """`/controller_epoch`: the bare decimal number."""
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode().strip())


@dataclass
class TopicAssignment:
    """`/brokers/topics/<t>`, version 3: replicas of each partition, topic id, reassignments."""

    partitions: dict[int, list[int]]
    topic_id: uuid.UUID | None = None
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def m(d: dict[int, list[int]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(d.items()) if r}

        obj: dict[str, Any] = {"partitions": m(self.partitions)}
        if self.topic_id is not None:
            obj["topic_id"] = topic_id_to_str(self.topic_id)
        obj.update({"adding_replicas": m(self.adding), "removing_replicas": m(self.removing)})
        obj["version"] = 3
        return _json(obj)

    @classmethod
    def decode(cls, data: bytes) -> TopicAssignment:
        obj = _load(data)

        def m(d: dict[str, list[int]] | None) -> dict[int, list[int]]:
            return {int(p): [int(b) for b in r] for p, r in (d or {}).items()}

        tid = obj.get("topic_id")
        return cls(
            m(obj.get("partitions")),
            topic_id_from_str(tid) if tid else None,
            m(obj.get("adding_replicas")),
            m(obj.get("removing_replicas")),
        )


@dataclass(frozen=True)
class PartitionState:
    """`/brokers/topics/<t>/partitions/<p>/state`: leader, leader epoch, ISR, controller epoch.

    The znode's version (not stored here) is the partition epoch.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = 0

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": 1,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }
        if self.leader_recovery_state != 0:
            obj["leader_recovery_state"] = self.leader_recovery_state
        return _json(obj)

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        obj = _load(data)
        return cls(
            int(obj["leader"]),
            int(obj["leader_epoch"]),
            tuple(int(b) for b in obj["isr"]),
            int(obj["controller_epoch"]),
            int(obj.get("leader_recovery_state", 0)),
        )


@dataclass(frozen=True)
class EntityConfig:
    """`/config/topics/<t>` (and the other `/config/<type>/<name>`): the config overrides."""

    config: dict[str, str]

    def encode(self) -> bytes:
        return _json({"version": 1, "config": dict(self.config)})

    @classmethod
    def decode(cls, data: bytes | None) -> EntityConfig:
        if not data:
            return cls({})
        obj = _load(data)
        return cls({str(k): str(v) for k, v in (obj.get("config") or {}).items()})


@dataclass(frozen=True)
class ConfigChangeNotification:
    """`/config/changes/config_change_<seq>`: which entity's config changed."""

    entity_path: str

    def encode(self) -> bytes:
        return _json({"version": 2, "entity_path": self.entity_path})

    @classmethod
    def decode(cls, data: bytes) -> ConfigChangeNotification:
        obj = _load(data)
        if int(obj.get("version", 1)) == 1:  # {"version":1,"entity_type":"topics","entity_name":t}
            return cls(f"{obj['entity_type']}/{obj['entity_name']}")
        return cls(str(obj["entity_path"]))


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    """The data of an ACL change notification: `TOPIC:name` for a literal pattern (Kafka's
    legacy form), Kafka's ExtendedAclChangeEvent JSON for a prefixed one."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return _json(
        {
            "version": 1,
            "resourceType": pattern.resource_type.name,
            "name": pattern.name,
            "patternType": pattern.pattern_type.name,
        }
    )


def decode_acl_change(pattern_type: PatternType, data: bytes) -> ResourcePattern:
    """The pattern an ACL change notification under `ACL_CHANGES[pattern_type]` names;
    ValueError if it names none (as Kafka, the type is matched in upper case)."""
    if pattern_type == PatternType.LITERAL:
        kind, sep, name = data.decode().partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:ResourceName, got {data[:200]!r}")
        return ResourcePattern(_upper_name(ResourceType, kind), name, PatternType.LITERAL)
    obj = _load(data)
    if int(obj.get("version", 1)) > 1:
        raise ValueError(f"ACL change event of unsupported version {obj['version']}")
    return ResourcePattern(
        _upper_name(ResourceType, str(obj["resourceType"])),
        str(obj["name"]),
        _upper_name(PatternType, str(obj["patternType"])),
    )


def _upper_name(kind: type[ResourceType] | type[PatternType], text: str) -> Any:
    member = kind.__members__.get(text.upper())
    if member is None or member.value <= 1:  # UNKNOWN, ANY
        raise ValueError(f"unknown {kind.__name__} {text!r} in an ACL change notification")
    return member


@dataclass(frozen=True)
class LogDirEventNotification:
    """`/log_dir_event_notification/log_dir_event_<seq>`: a log directory of `broker` failed
    (event 1, Kafka's only one)."""

    broker: int

    def encode(self) -> bytes:
        return _json({"version": 1, "broker": self.broker, "event": 1})

    @classmethod
    def decode(cls, data: bytes) -> LogDirEventNotification:
        return cls(int(_load(data)["broker"]))


@dataclass(frozen=True)
class LegacyReassignment:
    """`/admin/reassign_partitions`: target replicas per partition (the pre-KIP-455 path)."""

    partitions: dict[tuple[str, int], list[int]]

    def encode(self) -> bytes:
        return _json(
            {
                "version": 1,
                "partitions": [
                    {"topic": t, "partition": p, "replicas": list(r)}
                    for (t, p), r in sorted(self.partitions.items())
                ],
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> LegacyReassignment:
        obj = _load(data)
        return cls(
            {
                (str(e["topic"]), int(e["partition"])): [int(b) for b in e["replicas"]]
                for e in obj.get("partitions") or []
            }
        )


@dataclass(frozen=True)
class PreferredReplicaElection:
    """`/admin/preferred_replica_election`: partitions to move back to their preferred leader."""

    partitions: frozenset[tuple[str, int]]

    def encode(self) -> bytes:
        return _json(
            {
                "version": 1,
                "partitions": [{"topic": t, "partition": p} for t, p in sorted(self.partitions)],
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> PreferredReplicaElection:
        obj = _load(data)
        return cls(
            frozenset((str(e["topic"]), int(e["partition"])) for e in obj.get("partitions") or [])
        )


@dataclass(frozen=True)
class ProducerIdBlock:
    """`/latest_producer_id_block`: the last block of producer ids handed to a broker."""

    broker: int
    block_start: int
    block_end: int

    def encode(self) -> bytes:
        return _json(
            {
                "version": 1,
                "broker": self.broker,
                "block_start": str(self.block_start),
                "block_end": str(self.block_end),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        obj = _load(data)
        return cls(int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"]))
