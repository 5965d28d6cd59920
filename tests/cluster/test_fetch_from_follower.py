"""Consumers fetching from followers (KIP-392) in a three-broker cluster, one rack per broker:
a follower serves a v11+ consumer fetch from its own log up to its high watermark (its last
stable offset for read_committed), with Kafka's errors outside it and an empty answer between
its high watermark and its log end; the leader, with RackAwareReplicaSelector, sends a consumer
naming a follower's rack to that follower (and logs it at DEBUG); and
librdkafka and the Java client with `client.rack` read their records from the same-rack
follower. The raw answers
are checked on broker processes (and against Kafka 3.9: WIREBROKER_CLUSTER_TARGET=kafka); the
others on in-process brokers, whose byte counters show who served."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Producer

from compat.kafka_process import run_kafka_tool
from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchRequest
from tests.cluster.harness import (
    call,
    consume,
    create_topic,
    eventually,
    produce,
    replicated,
    start_broker,
)
from tests.cluster.processes import LOOPBACK, running_cluster
from tests.wirebroker.helpers import RawClient, wait_until
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.server import RunningBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "nearby"
RECORDS = 20
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER, NEAR, FAR = 1, 2, 3  # the partition's replicas are [1, 2, 3]: broker 1 leads
OPEN = 3  # records of the transaction left open
READ_COMMITTED = 1
LONG_POLL_MS = 20_000
UNCOMMITTED = 3  # records past the follower's high watermark
LAG_MS = 30_000


async def start_racks(nursery: trio.Nursery, zk_connect: str, tmp: Path) -> dict[int, Any]:
    """Brokers 1-3 in racks rack-1..3 with the rack-aware selector, the topic written to all
    three and every follower's high watermark at its end."""
    brokers = {
        i: await start_broker(
            nursery,
            zk_connect,
            tmp,
            i,
            broker_rack=f"rack-{i}",
            replica_selector_class=SELECTOR,
            **{
                "wirebroker.metrics.listener": "127.0.0.1:0",
                "transaction.state.log.num.partitions": "1",
            },
        )
        for i in (1, 2, 3)
    }
    await eventually(
        lambda: all(
            len(list(b.broker.metadata_cache.alive_brokers())) == 3 for b in brokers.values()
        ),
        what="3 live brokers",
    )
    await create_topic(brokers[1], TOPIC, 1, assignments={0: [LEADER, NEAR, FAR]})
    await eventually(
        lambda: all(b.broker.partition(TOPIC, 0) is not None for b in brokers.values()),
        what="every replica made",
    )
    leader = brokers[LEADER].broker.partition(TOPIC, 0)
    await eventually(lambda: leader.is_local_leader and len(leader.isr) == 3, what="full ISR")
    await trio.to_thread.run_sync(
        produce, {"bootstrap.servers": bootstrap(brokers[1])}, TOPIC, RECORDS
    )
    await replicated(list(brokers.values()), TOPIC, RECORDS)
    await eventually(
        lambda: all(
            b.broker.partition(TOPIC, 0).high_watermark == RECORDS for b in brokers.values()
        ),
        what="every replica's high watermark at the end",
    )
    return brokers


def bootstrap(running: RunningBroker) -> str:
    listener = running.listeners[0]
    return f"{listener.host}:{listener.port}"


def fetch(
    offset: int, *, rack: str = "", epoch: int = -1, isolation: int = 0, wait_ms: int = 0
) -> FetchRequest:
    """A consumer's fetch of the topic's partition 0 (topic by name: v12 and below)."""
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=wait_ms,
        min_bytes=1,
        isolation_level=isolation,
        rack_id=rack,
        topics=[
            FetchRequest.FetchTopic(
                topic=TOPIC,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0,
                        current_leader_epoch=epoch,
                        fetch_offset=offset,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )


async def answer(running: RunningBroker, request: FetchRequest, version: int) -> Any:
    response = await call(running, request, version)
    assert response.error_code == ErrorCode.NONE
    return response.responses[0].partitions[0]


def run(body: Any, zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            brokers = await start_racks(nursery, zk_connect, tmp_path)
            await body(brokers)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_follower_bounds_read_committed_at_its_last_stable_offset(
    zk_connect: str, tmp_path: Path
) -> None:
    async def body(brokers: dict[int, RunningBroker]) -> None:
        producer = await trio.to_thread.run_sync(open_transaction, bootstrap(brokers[LEADER]))
        try:
            near = brokers[NEAR]
            replica = near.broker.partition(TOPIC, 0)
            end = RECORDS + OPEN
            await eventually(lambda: replica.high_watermark == end, what="the follower's HW")
            committed = await answer(near, fetch(0, isolation=READ_COMMITTED), 12)
            assert committed.error_code == ErrorCode.NONE
            assert (committed.high_watermark, committed.last_stable_offset) == (end, RECORDS)
            # At its last stable offset a read_committed consumer waits for the decision; a
            # read_uncommitted one reads on up to the high watermark.
            held = await answer(near, fetch(RECORDS, isolation=READ_COMMITTED), 12)
            assert (held.error_code, len(held.records)) == (ErrorCode.NONE, 0)
            read = await answer(near, fetch(RECORDS), 12)
            assert (read.error_code, len(read.records) > 0) == (ErrorCode.NONE, True)
        finally:
            await trio.to_thread.run_sync(producer.abort_transaction, 30)

    run(body, zk_connect, tmp_path)


def open_transaction(bootstrap_servers: str) -> Producer:
    """A transactional producer with `OPEN` records in a transaction it has not ended."""
    producer = Producer({"bootstrap.servers": bootstrap_servers, "transactional.id": "nearby"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(OPEN):
        producer.produce(TOPIC, f"open-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    return producer


def java_consume(config: dict[str, str], topic: str, count: int) -> list[bytes]:
    """The first `count` records of partition 0 of `topic`, by the Java client (Kafka 3.9's
    console consumer) with `config`'s settings."""
    done = run_kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        ["--bootstrap-server", config["bootstrap.servers"], "--topic", topic, "--partition", "0"]
        + ["--offset", "earliest", "--max-messages", str(count), "--timeout-ms", "30000"]
        + [a for k, v in config.items() for a in ("--consumer-property", f"{k}={v}")],
    )
    return [line.encode() for line in done.stdout.decode().splitlines()]


@pytest.mark.parametrize("consumer", [consume, java_consume], ids=["librdkafka", "java"])
def test_the_leader_sends_a_consumer_to_its_racks_follower(
    zk_connect: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    consumer: Callable[[dict[str, str], str, int], list[bytes]],
) -> None:
    caplog.set_level(logging.DEBUG, logger="wirebroker.handlers.fetch")

    async def body(brokers: dict[int, RunningBroker]) -> None:
        leader = brokers[LEADER]
        # The consumer in rack-2 reads every record from broker 2, none from the leader.
        before = {i: topic_bytes_out(b) for i, b in brokers.items()}
        config = {
            "bootstrap.servers": bootstrap(leader),
            "client.rack": f"rack-{NEAR}",
            "client.id": "nearby-reader",
        }
        got = await trio.to_thread.run_sync(consumer, config, TOPIC, RECORDS)
        assert got == [f"replicated-{i}".encode() for i in range(RECORDS)]
        bytes_out = {i: topic_bytes_out(b) - before[i] for i, b in brokers.items()}
        assert bytes_out[NEAR] > 0 and bytes_out[LEADER] == bytes_out[FAR] == 0, bytes_out

    run(body, zk_connect, tmp_path)
    # The leader says whom it sent where, at DEBUG (Kafka's ReplicaManager does).
    assert (
        f"RackAwareReplicaSelector sends a consumer of {TOPIC}-0 to replica {NEAR} (client rack "
        f"rack-{NEAR}, client id nearby-reader, address 127.0.0.1, principal User:ANONYMOUS, "
        "listener PLAINTEXT)"
    ) in caplog.messages


def topic_bytes_out(running: RunningBroker) -> int:
    """Kafka's BytesOutPerSec of the topic on this broker: record bytes sent to consumers."""
    stats = running.broker.stats.topics.get(TOPIC)
    return 0 if stats is None else stats.bytes_out


def test_answers_of_a_follower_and_a_rack_aware_leader(kind: str) -> None:
    """Broker processes; checked against Kafka 3.9 with WIREBROKER_CLUSTER_TARGET=kafka."""
    with running_cluster(
        kind,
        overrides={
            "replica.selector.class": SELECTOR,
            # a stopped replica stays in the ISR (holding the HW) for the test's last part
            "replica.lag.time.max.ms": str(LAG_MS),
            "zookeeper.session.timeout.ms": str(LAG_MS),
        },
        node_overrides=lambda i: {"broker.rack": f"rack-{i}"},
    ) as cluster:
        cluster.create_topic(TOPIC, 1)
        state = cluster.partitions(TOPIC)[0]
        leader = f"{LOOPBACK}:{cluster.node(state.leader).port}"
        near_id = next(r for r in state.replicas if r != state.leader)
        near = f"{LOOPBACK}:{cluster.node(near_id).port}"
        produce({"bootstrap.servers": cluster.bootstrap}, TOPIC, RECORDS)
        # v11+ carries client metadata: the follower reads its own log, up to its HW.
        read = wait_until(
            lambda: (r := ask(near, fetch(0), 11)).high_watermark == RECORDS and r,
            what="the follower serving up to its high watermark",
        )
        assert (read.error_code, read.last_stable_offset, read.log_start_offset) == (0, RECORDS, 0)
        assert len(read.records) > 0
        # At its high watermark: nothing yet, no error (a long poll would wait there).
        at_end = ask(near, fetch(RECORDS, epoch=state.leader_epoch), 12)
        assert (at_end.error_code, len(at_end.records)) == (ErrorCode.NONE, 0)
        # Beyond its log: OFFSET_OUT_OF_RANGE, offsets unknown.
        beyond = ask(near, fetch(RECORDS + 5), 12)
        assert (beyond.error_code, beyond.high_watermark) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
        # The leader epoch is checked against the follower's.
        ahead = ask(near, fetch(0, epoch=state.leader_epoch + 1), 12)
        assert ahead.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        # Without client metadata (v10) a consumer must go to the leader.
        assert ask(near, fetch(0), 10).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # Only a leader chooses a replica: the follower serves any rack.
        other = ask(near, fetch(0, rack=f"rack-{state.leader}"), 12)
        assert (other.preferred_read_replica, len(other.records) > 0) == (-1, True)

        # The leader sends a consumer of the follower's rack there, without records.
        sent = ask(leader, fetch(0, rack=f"rack-{near_id}"), 12)
        assert (sent.error_code, sent.preferred_read_replica, len(sent.records)) == (0, near_id, 0)
        assert (sent.high_watermark, sent.last_stable_offset) == (RECORDS, RECORDS)
        # No replica holds the offset: the leader reads it (out of range).
        past = ask(leader, fetch(RECORDS + 5, rack=f"rack-{near_id}"), 12)
        assert (past.error_code, past.preferred_read_replica) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
        for rack in (f"rack-{state.leader}", "elsewhere", ""):  # its own rack, or none
            kept = ask(leader, fetch(0, rack=rack), 12)
            assert (kept.preferred_read_replica, len(kept.records) > 0) == (-1, True)

        # A long poll at the follower's end is answered once a new record reaches its HW.
        with ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            polled = pool.submit(ask, near, fetch(RECORDS, wait_ms=LONG_POLL_MS), 12)
            produce({"bootstrap.servers": cluster.bootstrap}, TOPIC, 1)
            woken = polled.result(LONG_POLL_MS / 1000 + 10)
        assert (woken.error_code, woken.high_watermark) == (ErrorCode.NONE, RECORDS + 1)
        assert len(woken.records) > 0 and time.monotonic() - started < LONG_POLL_MS / 1000

        # Between the follower's high watermark and its log end: the third replica, stopped
        # but still in the ISR (for LAG_MS), holds the HW while the follower copies records
        # past it. Kafka's log read stops at the HW: no records and no error, the HW as it is.
        far_id = next(r for r in state.replicas if r not in (state.leader, near_id))
        hw, leo = RECORDS + 1, RECORDS + 1 + UNCOMMITTED
        cluster.pause(far_id)
        try:
            produce_acks_1(leader, UNCOMMITTED)
            wait_until(
                lambda: ask(near, fetch(leo), 12).error_code == ErrorCode.NONE,
                what="the follower's log end past its high watermark",
            )
            for offset in range(hw, leo + 1):
                above = ask(near, fetch(offset), 12)
                assert (above.error_code, len(above.records)) == (ErrorCode.NONE, 0), offset
                assert (above.high_watermark, above.last_stable_offset) == (hw, hw), offset
            beyond = ask(near, fetch(leo + 1), 12)
            assert (beyond.error_code, beyond.high_watermark) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
        finally:
            cluster.resume(far_id)


def produce_acks_1(address: str, count: int) -> None:
    """`count` records to partition 0 acknowledged by the leader alone (the HW need not move)."""
    producer = Producer({"bootstrap.servers": address, "acks": "1", "linger.ms": 0})
    for i in range(count):
        producer.produce(TOPIC, f"uncommitted-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def ask(address: str, request: FetchRequest, version: int) -> Any:
    with RawClient(address) as client:
        response = client.request(request, version)
    assert response.error_code == ErrorCode.NONE
    return response.responses[0].partitions[0]


def test_an_unknown_replica_selector_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="replica.selector.class=com.example.NearestSelector"):
        BrokerConfig.from_properties(
            {"log.dirs": str(tmp_path), "replica.selector.class": "com.example.NearestSelector"}
        )
