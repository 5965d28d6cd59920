"""LogConfig: Kafka names, defaults, validation, broker synonyms."""

from __future__ import annotations

import pytest

from protocol.record_batch import TimestampType
from storage.config import LONG_MAX, LogConfig
from storage.errors import InvalidConfigError


def test_kafka_defaults() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1 << 30
    assert c.segment_index_bytes == 10 << 20
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 7 * 24 * 3600 * 1000
    assert c.retention_bytes == -1
    assert c.cleanup_policy == ("delete",) and c.delete and not c.compact
    assert c.flush_messages == LONG_MAX and c.flush_ms == LONG_MAX
    assert c.max_message_bytes == 1048588
    assert c.file_delete_delay_ms == 60000
    assert c.min_cleanable_dirty_ratio == 0.5
    assert not c.fsync_before_ack


def test_from_properties() -> None:
    c = LogConfig.from_properties(
        {
            "segment.bytes": "1024",
            "cleanup.policy": "compact,delete",
            "message.timestamp.type": "LogAppendTime",
            "min.cleanable.dirty.ratio": "0.1",
            "preallocate": "true",
            "wirebroker.fsync.before.ack": "true",
            "min.insync.replicas": "2",  # not ours: ignored
        }
    )
    assert c.segment_bytes == 1024
    assert c.compact and c.delete
    assert c.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    assert c.min_cleanable_dirty_ratio == 0.1
    assert c.preallocate and c.fsync_before_ack
    props = c.to_properties()
    assert props["cleanup.policy"] == "compact,delete"
    assert props["message.timestamp.type"] == "LogAppendTime"
    assert LogConfig.from_properties(props) == c


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "13"),
        ("segment.bytes", "abc"),
        ("retention.ms", "-2"),
        ("cleanup.policy", "forever"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("compression.type", "brotli"),
        ("message.timestamp.type", "Now"),
        ("preallocate", "yes"),
    ],
)
def test_invalid_values(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as e:
        LogConfig.from_properties({key: value})
    assert key in str(e.value)


def test_deprecated_timestamp_difference_fills_both_bounds() -> None:
    c = LogConfig.from_properties({"message.timestamp.difference.max.ms": "5000"})
    assert c.message_timestamp_before_max_ms == 5000 == c.message_timestamp_after_max_ms
    c = LogConfig.from_properties(
        {"message.timestamp.difference.max.ms": "5000", "message.timestamp.after.max.ms": "7"}
    )
    assert (c.message_timestamp_before_max_ms, c.message_timestamp_after_max_ms) == (5000, 7)


def test_broker_synonyms() -> None:
    c = LogConfig.from_broker_properties(
        {"log.segment.bytes": "2048", "log.roll.hours": "2", "log.retention.hours": "-1"}
    )
    assert c.segment_bytes == 2048
    assert c.segment_ms == 2 * 3600 * 1000
    assert c.retention_ms == -1
    c = LogConfig.from_broker_properties({"log.retention.minutes": "3", "log.retention.hours": "9"})
    assert c.retention_ms == 180_000
