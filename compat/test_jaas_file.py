"""A static JAAS file's `KafkaServer` sections on real Kafka 3.9 and on wirebroker: the same
file, the same listeners, the same logins, the same answers; and the same refusal to start
without any JAAS entry for an enabled mechanism.

Kafka's brokers are often given their SASL users by a JAAS file (`KAFKA_OPTS=
-Djava.security.auth.login.config=...`) rather than `listener.name.<l>.<mechanism>.sasl.jaas.config`.
Both brokers get one file and four listeners: SASL_PLAINTEXT (its own `sasl_plaintext.KafkaServer`
section), OTHER (no section of its own: `KafkaServer`), THIRD (its own PLAIN `sasl.jaas.config`,
which wins over the file) and PLAINTEXT between brokers. `KafkaServer` holds two PlainLoginModules
(a user is looked up in the first that names it) and a password given as `${...}` of a system
property. SCRAM-SHA-512 is enabled beside PLAIN: its JAAS entry is the listener's section,
whatever its login modules (here PlainLoginModules only), as Kafka's JaasContext takes it. Each
user logs in with raw SaslHandshake / SaslAuthenticate on each listener.

A broker with SCRAM enabled and neither `listener.name.<l>.scram-sha-512.sasl.jaas.config` nor
a `KafkaServer` section (no JAAS file, or a file with only a `KafkaClient` section) does not
start: Kafka logs JaasContext's IllegalArgumentException and exits, wirebroker exits with the
same words and what to set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.kafka_process import free_port, kafka_broker, zookeeper
from compat.start_refusals import kafka_refuses, wirebroker_refuses
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import RawClient
from wirebroker.zookeeper_server import jars_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`"),
]

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS = f"""
sasl_plaintext.KafkaServer {{
  {PLAIN} required
  user_alice="alice-pw";
}};

KafkaServer {{
  {PLAIN} required
  user_bob="bob-pw"
  user_erin="${{wb.erin.password}}";
  {PLAIN} optional
  user_bob="bob-second" user_dave="dave-pw";
}};
"""
SASL_LISTENERS = ("SASL_PLAINTEXT", "OTHER", "THIRD")
LOGINS = [
    ("alice", "alice-pw"),
    ("bob", "bob-pw"),
    ("bob", "bob-second"),
    ("dave", "dave-pw"),
    ("erin", "erin-pw"),
    ("carol", "carol-pw"),
]


def properties(ports: dict[str, int]) -> dict[str, str]:
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    return {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,OTHER:SASL_PLAINTEXT,"
            "THIRD:SASL_PLAINTEXT"
        ),
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.third.plain.sasl.jaas.config": f'{PLAIN} required user_carol="carol-pw";',
        "connection.failed.authentication.delay.ms": "0",
    }


@pytest.fixture(scope="module")
def jvm_options(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    path = tmp_path_factory.mktemp("jaas") / "kafka_server_jaas.conf"
    path.write_text(JAAS)
    return [f"-Djava.security.auth.login.config={path}", "-Dwb.erin.password=erin-pw"]


@pytest.fixture(scope="module")
def zk_connect() -> Iterator[str]:
    with zookeeper() as zk:
        yield zk.connect


@pytest.fixture(scope="module")
def kafka(zk_connect: str, jvm_options: list[str]) -> Iterator[dict[str, int]]:
    ports = {name: free_port() for name in ("PLAINTEXT", *SASL_LISTENERS)}
    with kafka_broker(
        zk_connect, port=ports["PLAINTEXT"], overrides=properties(ports), jvm_options=jvm_options
    ):
        yield ports


@pytest.fixture(scope="module")
def wirebroker(
    jvm_options: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, int]]:
    props = properties({name: 0 for name in ("PLAINTEXT", *SASL_LISTENERS)})
    del props["advertised.listeners"]  # the bound ports, as the listeners say
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KAFKA_OPTS", " ".join(jvm_options))
        process = BrokerProcess(tmp_path_factory.mktemp("jaas-file"), props)
        with serving(process):
            yield process.ports


def logins(ports: dict[str, int]) -> dict[str, list[tuple[str, int, str | None]]]:
    """Each login on each SASL listener: the user, SaslAuthenticate's error code and message."""
    out: dict[str, list[tuple[str, int, str | None]]] = {}
    for listener in SASL_LISTENERS:
        out[listener] = []
        for user, password in LOGINS:
            with RawClient(f"127.0.0.1:{ports[listener]}") as raw:
                shake = raw.request(SaslHandshakeRequest(mechanism="PLAIN"), 1)
                assert shake.error_code == 0, (listener, shake)
                token = f"\0{user}\0{password}".encode()
                answer = raw.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            out[listener].append((f"{user}:{password}", answer.error_code, answer.error_message))
    return out


def test_kafka_server_sections(kafka: dict[str, int], wirebroker: dict[str, int]) -> None:
    expected = logins(kafka)
    # What Kafka does, stated: each listener's users are its own section's, or KafkaServer's,
    # or its own sasl.jaas.config's; a user is found in the first module naming it.
    admitted = {
        listener: [login for login, code, _message in rows if code == 0]
        for listener, rows in expected.items()
    }
    assert admitted == {
        "SASL_PLAINTEXT": ["alice:alice-pw"],
        "OTHER": ["bob:bob-pw", "dave:dave-pw", "erin:erin-pw"],
        "THIRD": ["carol:carol-pw"],
    }
    assert logins(wirebroker) == expected


@pytest.mark.parametrize("jaas_file", [False, True], ids=["no-file", "no-section"])
def test_scram_without_a_jaas_entry_does_not_start(
    zk_connect: str, tmp_path: Path, jaas_file: bool
) -> None:
    jvm_options = []
    if jaas_file:
        path = tmp_path / "client_jaas.conf"
        path.write_text(f'KafkaClient {{ {PLAIN} required username="a" password="a-pw"; }};\n')
        jvm_options = [f"-Djava.security.auth.login.config={path}"]
    plaintext, sasl = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plaintext},SASL_PLAINTEXT://127.0.0.1:{sasl}"
    props = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }
    kafka_message = kafka_refuses(
        zk_connect,
        plaintext,
        props,
        tmp_path / "kafka",
        r"IllegalArgumentException: (Could not find a 'KafkaServer'.*)",
        jvm_options,
    )
    stderr = wirebroker_refuses(props, tmp_path / "wirebroker", jvm_options)
    assert (
        f"{kafka_message}: listener SASL_PLAINTEXT enables SCRAM-SHA-512: set "
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
    ) in stderr, (kafka_message, stderr)
