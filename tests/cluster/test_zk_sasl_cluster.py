"""Kafka's secure ZooKeeper mode against a real ZooKeeper requiring SASL: brokers log in with
DIGEST-MD5 (the JAAS file's `Client` section, named in KAFKA_OPTS as Kafka's is) and, with
`zookeeper.set.acl=true`, create their znodes with Kafka's ACLs, which keep every other client
(another SASL user, or an anonymous one where ZooKeeper admits those) from changing them and
from reading the sensitive ones.

Also: a wrong password stops the start with AUTH_FAILED (never showing the password), and
`wirebroker configs --zookeeper` logs in and writes its znodes with the same ACLs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from compat.kafka_process import (
    KAFKA_MAIN,
    LOOPBACK,
    JavaProcess,
    free_port,
    java_command,
    kafka_api_versions,
    kafka_properties,
    write_log4j_config,
)
from protocol.errors import ErrorCode
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from tests.cluster.harness import (
    call,
    consume,
    create_topic,
    eventually,
    produce,
    sha512_upsertion,
    start_broker,
)
from tests.cluster.processes import wait_for as wait_until
from tests.cluster.processes import zk_session
from wirebroker.peer import request_once
from wirebroker.zookeeper_server import (
    ZooKeeperServer,
    jars_available,
    zookeeper,
    zookeeper_ruok,
)

pytestmark = pytest.mark.integration

PASSWORD = "kafka-zk-secret"
ALICE_PASSWORD = "alice-zk-secret"
SERVER_JAAS = f"""Server {{
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_kafka="{PASSWORD}" user_alice="{ALICE_PASSWORD}";
}};
"""
SASL_PROVIDER = {"authProvider.sasl": "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"}
#: ZooKeeper 3.7+: a session that does not log in with SASL is closed.
ENFORCE_SASL = {**SASL_PROVIDER, "enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"}

# Kafka's ZkData.defaultAcls, for brokers logged in as `kafka`
OPEN = {(Permissions.ALL, "world", "anyone")}
SENSITIVE = {(Permissions.ALL, "sasl", "kafka")}
SECURE = {*SENSITIVE, (Permissions.READ, "world", "anyone")}


@contextlib.contextmanager
def sasl_zookeeper(tmp: Path, settings: dict[str, str]) -> Iterator[ZooKeeperServer]:
    """ZooKeeper with the users of SERVER_JAAS, read from `tmp`/zookeeper-server.jaas at each
    start of its process."""
    if not jars_available():
        pytest.skip("no ZooKeeper jars: run `make jars`")
    jaas = tmp / "zookeeper-server.jaas"
    jaas.write_text(SERVER_JAAS)
    with zookeeper(
        heap="128m", settings=settings, jvm_options=[f"-Djava.security.auth.login.config={jaas}"]
    ) as server:
        yield server


@pytest.fixture(scope="module")
def enforcing_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """ZooKeeper admitting SASL sessions only (as Kafka's docs advise)."""
    with sasl_zookeeper(tmp_path_factory.mktemp("zk-enforcing"), ENFORCE_SASL) as server:
        yield server


@pytest.fixture
def chroot() -> str:
    return f"/wb-{uuid.uuid4().hex[:8]}"


def client_jaas(tmp: Path, password: str = PASSWORD) -> str:
    """KAFKA_OPTS naming a JAAS file whose Client section logs in as `kafka` with `password`."""
    path = tmp / "client.jaas"
    path.write_text(
        "// the broker's login to ZooKeeper\n"
        "Client {\n"
        "    org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'    username="kafka" password="{password}";\n'
        "};\n"
    )
    return f"-Xmx1g -Djava.security.auth.login.config={path}"


@contextlib.contextmanager
def kazoo(hosts: str, user: str | None = None, password: str = "") -> Iterator[KazooClient]:
    """A kazoo session logged in as `user` with DIGEST-MD5, or anonymous."""
    sasl = {"mechanism": "DIGEST-MD5", "username": user, "password": password} if user else None
    with zk_session(KazooClient(hosts=hosts, sasl_options=sasl, timeout=10)) as client:
        client.exists("/")  # answered once the SASL exchange is done
        yield client


def acls_of(client: KazooClient, path: str) -> set[tuple[int, str, str]]:
    return {(a.perms, a.id.scheme, a.id.id) for a in client.get_acls(path)[0]}


def refused(attempt: Callable[[], Any]) -> bool:
    """True when ZooKeeper refuses `attempt` for want of permission."""
    try:
        attempt()
    except NoAuthError:
        return True
    return False


def writes_refused(client: KazooClient, root: str) -> dict[str, bool]:
    """Whether each change of a broker's znodes by `client` is refused."""
    return {
        "set /cluster/id": refused(lambda: client.set(f"{root}/cluster/id", b"{}")),
        "delete /brokers/ids/1": refused(lambda: client.delete(f"{root}/brokers/ids/1")),
        "create under /brokers/ids": refused(lambda: client.create(f"{root}/brokers/ids/9")),
        "create under /config/changes": refused(
            lambda: client.create(f"{root}/config/changes/config_change_x")
        ),
        "set_acls /brokers": refused(
            lambda: client.set_acls(f"{root}/brokers", list(OPEN_ACL_UNSAFE))
        ),
    }


def reads_refused(client: KazooClient, root: str) -> dict[str, bool]:
    """Whether each read by `client` is refused: the sensitive znodes only."""
    return {
        "/brokers/ids/1": refused(lambda: client.get(f"{root}/brokers/ids/1")),
        "/brokers/topics": refused(lambda: client.get_children(f"{root}/brokers/topics")),
        "/config/users/alice": refused(lambda: client.get(f"{root}/config/users/alice")),
        "/config/users": refused(lambda: client.get_children(f"{root}/config/users")),
        "/config/brokers": refused(lambda: client.get_children(f"{root}/config/brokers")),
        "/delegation_token/tokens": refused(
            lambda: client.get_children(f"{root}/delegation_token/tokens")
        ),
    }


SENSITIVE_READS = {
    "/brokers/ids/1": False,
    "/brokers/topics": False,
    "/config/users/alice": True,
    "/config/users": True,
    "/config/brokers": True,
    "/delegation_token/tokens": True,
}


SCRAM_UPSERT = AlterUserScramCredentialsRequest(upsertions=[sha512_upsertion("alice", b"pw")])


async def start_secure_brokers(
    nursery: trio.Nursery, connect: str, tmp: Path, count: int
) -> list[Any]:
    """`count` brokers with zookeeper.set.acl=true, delegation tokens on, and a user's SCRAM
    credential stored through them (a sensitive znode)."""
    brokers = [
        await start_broker(
            nursery,
            connect,
            tmp,
            i,
            zookeeper_set_acl="true",
            **{"delegation.token.secret.key": "cluster-token-key"},
        )
        for i in range(1, count + 1)
    ]
    answer = await call(brokers[0], SCRAM_UPSERT, 0)
    assert answer.results[0].error_code == ErrorCode.NONE
    return brokers


@pytest.mark.timeout(90)
def test_brokers_log_in_and_their_znodes_carry_kafkas_acls(
    enforcing_zk: ZooKeeperServer, chroot: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_OPTS", client_jaas(tmp_path))
    connect = enforcing_zk.connect + chroot

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1, _ = await start_secure_brokers(nursery, connect, tmp_path, 2)
            await create_topic(b1, "logged-in", 1, replicas=2)
            listener = b1.listeners[0]
            client = {"bootstrap.servers": f"{listener.host}:{listener.port}"}
            await trio.to_thread.run_sync(produce, client, "logged-in", 3)
            got = await trio.to_thread.run_sync(consume, client, "logged-in", 3)
            assert got == [f"replicated-{i}".encode() for i in range(3)]
            await trio.to_thread.run_sync(check_znodes)
            nursery.cancel_scope.cancel()

    def check_znodes() -> None:
        expected = {
            "": SECURE,  # the chroot, made by the first broker
            "/consumers": OPEN,
            "/brokers": SECURE,
            "/brokers/ids": SECURE,
            "/brokers/ids/1": SECURE,  # ephemeral
            "/brokers/topics/logged-in": SECURE,
            "/brokers/topics/logged-in/partitions/0/state": SECURE,  # a multi's create
            "/cluster/id": SECURE,
            "/controller": SECURE,
            "/controller_epoch": SECURE,
            "/config": SECURE,
            "/config/topics/logged-in": SECURE,
            "/config/users": SENSITIVE,
            "/config/users/alice": SENSITIVE,
            "/config/brokers": SENSITIVE,
            "/delegation_token": SECURE,
            "/delegation_token/tokens": SENSITIVE,
            "/delegation_token/token_changes": SECURE,
        }
        hosts = enforcing_zk.connect
        with kazoo(hosts, "kafka", PASSWORD) as broker_user:
            assert {p: acls_of(broker_user, chroot + p) for p in expected} == expected
            [change] = broker_user.get_children(f"{chroot}/config/changes")
            assert acls_of(broker_user, f"{chroot}/config/changes/{change}") == SECURE
        # another SASL user: reads what the world may, changes nothing
        with kazoo(hosts, "alice", ALICE_PASSWORD) as alice:
            assert reads_refused(alice, chroot) == SENSITIVE_READS
            assert all(writes_refused(alice, chroot).values()), writes_refused(alice, chroot)

    trio.run(main)


@pytest.mark.timeout(60)
def test_an_anonymous_client_reads_only_what_kafka_leaves_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ZooKeeper admits sessions without a login, the ACLs alone protect the znodes."""
    monkeypatch.setenv("KAFKA_OPTS", client_jaas(tmp_path))
    with sasl_zookeeper(tmp_path, SASL_PROVIDER) as zk:

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await start_secure_brokers(nursery, zk.connect + "/kafka", tmp_path, 1)
                await trio.to_thread.run_sync(check)
                nursery.cancel_scope.cancel()

        def check() -> None:
            with kazoo(zk.connect) as anonymous:
                assert reads_refused(anonymous, "/kafka") == SENSITIVE_READS
                assert all(writes_refused(anonymous, "/kafka").values())

        trio.run(main)


def acl_tree(
    client: KazooClient, path: str, root: str = ""
) -> dict[str, set[tuple[int, str, str]]]:
    """Every znode from `path` down, by its path below `root`, with its ACLs."""
    tree = {path[len(root) :]: acls_of(client, path or "/")}
    for child in client.get_children(path or "/"):
        tree.update(acl_tree(client, f"{path}/{child}", root))
    return tree


@pytest.mark.timeout(120)
def test_kafka_and_wirebroker_give_their_znodes_the_same_acls(
    enforcing_zk: ZooKeeperServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Differential: Apache Kafka 3.9 and wirebroker, each with zookeeper.set.acl=true and the
    same JAAS login, in chroots of their own; every znode both create has the same ACLs. The
    JAAS file takes the password from a system property, `${...}`, which both expand."""
    opts = f"{client_jaas(tmp_path, '${zk.kafka.password}')} -Dzk.kafka.password={PASSWORD}"
    monkeypatch.setenv("KAFKA_OPTS", opts)
    secure = {"zookeeper.set.acl": "true", "delegation.token.secret.key": "cluster-token-key"}
    kafka_port = free_port()
    base = tmp_path / "kafka"
    base.mkdir()
    props = kafka_properties(
        broker_id=1,
        port=kafka_port,
        zookeeper_connect=enforcing_zk.connect + "/kafka",
        log_dir=base / "logs",
        overrides=secure,
    )
    cfg = base / "server.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    argv = java_command(
        KAFKA_MAIN,
        [str(cfg)],
        log4j_config=write_log4j_config(base / "log4j.properties"),
        jvm_options=opts.split()[1:],  # the -D of KAFKA_OPTS, as kafka-server-start.sh passes it
    )
    kafka = JavaProcess("kafka", argv, base / "kafka.log", base).start()
    try:

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await start_secure_brokers(nursery, enforcing_zk.connect + "/wb", tmp_path, 1)
                await trio.to_thread.run_sync(
                    wait_until, lambda: kafka_api_versions(LOOPBACK, kafka_port), 90.0, "Kafka"
                )
                # the same sensitive znode and change notification on Kafka's side
                answer = await request_once(LOOPBACK, kafka_port, SCRAM_UPSERT, 0, client_id="test")
                assert answer.results[0].error_code == ErrorCode.NONE
                await trio.to_thread.run_sync(compare)
                nursery.cancel_scope.cancel()

        def compare() -> None:
            with kazoo(enforcing_zk.connect, "kafka", PASSWORD) as broker_user:
                wait_until(
                    lambda: broker_user.exists("/kafka/delegation_token/tokens"),
                    30.0,
                    "Kafka's znodes",
                )
                theirs = acl_tree(broker_user, "/kafka", "/kafka")
                ours = acl_tree(broker_user, "/wb", "/wb")
            both = sorted(theirs.keys() & ours.keys())
            assert {p: theirs[p] for p in both} == {p: ours[p] for p in both}
            assert {"", "/consumers", "/brokers/ids/1", "/config/users", "/config/brokers"} <= set(
                both
            )
            assert {"/delegation_token/tokens", "/config/users/alice"} <= set(both), both
            assert any(p.startswith("/config/changes/config_change_") for p in both), both

        trio.run(main)
    except BaseException:
        print(kafka.log_tail(60), file=sys.stderr)
        raise
    finally:
        kafka.stop()


def restart_with_users(server: ZooKeeperServer, tmp: Path, users: str) -> None:
    """Stop ZooKeeper (started by `sasl_zookeeper(tmp, ...)`) and start it again, same port
    and data, with the JAAS `users`."""
    server.process.stop()
    (tmp / "zookeeper-server.jaas").write_text(users)
    server.process.start()
    wait_until(lambda: zookeeper_ruok(server.host, server.port), 60.0, "ZooKeeper to restart")


@pytest.mark.timeout(90)
def test_a_login_refused_on_a_reconnect_is_tried_again_until_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As Kafka's ZooKeeperClient after AUTH_FAILED once started: a new session a second later,
    and again, until ZooKeeper takes the login; the broker then registers again."""
    monkeypatch.setenv("KAFKA_OPTS", client_jaas(tmp_path))
    with sasl_zookeeper(tmp_path, ENFORCE_SASL) as server:

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                running = await start_broker(nursery, server.connect + "/kafka", tmp_path, 1)
                assert running.broker.cluster is not None
                zk = running.broker.cluster.zk
                first = zk.session_id
                changed = SERVER_JAAS.replace(PASSWORD, "a-new-password")
                await trio.to_thread.run_sync(restart_with_users, server, tmp_path, changed)
                await eventually(
                    lambda: (
                        sum("refused the SASL login" in r.getMessage() for r in caplog.records) >= 2
                    ),
                    timeout=30,
                    what="the login refused twice",
                )
                await trio.to_thread.run_sync(restart_with_users, server, tmp_path, SERVER_JAAS)

                async def registered_anew() -> Any:
                    got = await zk.exists("/brokers/ids/1") if zk.connected else None
                    return got if got is not None and got.ephemeralOwner not in (0, first) else None

                got = await eventually(
                    registered_anew, 30, 0.1, what="broker 1 registered in a new session"
                )
                assert got.ephemeralOwner == zk.session_id
                nursery.cancel_scope.cancel()

        trio.run(main)


def serve(
    tmp: Path, connect: str, kafka_opts: str, *overrides: str
) -> subprocess.CompletedProcess[str]:
    """`wirebroker serve` in cluster mode until it exits (it must not start)."""
    argv = [sys.executable, "-m", "wirebroker", "serve", "--listeners", "PLAINTEXT://127.0.0.1:0"]
    argv += ["--log-dirs", str(tmp / "logs"), "--override", f"zookeeper.connect={connect}"]
    for item in overrides:
        argv += ["--override", item]
    env = {**os.environ, "KAFKA_OPTS": kafka_opts}
    return subprocess.run(argv, capture_output=True, text=True, timeout=45, env=env)


@pytest.mark.timeout(60)
def test_a_refused_login_stops_the_start(
    enforcing_zk: ZooKeeperServer, chroot: str, tmp_path: Path
) -> None:
    """Kafka's ZooKeeper client reports AUTH_FAILED and the broker does not start; the password
    is never shown."""
    wrong = "not-the-password"
    done = serve(tmp_path, enforcing_zk.connect + chroot, client_jaas(tmp_path, wrong))
    assert done.returncode == 1, done.stderr
    assert (
        f"ZooKeeper at {enforcing_zk.connect + chroot} refused the SASL login of user 'kafka' "
        f"(DIGEST-MD5, section Client of {tmp_path / 'client.jaas'}): AUTH_FAILED"
    ) in done.stderr, done.stderr
    assert wrong not in done.stderr
    assert "Traceback" not in done.stderr  # kazoo's connection thread ended cleanly


@pytest.mark.timeout(90)
def test_a_password_from_a_system_property_logs_in_and_is_never_shown(
    enforcing_zk: ZooKeeperServer,
    chroot: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`password="${zk.kafka.password}"` in the JAAS file, the value a `-D` of KAFKA_OPTS, as
    Java's ConfigFile expands it for Kafka: the broker logs in (its znodes are its user's) and
    the password is in no log line."""
    caplog.set_level("DEBUG")
    opts = client_jaas(tmp_path, "${zk.kafka.password}")
    monkeypatch.setenv("KAFKA_OPTS", f"{opts} -Dzk.kafka.password={PASSWORD}")
    connect = enforcing_zk.connect + chroot

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await start_broker(nursery, connect, tmp_path, 1, zookeeper_set_acl="true")
            nursery.cancel_scope.cancel()

    trio.run(main)
    with kazoo(enforcing_zk.connect, "kafka", PASSWORD) as broker_user:
        assert acls_of(broker_user, f"{chroot}/brokers/ids") == SECURE
    assert "zk.kafka.password" in (tmp_path / "client.jaas").read_text()
    assert PASSWORD not in caplog.text


@pytest.mark.timeout(90)
def test_a_password_property_wrong_or_unset_stops_the_start(
    enforcing_zk: ZooKeeperServer, chroot: str, tmp_path: Path
) -> None:
    """A wrong value is refused by ZooKeeper (never shown); an unset property is refused before
    connecting, naming it (Java's ConfigFile: "unable to expand property")."""
    opts = client_jaas(tmp_path, "${zk.kafka.password}")
    connect = enforcing_zk.connect + chroot
    wrong = "not-the-password"
    done = serve(tmp_path, connect, f"{opts} -Dzk.kafka.password={wrong}")
    assert done.returncode == 1, done.stderr
    assert "AUTH_FAILED" in done.stderr, done.stderr
    assert wrong not in done.stderr and wrong not in done.stdout

    done = serve(tmp_path, connect, opts)
    assert done.returncode == 2, done.stderr  # a configuration error
    assert (
        "Exception while loading Zookeeper JAAS login context [java.security.auth.login.config="
        f"{tmp_path / 'client.jaas'}, zookeeper.sasl.client=default:true, "
        "zookeeper.sasl.clientconfig=default:Client]: section Client (line 4): option password: "
        "unable to expand property zk.kafka.password"
    ) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(60)
def test_configs_tool_logs_in_and_writes_secure_znodes(
    enforcing_zk: ZooKeeperServer, chroot: str, tmp_path: Path
) -> None:
    """As kafka-configs.sh --zookeeper: with a JAAS login its znodes get Kafka's secure ACLs
    (ConfigCommand's KafkaZkClient is secure when JaasUtils.isZkSaslEnabled)."""
    connect = enforcing_zk.connect + chroot
    argv = [sys.executable, "-m", "wirebroker", "configs", "--zookeeper", connect, "--alter"]
    argv += ["--entity-type", "users", "--entity-name", "bob"]
    argv += ["--add-config", "SCRAM-SHA-512=[password=bob-secret]"]
    env = {**os.environ, "KAFKA_OPTS": client_jaas(tmp_path)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=45, env=env)
    assert done.returncode == 0, done.stderr
    with kazoo(enforcing_zk.connect, "kafka", PASSWORD) as broker_user:
        [change] = broker_user.get_children(f"{chroot}/config/changes")
        assert {
            p: acls_of(broker_user, chroot + p)
            for p in (
                "",
                "/config",
                "/config/users",
                "/config/users/bob",
                f"/config/changes/{change}",
            )
        } == {
            "": SECURE,
            "/config": SECURE,
            "/config/users": SENSITIVE,
            "/config/users/bob": SENSITIVE,
            f"/config/changes/{change}": SECURE,
        }
