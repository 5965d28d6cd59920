"""LogConfig: the per-topic settings the storage layer obeys, under Kafka's names and defaults.

This module owns parsing and validating Kafka 3.9 topic configs (``segment.bytes``,
``retention.ms``, ...) and the broker-level synonyms (``log.segment.bytes``, ``log.roll.hours``,
...) into one frozen value. It must not read files or know about partitions; keys it does not
own (``min.insync.replicas``, ``unclean.leader.election.enable``, ...) are ignored here and
belong to the broker.

Our own addition, named with a ``wirebroker.`` prefix so it can never collide with a Kafka key:
``wirebroker.fsync.before.ack`` (default false) -- fsync before an append returns, for users who
want power-loss safety rather than Kafka's replication-only durability.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.compression import CompressionType
from protocol.record_batch import DEFAULT_MAX_DECOMPRESSED_BYTES, TimestampType
from storage.errors import InvalidConfigError

__all__ = ["DEFAULT_MAX_MAP_KEYS", "LONG_MAX", "LogConfig", "max_map_keys"]

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
#: How far one compressed batch may inflate, as a multiple of ``max.message.bytes`` ...
_INFLATION_FACTOR = 64
#: ... but never past this, whatever ``max.message.bytes`` says.
_MAX_INFLATION_BYTES = 1024 * 1024 * 1024
#: Bytes per offset map entry in Kafka's ``SkimpyOffsetMap``: a 16-byte MD5 and an 8-byte offset.
MAP_ENTRY_BYTES = 24


def max_map_keys(dedupe_buffer_size: int, load_factor: float) -> int:
    """Keys one compaction pass (:mod:`storage.cleaner`) may map: Kafka's ``slots *
    log.cleaner.io.buffer.load.factor``. Here, not in the cleaner, so that a start does not
    import the cleaner (start-up time, docs/perf-notes.md)."""
    return max(1, int(dedupe_buffer_size // MAP_ENTRY_BYTES * load_factor))


#: Kafka's defaults: ``log.cleaner.dedupe.buffer.size`` 128 MiB, load factor 0.9.
DEFAULT_MAX_MAP_KEYS = max_map_keys(134217728, 0.9)

#: ``compression.type`` value -> codec id, or None for "producer" (keep what the client sent).
COMPRESSION_TYPES: dict[str, int | None] = {
    "producer": None,
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
_TIMESTAMP_TYPES = {
    "CreateTime": TimestampType.CREATE_TIME,
    "LogAppendTime": TimestampType.LOG_APPEND_TIME,
}
_POLICIES = ("compact", "delete")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One topic's storage configuration; the field doc names the Kafka key."""

    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    segment_jitter_ms: int = 0  # segment.jitter.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1: forever)
    retention_bytes: int = -1  # retention.bytes (-1: unbounded)
    cleanup_policy: tuple[str, ...] = ("delete",)  # cleanup.policy
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    flush_messages: int = LONG_MAX  # flush.messages
    flush_ms: int = LONG_MAX  # flush.ms
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME  # message.timestamp.type
    message_timestamp_before_max_ms: int = LONG_MAX  # message.timestamp.before.max.ms
    message_timestamp_after_max_ms: int = LONG_MAX  # message.timestamp.after.max.ms
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    compression_type: str = "producer"  # compression.type
    compression_gzip_level: int = -1  # compression.gzip.level (-1: zlib's default)
    compression_lz4_level: int = 9  # compression.lz4.level
    compression_zstd_level: int = 3  # compression.zstd.level
    preallocate: bool = False  # preallocate
    fsync_before_ack: bool = False  # wirebroker.fsync.before.ack (ours)

    # ---- derived ---------------------------------------------------------------------------

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def target_compression(self) -> int | None:
        """The codec appends are stored with, or None to keep the producer's."""
        return COMPRESSION_TYPES[self.compression_type]

    @property
    def target_compression_level(self) -> int | None:
        """The ``compression.<codec>.level`` appends are recompressed with (KIP-390)."""
        levels: dict[int | None, int] = {
            CompressionType.GZIP: self.compression_gzip_level,
            CompressionType.LZ4: self.compression_lz4_level,
            CompressionType.ZSTD: self.compression_zstd_level,
        }
        return levels.get(self.target_compression)

    @property
    def max_decompressed_bytes(self) -> int:
        """The most a leader inflates one compressed batch to when validating it.

        Kafka sets no bound (a decompression bomb costs it heap); we bound the buffer by 64 x
        ``max.message.bytes`` -- 64 MiB at the default -- with a 64 MiB floor and a 1 GiB
        ceiling. Producers close a batch by its estimated compressed size, so a 1 MiB batch of
        very repetitive records can honestly inflate tens of times; a larger inflation is
        refused (INVALID_RECORD) before the memory is allocated.
        """
        return min(
            max(DEFAULT_MAX_DECOMPRESSED_BYTES, _INFLATION_FACTOR * self.max_message_bytes),
            _MAX_INFLATION_BYTES,
        )

    @property
    def validates_timestamps(self) -> bool:
        return self.message_timestamp_before_max_ms < LONG_MAX or (
            self.message_timestamp_after_max_ms < LONG_MAX
        )

    def replace(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)

    # ---- parsing ---------------------------------------------------------------------------

    @classmethod
    def from_properties(
        cls, props: Mapping[str, object], *, defaults: LogConfig | None = None
    ) -> LogConfig:
        """Topic configs (Kafka topic-level names) over `defaults` (Kafka's, if None).

        Values may be strings (as in CreateTopics/AlterConfigs) or already typed. Unknown keys
        are ignored. Raises :class:`InvalidConfigError` for bad values.
        """
        base = defaults or cls()
        changes: dict[str, Any] = {}
        for key, value in props.items():
            spec = _TOPIC_KEYS.get(key)
            if spec is None or value is None:
                continue
            field, parse = spec
            changes[field] = parse(key, value)
        # The deprecated message.timestamp.difference.max.ms stands in for either bound left at
        # its default (Kafka 3.9 LogConfig semantics).
        diff = props.get("message.timestamp.difference.max.ms")
        if diff is not None:
            parsed = _long_at_least(0)("message.timestamp.difference.max.ms", diff)
            for bound in ("message_timestamp_before_max_ms", "message_timestamp_after_max_ms"):
                if changes.get(bound, getattr(base, bound)) == LONG_MAX:
                    changes[bound] = parsed
        return dataclasses.replace(base, **changes)

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, object]) -> LogConfig:
        """Broker defaults from ``server.properties`` names (``log.segment.bytes``, ...).

        ``log.roll.ms`` wins over ``log.roll.hours`` and ``log.retention.ms`` over
        ``.minutes`` over ``.hours``, as in Kafka.
        """
        topic: dict[str, object] = {}
        for broker_key, topic_key in _BROKER_SYNONYMS.items():
            if broker_key in props:
                topic[topic_key] = props[broker_key]
        hour = 3600 * 1000
        if "segment.ms" not in topic and "log.roll.hours" in props:
            topic["segment.ms"] = _int_of("log.roll.hours", props["log.roll.hours"]) * hour
        if "segment.jitter.ms" not in topic and "log.roll.jitter.hours" in props:
            topic["segment.jitter.ms"] = (
                _int_of("log.roll.jitter.hours", props["log.roll.jitter.hours"]) * hour
            )
        if "retention.ms" not in topic:
            if "log.retention.minutes" in props:
                minutes = _int_of("log.retention.minutes", props["log.retention.minutes"])
                topic["retention.ms"] = minutes * 60_000 if minutes >= 0 else -1
            elif "log.retention.hours" in props:
                hours = _int_of("log.retention.hours", props["log.retention.hours"])
                topic["retention.ms"] = hours * hour if hours >= 0 else -1
        return cls.from_properties(topic)

    def to_properties(self) -> dict[str, str]:
        """Every key this config owns, as Kafka spells it (for DescribeConfigs)."""
        out: dict[str, str] = {}
        for key, (field, _parse) in _TOPIC_KEYS.items():
            value = getattr(self, field)
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, tuple):
                text = ",".join(value)
            elif isinstance(value, TimestampType):
                text = "LogAppendTime" if value == TimestampType.LOG_APPEND_TIME else "CreateTime"
            else:
                text = str(value)
            out[key] = text
        return out


# ---- value parsers (each takes the key, for the error message) -------------------------------


def _int_of(key: str, value: object) -> int:
    if isinstance(value, bool):
        raise InvalidConfigError(f"invalid value {value!r} for {key}: expected an integer")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise InvalidConfigError(
            f"invalid value {value!r} for {key}: expected an integer"
        ) from None


def _long_at_least(low: int, high: int = LONG_MAX) -> Callable[[str, object], int]:
    def parse(key: str, value: object) -> int:
        n = _int_of(key, value)
        if not low <= n <= high:
            raise InvalidConfigError(f"invalid value {n} for {key}: must be in [{low}, {high}]")
        return n

    return parse


def _any_long(key: str, value: object) -> int:
    return _long_at_least(-(2**63))(key, value)


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidConfigError(f"invalid value {value!r} for {key}: expected true or false")


def _ratio(key: str, value: object) -> float:
    try:
        ratio = float(str(value))
    except ValueError:
        raise InvalidConfigError(f"invalid value {value!r} for {key}: expected a number") from None
    if not 0.0 <= ratio <= 1.0:
        raise InvalidConfigError(f"invalid value {ratio} for {key}: must be in [0, 1]")
    return ratio


def _policy(key: str, value: object) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    policies = tuple(sorted({str(p).strip().lower() for p in items if str(p).strip()}))
    if not policies or any(p not in _POLICIES for p in policies):
        raise InvalidConfigError(f"invalid value {value!r} for {key}: use compact and/or delete")
    return policies


def _timestamp_type(key: str, value: object) -> TimestampType:
    if isinstance(value, TimestampType):
        return value
    try:
        return _TIMESTAMP_TYPES[str(value).strip()]
    except KeyError:
        raise InvalidConfigError(
            f"invalid value {value!r} for {key}: use CreateTime or LogAppendTime"
        ) from None


def _compression(key: str, value: object) -> str:
    text = str(value).strip().lower()
    if text not in COMPRESSION_TYPES:
        raise InvalidConfigError(
            f"invalid value {value!r} for {key}: use one of {', '.join(COMPRESSION_TYPES)}"
        )
    return text


def _gzip_level(key: str, value: object) -> int:
    level = _int_of(key, value)
    if level != -1 and not 1 <= level <= 9:
        raise InvalidConfigError(f"invalid value {level} for {key}: must be -1 or in [1, 9]")
    return level


_TOPIC_KEYS: dict[str, tuple[str, Callable[[str, object], Any]]] = {
    "segment.bytes": ("segment_bytes", _long_at_least(14, INT_MAX)),
    "segment.ms": ("segment_ms", _long_at_least(1)),
    "segment.jitter.ms": ("segment_jitter_ms", _long_at_least(0)),
    "segment.index.bytes": ("segment_index_bytes", _long_at_least(4, INT_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _long_at_least(0, INT_MAX)),
    "retention.ms": ("retention_ms", _long_at_least(-1)),
    "retention.bytes": ("retention_bytes", _any_long),
    "cleanup.policy": ("cleanup_policy", _policy),
    "delete.retention.ms": ("delete_retention_ms", _long_at_least(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long_at_least(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long_at_least(1)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "flush.messages": ("flush_messages", _long_at_least(1)),
    "flush.ms": ("flush_ms", _long_at_least(0)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _long_at_least(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _long_at_least(0)),
    "max.message.bytes": ("max_message_bytes", _long_at_least(0, INT_MAX)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long_at_least(0)),
    "compression.type": ("compression_type", _compression),
    "compression.gzip.level": ("compression_gzip_level", _gzip_level),
    "compression.lz4.level": ("compression_lz4_level", _long_at_least(1, 17)),
    "compression.zstd.level": ("compression_zstd_level", _long_at_least(-131072, 22)),
    "preallocate": ("preallocate", _bool),
    "wirebroker.fsync.before.ack": ("fsync_before_ack", _bool),
}

_BROKER_SYNONYMS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
    "message.max.bytes": "max.message.bytes",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "log.preallocate": "preallocate",
    "wirebroker.fsync.before.ack": "wirebroker.fsync.before.ack",
}
