"""The topic registry of an embedded (single-broker) cluster, persisted next to the logs.

This module owns which topics exist, their ids, partition counts and per-topic config
overrides. In the embedded default it persists them to `topics.json` in the first log dir,
written atomically (temporary file, fsync, rename, directory fsync) so a crash never leaves
half a registry. A change takes effect in memory at once, on the event loop; the file is
written off the loop by one writer task (`keep_written`), one write at a time, each of the
latest state (changes made during a write are coalesced into the next), so an older state never
lands over a newer one. A request that changed topics awaits `written()` before it is answered,
and before it makes anything of the change: the new partitions' logs are made, a deleted topic's
partitions dropped (`remove(then=...)`) and new configs applied to logs only once the file holds
the change, as Kafka acts on a topic once ZooKeeper holds it. A write that fails (a full disk)
undoes in memory every change it was to hold, and those made while it ran, and they are answered
UNKNOWN_SERVER_ERROR: a client told a change failed never finds it made, now or after a crash
(Kafka's ZooKeeper write failing leaves no topic either). Each change says how it is undone.
The ZooKeeper cluster keeps the same facts in Kafka's znodes instead.
It must not open sockets or touch partition logs.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from protocol.errors import ErrorCode, KafkaError
from wirebroker.json_file import reason, write_json_atomically

log = logging.getLogger(__name__)

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
            "configs": dict(self.configs),
        }


@dataclass(slots=True)
class _Change:
    """A change not written yet: its number, how to undo it in memory, what to do once the
    file holds it."""

    number: int
    undo: Callable[[], None]
    then: Callable[[], None] | None


class TopicRegistry:
    """Topics by name, persisted to a JSON file off the event loop (see the module doc)."""

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
        #: Changes made so far; the first `_settled` of them are in the file or undone.
        self._changes = self._settled = 0
        self._pending: list[_Change] = []
        #: The changes undone after a failed write: (after, up to, why).
        self._lost: list[tuple[int, int, OSError]] = []
        self._changed = trio.Event()  # a change since the writer's latest snapshot
        self._write_done = trio.Event()  # set (and replaced) after each write
        self._writer_running = False

    def get(self, name: str) -> TopicRecord | None:
        return self.topics.get(name)

    def add(self, record: TopicRecord) -> None:
        self._put(record)
        self.changed(partial(self._drop, record))

    def remove(self, name: str, then: Callable[[], None] | None = None) -> TopicRecord | None:
        """Remove topic `name`; `then` runs once the file no longer has it (not at all if
        the write fails: the topic is back)."""
        record = self.topics.get(name)
        if record is not None:
            self._drop(record)
            self.changed(partial(self._put, record), then)
        return record

    def changed(self, undo: Callable[[], None], then: Callable[[], None] | None = None) -> None:
        """A record was added, removed or changed in place: the file is to be rewritten.
        `undo` puts it back as it was if that write fails; `then` runs once it succeeded."""
        self._changes += 1
        self._pending.append(_Change(self._changes, undo, then))
        self._changed.set()

    def _put(self, record: TopicRecord) -> None:
        self.topics[record.name] = record
        self.by_id[record.topic_id] = record

    def _drop(self, record: TopicRecord) -> None:
        if self.topics.get(record.name) is record:
            del self.topics[record.name]
            del self.by_id[record.topic_id]

    async def written(self) -> None:
        """Return once the file holds every change made so far. KafkaError
        UNKNOWN_SERVER_ERROR if the write that was to hold the latest failed: it and every
        change not written with it were undone. RuntimeError if some are not written and
        the writer is not running."""
        await trio.lowlevel.checkpoint_if_cancelled()  # a shutdown stops the writer first
        target = self._changes
        while self._settled < target:
            if not self._writer_running:  # never started, or stopped by a shutdown
                raise RuntimeError("the topic registry's writer (keep_written) is not running")
            await self._write_done.wait()
        for after, up_to, failure in self._lost:
            if after < target <= up_to:
                raise KafkaError(
                    f"the topic registry could not be written ({reason(failure)}): the "
                    "change was not made",
                    error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                )

    async def keep_written(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Write the latest state in a worker thread after every change, until cancelled
        (`close` then writes what is left). A write that fails undoes the changes not
        written."""
        self._writer_running = True
        task_status.started()
        try:
            while True:
                if self._settled == self._changes:
                    await self._changed.wait()
                self._changed = trio.Event()
                attempt, data = self._changes, self._snapshot()
                try:
                    # Not abandoned on cancellation: a shutdown waits for the write to finish.
                    await trio.to_thread.run_sync(self._write, data)
                except OSError as e:
                    self._undo(e)
                else:
                    self._settle(attempt)
                self._write_done.set()
                self._write_done = trio.Event()
        finally:
            self._writer_running = False
            self._write_done.set()  # waiters see it stopped

    def _settle(self, attempt: int) -> None:
        """The file holds the changes up to `attempt`: run what waited for them."""
        done = [c for c in self._pending if c.number <= attempt]
        self._pending = self._pending[len(done) :]
        self._settled = attempt
        for change in done:
            if change.then is not None:
                change.then()

    def _undo(self, failure: OSError) -> None:
        """The write failed: undo every change the file does not hold, the latest first
        (those made during the write too: they may build on the failed ones)."""
        log.error(
            "cannot write the topic registry %s: %s; the %d topic changes since its last write "
            "are undone and answered UNKNOWN_SERVER_ERROR",
            self.path,
            failure,
            len(self._pending),
        )
        for change in reversed(self._pending):
            change.undo()
        self._pending = []
        self._lost.append((self._settled, self._changes, failure))
        self._settled = self._changes

    def close(self) -> None:
        """At shutdown, once the writer stopped: write the changes not in the file yet."""
        if self._settled == self._changes:
            return
        try:
            self._write(self._snapshot())
        except OSError as e:
            log.error(
                "cannot write the topic registry %s at shutdown: %s; the topics created, "
                "deleted or changed since its last write are not known at the next start",
                self.path,
                e,
            )
        else:
            self._settled = self._changes

    def _snapshot(self) -> dict[str, object]:
        """The file's contents, taken on the loop (copies: the loop may change records
        while a worker thread writes them)."""
        return {"version": 1, "topics": {n: t.to_json() for n, t in sorted(self.topics.items())}}

    def _write(self, data: dict[str, object]) -> None:
        write_json_atomically(self.path, data, sort_keys=True)
