"""The follower's side of an incremental fetch session (KIP-227): Kafka's FetchSessionHandler.

A fetcher's first fetch is full and asks the leader for a session (epoch 0). Once the leader
names one, each fetch sends only the partitions whose request changed since the last one the
leader saw, and forgets those no longer fetched; the answer carries only partitions with news,
so idle partitions cost neither side anything per round. A session error, or a request whose
answer never came, goes back to a full fetch (closing the old session on the leader).

Owns the session id, epoch and what the leader's session holds; must not do I/O.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchRequest, FetchResponse
from wirebroker.fetch_sessions import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from wirebroker.partition import TopicPartition

FetchPartition = FetchRequest.FetchPartition


def _fields(p: FetchPartition) -> tuple[int, int, int, int, int]:
    return (
        p.current_leader_epoch,
        p.fetch_offset,
        p.last_fetched_epoch,
        p.log_start_offset,
        p.partition_max_bytes,
    )


class FetchSessionHandler:
    """Builds each fetch against what the leader's session holds, and follows its answers."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        #: What the leader's session holds once the request in flight is answered.
        self._session: dict[TopicPartition, tuple[int, int, int, int, int]] = {}
        self._next: dict[TopicPartition, tuple[int, int, int, int, int]] = {}

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def build(
        self, wanted: dict[TopicPartition, FetchPartition]
    ) -> tuple[dict[TopicPartition, FetchPartition], list[TopicPartition]]:
        """(the partitions this fetch names, those it asks the leader to forget)."""
        self._next = {tp: _fields(p) for tp, p in wanted.items()}
        if self.full:
            return dict(wanted), []
        send = {tp: p for tp, p in wanted.items() if self._session.get(tp) != self._next[tp]}
        forget = [tp for tp in self._session if tp not in wanted]
        return send, forget

    def handle_response(self, response: FetchResponse) -> bool:
        """Follow the leader's answer; False when it is a session error (nothing to apply)."""
        code = response.error_code
        if code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            self.reset(close=False)
            return False
        if code in (ErrorCode.INVALID_FETCH_SESSION_EPOCH, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR):
            self.reset()
            return False
        if code != ErrorCode.NONE:
            return True
        if self.full:
            self.session_id = response.session_id
            self.epoch = INITIAL_EPOCH if self.session_id == INVALID_SESSION_ID else 1
        else:
            self.epoch = next_epoch(self.epoch)
        self._session = self._next if self.session_id != INVALID_SESSION_ID else {}
        return True

    def reset(self, *, close: bool = True) -> None:
        """Fetch in full next; with `close`, that fetch also closes the session we had."""
        if not close:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._session = {}
