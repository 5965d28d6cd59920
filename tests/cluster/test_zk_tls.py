"""TLS to ZooKeeper (KIP-515): brokers over a TLS-only ZooKeeper that requires client
certificates (Kafka 3.9 among them, with the same keys), and the refusals that say what to fix
(wrong truststore, host name mismatch, no keystore, no TLS version in common, revocation checks
asked for); ZooKeeper's client system properties, password files included, read by the broker
and the tools as by Kafka 3.9's broker and ZkSecurityMigrator (run alongside).

One ZooKeeper for the module (ZooKeeper 3.8 from Kafka's jars, Netty, `secureClientPort` only,
`ssl.clientAuth=need`), its certificate for `localhost` only: `localhost` in zookeeper.connect
passes the host name check, `127.0.0.1` does not. The stores are made here with trustme:
PKCS12 keystores and a PEM truststore, their types left for the file names to say.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from kazoo.security import Permissions

from compat.kafka_process import kafka_broker, kafka_metadata_brokers, kafka_tool_command
from tests.cluster.harness import consume, create_topic, eventually, produce, start_broker
from tests.cluster.processes import wait_for, zk_session
from tests.wirebroker.pki import pkcs12_keystore
from wirebroker import configs_cli, security_migration_cli
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.config_sources import is_sensitive
from wirebroker.zk import member as zk_member
from wirebroker.zk.client import ZkClient
from wirebroker.zk.errors import ZooKeeperUnreachable
from wirebroker.zk.sasl_login import kazoo_client
from wirebroker.zk.tls import client_auth_configured, client_tls, kazoo_options
from wirebroker.zookeeper_server import (
    ServerTls,
    ZooKeeperServer,
    jars_available,
    zookeeper,
    zookeeper_ruok,
)

pytestmark = pytest.mark.integration

PASSWORD = "zk-store-secret-5c1f"
TRUST_PASSWORD = "zk-trust-secret-93ab"  # a PKCS12 truststore's (Java's kind: `java_truststore`)
MIGRATION_TOOL = [sys.executable, "-m", "wirebroker", "zookeeper-security-migration"]


@dataclass(frozen=True)
class ZkPki:
    ca: Path  # PEM: signed ZooKeeper's certificate and the broker's
    other_ca: Path  # PEM: signed neither
    zookeeper: Path  # PKCS12: ZooKeeper's key, its certificate for localhost only
    broker: Path  # PKCS12: the broker's client certificate
    probe: Path  # PEM: the broker's key and certificate, for the readiness probe


def stores(d: Path) -> ZkPki:
    """The stores `write_stores` keeps in `d`."""
    return ZkPki(
        d / "ca.pem", d / "other-ca.pem", d / "zookeeper.p12", d / "broker.p12", d / "broker.pem"
    )


def write_stores(ca: trustme.CA, d: Path) -> ZkPki:
    """ZooKeeper's and the broker's stores, all from `ca`, in `d`: each written beside its
    file and renamed over it, as a renewal replaces a store."""
    pki = stores(d)
    broker = ca.issue_cert("localhost", "127.0.0.1", common_name="broker")
    for path, data in (
        (pki.ca, ca.cert_pem.bytes()),
        (pki.zookeeper, pkcs12_keystore(ca.issue_cert("localhost"), PASSWORD)),
        (pki.broker, pkcs12_keystore(broker, PASSWORD)),
        (pki.probe, broker.private_key_and_cert_chain_pem.bytes()),
    ):
        path.with_suffix(".new").write_bytes(data)
        path.with_suffix(".new").replace(path)
    return pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ZkPki:
    d = tmp_path_factory.mktemp("zk-pki")
    trustme.CA().cert_pem.write_to_path(str(d / "other-ca.pem"))
    return write_stores(trustme.CA(), d)


@pytest.fixture(scope="module")
def tls_zk(pki: ZkPki) -> Iterator[ZooKeeperServer]:
    if not jars_available():
        pytest.skip("no ZooKeeper jars: run `make jars`")
    tls = ServerTls(pki.zookeeper, PASSWORD, pki.ca, client_auth="need", probe_pem=pki.probe)
    with zookeeper(heap="128m", tls=tls) as server:
        yield server


def chroot() -> str:
    return f"/wb-{uuid.uuid4().hex[:8]}"


def tls_keys(pki: ZkPki, **changes: str) -> dict[str, str]:
    """The broker's zookeeper.ssl.* keys (PKCS12 keystore, PEM truststore), with `changes`
    (key with underscores for dots; an empty value removes the key)."""
    keys = {
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
        "zookeeper.ssl.keystore.location": str(pki.broker),
        "zookeeper.ssl.keystore.password": PASSWORD,
        "zookeeper.ssl.truststore.location": str(pki.ca),
    }
    for key, value in changes.items():
        keys[key.replace("_", ".")] = value
    return {k: v for k, v in keys.items() if v or k.endswith("identification.algorithm")}


def java_truststore(ca: Path, password: str) -> bytes:
    """A PKCS12 truststore of the PEM CA `ca`, its certificate trusted as Java's keytool marks
    it (Java reads no other), encrypted with `password`."""
    cert = x509.load_pem_x509_certificate(ca.read_bytes())
    encryption = serialization.BestAvailableEncryption(password.encode())
    return pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(cert, b"ca")], encryption)


def password_files(pki: ZkPki, d: Path) -> tuple[Path, list[str]]:
    """A PKCS12 truststore in `d` and ZooKeeper's `-D` naming the files in `d` that hold its
    password and the broker keystore's (each with a line end, as `echo` writes it)."""
    truststore = d / "trust.p12"
    truststore.write_bytes(java_truststore(pki.ca, TRUST_PASSWORD))
    (d / "keystore.password").write_text(PASSWORD + "\n")
    (d / "truststore.password").write_text(TRUST_PASSWORD + "\n")
    return truststore, [
        f"-Dzookeeper.ssl.keyStore.passwordPath={d / 'keystore.password'}",
        f"-Dzookeeper.ssl.trustStore.passwordPath={d / 'truststore.password'}",
    ]


def create_open(server: ZooKeeperServer, pki: ZkPki, path: str) -> None:
    """`path`, open to all, as a cluster without zookeeper.set.acl leaves its chroot."""
    tls = client_tls(BrokerConfig.from_properties(tls_keys(pki)))
    with zk_session(
        kazoo_client(f"localhost:{server.port}", None, timeout=10, **kazoo_options(tls))
    ) as zk:
        zk.create(path)


async def registered(connect: str, keys: dict[str, str]) -> list[str]:
    """The broker ids registered in ZooKeeper, as a TLS client with `keys` reads them."""
    zk = ZkClient(connect, tls=client_tls(BrokerConfig.from_properties(keys)))
    await zk.start()
    try:
        return sorted(await zk.get_children("/brokers/ids") or [])
    finally:
        await zk.close()


async def refused(connect: str, keys: dict[str, str]) -> str:
    """The error a broker with these settings stops with, connecting to ZooKeeper."""
    config = BrokerConfig.from_properties(
        {"zookeeper.connect": connect, "zookeeper.connection.timeout.ms": "1500", **keys}
    )
    with pytest.raises(ZooKeeperUnreachable) as e:  # noqa: PT012 - the session, then close
        zk = await zk_member.connect(config)
        await zk.close()
    return str(e.value)


@pytest.mark.timeout(90)
def test_brokers_register_and_serve_over_tls_zookeeper_with_client_auth(
    tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path
) -> None:
    connect = f"localhost:{tls_zk.port}{chroot()}"  # the chroot, too, is made over TLS

    async def main() -> None:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                keys = tls_keys(pki)
                brokers = [
                    await start_broker(nursery, connect, tmp_path, i, **keys) for i in (1, 2)
                ]
                await eventually(
                    lambda: all(
                        len(list(b.broker.metadata_cache.alive_brokers())) == 2 for b in brokers
                    ),
                    what="2 live brokers",
                )
                await create_topic(brokers[0], "over-tls", 1, replicas=2)
                listener = brokers[0].listeners[0]
                bootstrap = {"bootstrap.servers": f"{listener.host}:{listener.port}"}
                await trio.to_thread.run_sync(produce, bootstrap, "over-tls", 5)
                got = await trio.to_thread.run_sync(consume, bootstrap, "over-tls", 5)
                assert len(got) == 5
                # The registration is there for any TLS client to read.
                assert await registered(connect, keys) == ["1", "2"]
                nursery.cancel_scope.cancel()

    trio.run(main)


#: Kafka's secure ACLs for a creator ZooKeeper names by its certificate
SECURE_X509 = {(Permissions.ALL, "x509"), (Permissions.READ, "world")}


def acl_schemes(
    server: ZooKeeperServer, keys: dict[str, str], root: str, paths: tuple[str, ...]
) -> dict[str, set[tuple[int, str]]]:
    """The permissions and schemes of each of `paths` below `root`, read over TLS."""
    tls = client_tls(BrokerConfig.from_properties(keys))
    with zk_session(
        kazoo_client(f"localhost:{server.port}", None, timeout=10, **kazoo_options(tls))
    ) as kazoo:
        return {p: {(a.perms, a.id.scheme) for a in kazoo.get_acls(root + p)[0]} for p in paths}


@pytest.mark.timeout(60)
def test_set_acl_with_a_client_certificate_names_the_certificate_the_creator(
    tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path
) -> None:
    """zookeeper.set.acl=true with TLS alone (no SASL login), as Kafka's zkTlsClientAuthEnabled
    allows: ZooKeeper names the creator by the certificate (x509), and the sensitive znodes are
    the certificate's alone."""
    root = chroot()
    keys = tls_keys(pki)

    def read_acls() -> dict[str, set[tuple[int, str]]]:
        return acl_schemes(tls_zk, keys, root, ("", "/brokers/ids/1", "/config/users"))

    async def main() -> None:
        with trio.fail_after(45):
            async with trio.open_nursery() as nursery:
                connect = f"localhost:{tls_zk.port}{root}"
                await start_broker(nursery, connect, tmp_path, 1, zookeeper_set_acl="true", **keys)
                assert await trio.to_thread.run_sync(read_acls) == {
                    "": SECURE_X509,
                    "/brokers/ids/1": SECURE_X509,
                    "/config/users": {(Permissions.ALL, "x509")},
                }
                nursery.cancel_scope.cancel()

    trio.run(main)


@pytest.mark.timeout(120)
def test_kafka_and_wirebroker_in_one_cluster_over_tls_zookeeper(
    tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path
) -> None:
    """The same zookeeper.ssl.* keys work for Kafka 3.9: its controller sees our broker."""
    connect = f"localhost:{tls_zk.port}{chroot()}"
    keys = tls_keys(pki)
    with kafka_broker(connect, broker_id=0, overrides=keys, heap="256m") as kafka:

        async def main() -> None:
            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    ours = await start_broker(nursery, connect, tmp_path, 1, **keys)
                    await eventually(
                        lambda: len(list(ours.broker.metadata_cache.alive_brokers())) == 2,
                        what="our broker to see Kafka's",
                    )
                    brokers, controller = kafka_metadata_brokers(kafka.host, kafka.port)
                    assert sorted(brokers) == [0, 1] and controller == 0
                    nursery.cancel_scope.cancel()

        trio.run(main)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("host", "changes", "fix"),
    [
        pytest.param(
            "localhost",
            {"zookeeper.ssl.truststore.location": "OTHER_CA"},
            "set zookeeper.ssl.truststore.location to a truststore holding that CA",
            id="wrong-truststore",
        ),
        pytest.param(
            "127.0.0.1",
            {},
            "zookeeper.ssl.endpoint.identification.algorithm= (empty)",
            id="host-name-mismatch",
        ),
        pytest.param(
            "localhost",
            {"zookeeper.ssl.keystore.location": "", "zookeeper.ssl.keystore.password": ""},
            "set zookeeper.ssl.keystore.location",
            id="no-client-certificate",
        ),
        pytest.param(
            "localhost",
            {"zookeeper.ssl.protocol": "TLSv1.3"},  # ZooKeeper 3.8 serves TLS 1.2
            "zookeeper.ssl.enabled.protocols",
            id="no-version-in-common",
        ),
    ],
)
def test_a_tls_mistake_stops_the_broker_saying_what_to_fix(
    tls_zk: ZooKeeperServer, pki: ZkPki, host: str, changes: dict[str, str], fix: str
) -> None:
    keys = tls_keys(
        pki, **{k: str(pki.other_ca) if v == "OTHER_CA" else v for k, v in changes.items()}
    )

    async def main() -> None:
        with trio.fail_after(30):
            message = await refused(f"{host}:{tls_zk.port}{chroot()}", keys)
        assert fix in message, message
        assert PASSWORD not in message

    trio.run(main)


@pytest.mark.timeout(120)
def test_renewed_stores_are_read_again_on_the_next_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CA rotated with no broker restart, as Kafka allows (ZooKeeper's client makes its SSL
    context for each connection): ZooKeeper restarted with a certificate from a new CA, which
    alone it trusts, the broker's keystore and truststore files replaced meanwhile. The broker's
    session reconnects with the new stores (the old ones are refused now). A keystore that does
    not read on the way fails the attempts, logged, until it is fixed; the session lives on."""
    if not jars_available():
        pytest.skip("no ZooKeeper jars: run `make jars`")
    d = tmp_path / "pki"
    d.mkdir()
    pki = write_stores(trustme.CA(), d)
    old = stores(Path(shutil.copytree(d, tmp_path / "old")))
    server_tls = ServerTls(pki.zookeeper, PASSWORD, pki.ca, client_auth="need", probe_pem=pki.probe)
    with zookeeper(heap="128m", tls=server_tls) as server:
        connect = f"localhost:{server.port}/kafka"
        renewed: dict[str, bytes] = {}

        def restart_with_a_new_ca() -> None:
            server.process.stop()
            write_stores(trustme.CA(), d)
            renewed["keystore"] = pki.broker.read_bytes()
            pki.broker.write_bytes(b"half a keystore")  # the renewal is not done yet
            server.process.start()
            probe = server_tls.probe_context()
            wait_for(
                lambda: zookeeper_ruok(server.host, server.port, tls=probe),
                60.0,
                "ZooKeeper to restart",
            )

        async def main() -> None:
            with trio.fail_after(100):
                async with trio.open_nursery() as nursery:
                    running = await start_broker(
                        nursery,
                        connect,
                        tmp_path,
                        1,
                        zookeeper_session_timeout_ms="18000",  # Kafka's: the restart's, to spare
                        **tls_keys(pki),
                    )
                    assert running.broker.cluster is not None
                    zk = running.broker.cluster.zk
                    session = zk.session_id
                    await trio.to_thread.run_sync(restart_with_a_new_ca)
                    await eventually(
                        lambda: "zookeeper.ssl.keystore.location: cannot read" in caplog.text,
                        timeout=30,
                        what="the unreadable keystore logged",
                    )
                    assert not zk.connected
                    pki.broker.write_bytes(renewed["keystore"])  # the renewal done
                    await eventually(lambda: zk.connected, timeout=30, what="a reconnection")
                    registration = await zk.exists("/brokers/ids/1")
                    assert registration is not None and registration.ephemeralOwner == session
                    nursery.cancel_scope.cancel()
            # The stores the broker started with would not do now: both are refused.
            new_ca = "not signed by a CA this broker trusts"
            assert new_ca in await refused(connect, tls_keys(old))
            old_keystore = tls_keys(pki, zookeeper_ssl_keystore_location=str(old.broker))
            assert "set zookeeper.ssl.keystore.location" in await refused(connect, old_keystore)
            assert PASSWORD not in caplog.text

        trio.run(main)


@pytest.mark.timeout(90)
def test_broker_falls_back_to_zookeepers_tls_system_properties(
    tls_zk: ZooKeeperServer, pki: ZkPki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka's KafkaConfig: each zookeeper.ssl.* key the broker's config does not set is
    the ZooKeeper client's system property (KAFKA_OPTS), hostnameVerification=false meaning
    no host name check; a key the config sets wins over its property."""
    monkeypatch.setenv(
        "KAFKA_OPTS",
        " ".join(
            [
                "-Xmx1G",
                "-Dzookeeper.client.secure=true",
                f"-Dzookeeper.ssl.keyStore.location={pki.broker}",
                f"-Dzookeeper.ssl.keyStore.password={PASSWORD}",
                f"-Dzookeeper.ssl.trustStore.location={pki.ca}",
                "-Dzookeeper.ssl.hostnameVerification=false",
            ]
        ),
    )
    plain = BrokerConfig.from_properties({"zookeeper.connect": f"127.0.0.1:{tls_zk.port}"})
    assert client_auth_configured(plain)  # zookeeper.set.acl's certificate identity

    async def main() -> None:
        with trio.fail_after(60):
            # By address: connects only if hostnameVerification=false was read.
            zk = await zk_member.connect(plain)
            await zk.close()
            message = await refused(
                f"127.0.0.1:{tls_zk.port}", {"zookeeper.ssl.truststore.location": str(pki.other_ca)}
            )
            assert "zookeeper.ssl.truststore.location" in message, message

    trio.run(main)


@pytest.mark.timeout(60)
def test_tls_to_a_plaintext_port_says_so(zk_server: ZooKeeperServer, pki: ZkPki) -> None:
    async def main() -> None:
        with trio.fail_after(30):
            message = await refused(f"{zk_server.connect}{chroot()}", tls_keys(pki))
        assert "is that port ZooKeeper's secureClientPort" in message, message

    trio.run(main)


@pytest.mark.timeout(60)
def test_host_name_check_off_connects_by_address(tls_zk: ZooKeeperServer, pki: ZkPki) -> None:
    keys = tls_keys(pki, zookeeper_ssl_endpoint_identification_algorithm="")

    async def main() -> None:
        with trio.fail_after(30):
            zk = ZkClient(
                f"127.0.0.1:{tls_zk.port}", tls=client_tls(BrokerConfig.from_properties(keys))
            )
            await zk.start()
            try:
                assert await zk.exists("/")
            finally:
                await zk.close()

    trio.run(main)


@pytest.mark.timeout(60)
def test_configs_command_with_zk_tls_config_file(
    tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`wirebroker configs --zookeeper ... --zk-tls-config-file`, as kafka-configs.sh's."""
    properties = tmp_path / "zk-tls.properties"
    properties.write_text(
        "".join(f"{k}={v}\n" for k, v in tls_keys(pki).items()) + "broker.id=ignored\n"
    )
    connect = f"localhost:{tls_zk.port}{chroot()}"
    common = ["--zookeeper", connect, "--zk-tls-config-file", str(properties)]
    parser = argparse.ArgumentParser()
    configs_cli.add_parser(parser.add_subparsers())
    alter = [*common, "--alter", "--entity-type", "users", "--entity-name", "alice"]
    args = parser.parse_args(["configs", *alter, "--add-config", "SCRAM-SHA-512=[password=a]"])
    assert configs_cli.run(args) == 0
    args = parser.parse_args(["configs", *common, "--describe", "--entity-type", "users"])
    assert configs_cli.run(args) == 0
    assert "SCRAM-SHA-512" in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_security_migration_with_a_client_certificate(
    tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wirebroker zookeeper-security-migration --zk-tls-config-file` with a keystore and no
    JAAS login (Kafka's zkTlsClientAuthEnabled): a cluster written with set.acl=false gets the
    certificate as its znodes' creator."""
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    root = chroot()
    keys = tls_keys(pki)
    paths = ("", "/brokers/ids", "/config/users")
    properties = tmp_path / "zk-tls.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))

    async def main() -> None:
        with trio.fail_after(45):
            async with trio.open_nursery() as nursery:
                await start_broker(nursery, f"localhost:{tls_zk.port}{root}", tmp_path, 1, **keys)
                nursery.cancel_scope.cancel()

    trio.run(main)
    opened = {p: {(Permissions.ALL, "world")} for p in paths}
    assert acl_schemes(tls_zk, keys, root, paths) == opened
    parser = argparse.ArgumentParser()
    security_migration_cli.add_parser(parser.add_subparsers())
    common = ["--zookeeper.connect", f"localhost:{tls_zk.port}{root}"]
    common += ["--zk-tls-config-file", str(properties)]
    for acl, expected in (
        (
            "secure",
            {
                "": SECURE_X509,
                "/brokers/ids": SECURE_X509,
                "/config/users": {(Permissions.ALL, "x509")},
            },
        ),
        ("unsecure", opened),
    ):
        args = parser.parse_args(["zookeeper-security-migration", *common, "--zookeeper.acl", acl])
        assert security_migration_cli.run(args) == 0
        assert acl_schemes(tls_zk, keys, root, paths) == expected


@pytest.mark.timeout(90)
def test_tools_read_zookeepers_tls_system_properties_as_kafkas(
    tls_zk: ZooKeeperServer,
    pki: ZkPki,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As Kafka's tool (a ZKClientConfig starts from the system properties, then the
    `--zk-tls-config-file` keys override them): the certificate named by `-Dzookeeper.*` in
    KAFKA_OPTS alone is a login (and `wirebroker configs` connects with it too); a truststore
    from the file wins over the property's, either way round."""
    root = chroot()
    connect = f"localhost:{tls_zk.port}{root}"
    parser = argparse.ArgumentParser()
    security_migration_cli.add_parser(parser.add_subparsers())

    def kafka_opts(truststore: Path) -> str:
        return " ".join(
            [
                "-Dzookeeper.client.secure=true",
                "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
                f"-Dzookeeper.ssl.keyStore.location={pki.broker}",
                f"-Dzookeeper.ssl.keyStore.password={PASSWORD}",
                f"-Dzookeeper.ssl.trustStore.location={truststore}",
            ]
        )

    def migrate(*more: str) -> int:
        argv = ["zookeeper-security-migration", "--zookeeper.connect", connect]
        argv += ["--zookeeper.acl", "secure", "--zookeeper.connection.timeout", "3000", *more]
        return security_migration_cli.run(parser.parse_args(argv))

    create_open(tls_zk, pki, root)
    monkeypatch.setenv("KAFKA_OPTS", kafka_opts(pki.ca))
    assert migrate() == 0, capsys.readouterr().err
    assert acl_schemes(tls_zk, tls_keys(pki), root, ("", "/brokers")) == {
        "": SECURE_X509,
        "/brokers": SECURE_X509,
    }
    configs = argparse.ArgumentParser()
    configs_cli.add_parser(configs.add_subparsers())
    describe = ["configs", "--zookeeper", connect, "--describe", "--entity-type", "users"]
    assert configs_cli.run(configs.parse_args(describe)) == 0, capsys.readouterr().err
    trusted = tmp_path / "trusted.properties"
    trusted.write_text(f"zookeeper.ssl.truststore.location={pki.ca}\n")
    other = tmp_path / "other.properties"
    other.write_text(f"zookeeper.ssl.truststore.location={pki.other_ca}\n")
    capsys.readouterr()
    assert migrate("--zk-tls-config-file", str(other)) == 1
    assert "zookeeper.ssl.truststore.location" in capsys.readouterr().err
    monkeypatch.setenv("KAFKA_OPTS", kafka_opts(pki.other_ca))
    assert migrate("--zk-tls-config-file", str(trusted)) == 0, capsys.readouterr().err


@pytest.mark.timeout(180)
def test_tools_read_zookeepers_password_files_as_kafkas(
    tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path
) -> None:
    """ZooKeeper 3.8's `-Dzookeeper.ssl.keyStore.passwordPath` and `.trustStore.passwordPath`
    in KAFKA_OPTS, Kafka 3.9.2's ZkSecurityMigrator (the jars) and ours run alike, each on a
    chroot of its own: the file's content, its line end removed, is the store's password, over
    a password property and over the `--zk-tls-config-file` key (both secure their chroot); in
    that file the paths are ignored (both fail: no password); a password file missing fails
    both, ours at once naming the property and the file. No password in our output."""
    truststore, paths = password_files(pki, tmp_path)
    missing = tmp_path / "missing.password"
    tls = [
        "-Dzookeeper.client.secure=true",
        "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
        f"-Dzookeeper.ssl.keyStore.location={pki.broker}",
        f"-Dzookeeper.ssl.trustStore.location={truststore}",
    ]
    properties = tmp_path / "zk-tls.properties"
    kafka = kafka_tool_command("kafka.admin.ZkSecurityMigrator", [])

    def both(flags: list[str], keys: dict[str, str]) -> dict[str, tuple[str, str, int]]:
        """Each tool's chroot, stdout and stderr (ours), exit code."""
        properties.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
        env = {**os.environ, "KAFKA_OPTS": " ".join(flags)}
        ran = {}
        for name, tool in (("kafka", [kafka[0], *flags, *kafka[1:]]), ("ours", MIGRATION_TOOL)):
            root = chroot()
            create_open(tls_zk, pki, root)
            argv = [*tool, "--zookeeper.connect", f"localhost:{tls_zk.port}{root}"]
            argv += ["--zookeeper.acl", "secure", "--zookeeper.connection.timeout", "3000"]
            argv += ["--zk-tls-config-file", str(properties)]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env)
            ran[name] = (root, done.stdout + done.stderr, done.returncode)
            if name == "ours":
                assert PASSWORD not in ran[name][1] and TRUST_PASSWORD not in ran[name][1]
        return ran

    wrong = {"zookeeper.ssl.truststore.password": "wrong"}
    ran = both([*tls, "-Dzookeeper.ssl.keyStore.password=wrong", *paths], wrong)
    for root, output, code in ran.values():
        assert code == 0, output
        assert acl_schemes(tls_zk, tls_keys(pki), root, ("",)) == {"": SECURE_X509}
    in_file = {p.removeprefix("-D").split("=")[0]: p.split("=")[1] for p in paths}
    ran = both(tls, in_file)
    assert ran["kafka"][2] == 1 and "keystore password was incorrect" in ran["kafka"][1]
    assert ran["ours"][2] == 1 and "cannot read the PKCS12 store" in ran["ours"][1]
    flags = [*tls, f"-Dzookeeper.ssl.keyStore.passwordPath={missing}", paths[1]]
    ran = both(flags, {"zookeeper.ssl.keystore.password": PASSWORD})
    assert ran["kafka"][2] == 1 and f"reading secret from file {missing}" in ran["kafka"][1]
    assert ran["ours"][2] == 1
    assert (
        f"zookeeper.ssl.keyStore.passwordPath={missing}: the password file cannot be read: "
        "No such file or directory" in ran["ours"][1]
    )


@pytest.mark.timeout(180)
def test_tools_read_booleans_as_zookeepers_client(
    zk_server: ZooKeeperServer, tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path
) -> None:
    """A tool's TLS booleans, from `-D` or `--zk-tls-config-file`, are read by ZooKeeper's
    client (Java's Boolean.parseBoolean: `true` in any case, anything else false, nothing
    refused), as by Kafka 3.9's ConfigCommand and ZkSecurityMigrator (the jars), run alongside:
    `maybe` or `yes` is plaintext, `TRUE` is TLS; but Kafka's certificate login asks for
    zookeeper.client.secure exactly `true`, so the migration tool finds no login with `TRUE`."""
    truststore, paths = password_files(pki, tmp_path)
    properties = tmp_path / "zk-tls.properties"
    stores = [
        "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
        f"-Dzookeeper.ssl.keyStore.location={pki.broker}",
        f"-Dzookeeper.ssl.trustStore.location={truststore}",
        *paths,
    ]

    def both(main: str, ours: list[str], args: list[str], flags: list[str], keys: str) -> None:
        """Kafka's tool `main` and `ours` with `args`, KAFKA_OPTS `flags` and the file `keys`:
        the same exit code, returned with each one's output."""
        properties.write_text(keys)
        args = [*args, "--zk-tls-config-file", str(properties)]
        env = {**os.environ, "KAFKA_OPTS": " ".join(flags)}
        kafka = kafka_tool_command(main, args)
        ran = {}
        for name, argv in (("kafka", [kafka[0], *flags, *kafka[1:]]), ("ours", [*ours, *args])):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env)
            ran[name] = (done.returncode, done.stdout + done.stderr)
        assert ran["kafka"][0] == ran["ours"][0], ran
        return ran["ours"]

    configs = [sys.executable, "-m", "wirebroker", "configs"]
    describe = ["--describe", "--entity-type", "users"]
    plaintext = ["--zookeeper", f"localhost:{zk_server.port}", *describe]
    assert both("kafka.admin.ConfigCommand", configs, plaintext, [], "")[0] == 0
    code, output = both(
        "kafka.admin.ConfigCommand", configs, plaintext, ["-Dzookeeper.client.secure=maybe"], ""
    )
    assert code == 0, output
    code, output = both(
        "kafka.admin.ConfigCommand", configs, plaintext, [], "zookeeper.ssl.client.enable=yes\n"
    )
    assert code == 0, output
    secure = ["-Dzookeeper.client.secure=TRUE", *stores]
    over_tls = ["--zookeeper", f"localhost:{tls_zk.port}", *describe]
    assert both("kafka.admin.ConfigCommand", configs, over_tls, secure, "")[0] == 0
    migrate = ["--zookeeper.connect", f"localhost:{tls_zk.port}{chroot()}"]
    migrate += ["--zookeeper.acl", "secure", "--zookeeper.connection.timeout", "3000"]
    code, output = both("kafka.admin.ZkSecurityMigrator", MIGRATION_TOOL, migrate, secure, "")
    assert code == 1 and security_migration_cli.NO_LOGIN in output, output
    code, output = both(
        "kafka.admin.ZkSecurityMigrator", MIGRATION_TOOL, migrate, stores,
        "zookeeper.ssl.client.enable=True\n",
    )  # fmt: skip
    assert code == 1 and security_migration_cli.NO_LOGIN in output, output


def test_broker_reads_its_boolean_system_properties_as_kafkaconfig(
    pki: ZkPki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker's `-Dzookeeper.ssl.crl` / `.ocsp` / `.hostnameVerification` are read by
    KafkaConfig: true only when exactly `true` (`TRUE`, `yes`: false, not refused); its keys
    are read by Kafka's ConfigDef: true or false in any case, anything else refused."""
    config = BrokerConfig.from_properties(tls_keys(pki))
    for value in ("TRUE", "yes", " true"):
        flags = f"-Dzookeeper.ssl.crl={value} -Dzookeeper.ssl.ocsp={value}"
        monkeypatch.setenv("KAFKA_OPTS", f"{flags} -Dzookeeper.ssl.hostnameVerification={value}")
        tls = client_tls(BrokerConfig.from_properties(tls_keys(pki)))
        assert tls is not None and not tls.context.check_hostname
    monkeypatch.setenv("KAFKA_OPTS", "-Dzookeeper.ssl.crl=true")
    with pytest.raises(ConfigError, match="zookeeper.ssl.crl=true is not supported"):
        client_tls(config)
    monkeypatch.delenv("KAFKA_OPTS")
    keys = tls_keys(pki, zookeeper_ssl_ocsp_enable="yes")
    with pytest.raises(ConfigError, match="zookeeper.ssl.ocsp.enable='yes' must be true or false"):
        client_tls(BrokerConfig(keys))
    assert client_tls(BrokerConfig(tls_keys(pki, zookeeper_ssl_ocsp_enable="FALSE"))) is not None
    # TLS on by ZooKeeper's client's reading alone: KafkaConfig hands it none of the keys, and
    # its zkTlsClientAuthEnabled (zookeeper.client.secure exactly true) sees no certificate.
    monkeypatch.setenv("KAFKA_OPTS", "-Dzookeeper.client.secure=TRUE")
    unset = BrokerConfig.from_properties(tls_keys(pki, zookeeper_ssl_client_enable=""))
    assert client_tls(unset) is not None
    assert not client_auth_configured(unset)


@pytest.mark.timeout(150)
def test_broker_reads_zookeepers_password_files_as_kafkas(
    tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka 3.9's broker reads ZooKeeper's password files too (its ZKClientConfig starts from
    the system properties, and ZooKeeper's X509Util takes a password from its file first):
    with the config's keystore and truststore passwords wrong and the files named by `-D`,
    Kafka registers over TLS, and so does ours with the same keys and KAFKA_OPTS."""
    truststore, paths = password_files(pki, tmp_path)
    monkeypatch.setenv("KAFKA_OPTS", " ".join(paths))
    keys = tls_keys(
        pki,
        zookeeper_ssl_keystore_password="wrong",
        zookeeper_ssl_truststore_location=str(truststore),
        zookeeper_ssl_truststore_password="wrong",
    )
    connect = f"localhost:{tls_zk.port}{chroot()}"
    with kafka_broker(connect, broker_id=0, overrides=keys, heap="256m", jvm_options=paths):

        async def main() -> None:
            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    await start_broker(nursery, connect, tmp_path, 1, **keys)
                    assert await registered(connect, keys) == ["0", "1"]
                    nursery.cancel_scope.cancel()

        trio.run(main)


@pytest.mark.timeout(120)
def test_a_wrong_system_property_is_named_as_it_was_set(pki: ZkPki, tmp_path: Path) -> None:
    """A wrong value of ZooKeeper's `-D` in KAFKA_OPTS, or a password file that cannot be
    read or holds a wrong password, stops `wirebroker serve` (exit 2) and the tool (exit 1)
    before they connect, naming the system property as it was set (ZooKeeper's camelCase,
    not the Kafka key it stands for) and the file, never a password."""
    missing = tmp_path / "missing.password"
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    tls = [
        "-Dzookeeper.client.secure=true",
        f"-Dzookeeper.ssl.keyStore.location={pki.broker}",
        f"-Dzookeeper.ssl.keyStore.password={PASSWORD}",
    ]
    serve = [sys.executable, "-m", "wirebroker", "serve", "--listeners", "PLAINTEXT://127.0.0.1:0"]
    serve += ["--log-dirs", str(tmp_path / "data"), "--override", "zookeeper.connect=localhost:1"]
    tool = [*MIGRATION_TOOL, "--zookeeper.acl", "secure", "--zookeeper.connect", "localhost:1"]
    for flag, said, kafka_key in (
        ("zookeeper.ssl.keyStore.type=bogus", "zookeeper.ssl.keyStore.type=BOGUS", ".keystore."),
        (
            "zookeeper.ssl.enabledProtocols=TLSv9",
            "zookeeper.ssl.enabledProtocols: unknown TLSv9",
            ".enabled.protocols",
        ),
        (
            f"zookeeper.ssl.keyStore.passwordPath={missing}",
            f"zookeeper.ssl.keyStore.passwordPath={missing}: the password file cannot be read",
            ".keystore.",
        ),
        (
            f"zookeeper.ssl.keyStore.passwordPath={wrong}",
            "cannot read the PKCS12 store (zookeeper.ssl.keyStore.passwordPath?)",
            ".keystore.",
        ),
    ):
        env = {**os.environ, "KAFKA_OPTS": " ".join([*tls, f"-D{flag}"])}
        for argv, code in ((serve, 2), (tool, 1)):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=45, env=env)
            output = done.stdout + done.stderr
            assert done.returncode == code, output
            assert said in output, output
            assert kafka_key not in output
            assert PASSWORD not in output and "not-the-password" not in output


@pytest.mark.timeout(60)
def test_wirebroker_serve_refuses_and_says_why(
    tls_zk: ZooKeeperServer, pki: ZkPki, tmp_path: Path
) -> None:
    overrides = {
        "zookeeper.connect": f"localhost:{tls_zk.port}",
        "zookeeper.connection.timeout.ms": "1500",
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        **tls_keys(pki, zookeeper_ssl_truststore_location=str(pki.other_ca)),
    }
    args = [a for k, v in overrides.items() for a in ("--override", f"{k}={v}")]
    done = subprocess.run(
        [sys.executable, "-m", "wirebroker", "serve", *args],
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert done.returncode == 1, done.stderr
    assert "zookeeper.ssl.truststore.location" in done.stderr
    assert PASSWORD not in done.stderr + done.stdout


# settings alone (no ZooKeeper) ---------------------------------------------------------------
def test_default_is_plaintext_and_no_client_auth() -> None:
    config = BrokerConfig.from_properties({"zookeeper.connect": "localhost:2181"})
    assert client_tls(config) is None
    assert not client_auth_configured(config)


def test_store_passwords_are_sensitive() -> None:
    for key in ("zookeeper.ssl.keystore.password", "zookeeper.ssl.truststore.password"):
        assert is_sensitive(key)


def test_client_auth_needs_tls_and_a_keystore(pki: ZkPki) -> None:
    on = BrokerConfig.from_properties(tls_keys(pki))
    assert client_auth_configured(on)
    assert not client_auth_configured(
        BrokerConfig.from_properties(tls_keys(pki, zookeeper_ssl_client_enable="false"))
    )
    assert not client_auth_configured(
        BrokerConfig.from_properties(tls_keys(pki, zookeeper_ssl_keystore_location=""))
    )


def test_protocol_defaults_to_tls_1_2_and_host_names_are_checked(pki: ZkPki) -> None:
    tls = client_tls(BrokerConfig.from_properties(tls_keys(pki)))
    assert tls is not None
    assert tls.context.maximum_version == tls.context.minimum_version
    assert tls.context.maximum_version.name == "TLSv1_2"
    assert tls.context.check_hostname
    both = tls_keys(pki, zookeeper_ssl_enabled_protocols="TLSv1.2,TLSv1.3")
    tls = client_tls(BrokerConfig.from_properties(both))
    assert tls is not None and tls.context.maximum_version.name == "TLSv1_3"


@pytest.mark.parametrize("key", ["zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable"])
def test_revocation_checks_are_refused(pki: ZkPki, key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}=true is not supported"):
        client_tls(BrokerConfig.from_properties({**tls_keys(pki), key: "true"}))


def test_store_errors_name_the_zookeeper_keys(pki: ZkPki, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="zookeeper.ssl.keystore.location: cannot read"):
        client_tls(
            BrokerConfig.from_properties(tls_keys(pki, zookeeper_ssl_keystore_password="wrong"))
        )
    ca_text = tmp_path / "ca.crt"  # PEM under a name that does not say so
    ca_text.write_bytes(pki.ca.read_bytes())
    with pytest.raises(ConfigError, match="set zookeeper.ssl.truststore.type=PEM"):
        client_tls(
            BrokerConfig.from_properties(
                tls_keys(pki, zookeeper_ssl_truststore_location=str(ca_text))
            )
        )


def test_a_password_file_is_read_again_with_its_store(
    pki: ZkPki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As ZooKeeper's client reads the password file for each context it makes: a keystore
    renewed with a new password and its password file rewritten are read together at the next
    connection; the file changed alone (removed) makes the attempt fail, naming the file."""
    keystore, password_file = tmp_path / "broker.p12", tmp_path / "keystore.password"
    shutil.copy(pki.broker, keystore)
    password_file.write_text(PASSWORD + "\n")
    monkeypatch.setenv("KAFKA_OPTS", f"-Dzookeeper.ssl.keyStore.passwordPath={password_file}")
    keys = tls_keys(
        pki,
        zookeeper_ssl_keystore_location=str(keystore),
        zookeeper_ssl_keystore_password="wrong",  # the file's wins
    )
    tls = client_tls(BrokerConfig.from_properties(keys))
    assert tls is not None
    first = tls.connection_context()
    renewed_password = "renewed-secret-71d0"
    key, cert, chain = pkcs12.load_key_and_certificates(pki.broker.read_bytes(), PASSWORD.encode())
    encryption = serialization.BestAvailableEncryption(renewed_password.encode())
    renewed = pkcs12.serialize_key_and_certificates(b"key", key, cert, chain, encryption)  # type: ignore[arg-type]
    keystore.with_suffix(".new").write_bytes(renewed)
    keystore.with_suffix(".new").replace(keystore)
    password_file.write_text(renewed_password + "\n")
    second = tls.connection_context()
    assert second is not first and tls.connection_context() is second
    password_file.unlink()
    with pytest.raises(OSError, match=f"zookeeper.ssl.keyStore.passwordPath={password_file}: "):
        tls.connection_context()
    assert PASSWORD not in caplog.text and renewed_password not in caplog.text


def test_stores_are_read_again_only_when_a_file_changed(
    pki: ZkPki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A new connection's context: the same one while the files are unchanged (a stat each,
    no read); made again when one is replaced; an unreadable store fails every attempt until
    it reads, logged once."""
    keystore, truststore = tmp_path / "broker.p12", tmp_path / "ca.pem"
    shutil.copy(pki.broker, keystore)
    shutil.copy(pki.ca, truststore)
    keys = tls_keys(
        pki,
        zookeeper_ssl_keystore_location=str(keystore),
        zookeeper_ssl_truststore_location=str(truststore),
    )
    tls = client_tls(BrokerConfig.from_properties(keys))
    assert tls is not None
    first = tls.connection_context()
    assert first is tls.context and tls.connection_context() is first
    shutil.copy(pki.other_ca, tmp_path / "renewed.pem")
    (tmp_path / "renewed.pem").replace(truststore)
    renewed = tls.connection_context()
    assert renewed is not first and tls.connection_context() is renewed
    good = keystore.read_bytes()
    keystore.write_bytes(good[: len(good) // 2])
    for _ in range(2):
        with pytest.raises(OSError, match="zookeeper.ssl.keystore.location: cannot read"):
            tls.connection_context()
    assert caplog.text.count("TLS stores cannot be read") == 1
    assert PASSWORD not in caplog.text
    keystore.write_bytes(good)
    assert tls.connection_context() is not renewed
    # a PEM whose certificate does not decode: OpenSSL's error, with the stores named
    lines = pki.ca.read_text().splitlines()
    lines[3] = "A" * len(lines[3])
    truststore.write_text("\n".join(lines) + "\n")
    with pytest.raises(OSError, match=f"zookeeper.ssl.truststore.location={truststore}: "):
        tls.connection_context()
