"""SASL_PLAINTEXT against a broker process: PLAIN and SCRAM with real clients, and the raw flow.

The broker has a PLAINTEXT and a SASL_PLAINTEXT listener; PLAIN's users come from the listener's
JAAS config, SCRAM users are created with AlterUserScramCredentials. Raw connections check
Kafka's SaslServerAuthenticator behaviour: what is answered before authentication, how a
failure is answered, and that only the misbehaving connection is closed.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.broker_process import BrokerProcess, broker_process
from tests.wirebroker.helpers import RawClient, create_topic

pytestmark = pytest.mark.integration

TIMEOUT = 15.0
ADMIN_SECRET = "admin-secret-d41d8"
ALICE_SECRET = "alice-secret-9f3c2"
BROKER_PROPERTIES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{ADMIN_SECRET}" '
        f'user_admin="{ADMIN_SECRET}" user_alice="{ALICE_SECRET}";'
    ),
    # The broker's own client login: Kafka's server side does not read it, nor ours.
    "sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{ADMIN_SECRET}";'
    ),
}


def sasl_bootstrap(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}"


def plain_bootstrap(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['PLAINTEXT']}"


def sasl_config(
    broker: BrokerProcess, mechanism: str, username: str, password: str
) -> dict[str, Any]:
    return {
        "bootstrap.servers": sasl_bootstrap(broker),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": username,
        "sasl.password": password,
    }


def round_trip(config: dict[str, Any], topic: str) -> None:
    """Produce three records and consume them back over the given client config."""
    producer = Producer(config)
    for i in range(3):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer(
        {**config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value())
            if len(seen) == 3:
                break
        assert seen == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()


@pytest.fixture(autouse=True)
def _no_secret_in_the_log(broker: BrokerProcess) -> Iterator[None]:
    yield
    for line in broker.log:
        for secret in (ADMIN_SECRET, ALICE_SECRET, "wrong-secret"):
            assert secret not in line, line


def test_confluent_plain_produce_and_consume(broker: BrokerProcess, topic: str) -> None:
    create_topic(plain_bootstrap(broker), topic)
    round_trip(sasl_config(broker, "PLAIN", "alice", ALICE_SECRET), topic)


def test_confluent_scram_sha_512_with_credentials_from_the_admin_api(
    broker: BrokerProcess, topic: str
) -> None:
    user = f"scram-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(sasl_config(broker, "PLAIN", "admin", ADMIN_SECRET))
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"bob-password"
    )
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(TIMEOUT)
    described = admin.describe_user_scram_credentials([user])[user].result(TIMEOUT)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    create_topic(plain_bootstrap(broker), topic)
    round_trip(sasl_config(broker, "SCRAM-SHA-512", user, "bob-password"), topic)
    # SCRAM-SHA-256 has no credential for this user: refused.
    assert_authentication_fails(sasl_config(broker, "SCRAM-SHA-256", user, "bob-password"))


def test_describe_of_an_unknown_user_is_resource_not_found(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": plain_bootstrap(broker)})
    future = admin.describe_user_scram_credentials(["nobody-here"])["nobody-here"]
    with pytest.raises(Exception) as raised:
        future.result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_kafka_python_plain(broker: BrokerProcess, topic: str) -> None:
    create_topic(plain_bootstrap(broker), topic)
    common: dict[str, Any] = {
        "bootstrap_servers": sasl_bootstrap(broker),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": ALICE_SECRET,
    }
    producer = KafkaProducer(**common)
    try:
        producer.send(topic, b"hello", partition=0).get(TIMEOUT)
    finally:
        producer.close(TIMEOUT)
    consumer = KafkaConsumer(**common, consumer_timeout_ms=int(TIMEOUT * 1000))
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert next(iter(consumer)).value == b"hello"
    finally:
        consumer.close()


def assert_authentication_fails(config: dict[str, Any]) -> None:
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    for _ in range(100):
        producer.poll(0.1)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return
    raise AssertionError(f"no authentication error, got {errors}")


def test_wrong_password_fails_and_the_broker_serves_the_others(
    broker: BrokerProcess, topic: str
) -> None:
    since = len(broker.log)
    assert_authentication_fails(sasl_config(broker, "PLAIN", "alice", "wrong-secret"))
    assert broker.wait_for_log("SASL/PLAIN authentication of User:alice failed", since=since)
    create_topic(plain_bootstrap(broker), topic)
    round_trip(sasl_config(broker, "PLAIN", "alice", ALICE_SECRET), topic)


def handshake(client: RawClient, mechanism: str, version: int = 1) -> Any:
    return client.request(SaslHandshakeRequest(mechanism=mechanism), version)


def test_raw_failure_is_answered_then_closed(broker: BrokerProcess) -> None:
    with RawClient(sasl_bootstrap(broker)) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.NONE
        answer = client.request(SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong-secret"), 2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert client.wait_closed()


def test_raw_v1_flow_then_requests_are_served(broker: BrokerProcess) -> None:
    with RawClient(sasl_bootstrap(broker)) as client:
        versions = client.request(ApiVersionsRequest(), 0)
        keys = {k.api_key for k in versions.api_keys}
        assert {SaslHandshakeRequest.API_KEY, SaslAuthenticateRequest.API_KEY} <= keys
        shake = handshake(client, "PLAIN")
        assert shake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        answer = client.request(
            SaslAuthenticateRequest(auth_bytes=f"\0alice\0{ALICE_SECRET}".encode()), 1
        )
        assert (answer.error_code, answer.auth_bytes, answer.session_lifetime_ms) == (0, b"", 0)
        assert client.request(MetadataRequest(topics=[]), 1).brokers
        # Authenticated: a second handshake is an illegal state (no re-authentication).
        assert handshake(client, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_raw_v0_handshake_then_bare_tokens(broker: BrokerProcess) -> None:
    with RawClient(sasl_bootstrap(broker)) as client:
        assert handshake(client, "PLAIN", version=0).error_code == ErrorCode.NONE
        client.send_raw(frame(f"\0alice\0{ALICE_SECRET}".encode()))
        assert client.receive_frame() == b""  # PLAIN's empty answer, size-prefixed
        assert client.request(MetadataRequest(topics=[]), 1).brokers


def test_unsupported_mechanism_is_answered_then_closed(broker: BrokerProcess) -> None:
    with RawClient(sasl_bootstrap(broker)) as client:
        answer = handshake(client, "GSSAPI")
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert client.wait_closed()


def test_request_before_authentication_closes_only_that_connection(
    broker: BrokerProcess,
) -> None:
    with (
        RawClient(sasl_bootstrap(broker)) as bystander,
        RawClient(sasl_bootstrap(broker)) as client,
    ):
        assert handshake(bystander, "PLAIN").error_code == ErrorCode.NONE
        client.send(MetadataRequest(topics=[]), 1)
        assert client.wait_closed()
        assert client.buffered == 0  # closed without an answer
        answer = bystander.request(
            SaslAuthenticateRequest(auth_bytes=f"\0alice\0{ALICE_SECRET}".encode()), 2
        )
        assert answer.error_code == ErrorCode.NONE
    assert broker.wait_for_log("unexpected request Metadata v1 during SASL handshake")


def test_request_during_authentication_gets_illegal_sasl_state(broker: BrokerProcess) -> None:
    with RawClient(sasl_bootstrap(broker)) as client:
        assert handshake(client, "SCRAM-SHA-512").error_code == ErrorCode.NONE
        answer = client.request(ApiVersionsRequest(), 0)
        assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert client.wait_closed()


def test_oversized_token_is_refused_before_it_is_read(broker: BrokerProcess) -> None:
    with RawClient(sasl_bootstrap(broker)) as client:
        assert handshake(client, "PLAIN", version=0).error_code == ErrorCode.NONE
        client.send_raw(struct.pack(">i", 524_289))  # the size alone: the body never comes
        assert client.wait_closed()
    assert broker.wait_for_log("frame of 524289 bytes exceeds the maximum of 524288")


def test_plaintext_listener_needs_no_authentication(broker: BrokerProcess) -> None:
    with RawClient(plain_bootstrap(broker)) as client:
        assert client.request(MetadataRequest(topics=[]), 1).brokers
        assert handshake(client, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE


JARS = Path(__file__).resolve().parents[2] / ".cache" / "jars" / "kafka"
JAVA = shutil.which("java")


@pytest.mark.skipif(
    JAVA is None or not list(JARS.glob("kafka_2.13-*.jar")),
    reason="java or the Kafka jars (`make jars`) are missing",
)
def test_kafka_configs_tool_creates_a_scram_user(broker: BrokerProcess, topic: str) -> None:
    assert JAVA is not None
    user = f"tool-{uuid.uuid4().hex[:6]}"
    command = [JAVA, "-cp", f"{JARS}/*", "kafka.admin.ConfigCommand"]
    command += ["--bootstrap-server", plain_bootstrap(broker), "--alter", "--entity-type"]
    command += ["users", "--entity-name", user, "--add-config", "SCRAM-SHA-256=[password=t00l]"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    create_topic(plain_bootstrap(broker), topic)
    round_trip(sasl_config(broker, "SCRAM-SHA-256", user, "t00l"), topic)


def test_alter_errors_per_user(broker: BrokerProcess) -> None:
    R = AlterUserScramCredentialsRequest
    good = {"salt": b"s" * 16, "salted_password": b"p" * 64}
    request = R(
        deletions=[R.ScramCredentialDeletion(name="ghost", mechanism=2)],
        upsertions=[
            R.ScramCredentialUpsertion(name="", mechanism=2, iterations=4096, **good),
            R.ScramCredentialUpsertion(name="few", mechanism=2, iterations=1000, **good),
            R.ScramCredentialUpsertion(name="many", mechanism=1, iterations=20000, **good),
            R.ScramCredentialUpsertion(name="odd", mechanism=3, iterations=4096, **good),
            R.ScramCredentialUpsertion(name="twice", mechanism=1, iterations=4096, **good),
            R.ScramCredentialUpsertion(name="twice", mechanism=1, iterations=8192, **good),
            R.ScramCredentialUpsertion(name="fine", mechanism=1, iterations=4096, **good),
        ],
    )
    with RawClient(plain_bootstrap(broker)) as client:
        answer = client.request(request, 0)
        assert [(r.user, r.error_code) for r in answer.results] == [
            ("ghost", ErrorCode.RESOURCE_NOT_FOUND),
            ("", ErrorCode.UNACCEPTABLE_CREDENTIAL),
            ("few", ErrorCode.UNACCEPTABLE_CREDENTIAL),
            ("many", ErrorCode.UNACCEPTABLE_CREDENTIAL),
            ("odd", ErrorCode.UNSUPPORTED_SASL_MECHANISM),
            ("twice", ErrorCode.DUPLICATE_RESOURCE),
            ("fine", ErrorCode.NONE),
        ]
        described = client.request(DescribeUserScramCredentialsRequest(users=None), 0)
        users = {r.user for r in described.results}
        assert "fine" in users and not users & {"few", "many", "odd", "twice", "ghost"}


def test_scram_credentials_survive_a_restart(tmp_path: Path) -> None:
    props = {**BROKER_PROPERTIES, "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"}
    with broker_process(tmp_path, props) as broker:
        admin = AdminClient({"bootstrap.servers": plain_bootstrap(broker)})
        upsertion = UserScramCredentialUpsertion(
            "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-pw"
        )
        admin.alter_user_scram_credentials([upsertion])["dave"].result(TIMEOUT)
        broker.restart()
        with RawClient(sasl_bootstrap(broker)) as client:
            assert handshake(client, "SCRAM-SHA-256").error_code == ErrorCode.NONE
            answer = client.request(SaslAuthenticateRequest(auth_bytes=b"n,,n=dave,r=xyz"), 2)
            assert answer.error_code == ErrorCode.NONE  # a server-first: the user is known
            assert answer.auth_bytes.startswith(b"r=xyz")


REAUTH_MS = 1500


def sleep_until(moment: float) -> None:
    """Session lifetimes are wall-clock time: a test of them must let it pass."""
    time.sleep(max(0.0, moment - time.monotonic()))


def authenticate(client: RawClient, user: str, password: str) -> Any:
    assert handshake(client, "PLAIN").error_code == ErrorCode.NONE
    token = f"\0{user}\0{password}".encode()
    return client.request(SaslAuthenticateRequest(auth_bytes=token), 2)


def test_reauthentication_renews_the_session_and_an_expired_one_closes(tmp_path: Path) -> None:
    props = {
        **BROKER_PROPERTIES,
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
    }
    with broker_process(tmp_path, props) as broker:
        with RawClient(sasl_bootstrap(broker)) as client:
            first = authenticate(client, "alice", ALICE_SECRET)
            first_at = time.monotonic()
            assert (first.error_code, first.session_lifetime_ms) == (0, REAUTH_MS)
            sleep_until(first_at + REAUTH_MS / 2000)
            again = authenticate(client, "alice", ALICE_SECRET)  # renewed on the same connection
            renewed_at = time.monotonic()
            assert (again.error_code, again.session_lifetime_ms) == (0, REAUTH_MS)
            # Past the first session's end, inside the renewed one: still served.
            sleep_until(first_at + REAUTH_MS / 1000 + 0.1)
            assert client.request(MetadataRequest(topics=[]), 1).brokers
            # Past the renewed session's end: the next request closes the connection.
            sleep_until(renewed_at + REAUTH_MS / 1000)
            client.send(MetadataRequest(topics=[]), 1)
            assert client.wait_closed()
        assert broker.wait_for_log("SASL session of User:alice expired without re-authentication")

        with RawClient(sasl_bootstrap(broker)) as client:
            assert authenticate(client, "alice", ALICE_SECRET).error_code == ErrorCode.NONE
            other = authenticate(client, "admin", ADMIN_SECRET)
            assert other.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert other.error_message == (
                "Cannot change principals during re-authentication from User:alice: User:admin"
            )
            assert client.wait_closed()


def test_librdkafka_reauthenticates(tmp_path: Path, topic: str) -> None:
    """librdkafka (KIP-368) renews its session before it ends: a producer outlives three."""
    props = {**BROKER_PROPERTIES, "connections.max.reauth.ms": "1000"}
    with broker_process(tmp_path, props) as broker:
        create_topic(plain_bootstrap(broker), topic)
        producer = Producer(sasl_config(broker, "PLAIN", "alice", ALICE_SECRET))
        deadline = time.monotonic() + 3.5
        sent = 0
        while time.monotonic() < deadline:
            producer.produce(topic, value=b"x", partition=0)
            assert producer.flush(TIMEOUT) == 0
            sent += 1
            producer.poll(0.2)
        assert not broker.wait_for_log("expired without re-authentication", timeout=0.1)
        assert sent > 5


def test_describe_configs_hides_the_jaas_config(broker: BrokerProcess) -> None:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="0", configuration_keys=["sasl.jaas.config"]
    )
    with RawClient(plain_bootstrap(broker)) as client:
        answer = client.request(
            DescribeConfigsRequest(resources=[resource], include_synonyms=True), 4
        )
    configs = answer.results[0].configs
    assert [(c.name, c.value, c.is_sensitive) for c in configs] == [
        ("sasl.jaas.config", None, True)
    ]
    assert all(s.value is None for s in configs[0].synonyms)
