"""The topic registry of an embedded (single-broker) cluster, persisted next to the logs.

This module owns which topics exist, their ids, partition counts and per-topic config
overrides. In the embedded default it persists them to `topics.json` in the first log dir,
written atomically (temporary file, fsync, rename) so a crash never leaves half a registry.
The ZooKeeper cluster (a later issue) keeps the same facts in Kafka's znodes instead.
It must not open sockets or touch partition logs.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from protocol.errors import ErrorCode, KafkaError
from wirebroker.json_file import write_json_atomically

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
#: The group coordinator's topic (group metadata and committed offsets).
OFFSETS_TOPIC = "__consumer_offsets"
#: The transaction coordinator's topic (the transactional ids' states).
TXN_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_TOPIC})


def validate_topic_name(name: str) -> None:
    """Kafka's rules for topic names; raises INVALID_TOPIC_EXCEPTION with the reason."""
    if not name:
        raise KafkaError("topic name is empty", error_code=ErrorCode.INVALID_TOPIC_EXCEPTION)
    if name in (".", ".."):
        raise KafkaError(
            f"topic name cannot be {name!r}", error_code=ErrorCode.INVALID_TOPIC_EXCEPTION
        )
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            f"topic name is longer than {MAX_NAME_LENGTH} characters",
            error_code=ErrorCode.INVALID_TOPIC_EXCEPTION,
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'",
            error_code=ErrorCode.INVALID_TOPIC_EXCEPTION,
        )


@dataclass
class TopicRecord:
    """What the registry knows about one topic."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "topic_id": str(self.topic_id),
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "configs": self.configs,
        }


class TopicRegistry:
    """Topics by name, persisted to a JSON file on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics: dict[str, TopicRecord] = {}
        if path.exists():
            data = json.loads(path.read_text())
            for name, t in data.get("topics", {}).items():
                self.topics[name] = TopicRecord(
                    name,
                    uuid.UUID(t["topic_id"]),
                    int(t["partitions"]),
                    int(t.get("replication_factor", 1)),
                    dict(t.get("configs", {})),
                )
        self.by_id = {t.topic_id: t for t in self.topics.values()}

    def get(self, name: str) -> TopicRecord | None:
        return self.topics.get(name)

    def add(self, record: TopicRecord) -> None:
        self.topics[record.name] = record
        self.by_id[record.topic_id] = record
        self.save()

    def remove(self, name: str) -> TopicRecord | None:
        record = self.topics.pop(name, None)
        if record is not None:
            self.by_id.pop(record.topic_id, None)
            self.save()
        return record

    def save(self) -> None:
        data = {"version": 1, "topics": {n: t.to_json() for n, t in sorted(self.topics.items())}}
        write_json_atomically(self.path, data, sort_keys=True)
