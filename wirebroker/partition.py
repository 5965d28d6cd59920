"""One partition as the broker sees it: its log plus leader, leader epoch, replicas and ISR.

Even with a single broker every partition carries the replication state a cluster needs — the
leader, a leader epoch, the replica set, the in-sync replicas and the high watermark — so that
the ZooKeeper cluster adds brokers without reshaping this class. It owns waking fetchers when
data arrives (`wait_for_append`) and produce waiters when the high watermark moves. Storage does
the bytes; this class must not encode or decode anything.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import trio

from protocol.errors import ErrorCode
from storage.partition_log import AppendInfo, PartitionLog


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    leader: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    _appended: trio.Event = field(default_factory=trio.Event)

    def __post_init__(self) -> None:
        # As Kafka's makeLeader: a leader whose ISR is itself has its whole log replicated. The
        # checkpointed high watermark lags after kill -9; without this, acknowledged records
        # would stay invisible to consumers until the next append.
        self._advance_high_watermark()

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def is_leader(self, node_id: int) -> bool:
        return self.leader == node_id

    def leader_error(self, node_id: int, current_leader_epoch: int = -1) -> ErrorCode:
        """Kafka's checks before a leader serves a client: NONE, or why not.

        NOT_LEADER_OR_FOLLOWER when another broker leads; with a known current leader epoch
        (>= 0), UNKNOWN_LEADER_EPOCH when the client is ahead of us, FENCED_LEADER_EPOCH when
        it is behind.
        """
        if not self.is_leader(node_id):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_leader_epoch >= 0 and current_leader_epoch > self.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if current_leader_epoch >= 0 and current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.NONE

    def notify_append(self) -> None:
        """Wake every fetch long-polling on this partition."""
        self._appended.set()
        self._appended = trio.Event()

    def append_event(self) -> trio.Event:
        """An event set at the next append (take it before checking, then wait on it)."""
        return self._appended

    def append_to_leader(self, records: memoryview, now_ms: int) -> AppendInfo:
        """Validate, assign offsets and append; the high watermark moves as the ISR allows.

        The batch has reached the OS (os.write returned) when this returns.
        """
        info = self.log.append_as_leader(records, self.leader_epoch, now_ms)
        self._advance_high_watermark()
        self.notify_append()
        return info

    def _advance_high_watermark(self) -> None:
        # With this broker as the only in-sync replica, everything appended is replicated.
        if self.isr == [self.leader]:
            self.log.update_high_watermark(self.log.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch: the requested epoch's end, or the
        end of the largest epoch below it; (-1, -1) when the epoch is older than the log."""
        return self.log.end_offset_for_epoch(epoch)
