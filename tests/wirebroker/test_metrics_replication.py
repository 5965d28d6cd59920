"""The replication metrics of /metrics between real broker processes: ISR shrinks and expands,
under-replicated partitions, replication bytes. The test plays the controller
(`tests/wirebroker/cluster_harness.py`) and pauses a follower with SIGSTOP."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.record_batch import SimpleRecord
from tests.wirebroker.cluster_harness import Cluster
from tests.wirebroker.helpers import RawClient, produce_request, scrape, value, wait_until

pytestmark = pytest.mark.integration

PROPERTIES = {
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "wirebroker.metrics.listener": "127.0.0.1:0",
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


def metrics_url(cluster: Cluster, broker_id: int) -> str:
    line = cluster.brokers[broker_id].wait_for_log("metrics endpoint on")
    assert line is not None
    m = re.search(r"(http://\S+/metrics)", line)
    assert m is not None, line
    return m[1]


def test_isr_shrink_and_expand_are_counted(cluster: Cluster, topic: str) -> None:
    state = cluster.create_partition(topic, [1, 2, 3])
    leader, follower = metrics_url(cluster, 1), metrics_url(cluster, 2)
    request = produce_request(topic, 0, [SimpleRecord(None, b"r" * 100)] * 10, acks=-1)
    with RawClient(cluster.brokers[1].bootstrap) as client:
        response = client.request(request, 9)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    fetched = scrape(follower)
    assert value(fetched, "kafka_server_brokertopicmetrics_replicationbytesin_total") > 1000
    sent = scrape(leader)
    assert value(sent, "kafka_server_brokertopicmetrics_replicationbytesout_total") > 1000
    # acks=all waited for the followers: remote time (Kafka's DelayedProduce in purgatory)
    produce = {"request": "Produce", "quantile": "0.999"}
    assert value(sent, "kafka_network_requestmetrics_remotetimems", **produce) > 0
    followers = {"request": "FetchFollower"}
    assert value(sent, "kafka_network_requestmetrics_totaltimems_count", **followers) > 0
    assert value(sent, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(sent, "kafka_server_replicamanager_leadercount") == 1
    assert value(fetched, "kafka_server_replicamanager_partitioncount") == 1
    assert value(fetched, "kafka_server_replicamanager_leadercount") == 0

    cluster.pause(2)  # and falls behind: a follower that has everything stays in the ISR
    request.acks = 1
    with RawClient(cluster.brokers[1].bootstrap) as client:
        client.request(request, 9)
    cluster.controller.wait_for_isr(state.topic_id, [1, 3])
    shrunk = wait_until(
        lambda: (
            (s := scrape(leader))
            and value(s, "kafka_server_replicamanager_isrshrinks_total") == 1
            and s
        ),
        what="the shrink counted",
    )
    assert value(shrunk, "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert value(shrunk, "kafka_server_replicamanager_isrexpands_total") == 0

    cluster.resume(2)
    cluster.controller.wait_for_isr(state.topic_id, [1, 2, 3])
    expanded = wait_until(
        lambda: (
            (s := scrape(leader))
            and value(s, "kafka_server_replicamanager_isrexpands_total") == 1
            and s
        ),
        what="the expansion counted",
    )
    assert value(expanded, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(expanded, "kafka_server_replicamanager_isrshrinks_total") == 1
