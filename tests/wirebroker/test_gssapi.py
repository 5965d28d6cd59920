"""SASL/GSSAPI (Kerberos) against a broker process, a real MIT KDC and real clients.

The KDC (tests/wirebroker/kdc.py) serves a realm of its own; the broker's SASL_PLAINTEXT
listener on `localhost` accepts GSSAPI with the keytab of `kafka/localhost` (the JAAS entry
Kafka users write) and PLAIN for the test's own admin requests, with the ACL authorizer; its
SASL_SSL listener accepts GSSAPI the same way inside TLS (the `pki` fixture's certificate).
Principals become users by `sasl.kerberos.principal.to.local.rules`: `alice@REALM` is `alice`,
`etl/worker1@REALM` is `etl_worker1` (a rule of its own), `kafka/localhost@REALM` (the broker's
own, logging in as to a peer) is `kafka`, and a two-component principal no rule maps is
refused (after the exchange, as Kafka). The clients: Kafka's Java client (RoundTrip.java, Krb5LoginModule with a
keytab), kcat (librdkafka with Cyrus SASL, kinit from the keytab), and wirebroker's own GSSAPI
client over raw requests (`wirebroker.sasl.kerberos.GssapiClient`).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.messages.metadata import MetadataRequest
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import RawClient, describe_configs, wait_until
from tests.wirebroker.kdc import REALM, Kdc, kcat_gssapi, krb5_jaas, requires_kdc, serving_kdc
from tests.wirebroker.pki import KEY_PASSWORD, Pki
from tests.wirebroker.secured import (
    AUTHORIZER,
    PLAIN_JAAS,
    READ,
    TOPIC,
    WRITE,
    acl,
    create_topics,
    grant,
    login,
)
from wirebroker.connection import MIN_REAUTHENTICATION_INTERVAL_S
from wirebroker.peer import PeerAuthenticationFailed, PeerConnection, PeerSecurity
from wirebroker.sasl.kerberos import GssapiClient
from wirebroker.sasl.settings import SaslLogin
from wirebroker.zookeeper_server import jars_dir, java_executable

pytestmark = [pytest.mark.integration, requires_kdc]

SERVICE = "kafka/localhost"
#: A failed login's answer and close wait this long; an unmapped principal's close does not.
FAILED_LOGIN_DELAY_MS = 3000
RULES = (
    rf"RULE:[2:$1_$2@$0](etl_.*@{REALM})s/@.*//,"
    rf"RULE:[2:$1@$0](kafka@{REALM})s/@.*//,"
    rf"RULE:[1:$1@$0](.*@{REALM})s/@.*//"
)


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    with serving_kdc(tmp_path_factory.mktemp("kdc")) as kdc:
        yield kdc


@pytest.fixture(scope="module")
def service_keytab(kdc: Kdc) -> Path:
    return kdc.keytab(SERVICE)


@pytest.fixture(scope="module")
def broker(
    kdc: Kdc, service_keytab: Path, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    jaas = krb5_jaas(service_keytab, f"{SERVICE}@{REALM}")
    broker = BrokerProcess(
        tmp_path_factory.mktemp("data"),
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://localhost:0,"
            "SASL_SSL://localhost:0",
            "sasl.enabled.mechanisms": "GSSAPI,PLAIN",
            "sasl.kerberos.service.name": "kafka",
            "sasl.kerberos.principal.to.local.rules": RULES,
            "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": jaas,
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "GSSAPI",
            "listener.name.sasl_ssl.gssapi.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server_pem),
            "ssl.key.password": KEY_PASSWORD,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "authorizer.class.name": AUTHORIZER,
            "super.users": "User:admin;User:alice;User:kafka",
            "connections.max.reauth.ms": "3600000",
            "connection.failed.authentication.delay.ms": str(FAILED_LOGIN_DELAY_MS),
        },
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def sasl(broker: BrokerProcess) -> str:
    return f"localhost:{broker.ports['SASL_PLAINTEXT']}"


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    name = f"gssapi-{uuid.uuid4().hex[:8]}"
    create_topics(sasl(broker), name)
    return name


def gssapi_client(kdc: Kdc, principal: str) -> GssapiClient:
    return GssapiClient(f"{principal}@{REALM}", str(kdc.keytab(principal)), "kafka", "localhost")


def test_raw_login_maps_the_principal_by_the_rules(kdc: Kdc, broker: BrokerProcess) -> None:
    """RFC 4752 end to end: the context, the security layer, the session lifetime (KIP-368);
    then the connection serves requests. The broker logs the short name."""
    with RawClient(sasl(broker)) as client:
        answer = client.login_sasl(gssapi_client(kdc, "etl/worker1"), "etl/worker1")
        assert answer.session_lifetime_ms == 3_600_000
        assert client.request(MetadataRequest(topics=[]), 1).brokers


def test_a_principal_no_rule_maps_is_refused(kdc: Kdc, broker: BrokerProcess) -> None:
    """As Kafka 3.9 (its principal builder fails on the first request after the SASL server
    completed; SocketServer then closes the channel): the exchange ends as a success, the next
    request closes the connection unanswered, without the failed-login delay (its deadline is
    half that delay)."""
    with RawClient(sasl(broker)) as client:
        client.login_sasl(gssapi_client(kdc, "ops/host1"), "ops/host1")
        client.send(MetadataRequest(topics=[]), 1)
        assert client.wait_closed(FAILED_LOGIN_DELAY_MS / 2000)
        assert client.buffered == 0
    logged = f"Failed to set name for 'ops/host1@{REALM}' based on Kerberos authentication rules"
    wait_until(lambda: any(logged in line for line in broker.log), what="the refusal logged")


def test_a_reauthentication_no_rule_maps_closes_unanswered(kdc: Kdc, broker: BrokerProcess) -> None:
    """KIP-368: Kafka builds the re-authenticated principal before answering the last token;
    its failure closes the connection unanswered and without the delay."""
    with RawClient(sasl(broker)) as client:
        client.login_sasl(gssapi_client(kdc, "alice"), "alice")
        with pytest.raises(ConnectionError):
            client.login_sasl(gssapi_client(kdc, "ops/host1"), "ops/host1")
        assert client.wait_closed(FAILED_LOGIN_DELAY_MS / 2000)


def test_a_replayed_token_closes_unanswered(kdc: Kdc, broker: BrokerProcess) -> None:
    """Kafka 3.9 rethrows a retriable Kerberos error (KerberosError.REPLAY, here MIT's replay
    cache finding the authenticator again) as an I/O error: no SASL_AUTHENTICATION_FAILED, no
    delay, the connection closed so that the client connects again (its deadline is half the
    failed-login delay). A fresh login still succeeds."""
    token = gssapi_client(kdc, "alice").initial()
    for attempt in ("first", "replayed"):
        with RawClient(sasl(broker)) as client:
            assert client.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1).error_code == 0
            if attempt == "first":
                answer = client.request(SaslAuthenticateRequest(auth_bytes=token), 2)
                assert answer.error_code == ErrorCode.NONE
                continue
            client.send(SaslAuthenticateRequest(auth_bytes=token), 2)
            assert client.wait_closed(FAILED_LOGIN_DELAY_MS / 2000)
            assert client.buffered == 0
    wait_until(
        lambda: any("retriable Kerberos error" in line for line in broker.log),
        what="the replay logged",
    )
    with RawClient(sasl(broker)) as client:
        client.login_sasl(gssapi_client(kdc, "alice"), "alice")


KAFKA_KERBEROS_LOGIN_DEFAULTS = {
    "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
    "sasl.kerberos.ticket.renew.window.factor": "0.8",
    "sasl.kerberos.ticket.renew.jitter": "0.05",
    "sasl.kerberos.min.time.before.relogin": "60000",
}


def test_kafkas_kerberos_login_configs_are_described(broker: BrokerProcess) -> None:
    """Kafka's login-thread keys, accepted and described as Kafka 3.9 describes them: their
    defaults, read-write (dynamic per broker in Kafka's DynamicListenerConfig)."""
    keys = list(KAFKA_KERBEROS_LOGIN_DEFAULTS)
    result = describe_configs(sasl(broker), 4, "0", keys, plain=login("admin"))
    assert result.error_code == ErrorCode.NONE
    described = {c.name: (c.value, c.read_only, c.config_source) for c in result.configs}
    assert described == {k: (v, False, 5) for k, v in KAFKA_KERBEROS_LOGIN_DEFAULTS.items()}


def test_a_token_that_is_not_kerberos_is_refused(broker: BrokerProcess) -> None:
    with RawClient(sasl(broker)) as client:
        handshake = client.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert handshake.error_code == ErrorCode.NONE
        assert handshake.mechanisms == ["GSSAPI", "PLAIN"]
        answer = client.request(SaslAuthenticateRequest(auth_bytes=b"\x60\x01junk"), 2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert client.wait_closed()


def java_properties(bootstrap: str, principal: str, keytab: Path) -> str:
    return (
        f"bootstrap.servers={bootstrap}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=GSSAPI\n"
        "sasl.kerberos.service.name=kafka\n"
        f"sasl.jaas.config={krb5_jaas(keytab, f'{principal}@{REALM}')}\n"
    )


@pytest.mark.parametrize("client", ["java", "kcat"])
def test_sasl_ssl_round_trip(
    kdc: Kdc,
    broker: BrokerProcess,
    pki: Pki,
    topic: str,
    tmp_path: Path,
    round_trip_class: Path,
    client: str,
) -> None:
    """GSSAPI inside TLS (SASL_SSL, the same exchange as SASL_PLAINTEXT): the Java client,
    verifying the broker's certificate for `localhost`, or kcat, produces and consumes."""
    keytab = kdc.keytab("alice")
    bootstrap = f"localhost:{broker.ports['SASL_SSL']}"
    if client == "java":
        properties = java_properties(bootstrap, "alice", keytab).replace(
            "security.protocol=SASL_PLAINTEXT", "security.protocol=SASL_SSL"
        )
        properties += f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n"
        run_java(kdc, round_trip_class, tmp_path, properties, topic, ["tls-0", "tls-1"])
        return
    args = kcat_gssapi(bootstrap, f"alice@{REALM}", keytab, "SASL_SSL")
    args += ["-X", f"ssl.ca.location={pki.ca}", "-t", topic, "-p", "0"]
    env = {**os.environ, "KRB5CCNAME": f"FILE:{tmp_path / 'ccache'}"}
    assert kcat_round_trip(args, [b"tls-0", b"tls-1"], env) == [b"tls-0", b"tls-1"]


def run_java(
    kdc: Kdc, classes: Path, tmp_path: Path, properties: str, topic: str, values: list[str]
) -> None:
    """RoundTrip (`classes`: the `round_trip_class` fixture's) with `properties`, this realm's
    krb5.conf given to the JVM: `values` produced and consumed back."""
    config = tmp_path / "client.properties"
    config.write_text(properties)
    argv = [
        java_executable(),
        "-Xmx256m",
        f"-Djava.security.krb5.conf={kdc.krb5_conf}",
        "-cp",
        f"{classes}:{jars_dir()}/*",
        "RoundTrip",
        str(config),
        topic,
        *values,
    ]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().splitlines() == values


def test_java_client_round_trip(
    kdc: Kdc, broker: BrokerProcess, topic: str, tmp_path: Path, round_trip_class: Path
) -> None:
    keytab = kdc.keytab("alice")
    values = [f"java-{i}" for i in range(3)]
    properties = java_properties(sasl(broker), "alice", keytab)
    run_java(kdc, round_trip_class, tmp_path, properties, topic, values)


def test_rule_mapped_user_is_allowed_by_an_acl(
    kdc: Kdc, broker: BrokerProcess, topic: str, tmp_path: Path
) -> None:
    """`etl/worker1@REALM` is `User:etl_worker1` for the authorizer: refused before the ACL
    naming that user, allowed after."""
    keytab = kdc.keytab("etl/worker1")
    args = kcat_args(broker, "etl/worker1", keytab) + ["-t", topic, "-p", "0"]
    env = {**os.environ, "KRB5CCNAME": f"FILE:{tmp_path / 'ccache'}"}
    refused = subprocess.run(
        [*args, "-P"], input=b"x\n", capture_output=True, timeout=60, env=env, check=False
    )
    assert refused.returncode != 0
    assert b"authoriz" in refused.stderr.lower(), refused.stderr
    grant(
        sasl(broker),
        acl(TOPIC, topic, "User:etl_worker1", WRITE),
        acl(TOPIC, topic, "User:etl_worker1", READ),
    )
    values = [b"etl-0", b"etl-1"]
    assert kcat_round_trip(args, values, env) == values


def kcat_args(broker: BrokerProcess, principal: str, keytab: Path) -> list[str]:
    return kcat_gssapi(sasl(broker), f"{principal}@{REALM}", keytab)


def kcat_round_trip(args: list[str], values: list[bytes], env: dict[str, str]) -> list[bytes]:
    produced = subprocess.run(
        [*args, "-P"], input=b"\n".join(values) + b"\n", capture_output=True, timeout=60, env=env
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [*args, "-C", "-o", "beginning", "-c", str(len(values)), "-e"],
        capture_output=True,
        timeout=60,
        env=env,
    )
    assert consumed.returncode == 0, consumed.stderr
    return consumed.stdout.splitlines()


def test_kcat_round_trip(kdc: Kdc, broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    args = kcat_args(broker, "alice", kdc.keytab("alice")) + ["-t", topic, "-p", "0"]
    env = {**os.environ, "KRB5CCNAME": f"FILE:{tmp_path / 'ccache'}"}
    values = [b"kcat-0", b"kcat-1", b"kcat-2"]
    assert kcat_round_trip(args, values, env) == values


@pytest.mark.parametrize(
    ("case", "refusal"),
    [
        ("stale keys", "(?i)(pre-authentication|checksum)"),
        ("unknown principal", "(?i)not found in Kerberos database"),
    ],
)
def test_a_client_without_good_keys_cannot_log_in(
    kdc: Kdc,
    broker: BrokerProcess,
    topic: str,
    tmp_path: Path,
    round_trip_class: Path,
    case: str,
    refusal: str,
) -> None:
    """Keys replaced since the keytab was written, or a principal the KDC no longer knows:
    the Java client gets no ticket, so it never reaches the broker's exchange."""
    principal = f"carol{uuid.uuid4().hex[:6]}"
    keytab = kdc.keytab(principal)
    if case == "stale keys":
        kdc.keytab(principal)  # new keys: the first keytab's are stale
    else:
        kdc.delete_principal(principal)
    properties = java_properties(sasl(broker), principal, keytab)
    with pytest.raises(AssertionError, match=refusal):
        run_java(kdc, round_trip_class, tmp_path, properties, topic, ["x"])


def test_the_brokers_own_login_as_between_brokers(
    kdc: Kdc, broker: BrokerProcess, service_keytab: Path
) -> None:
    """`sasl.mechanism.inter.broker.protocol=GSSAPI`: wirebroker's peer connection logs in with
    the listener's principal and keytab to `kafka@<the host it connected to>` (connected to
    127.0.0.1, Java's reverse lookup of it: `localhost`, whose ticket the KDC has, where this
    realm's krb5.conf has MIT do no lookups); with keys that are no longer the principal's,
    it is refused by the KDC and says so."""
    options = {"principal": f"{SERVICE}@{REALM}", "keyTab": str(service_keytab)}
    login = SaslLogin("SASL_PLAINTEXT", "GSSAPI", {**options, "serviceName": "kafka"})
    port = broker.ports["SASL_PLAINTEXT"]

    async def main() -> None:
        security = PeerSecurity(sasl=login)
        for host in ("localhost", "127.0.0.1"):
            async with await PeerConnection.open(
                host, port, client_id="peer-test", security=security
            ) as connection:
                assert (await connection.request(MetadataRequest(topics=[]), 1)).brokers
        stale = kdc.keytab("etl/batch")
        kdc.keytab("etl/batch")  # new keys: the first keytab's are stale
        wrong = SaslLogin(
            "SASL_PLAINTEXT",
            "GSSAPI",
            {"principal": f"etl/batch@{REALM}", "keyTab": str(stale), "serviceName": "kafka"},
        )
        with pytest.raises(PeerAuthenticationFailed, match="GSS-API"):
            await PeerConnection.open(
                "localhost", port, client_id="peer-test", security=PeerSecurity(sasl=wrong)
            )

    trio.run(main)


def test_reauthentication_keeps_the_principal(kdc: Kdc, broker: BrokerProcess) -> None:
    """KIP-368 on a GSSAPI session: a new exchange on the authenticated connection, as the same
    principal, goes on serving; as another principal it fails with Kafka's message."""
    with RawClient(sasl(broker)) as client:
        client.login_sasl(gssapi_client(kdc, "alice"), "alice")
        client.login_sasl(gssapi_client(kdc, "alice"), "alice")
        assert client.request(MetadataRequest(topics=[]), 1).brokers
        # Kafka begins at most one re-authentication of a connection a second: the next waits.
        time.sleep(MIN_REAUTHENTICATION_INTERVAL_S)
        with pytest.raises(ConnectionError, match="Cannot change principals during re-auth"):
            client.login_sasl(gssapi_client(kdc, "etl/worker1"), "etl/worker1")
        assert client.wait_closed()


def test_a_first_token_without_a_handshake_is_gssapi(kdc: Kdc, broker: BrokerProcess) -> None:
    """Kafka 0.9's clients send the first GSSAPI token at once, then bare tokens."""
    gssapi = gssapi_client(kdc, "alice")
    with RawClient(sasl(broker)) as client:
        token: bytes | None = gssapi.initial()
        while token is not None:
            client.send_raw(frame(token))
            token = gssapi.evaluate(client.receive_frame())
        assert client.request(MetadataRequest(topics=[]), 1).brokers


@pytest.mark.parametrize("where", ["layers", "chosen"])
def test_garbage_after_the_context_is_refused(kdc: Kdc, broker: BrokerProcess, where: str) -> None:
    """Once the context is accepted: a non-empty token where the empty one belongs, or a
    chosen layer that is not wrapped, fails the login; the broker serves the next one."""
    gssapi = gssapi_client(kdc, "alice")
    with RawClient(sasl(broker)) as client:
        assert client.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1).error_code == 0
        token = gssapi.initial()
        answer = client.request(SaslAuthenticateRequest(auth_bytes=token), 2)
        token = gssapi.evaluate(answer.auth_bytes)  # the context complete: b""
        if where == "chosen":
            answer = client.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            assert answer.error_code == ErrorCode.NONE
        answer = client.request(SaslAuthenticateRequest(auth_bytes=b"\x01\x00\x00\x00junk"), 2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert client.wait_closed()
    with RawClient(sasl(broker)) as client:
        client.login_sasl(gssapi_client(kdc, "alice"), "alice")
