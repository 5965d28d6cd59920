"""ISR replication between real broker processes, with the test playing the controller.

Three brokers run with `wirebroker.external.controller=true`; the test sends them LeaderAndIsr,
UpdateMetadata and StopReplica over TCP and answers their AlterPartition requests
(`tests/wirebroker/cluster_harness.py`). Followers are paused with SIGSTOP to fall out of the
ISR. Everything waits on events (responses, recorded ISR changes, log lines), never on sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchRequest
from protocol.messages.produce import ProduceRequest, ProduceResponse
from protocol.record_batch import SimpleRecord
from tests.wirebroker.cluster_harness import Cluster, PartitionState
from tests.wirebroker.helpers import (
    RawClient,
    decode_records,
    fetch_raw,
    fetch_request,
    list_offset,
    produce_request,
    wait_until,
)

pytestmark = pytest.mark.integration

LAG_MS = 1500
PROPERTIES = {
    "replica.lag.time.max.ms": str(LAG_MS),
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "min.insync.replicas": "2",
    "offsets.topic.num.partitions": "1",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, [1, 2, 3], PROPERTIES)
    c.start()
    try:
        yield c
    finally:
        problems = c.close()
    assert not problems, problems


def produce(
    cluster: Cluster,
    broker_id: int,
    topic: str,
    values: list[bytes],
    *,
    acks: int = -1,
    timeout_ms: int = 10_000,
) -> ProduceResponse.PartitionProduceResponse:
    request = produce_request(topic, 0, [SimpleRecord(None, v) for v in values], acks=acks)
    request.timeout_ms = timeout_ms
    with RawClient(cluster.brokers[broker_id].bootstrap, timeout=timeout_ms / 1000 + 10) as c:
        response = c.request(request, 9)
    return response.responses[0].partition_responses[0]


def high_watermark(cluster: Cluster, broker_id: int, topic: str) -> int:
    code, offset = list_offset(cluster.brokers[broker_id].bootstrap, topic, 0, -1)
    assert code == ErrorCode.NONE, ErrorCode(code)
    return offset


def consumed(cluster: Cluster, broker_id: int, topic: str) -> list[bytes | None]:
    p = fetch_raw(cluster.brokers[broker_id].bootstrap, topic)
    assert p.error_code == ErrorCode.NONE, ErrorCode(p.error_code)
    return [v for _, _, v in decode_records(p.records)]


def same_log_everywhere(cluster: Cluster, topic: str, brokers: list[int]) -> bytes:
    """Wait until the partition's segment files are byte-identical on `brokers`."""

    def identical() -> bytes | None:
        logs = {i: cluster.segment_bytes(i, topic) for i in brokers}
        first = logs[brokers[0]]
        return first if first and all(v == first for v in logs.values()) else None

    return wait_until(identical, what=f"identical logs of {topic} on {brokers}")


def test_acks_all_is_replicated_byte_identically(cluster: Cluster, topic: str) -> None:
    state = cluster.create_partition(topic, [1, 2, 3])
    values = [f"record-{i}".encode() for i in range(5)]
    for v in values:
        r = produce(cluster, 1, topic, [v, v + b"-twin"])
        assert r.error_code == ErrorCode.NONE, ErrorCode(r.error_code)
    # acks=all answered: every ISR member has the batches and the high watermark covers them.
    assert high_watermark(cluster, 1, topic) == 10
    assert consumed(cluster, 1, topic) == [x for v in values for x in (v, v + b"-twin")]
    data = same_log_everywhere(cluster, topic, [1, 2, 3])
    assert len(data) > 0
    assert cluster.controller.isr(state.topic_id) == [1, 2, 3]  # nobody left the ISR
    # Produce goes to the leader; so does a consumer's fetch without client metadata (v10),
    # while one with it (v11+, KIP-392) is served by a follower too.
    assert produce(cluster, 2, topic, [b"x"]).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch_raw(cluster.brokers[3].bootstrap, topic, version=10).error_code == (
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    )
    follower = cluster.brokers[3].bootstrap
    from_follower = wait_until(
        lambda: (r := fetch_raw(follower, topic, version=11)).high_watermark == 10 and r,
        what="the follower serving up to the high watermark",
    )
    assert from_follower.error_code == ErrorCode.NONE
    assert bytes(from_follower.records) == data


def test_metadata_comes_from_update_metadata(cluster: Cluster, topic: str) -> None:
    from protocol.messages.describe_cluster import DescribeClusterRequest
    from protocol.messages.find_coordinator import FindCoordinatorRequest
    from protocol.messages.metadata import MetadataRequest

    state = cluster.create_partition(topic, [2, 3, 1], leader=2)
    with RawClient(cluster.brokers[3].bootstrap) as c:
        response = c.request(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12
        )
    assert response.controller_id == 100
    assert {b.node_id for b in response.brokers} == {1, 2, 3, 100}
    (t,) = response.topics
    assert t.error_code == ErrorCode.NONE and t.topic_id == state.topic_id
    (p,) = t.partitions
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes) == (
        2,
        0,
        [2, 3, 1],
        [2, 3, 1],
    )
    with RawClient(cluster.brokers[1].bootstrap) as c:
        cluster_info = c.request(DescribeClusterRequest(), 1)
        coordinator = c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4)
    assert cluster_info.controller_id == 100
    assert {b.broker_id for b in cluster_info.brokers} == {1, 2, 3, 100}
    # No __consumer_offsets partition led anywhere yet: no coordinator.
    assert coordinator.coordinators[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    cluster.create_partition("__consumer_offsets", [3, 1, 2], leader=3)
    with RawClient(cluster.brokers[1].bootstrap) as c:
        coordinator = c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4)
    found = coordinator.coordinators[0]
    assert (found.error_code, found.node_id, found.port) == (
        ErrorCode.NONE,
        3,
        cluster.brokers[3].port,
    )


def test_paused_follower_leaves_the_isr_and_comes_back(cluster: Cluster, topic: str) -> None:
    state = cluster.create_partition(topic, [1, 2, 3])
    assert produce(cluster, 1, topic, [b"a"]).error_code == ErrorCode.NONE
    cluster.pause(3)
    paused = time.monotonic()
    # acks=1 is written at once, but the high watermark waits for follower 3 (still in the ISR).
    assert produce(cluster, 1, topic, [b"b"], acks=1).error_code == ErrorCode.NONE
    assert high_watermark(cluster, 1, topic) == 1
    assert consumed(cluster, 1, topic) == [b"a"]  # consumers read only up to the watermark
    # After replica.lag.time.max.ms the leader asks the controller to drop 3 ...
    cluster.controller.wait_for_isr(state.topic_id, [1, 2])
    # (3 was caught up until at most one fetch wait, 200 ms, before the pause)
    assert time.monotonic() - paused >= LAG_MS / 1000 - 0.25
    # ... and once the controller accepted, the watermark follows the smaller ISR.
    wait_until(lambda: high_watermark(cluster, 1, topic) == 2, what="the high watermark at 2")
    assert consumed(cluster, 1, topic) == [b"a", b"b"]
    assert produce(cluster, 1, topic, [b"c"]).error_code == ErrorCode.NONE
    cluster.resume(3)
    # Broker 3 catches up and is proposed for the ISR again.
    cluster.controller.wait_for_isr(state.topic_id, [1, 2, 3])
    assert produce(cluster, 1, topic, [b"d"]).error_code == ErrorCode.NONE
    same_log_everywhere(cluster, topic, [1, 2, 3])
    accepted = [r for r in cluster.controller.requests if r[4] == ErrorCode.NONE]
    assert [sorted(r[3]) for r in accepted] == [[1, 2], [1, 2, 3]]
    assert all(r[0] == 1 for r in accepted)  # only the leader sends AlterPartition


def test_acks_all_times_out_while_an_isr_member_lags(cluster: Cluster, topic: str) -> None:
    cluster.create_partition(topic, [1, 2, 3])
    cluster.pause(2)
    r = produce(cluster, 1, topic, [b"slow"], timeout_ms=300)
    assert r.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert r.base_offset == 0  # written, just not replicated in time


def test_min_insync_replicas(cluster: Cluster, topic: str) -> None:
    state = cluster.create_partition(topic, [1, 2, 3])
    assert produce(cluster, 1, topic, [b"ok"]).error_code == ErrorCode.NONE
    cluster.pause(2)
    cluster.pause(3)
    # Both followers lag: the ISR shrinks to the leader alone, below min.insync.replicas=2,
    # while this produce waits: it was written but cannot be acknowledged.
    r = produce(cluster, 1, topic, [b"late"], timeout_ms=30_000)
    assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    cluster.controller.wait_for_isr(state.topic_id, [1])
    # Now acks=all is refused before the append; acks=1 is still written.
    r = produce(cluster, 1, topic, [b"refused"])
    assert r.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce(cluster, 1, topic, [b"one"], acks=1).error_code == ErrorCode.NONE
    # Under min ISR the high watermark stays where it was (Kafka 3.9).
    assert high_watermark(cluster, 1, topic) == 1
    cluster.resume(2)
    cluster.controller.wait_for_isr(state.topic_id, [1, 2])
    wait_until(lambda: high_watermark(cluster, 1, topic) == 3, what="the watermark after rejoin")
    assert consumed(cluster, 1, topic) == [b"ok", b"late", b"one"]


def test_new_leader_truncates_the_old_leaders_divergent_tail(cluster: Cluster, topic: str) -> None:
    state = cluster.create_partition(topic, [1, 2, 3])
    for v in (b"a", b"b"):
        assert produce(cluster, 1, topic, [v]).error_code == ErrorCode.NONE
    # The followers stop fetching (StopReplica without delete, as for a controlled shutdown);
    # the leader writes a tail nobody else has (acks=1).
    for follower in (2, 3):
        assert cluster.stop_replica(follower, topic, 0, 0, delete=False).error_code == 0
    for v in (b"lost-1", b"lost-2", b"lost-3"):
        assert produce(cluster, 1, topic, [v], acks=1).error_code == ErrorCode.NONE
    # The leader goes away; the controller elects 2 with a new epoch.
    cluster.brokers[1].stop()
    new = PartitionState(
        topic, state.topic_id, 0, 2, 1, [2, 3], [1, 2, 3], state.partition_epoch + 1
    )
    cluster.elect(new, to=[2, 3])
    for v in (b"new-1", b"new-2"):
        assert produce(cluster, 2, topic, [v]).error_code == ErrorCode.NONE
    # The old leader comes back and follows: it must drop its tail (epoch 0, offsets 2-4),
    # which the new leader overwrote at epoch 1, and end up with the new leader's log exactly.
    cluster.brokers[1].start()
    cluster.update_metadata([new])
    response = cluster.leader_and_isr(1, [new])
    assert response.error_code == ErrorCode.NONE
    cluster.controller.wait_for_isr(state.topic_id, [1, 2, 3])
    same_log_everywhere(cluster, topic, [1, 2, 3])
    assert consumed(cluster, 2, topic) == [b"a", b"b", b"new-1", b"new-2"]
    assert cluster.brokers[1].wait_for_log("truncating from 5 to 2")


def test_stale_controller_and_leader_epochs_are_refused(cluster: Cluster, topic: str) -> None:
    state = cluster.create_partition(topic, [1, 2, 3])
    # The same leader epoch again: nothing to do (Kafka 3.9 answers STALE_CONTROLLER_EPOCH).
    response = cluster.leader_and_isr(2, [state])
    (t,) = response.topics
    assert t.topic_id == state.topic_id
    assert [p.error_code for p in t.partition_errors] == [ErrorCode.STALE_CONTROLLER_EPOCH]
    # An older controller epoch refuses the whole request.
    response = cluster.leader_and_isr(2, [state], controller_epoch=0)
    assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    # StopReplica with an older leader epoch than ours is fenced; a current one deletes.
    newer = PartitionState(topic, state.topic_id, 0, 1, 3, [1, 2, 3], [1, 2, 3], 1)
    cluster.elect(newer)
    stop = cluster.stop_replica(3, topic, 0, leader_epoch=2, delete=True)
    assert [p.error_code for p in stop.partition_errors] == [ErrorCode.FENCED_LEADER_EPOCH]
    stop = cluster.stop_replica(3, topic, 0, leader_epoch=3, delete=True)
    assert stop.error_code == ErrorCode.NONE
    assert [p.error_code for p in stop.partition_errors] == [ErrorCode.NONE]
    assert not (cluster.brokers[3].data_dir / f"{topic}-0").exists()


def test_fetch_from_a_broker_that_is_not_a_replica(cluster: Cluster, topic: str) -> None:
    cluster.create_partition(topic, [1, 2], isr=[1, 2])
    request = FetchRequest(
        replica_id=3,
        max_wait_ms=0,
        min_bytes=0,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0,
                        current_leader_epoch=0,
                        fetch_offset=0,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )
    with RawClient(cluster.brokers[1].bootstrap) as c:
        p = c.request(request, 12).responses[0].partitions[0]
    assert p.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_stock_client_finds_the_leader_and_reads_replicated_records(
    cluster: Cluster, topic: str
) -> None:
    """librdkafka bootstraps from a follower, learns the leader from Metadata, produces with
    acks=all, and reads back from the leader: the cluster as a client sees it."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster.create_partition(topic, [3, 1, 2], leader=3)
    producer = Producer(
        {"bootstrap.servers": cluster.brokers[1].bootstrap, "acks": "all", "linger.ms": 5}
    )
    delivered: list[Any] = []
    for i in range(50):
        producer.produce(
            topic, value=f"v{i}".encode(), partition=0, on_delivery=lambda e, m: delivered.append(e)
        )
    assert producer.flush(30) == 0
    assert delivered == [None] * 50
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.brokers[2].bootstrap,
            "group.id": "unused",  # required by the client; we only assign()
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 50:
            assert time.monotonic() < deadline, f"only {len(values)} records arrived"
            for msg in consumer.consume(50, timeout=0.2):
                assert msg.error() is None, msg.error()
                values.append(msg.value())
    finally:
        consumer.close()
    assert values == [f"v{i}".encode() for i in range(50)]
    same_log_everywhere(cluster, topic, [1, 2, 3])


def test_waiting_produce_holds_only_its_own_connection(cluster: Cluster, topic: str) -> None:
    """An acks=all produce waiting for a paused follower: other connections are served at
    once, and on its own connection the answers still come in request order."""
    from protocol.messages.api_versions import ApiVersionsRequest

    cluster.create_partition(topic, [1, 2, 3])
    cluster.pause(2)
    waiting = RawClient(cluster.brokers[1].bootstrap, timeout=60)
    try:
        request = produce_request(topic, 0, [SimpleRecord(None, b"held")], acks=-1)
        request.timeout_ms = 60_000
        produce_id = waiting.send(request, 9)
        versions_id = waiting.send(ApiVersionsRequest(), 0)  # pipelined behind the produce
        # Another connection is answered meanwhile, and its acks=1 record is written.
        assert produce(cluster, 1, topic, [b"other"], acks=1).error_code == ErrorCode.NONE
        waiting.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            waiting.sock.recv(1)  # nothing answered on the held connection yet
        waiting.sock.settimeout(60)
        cluster.resume(2)
        # The follower catches up, the watermark passes both records: produce, then ApiVersions.
        held = waiting.receive(ProduceRequest, 9, produce_id)
        assert held.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        assert waiting.receive(ApiVersionsRequest, 0, versions_id).error_code == ErrorCode.NONE
    finally:
        waiting.close()


def test_pipelined_produces_are_appended_while_the_first_waits(
    cluster: Cluster, topic: str
) -> None:
    """An idempotent producer's pipelined acks=all batches: the ones behind a waiting batch are
    written at once (so one follower round replicates them all), and answered in order."""
    from protocol.messages.describe_producers import DescribeProducersRequest

    cluster.create_partition(topic, [1, 2, 3])
    cluster.pause(2)
    producer_id, batches = 4242, 3
    held = RawClient(cluster.brokers[1].bootstrap, timeout=60)
    try:
        frames, ids = b"", []
        for sequence in range(batches):
            request = produce_request(
                topic,
                0,
                [SimpleRecord(None, f"v{sequence}".encode())],
                producer_id=producer_id,
                producer_epoch=0,
                base_sequence=sequence,
            )
            request.timeout_ms = 60_000
            ids.append(held.next_correlation_id())
            frames += held.encode(request, 9, ids[-1])
        held.send_raw(frames)

        def last_sequence() -> int:
            describe = DescribeProducersRequest(
                topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
            )
            with RawClient(cluster.brokers[1].bootstrap) as c:
                (t,) = c.request(describe, 0).topics
            (p,) = t.partitions
            return next(
                (s.last_sequence for s in p.active_producers if s.producer_id == producer_id), -1
            )

        # Every batch is written while the first still waits for the paused follower.
        wait_until(lambda: last_sequence() == batches - 1, what="all pipelined batches written")
        held.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            held.sock.recv(1)  # and none is answered yet
        held.sock.settimeout(60)
        cluster.resume(2)
        answers = [held.receive(ProduceRequest, 9, i) for i in ids]  # in request order
        results = [a.responses[0].partition_responses[0] for a in answers]
        assert [(r.error_code, r.base_offset) for r in results] == [(0, 0), (0, 1), (0, 2)]
    finally:
        held.close()
    assert consumed(cluster, 1, topic) == [b"v0", b"v1", b"v2"]


def test_consumer_long_poll_wakes_when_the_watermark_moves(cluster: Cluster, topic: str) -> None:
    cluster.create_partition(topic, [1, 2, 3])
    cluster.pause(3)
    request = fetch_request(topic, max_wait_ms=20_000, min_bytes=1)
    with RawClient(cluster.brokers[1].bootstrap, timeout=60) as consumer:
        started = time.monotonic()
        fetch_id = consumer.send(request, 12)
        # Appended, but not below the watermark while 3 lags: the consumer keeps waiting.
        assert produce(cluster, 1, topic, [b"x"], acks=1).error_code == ErrorCode.NONE
        cluster.resume(3)
        # 3 fetches the record, the watermark moves, and that alone answers the long poll.
        response = consumer.receive(FetchRequest, 12, fetch_id)
        elapsed = time.monotonic() - started
    p = response.responses[0].partitions[0]
    assert [v for _, _, v in decode_records(p.records)] == [b"x"]
    assert p.high_watermark == 1
    assert elapsed < 15, elapsed  # well before max_wait_ms


def test_isr_changes_follow_the_controller_when_it_moves(cluster: Cluster, topic: str) -> None:
    state = cluster.create_partition(topic, [1, 2, 3])
    old = cluster.controller
    # The leader talks to the first controller ...
    cluster.pause(3)
    assert produce(cluster, 1, topic, [b"a"], acks=1).error_code == ErrorCode.NONE
    old.wait_for_isr(state.topic_id, [1, 2])
    cluster.resume(3)
    old.wait_for_isr(state.topic_id, [1, 2, 3])
    sent_to_old = len(old.requests)
    # ... then another is elected: ISR changes go where UpdateMetadata says, on a new connection.
    new = cluster.move_controller()
    cluster.pause(3)
    assert produce(cluster, 1, topic, [b"b"], acks=1).error_code == ErrorCode.NONE
    new.wait_for_isr(state.topic_id, [1, 2])
    cluster.resume(3)
    new.wait_for_isr(state.topic_id, [1, 2, 3])
    assert len(old.requests) == sent_to_old
