"""ZooKeeper clusters whose inter-broker listener is secured: the controller's requests, the
replica fetchers and AlterPartition go over it, each broker presenting its keystore's
certificate and checking its peer's host name against its truststore.

- SSL, client certificates required (2 brokers).
- SASL_SSL with SCRAM-SHA-512 between brokers (3 brokers): the brokers' own user is created in
  ZooKeeper before they start with Kafka's `kafka-configs --zookeeper`, a client user through
  the running cluster with `kafka-configs --bootstrap-server` over SASL_SSL, and that user
  produces with acks=all (min.insync.replicas=2) and consumes it back. The ACL authorizer is
  on: the brokers act as brokers as the super user they log in as (`User:broker`), and alice
  may only what her ACLs grant.
- SASL_PLAINTEXT with PLAIN between brokers (2 brokers), its password rotated at run time (a
  dynamic per-broker config): the controller's next connection, to a broker restarted after the
  change, logs in with the new password, so its LeaderAndIsr brings the broker back into the
  ISR; the old password is refused.
- SASL_PLAINTEXT with PLAIN between brokers (2 brokers), with no `sasl.jaas.config` at all: the
  listener's users and the brokers' own login from the JAAS file's KafkaServer section.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trustme
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kazoo.client import KazooClient

from tests.cluster.harness import (
    broker_config,
    consume,
    eventually,
    produce,
    replicated,
    start_broker,
)
from tests.cluster.processes import zk_session
from tests.cluster.test_controller import create_topic
from tests.wirebroker.helpers import alter_configs
from wirebroker.authorizer import acls
from wirebroker.peer import PeerAuthenticationFailed, PeerConnection, PeerSecurity
from wirebroker.server import RunningBroker
from wirebroker.zookeeper_server import java_command

pytestmark = pytest.mark.integration

BROKER_SECRET = "broker-secret-7d1e"
ALICE_SECRET = "alice-secret-0b9a"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
ALLOW = AclPermissionType.ALLOW


def _tls(tmp_path: Path) -> dict[str, str]:
    """A CA and a broker certificate for 127.0.0.1; the `ssl.*` keys that use them."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "broker.pem")
    )
    return {
        "ssl_keystore_type": "PEM",
        "ssl_keystore_location": str(tmp_path / "broker.pem"),
        "ssl_truststore_type": "PEM",
        "ssl_truststore_location": str(tmp_path / "ca.pem"),
    }


def _topic_for_alice(admin_config: dict[str, str], topic: str) -> None:
    """Create `topic` (RF 3) and let alice write and read it, as the super user `broker`."""
    admin = AdminClient(admin_config)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    grants = [
        AclBinding(kind, name, ResourcePatternType.LITERAL, "User:alice", "*", op, ALLOW)
        for kind, name in ((ResourceType.TOPIC, topic), (ResourceType.GROUP, "readers"))
        for op in (AclOperation.READ, AclOperation.WRITE)
        if not (kind == ResourceType.GROUP and op == AclOperation.WRITE)
    ]
    for future in admin.create_acls(grants).values():
        future.result(30)


def _replicated_between_two(
    zk_connect: str, tmp_path: Path, topic: str, **props: str
) -> list[RunningBroker]:
    """Brokers 1 and 2 with `props` (min.insync.replicas=2): a topic of 2 replicas takes 10
    records with acks=all, answered only once the follower fetched over the inter-broker
    listener, and both replicas end at offset 10. The brokers, stopped."""
    started: list[RunningBroker] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for broker_id in (1, 2):
                started.append(
                    await start_broker(
                        nursery, zk_connect, tmp_path, broker_id, min_insync_replicas="2", **props
                    )
                )
            await eventually(lambda: started[0].broker.controller_id > 0, what="a controller")
            result = await create_topic(started[0], topic, 1, 2)
            assert result.error_code == 0, result.error_message
            plaintext = {"bootstrap.servers": started[0].bootstrap_servers.split(",")[0]}
            await trio.to_thread.run_sync(produce, plaintext, topic, 10)
            await replicated(started, topic, 10)
            nursery.cancel_scope.cancel()

    trio.run(main)
    return started


def test_replication_over_an_ssl_inter_broker_listener(zk_connect: str, tmp_path: Path) -> None:
    _replicated_between_two(
        zk_connect,
        tmp_path,
        "secured",
        **_tls(tmp_path),
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        inter_broker_listener_name="SSL",
        ssl_client_auth="required",
    )


def _kafka_configs(*args: str) -> None:
    """Kafka's own `kafka-configs.sh` (ConfigCommand) from the jars."""
    argv = java_command("kafka.admin.ConfigCommand", args, heap="256m")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_sasl_ssl_between_three_brokers(zk_connect: str, tmp_path: Path) -> None:
    # The brokers' own user, in ZooKeeper before any broker starts (Kafka's documented way;
    # the tool needs the chroot to exist).
    host, chroot = zk_connect.split("/", 1)
    with zk_session(KazooClient(hosts=host), 30) as zk:
        zk.ensure_path(chroot)
    _kafka_configs(
        *("--zookeeper", zk_connect, "--alter", "--entity-type", "users"),
        *("--entity-name", "broker", "--add-config", f"SCRAM-SHA-512=[password={BROKER_SECRET}]"),
    )
    tls = _tls(tmp_path)
    props = {
        **tls,
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter_broker_listener_name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            f'{SCRAM_LOGIN} username="broker" password="{BROKER_SECRET}";'
        ),
        "min_insync_replicas": "2",
        # ACLs: the brokers, logged in as `broker`, act as brokers because they are super users
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker",
    }
    client = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": tls["ssl_truststore_location"],
        "sasl.mechanism": "SCRAM-SHA-512",
    }

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            brokers = [
                await start_broker(nursery, zk_connect, tmp_path, i, **props) for i in (1, 2, 3)
            ]
            b1 = brokers[0]
            await eventually(lambda: b1.broker.controller_id > 0, what="a controller")
            sasl_ssl = [f"127.0.0.1:{b.listeners[1].port}" for b in brokers]
            # A client user through the running cluster, as the brokers' user, over SASL_SSL.
            admin = tmp_path / "admin.properties"
            admin.write_text(
                "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                f'sasl.jaas.config={SCRAM_LOGIN} username="broker" password="{BROKER_SECRET}";\n'
                f"ssl.truststore.type=PEM\nssl.truststore.location={tls['ssl_truststore_location']}\n"
            )
            await trio.to_thread.run_sync(
                lambda: _kafka_configs(
                    *("--bootstrap-server", sasl_ssl[2], "--command-config", str(admin)),
                    *("--alter", "--entity-type", "users", "--entity-name", "alice"),
                    *("--add-config", f"SCRAM-SHA-512=[password={ALICE_SECRET}]"),
                )
            )
            broker = {**client, "bootstrap.servers": sasl_ssl[1], "sasl.username": "broker"}
            await trio.to_thread.run_sync(
                _topic_for_alice, {**broker, "sasl.password": BROKER_SECRET}, "secured"
            )

            def alice_may_read(running: RunningBroker) -> bool:
                authorizer = running.broker.authorizer
                assert authorizer is not None
                return authorizer.authorize(
                    "User:alice", "127.0.0.1", "Test", acls.AclOperation.READ,
                    acls.ResourceType.GROUP, "readers", log_if_allowed=False, log_if_denied=False,
                )  # fmt: skip

            await eventually(
                lambda: all(alice_may_read(b) for b in brokers), what="every broker has the ACLs"
            )
            alice = {
                **client,
                "bootstrap.servers": sasl_ssl[0],
                "sasl.username": "alice",
                "sasl.password": ALICE_SECRET,
            }
            # acks=all, min.insync.replicas=2: answered once followers fetched over SASL_SSL.
            await trio.to_thread.run_sync(produce, alice, "secured", 10)
            await replicated(brokers, "secured", 10)
            got = await trio.to_thread.run_sync(consume, alice, "secured", 10)
            assert got == [f"replicated-{i}".encode() for i in range(10)]
            # The followers fetch from their leaders' SASL_SSL listeners, logged in as `broker`.
            sasl_ports = {b.broker.node_id: b.listeners[1].port for b in brokers}

            def fetching_over_sasl_ssl() -> bool:
                fetchers = [f for b in brokers for f in b.broker.replica_manager.fetchers.values()]
                return len(fetchers) >= 2 and all(
                    f.peer.address == ("127.0.0.1", sasl_ports[f.source_id]) for f in fetchers
                )

            await eventually(fetching_over_sasl_ssl, what="fetchers on the SASL_SSL listeners")
            for b in brokers:
                sasl = b.broker.peer_security.sasl
                assert sasl is not None and sasl.options["username"] == "broker"
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_scram_between_brokers_from_a_plain_login_module(
    zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka's brokers, whose SCRAM client takes this broker's username and password from
    the Subject its login filled: here from the `KafkaServer` section's PlainLoginModule (its
    ScramLoginModule, which registers Kafka's SCRAM client and server, has none)."""
    jaas = tmp_path / "kafka_server_jaas.conf"
    jaas.write_text(
        f'KafkaServer {{ {PLAIN_LOGIN} username="broker" password="{BROKER_SECRET}"; '
        f"{SCRAM_LOGIN}; }};\n"
    )
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    argv = [sys.executable, "-m", "wirebroker", "configs", "--zookeeper", zk_connect]
    argv += ["--alter", "--entity-type", "users", "--entity-name", "broker"]
    argv += ["--add-config", f"SCRAM-SHA-512=[password={BROKER_SECRET}]"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    brokers = _replicated_between_two(
        zk_connect,
        tmp_path,
        "scram-from-plain",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        inter_broker_listener_name="SASL_PLAINTEXT",
        **{
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        },
    )
    for running in brokers:
        login = running.broker.peer_security.sasl
        assert login is not None and login.mechanism == "SCRAM-SHA-512"
        assert login.options["username"] == "broker"


def _plain_jaas(password: str) -> str:
    """The inter-broker PLAIN login as `broker`, and the one user the listener accepts."""
    return f'{PLAIN_LOGIN} username="broker" password="{password}" user_broker="{password}";'


def test_the_controller_logs_in_with_a_password_rotated_at_run_time(
    zk_connect: str, tmp_path: Path
) -> None:
    old, new = "plain-old-4c1a", "plain-new-93d7"
    jaas_key = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter_broker_listener_name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        jaas_key: _plain_jaas(old),
        "password.encoder.secret": "encoder-secret-5e2b",
        "min_insync_replicas": "2",
    }
    old_login = PeerSecurity.inter_broker(broker_config("", tmp_path, 9, **props))
    broker_resource, set_op = 4, 0  # Kafka's ConfigResource type and AlterConfigOp codes

    def password(running: RunningBroker) -> str:
        login = running.broker.peer_security.sasl
        assert login is not None
        return str(login.options["password"])

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, **props)
            await eventually(lambda: b1.broker.controller_id == 1, what="broker 1 the controller")
            plaintext = {"bootstrap.servers": b1.bootstrap_servers.split(",")[0]}
            async with trio.open_nursery() as first_run:
                b2 = await start_broker(first_run, zk_connect, tmp_path, 2, **props)
                result = await create_topic(b1, "rotated", 1, 2)
                assert result.error_code == 0, result.error_message
                await trio.to_thread.run_sync(produce, plaintext, "rotated", 5)
                await replicated([b1, b2], "rotated", 5)
                # each broker's own config, through it (a password: stored encrypted)
                for running in (b2, b1):
                    done = await trio.to_thread.run_sync(
                        lambda r=running: alter_configs(
                            r.bootstrap_servers.split(",")[0],
                            broker_resource,
                            str(r.broker.node_id),
                            [(jaas_key, set_op, _plain_jaas(new))],
                        )
                    )
                    assert done == (0, None), done
                await eventually(
                    lambda: password(b1) == password(b2) == new, what="the new password applied"
                )
                await b2.stop()
            # Broker 2 again, its static config still the old password: ZooKeeper's wins. The
            # controller opens a new connection to it, which must log in with the new one.
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2, **props)
            assert password(b2) == new
            cluster = b1.broker.cluster
            assert cluster is not None

            def back_in_the_isr() -> bool:
                state = cluster.controller.ctx.states.get(("rotated", 0))
                return state is not None and sorted(state.state.isr) == [1, 2]

            # LeaderAndIsr made it a follower again: it fetched and the leader took it back
            await eventually(back_in_the_isr, what="broker 2 back in the ISR")
            await trio.to_thread.run_sync(produce, plaintext, "rotated", 5)
            await replicated([b1, b2], "rotated", 10)
            sasl_port = next(lst.port for lst in b2.listeners if lst.name == "SASL_PLAINTEXT")
            with pytest.raises(PeerAuthenticationFailed):
                await PeerConnection.open(
                    "127.0.0.1", sasl_port, client_id="old-password", security=old_login
                )
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_brokers_log_in_to_each_other_with_the_jaas_file_s_section(
    zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No `sasl.jaas.config` at all: the listener's users and each broker's own login between
    brokers come from the KafkaServer section of the JAAS file KAFKA_OPTS names, as Kafka's
    brokers deployed with `kafka_server_jaas.conf` take them."""
    path = tmp_path / "kafka_server_jaas.conf"
    path.write_text(f"KafkaServer {{\n  {_plain_jaas(BROKER_SECRET)}\n}};\n")
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={path}")
    brokers = _replicated_between_two(
        zk_connect,
        tmp_path,
        "from-the-file",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        inter_broker_listener_name="SASL_PLAINTEXT",
        **{"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN"},
    )
    for b in brokers:
        sasl = b.broker.peer_security.sasl
        assert sasl is not None and sasl.options["username"] == "broker"
