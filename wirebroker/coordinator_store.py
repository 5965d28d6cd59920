"""The store of a coordinator's internal topic: append-and-wait, and replay.

A coordinator (the group coordinator on `__consumer_offsets`, the transaction coordinator on
`__transaction_state`) keeps its state as keyed records in the partitions of one compacted
internal topic that it leads. This module owns the log side of that, knowing nothing of what
the records mean (Kafka: the CoordinatorRuntime's partition writer and loader), and which
partition a key lives in (`partition_for`, Kafka's hash of the key):

- `append`: the records go to the local leader at once, as acks=all; what went wrong comes back
  as an error code (the coordinator maps it, as Kafka's GroupMetadataManager does). A
  transactional append (an offset commit inside a transaction) carries the producer's id and
  epoch and is marked transactional, as Kafka's coordinator appends are;
- `stored`: wait until the high watermark passes an append (Kafka's DelayedProduce), within
  the coordinator's commit timeout (or the caller's);
- `replay`: feed every keyed record of a partition, log start to the log end as of the start,
  to a callback in a worker thread (`trio.to_thread.run_sync`), a chunk at a time: reading and
  decoding a large partition never blocks the event loop. Each record comes with its batch's
  base offset and, for a transactional batch, its producer id; the COMMIT and ABORT markers
  of control batches go to a second callback (when given). The slices of each chunk are taken
  (pinned) on the loop and released there; cancelling the replay takes effect between chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import SimpleRecord
from protocol.record_builder import ControlRecordType, build_record_batch, control_record_type
from protocol.records import RecordBatchView, iter_batches, iter_records
from storage.producer_state import VerificationGuard
from storage.results import ReadResult
from storage.validation import AppendOrigin
from wirebroker.delayed_produce import await_replication
from wirebroker.java_hashing import string_hash
from wirebroker.partition import Partition

log = logging.getLogger(__name__)

#: Bytes read (and decoded in one worker-thread call) per step of a replay, by default.
REPLAY_CHUNK_BYTES = 4 << 20

NO_PRODUCER_ID = -1


class Origin(NamedTuple):
    """Where a replayed record comes from: its batch's base offset, and the producer id of a
    transactional batch (NO_PRODUCER_ID otherwise)."""

    offset: int
    producer_id: int


#: Called in a worker thread with each keyed record's key, value (None: a tombstone), origin.
RecordSink = Callable[[bytes, bytes | None, Origin], None]
#: Called in a worker thread with each transaction marker's producer id, whether it commits,
#: and its offset.
MarkerSink = Callable[[int, bool, int], None]


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
        *,
        chunk_bytes: int = REPLAY_CHUNK_BYTES,
    ) -> None:
        self.topic = topic
        self._partition = partition
        self.commit_timeout_s = commit_timeout_s
        self.chunk_bytes = chunk_bytes

    def append(
        self,
        index: int,
        kvs: list[tuple[bytes, bytes | None]],
        now_ms: int,
        what: str,
        *,
        producer: tuple[int, int] | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> Write:
        """Append keyed records to partition `index` as its leader (acks=all); durability is
        awaited separately (`stored`). `what` names the writer in the log. The append's origin
        is the coordinator (no client rules, as Kafka's AppendOrigin.COORDINATOR). With
        `producer` (id, epoch) the batch is transactional, sequence 0, and brings KIP-890's
        `verification_guard`."""
        partition = self._partition(self.topic, index)
        if partition is None or not partition.is_local_leader:
            return Write(None, 0, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        records = [SimpleRecord(k, v, timestamp=now_ms) for k, v in kvs]
        if producer is None:
            batch = build_record_batch(records)
        else:
            batch = build_record_batch(
                records,
                producer_id=producer[0],
                producer_epoch=producer[1],
                base_sequence=0,
                is_transactional=True,
            )
        try:
            info = partition.append_to_leader(
                memoryview(bytearray(batch)),
                now_ms,
                acks=-1,
                origin=AppendOrigin.COORDINATOR,
                verification_guard=verification_guard,
            )
        except KafkaError as e:
            log.warning("%s-%d: append for %s failed: %s", self.topic, index, what, e)
            return Write(None, 0, e.error_code)
        except OSError as e:
            log.error("%s-%d: append for %s failed: %s", self.topic, index, what, e)
            return Write(None, 0, ErrorCode.KAFKA_STORAGE_ERROR)
        return Write(partition, info.last_offset + 1)

    async def stored(self, write: Write, timeout_s: float | None = None) -> ErrorCode:
        """Wait until the high watermark passes `write`: NONE, the append's error, or
        REQUEST_TIMED_OUT after `timeout_s` (default: the commit timeout)."""
        if write.partition is None:
            return write.error
        limit = self.commit_timeout_s if timeout_s is None else timeout_s
        [error] = await await_replication([(write.partition, write.end_offset)], limit)
        return error

    async def replay(self, index: int, sink: RecordSink, markers: MarkerSink | None = None) -> int:
        """Feed partition `index`'s keyed records, in log order, to `sink` in a worker thread,
        and its transaction markers to `markers`; the number of records fed (0 if the partition
        is not here). Other control records are skipped; a log that ends inside a batch ends
        the replay there."""
        partition = self._partition(self.topic, index)
        if partition is None:
            return 0
        plog = partition.log
        offset, end = plog.log_start_offset, plog.log_end_offset
        count = 0
        while offset < end:
            result = plog.read(offset, self.chunk_bytes, max_offset=end)
            try:
                next_offset, fed = await trio.to_thread.run_sync(_feed, result, sink, markers)
            finally:
                result.release()
            count += fed
            if next_offset <= offset:
                log.warning("%s-%d: no whole batch at offset %d", self.topic, index, offset)
                break
            offset = next_offset
        return count


class PartitionLoads:
    """The partitions of a coordinator's topic being loaded (Kafka's loadingPartitions): each
    replayed by the store in a task of its own, at the leader epoch it was started for, until
    it is done or cancelled (leadership moved); awaitable."""

    def __init__(self, store: CoordinatorStore) -> None:
        self.store = store
        self._loading: dict[int, tuple[int, trio.CancelScope]] = {}
        self._ended = trio.Event()  # set (and replaced) each time a load ends

    def __contains__(self, index: object) -> bool:
        return index in self._loading

    def __len__(self) -> int:
        return len(self._loading)

    def epoch_of(self, index: int) -> int | None:
        """The leader epoch partition `index` is loading at (None: not loading)."""
        loading = self._loading.get(index)
        return None if loading is None else loading[0]

    def start(
        self,
        nursery: trio.Nursery,
        index: int,
        epoch: int,
        sink: RecordSink,
        markers: MarkerSink | None,
        loaded: Callable[[int, float], None],
    ) -> None:
        """Replay partition `index` in `nursery`; once it is done `loaded(records, elapsed_ms)`
        runs on the loop -- unless the load was cancelled, or failed (logged: the partition
        stays unavailable)."""
        scope = trio.CancelScope()
        self._loading[index] = (epoch, scope)
        nursery.start_soon(self._run, index, scope, sink, markers, loaded)

    async def _run(
        self,
        index: int,
        scope: trio.CancelScope,
        sink: RecordSink,
        markers: MarkerSink | None,
        loaded: Callable[[int, float], None],
    ) -> None:
        started = trio.current_time()
        count = None
        with scope:
            try:
                count = await self.store.replay(index, sink, markers)
            except Exception:  # a bug or a broken log
                log.exception("%s-%d: loading failed", self.store.topic, index)
        if self._loading.get(index, (0, None))[1] is not scope:
            return  # cancelled, or superseded by a newer load
        self._end(index)
        if count is not None:
            loaded(count, (trio.current_time() - started) * 1000)

    def cancel(self, index: int) -> bool:
        """Stop loading partition `index` (what was read is dropped); whether it was loading."""
        loading = self._loading.get(index)
        if loading is None:
            return False
        self._end(index)
        loading[1].cancel()
        log.info("%s-%d: no longer leader: load cancelled", self.store.topic, index)
        return True

    def _end(self, index: int) -> None:
        del self._loading[index]
        self._ended.set()
        self._ended = trio.Event()

    async def wait(self, index: int | None = None) -> None:
        """Until partition `index` (default: every one) is not loading."""
        while (index in self._loading) if index is not None else self._loading:
            await self._ended.wait()


def partition_for(key: str, partitions: int) -> int:
    """The partition of a group or transactional id: Kafka's `Utils.abs(key.hashCode) %
    partitions`, with Java's String.hashCode (Utils.abs maps Integer.MIN_VALUE to 0)."""
    h = string_hash(key)
    return (0 if h == -0x80000000 else abs(h)) % partitions


def store_error(error: ErrorCode, *, too_large: ErrorCode, timed_out: ErrorCode) -> ErrorCode:
    """A failed write to a coordinator's topic as Kafka's coordinators answer it: the topic's
    partition gone or short of replicas is a coordinator that is not available, leadership lost
    or a broken disk is NOT_COORDINATOR; each coordinator chooses the answer to a batch that is
    too large and to a timeout."""
    if error == ErrorCode.REQUEST_TIMED_OUT:
        return timed_out
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.INVALID_FETCH_SIZE,
    ):
        return too_large
    return error


def _feed(result: ReadResult, sink: RecordSink, markers: MarkerSink | None) -> tuple[int, int]:
    """Worker thread: read one chunk's slices and feed its keyed records to `sink` (markers to
    `markers`); (the offset after the last whole batch, records fed)."""
    offset = -1
    fed = 0
    for batch in iter_batches(result.read()):
        offset = batch.next_offset
        if isinstance(batch, RecordBatchView):
            transactional = batch.is_transactional
            origin = Origin(
                batch.base_offset, batch.producer_id if transactional else NO_PRODUCER_ID
            )
            if batch.is_control:
                if markers is not None and transactional:
                    _feed_markers(batch, origin, markers)
                continue
        else:
            origin = Origin(batch.offset, NO_PRODUCER_ID)
        for r in iter_records(batch):
            if r.key is not None:
                fed += 1
                sink(bytes(r.key), None if r.value is None else bytes(r.value), origin)
    return offset, fed


def _feed_markers(batch: RecordBatchView, origin: Origin, markers: MarkerSink) -> None:
    for r in iter_records(batch):
        kind = control_record_type(r)
        if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            markers(origin.producer_id, kind == ControlRecordType.COMMIT, origin.offset)
