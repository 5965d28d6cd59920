"""ACLs in a 3-broker ZooKeeper cluster: kept in ZooKeeper as Kafka keeps them, followed by every
broker, and brokers that are super users replicating while clients are held to the ACLs.

Clients log in with SASL/PLAIN on their own listener; the brokers reach each other over TLS (each
certificate's CN mapped to its principal by `ssl.principal.mapping.rules`: `User:broker`) or over
PLAINTEXT (as `User:ANONYMOUS`), and those principals are super users. Kafka's kafka-acls adds
and removes ACLs through a broker, and also reads and writes ZooKeeper directly
(`--authorizer-properties zookeeper.connect=...`, Kafka's own AclAuthorizer): both see the same
ACLs. The controller's requests from a client principal -- on the client listener, or on the
inter-broker listener with a certificate that is not a broker's -- are refused and change nothing.
Brokers that are only allowed CLUSTER_ACTION (not super users) replicate and run transactions:
the coordinator's markers and KIP-890 verifications to other brokers go through.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from confluent_kafka import Producer
from kazoo.client import KazooClient

from compat.clients import java as run_java
from protocol.errors import ErrorCode
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from tests.cluster.harness import eventually, start_broker
from tests.cluster.processes import zk_session
from tests.wirebroker.helpers import RawClient, fetch_request
from tests.wirebroker.secured import (
    ACL_COMMAND,
    TRANSACTIONAL_ID,
    acl,
    client_config,
    command_config,
    create_topics,
    grant,
    kafka_acls,
    login,
    secured_properties,
)
from tests.wirebroker.secured import (
    TOPIC as TOPIC_RESOURCE,
)
from tests.wirebroker.test_txn_producer_clients import read_committed
from wirebroker.authorizer.acls import AclOperation, PatternType, ResourceType
from wirebroker.coordinator_store import partition_for
from wirebroker.peer import PeerConnection, PeerSecurity
from wirebroker.server import RunningBroker
from wirebroker.zk import znodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TOPIC = "orders"


def port(running: RunningBroker, listener: str) -> int:
    return next(lst.port for lst in running.listeners if lst.name == listener)


def sasl(running: RunningBroker) -> str:
    return f"127.0.0.1:{port(running, 'SASL_PLAINTEXT')}"


def metadata_code(bootstrap: str, user: str) -> int:
    with RawClient(bootstrap, plain=login(user)) as client:
        answer = client.request(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                allow_auto_topic_creation=False,
            ),
            12,
        )
    return int(answer.topics[0].error_code)


async def start_with_topic(
    nursery: trio.Nursery, zk_connect: str, tmp_path: Path, settings: dict[str, str]
) -> list[RunningBroker]:
    """Brokers 1-3, and `TOPIC` (one partition, on all three) created by the admin."""
    brokers = [await start_broker(nursery, zk_connect, tmp_path, i, **settings) for i in (1, 2, 3)]
    await eventually(lambda: brokers[0].broker.controller_id > 0, what="a controller")
    await trio.to_thread.run_sync(
        lambda: create_topics(sasl(brokers[0]), TOPIC, partitions=1, replication=3)
    )
    await eventually(
        lambda: all(b.broker.partition(TOPIC, 0) is not None for b in brokers),
        what="the topic on every broker",
    )
    return brokers


def request_as(bootstrap: str, user: str | None, body: Any, version: int) -> Any:
    """One request on a fresh connection (SASL/PLAIN as `user`; None: no login)."""
    with RawClient(bootstrap, plain=login(user) if user else None) as client:
        return client.request(body, version)


def produce(bootstrap: str, user: str, count: int) -> None:
    producer = Producer({**client_config(bootstrap, user), "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(TOPIC, f"v{i}".encode())
    assert producer.flush(30) == 0


def allowed(
    running: RunningBroker,
    user: str,
    operation: AclOperation,
    resource: tuple[ResourceType, str] = (ResourceType.TOPIC, TOPIC),
) -> bool:
    """What this broker's authorizer (its cache of ZooKeeper's ACLs) answers."""
    authorizer = running.broker.authorizer
    assert authorizer is not None
    return authorizer.authorize(
        f"User:{user}", "127.0.0.1", "Test", operation, *resource,
        log_if_allowed=False, log_if_denied=False,
    )  # fmt: skip


async def java(*args: Any) -> str:
    return await trio.to_thread.run_sync(lambda: kafka_acls(*args))


def test_acls_reach_every_broker_and_brokers_replicate_over_tls(
    zk_connect: str, tmp_path: Path
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1", common_name="broker").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "broker.pem")
    )
    intruder = ca.issue_cert("127.0.0.1", common_name="alice")
    settings = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter_broker_listener_name": "SSL",
        "ssl_keystore_type": "PEM",
        "ssl_keystore_location": str(tmp_path / "broker.pem"),
        "ssl_truststore_type": "PEM",
        "ssl_truststore_location": str(tmp_path / "ca.pem"),
        "ssl_client_auth": "required",
        "ssl_principal_mapping_rules": "RULE:^CN=([a-z]+),.*$/$1/,DEFAULT",
        **secured_properties(),
        "super_users": "User:admin;User:broker",
        "min_insync_replicas": "2",
    }
    admin_config = command_config(tmp_path, "admin")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            brokers = await start_with_topic(nursery, zk_connect, tmp_path, settings)
            b1, _, b3 = brokers

            # kafka-acls through broker 1: the ACL is in ZooKeeper as Kafka writes it ...
            await java(sasl(b1), admin_config, "--add", "--allow-principal", "User:alice",
                       "--operation", "Write", "--topic", TOPIC)  # fmt: skip
            assert b1.broker.cluster is not None
            zk = b1.broker.cluster.zk
            got = await zk.get(f"/kafka-acl/Topic/{TOPIC}")
            assert got is not None and json.loads(got[0]) == {
                "version": 1,
                "acls": [
                    {
                        "principal": "User:alice",
                        "permissionType": "Allow",
                        "operation": "Write",
                        "host": "*",
                    }
                ],
            }
            changes = await zk.get_children(znodes.ACL_CHANGES[PatternType.LITERAL])
            assert changes and all(c.startswith("acl_changes_") for c in changes)
            # ... and every broker follows: alice may write (and so describe) everywhere, bob not
            # (every broker waited for: her records below go to the partition's leader, any one)
            await eventually(
                lambda: all(allowed(b, "alice", AclOperation.WRITE) for b in brokers),
                what="every broker learns the ACL",
            )
            assert await trio.to_thread.run_sync(metadata_code, sasl(b3), "alice") == ErrorCode.NONE
            assert (
                await trio.to_thread.run_sync(metadata_code, sasl(b3), "bob")
                == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )

            # Kafka's own AclAuthorizer, reading ZooKeeper directly, sees the same ACL; and one it
            # writes there reaches our brokers.
            direct = ("--authorizer-properties", f"zookeeper.connect={zk_connect}")
            listed = await trio.to_thread.run_sync(
                lambda: _acl_command(*direct, "--list", "--topic", TOPIC)
            )
            assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in listed
            await trio.to_thread.run_sync(
                lambda: _acl_command(
                    *direct,
                    "--add",
                    "--allow-principal",
                    "User:bob",
                    "--operation",
                    "Read",
                    "--topic",
                    "orders",
                    "--resource-pattern-type",
                    "prefixed",
                )  # fmt: skip
            )
            await eventually(
                lambda: allowed(b3, "bob", AclOperation.DESCRIBE),
                what="broker 3 learns Kafka's ACL",
            )

            # the brokers, super users, replicate alice's acks=all records over TLS
            await trio.to_thread.run_sync(produce, sasl(b1), "alice", 5)
            await eventually(
                lambda: all(b.broker.partition(TOPIC, 0).log_end_offset == 5 for b in brokers),  # type: ignore[union-attr]
                what="every replica at offset 5",
            )

            # the controller's requests from a client principal are refused, nothing changes
            partition = b3.broker.partition(TOPIC, 0)
            assert partition is not None
            epoch_before = partition.leader_epoch
            forged = _leader_and_isr(b3.broker.broker_epoch, partition.leader_epoch + 5)
            # the client listener
            answer = await trio.to_thread.run_sync(request_as, sasl(b3), "admin", forged, 7)
            assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
            intruder.configure_cert(context)
            peer = await PeerConnection.open(
                "127.0.0.1", port(b3, "SSL"), client_id="x", security=PeerSecurity(context)
            )
            try:  # the inter-broker listener, but User:alice is no broker
                answer = await peer.request(forged, 7)
                assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                follower = await peer.request(fetch_request(TOPIC, replica_id=2), 12)
                assert [p.error_code for p in follower.responses[0].partitions] == [
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED
                ]
            finally:
                await peer.aclose()
            assert (
                partition.leader_epoch == epoch_before
                and b3.broker.partition(TOPIC, 0) is partition
            )

            # removed through broker 3: broker 1 follows
            await java(sasl(b3), admin_config, "--remove", "--force", "--allow-principal", "User:alice",
                       "--operation", "Write", "--topic", TOPIC)  # fmt: skip
            await eventually(
                lambda: not allowed(b1, "alice", AclOperation.WRITE), what="broker 1 forgets it"
            )
            assert await zk.get(f"/kafka-acl/Topic/{TOPIC}") is None  # emptied: deleted, as Kafka
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_plaintext_between_brokers_and_the_broker_epoch(zk_connect: str, tmp_path: Path) -> None:
    """With PLAINTEXT between brokers the brokers are `User:ANONYMOUS` (a super user here, as
    Kafka users configure it); clients on the SASL listener still cannot act as brokers, and a
    request on the inter-broker listener must carry this broker's epoch."""
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter_broker_listener_name": "PLAINTEXT",
        **secured_properties(),
        "super_users": "User:admin;User:ANONYMOUS",
    }

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            brokers = await start_with_topic(nursery, zk_connect, tmp_path, settings)
            b1, b2, _ = brokers
            await java(sasl(b2), command_config(tmp_path, "admin"), "--add", "--allow-principal",
                       "User:alice", "--operation", "Write", "--topic", TOPIC)  # fmt: skip
            await eventually(
                lambda: all(allowed(b, "alice", AclOperation.WRITE) for b in brokers),
                what="the ACL everywhere",
            )
            await trio.to_thread.run_sync(produce, sasl(b1), "alice", 3)
            await eventually(
                lambda: all(b.broker.partition(TOPIC, 0).log_end_offset == 3 for b in brokers),  # type: ignore[union-attr]
                what="every replica at offset 3",
            )
            epoch = b2.broker.broker_epoch
            metadata = UpdateMetadataRequest(
                controller_id=1, controller_epoch=99, broker_epoch=epoch
            )
            answer = await trio.to_thread.run_sync(request_as, sasl(b2), "admin", metadata, 8)
            assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            plaintext = f"127.0.0.1:{port(b2, 'PLAINTEXT')}"
            for stale in (-1, epoch - 1):  # the inter-broker listener: epochs decide
                metadata.broker_epoch = stale
                answer = await trio.to_thread.run_sync(request_as, plaintext, None, metadata, 8)
                assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH
            assert b2.broker.replica_manager.controller_epoch < 99  # nothing applied
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_brokers_allowed_cluster_action_run_transactions(zk_connect: str, tmp_path: Path) -> None:
    """The brokers are not super users, only allowed CLUSTER_ACTION (the ACL written to
    ZooKeeper by Kafka's own AclAuthorizer before they start): they replicate, and alice's
    transactions over three partitions led by three brokers commit and abort, the
    coordinator's markers and the leaders' KIP-890 verifications going between brokers."""
    with zk_session(KazooClient(hosts=zk_connect.split("/", 1)[0])) as chroot_client:
        chroot_client.ensure_path("/" + zk_connect.split("/", 1)[1])
    _acl_command(
        "--authorizer-properties", f"zookeeper.connect={zk_connect}", "--add",
        "--allow-principal", "User:ANONYMOUS", "--operation", "ClusterAction", "--cluster",
    )  # fmt: skip
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter_broker_listener_name": "PLAINTEXT",
        **secured_properties(),  # super.users: User:admin only
        "min_insync_replicas": "2",
        "transaction_state_log_num_partitions": "3",
    }
    topic, tid = "txn-out", "alice-tx"

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            brokers = [
                await start_broker(nursery, zk_connect, tmp_path, i, **settings) for i in (1, 2, 3)
            ]
            await eventually(lambda: brokers[0].broker.controller_id > 0, what="a controller")
            bootstrap = sasl(brokers[0])
            await trio.to_thread.run_sync(
                lambda: create_topics(bootstrap, topic, partitions=3, replication=3)
            )
            await trio.to_thread.run_sync(
                lambda: grant(
                    bootstrap,
                    acl(TRANSACTIONAL_ID, tid, "User:alice", AclOperation.WRITE),
                    acl(TOPIC_RESOURCE, topic, "User:alice", AclOperation.WRITE),
                )
            )

            def replicated(p: int) -> bool:
                leaders = [
                    part
                    for b in brokers
                    if (part := b.broker.partition(topic, p)) is not None and part.is_local_leader
                ]
                return len(leaders) == 1 and len(leaders[0].isr) == 3

            await eventually(
                lambda: all(replicated(p) for p in range(3)),
                what="the topic replicated everywhere",
            )
            # alice's requests go to the coordinator and the leaders: any broker
            await eventually(
                lambda: all(
                    allowed(b, "alice", AclOperation.WRITE, resource)
                    for b in brokers
                    for resource in (
                        (ResourceType.TRANSACTIONAL_ID, tid),
                        (ResourceType.TOPIC, topic),
                    )
                ),
                what="every broker learns alice's ACLs",
            )

            def transactions() -> list[bytes]:
                producer = Producer({**client_config(bootstrap, "alice"), "transactional.id": tid})
                producer.init_transactions(60)
                for label, commit in (("first", True), ("aborted", False), ("second", True)):
                    producer.begin_transaction()
                    for p in range(3):
                        producer.produce(topic, f"{label}-{p}".encode(), partition=p)
                    if commit:
                        producer.commit_transaction(60)
                    else:
                        producer.flush(60)
                        producer.abort_transaction(60)
                admin = client_config(bootstrap, "admin")
                return read_committed(bootstrap, topic, 3, 6, 60, config=admin)

            seen = await trio.to_thread.run_sync(transactions)
            committed = [f"{label}-{p}".encode() for label in ("first", "second") for p in range(3)]
            assert sorted(seen) == sorted(committed)
            cache = brokers[0].broker.metadata_cache
            coordinator = cache.partition("__transaction_state", partition_for(tid, 3))
            leaders = {cache.partition(topic, p).leader for p in range(3)}  # type: ignore[union-attr]
            assert coordinator is not None and leaders - {coordinator.leader}  # some remote
            nursery.cancel_scope.cancel()

    trio.run(main)


def _acl_command(*args: str) -> str:
    """kafka-acls without a broker: Kafka's AclAuthorizer on ZooKeeper itself."""
    return run_java(ACL_COMMAND, *args)


def _leader_and_isr(broker_epoch: int, leader_epoch: int) -> LeaderAndIsrRequest:
    state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name=TOPIC, partition_index=0, controller_epoch=99, leader=3,
        leader_epoch=leader_epoch, isr=[3], partition_epoch=leader_epoch, replicas=[3],
    )  # fmt: skip
    return LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=99,
        broker_epoch=broker_epoch,
        topic_states=[
            LeaderAndIsrRequest.LeaderAndIsrTopicState(topic_name=TOPIC, partition_states=[state])
        ],
    )
