"""Kafka's checkpoint files and the clean-shutdown marker, in Kafka's text formats.

Every checkpoint is a text file: a version line (0), a count line, then one entry per line --
``topic partition offset`` for the offset checkpoints in a log directory
(``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``) and ``epoch start_offset`` for a
partition's ``leader-epoch-checkpoint``. Writes are atomic: a ``.tmp`` file is written and
fsynced, renamed over the old one, and the directory fsynced. The clean-shutdown marker
``.kafka_cleanshutdown`` holds ``{"version":0,"brokerEpoch":N}`` as Kafka 3.9 writes it.

This module owns those formats only; it must not decide what the offsets mean.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from storage.layout import CLEAN_SHUTDOWN_FILE

__all__ = [
    "CorruptCheckpointError",
    "OffsetCheckpointFile",
    "fsync_dir",
    "has_clean_shutdown",
    "read_checkpoint",
    "remove_clean_shutdown",
    "write_checkpoint",
    "write_clean_shutdown",
]

T = TypeVar("T")
CURRENT_VERSION = 0


class CorruptCheckpointError(ValueError):
    """A checkpoint file is malformed. Raised by :func:`read_checkpoint`; callers fall back
    to the safe default (no checkpoint: full recovery, offsets from the segments)."""


def fsync_dir(directory: Path) -> None:
    """Make renames and new files in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(
    path: Path, lines: Iterable[str], *, version: int = CURRENT_VERSION, fsync: bool = True
) -> None:
    """Atomically replace `path` with a version line, a count line and `lines` (durably,
    unless `fsync` is false because the caller syncs the file system afterwards)."""
    body = list(lines)
    text = f"{version}\n{len(body)}\n" + "".join(line + "\n" for line in body)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        data = memoryview(text.encode())
        while data:
            data = data[os.write(fd, data) :]
        if fsync:
            os.fsync(fd)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk keeps the old file and gets its space back
        raise
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def read_checkpoint(path: Path, parse: Callable[[list[str]], T]) -> list[T] | None:
    """The entries of a checkpoint file, each parsed from its whitespace-split fields;
    None if the file does not exist. Raises :class:`CorruptCheckpointError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{path}: malformed version or count line") from None
    if version != CURRENT_VERSION:
        raise CorruptCheckpointError(f"{path}: unknown version {version}")
    entries = lines[2:]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    out: list[T] = []
    for line in entries:
        try:
            out.append(parse(line.split()))
        except (ValueError, IndexError):
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}") from None
    return out


def _topic_partition_offset(fields: list[str]) -> tuple[tuple[str, int], int]:
    if len(fields) != 3:
        raise ValueError("expected 3 fields")
    return (fields[0], int(fields[1])), int(fields[2])


class OffsetCheckpointFile:
    """One ``topic partition offset`` checkpoint file of a log directory."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[tuple[str, int], int]:
        """The checkpointed offsets; empty if the file is missing."""
        entries = read_checkpoint(self.path, _topic_partition_offset)
        return dict(entries or ())

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        write_checkpoint(self.path, (f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))


def write_clean_shutdown(log_dir: Path, broker_epoch: int = -1) -> None:
    """Write the marker that lets the next start skip recovery (after everything flushed)."""
    path = log_dir / CLEAN_SHUTDOWN_FILE
    content = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, content.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(log_dir)


def has_clean_shutdown(log_dir: Path) -> bool:
    return (log_dir / CLEAN_SHUTDOWN_FILE).exists()


def remove_clean_shutdown(log_dir: Path) -> None:
    """Remove the marker once the logs are open (a crash from now on is unclean)."""
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    fsync_dir(log_dir)
