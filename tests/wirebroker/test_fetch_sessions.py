"""Incremental fetch sessions (KIP-227) as pure state: the broker's cache and the follower's
handler, driven with requests and results built by hand, time passed in."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchRequest, FetchResponse
from wirebroker.fetch_sessions import EVICTION_MS, FetchContext, FetchSessionCache
from wirebroker.partition import TopicPartition
from wirebroker.replication.fetch_session import FetchSessionHandler

E = ErrorCode
V = 12  # topic names; v13+ names topics by id
#: The topics the broker knows by id (for v13+ requests).
NAMES: dict[uuid.UUID, str] = {}


def part(index: int, offset: int = 0) -> FetchRequest.FetchPartition:
    return FetchRequest.FetchPartition(
        partition=index, fetch_offset=offset, partition_max_bytes=1 << 20
    )


def fetch(
    parts: dict[str, list[FetchRequest.FetchPartition]],
    session_id: int = 0,
    epoch: int = 0,
    forget: dict[str, list[int]] | None = None,
) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        session_id=session_id,
        session_epoch=epoch,
        topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in parts.items()],
        forgotten_topics_data=[
            FetchRequest.ForgottenTopic(topic=t, partitions=ps) for t, ps in (forget or {}).items()
        ],
    )


def result(hw: int = 0, records: bytes = b"", error: int = 0) -> FetchResponse.PartitionData:
    return FetchResponse.PartitionData(
        high_watermark=hw, log_start_offset=0, records=memoryview(records), error_code=error
    )


def asked(context: FetchContext) -> list[tuple[str | None, int, int]]:
    return [(a.topic, a.request.partition, a.request.fetch_offset) for a in context.asked]


def open_session(cache: FetchSessionCache, now: int = 0, *, privileged: bool = False) -> int:
    context = cache.new_context(V, fetch({"t": [part(0), part(1)]}), privileged, now, NAMES.get)
    error, session_id, carried = cache.answer(context, [result(), result()], now)
    assert (error, carried) == (E.NONE, [True, True]) and session_id > 0
    return session_id


def test_incremental_fetch_reads_the_session_and_answers_only_news() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache)
    # Epoch 1 names only partition 1's new offset; partition 0 is read from the session.
    context = cache.new_context(V, fetch({"t": [part(1, 5)]}, sid, 1), False, 10, NAMES.get)
    assert asked(context) == [("t", 0, 0), ("t", 1, 5)]
    error, session_id, carried = cache.answer(context, [result(), result(records=b"x")], 10)
    assert (error, session_id, carried) == (E.NONE, sid, [False, True])
    # Partition 1 returned records: it moves to the end, so partition 0 is read first next.
    context = cache.new_context(V, fetch({}, sid, 2), False, 20, NAMES.get)
    assert asked(context) == [("t", 0, 0), ("t", 1, 5)]
    # A moved high watermark and an error are news; an unchanged partition is not.
    _, _, carried = cache.answer(
        context, [result(hw=3), result(error=E.NOT_LEADER_OR_FOLLOWER)], 20
    )
    assert carried == [True, True]
    context = cache.new_context(V, fetch({}, sid, 3), False, 30, NAMES.get)
    _, _, carried = cache.answer(context, [result(hw=3), result()], 30)
    assert carried == [False, True]  # the error cleared the cached watermark: told again


def test_session_errors() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache)
    assert (
        cache.new_context(V, fetch({}, sid + 1, 1), False, 0, NAMES.get).error
        == E.FETCH_SESSION_ID_NOT_FOUND
    )
    assert (
        cache.new_context(V, fetch({}, sid, 2), False, 0, NAMES.get).error
        == E.INVALID_FETCH_SESSION_EPOCH
    )
    request = fetch({}, sid, 1)
    assert (
        cache.new_context(13, request, False, 0, NAMES.get).error == E.FETCH_SESSION_TOPIC_ID_ERROR
    )
    # A duplicate of a request already taken sees the epoch moved on.
    assert not cache.new_context(V, fetch({}, sid, 1), False, 0, NAMES.get).error
    assert (
        cache.new_context(V, fetch({}, sid, 1), False, 0, NAMES.get).error
        == E.INVALID_FETCH_SESSION_EPOCH
    )


def test_closing_sessions() -> None:
    cache = FetchSessionCache(10)
    sid = open_session(cache)
    # Forgetting every partition ends the session; the fetch is answered without one.
    context = cache.new_context(V, fetch({}, sid, 1, forget={"t": [0, 1]}), False, 0, NAMES.get)
    assert context.asked == [] and sid not in cache.sessions
    # A full fetch naming a session closes it; epoch -1 opens none.
    sid = open_session(cache)
    context = cache.new_context(V, fetch({"t": [part(0)]}, sid, -1), False, 0, NAMES.get)
    assert sid not in cache.sessions
    assert cache.answer(context, [result()], 0) == (E.NONE, 0, [True])
    assert not cache.sessions


def test_eviction_follows_kafkas_ranking() -> None:
    cache = FetchSessionCache(1)
    client = open_session(cache, now=0)
    # A fresh client session is not evicted by another client's...
    context = cache.new_context(V, fetch({"t": [part(0), part(1), part(2)]}), False, 1, NAMES.get)
    assert cache.answer(context, [result()] * 3, 1)[1] == 0
    # ...but by a follower's, which is privileged.
    follower = open_session(cache, now=2, privileged=True)
    assert list(cache.sessions) == [follower] and client != follower
    # Unused for longer than the eviction time, any session gives way.
    later = 3 + EVICTION_MS
    context = cache.new_context(V, fetch({"t": [part(0)]}), False, later, NAMES.get)
    assert cache.answer(context, [result()], later)[1] not in (0, follower)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.integers(0, 5), st.integers(0, 3), max_size=6),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_the_leader_reads_exactly_what_the_follower_wants(
    rounds: list[dict[int, int]], lost: list[bool]
) -> None:
    """Whatever partitions come and go, and whichever answers are lost on the way, each fetch
    the leader takes reads exactly the partitions and offsets the follower wanted."""
    cache, handler = FetchSessionCache(10), FetchSessionHandler()
    for i, wanted_offsets in enumerate(rounds):
        wanted = {TopicPartition("t", p): part(p, o) for p, o in wanted_offsets.items()}
        send, forget = handler.build(wanted)
        request = fetch(
            {"t": list(send.values())} if send else {},
            handler.session_id,
            handler.epoch,
            forget={"t": [tp.partition for tp in forget]} if forget else None,
        )
        context = cache.new_context(V, request, True, i, NAMES.get)
        if context.error:
            response = FetchResponse(error_code=context.error, session_id=0)
        else:
            assert sorted(asked(context)) == sorted(
                ("t", tp.partition, p.fetch_offset) for tp, p in wanted.items()
            )
            error, session_id, _ = cache.answer(context, [result()] * len(context.asked), i)
            response = FetchResponse(error_code=error, session_id=session_id)
        if lost[i]:
            handler.reset()  # the answer never came: the next fetch is full
        else:
            handler.handle_response(response)


def test_topic_ids_key_sessions_from_v13() -> None:
    cache = FetchSessionCache(10)
    tid = uuid.uuid4()
    request = FetchRequest(
        replica_id=-1,
        session_epoch=0,
        topics=[FetchRequest.FetchTopic(topic_id=tid, partitions=[part(0)])],
    )
    context = cache.new_context(13, request, False, 0, NAMES.get)
    _, sid, _ = cache.answer(context, [result()], 0)
    forget = FetchRequest(
        replica_id=-1,
        session_id=sid,
        session_epoch=1,
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic_id=tid, partitions=[0])],
    )
    assert cache.new_context(13, forget, False, 1, NAMES.get).asked == []
    assert sid not in cache.sessions


def test_a_session_keeps_the_names_of_its_topics() -> None:
    """Kafka's CachedPartition keeps the name it resolved: a topic deleted under a session is
    still known by name (the handler answers UNKNOWN_TOPIC_OR_PARTITION, as Kafka does), and
    an id unknown when the session opened is resolved once the broker learns it."""
    kept, late = uuid.uuid4(), uuid.uuid4()
    names = {kept: "kept"}
    request = FetchRequest(
        replica_id=-1,
        session_epoch=0,
        topics=[
            FetchRequest.FetchTopic(topic_id=kept, partitions=[part(0)]),
            FetchRequest.FetchTopic(topic_id=late, partitions=[part(0)]),
        ],
    )
    cache = FetchSessionCache(10)
    context = cache.new_context(13, request, False, 0, names.get)
    assert [a.topic for a in context.asked] == ["kept", None]
    _, sid, _ = cache.answer(context, [result(), result()], 0)
    del names[kept]  # deleted
    names[late] = "late"  # created (or its metadata arrived)
    context = cache.new_context(
        13, FetchRequest(session_id=sid, session_epoch=1), False, 1, names.get
    )
    assert [a.topic for a in context.asked] == ["kept", "late"]
    # Naming a kept partition again (a new offset) does not forget its name.
    again = FetchRequest(
        session_id=sid,
        session_epoch=2,
        topics=[FetchRequest.FetchTopic(topic_id=kept, partitions=[part(0, 7)])],
    )
    context = cache.new_context(13, again, False, 2, names.get)
    assert [(a.topic, a.request.fetch_offset) for a in context.asked] == [("kept", 7), ("late", 0)]
