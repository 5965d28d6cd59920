"""A ZooKeeper cluster whose inter-broker listener is SSL: the controller's requests and the
replica fetchers go over TLS, each broker presenting its keystore's certificate (client
authentication is required) and checking its peer's host name against its truststore."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trustme
from confluent_kafka import Producer

from tests.cluster.harness import eventually, start_broker
from tests.cluster.test_controller import create_topic

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, f"replicated-{i}".encode())
    assert producer.flush(30) == 0


def test_replication_over_an_ssl_inter_broker_listener(zk_connect: str, tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "broker.pem")
    )
    tls = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter_broker_listener_name": "SSL",
        "ssl_keystore_type": "PEM",
        "ssl_keystore_location": str(tmp_path / "broker.pem"),
        "ssl_truststore_type": "PEM",
        "ssl_truststore_location": str(tmp_path / "ca.pem"),
        "ssl_client_auth": "required",
        "min_insync_replicas": "2",
    }

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, **tls)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2, **tls)
            await eventually(lambda: b1.broker.controller_id > 0, what="a controller")
            result = await create_topic(b1, "secured", 1, 2)
            assert result.error_code == 0, result.error_message
            brokers = (b1.broker, b2.broker)

            def both_have_it() -> bool:
                return all(b.partition("secured", 0) is not None for b in brokers)

            await eventually(both_have_it, what="LeaderAndIsr on both brokers")
            # acks=all with min.insync.replicas=2: answered only once the follower fetched.
            plaintext = b1.bootstrap_servers.split(",")[0]
            await trio.to_thread.run_sync(_produce, plaintext, "secured", 10)

            def replicated() -> bool:
                parts = [b.partition("secured", 0) for b in brokers]
                return all(p is not None and p.log_end_offset == 10 for p in parts)

            await eventually(replicated, what="both replicas at offset 10")
            nursery.cancel_scope.cancel()

    trio.run(main)
