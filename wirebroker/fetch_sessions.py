"""Incremental fetch sessions (KIP-227), the broker's side: Kafka's FetchManager and its cache.

A full fetch with session epoch 0 may open a session: the broker remembers what each of its
partitions asked for and what it was last told (high watermark, log start offset). Later
fetches name the session and the next epoch, list only the partitions whose request changed
(and those to forget), and are answered with only the partitions that have news: records, a
moved high watermark or log start offset, an error, a diverging epoch. A full fetch naming a
session closes it; epoch -1 asks for no session at all (what clients before v7 get too).

The cache holds `max.incremental.fetch.session.cache.slots` sessions. When full, a new session
may evict one unused for two minutes, or else the least valuable one older than that, ranked
as Kafka does by (follower, partitions, id); a follower's session may also evict a client's.

This module owns the sessions and those rules. It must not read logs or shape responses: the
fetch handler reads the partitions and asks which results an incremental answer carries.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Iterable

from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchRequest, FetchResponse

log = logging.getLogger(__name__)

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
MAX_EPOCH = 2**31 - 1

#: A partition in a session: (topic id, index) from v13, where fetches name topics by id (the
#: id's 128-bit integer: hashed in C, where `uuid.UUID.__hash__` is a Python call); (topic name,
#: index) before.
Key = tuple[str | int, int]

#: The name of the topic with an id, if this broker knows one.
TopicNames = Callable[[uuid.UUID], str | None]


class Asked:
    """One partition a fetch reads: its topic's name and id, and what it asks.

    From v13 the request names topics by id and the name is resolved when the partition is
    first asked for; a session keeps that name (Kafka's CachedPartition), so a partition whose
    topic is later deleted is answered UNKNOWN_TOPIC_OR_PARTITION, not UNKNOWN_TOPIC_ID. A name
    still unknown (None) is looked up again on every fetch until it resolves.
    """

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = ("request", "topic", "topic_id")

    def __init__(
        self, topic: str | None, topic_id: uuid.UUID, request: FetchRequest.FetchPartition
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.request = request

    def key(self, uses_topic_ids: bool) -> Key:
        name: str | int = self.topic_id.int if uses_topic_ids else (self.topic or "")
        return (name, self.request.partition)


class CachedPartition:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = ("asked", "high_watermark", "log_start_offset")

    def __init__(self, asked: Asked, high_watermark: int = -1, log_start_offset: int = -1) -> None:
        self.asked = asked
        #: What the fetcher was last told; -1 until told, and after an error (so it hears
        #: again).
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset

    def must_respond(self, result: FetchResponse.PartitionData, has_records: bool) -> bool:
        """Kafka's maybeUpdateResponseData: whether an incremental answer carries `result`
        (which `has_records` or not), remembering what the fetcher is told."""
        respond = has_records
        if self.high_watermark != result.high_watermark:
            respond = True
            self.high_watermark = result.high_watermark
        if self.log_start_offset != result.log_start_offset:
            respond = True
            self.log_start_offset = result.log_start_offset
        if result.error_code != ErrorCode.NONE:
            self.high_watermark = -1
            respond = True
        return respond or result.diverging_epoch.epoch >= 0 or result.preferred_read_replica >= 0


class FetchSession:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`); compared by
    # identity.
    __slots__ = (
        "created_ms",
        "epoch",
        "id",
        "last_used_ms",
        "partitions",
        "privileged",
        "uses_topic_ids",
    )

    def __init__(
        self, id: int, privileged: bool, uses_topic_ids: bool, created_ms: int, last_used_ms: int
    ) -> None:
        self.id = id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.created_ms = created_ms
        self.last_used_ms = last_used_ms
        #: In Kafka's order: partitions that returned records move to the end, so that a
        #: response filled to `max_bytes` starts with the others next time.
        self.partitions: dict[Key, CachedPartition] = {}
        self.epoch = 1

    def rank(self) -> tuple[bool, int, int]:
        return (self.privileged, len(self.partitions), self.id)


class FetchContext:
    """What one fetch reads and how its answer is shaped (`FetchSessionCache.new_context`)."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = (
        "asked",
        "error",
        "expected_epoch",
        "may_open",
        "privileged",
        "session",
        "uses_topic_ids",
    )

    def __init__(
        self,
        asked: list[Asked],
        error: ErrorCode = ErrorCode.NONE,
        *,
        session: FetchSession | None = None,
        expected_epoch: int = 0,
        may_open: bool = False,
        privileged: bool = False,
        uses_topic_ids: bool = False,
    ) -> None:
        self.asked = asked
        #: A session-level error to answer with, and nothing else.
        self.error = error
        #: The session an incremental fetch continues, and the epoch its answer must see.
        self.session = session
        self.expected_epoch = expected_epoch
        #: A full fetch (epoch 0) that may open a session.
        self.may_open = may_open
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids


def _has_records(result: FetchResponse.PartitionData) -> bool:
    return result.records is not None and len(result.records) > 0


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


def _requested(request: FetchRequest, version: int, topic_names: TopicNames) -> list[Asked]:
    return [
        Asked(t.topic if version < 13 else topic_names(t.topic_id), t.topic_id, p)
        for t in request.topics
        for p in t.partitions
    ]


class FetchSessionCache:
    """Kafka's FetchSessionCache (one shard) and FetchManager.newContext."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.sessions: dict[int, FetchSession] = {}

    def new_context(
        self,
        version: int,
        request: FetchRequest,
        privileged: bool,
        now_ms: int,
        topic_names: TopicNames,
    ) -> FetchContext:
        """What the fetch reads: from the request, or from its session and the request's
        changes; `topic_names` resolves the topic ids of v13+ (Kafka's topicNames)."""
        uses_topic_ids = version >= 13
        session_id, epoch = request.session_id, request.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            closed = self.sessions.pop(session_id, None)
            if closed is not None:
                log.debug("fetch session %d closed by a full fetch", session_id)
            return FetchContext(
                _requested(request, version, topic_names),
                may_open=epoch == INITIAL_EPOCH,
                privileged=privileged,
                uses_topic_ids=uses_topic_ids,
            )
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext([], ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext([], ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext([], ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        for changed in _requested(request, version, topic_names):
            key = changed.key(uses_topic_ids)
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = CachedPartition(changed)
            else:
                changed.topic = cached.asked.topic or changed.topic  # the session's name stays
                cached.asked = changed
        for forgotten in request.forgotten_topics_data:
            name = forgotten.topic_id.int if uses_topic_ids else forgotten.topic
            for index in forgotten.partitions:
                session.partitions.pop((name, index), None)
        if not session.partitions:
            del self.sessions[session.id]
            return FetchContext([])
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        asked = [c.asked for c in session.partitions.values()]
        if uses_topic_ids:
            for a in asked:
                if a.topic is None:  # Kafka's maybeResolveUnknownName
                    a.topic = topic_names(a.topic_id)
        return FetchContext(asked, session=session, expected_epoch=session.epoch)

    def answer(
        self, context: FetchContext, results: list[FetchResponse.PartitionData], now_ms: int
    ) -> tuple[ErrorCode, int, list[bool]]:
        """(error, session id, which results the answer carries) once the fetch has read."""
        session = context.session
        if session is not None:
            if self.sessions.get(session.id) is not session or session.epoch != (
                context.expected_epoch
            ):
                return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, []
            return ErrorCode.NONE, session.id, self._select(session, context.asked, results)
        carried = [True] * len(results)
        if not context.may_open or not self._make_room(context, now_ms):
            return ErrorCode.NONE, INVALID_SESSION_ID, carried
        session = FetchSession(
            self._new_id(), context.privileged, context.uses_topic_ids, now_ms, now_ms
        )
        for asked, result in zip(context.asked, results, strict=True):
            cached = CachedPartition(asked, result.high_watermark, result.log_start_offset)
            session.partitions[asked.key(context.uses_topic_ids)] = cached
        self.sessions[session.id] = session
        return ErrorCode.NONE, session.id, carried

    def throttled_answer(self, context: FetchContext) -> tuple[ErrorCode, int]:
        """(error, session id) of a throttled fetch's empty answer (Kafka's
        getThrottledResponse): an incremental fetch keeps its session, a full one opens none."""
        session = context.session
        if session is None:
            return ErrorCode.NONE, INVALID_SESSION_ID
        if self.sessions.get(session.id) is not session or session.epoch != context.expected_epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id
        return ErrorCode.NONE, session.id

    def _select(
        self,
        session: FetchSession,
        asked: list[Asked],
        results: list[FetchResponse.PartitionData],
    ) -> list[bool]:
        carried = []
        for a, result in zip(asked, results, strict=True):
            key = a.key(session.uses_topic_ids)
            cached = session.partitions.get(key)
            has_records = _has_records(result)
            carry = cached is not None and cached.must_respond(result, has_records)
            if carry and has_records:
                session.partitions[key] = session.partitions.pop(key)
            carried.append(carry)
        return carried

    def _make_room(self, context: FetchContext, now_ms: int) -> bool:
        """Kafka's tryEvict: room for a new session, evicting one if the rules allow."""
        if len(self.sessions) < self.max_entries:
            return True
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stalest.last_used_ms > EVICTION_MS:
            return self._evict(stalest)
        evictable = _evictable(self.sessions.values(), context.privileged, now_ms)
        if not evictable:
            return False
        cheapest = min(evictable, key=FetchSession.rank)
        mine = (context.privileged, len(context.asked), 0)
        return mine >= cheapest.rank() and self._evict(cheapest)

    def _evict(self, session: FetchSession) -> bool:
        log.debug("evicting fetch session %d (%d partitions)", session.id, len(session.partitions))
        del self.sessions[session.id]
        return True

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, MAX_EPOCH)
            if session_id not in self.sessions:
                return session_id


def _evictable(
    sessions: Iterable[FetchSession], privileged: bool, now_ms: int
) -> list[FetchSession]:
    """Sessions past their first two minutes; for a follower, every client's session too."""
    return [
        s
        for s in sessions
        if now_ms - s.created_ms > EVICTION_MS or (privileged and not s.privileged)
    ]
