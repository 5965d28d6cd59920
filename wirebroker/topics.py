"""The topic registry of an embedded (single-broker) cluster, persisted next to the logs.

This module owns which topics exist, their ids, partition counts and per-topic config
overrides. In the embedded default it persists them to `topics.json` in the first log dir,
written atomically (temporary file, fsync, rename, directory fsync) so a crash never leaves
half a registry. A change takes effect in memory at once, on the event loop; the file is
written off the loop by one writer task (`keep_written`), one write at a time, each of the
latest state (changes made during a write are coalesced into the next), so an older state never
lands over a newer one. A request that changed topics awaits `written()` before it is answered,
as Kafka answers CreateTopics once ZooKeeper holds the topic. A write that fails (a full disk)
is logged and answered UNKNOWN_SERVER_ERROR to the requests waiting for it; the change stays in
effect in memory and is written again at the next change, `RETRY_AFTER_S` later, or at
shutdown (`close`). The ZooKeeper cluster keeps the same facts in Kafka's znodes instead.
It must not open sockets or touch partition logs.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
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
#: Seconds after a failed write before the writer tries again (sooner on a new change).
RETRY_AFTER_S = 10.0


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
        #: Changes made so far, the first `_written` of them in the file, the first
        #: `_attempted` of them in the writer's latest write (which failed with `_failure`).
        self._changes = self._written = self._attempted = 0
        self._failure: OSError | None = None
        self._changed = trio.Event()  # a change since the writer's latest snapshot
        self._write_done = trio.Event()  # set (and replaced) after each write
        self._writer_running = False

    def get(self, name: str) -> TopicRecord | None:
        return self.topics.get(name)

    def add(self, record: TopicRecord) -> None:
        self.topics[record.name] = record
        self.by_id[record.topic_id] = record
        self.changed()

    def remove(self, name: str) -> TopicRecord | None:
        record = self.topics.pop(name, None)
        if record is not None:
            self.by_id.pop(record.topic_id, None)
            self.changed()
        return record

    def changed(self) -> None:
        """A record was added, removed or changed in place: the file is to be rewritten."""
        self._changes += 1
        self._changed.set()

    async def written(self) -> None:
        """Return once the file holds every change made so far. KafkaError
        UNKNOWN_SERVER_ERROR if the write that was to hold them failed (they stay in effect);
        RuntimeError if some are not written and the writer is not running."""
        await trio.lowlevel.checkpoint_if_cancelled()  # a shutdown stops the writer first
        target = self._changes
        if self._written < target and not self._writer_running:
            raise RuntimeError("the topic registry's writer (keep_written) is not running")
        while self._written < target:
            if self._attempted < target:
                await self._write_done.wait()
                continue
            # The write that was to hold them failed (maybe before this call: a request
            # that makes its partitions' logs first awaits this after the write).
            raise KafkaError(
                f"the topic registry could not be written ({reason(self._failure)}): the "
                "change is in effect, but lost at a crash until a later write succeeds",
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            )

    async def keep_written(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Write the latest state in a worker thread after every change, until cancelled
        (`close` then writes what is left). After a failed write, again at the next change or
        `RETRY_AFTER_S` later."""
        self._writer_running = True
        task_status.started()
        try:
            while True:
                if self._written == self._changes:
                    await self._changed.wait()
                elif self._failure is not None:
                    with trio.move_on_after(RETRY_AFTER_S):
                        await self._changed.wait()
                self._changed = trio.Event()
                attempt, data = self._changes, self._snapshot()
                try:
                    # Not abandoned on cancellation: a shutdown waits for the write to finish.
                    await trio.to_thread.run_sync(self._write, data)
                except OSError as e:
                    self._failure = e
                    log.error(
                        "cannot write the topic registry %s: %s; the topics created, deleted or "
                        "changed since its last write are in effect, but lost at a crash until a "
                        "write succeeds (at the next change, in %.0f s, or at shutdown)",
                        self.path,
                        e,
                        RETRY_AFTER_S,
                    )
                else:
                    self._written, self._failure = attempt, None
                self._attempted = attempt
                self._write_done.set()
                self._write_done = trio.Event()
        finally:
            self._writer_running = False

    def close(self) -> None:
        """At shutdown, once the writer stopped: write the changes not in the file yet."""
        if self._written == self._changes:
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
            self._written = self._changes

    def _snapshot(self) -> dict[str, object]:
        """The file's contents, taken on the loop (copies: the loop may change records
        while a worker thread writes them)."""
        return {"version": 1, "topics": {n: t.to_json() for n, t in sorted(self.topics.items())}}

    def _write(self, data: dict[str, object]) -> None:
        write_json_atomically(self.path, data, sort_keys=True)
