"""Consumer lag in a three-broker cluster (in-process brokers over a real ZooKeeper): the
group's coordinator reports the lag of every partition the group committed, those led by the
other brokers too (it asks their leaders for the high watermark, as kafka-exporter does), and
kafka-exporter's per-partition offsets are reported once, by each partition's leader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Producer

from protocol.errors import ErrorCode
from protocol.messages.find_coordinator import FindCoordinatorRequest
from tests.cluster.harness import call, create_topic, eventually, start_cluster
from tests.wirebroker.helpers import Samples, offset_commit_request, scrape, value

pytestmark = pytest.mark.integration

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 3
RECORDS = 10  # per partition


def produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition in range(PARTITIONS):
        for _ in range(RECORDS):
            producer.produce(TOPIC, b"v", partition=partition)
    assert producer.flush(30) == 0


def test_lag_of_partitions_led_by_other_brokers(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        extra = {"wirebroker.metrics.listener": "127.0.0.1:0"}
        async with trio.open_nursery() as nursery:
            brokers = await start_cluster(nursery, zk_connect, tmp_path, **extra)
            await create_topic(brokers[1], TOPIC, PARTITIONS)
            bootstrap = ",".join(b.bootstrap_servers for b in brokers.values())
            await trio.to_thread.run_sync(produce, bootstrap)

            async def coordinator_found() -> Any:
                found = await call(brokers[1], FindCoordinatorRequest(key=GROUP, key_type=0), 3)
                return found if found.error_code == ErrorCode.NONE else None

            found = await eventually(  # while __consumer_offsets is created
                coordinator_found, 30, 0.1, what=f"a coordinator of {GROUP}"
            )
            coordinator = brokers[found.node_id]
            committed = {p: p + 2 for p in range(PARTITIONS)}
            commit = offset_commit_request(GROUP, TOPIC, committed)
            answer = await call(coordinator, commit, 8)
            assert all(p.error_code == 0 for t in answer.topics for p in t.partitions)
            leaders = {
                p: coordinator.broker.metadata_cache.partition(TOPIC, p).leader  # type: ignore[union-attr]
                for p in range(PARTITIONS)
            }
            assert set(leaders.values()) - {found.node_id}, "every partition led by the coordinator"

            urls = {i: b.metrics_url for i, b in brokers.items()}
            assert all(urls.values())
            # The followers learn the high watermark with their next fetch: wait until every
            # leader's is the log end.
            scrapes: dict[int, Samples] = {}

            async def scraped() -> bool:
                for i, url in urls.items():
                    scrapes[i] = await trio.to_thread.run_sync(scrape, url)
                return all(
                    value(scrapes[leader], "kafka_topic_partition_current_offset", **_tp(p))
                    == RECORDS
                    for p, leader in leaders.items()
                )

            await eventually(scraped, 30, 0.2, what="every leader's current offset at the end")
            at_coordinator = scrapes[found.node_id]
            for p, offset in committed.items():
                labels = {"consumergroup": GROUP, **_tp(p)}
                assert (
                    value(at_coordinator, "kafka_consumergroup_current_offset", **labels) == offset
                )
                lag = ("kafka_consumergroup_lag", frozenset(labels.items()))
                assert at_coordinator.get(lag) == RECORDS - offset, (p, leaders[p])
            lag_sum = {"consumergroup": GROUP, "topic": TOPIC}
            expected = sum(RECORDS - o for o in committed.values())
            assert value(at_coordinator, "kafka_consumergroup_lag_sum", **lag_sum) == expected
            # The group is reported by its coordinator only, each partition by its leader only.
            for i, samples in scrapes.items():
                if i != found.node_id:
                    assert not [k for k in samples if k[0] == "kafka_consumergroup_lag"]
                led = {p for p, leader in leaders.items() if leader == i}
                reported = {
                    int(dict(k[1])["partition"])
                    for k in samples
                    if k[0] == "kafka_topic_partition_current_offset" and ("topic", TOPIC) in k[1]
                }
                assert reported == led
            nursery.cancel_scope.cancel()

    trio.run(main)


def _tp(partition: int) -> dict[str, str]:
    return {"topic": TOPIC, "partition": str(partition)}
