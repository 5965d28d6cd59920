"""`partition.metadata`: the topic id of a partition directory, in Kafka's file format.

Kafka writes the file when a log gets its topic id (from LeaderAndIsr) and reads it when the log
opens, so that a partition of a deleted and re-created topic of the same name is recognised
(INCONSISTENT_TOPIC_ID) instead of being taken for the old one. The embedded broker writes it
when it creates a log and, at start-up, moves a log whose id is not its topic's aside as stray.
The format is two lines, ``version: 0`` and ``topic_id: <base64url uuid>``. An existing file is
replaced atomically (temporary file, fsync, rename); a new log's, in the worker thread that
makes the log, is written in place (its directory was just made: there is nothing to replace,
and a torn file reads as no id) and made durable after, as Kafka's PartitionMetadataFile (which
records the id with the log and flushes it in a task scheduled then): the file and its
directory fsynced by `sync_new_topic_ids`, once the new logs are served. Storage ignores the
file.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

from protocol.primitives import ZERO_UUID
from storage.checkpoints import fsync_dir

FILE_NAME = "partition.metadata"


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


def _contents(topic_id: uuid.UUID) -> bytes:
    return f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n".encode()


def store_topic_id(directory: Path, topic_id: uuid.UUID) -> uuid.UUID | None:
    """The topic id `directory` holds, after storing `topic_id` there durably if it holds
    none (a log made before topic ids, or whose id came later): a different id stored is
    left as it is, for the caller to refuse. Slow (a read, maybe an fsync): the replica
    manager calls it in a worker thread."""
    stored = read_topic_id(directory)
    if stored is None and topic_id != ZERO_UUID:
        _write_topic_id(directory, topic_id)
        return topic_id
    return stored


def _write_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    tmp = directory / (FILE_NAME + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_contents(topic_id))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / FILE_NAME)


def write_new_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    """Store `topic_id` in `directory`, a partition directory just made (see the module doc),
    without the read and the temporary file of `store_topic_id`, and not durably yet
    (`sync_new_topic_ids`). A failed write leaves no file."""
    if topic_id == ZERO_UUID:
        return
    path = directory / FILE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, _contents(topic_id))
    except OSError:
        os.unlink(path)  # no torn file left
        raise
    finally:
        os.close(fd)


def sync_new_topic_ids(directories: Iterable[Path]) -> dict[Path, OSError]:
    """Make the files `write_new_topic_id` wrote in `directories` durable, as Kafka's
    PartitionMetadataFile flushes (the file, then its directory); a directory without one (no
    id, or deleted meanwhile) is skipped. The directories where that failed, with why."""
    failed = {}
    for directory in directories:
        try:
            fd = os.open(directory / FILE_NAME, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(directory)
        except FileNotFoundError:
            continue
        except OSError as e:
            failed[directory] = e
    return failed
