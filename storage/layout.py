"""Kafka's on-disk names: segment files, suffixes, partition directories, checkpoint files.

This module owns every file and directory name the storage layer writes or recognises, so that
a Kafka 3.9 broker (and ``kafka.tools.DumpLogSegments``) finds our files where it looks for its
own. Pure string and path functions; it must not touch the file system.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN_FILE",
    "DELETED_SUFFIX",
    "DELETE_DIR_SUFFIX",
    "INDEX_SUFFIX",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "LOG_SUFFIX",
    "PREPARED_SUFFIX",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "SWAP_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "delete_dir_name",
    "future_dir_name",
    "is_delete_dir",
    "is_future_dir",
    "is_stray_dir",
    "offset_from_file_name",
    "parse_partition_dir",
    "partition_dir_name",
    "partition_dir_problem",
    "prepared_file",
    "segment_file",
    "stray_dir_name",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
#: A segment file scheduled for removal after ``file.delete.delay.ms``.
DELETED_SUFFIX = ".deleted"
#: Compaction output being written (deleted at recovery).
CLEANED_SUFFIX = ".cleaned"
#: Compaction output complete, replacing the segments in its range (finished at recovery).
SWAP_SUFFIX = ".swap"
#: The next segment's files made ahead of a roll (``next.log.prepared``, ...): empty, named
#: for no offset; deleted at recovery (see :mod:`storage.roll_work`).
PREPARED_SUFFIX = ".prepared"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

# In the partition directory.
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# In each log directory.
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)$")
_SPECIAL_DIR = re.compile(r"\.[0-9a-f]{32}-(delete|future|stray)$")


def segment_file(directory: Path, base_offset: int, suffix: str) -> Path:
    """``<dir>/<base offset, 20 digits><suffix>``, e.g. ``00000000000000000042.log``."""
    return directory / f"{base_offset:020d}{suffix}"


def prepared_file(directory: Path, suffix: str) -> Path:
    """``<dir>/next<suffix>.prepared``, e.g. ``next.log.prepared``: a file of the segment a
    log prepares for its next roll. No Kafka name matches it (Kafka's loader ignores it)."""
    return directory / f"next{suffix}{PREPARED_SUFFIX}"


def offset_from_file_name(name: str) -> int | None:
    """The base offset a segment file name starts with, or None if it has none."""
    head, _, _ = name.partition(".")
    if len(head) != 20 or not head.isdigit():
        return None
    return int(head)


def partition_dir_problem(topic: str, partition: int) -> str | None:
    """Why `topic` and `partition` cannot name a partition directory (a topic name Kafka's
    topic creation refuses, a negative partition), or None if they can."""
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        return f"invalid topic name {topic!r}"
    if partition < 0:
        return f"invalid partition {partition}"
    return None


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>``; ValueError if they cannot name one (`partition_dir_problem`)."""
    problem = partition_dir_problem(topic, partition)
    if problem is not None:
        raise ValueError(problem)
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``(topic, partition)`` for a partition directory name, None for anything else
    (including directories being deleted, future and stray replicas)."""
    if _SPECIAL_DIR.search(name):
        return None
    m = _PARTITION_DIR.match(name)
    if m is None or not _TOPIC.fullmatch(m["topic"]):
        return None
    return m["topic"], int(m["partition"])


def delete_dir_name(topic: str, partition: int) -> str:
    """The name a partition directory is renamed to while being deleted (as Kafka does)."""
    return f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"


def stray_dir_name(topic: str, partition: int) -> str:
    """The name a stray partition directory is moved aside to (as Kafka does; kept)."""
    return f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"


def future_dir_name(topic: str, partition: int) -> str:
    """The name of a replica being moved into another log directory while it fills (Kafka's
    ``UnifiedLog.logFutureDirName``)."""
    return f"{partition_dir_name(topic, partition)}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def is_delete_dir(name: str) -> bool:
    return bool(_SPECIAL_DIR.search(name)) and name.endswith(DELETE_DIR_SUFFIX)


def is_stray_dir(name: str) -> bool:
    return bool(_SPECIAL_DIR.search(name)) and name.endswith(STRAY_DIR_SUFFIX)


def is_future_dir(name: str) -> bool:
    return bool(_SPECIAL_DIR.search(name)) and name.endswith(FUTURE_DIR_SUFFIX)
