"""The store of a coordinator's internal topic: append-and-wait, and replay.

A coordinator (the group coordinator on `__consumer_offsets`; a transaction coordinator on
`__transaction_state` later) keeps its state as keyed records in the partitions of one compacted
internal topic that it leads. This module owns the log side of that, knowing nothing of what
the records mean (Kafka: the CoordinatorRuntime's partition writer and loader):

- `append`: the records go to the local leader at once, as acks=all; what went wrong comes back
  as an error code (the coordinator maps it, as Kafka's GroupMetadataManager does);
- `stored`: wait until the high watermark passes an append (Kafka's DelayedProduce), within
  the coordinator's commit timeout;
- `replay`: feed every keyed record of a partition, log start to the log end as of the start,
  to a callback in a worker thread (`trio.to_thread.run_sync`), a chunk at a time: reading and
  decoding a large partition never blocks the event loop. The slices of each chunk are taken
  (pinned) on the loop and released there; cancelling the replay takes effect between chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from protocol.records import RecordBatchView, iter_batches, iter_records
from storage.results import ReadResult
from wirebroker.delayed_produce import await_replication
from wirebroker.partition import Partition

log = logging.getLogger(__name__)

#: Bytes read (and decoded in one worker-thread call) per step of a replay.
REPLAY_CHUNK_BYTES = 4 << 20

#: Called in a worker thread with each keyed record's key and value (None: a tombstone).
RecordSink = Callable[[bytes, bytes | None], None]


@dataclass(frozen=True, slots=True)
class Write:
    """An append: the partition and the offset the high watermark must reach for it to be
    durable, or (partition None) the append's error."""

    partition: Partition | None
    end_offset: int
    error: ErrorCode = ErrorCode.NONE


#: Nothing to wait for: the answer owes no write.
WRITTEN = Write(None, 0)


class CoordinatorStore:
    """Appends to and replays the partitions of `topic` that this broker leads."""

    def __init__(
        self,
        topic: str,
        partition: Callable[[str, int], Partition | None],
        commit_timeout_s: float,
    ) -> None:
        self.topic = topic
        self._partition = partition
        self.commit_timeout_s = commit_timeout_s

    def append(
        self, index: int, kvs: list[tuple[bytes, bytes | None]], now_ms: int, what: str
    ) -> Write:
        """Append keyed records to partition `index` as its leader (acks=all); durability is
        awaited separately (`stored`). `what` names the writer in the log."""
        partition = self._partition(self.topic, index)
        if partition is None or not partition.is_local_leader:
            return Write(None, 0, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        batch = build_record_batch([SimpleRecord(k, v, timestamp=now_ms) for k, v in kvs])
        try:
            info = partition.append_to_leader(memoryview(bytearray(batch)), now_ms, acks=-1)
        except KafkaError as e:
            log.warning("%s-%d: append for %s failed: %s", self.topic, index, what, e)
            return Write(None, 0, e.error_code)
        except OSError as e:
            log.error("%s-%d: append for %s failed: %s", self.topic, index, what, e)
            return Write(None, 0, ErrorCode.KAFKA_STORAGE_ERROR)
        return Write(partition, info.last_offset + 1)

    async def stored(self, write: Write) -> ErrorCode:
        """Wait until the high watermark passes `write`: NONE, the append's error, or
        REQUEST_TIMED_OUT after the commit timeout."""
        if write.partition is None:
            return write.error
        [error] = await await_replication(
            [(write.partition, write.end_offset)], self.commit_timeout_s
        )
        return error

    async def replay(self, index: int, sink: RecordSink) -> int:
        """Feed partition `index`'s keyed records, in log order, to `sink` in a worker thread;
        the number of records fed (0 if the partition is not here). Control batches are
        skipped; a log that ends inside a batch ends the replay there."""
        partition = self._partition(self.topic, index)
        if partition is None:
            return 0
        plog = partition.log
        offset, end = plog.log_start_offset, plog.log_end_offset
        count = 0
        while offset < end:
            result = plog.read(offset, REPLAY_CHUNK_BYTES, max_offset=end)
            try:
                next_offset, fed = await trio.to_thread.run_sync(_feed, result, sink)
            finally:
                result.release()
            count += fed
            if next_offset <= offset:
                log.warning("%s-%d: no whole batch at offset %d", self.topic, index, offset)
                break
            offset = next_offset
        return count


def _feed(result: ReadResult, sink: RecordSink) -> tuple[int, int]:
    """Worker thread: read one chunk's slices and feed its keyed records to `sink`; (the offset
    after the last whole batch, records fed)."""
    offset = -1
    fed = 0
    for batch in iter_batches(result.read()):
        offset = batch.last_offset + 1
        if isinstance(batch, RecordBatchView) and batch.is_control:
            continue
        for r in iter_records(batch):
            if r.key is not None:
                fed += 1
                sink(bytes(r.key), None if r.value is None else bytes(r.value))
    return offset, fed
