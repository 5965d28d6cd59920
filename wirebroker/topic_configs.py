"""Topic configs: Kafka's topic-level keys, their broker synonyms, defaults and sources.

This module owns the rules DescribeConfigs reports and CreateTopics/AlterConfigs validate: a
topic key's value comes from the topic's own override (source DYNAMIC_TOPIC_CONFIG), else from
the broker's synonym -- set dynamically for this broker or as the cluster default, or in
`server.properties` (`wirebroker.config_sources` lists them in Kafka's order) -- else Kafka's
default (DEFAULT_CONFIG). It also turns the effective values into storage's `LogConfig`; as
the broker's values are read when a LogConfig is made, a dynamic change of a broker default
reaches every topic without an override of its own once its LogConfig is made again.

The keys are Kafka 3.9's whole topic-config list (``LogConfig``). Some are accepted, validated
as Kafka validates them, stored and described, but change nothing here: ``message.format.version``
and ``message.downconversion.enable`` (Kafka 3.x always stores v2 and we never down-convert),
and the tiered-storage keys ``local.retention.*`` and ``remote.log.*`` (no tiered storage:
``remote.storage.enable=true`` is refused, as Kafka refuses it on a broker without
``remote.log.storage.system.enable``). The ``*.replication.throttled.replicas`` lists are the
replication throttles of `wirebroker.quotas.replication`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, KafkaError
from storage.config import LogConfig
from wirebroker.config import BrokerConfig, broker_synonyms
from wirebroker.config_sources import (
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    TYPE_CODES,
    ConfigValue,
    Synonym,
    config_synonyms,
)
from wirebroker.quotas.replication import valid_throttled_replicas

if TYPE_CHECKING:
    from wirebroker.broker import Broker
    from wirebroker.topics import TopicRecord


class TopicKey:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("name", "type", "default", "broker_synonym", "doc")

    def __init__(
        self, name: str, type: str, default: str | None, broker_synonym: str | None, doc: str
    ) -> None:
        self.name = name
        self.type = type
        self.default = default
        self.broker_synonym = broker_synonym
        self.doc = doc


_WEEK_MS = str(7 * 24 * 3600 * 1000)
_LONG_MAX = str(2**63 - 1)

TOPIC_KEYS: dict[str, TopicKey] = {
    k.name: k
    for k in [
        TopicKey(
            "cleanup.policy", "list", "delete", "log.cleanup.policy", "delete, compact, or both"
        ),
        TopicKey(
            "compression.gzip.level",
            "int",
            "-1",
            "compression.gzip.level",
            "gzip level when the broker compresses",
        ),
        TopicKey(
            "compression.lz4.level",
            "int",
            "9",
            "compression.lz4.level",
            "lz4 level when the broker compresses",
        ),
        TopicKey("compression.type", "string", "producer", "compression.type", "Final compression"),
        TopicKey(
            "compression.zstd.level",
            "int",
            "3",
            "compression.zstd.level",
            "zstd level when the broker compresses",
        ),
        TopicKey(
            "delete.retention.ms",
            "long",
            "86400000",
            "log.cleaner.delete.retention.ms",
            "How long tombstones are kept",
        ),
        TopicKey(
            "file.delete.delay.ms",
            "long",
            "60000",
            "log.segment.delete.delay.ms",
            "Delay before deleting a file",
        ),
        TopicKey(
            "flush.messages",
            "long",
            _LONG_MAX,
            "log.flush.interval.messages",
            "fsync interval in messages",
        ),
        TopicKey("flush.ms", "long", _LONG_MAX, "log.flush.interval.ms", "fsync interval in ms"),
        TopicKey(
            "follower.replication.throttled.replicas",
            "list",
            "",
            None,
            "Replicas throttled on the follower side",
        ),
        TopicKey(
            "index.interval.bytes",
            "int",
            "4096",
            "log.index.interval.bytes",
            "Bytes between index entries",
        ),
        TopicKey(
            "leader.replication.throttled.replicas",
            "list",
            "",
            None,
            "Replicas throttled on the leader side",
        ),
        TopicKey(
            "local.retention.bytes",
            "long",
            "-2",
            "log.local.retention.bytes",
            "Tiered storage local size (no effect here)",
        ),
        TopicKey(
            "local.retention.ms",
            "long",
            "-2",
            "log.local.retention.ms",
            "Tiered storage local time (no effect here)",
        ),
        TopicKey(
            "max.compaction.lag.ms",
            "long",
            _LONG_MAX,
            "log.cleaner.max.compaction.lag.ms",
            "Latest a record stays uncompacted",
        ),
        TopicKey(
            "max.message.bytes", "int", "1048588", "message.max.bytes", "Largest record batch"
        ),
        TopicKey(
            "message.downconversion.enable",
            "boolean",
            "true",
            "log.message.downconversion.enable",
            "Down-convert for old consumers (deprecated; no effect here)",
        ),
        TopicKey(
            "message.format.version",
            "string",
            "3.0-IV1",
            "log.message.format.version",
            "Message format (deprecated; no effect here)",
        ),
        TopicKey(
            "message.timestamp.after.max.ms",
            "long",
            _LONG_MAX,
            "log.message.timestamp.after.max.ms",
            "Future timestamp bound",
        ),
        TopicKey(
            "message.timestamp.before.max.ms",
            "long",
            _LONG_MAX,
            "log.message.timestamp.before.max.ms",
            "Past timestamp bound",
        ),
        TopicKey(
            "message.timestamp.difference.max.ms",
            "long",
            _LONG_MAX,
            "log.message.timestamp.difference.max.ms",
            "Timestamp bound both ways (deprecated)",
        ),
        TopicKey(
            "message.timestamp.type",
            "string",
            "CreateTime",
            "log.message.timestamp.type",
            "CreateTime or LogAppendTime",
        ),
        TopicKey(
            "min.cleanable.dirty.ratio",
            "double",
            "0.5",
            "log.cleaner.min.cleanable.ratio",
            "Dirty ratio before compaction",
        ),
        TopicKey(
            "min.compaction.lag.ms",
            "long",
            "0",
            "log.cleaner.min.compaction.lag.ms",
            "Earliest a record is compacted",
        ),
        TopicKey(
            "min.insync.replicas", "int", "1", "min.insync.replicas", "ISR size needed for acks=all"
        ),
        TopicKey("preallocate", "boolean", "false", "log.preallocate", "Preallocate segment files"),
        TopicKey(
            "remote.log.copy.disable",
            "boolean",
            "false",
            None,
            "Stop copying to tiered storage (no effect here)",
        ),
        TopicKey(
            "remote.log.delete.on.disable",
            "boolean",
            "false",
            None,
            "Delete tiered data on disable (no effect here)",
        ),
        TopicKey("remote.storage.enable", "boolean", "false", None, "Tiered storage (unsupported)"),
        TopicKey(
            "retention.bytes", "long", "-1", "log.retention.bytes", "Size to keep per partition"
        ),
        TopicKey("retention.ms", "long", _WEEK_MS, "log.retention.ms", "Time to keep records"),
        TopicKey("segment.bytes", "int", "1073741824", "log.segment.bytes", "Segment size"),
        TopicKey(
            "segment.index.bytes", "int", "10485760", "log.index.size.max.bytes", "Index file size"
        ),
        TopicKey(
            "segment.jitter.ms", "long", "0", "log.roll.jitter.ms", "Random jitter on segment.ms"
        ),
        TopicKey("segment.ms", "long", _WEEK_MS, "log.roll.ms", "Roll a segment after this long"),
        TopicKey(
            "unclean.leader.election.enable",
            "boolean",
            "false",
            "unclean.leader.election.enable",
            "Allow out-of-sync leaders",
        ),
    ]
}


#: The broker keys that are defaults of topic configs, with their synonyms (Kafka's
#: DynamicLogConfig keys): a change of one makes every log's LogConfig again.
LOG_KEYS = frozenset(
    name
    for key in TOPIC_KEYS.values()
    if key.broker_synonym is not None
    for name in broker_synonyms(key.broker_synonym, match_listener_override=False)
)
_SCALES = {".hours": 3_600_000, ".minutes": 60_000}


def _broker_value(config: BrokerConfig, key: TopicKey) -> str | None:
    """The broker's current setting of a topic key's synonym (dynamic or static), in the
    topic key's unit (`log.retention.hours` in ms), or None when none is set."""
    if key.broker_synonym is None:
        return None
    for name in broker_synonyms(key.broker_synonym, match_listener_override=False):
        value = config.get(name) if config.is_set(name) else None
        if value is None:
            continue
        scale = next((f for suffix, f in _SCALES.items() if name.endswith(suffix)), 1)
        if scale == 1:
            return value
        return str(max(int(value) * scale, -1))
    return None


def effective_values(config: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigValue]:
    out = []
    for key in TOPIC_KEYS.values():
        synonyms: list[Synonym] = []
        value: str | None
        if key.name in overrides:
            value = overrides[key.name]
            synonyms.append((key.name, value, DYNAMIC_TOPIC_CONFIG))
        else:
            value = _broker_value(config, key)
            if value is None:
                value = key.default
        if key.broker_synonym is not None:
            names = broker_synonyms(key.broker_synonym, match_listener_override=True)
            synonyms += config_synonyms(config, key.broker_synonym, names, sensitive=False)
        out.append(
            ConfigValue(
                key.name,
                value,
                synonyms[0][2] if synonyms else DEFAULT_CONFIG,
                False,
                False,
                TYPE_CODES[key.type],
                key.doc,
                key.default,
                tuple(synonyms),
            )
        )
    return out


def validate_overrides(overrides: Mapping[str, str]) -> None:
    for name, value in overrides.items():
        key = TOPIC_KEYS.get(name)
        if key is None:
            raise KafkaError(f"unknown topic config {name!r}", error_code=ErrorCode.INVALID_CONFIG)
        try:
            if key.type in ("int", "long", "short"):
                int(value)
            elif key.type == "double":
                float(value)
            elif key.type == "boolean" and value.lower() not in ("true", "false"):
                raise ValueError
        except ValueError:
            raise KafkaError(
                f"invalid value {value!r} for {name}: expected a {key.type}",
                error_code=ErrorCode.INVALID_CONFIG,
            ) from None
        _check_accepted_only(name, value)


#: What Kafka 3.9 accepts for ``message.format.version``: a MetadataVersion from 0.8.0 on.
_FORMAT_VERSION = re.compile(r"0\.8\.[0-2]|0\.9\.0|0\.1[01]\.\d(-IV\d)?|[1-9]\.\d+(-IV\d+)?")


def _check_accepted_only(name: str, value: str) -> None:
    """Kafka's validators of the keys that are stored and described but have no effect here."""
    if name == "message.format.version":
        ok = _FORMAT_VERSION.fullmatch(value.strip()) is not None
    elif name.endswith(".replication.throttled.replicas"):
        if not valid_throttled_replicas(value):
            raise KafkaError(
                f"Invalid value {value} for configuration {name}: {name} must be the literal "
                "'*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
                error_code=ErrorCode.INVALID_CONFIG,
            )
        return
    elif name.startswith("local.retention."):
        ok = int(value) >= -2
    elif name == "remote.storage.enable" and value.lower() == "true":
        raise KafkaError(
            "tiered storage functionality is disabled in the broker",
            error_code=ErrorCode.INVALID_CONFIG,
        )
    else:
        return
    if not ok:
        raise KafkaError(f"invalid value {value!r} for {name}", error_code=ErrorCode.INVALID_CONFIG)


def log_config_for(config: BrokerConfig, overrides: Mapping[str, str]) -> LogConfig:
    """Storage's LogConfig for a topic with these overrides (validated first)."""
    validate_overrides(overrides)
    values = {v.name: v.value for v in effective_values(config, overrides) if v.value is not None}
    try:
        return LogConfig.from_properties(values)
    except ValueError as e:
        raise KafkaError(str(e), error_code=ErrorCode.INVALID_CONFIG) from e


def describe_topic_configs(broker: Broker, record: TopicRecord) -> list[ConfigValue]:
    return effective_values(broker.config, record.configs)


def min_insync_replicas(config: BrokerConfig, overrides: Mapping[str, str]) -> int:
    """The topic's `min.insync.replicas` (its override, else the broker's, else 1)."""
    value = overrides.get("min.insync.replicas")
    if value is None:
        value = config.get("min.insync.replicas") or "1"
    try:
        return max(int(value), 1)
    except ValueError:
        return 1
