"""A mechanism whose JAAS entry names another mechanism's login module, on real Kafka 3.9 and on
wirebroker: both start, and answer the same logins alike; where Kafka's login fails, both refuse
to start with Kafka's words.

Kafka's SaslChannelBuilder logs in with whatever login modules a mechanism's JAAS context names,
and each server callback handler reads what it reads: SCRAM's its stored credentials (whatever
the module), PLAIN's the `user_<name>` options of PlainLoginModules only (none here: every
login fails), OAUTHBEARER's unsecured validator the options of the context's only module. Both
brokers get one JAAS file and two SASL_PLAINTEXT listeners with PLAIN, SCRAM-SHA-256 and
OAUTHBEARER: SASL_PLAINTEXT, each mechanism with its own `sasl.jaas.config` of another
mechanism's module, and OTHER, whose `other.KafkaServer` section holds one ScramLoginModule. On
each, PLAIN, SCRAM (a user made with AlterUserScramCredentials) and an unsecured OAUTHBEARER
token log in with raw SaslHandshake / SaslAuthenticate.

Where Kafka's login for a PLAIN listener fails, both stop at start with its words, and where it
succeeds both start (`LOGINS`): a login module Kafka's JVM does not have, OAuthBearerLoginModule
for PLAIN (its login wants a token no callback handler gives), ZooKeeper's DigestLoginModule (on
Kafka's classpath), and sections of several modules, as the JDK's LoginContext runs them by
their control flags.
"""

from __future__ import annotations

import hashlib
import re
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.kafka_process import KafkaProcessError, free_port, kafka_broker, zookeeper
from compat.start_refusals import kafka_refuses, wirebroker_refuses
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import RawClient, wait_until
from wirebroker.sasl.mechanism import SaslClient
from wirebroker.sasl.oauthbearer import OAuthBearerClient, unsecured_token
from wirebroker.sasl.plain import PlainClient
from wirebroker.sasl.scram import ScramClient
from wirebroker.zookeeper_server import jars_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`"),
]

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
DIGEST = "org.apache.zookeeper.server.auth.DigestLoginModule"
NO_SUCH = "com.example.NoSuchLoginModule"
USERS = 'user_alice="alice-pw"'
JAAS = f'other.KafkaServer {{ {SCRAM} required user_bob="bob-pw"; }};\n'
SASL_LISTENERS = ("SASL_PLAINTEXT", "OTHER")
CAROL = "carol-pw"


def properties(ports: dict[str, int]) -> dict[str, str]:
    """Both brokers' settings; with a THIRD listener, OAUTHBEARER's only, whose
    OAuthBearerLoginModule registers Kafka's OAUTHBEARER server (for every listener)."""
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    prefix = "listener.name.sasl_plaintext."
    third = {
        "listener.name.third.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.third.oauthbearer.sasl.jaas.config": f"{OAUTH} required;",
    }
    return {
        **(third if "THIRD" in ports else {}),
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,OTHER:SASL_PLAINTEXT,"
            "THIRD:SASL_PLAINTEXT"
        ),
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,OAUTHBEARER",
        f"{prefix}plain.sasl.jaas.config": f'{SCRAM} required user_alice="alice-pw";',
        f"{prefix}scram-sha-256.sasl.jaas.config": f"{PLAIN} required;",
        f"{prefix}oauthbearer.sasl.jaas.config": f'{PLAIN} required user_alice="alice-pw";',
        "connection.failed.authentication.delay.ms": "0",
    }


@pytest.fixture(scope="module")
def jvm_options(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    path = tmp_path_factory.mktemp("jaas") / "kafka_server_jaas.conf"
    path.write_text(JAAS)
    return [f"-Djava.security.auth.login.config={path}"]


@pytest.fixture(
    scope="module", params=[(), ("THIRD",)], ids=["no-oauthbearer-module", "third-listener"]
)
def listener_names(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The listeners: PLAINTEXT, the SASL ones logged in to, and maybe THIRD (`properties`)."""
    return ("PLAINTEXT", *SASL_LISTENERS, *request.param)


@pytest.fixture(scope="module")
def zk_connect() -> Iterator[str]:
    with zookeeper() as zk:
        yield zk.connect


@pytest.fixture
def own_chroot(zk_connect: str) -> str:
    """A ZooKeeper chroot of this test's own (Kafka makes it): its broker 0 is not the one of
    the module's `kafka` fixture, still registered."""
    return f"{zk_connect}/wb-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def kafka(
    zk_connect: str, jvm_options: list[str], listener_names: tuple[str, ...]
) -> Iterator[dict[str, int]]:
    ports = {name: free_port() for name in listener_names}
    with kafka_broker(
        zk_connect, port=ports["PLAINTEXT"], overrides=properties(ports), jvm_options=jvm_options
    ):
        yield ports


@pytest.fixture(scope="module")
def wirebroker(
    jvm_options: list[str],
    listener_names: tuple[str, ...],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, int]]:
    props = properties(dict.fromkeys(listener_names, 0))
    del props["advertised.listeners"]  # the bound ports, as the listeners say
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KAFKA_OPTS", " ".join(jvm_options))
        process = BrokerProcess(tmp_path_factory.mktemp("jaas-modules"), props)
        with serving(process):
            yield process.ports


Steps = list[tuple[int, str | None] | str]
CLOSED = "closed"  # the connection closed without an answer


def login(port: int, client: SaslClient, mechanism: str) -> Steps:
    """Each SaslAuthenticate's error code and message, up to the first error or the close."""
    steps: Steps = []
    with RawClient(f"127.0.0.1:{port}") as raw:
        shake = raw.request(SaslHandshakeRequest(mechanism=mechanism), 1)
        assert shake.error_code == 0, shake
        token: bytes | None = client.initial()
        while token is not None:
            try:
                answer = raw.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            except ConnectionError:
                steps.append(CLOSED)
                break
            steps.append((answer.error_code, answer.error_message))
            if answer.error_code:
                break
            token = client.evaluate(answer.auth_bytes)
    return steps


def admitted(steps: Steps) -> bool:
    return bool(steps) and steps[-1] != CLOSED and steps[-1][0] == 0


def with_carol(ports: dict[str, int]) -> dict[str, int]:
    """`ports` once carol's SCRAM-SHA-256 credential is made and logs her in (Kafka's cache
    takes it from ZooKeeper after the AlterUserScramCredentials answer)."""
    salt = b"0123456789abcdef"
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name="carol",
        mechanism=1,
        iterations=4096,
        salt=salt,
        salted_password=hashlib.pbkdf2_hmac("sha256", CAROL.encode(), salt, 4096),
    )
    with RawClient(f"127.0.0.1:{ports['PLAINTEXT']}") as raw:
        done = raw.request(AlterUserScramCredentialsRequest(upsertions=[upsertion]), 0)
    assert done.results[0].error_code == 0, done
    # Kafka's cache takes it from ZooKeeper: nothing to await but a login that works.
    wait_until(
        lambda: admitted(
            login(
                ports["SASL_PLAINTEXT"],
                ScramClient("SCRAM-SHA-256", "carol", CAROL),
                "SCRAM-SHA-256",
            )
        ),
        timeout=30,
        interval=0.1,
        what="carol's credential to reach the broker",
    )
    return ports


def logins(ports: dict[str, int]) -> dict[str, dict[str, Steps]]:
    """Each login on each SASL listener: PLAIN's users of the modules (none is PLAIN's), SCRAM
    as carol (her password, a wrong one), OAUTHBEARER with an unsecured token."""
    token, extensions = unsecured_token(
        {"unsecuredLoginStringClaim_sub": "carol"}, int(time.time() * 1000)
    )
    out: dict[str, dict[str, Steps]] = {}
    for listener in SASL_LISTENERS:
        port = ports[listener]
        out[listener] = {
            "PLAIN alice": login(port, PlainClient("alice", "alice-pw"), "PLAIN"),
            "PLAIN bob": login(port, PlainClient("bob", "bob-pw"), "PLAIN"),
            "SCRAM carol": login(
                port, ScramClient("SCRAM-SHA-256", "carol", CAROL), "SCRAM-SHA-256"
            ),
            "SCRAM carol, wrong": login(
                port, ScramClient("SCRAM-SHA-256", "carol", "not-carols"), "SCRAM-SHA-256"
            ),
            "OAUTHBEARER carol": login(port, OAuthBearerClient(token, extensions), "OAUTHBEARER"),
        }
    return out


def test_another_mechanism_s_login_module(
    kafka: dict[str, int], wirebroker: dict[str, int]
) -> None:
    expected = logins(with_carol(kafka))
    # What Kafka does, stated: SCRAM and OAUTHBEARER log in, PLAIN finds no users.
    # What Kafka does, stated: SCRAM logs in, PLAIN finds no users, and OAUTHBEARER's
    # validator takes the options of a module of another mechanism, if Kafka has an
    # OAUTHBEARER server: without THIRD's OAuthBearerLoginModule, which registers it, the
    # handshake is answered, then the connection closed.
    third = "THIRD" in kafka
    assert {
        listener: sorted(name for name, steps in rows.items() if admitted(steps))
        for listener, rows in expected.items()
    } == dict.fromkeys(SASL_LISTENERS, ["OAUTHBEARER carol", "SCRAM carol"][not third :])
    assert third or all(rows["OAUTHBEARER carol"] == [CLOSED] for rows in expected.values())
    assert logins(with_carol(wirebroker)) == expected


#: A PLAIN listener's login modules (`key`: its `sasl.jaas.config`; `section`: the JAAS file's
#: `KafkaServer` section), and the start of the message of the LoginException Kafka's login with
#: them fails with, as the JDK's LoginContext runs them by their control flags (None: it starts).
LOGINS = {
    "no-such-module": ("key", f"{NO_SUCH} required;", "No LoginModule found for"),
    "oauthbearer-module": ("key", f"{OAUTH} required;", "An internal error occurred"),
    "zookeeper-digest-module": ("key", f"{DIGEST} required;", None),
    "digest-username-without-password": (
        "section",
        f'{DIGEST} required username="zk";',
        "java.lang.NullPointerException",
    ),
    "required-no-such-module": (
        "section",
        f"{PLAIN} required {USERS}; {NO_SUCH} required;",
        "No LoginModule found for",
    ),
    "required-oauthbearer-module": (
        "section",
        f"{PLAIN} required {USERS}; {OAUTH} required;",
        "An internal error occurred",
    ),
    "after-a-sufficient-success": (
        "section",
        f"{PLAIN} sufficient {USERS}; {NO_SUCH} required;",
        None,
    ),
    "sufficient-after-a-required-failure": (
        "section",
        f"{NO_SUCH} required; {PLAIN} sufficient {USERS};",
        "No LoginModule found for",
    ),
    "optional-failures-and-a-success": (
        "section",
        f'{OAUTH} optional; {NO_SUCH} optional; {DIGEST} required username="zk" password="zk-pw";',
        None,
    ),
    "optional-failures-only": (
        "section",
        f"{OAUTH} optional; {NO_SUCH} optional;",
        "An internal error occurred",
    ),
    "requisite-after-a-required-failure": (
        "section",
        f"{OAUTH} required; {NO_SUCH} requisite; {PLAIN} required {USERS};",
        "An internal error occurred",
    ),
}


@pytest.mark.parametrize("case", LOGINS.values(), ids=LOGINS.keys())
def test_starts_where_kafka_s_login_succeeds(
    own_chroot: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[str, str, str | None],
) -> None:
    where, modules, expected = case
    key = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    jaas_file = tmp_path / "kafka_server_jaas.conf"
    jaas_file.write_text(f"KafkaServer {{ {modules} }};\n")
    props = {"sasl.enabled.mechanisms": "PLAIN", "inter.broker.listener.name": "PLAINTEXT"}
    if where == "key":
        props[key] = modules
        source = key
        jvm_options: list[str] = []
    else:
        source = f"section KafkaServer of {jaas_file}"
        jvm_options = [f"-Djava.security.auth.login.config={jaas_file}"]

    plaintext, sasl = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plaintext},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    workdir = tmp_path / "kafka"
    kafka_message = None
    try:
        with kafka_broker(
            own_chroot,
            port=plaintext,
            overrides={**props, "listeners": listeners, "advertised.listeners": listeners},
            jvm_options=jvm_options,
            workdir=workdir,
        ):
            pass
    except KafkaProcessError:
        kafka_log = (workdir / "kafka.log").read_text(errors="replace")
        found = re.search(r"LoginException: ([^\r\n]*)", kafka_log)
        assert found is not None, kafka_log[-3000:]
        kafka_message = found[1].strip()
    # What Kafka does, stated.
    assert (kafka_message or "").startswith(expected or ""), kafka_message
    assert (kafka_message is None) == (expected is None), kafka_message

    monkeypatch.setenv("KAFKA_OPTS", " ".join(jvm_options))
    if kafka_message is None:
        props["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
        with serving(BrokerProcess(tmp_path / "wirebroker", props)):
            return
    stderr = wirebroker_refuses(
        {**props, "listeners": listeners}, tmp_path / "wirebroker", jvm_options
    )
    assert f"{source}: {kafka_message}" in stderr, (kafka_message, stderr)


class FirstGssapiToken:
    """A GSSAPI client's first token, as bytes only: both servers close the connection before
    reading it (neither has a Kerberos principal to accept it with)."""

    mechanism = "GSSAPI"
    complete = False

    def initial(self) -> bytes:
        return b"\x60\x00"

    def evaluate(self, challenge: bytes) -> bytes | None:
        raise AssertionError(f"a GSSAPI challenge of {len(challenge)} bytes")


def first_token_without_handshake(port: int) -> Steps:
    """A Kafka 0.9 client's first GSSAPI token, sent with no SaslHandshake: [CLOSED] when the
    connection is closed unanswered."""
    with RawClient(f"127.0.0.1:{port}") as raw:
        token = b"\x60\x82" + bytes(6)  # not a Kafka request: taken as GSSAPI's
        raw.send_raw(struct.pack(">i", len(token)) + token)
        try:
            return [f"answered: {raw.receive_frame()!r}"]
        except ConnectionError:
            return [CLOSED]


#: GSSAPI's JAAS entry without Krb5LoginModule (`key`: its `sasl.jaas.config`; `section`: the
#: JAAS file's), and whether `sasl.kerberos.service.name` is set.
GSSAPI_ENTRIES = {
    "key": ("key", f"{PLAIN} required;", True),
    "section": ("section", f"{PLAIN} required;", True),
    "service-name-for-gssapi-only": ("key", f'{PLAIN} required serviceName="kafka";', False),
}


@pytest.mark.parametrize("case", GSSAPI_ENTRIES.values(), ids=GSSAPI_ENTRIES.keys())
def test_gssapi_without_krb5_login_module_fails_every_gssapi_login(
    own_chroot: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[str, str, bool],
) -> None:
    """GSSAPI's JAAS entry names PlainLoginModule: Kafka's KerberosLogin logs in with it and
    starts, and its GSSAPI server, taking its Kerberos principal from the Subject, finds none:
    each GSSAPI handshake is answered, then the connection closed. PLAIN logs in. With GSSAPI
    enabled, KerberosLogin logs in every mechanism of the listener, each needing a service
    name: PLAIN's entry has none, without `sasl.kerberos.service.name` neither starts."""
    where, modules, service_name = case
    jaas_file = tmp_path / "kafka_server_jaas.conf"
    jaas_file.write_text(f"KafkaServer {{ {modules} }};\n")
    props = {
        "sasl.enabled.mechanisms": "GSSAPI,PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": f"{PLAIN} required {USERS};",
        "inter.broker.listener.name": "PLAINTEXT",
    }
    if service_name:
        props["sasl.kerberos.service.name"] = "kafka"
    jvm_options: list[str] = []
    if where == "key":
        props["listener.name.sasl_plaintext.gssapi.sasl.jaas.config"] = modules
    else:
        jvm_options = [f"-Djava.security.auth.login.config={jaas_file}"]

    def answers(port: int) -> dict[str, Steps]:
        return {
            "GSSAPI": login(port, FirstGssapiToken(), "GSSAPI"),
            "GSSAPI, no handshake": first_token_without_handshake(port),
            "PLAIN alice": login(port, PlainClient("alice", "alice-pw"), "PLAIN"),
        }

    plaintext, sasl = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plaintext},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    workdir = tmp_path / "kafka"
    monkeypatch.setenv("KAFKA_OPTS", " ".join(jvm_options))
    if not service_name:
        all_props = {**props, "listeners": listeners, "advertised.listeners": listeners}
        kafka_message = kafka_refuses(
            own_chroot,
            plaintext,
            all_props,
            workdir,
            r"IllegalArgumentException: ([^\r\n]*)",
            jvm_options,
        )
        # What Kafka does, stated.
        assert kafka_message == "No serviceName defined in either JAAS or Kafka config"
        assert kafka_message in wirebroker_refuses(all_props, tmp_path / "wirebroker", jvm_options)
        return
    with kafka_broker(
        own_chroot,
        port=plaintext,
        overrides={**props, "listeners": listeners, "advertised.listeners": listeners},
        jvm_options=jvm_options,
        workdir=workdir,
    ):
        expected = answers(sasl)
    # What Kafka does, stated.
    assert expected["GSSAPI"] == expected["GSSAPI, no handshake"] == [CLOSED], expected
    assert admitted(expected["PLAIN alice"]), expected

    props["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
    with serving(BrokerProcess(tmp_path / "wirebroker", props)) as broker:
        assert answers(broker.ports["SASL_PLAINTEXT"]) == expected
