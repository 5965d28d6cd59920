"""The replica side in-process: the partition's ISR and high watermark rules, the metadata
cache, and the controller's requests at every version through the codec and the dispatcher."""

from __future__ import annotations

import copy
import errno
import logging
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

from protocol.api import decode_request, decode_response, encode_request, encode_response_chunks
from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchResponse
from protocol.messages.headers import RequestHeader, ResponseHeader
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from storage.chore import run_chore
from storage.clock import Clock, wall_clock_ms
from storage.config import LogConfig
from storage.partition_log import PartitionLog, Truncation
from tests.wirebroker.cluster_harness import PartitionState, leader_and_isr_request
from tests.wirebroker.held_worker import Held
from tests.wirebroker.helpers import decode_records, trio_clock
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig, Listener
from wirebroker.dispatch import RequestContext, dispatch
from wirebroker.metadata_cache import MetadataCache
from wirebroker.partition import Partition, PendingIsr, TopicPartition
from wirebroker.replication.partition_metadata import encode_topic_id

TOPIC_ID = uuid.UUID(int=0x1234)
T = TypeVar("T")

# Partition: ISR and high watermark -----------------------------------------------------------


def batch(n: int = 1) -> memoryview:
    return memoryview(bytearray(build_record_batch([SimpleRecord(None, b"v")] * n)))


def fetched(
    records: bytes, high_watermark: int, error_code: ErrorCode = ErrorCode.NONE
) -> FetchResponse:
    """The leader's answer to a fetch of `t-0`: `records`, its high watermark."""
    return FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=0,
                        error_code=error_code,
                        high_watermark=high_watermark,
                        log_start_offset=0,
                        records=memoryview(records),
                    )
                ],
            )
        ]
    )


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Partition]:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    proposals: list[Partition] = []
    p = Partition("t", 0, TOPIC_ID, plog, leader=-1, leader_epoch=-1, node_id=1, min_isr=2)
    p.on_isr_change = proposals.append
    p.replica_lag_ms = 1000
    p.make_leader(
        leader_epoch=0,
        partition_epoch=0,
        controller_epoch=1,
        isr=[1, 2, 3],
        replicas=[1, 2, 3],
        now_ms=0,
    )
    yield p
    plog.close()


def test_high_watermark_is_the_minimum_over_the_isr(leader: Partition) -> None:
    leader.append_to_leader(batch(3), now_ms=10, acks=-1)
    assert leader.log_end_offset == 3 and leader.high_watermark == 0
    leader.update_follower_fetch_state(2, 3, 0, now_ms=20, leader_leo=3)
    assert leader.high_watermark == 0  # 3 has not fetched yet
    leader.update_follower_fetch_state(3, 2, 0, now_ms=20, leader_leo=3)
    assert leader.high_watermark == 2
    assert leader.check_enough_replicas_reach_offset(3) == (False, ErrorCode.NONE)
    leader.update_follower_fetch_state(3, 3, 0, now_ms=30, leader_leo=3)
    assert leader.high_watermark == 3
    assert leader.check_enough_replicas_reach_offset(3) == (True, ErrorCode.NONE)


def test_lagging_follower_is_proposed_for_removal_then_rejoins(leader: Partition) -> None:
    leader.append_to_leader(batch(2), now_ms=0, acks=-1)
    leader.update_follower_fetch_state(2, 2, 0, now_ms=100, leader_leo=2)
    leader.update_follower_fetch_state(3, 1, 0, now_ms=100, leader_leo=2)
    leader.maybe_shrink_isr(now_ms=500)
    assert leader.pending_isr is None  # within replica.lag.time.max.ms
    leader.maybe_shrink_isr(now_ms=1200)
    pending = leader.pending_isr
    assert pending is not None and pending.isr == [1, 2]
    # A shrink is not assumed before the controller accepts: 3 still holds the watermark.
    assert leader.high_watermark == 1 and leader.maximal_isr == {1, 2, 3}
    assert not leader.complete_isr_change(
        pending, ErrorCode.NONE, leader_epoch=0, isr=[1, 2], partition_epoch=1, now_ms=1200
    )
    assert leader.isr == [1, 2] and leader.partition_epoch == 1 and leader.high_watermark == 2
    # Follower 3 catches up to the log end: proposed again, counted at once (maximal ISR).
    leader.update_follower_fetch_state(3, 2, 0, now_ms=1300, leader_leo=2)
    pending = leader.pending_isr
    assert pending is not None and pending.isr == [1, 2, 3] and pending.partition_epoch == 1
    leader.append_to_leader(batch(1), now_ms=1300, acks=-1)
    leader.update_follower_fetch_state(2, 3, 0, now_ms=1301, leader_leo=3)
    assert leader.high_watermark == 2  # waits for 3, which is joining
    assert not leader.complete_isr_change(
        pending, ErrorCode.NONE, leader_epoch=0, isr=[1, 2, 3], partition_epoch=2
    )
    assert leader.isr == [1, 2, 3]


def test_refused_and_stale_isr_answers(leader: Partition) -> None:
    leader.append_to_leader(batch(1), now_ms=0, acks=-1)
    leader.maybe_shrink_isr(now_ms=5000)
    pending = leader.pending_isr
    assert isinstance(pending, PendingIsr)
    # A transient failure is retried; a fenced epoch waits for new metadata (stays pending).
    assert leader.complete_isr_change(pending, ErrorCode.REQUEST_TIMED_OUT)
    assert not leader.complete_isr_change(pending, ErrorCode.FENCED_LEADER_EPOCH)
    assert leader.pending_isr is pending
    # The controller says it was not applied: back to the committed ISR.
    assert not leader.complete_isr_change(pending, ErrorCode.INELIGIBLE_REPLICA)
    assert leader.pending_isr is None and leader.isr == [1, 2, 3]


def test_min_insync_replicas_and_the_frozen_watermark(leader: Partition) -> None:
    leader.maybe_shrink_isr(now_ms=5000)
    pending = leader.pending_isr
    assert pending is not None
    leader.complete_isr_change(pending, ErrorCode.NONE, leader_epoch=0, isr=[1], partition_epoch=1)
    assert leader.under_min_isr
    with pytest.raises(Exception) as e:
        leader.append_to_leader(batch(1), now_ms=5000, acks=-1)
    assert getattr(e.value, "error_code", None) == ErrorCode.NOT_ENOUGH_REPLICAS
    leader.append_to_leader(batch(1), now_ms=5000, acks=1)
    assert leader.high_watermark == 0  # under min ISR the watermark does not move (Kafka 3.9)
    assert leader.check_enough_replicas_reach_offset(1) == (
        True,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    )


def test_a_replica_leaving_releases_the_watermark_without_a_new_append(tmp_path: Path) -> None:
    """A refused ISR expansion, or the death of a caught-up follower's broker, moves the high
    watermark at once: an idle partition (a produce waiting on acks=all, a group commit) would
    otherwise wait for an append that never comes."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    alive = {1, 2, 3}
    p = Partition("t", 0, TOPIC_ID, plog, leader=-1, leader_epoch=-1, node_id=1)
    p.is_broker_alive = alive.__contains__
    p.make_leader(
        leader_epoch=0, partition_epoch=0, controller_epoch=1, isr=[1], replicas=[1, 2, 3], now_ms=0
    )
    p.update_follower_fetch_state(2, 0, 0, now_ms=1, leader_leo=0)  # caught up: proposed
    pending = p.pending_isr
    assert pending is not None and pending.isr == [1, 2]
    p.append_to_leader(batch(2), now_ms=2, acks=-1)
    p.update_follower_fetch_state(3, 2, 0, now_ms=3, leader_leo=2)  # caught up, not proposed
    assert p.high_watermark == 0  # 2 is joining: it counts
    alive.discard(2)
    assert not p.complete_isr_change(pending, ErrorCode.INELIGIBLE_REPLICA, now_ms=4)
    assert p.high_watermark == 2  # refused: only 3 (caught up, alive) counts besides us
    p.append_to_leader(batch(2), now_ms=5, acks=-1)
    assert p.high_watermark == 2  # 3 has not fetched these yet
    alive.discard(3)  # the metadata cache hears it (UpdateMetadata)
    p.maybe_advance_high_watermark(now_ms=6)
    assert p.high_watermark == 4
    plog.close()


def test_follower_must_reach_the_leader_epoch_start_to_join(tmp_path: Path) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    p = Partition("t", 0, TOPIC_ID, plog, leader=-1, leader_epoch=-1, node_id=1)
    p.make_follower(
        leader=2, leader_epoch=0, partition_epoch=0, controller_epoch=1, replicas=[1, 2]
    )
    plog.append_as_leader(batch(4), 0, 0)  # as if replicated from leader 2 at epoch 0
    p.make_leader(
        leader_epoch=1, partition_epoch=1, controller_epoch=1, isr=[1], replicas=[1, 2], now_ms=0
    )
    assert p.leader_epoch_start_offset == 4
    assert plog.leader_epoch_cache.latest_entry == (1, 4)
    p.update_follower_fetch_state(2, 3, 0, now_ms=1, leader_leo=4)
    assert p.pending_isr is None  # below the start of our epoch
    p.update_follower_fetch_state(2, 4, 0, now_ms=2, leader_leo=4)
    assert p.pending_isr is not None and p.pending_isr.isr == [1, 2]
    plog.close()


def test_isr_shrinks_after_replica_lag_time_max_ms(tmp_path: Path) -> None:
    """The replica manager's ISR check on trio's MockClock, with the broker's clock following
    it: a follower that stops fetching is proposed for removal once it has not caught up for
    `replica.lag.time.max.ms` (checked every half of it, as Kafka does), not before."""

    async def main() -> None:
        broker = open_broker(tmp_path, clock=trio_clock(), replica_lag_time_max_ms="30000")
        try:
            await broker.replica_manager.become_leader_or_follower(leader_and_isr(1, 0), 7)
            p = broker.partitions[TopicPartition("t", 0)]
            p.append_to_leader(batch(1), broker.now_ms())  # follower 2 is now behind
            proposed = trio.Event()
            p.on_isr_change = lambda _: proposed.set()
            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.replica_manager.run)
                with trio.fail_after(120):
                    await proposed.wait()
                nursery.cancel_scope.cancel()
            # Checked at 15 s and 30 s (still within the lag), proposed at 45 s.
            assert trio.current_time() - started == pytest.approx(45)
            assert p.pending_isr is not None and p.pending_isr.isr == [1]
        finally:
            broker.close()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# the metadata cache ----------------------------------------------------------------------------


def shaped(obj: Any, version: int) -> Any:
    """A copy of `obj` holding only the fields `version` has (the codec refuses others)."""
    obj = copy.deepcopy(obj)
    blank = type(obj)()
    for f in type(obj).FIELDS:
        if not f.present_in(version) and not f.tagged_in(version):
            setattr(obj, f.name, getattr(blank, f.name))
        elif f.struct is not None and f.type.startswith("[]"):
            setattr(obj, f.name, [shaped(item, version) for item in getattr(obj, f.name)])
    return obj


def roundtrip(body: Any, version: int) -> Any:
    header = RequestHeader(
        request_api_key=body.API_KEY, request_api_version=version, correlation_id=7, client_id="c"
    )
    return decode_request(encode_request(header, shaped(body, version))).body


def update_metadata(leader: int = 2, *, controller: int = 9) -> UpdateMetadataRequest:
    state = UpdateMetadataRequest.UpdateMetadataPartitionState(
        topic_name="t",
        partition_index=0,
        controller_epoch=1,
        leader=leader,
        leader_epoch=3,
        isr=[2, 1],
        zk_version=4,
        replicas=[1, 2],
        offline_replicas=[],
    )
    brokers = [
        UpdateMetadataRequest.UpdateMetadataBroker(
            id=i,
            v0_host="h",
            v0_port=9090 + i,
            endpoints=[
                UpdateMetadataRequest.UpdateMetadataEndpoint(
                    port=9090 + i, host="h", listener="PLAINTEXT", security_protocol=0
                )
            ],
            rack="r1",
        )
        for i in (1, 2)
    ]
    return UpdateMetadataRequest(
        controller_id=controller,
        controller_epoch=1,
        ungrouped_partition_states=[state],
        topic_states=[
            UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name="t", topic_id=TOPIC_ID, partition_states=[state]
            )
        ],
        live_brokers=brokers,
    )


@pytest.mark.parametrize("version", range(0, 9))
def test_metadata_cache_takes_every_update_metadata_version(version: int) -> None:
    cache = MetadataCache()
    cache.update(roundtrip(update_metadata(), version), version)
    assert cache.controller_id == 9
    assert sorted(b.id for b in cache.alive_brokers()) == [1, 2]
    endpoint = cache.endpoint(2, "PLAINTEXT")
    assert endpoint is not None and (endpoint.host, endpoint.port) == ("h", 9092)
    assert cache.alive_broker(1).rack == ("r1" if version >= 2 else None)  # type: ignore[union-attr]
    p = cache.partition("t", 0)
    assert p is not None and (p.leader, p.leader_epoch, p.isr, p.replicas) == (2, 3, [2, 1], [1, 2])
    assert cache.topic_id("t") == (TOPIC_ID if version >= 7 else uuid.UUID(int=0))
    # A leader of -2 marks the partition of a topic being deleted: it leaves the cache.
    deleted = cache.update(roundtrip(update_metadata(leader=-2), version), version)
    assert deleted == [("t", 0)] and not cache.has_topic("t")


# the controller's requests through the dispatcher -------------------------------------------------


def open_broker(
    tmp_path: Path, cluster: bool = True, clock: Clock = wall_clock_ms, **extra: str
) -> Broker:
    props = {
        "broker.id": "1",
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / "data"),
        "wirebroker.external.controller": "true" if cluster else "false",
    }
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    broker = Broker.open(BrokerConfig.from_properties(props), clock)
    broker.advertised = [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    return broker


def run_virtual(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`trio.run` on trio's MockClock: backoffs and timers pass at once, in virtual time."""
    return trio.run(fn, *args, clock=trio.testing.MockClock(autojump_threshold=0))


def call(broker: Broker, body: Any, version: int) -> Any:
    """Encode, decode, dispatch, encode the answer and decode it, as on the wire."""
    request = roundtrip(body, version)
    header = RequestHeader(
        request_api_key=body.API_KEY, request_api_version=version, correlation_id=7, client_id="c"
    )
    ctx = RequestContext(broker, header, "127.0.0.1", "PLAINTEXT")
    response = run_virtual(dispatch, ctx, request)
    chunks = encode_response_chunks(
        ResponseHeader(correlation_id=7), response, body.API_KEY, version
    )
    data = b"".join(_materialize(chunk) for chunk in chunks)
    return decode_response(data, body.API_KEY, version).body


def _materialize(chunk: Any) -> bytes:
    """File slices of a fetch response, read (the transport would sendfile them)."""
    slices = getattr(chunk, "slices", None)
    if slices is None:
        return bytes(chunk)
    data = b"".join(os.pread(s.fd, s.length, s.position) for s in slices)
    chunk.release()
    return data


def leader_and_isr(
    leader: int, epoch: int, *, controller_epoch: int = 1, broker_epoch: int = -1
) -> LeaderAndIsrRequest:
    state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name="t",
        partition_index=0,
        controller_epoch=controller_epoch,
        leader=leader,
        leader_epoch=epoch,
        isr=[1, 2],
        partition_epoch=epoch,
        replicas=[1, 2],
    )
    return LeaderAndIsrRequest(
        controller_id=9,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        ungrouped_partition_states=[state],
        topic_states=[
            LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name="t", topic_id=TOPIC_ID, partition_states=[state]
            )
        ],
        live_leaders=[
            LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=2, host_name="h", port=1)
        ],
    )


def partition_errors(response: Any, version: int) -> list[int]:
    if version < 5:
        return [p.error_code for p in response.partition_errors]
    return [p.error_code for t in response.topics for p in t.partition_errors]


@pytest.mark.parametrize("version", range(0, 8))
def test_leader_and_isr_every_version(tmp_path: Path, version: int) -> None:
    broker = open_broker(tmp_path)
    try:
        response = call(broker, leader_and_isr(1, 0), version)
        assert response.error_code == ErrorCode.NONE
        assert partition_errors(response, version) == [ErrorCode.NONE]
        p = broker.partitions[TopicPartition("t", 0)]
        assert p.is_local_leader and p.leader_epoch == 0 and p.isr == [1, 2]
        assert p.topic_id == (TOPIC_ID if version >= 5 else uuid.UUID(int=0))
        assert p.log.leader_epoch_cache.latest_entry == (0, 0)
        # Not newer: refused per partition, as Kafka 3.9 does.
        response = call(broker, leader_and_isr(2, 0), version)
        assert partition_errors(response, version) == [ErrorCode.STALE_CONTROLLER_EPOCH]
        # A newer epoch with another leader: we follow it.
        response = call(broker, leader_and_isr(2, 1), version)
        assert partition_errors(response, version) == [ErrorCode.NONE]
        assert p.leader == 2 and not p.is_local_leader
        assert broker.replica_manager.fetcher_state(TopicPartition("t", 0)) == "truncating"
        assert broker.replica_manager.address_of(2) == ("h", 1)  # from LiveLeaders
        # An older controller epoch: the whole request is refused.
        response = call(broker, leader_and_isr(1, 5, controller_epoch=0), version)
        assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    finally:
        broker.close()


@pytest.mark.parametrize(
    ("topic", "index"), [("", 0), ("\u00fc\u0000", 0), ("t\n", 0), ("t", -4), ("t", -(2**31))]
)
def test_a_partition_no_log_can_be_named_for_is_a_storage_error(
    tmp_path: Path, topic: str, index: int, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by the cluster-member fuzz: naming the log's directory raised ValueError in the
    # handler (UNKNOWN_SERVER_ERROR for the whole request, a traceback) and left the partition
    # "being created", so the next request for it raised KeyError; "t\n" made a directory a
    # restart does not load. Kafka answers KAFKA_STORAGE_ERROR for a partition whose log cannot
    # be made (ReplicaManager.makeLeaders); the request's other partitions apply.
    def request(good: int) -> LeaderAndIsrRequest:
        states = [
            PartitionState(name, uuid.uuid4(), i, leader=1, leader_epoch=0, isr=[1], replicas=[1])
            for name, i in [(topic, index), ("good", good)]
        ]
        return leader_and_isr_request(states, controller_id=9, controller_epoch=1, live_leaders={})

    broker = open_broker(tmp_path)
    try:
        for good in range(2):  # the second met what the first left
            response = call(broker, request(good), 2)
            assert response.error_code == ErrorCode.NONE
            errors = [
                (p.topic_name, p.partition_index, p.error_code) for p in response.partition_errors
            ]
            assert errors == [
                (topic, index, ErrorCode.KAFKA_STORAGE_ERROR),
                ("good", good, ErrorCode.NONE),
            ]
        assert sorted(d.name for d in (tmp_path / "data").iterdir() if d.is_dir()) == [
            "good-0",
            "good-1",
        ]
    finally:
        broker.close()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_stale_broker_epoch(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    broker.broker_epoch = 50
    try:
        response = call(broker, leader_and_isr(1, 0, broker_epoch=49), 7)
        assert response.error_code == ErrorCode.STALE_BROKER_EPOCH
        assert not broker.partitions
        um = update_metadata()
        um.broker_epoch = 49
        assert call(broker, um, 8).error_code == ErrorCode.STALE_BROKER_EPOCH
        stop = StopReplicaRequest(controller_id=9, controller_epoch=1, broker_epoch=49)
        assert call(broker, stop, 4).error_code == ErrorCode.STALE_BROKER_EPOCH
        # The current epoch (or a newer one: the controller may know our new registration).
        assert call(broker, leader_and_isr(1, 0, broker_epoch=51), 7).error_code == 0
    finally:
        broker.close()


@pytest.mark.parametrize("version", range(0, 9))
def test_update_metadata_every_version(tmp_path: Path, version: int) -> None:
    broker = open_broker(tmp_path)
    try:
        assert call(broker, update_metadata(), version).error_code == ErrorCode.NONE
        assert broker.controller_id == 9
        old = update_metadata()
        old.controller_epoch = 0
        assert call(broker, old, version).error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    finally:
        broker.close()


def stop_replica(version: int, epoch: int, delete: bool) -> StopReplicaRequest:
    return StopReplicaRequest(
        controller_id=9,
        controller_epoch=1,
        delete_partitions=delete,
        ungrouped_partitions=[
            StopReplicaRequest.StopReplicaPartitionV0(topic_name="t", partition_index=0)
        ],
        topics=[StopReplicaRequest.StopReplicaTopicV1(name="t", partition_indexes=[0])],
        topic_states=[
            StopReplicaRequest.StopReplicaTopicState(
                topic_name="t",
                partition_states=[
                    StopReplicaRequest.StopReplicaPartitionState(
                        partition_index=0, leader_epoch=epoch, delete_partition=delete
                    )
                ],
            )
        ],
    )


@pytest.mark.parametrize("version", range(0, 5))
def test_stop_replica_every_version(tmp_path: Path, version: int) -> None:
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 3), 7)
        tp = TopicPartition("t", 0)
        assert broker.replica_manager.fetcher_state(tp) == "truncating"
        if version >= 3:
            fenced = call(broker, stop_replica(version, 2, True), version)
            assert [p.error_code for p in fenced.partition_errors] == [
                ErrorCode.FENCED_LEADER_EPOCH
            ]
            assert tp in broker.partitions
        response = call(broker, stop_replica(version, 3, False), version)
        assert response.error_code == ErrorCode.NONE
        assert [
            (p.topic_name, p.partition_index, p.error_code) for p in response.partition_errors
        ] == [("t", 0, ErrorCode.NONE)]
        assert broker.replica_manager.fetcher_state(tp) is None and tp in broker.partitions
        response = call(broker, stop_replica(version, 3, True), version)
        assert response.error_code == ErrorCode.NONE
        assert tp not in broker.partitions and broker.log_manager.get("t", 0) is None
    finally:
        broker.close()


def test_embedded_broker_refuses_controller_requests(tmp_path: Path) -> None:
    broker = open_broker(tmp_path, cluster=False)
    try:
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # it has no peers to take them from
        assert call(broker, leader_and_isr(1, 0), 7).error_code == refused
        assert call(broker, update_metadata(), 8).error_code == refused
        assert not broker.partitions
        assert broker.controller_id == 1
    finally:
        broker.close()


def test_topic_id_is_kept_in_partition_metadata(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(1, 0), 7)
        text = (
            broker.partitions[TopicPartition("t", 0)].log.dir / "partition.metadata"
        ).read_text()
        assert text == f"version: 0\ntopic_id: {encode_topic_id(TOPIC_ID)}\n"
    finally:
        broker.close()
    # After a restart, a LeaderAndIsr for a topic of the same name but another id is refused:
    # the log on disk belongs to the old topic.
    broker = open_broker(tmp_path)
    try:
        other = leader_and_isr(1, 1)
        other.topic_states[0].topic_id = uuid.UUID(int=99)
        response = call(broker, other, 7)
        assert partition_errors(response, 7) == [ErrorCode.INCONSISTENT_TOPIC_ID]
        assert not broker.partitions
        response = call(broker, leader_and_isr(1, 1), 7)
        assert partition_errors(response, 7) == [ErrorCode.NONE]
    finally:
        broker.close()


def test_truncation_walks_back_through_epochs_the_leader_never_had(tmp_path: Path) -> None:
    """KIP-279: our latest epoch (2) is unknown to the leader, which answers with its epoch 1;
    we cut to the end of our largest epoch below that (0) and ask again, then settle."""
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 5), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        p.log.append_as_leader(batch(2), 0, 0)  # offsets 0-1 at epoch 0
        p.log.append_as_leader(batch(2), 2, 0)  # offsets 2-3 at epoch 2 (only we have it)
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        assert p.log.leader_epoch_cache.latest_epoch == 2
        # The leader: epoch 1 is its largest <= 2, and its log ends at 6.
        run_virtual(fetcher._apply_epoch_end, tp, p, state, 1, 6)
        assert p.log_end_offset == 2 and state.truncating  # not done: ask again with epoch 0
        assert p.log.leader_epoch_cache.latest_epoch == 0
        run_virtual(fetcher._apply_epoch_end, tp, p, state, 0, 2)
        assert p.log_end_offset == 2 and not state.truncating and state.fetch_offset == 2
    finally:
        broker.close()


def test_truncation_never_goes_past_our_log_end(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 5), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        p.log.append_as_leader(batch(3), 0, 0)
        p.log.update_high_watermark(3)
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        # The leader's epoch 0 goes on past our end: nothing to cut, the watermark stays.
        run_virtual(fetcher._apply_epoch_end, tp, p, state, 0, 10)
        assert (p.log_end_offset, p.high_watermark, state.truncating) == (3, 3, False)
    finally:
        broker.close()


def test_follower_without_epochs_truncates_to_its_high_watermark(tmp_path: Path) -> None:
    """Kafka's truncateToHighWatermark: with an empty leader epoch cache there is nothing to
    ask the leader, and what lies above our high watermark may never have been the leader's:
    it is cut and fetching starts at the high watermark, not at our log end."""
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 5), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        p.log.append_as_leader(batch(5), -1, 0)  # offsets 0-4, written with no leader epoch
        p.log.update_high_watermark(2)
        assert p.log.leader_epoch_cache.latest_epoch is None
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        assert state.truncating

        async def no_request(body: Any, version: int) -> Any:
            raise AssertionError(f"nothing to ask the leader, but sent {body}")

        fetcher.peer.request = no_request  # type: ignore[method-assign]
        run_virtual(fetcher._truncate, {tp: state})
        assert (p.log_end_offset, p.high_watermark) == (2, 2)
        assert (state.fetch_offset, state.truncating) == (2, False)
    finally:
        broker.close()


def test_follower_takes_the_leaders_watermark_and_log_start(tmp_path: Path) -> None:
    leader_log = PartitionLog.open(tmp_path / "leader" / "t-0", LogConfig())
    leader_log.append_as_leader(batch(2), 0, 0)
    leader_log.append_as_leader(batch(2), 0, 0)
    with leader_log.read(0, 1 << 20) as read:
        data = b"".join(os.pread(s.fd, s.length, s.position) for s in read.slices)
    leader_log.close()
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 0), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        # The leader's watermark is past what we have: ours stops at our log end.
        answer = FetchResponse.PartitionData(
            partition_index=0, high_watermark=9, log_start_offset=0, records=memoryview(data)
        )

        def take(r: FetchResponse.PartitionData) -> None:  # what `_fetch` does with an answer
            append = fetcher._begin_append(tp, p, r)
            if append is not None:
                run_chore(append)
            fetcher._follow(p, state, r)

        take(answer)
        assert (p.log_end_offset, p.high_watermark, state.fetch_offset) == (4, 4, 4)
        with p.log.read(0, 1 << 20) as ours:
            assert ours.size == len(data)  # stored as the leader had it
        # The leader deleted records up to 2 (DeleteRecords): our log start follows.
        empty = FetchResponse.PartitionData(
            partition_index=0, high_watermark=4, log_start_offset=2, records=memoryview(b"")
        )
        take(empty)
        assert p.log_start_offset == 2
    finally:
        broker.close()


def test_corrupt_records_from_the_leader_are_fetched_again(tmp_path: Path) -> None:
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 0), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        state.truncating = False
        garbage = bytearray(batch(1))
        garbage[-1] ^= 0xFF  # the record's last byte: the CRC no longer matches

        async def answer(body: Any, version: int) -> FetchResponse:
            return fetched(bytes(garbage), 1)

        fetcher.peer.request = answer  # type: ignore[method-assign]
        run_virtual(fetcher._fetch, {tp: state})
        assert p.log_end_offset == 0
        assert not state.failed and state.delayed_until > 0  # retried after the backoff
    finally:
        broker.close()


def test_a_follower_on_a_full_disk_fetches_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower append whose write (in its worker thread) fails for a full disk wrote
    nothing: it is retried after the backoff (and succeeds once space is freed), never given
    up until new orders come, and the log directory stays online."""
    full = threading.Event()
    full.set()
    pwrite = os.pwrite

    def disk_full(fd: int, data: Any, position: int) -> int:
        if full.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        return pwrite(fd, data, position)

    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 0), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        state.truncating = False
        data = bytes(batch(2))

        async def answer(body: Any, version: int) -> FetchResponse:
            return fetched(data, 2)

        fetcher.peer.request = answer  # type: ignore[method-assign]
        monkeypatch.setattr(os, "pwrite", disk_full)
        run_virtual(fetcher._fetch, {tp: state})
        assert p.log_end_offset == 0 and not p.log.writing
        assert not state.failed and state.delayed_until > 0
        assert not broker.log_manager.offline_dirs
        full.clear()  # space freed
        run_virtual(fetcher._fetch, {tp: state})
        assert p.log_end_offset == 2 and state.fetch_offset == 2
    finally:
        broker.close()


def test_a_fetch_stopped_with_its_answer_in_hand_writes_before_it_commits(
    tmp_path: Path,
) -> None:
    """The fetcher stopped by a shutdown once the leader's answer is in hand, before its write
    reached a worker thread: the write is still made before the append commits, so after the
    restart and the catch-up every record is in the log once. The old code committed the
    append unwritten (the commit runs also when cancelled, the write did not): its index
    entry pointed at the file's end, the restart took the segment for empty (log end offset
    0), and the records fetched again were written after the ones already there -- a read
    from 0 returned them twice (the rolling restart's "values written twice")."""
    # The leader's log: a first batch past the index interval, so the second gets an entry;
    # the first is all it has at the first fetch.
    first = build_record_batch([SimpleRecord(None, b"x" * 100)] * 50)
    second = build_record_batch([SimpleRecord(None, b"y")] * 3, base_offset=50)
    answered: list[int] = []
    stopped = trio.CancelScope()

    async def answer(body: Any, version: int) -> FetchResponse:
        offset = body.topics[0].partitions[0].fetch_offset
        answered.append(offset)
        leader = [(0, first)] if len(answered) == 1 else [(0, first), (50, second)]
        if len(answered) == 2:
            stopped.cancel()  # the shutdown, as the answer arrives
        high_watermark = 53 if len(leader) > 1 else 50
        return fetched(b"".join(data for base, data in leader if base >= offset), high_watermark)

    def follow(broker: Broker) -> tuple[Partition, Any, Any]:
        call(broker, leader_and_isr(2, 0), 7)
        tp = TopicPartition("t", 0)
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        state.truncating = False
        fetcher.peer.request = answer
        return broker.partitions[tp], fetcher, state

    broker = open_broker(tmp_path)
    try:
        p, fetcher, state = follow(broker)
        run_virtual(fetcher._fetch, {TopicPartition("t", 0): state})
        assert p.log_end_offset == 50

        async def fetch_and_stop() -> None:
            with stopped:
                await fetcher._fetch({TopicPartition("t", 0): state})

        run_virtual(fetch_and_stop)
        assert p.log_end_offset == 53 and not p.log.writing
        segment = p.log.active_segment
        assert os.path.getsize(segment.log.path) == segment.size  # what it counts is written
    finally:
        broker.close()  # a clean shutdown
    broker = open_broker(tmp_path)
    try:
        p, fetcher, state = follow(broker)
        assert p.log_end_offset == 53
        run_virtual(fetcher._fetch, {TopicPartition("t", 0): state})  # caught up: nothing new
        assert answered[2:] == [53]
        stored = p.log.active_segment.log.path.read_bytes()  # every batch the file holds
        assert [o for o, _, _ in decode_records(stored)] == list(range(53))
    finally:
        broker.close()


def test_a_truncation_stopped_before_its_worker_started_is_made(tmp_path: Path) -> None:
    """A follower's truncation whose fetcher is already stopped (a shutdown) when it starts:
    its file work is still made and committed (the log reads as cut at once, so the file must
    be too). The old code committed it unmade, which raised KafkaStorageError into the log
    manager's error handling during the stop."""
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 5), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        p.log.append_as_follower(batch(2))
        p.log.append_as_follower(build_record_batch([SimpleRecord(None, b"v")], base_offset=2))

        async def stopped_truncation() -> None:
            with trio.CancelScope() as stopped:
                stopped.cancel()
                await broker.replica_manager.truncate(tp, p, 2)

        run_virtual(stopped_truncation)
        segment = p.log.active_segment
        assert p.log_end_offset == 2 and not p.log.writing
        assert os.path.getsize(segment.log.path) == segment.size == len(batch(2))
        assert not broker.log_manager.offline_dirs
    finally:
        broker.close()


def test_a_replica_in_an_offline_log_directory(tmp_path: Path) -> None:
    """Its fetcher stops, and LeaderAndIsr answers KAFKA_STORAGE_ERROR for it (Kafka's answer
    that lets a controller elect elsewhere)."""
    from storage.errors import KafkaStorageError

    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 0), 7)
        tp = TopicPartition("t", 0)
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        error = KafkaStorageError("fsync failed")
        error.__cause__ = OSError(5, "Input/output error")
        fetcher._on_local_error(tp, state, error)
        assert broker.log_manager.offline_dirs and state.failed
        response = call(broker, leader_and_isr(2, 1), 7)
        assert partition_errors(response, 7) == [ErrorCode.KAFKA_STORAGE_ERROR]
    finally:
        broker.close()


def test_leader_answers_a_diverging_epoch_to_a_follower(tmp_path: Path) -> None:
    from protocol.messages.fetch import FetchRequest

    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(1, 0), 7)
        p = broker.partitions[TopicPartition("t", 0)]
        p.append_to_leader(batch(3), now_ms=0)  # offsets 0-2 at epoch 0
        call(broker, leader_and_isr(1, 1), 7)
        p.append_to_leader(batch(2), now_ms=0)  # offsets 3-4 at epoch 1

        def fetch(offset: int, last_epoch: int) -> Any:
            request = FetchRequest(
                replica_id=2,
                max_wait_ms=0,
                topics=[
                    FetchRequest.FetchTopic(
                        topic="t",
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=0,
                                current_leader_epoch=1,
                                fetch_offset=offset,
                                last_fetched_epoch=last_epoch,
                                partition_max_bytes=1 << 20,
                            )
                        ],
                    )
                ],
            )
            return call(broker, request, 12).responses[0].partitions[0]

        # A follower that wrote offsets 3-4 at epoch 0 (a tail we never had): diverged.
        r = fetch(5, 0)
        assert r.error_code == ErrorCode.NONE and len(r.records or b"") == 0
        assert (r.diverging_epoch.epoch, r.diverging_epoch.end_offset) == (0, 3)
        # One whose epoch 0 ends where ours does: records as usual.
        r = fetch(3, 0)
        assert r.diverging_epoch.epoch == -1
        assert [o for o, _, _ in decode_records(r.records)] == [3, 4]
    finally:
        broker.close()


def test_new_leader_answers_latest_offsets_once_its_watermark_reaches_its_epoch(
    tmp_path: Path,
) -> None:
    from protocol.messages.list_offsets import ListOffsetsRequest

    def latest(version: int, replica_id: int = -1, timestamp: int = -1) -> Any:
        request = ListOffsetsRequest(
            replica_id=replica_id,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name="t",
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=timestamp
                        )
                    ],
                )
            ],
        )
        return call(broker, request, version).topics[0].partitions[0]

    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(1, 0), 7)
        p = broker.partitions[TopicPartition("t", 0)]
        p.append_to_leader(batch(3), now_ms=0)  # offsets 0-2, not yet on follower 2
        call(broker, leader_and_isr(1, 1), 7)  # epoch 1 starts at 3, above the watermark 0
        # Kafka's answer while the watermark lags the epoch start: ask again later.
        assert latest(7).error_code == ErrorCode.OFFSET_NOT_AVAILABLE
        assert latest(4).error_code == ErrorCode.LEADER_NOT_AVAILABLE
        assert latest(7, timestamp=0).error_code == ErrorCode.OFFSET_NOT_AVAILABLE  # none found
        follower = latest(7, replica_id=2)  # a replica is told the log end offset
        assert (follower.error_code, follower.offset, follower.leader_epoch) == (0, 3, 1)
        p.update_follower_fetch_state(2, 3, 0, now_ms=10, leader_leo=3)
        assert p.high_watermark == 3
        # The current leader epoch, not the epoch of the record at the watermark.
        r = latest(7)
        assert (r.error_code, r.offset, r.leader_epoch) == (ErrorCode.NONE, 3, 1)
        r = latest(7, timestamp=-2)  # earliest: the epoch of the record there
        assert (r.error_code, r.offset, r.leader_epoch) == (ErrorCode.NONE, 0, 0)
    finally:
        broker.close()


def test_leader_and_isr_and_stop_replica_wait_for_a_truncation_in_its_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One writer per log: while a follower's truncation works in its worker thread, a
    LeaderAndIsr making the partition a leader (whose produce requests would append) and a
    StopReplica deleting it wait; each applies once the truncation committed."""
    entered, release = threading.Event(), threading.Event()
    prepare = Truncation.prepare

    def held(truncation: Truncation) -> None:
        entered.set()
        assert release.wait(10)
        prepare(truncation)

    monkeypatch.setattr(Truncation, "prepare", held)
    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 5), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        p.log.append_as_leader(batch(4), 0, 0)
        manager = broker.replica_manager

        async def main() -> None:
            applied: list[str] = []

            async def lead() -> None:
                await manager.become_leader_or_follower(leader_and_isr(1, 6), 7)
                applied.append("leader")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(manager.truncate, tp, p, 2)
                assert await trio.to_thread.run_sync(entered.wait, 10)
                nursery.start_soon(lead)
                await trio.testing.wait_all_tasks_blocked()
                # Held: the log reads as cut, and the leadership waits.
                assert p.log.writing and p.log_end_offset == 2
                assert applied == [] and p.leader_epoch == 5
                release.set()
            assert applied == ["leader"] and p.is_local_leader and not p.log.writing
            assert p.log_end_offset == 2

        trio.run(main)
        entered.clear()
        release.clear()

        async def stop() -> None:
            await manager.become_leader_or_follower(leader_and_isr(2, 7), 7)
            p.log.append_as_leader(batch(2), 6, 0)  # offsets 2-3, to cut again
            request = StopReplicaRequest(
                controller_id=9,
                controller_epoch=1,
                broker_epoch=-1,
                topic_states=[
                    StopReplicaRequest.StopReplicaTopicState(
                        topic_name="t",
                        partition_states=[
                            StopReplicaRequest.StopReplicaPartitionState(
                                partition_index=0, leader_epoch=7, delete_partition=True
                            )
                        ],
                    )
                ],
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(manager.truncate, tp, p, 2)
                assert await trio.to_thread.run_sync(entered.wait, 10)
                nursery.start_soon(manager.stop_replicas, request, 4)
                await trio.testing.wait_all_tasks_blocked()
                assert tp in broker.partitions and p.log.writing  # not deleted yet
                release.set()
            assert tp not in broker.partitions and broker.log_manager.get("t", 0) is None

        trio.run(stop)
    finally:
        release.set()
        broker.close()


def _file_calls(monkeypatch: pytest.MonkeyPatch, directory: Path) -> list[tuple[int, str]]:
    """(thread, what) of every file creation and rename to ``.deleted`` in `directory`."""
    calls: list[tuple[int, str]] = []
    open_, rename = os.open, os.rename

    def opening(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and Path(path).parent == directory:
            calls.append((threading.get_ident(), f"create {Path(path).name}"))
        return open_(path, flags, *args, **kwargs)

    def renaming(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(dst).endswith(".deleted") and Path(dst).parent == directory:
            calls.append((threading.get_ident(), f"rename {Path(src).name}"))
        rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "rename", renaming)
    return calls


def test_a_follower_behind_the_leaders_log_start_starts_over_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fetching below the leader's log start (OFFSET_OUT_OF_RANGE, the leader's earliest
    offset past our end): the log starts over empty at that offset at once, while a worker
    thread renames the old segments' files and makes the new one's (held here: the log reads
    as the new one, and it is the log's one writer); the loop made none of those file calls.
    The old code made them all on the loop (`truncate_fully_and_start_at`)."""
    held = Held(Truncation.prepare)
    monkeypatch.setattr(Truncation, "prepare", lambda truncation: held(truncation))
    from protocol.messages.list_offsets import ListOffsetsResponse

    async def answer(body: Any, version: int) -> Any:
        if body.API_KEY == 1:  # Fetch: below the leader's log start
            return fetched(b"", -1, ErrorCode.OFFSET_OUT_OF_RANGE)
        timestamp = body.topics[0].partitions[0].timestamp  # ListOffsets: -1 latest, -2 earliest
        return ListOffsetsResponse(
            topics=[
                ListOffsetsResponse.ListOffsetsTopicResponse(
                    name="t",
                    partitions=[
                        ListOffsetsResponse.ListOffsetsPartitionResponse(
                            partition_index=0, offset=100 if timestamp == -1 else 50
                        )
                    ],
                )
            ]
        )

    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 0), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        p.log.append_as_follower(batch(4))
        directory = p.log.dir
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        state.truncating = False
        fetcher.peer.request = answer  # type: ignore[method-assign]
        calls = _file_calls(monkeypatch, directory)

        async def main() -> int:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fetcher._fetch, {tp: state})
                assert await trio.to_thread.run_sync(held.started.wait, 10)
                # Held: the log reads as started over; its files are the old ones still.
                assert p.log.writing
                assert (p.log_start_offset, p.log_end_offset, p.high_watermark) == (50, 50, 50)
                assert [s.base_offset for s in p.log.segments] == [50]
                assert (directory / f"{0:020d}.log").exists()
                assert not (directory / f"{50:020d}.log").exists()
                held.release.set()
            return threading.get_ident()

        loop_thread = trio.run(main)
        assert not p.log.writing and state.fetch_offset == 50
        assert (directory / f"{0:020d}.log.deleted").exists()
        assert (directory / f"{50:020d}.log").exists()
        assert {what for _, what in calls} >= {
            f"rename {0:020d}.log",
            f"create {50:020d}.log",
            f"create {50:020d}.index",
        }
        assert loop_thread not in {thread for thread, _ in calls}
        p.log.append_as_follower(build_record_batch([SimpleRecord(None, b"v")], base_offset=50))
        assert p.log_end_offset == 51
    finally:
        held.release.set()
        broker.close()


def test_a_follower_whose_leader_starts_inside_a_batch_starts_over_at_that_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty follower log at 10 fetching from a leader whose log start (DeleteRecords) fell
    inside the batch 8..11: the log starts over at 8 in a worker thread (none of its file
    calls on the loop), then takes that batch, fetched again from 8."""
    records = build_record_batch([SimpleRecord(None, b"v")] * 4, base_offset=8)
    asked: list[int] = []

    async def answer(body: Any, version: int) -> FetchResponse:
        asked.append(body.topics[0].partitions[0].fetch_offset)
        return fetched(records, 12)

    broker = open_broker(tmp_path)
    try:
        call(broker, leader_and_isr(2, 0), 7)
        tp = TopicPartition("t", 0)
        p = broker.partitions[tp]
        p.log.truncate_fully_and_start_at(10)
        fetcher = next(iter(broker.replica_manager.fetchers.values()))
        state = fetcher.partitions[tp]
        state.truncating = False
        fetcher.peer.request = answer  # type: ignore[method-assign]
        calls = _file_calls(monkeypatch, p.log.dir)

        async def fetch_twice() -> int:
            await fetcher._fetch({tp: state})
            assert (p.log_start_offset, p.log_end_offset, state.fetch_offset) == (8, 8, 8)
            await fetcher._fetch({tp: state})
            return threading.get_ident()

        loop_thread = run_virtual(fetch_twice)
        assert asked == [10, 8]
        assert (p.log_start_offset, p.log_end_offset) == (8, 12)
        assert f"create {8:020d}.log" in {what for _, what in calls}
        assert loop_thread not in {thread for thread, _ in calls}
    finally:
        broker.close()
