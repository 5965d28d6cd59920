"""Listeners added and removed at run time in a 3-broker cluster, with Kafka's kafka-configs.

Each broker gets a listener EXTRA (`--entity-name <id> --add-config listeners=[...]`): it is
stored in `/config/brokers/<id>`, the broker writes its registration `/brokers/ids/<id>` again,
the controller sends UpdateMetadata, and so a Metadata answer of any broker on EXTRA advertises
the others' EXTRA endpoints, which clients then use. A broker whose EXTRA goes is no longer
advertised on it. Run against Kafka 3.9 too with `WIREBROKER_CLUSTER_TARGET=kafka`.
"""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

from compat.kafka_process import free_port
from protocol.messages.metadata import MetadataRequest
from tests.cluster.processes import Cluster, running_cluster, wait_for, zk_session
from tests.cluster.test_dynamic_configs_cluster import kafka_configs
from tests.wirebroker.helpers import RawClient, round_trip_confluent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

MAP = "listener.security.protocol.map=[PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT]"


def set_listeners(cluster: Cluster, node_id: int, listeners: list[str]) -> None:
    """Listen and advertise on `listeners` (Kafka's test brokers set `advertised.listeners`)."""
    both = ",".join(listeners)
    kafka_configs(
        cluster, "--alter", "--entity-type", "brokers", "--entity-name", str(node_id),
        "--add-config", f"listeners=[{both}],advertised.listeners=[{both}],{MAP}",
    )  # fmt: skip


def advertised(bootstrap: str) -> dict[int, int]:
    """Broker id -> port, as a Metadata answer on this connection's listener has them."""
    with RawClient(bootstrap, timeout=5.0) as client:
        response = client.request(MetadataRequest(topics=[]), 12)
    return {b.node_id: b.port for b in response.brokers}


def test_listeners_added_are_advertised_by_every_broker(kind: str) -> None:
    with running_cluster(kind) as cluster:
        extra = {n: free_port() for n in cluster.nodes}
        for n, node in cluster.nodes.items():
            plaintext = f"PLAINTEXT://127.0.0.1:{node.port}"
            set_listeners(cluster, n, [plaintext, f"EXTRA://127.0.0.1:{extra[n]}"])
        one = f"127.0.0.1:{extra[1]}"
        wait_for(
            lambda: advertised(one) == extra,
            60.0,
            f"broker 1 to advertise every EXTRA endpoint {extra}",
        )
        # Other brokers' answers on PLAINTEXT are unchanged.
        assert advertised(f"127.0.0.1:{cluster.node(2).port}") == {
            n: node.port for n, node in cluster.nodes.items()
        }
        with zk_session(KazooClient(hosts=cluster.zk.connect), 30) as zk:
            registration = json.loads(zk.get("/brokers/ids/2")[0])
            assert f"EXTRA://127.0.0.1:{extra[2]}" in registration["endpoints"]
            stored = json.loads(zk.get("/config/brokers/2")[0])["config"]
            assert stored["listeners"].endswith(f"EXTRA://127.0.0.1:{extra[2]}")
        # Clients bootstrapped on EXTRA reach every partition's leader through EXTRA.
        cluster.create_topic("through-extra", partitions=3)
        cluster.wait_fully_replicated("through-extra")
        assert sorted(round_trip_confluent(one, "through-extra")) == [b"m0", b"m1", b"m2"]

        # Broker 3's EXTRA goes: no longer advertised on EXTRA.
        set_listeners(cluster, 3, [f"PLAINTEXT://127.0.0.1:{cluster.node(3).port}"])
        gone = {n: p for n, p in extra.items() if n != 3}
        wait_for(lambda: advertised(one) == gone, 60.0, "broker 3's EXTRA to be forgotten")
