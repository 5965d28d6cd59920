"""Every client over every security protocol: produce with acks=all, consume it back.

One broker process serves one listener of each kind: SSL (no client authentication), MTLS
(SSL with `ssl.client.auth=required`, so only a client that presents its certificate gets in),
SASL_PLAINTEXT and SASL_SSL (PLAIN from the listener's JAAS config, SCRAM-SHA-512 created with
AlterUserScramCredentials, OAUTHBEARER with Kafka's unsecured tokens), and PLAINTEXT for the
test's own admin requests. The clients are the Java client (a one-file program, RoundTrip.java,
compiled once), confluent-kafka, kcat, kafka-python and aiokafka, each configured as its own
documentation says; kafka-python and aiokafka get their OAUTHBEARER token from a token provider
(an unsecured JWS, as librdkafka and the Java client make themselves).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import create_topic, server_jaas
from tests.wirebroker.pki import KEY_PASSWORD, Pki
from wirebroker.sasl.oauthbearer import unsecured_token
from wirebroker.zookeeper_server import jars_dir, java_executable

pytestmark = pytest.mark.integration

USER = "alice"
PLAIN_SECRET = "alice-plain-5c1d"
SCRAM_SECRET = "alice-scram-e84b"
TIMEOUT = 30.0
JAAS = "org.apache.kafka.common.security.{} required {};"
PLAIN_SERVER_JAAS = JAAS.format("plain.PlainLoginModule", f'user_{USER}="{PLAIN_SECRET}"')


@dataclass(frozen=True)
class Security:
    """One way in: the listener, its protocol, and how the client logs in."""

    listener: str
    protocol: str
    mechanism: str | None = None
    certificate: bool = False  # the client presents its certificate

    @property
    def id(self) -> str:
        return "-".join(filter(None, [self.listener, self.mechanism]))

    @property
    def tls(self) -> bool:
        return self.protocol.endswith("SSL")

    @property
    def password(self) -> str:
        return SCRAM_SECRET if self.mechanism == "SCRAM-SHA-512" else PLAIN_SECRET


SECURITIES = [
    Security("SSL", "SSL"),
    Security("MTLS", "SSL", certificate=True),
    *(
        Security(listener, listener, mechanism)
        for listener in ("SASL_PLAINTEXT", "SASL_SSL")
        for mechanism in ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER")
    ),
]


@pytest.fixture(scope="module")
def broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    properties = {
        "listeners": ",".join(
            f"{name}://127.0.0.1:0"
            for name in ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")
        ),
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_pem),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_SERVER_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_SERVER_JAAS,
        **server_jaas("SASL_PLAINTEXT", "SCRAM-SHA-512", "OAUTHBEARER"),
        **server_jaas("SASL_SSL", "SCRAM-SHA-512", "OAUTHBEARER"),
    }
    with serving(BrokerProcess(tmp_path_factory.mktemp("broker"), properties)) as process:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        upsertion = UserScramCredentialUpsertion(
            USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), SCRAM_SECRET.encode()
        )
        admin.alter_user_scram_credentials([upsertion])[USER].result(TIMEOUT)
        yield process
    secrets = (PLAIN_SECRET, SCRAM_SECRET, KEY_PASSWORD)
    assert not [line for line in process.log if any(s in line for s in secrets)]


@dataclass(frozen=True)
class Way:
    """What a client needs to reach the broker one way."""

    bootstrap: str
    security: Security
    pki: Pki
    workdir: Path


# each client: produce `values` to partition 0 of `topic` (acks=all), read them back -------------
def librdkafka_config(way: Way) -> dict[str, str]:
    """confluent-kafka's and kcat's settings (both are librdkafka)."""
    s = way.security
    config = {"bootstrap.servers": way.bootstrap, "security.protocol": s.protocol}
    if s.tls:
        config["ssl.ca.location"] = str(way.pki.ca)
    if s.certificate:
        config["ssl.certificate.location"] = str(way.pki.client_cert)
        config["ssl.key.location"] = str(way.pki.client_key)
    if s.mechanism == "OAUTHBEARER":
        config["sasl.mechanism"] = s.mechanism
        config["sasl.oauthbearer.config"] = f"principal={USER}"
        config["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
    elif s.mechanism:
        config.update(
            {"sasl.mechanism": s.mechanism, "sasl.username": USER, "sasl.password": s.password}
        )
    return config


def confluent(way: Way, topic: str, values: list[bytes]) -> list[bytes]:
    config = librdkafka_config(way)
    producer = Producer({**config, "acks": "all"})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({**config, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(got) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value())
    finally:
        consumer.close()
    return got


def kcat(way: Way, topic: str, values: list[bytes]) -> list[bytes]:
    settings = [a for k, v in librdkafka_config(way).items() for a in ("-X", f"{k}={v}")]

    def run(*args: str, data: bytes = b"") -> bytes:
        done = subprocess.run(
            ["kcat", *settings, *args], input=data, capture_output=True, timeout=TIMEOUT
        )
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout

    run("-P", "-t", topic, "-p", "0", "-X", "acks=all", data=b"\n".join(values) + b"\n")
    out = run("-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(len(values)), "-e")
    return out.splitlines()


def python_tls_files(way: Way) -> dict[str, str]:
    files = {"cafile": str(way.pki.ca)}
    if way.security.certificate:
        files |= {"certfile": str(way.pki.client_cert), "keyfile": str(way.pki.client_key)}
    return files


def python_sasl(security: Security, tokens: object) -> dict[str, Any]:
    """kafka-python's and aiokafka's SASL settings (the same names in both)."""
    if security.mechanism == "OAUTHBEARER":
        return {"sasl_mechanism": security.mechanism, "sasl_oauth_token_provider": tokens}
    if security.mechanism:
        return {
            "sasl_mechanism": security.mechanism,
            "sasl_plain_username": USER,
            "sasl_plain_password": security.password,
        }
    return {}


def unsecured_jws() -> str:
    return unsecured_token({"unsecuredLoginStringClaim_sub": USER}, int(time.time() * 1000))[0]


def kafka_python(way: Way, topic: str, values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider  # kafka-python 3
    except ImportError:  # kafka-python 2.x
        from kafka.sasl.oauth import AbstractTokenProvider  # type: ignore[no-redef]

    class Tokens(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return unsecured_jws()

    s = way.security
    config: dict[str, Any] = {"bootstrap_servers": way.bootstrap, "security_protocol": s.protocol}
    if s.tls:
        config |= {f"ssl_{k}": v for k, v in python_tls_files(way).items()}
    config |= python_sasl(s, Tokens())
    producer = KafkaProducer(acks="all", **config)
    try:
        for value in values:
            producer.send(topic, value, partition=0).get(TIMEOUT)
    finally:
        producer.close(TIMEOUT)
    consumer = KafkaConsumer(consumer_timeout_ms=int(TIMEOUT * 1000), **config)
    try:
        partition = KTopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        got = []
        for message in consumer:
            got.append(message.value)
            if len(got) == len(values):
                break
        return got
    finally:
        consumer.close()


def aiokafka(way: Way, topic: str, values: list[bytes]) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.helpers import create_ssl_context

    class Tokens(AbstractTokenProvider):
        async def token(self) -> str:
            return unsecured_jws()

    s = way.security
    config: dict[str, Any] = {"bootstrap_servers": way.bootstrap, "security_protocol": s.protocol}
    if s.tls:
        config["ssl_context"] = create_ssl_context(**python_tls_files(way))
    config |= python_sasl(s, Tokens())

    async def round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(acks="all", **config)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**config)
        await consumer.start()
        try:
            partition = ATopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            got: list[bytes] = []
            while len(got) < len(values):
                message = await asyncio.wait_for(consumer.getone(), TIMEOUT)
                assert message.value is not None
                got.append(message.value)
            return got
        finally:
            await consumer.stop()

    return asyncio.run(round_trip())


def java_properties(way: Way) -> str:
    s = way.security
    lines = [f"bootstrap.servers={way.bootstrap}", f"security.protocol={s.protocol}"]
    if s.tls:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={way.pki.ca}"]
    if s.certificate:
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={way.pki.client_pem_keystore}"]
    login = {
        "PLAIN": ("plain.PlainLoginModule", f'username="{USER}" password="{s.password}"'),
        "SCRAM-SHA-512": ("scram.ScramLoginModule", f'username="{USER}" password="{s.password}"'),
        "OAUTHBEARER": (
            "oauthbearer.OAuthBearerLoginModule",
            f'unsecuredLoginStringClaim_sub="{USER}"',
        ),
    }
    if s.mechanism:
        module, options = login[s.mechanism]
        lines += [
            f"sasl.mechanism={s.mechanism}",
            f"sasl.jaas.config={JAAS.format(module, options)}",
        ]
    return "\n".join(lines) + "\n"


def java(way: Way, topic: str, values: list[bytes]) -> list[bytes]:
    config = way.workdir / "client.properties"
    config.write_text(java_properties(way))
    classes = way.workdir / "classes"
    argv = [java_executable(), "-Xmx256m", "-cp", f"{classes}:{jars_dir()}/*", "RoundTrip"]
    argv += [str(config), topic, *(v.decode() for v in values)]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.splitlines()


CLIENTS: dict[str, Callable[[Way, str, list[bytes]], list[bytes]]] = {
    "java": java,
    "confluent": confluent,
    "kcat": kcat,
    "kafka-python": kafka_python,
    "aiokafka": aiokafka,
}


@pytest.mark.parametrize("security", SECURITIES, ids=lambda s: s.id)
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip(
    client: str,
    security: Security,
    broker: BrokerProcess,
    pki: Pki,
    topic: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if client == "java":
        (tmp_path / "classes").symlink_to(request.getfixturevalue("round_trip_class"))
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed: run `make tools`")
    create_topic(broker.bootstrap, topic)
    way = Way(f"127.0.0.1:{broker.ports[security.listener]}", security, pki, tmp_path)
    values = [f"{client}-{security.id}-{i}".encode() for i in range(5)]
    assert CLIENTS[client](way, topic, values) == values
