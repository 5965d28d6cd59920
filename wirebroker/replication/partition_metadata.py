"""`partition.metadata`: the topic id of a partition directory, in Kafka's file format.

Kafka writes the file when a log gets its topic id (from LeaderAndIsr) and reads it when the log
opens, so that a partition of a deleted and re-created topic of the same name is recognised
(INCONSISTENT_TOPIC_ID) instead of being taken for the old one. The embedded broker writes it
when it creates a log (not fsynced) and, at start-up, moves a log whose id is not its topic's
aside as stray. The format is two lines,
``version: 0`` and ``topic_id: <base64url uuid>``; it is written atomically (temporary file,
fsync, rename). Storage ignores the file.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

FILE_NAME = "partition.metadata"
ZERO_UUID = uuid.UUID(int=0)


def encode_topic_id(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id stored in `directory`, or None (no file, or one we cannot read)."""
    try:
        text = (directory / FILE_NAME).read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    value = fields.get("topic_id", "").strip()
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except ValueError:
        return None


def write_topic_id(directory: Path, topic_id: uuid.UUID, *, fsync: bool = True) -> None:
    """Store `topic_id` in `directory` (unless it is there already); without `fsync` a crash
    may lose the file (a new, empty partition's: it is then judged without its id)."""
    if topic_id == ZERO_UUID or read_topic_id(directory) == topic_id:
        return
    tmp = directory / (FILE_NAME + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n")
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, directory / FILE_NAME)
