"""Kafka's secure ZooKeeper mode with Kerberos: a real ZooKeeper whose JAAS `Server` section logs
in as `zookeeper/localhost` from a keytab (SASLAuthenticationProvider), against the test KDC
(tests/wirebroker/kdc.py); a broker whose JAAS `Client` section is a Krb5LoginModule with the
keytab of `kafka/localhost` logs in with GSSAPI and, with `zookeeper.set.acl=true`, creates its
znodes with ALL for `sasl:kafka/localhost@REALM` (ZooKeeper names a Kerberos client by its
whole principal by default). A keytab without the principal stops the start, saying why.

The server's principal as ZooKeeper 3.8's client finds it: the connect string's host
canonicalized (a name of 127.0.0.1 other than localhost becomes localhost), not with
`zookeeper.sasl.client.canonicalize.hostname=false`, and `zookeeper.server.principal` over both;
a principal the KDC does not know stops the start, naming it. Differential: ZooKeeper 3.8's
own Java client (ZooKeeperMain), given the same system properties, logs in or is refused
alike.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError
from kazoo.security import Permissions

from tests.cluster.harness import create_topic, start_broker
from tests.cluster.processes import zk_session
from tests.cluster.test_zk_sasl_cluster import serve
from tests.wirebroker.kdc import REALM, Kdc, krb5_jaas, requires_kdc, serving_kdc
from wirebroker.sasl.kerberos import service_host
from wirebroker.zk.sasl_login import kazoo_client, start_session, zk_login
from wirebroker.zookeeper_server import (
    ZooKeeperServer,
    jars_available,
    jars_dir,
    java_executable,
    zookeeper,
)

pytestmark = [pytest.mark.integration, requires_kdc]

BROKER = f"kafka/localhost@{REALM}"
SASLAUTH = {"authProvider.1": "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"}


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    with serving_kdc(tmp_path_factory.mktemp("kdc")) as kdc:  # the brokers run in this process
        yield kdc


@pytest.fixture(scope="module")
def kerberized_zk(kdc: Kdc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    if not jars_available():
        pytest.skip("no ZooKeeper jars: run `make jars`")
    tmp = tmp_path_factory.mktemp("zk-kerberos")
    jaas = tmp / "zookeeper-server.jaas"
    keytab = kdc.keytab("zookeeper/localhost")
    jaas.write_text(f"Server {{\n  {krb5_jaas(keytab, f'zookeeper/localhost@{REALM}')}\n}};\n")
    with zookeeper(
        heap="128m",
        settings=SASLAUTH,
        jvm_options=[
            f"-Djava.security.auth.login.config={jaas}",
            f"-Djava.security.krb5.conf={kdc.krb5_conf}",
        ],
    ) as server:
        yield server


def client_jaas(tmp: Path, keytab: Path) -> str:
    """KAFKA_OPTS naming a JAAS file whose Client section logs in as BROKER from `keytab`."""
    path = tmp / "client.jaas"
    path.write_text(f"Client {{\n  {krb5_jaas(keytab, BROKER)}\n}};\n")
    return f"-Xmx1g -Djava.security.auth.login.config={path}"


@pytest.mark.timeout(90)
def test_a_broker_logs_in_with_kerberos_and_its_znodes_carry_its_principal(
    kerberized_zk: ZooKeeperServer, kdc: Kdc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_OPTS", client_jaas(tmp_path, kdc.keytab("kafka/localhost")))
    connect = f"localhost:{kerberized_zk.port}/kerberized"

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, connect, tmp_path, 1, zookeeper_set_acl="true")
            await create_topic(b1, "kerberized", 1, replicas=1)
            nursery.cancel_scope.cancel()

    trio.run(main)
    with zk_session(KazooClient(hosts=kerberized_zk.connect, timeout=10)) as zk:
        acls = zk.get_acls("/kerberized/brokers/topics/kerberized")[0]
        got = {(a.perms, a.id.scheme, a.id.id) for a in acls}
    assert got == {(Permissions.ALL, "sasl", BROKER), (Permissions.READ, "world", "anyone")}


@pytest.mark.timeout(60)
def test_a_keytab_without_the_principal_stops_the_start_saying_why(
    kerberized_zk: ZooKeeperServer, kdc: Kdc, tmp_path: Path
) -> None:
    keytab = kdc.keytab("someone-else")
    connect = f"localhost:{kerberized_zk.port}/refused"
    done = serve(tmp_path, connect, client_jaas(tmp_path, keytab))
    assert done.returncode == 1, done.stderr
    assert (
        f"ZooKeeper at {connect} refused the SASL login of principal '{BROKER}' (GSSAPI to "
        f"service 'zookeeper', keytab {keytab}, section Client of {tmp_path / 'client.jaas'}): "
        "AUTH_FAILED (GSS-API: "
    ) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def loopback_alias() -> str:
    """A name of 127.0.0.1 other than localhost, whose address's name is localhost (this
    machine's host name, often); the test is skipped without one."""
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        address = None
    if name == "localhost" or address != "127.0.0.1" or service_host(address) != "localhost":
        pytest.skip(f"no name of 127.0.0.1 other than localhost ({name} is {address})")
    return name


@pytest.mark.timeout(120)
def test_the_server_host_is_canonicalized_unless_turned_off(
    kerberized_zk: ZooKeeperServer, kdc: Kdc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connected by another name of 127.0.0.1, the broker asks for zookeeper/localhost (the
    address's name) and logs in; with canonicalization off it asks for zookeeper/<that name>,
    which the KDC does not know; `zookeeper.server.principal` names the server's principal
    whatever the host."""
    alias = loopback_alias()
    opts = client_jaas(tmp_path, kdc.keytab("kafka/localhost"))
    connect = f"{alias}:{kerberized_zk.port}/canonical"
    off = "-Dzookeeper.sasl.client.canonicalize.hostname=false"
    monkeypatch.setenv("KAFKA_OPTS", opts)
    trio.run(start_and_stop, connect, tmp_path / "canonicalized")

    done = serve(tmp_path, connect, f"{opts} {off}")
    assert done.returncode == 1, done.stderr
    assert (f"principal '{BROKER}' (GSSAPI to service 'zookeeper', keytab ") in done.stderr, (
        done.stderr
    )
    assert f"the server principal asked for: zookeeper/{alias}@{REALM}" in done.stderr
    assert "not found in Kerberos database" in done.stderr

    named = f"-Dzookeeper.server.principal=zookeeper/localhost@{REALM}"
    monkeypatch.setenv("KAFKA_OPTS", f"{opts} {off} {named}")
    trio.run(start_and_stop, connect, tmp_path / "named")


@pytest.mark.timeout(120)
def test_zookeeper_server_principal_names_the_server(
    kerberized_zk: ZooKeeperServer, kdc: Kdc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connected by address, the principal given without a realm (taking
    `zookeeper.server.realm`) logs in; a principal that is not the server's is refused,
    the message naming it; a malformed one stops the start before connecting."""
    opts = client_jaas(tmp_path, kdc.keytab("kafka/localhost"))
    connect = f"127.0.0.1:{kerberized_zk.port}/named"
    realm = f"-Dzookeeper.server.realm={REALM}"
    monkeypatch.setenv(
        "KAFKA_OPTS", f"{opts} -Dzookeeper.server.principal=zookeeper/localhost {realm}"
    )
    trio.run(start_and_stop, connect, tmp_path / "named")

    wrong = f"zookeeper/elsewhere.invalid@{REALM}"
    done = serve(tmp_path, connect, f"{opts} -Dzookeeper.server.principal={wrong}")
    assert done.returncode == 1, done.stderr
    assert (
        f"principal '{BROKER}' (GSSAPI to server principal '{wrong}', keytab "
    ) in done.stderr, done.stderr
    assert f"the server principal asked for: {wrong}" in done.stderr
    assert "not found in Kerberos database" in done.stderr

    malformed = "zookeeper/a/b@" + REALM
    done = serve(tmp_path, connect, f"{opts} -Dzookeeper.server.principal={malformed}")
    assert done.returncode == 2, done.stderr
    assert f"Malformed Kerberos name: {malformed}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


async def start_and_stop(connect: str, tmp: Path) -> None:
    """A broker started (logged in to ZooKeeper and registered) and stopped."""
    async with trio.open_nursery() as nursery:
        await start_broker(nursery, connect, tmp, 1)
        nursery.cancel_scope.cancel()


#: System properties of the server principal, and whether ZooKeeper takes the login (on a
#: connection by another name of 127.0.0.1 than localhost).
SERVER_PRINCIPAL_CASES = [
    ((), True),
    (("-Dzookeeper.sasl.client.canonicalize.hostname=false",), False),
    (
        (
            "-Dzookeeper.sasl.client.canonicalize.hostname=false",
            f"-Dzookeeper.server.principal=zookeeper/localhost@{REALM}",
        ),
        True,
    ),
    ((f"-Dzookeeper.server.principal=zookeeper/elsewhere.invalid@{REALM}",), False),
    # the realm is only checked for form: Kerberos maps the host to the realm
    (
        ("-Dzookeeper.server.principal=zookeeper/localhost", "-Dzookeeper.server.realm=ELSEWHERE"),
        True,
    ),
]


@pytest.mark.timeout(240)
def test_the_server_principal_as_zookeepers_java_client_finds_it(
    kerberized_zk: ZooKeeperServer, kdc: Kdc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    alias = loopback_alias()
    jaas = client_jaas(tmp_path, kdc.keytab("kafka/localhost"))
    hosts = f"{alias}:{kerberized_zk.port}"
    got = {}
    for flags, _ in SERVER_PRINCIPAL_CASES:
        monkeypatch.setenv("KAFKA_OPTS", " ".join([jaas, *flags]))
        got[flags] = (java_client_logs_in(hosts, jaas, kdc, flags), wirebroker_logs_in(hosts))
    assert got == {flags: (taken, taken) for flags, taken in SERVER_PRINCIPAL_CASES}


def java_client_logs_in(hosts: str, jaas: str, kdc: Kdc, flags: tuple[str, ...]) -> bool:
    """Whether ZooKeeper's Java client, with `jaas` and `flags`, logs in to `hosts`."""
    system_properties = [word for word in jaas.split() if word.startswith("-D")]
    command = [java_executable(), "-cp", f"{jars_dir()}/*", *system_properties, *flags]
    command += [f"-Djava.security.krb5.conf={kdc.krb5_conf}", "org.apache.zookeeper.ZooKeeperMain"]
    command += ["-server", hosts, "ls", "/"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if "AuthFailed" in done.stdout + done.stderr:
        return False
    assert done.returncode == 0, done.stdout + done.stderr
    return True


def wirebroker_logs_in(hosts: str) -> bool:
    """Whether wirebroker's ZooKeeper client, with the system properties, logs in to `hosts`."""
    login = zk_login()
    client = kazoo_client(hosts, login, timeout=10)
    try:
        start_session(client, login, 20)
    except AuthFailedError:
        return False
    finally:
        client.stop()
        client.close()
    return True
