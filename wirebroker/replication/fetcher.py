"""One replica fetcher: the task that copies partitions from one leader broker.

A fetcher owns the fetch state of the partitions this broker follows on one source broker
(Kafka's ReplicaFetcherThread with its AbstractFetcherThread). A partition added after a
LeaderAndIsr first *truncates* (KIP-101/KIP-279): OffsetForLeaderEpoch asks the leader for the
end offset of our latest epoch and the log is cut to the smaller of that answer and our log
end offset — walking back through our epochs while the leader answers with an epoch we do not
have — and never simply to our own high watermark; only a log with no epochs (an empty
leader epoch cache) is cut to its high watermark (Kafka's truncateToHighWatermark). Then it
*fetches*: Fetch v12 with our replica id from our log end offset, appended as they are -- the
batches checked on the loop, every partition's write of one response made in one worker-thread
call (`PartitionLog.begin_follower_append`, `ReplicaManager.run_log_work`; Kafka writes on its
fetcher thread), each committed on the loop -- the high watermark set to the leader's (never
past our log end) and the log start offset moved up to the leader's. A partition whose request
failed, or whose log failed to take the records (a full disk), is retried after
`replica.fetch.backoff.ms`; a failed connection backs off every partition. A partition of the
topic's `follower.replication.throttled.replicas` that has not caught up is left out of the
fetches while the follower's throttled rate is over `follower.replication.throttled.rate`
(`wirebroker.quotas.replication`). Every decision is re-checked after each await, because
LeaderAndIsr may have moved the partition meanwhile (everything runs on the broker's one trio
thread, so that is the only interleaving) -- except across a truncation or a response's appends,
whose file work runs in a worker thread (`ReplicaManager.run_log_work`): LeaderAndIsr and
StopReplica of those partitions wait for its commit, and the fetcher fetches nothing meanwhile,
so no fetch goes past a truncation not done and no other writer meets an append not committed.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.fetch import FetchRequest, FetchResponse
from protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from storage.errors import UnexpectedAppendOffsetError
from wirebroker.partition import TopicPartition
from wirebroker.peer import PeerClient, PeerError
from wirebroker.replication.fetch_session import FetchSessionHandler

if TYPE_CHECKING:
    from storage.partition_log import FollowerAppend
    from wirebroker.partition import Partition
    from wirebroker.replication.manager import ReplicaManager

log = logging.getLogger(__name__)

FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 7
UNDEFINED = -1
EARLIEST, LATEST = -2, -1


@dataclass(slots=True)
class FetchState:
    topic_id: uuid.UUID
    fetch_offset: int
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0
    failed: bool = False
    #: Caught up with the leader's high watermark at the last fetch (Kafka's isReplicaInSync).
    in_sync: bool = False


class ReplicaFetcher:
    """Fetches every partition this broker follows whose leader is `source_id`."""

    def __init__(self, manager: ReplicaManager, source_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.source_id = source_id
        self.fetcher_id = fetcher_id
        config = manager.broker.config
        self.node_id = manager.broker.node_id
        self.max_bytes = config.get_int("replica.fetch.max.bytes")
        self.response_max_bytes = config.get_int("replica.fetch.response.max.bytes")
        self.max_wait_ms = config.get_int("replica.fetch.wait.max.ms")
        self.min_bytes = config.get_int("replica.fetch.min.bytes")
        self.backoff_s = config.get_int("replica.fetch.backoff.ms") / 1000
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.peer = PeerClient(
            f"fetcher {fetcher_id} of broker {source_id}",
            lambda: manager.address_of(source_id),
            client_id=f"broker-{self.node_id}-fetcher-{fetcher_id}",
            timeout_s=config.get_int("replica.socket.timeout.ms") / 1000,
            backoff_s=self.backoff_s,
            security=manager.broker.peer_security,
            receive_buffer=config.socket_buffer_bytes("replica.socket.receive.buffer.bytes"),
        )
        self.session = FetchSessionHandler()
        self._wake = trio.Event()
        self.cancel_scope = trio.CancelScope()

    # membership (called by the replica manager) --------------------------------------------
    def add(self, tp: TopicPartition, topic_id: uuid.UUID, fetch_offset: int, epoch: int) -> None:
        self.partitions[tp] = FetchState(topic_id, fetch_offset, epoch)
        self._wake.set()

    def adopt(self, tp: TopicPartition, state: FetchState) -> None:
        """Take a partition from another fetcher with its state (a change of fetcher count)."""
        self.partitions[tp] = state
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def stop(self) -> None:
        self.cancel_scope.cancel()

    # the task ---------------------------------------------------------------------------------
    async def run(self) -> None:
        with self.cancel_scope:
            try:
                while True:
                    try:
                        await self._one_round()
                    except Exception:
                        # A bug must stop this round, never the broker: log it and go on.
                        log.exception("fetcher of broker %d failed a round", self.source_id)
                        await trio.sleep(self.backoff_s)
            finally:
                await self.peer.aclose()

    async def _one_round(self) -> None:
        now = trio.current_time()
        ready = {
            tp: s
            for tp, s in self.partitions.items()
            if not s.failed and s.delayed_until <= now and self._partition(tp) is not None
        }
        if not ready:
            self._wake = trio.Event()
            delays = [s.delayed_until for s in self.partitions.values() if not s.failed]
            with trio.move_on_at(min(delays) if delays else float("inf")):
                await self._wake.wait()
            return
        truncating = {tp: s for tp, s in ready.items() if s.truncating}
        if truncating:
            await self._truncate(truncating)
            return
        await self._fetch(ready)

    def _partition(self, tp: TopicPartition) -> Partition | None:
        p = self.manager.broker.partitions.get(tp)
        if p is None or p.is_local_leader or p.leader != self.source_id:
            return None
        return p

    def _current(self, tp: TopicPartition, sent: FetchState, offset: int) -> Partition | None:
        """The partition if its fetch state is still the one a request was sent for."""
        state = self.partitions.get(tp)
        if state is not sent or state.fetch_offset != offset or state.failed:
            return None
        return self._partition(tp)

    def _answered(
        self, sent: dict[TopicPartition, tuple[FetchState, int]], tp: TopicPartition
    ) -> tuple[FetchState, int, Partition] | None:
        """Take `tp` out of `sent` when a response answers it: its state, the offset sent and the
        partition, or None if it was not asked about or its fetch state changed since."""
        if tp not in sent:
            return None
        state, offset = sent.pop(tp)
        p = self._current(tp, state, offset)
        return None if p is None else (state, offset, p)

    def _delay(self, tps: Any) -> None:
        until = trio.current_time() + self.backoff_s
        for tp in tps:
            state = self.partitions.get(tp)
            if state is not None:
                state.delayed_until = until

    # truncation -------------------------------------------------------------------------------
    async def _truncate(self, wanted: dict[TopicPartition, FetchState]) -> None:
        topics: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
        sent: dict[TopicPartition, tuple[FetchState, int]] = {}
        for tp, state in wanted.items():
            p = self._partition(tp)
            assert p is not None
            latest = p.log.leader_epoch_cache.latest_epoch
            if latest is None:
                try:
                    await self._truncate_to_high_watermark(tp, p, state)
                except KafkaError as e:
                    self._on_local_error(tp, state, e)
                continue
            topics.setdefault(tp.topic, []).append(
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=tp.partition,
                    current_leader_epoch=state.leader_epoch,
                    leader_epoch=latest,
                )
            )
            sent[tp] = (state, state.fetch_offset)
        if not topics:
            return
        request = OffsetForLeaderEpochRequest(
            replica_id=self.node_id,
            topics=[
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        try:
            response: OffsetForLeaderEpochResponse = await self.peer.request(
                request, OFFSET_FOR_LEADER_EPOCH_VERSION
            )
        except PeerError as e:
            log.info("%s", e)
            self._delay(sent)
            return
        for topic in response.topics:
            for r in topic.partitions:
                tp = TopicPartition(topic.topic, r.partition)
                answered = self._answered(sent, tp)
                if answered is None:
                    continue
                state, _offset, p = answered
                if r.error_code != ErrorCode.NONE:
                    self._on_error(tp, state, ErrorCode(r.error_code))
                    continue
                try:
                    await self._apply_epoch_end(tp, p, state, r.leader_epoch, r.end_offset)
                except KafkaError as e:
                    self._on_local_error(tp, state, e)
        self._delay(sent)  # partitions the leader did not answer about

    async def _truncate_to_high_watermark(
        self, tp: TopicPartition, p: Partition, state: FetchState
    ) -> None:
        """No epochs to ask about (an empty cache: an empty log, or only pre-v2 batches).
        Kafka's truncateToHighWatermark: what lies above our high watermark may never have been
        the leader's, so it goes, and fetching starts at the high watermark."""
        hw = p.high_watermark
        if hw < p.log_end_offset:
            log.info(
                "%s-%d: no leader epochs: truncating from %d to the high watermark %d",
                tp.topic,
                tp.partition,
                p.log_end_offset,
                hw,
            )
            await self.manager.truncate(tp, p, hw)
        state.truncating = False
        state.fetch_offset = p.log_end_offset

    async def _apply_epoch_end(
        self,
        tp: TopicPartition,
        p: Partition,
        state: FetchState,
        leader_epoch: int,
        leader_end: int,
    ) -> None:
        """Kafka's getOffsetTruncationState, then the truncation itself."""
        leo = p.log_end_offset
        if leader_end == UNDEFINED:
            # The leader knows no epoch at or below ours: keep our log, fetch from its end.
            target, done = leo, True
        elif leader_epoch == UNDEFINED:
            target, done = min(leader_end, leo), True
        else:
            our_epoch, our_end = p.log.end_offset_for_epoch(leader_epoch)
            if our_end == UNDEFINED:
                target, done = min(leader_end, leo), True
            elif our_epoch != leader_epoch:
                # We do not have the leader's epoch: cut to the end of our largest epoch below
                # it and ask again with that one.
                target, done = min(our_end, leo), False
            else:
                target, done = min(our_end, leader_end, leo), True
        if target < leo:
            log.info(
                "%s-%d: truncating from %d to %d (leader %d: epoch %d ends at %d)%s",
                tp.topic,
                tp.partition,
                leo,
                target,
                self.source_id,
                leader_epoch,
                leader_end,
                f", below the high watermark {p.high_watermark}"
                if target < p.high_watermark
                else "",
            )
            await self.manager.truncate(tp, p, target)
        state.fetch_offset = p.log_end_offset
        state.truncating = not done

    # fetching ---------------------------------------------------------------------------------
    async def _fetch(self, wanted: dict[TopicPartition, FetchState]) -> None:
        asked: dict[TopicPartition, FetchRequest.FetchPartition] = {}
        sent: dict[TopicPartition, tuple[FetchState, int]] = {}
        held = self._held_back(wanted)
        if len(held) == len(wanted):
            self._delay(held)  # nothing to fetch until the throttled rate comes down
            return
        for tp, state in wanted.items():
            if tp in held:
                continue
            p = self._partition(tp)
            assert p is not None
            if state.fetch_offset != p.log_end_offset:
                state.fetch_offset = p.log_end_offset
            asked[tp] = FetchRequest.FetchPartition(
                partition=tp.partition,
                current_leader_epoch=state.leader_epoch,
                fetch_offset=state.fetch_offset,
                last_fetched_epoch=_latest_epoch(p),
                log_start_offset=p.log_start_offset,
                partition_max_bytes=self.max_bytes,
            )
            sent[tp] = (state, state.fetch_offset)
        session = self.session
        send, forget = session.build(asked)
        topics: dict[str, list[FetchRequest.FetchPartition]] = {}
        for tp, fp in send.items():
            topics.setdefault(tp.topic, []).append(fp)
        forgotten: dict[str, list[int]] = {}
        for tp in forget:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        request = FetchRequest(
            replica_id=self.node_id,
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.response_max_bytes,
            isolation_level=0,
            session_id=session.session_id,
            session_epoch=session.epoch,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[
                FetchRequest.ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()
            ],
        )
        try:
            response: FetchResponse = await self.peer.request(request, FETCH_VERSION)
        except PeerError as e:
            log.info("%s", e)
            session.reset()  # the leader may or may not have seen this epoch
            self._delay(sent)
            return
        if not session.handle_response(response):
            log.info(
                "fetch session %d with broker %d: %s; fetching in full",
                request.session_id,
                self.source_id,
                ErrorCode(response.error_code).name,
            )
            return
        if response.error_code != ErrorCode.NONE:
            log.info(
                "fetch from broker %d failed: %s",
                self.source_id,
                ErrorCode(response.error_code).name,
            )
            self._delay(sent)
            return
        appends: list[_Append] = []
        out_of_range: list[tuple[TopicPartition, Partition, FetchState, int]] = []
        #: Partitions to start over at the first offset of the batch their answer begins with.
        starts: list[tuple[TopicPartition, Partition, FetchState, int, int]] = []
        for topic in response.responses:
            for r in topic.partitions:
                tp = TopicPartition(topic.topic, r.partition_index)
                answered = self._answered(sent, tp)
                if answered is None:
                    continue
                state, offset, p = answered
                code = ErrorCode(r.error_code)
                if p.log.writing:
                    # Another fetcher's work, left when the partition moved here: ask again.
                    self._delay([tp])
                    continue
                if code == ErrorCode.NONE and r.diverging_epoch.epoch >= 0:
                    # The leader's log parted from ours: truncate (OffsetForLeaderEpoch) again.
                    log.info(
                        "%s-%d: the leader's epoch %d ends at %d: truncating again",
                        tp.topic,
                        tp.partition,
                        r.diverging_epoch.epoch,
                        r.diverging_epoch.end_offset,
                    )
                    state.truncating = True
                    continue
                if code == ErrorCode.NONE:
                    try:
                        append = self._begin_append(tp, p, r)
                    except UnexpectedAppendOffsetError as e:
                        # The leader's log start fell inside a batch (DeleteRecords): start
                        # our log at that batch, as Kafka does, when nothing is in it yet;
                        # its records are fetched again from there.
                        leo = p.log_end_offset
                        if leo == p.log_start_offset and e.first_offset < leo:
                            starts.append((tp, p, state, offset, e.first_offset))
                        else:
                            self._on_local_error(tp, state, e)
                        continue
                    except KafkaError as e:
                        self._on_local_error(tp, state, e)
                        continue
                    if append is None:
                        self._follow(p, state, r)
                    else:
                        appends.append((tp, p, state, r, append))
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append((tp, p, state, offset))
                else:
                    self._on_error(tp, state, code)
        if appends:
            await self.manager.run_log_work([tp for tp, *_ in appends], _Appends(self, appends))
        for tp, p, state, offset in out_of_range:
            try:
                await self._out_of_range(tp, p, state, offset)
            except KafkaError as e:
                self._on_local_error(tp, state, e)
        for tp, p, state, offset, first in starts:
            if self._current(tp, state, offset) is not p or p.log.writing:
                continue  # moved meanwhile: its next fetch says again
            try:
                await self.manager.truncate(tp, p, first, fully=True)
            except KafkaError as e:
                self._on_local_error(tp, state, e)
                continue
            state.fetch_offset = p.log_end_offset

    def _held_back(self, wanted: dict[TopicPartition, FetchState]) -> list[TopicPartition]:
        """Partitions left out of this fetch (Kafka's shouldFollowerThrottle): throttled on
        the follower side, not caught up, while the throttled rate is over its limit."""
        broker = self.manager.broker
        quota = broker.replication_quotas.follower
        candidates = [
            tp
            for tp, state in wanted.items()
            if not state.in_sync and quota.is_throttled(tp.topic, tp.partition)
        ]
        if candidates and quota.is_exceeded(broker.now_ms()):
            return candidates
        return []

    def _begin_append(
        self, tp: TopicPartition, p: Partition, r: FetchResponse.PartitionData
    ) -> FollowerAppend | None:
        """The fetched records checked against `p`'s log and their write begun
        (`PartitionLog.begin_follower_append`: it runs with the response's others in one
        worker-thread call); None if there are none."""
        records = r.records
        if records is None or len(records) == 0:
            return None
        broker = self.manager.broker
        broker.stats.replication_bytes_in += len(records)
        quota = broker.replication_quotas.follower
        if quota.is_throttled(tp.topic, tp.partition):
            quota.record(len(records), broker.now_ms())
        return p.log.begin_follower_append(records)

    def _follow(self, p: Partition, state: FetchState, r: FetchResponse.PartitionData) -> None:
        """After the records of `r` are in `p`'s log: the leader's high watermark and log
        start offset taken (never past our log end), the next fetch from our log end."""
        leo = p.log_end_offset
        state.in_sync = r.high_watermark <= leo
        p.log.update_high_watermark(min(r.high_watermark, leo))
        if p.log_start_offset < r.log_start_offset <= p.high_watermark:
            p.log.delete_records_before(r.log_start_offset)
        state.fetch_offset = leo
        p.notify_append()

    async def _out_of_range(
        self, tp: TopicPartition, p: Partition, state: FetchState, offset: int
    ) -> None:
        """Kafka's fetchOffsetAndTruncate: behind the leader's start, or ahead of its end."""
        try:
            latest = await self._list_offset(tp, state.leader_epoch, LATEST)
            earliest = await self._list_offset(tp, state.leader_epoch, EARLIEST)
        except PeerError as e:
            log.info("%s", e)
            self._delay([tp])
            return
        p2 = self._current(tp, state, offset)
        if p2 is None or p2.log.writing or latest is None or earliest is None:
            self._delay([tp])
            return
        leo = p.log_end_offset
        if latest < leo:
            log.warning(
                "%s-%d: truncating to the leader's end offset %d", tp.topic, tp.partition, latest
            )
            await self.manager.truncate(tp, p, latest)
        elif earliest > leo:
            log.warning(
                "%s-%d: starting over at the leader's start offset %d",
                tp.topic,
                tp.partition,
                earliest,
            )
            await self.manager.truncate(tp, p, earliest, fully=True)
        state.fetch_offset = p.log_end_offset

    async def _list_offset(self, tp: TopicPartition, epoch: int, timestamp: int) -> int | None:
        request = ListOffsetsRequest(
            replica_id=self.node_id,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=tp.topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=tp.partition,
                            current_leader_epoch=epoch,
                            timestamp=timestamp,
                        )
                    ],
                )
            ],
        )
        response: ListOffsetsResponse = await self.peer.request(request, LIST_OFFSETS_VERSION)
        for topic in response.topics:
            for r in topic.partitions:
                if r.error_code == ErrorCode.NONE:
                    return int(r.offset)
        return None

    def _on_local_error(self, tp: TopicPartition, state: FetchState, e: KafkaError) -> None:
        """Our side failed (Kafka's processPartitionData errors): the records are fetched
        again after the backoff. A failed append wrote nothing, so a log on a full disk
        resumes by itself once space is freed; any other I/O error takes its log directory
        offline, and its replication stops until a restart."""
        self.manager.broker.log_manager.handle_log_error(tp.topic, tp.partition, e)
        p = self._partition(tp)
        if p is not None and p.log.offline:
            log.error(
                "%s-%d: its log directory is offline: replication stopped", tp.topic, tp.partition
            )
            state.failed = True
            return
        log.error(
            "%s-%d: cannot take the leader's records at %d: %s",
            tp.topic,
            tp.partition,
            state.fetch_offset,
            e,
        )
        self._delay([tp])

    def _on_error(self, tp: TopicPartition, state: FetchState, code: ErrorCode) -> None:
        if code == ErrorCode.FENCED_LEADER_EPOCH:
            # Our epoch is older than the leader's: wait for the LeaderAndIsr that tells us.
            log.info("%s-%d: fenced by the leader; awaiting new metadata", tp.topic, tp.partition)
            state.failed = True
            return
        log.info(
            "%s-%d: broker %d answered %s; retrying",
            tp.topic,
            tp.partition,
            self.source_id,
            code.name,
        )
        self._delay([tp])


def _latest_epoch(p: Partition) -> int:
    latest = p.log.leader_epoch_cache.latest_epoch
    return -1 if latest is None else latest


#: A partition's append begun from a fetch response: its partition, fetch state, answer and
#: write.
_Append = tuple[
    TopicPartition, "Partition", FetchState, FetchResponse.PartitionData, "FollowerAppend"
]


class _Appends:
    """The appends of one fetch response (a `storage.chore.Chore`, run by
    `ReplicaManager.run_log_work`): every partition's write in one worker-thread call (a
    thread hop per response, not per partition), then, on the loop, each append committed
    and followed (`_follow`), or its failure handled as the inline append's was
    (`_on_local_error`: a full disk retries, another I/O error takes the log directory
    offline)."""

    def __init__(self, fetcher: ReplicaFetcher, appends: list[_Append]) -> None:
        self.fetcher = fetcher
        self.appends = appends

    def prepare(self) -> None:
        for *_, append in self.appends:
            append.prepare()

    def abort(self) -> None:
        pass  # one write per partition

    def commit(self) -> None:
        fetcher = self.fetcher
        for tp, p, state, r, append in self.appends:
            try:
                append.commit()
                fetcher._follow(p, state, r)
            except KafkaError as e:
                fetcher._on_local_error(tp, state, e)
