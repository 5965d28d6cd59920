"""SASL_PLAINTEXT against a broker process: the raw flow, bad input, and this broker's own login.

The broker has a PLAINTEXT and a SASL_PLAINTEXT listener; PLAIN's users come from the listener's
JAAS config, SCRAM users are created with AlterUserScramCredentials, OAUTHBEARER takes Kafka's
unsecured tokens. Raw connections check Kafka's SaslServerAuthenticator behaviour: what is
answered before authentication, how a failure is answered (after
`connection.failed.authentication.delay.ms`, logged with user and host, never the secret), and
that each kind of bad input closes only the misbehaving connection, with nothing done for it and
no connection left open (the broker's connection count, from its metrics endpoint). The broker's
own client side (`wirebroker.peer`, as between brokers) logs in with each mechanism. Every
client x protocol round trip is in test_security_matrix.py.
"""

from __future__ import annotations

import gc
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from protocol.errors import ErrorCode
from protocol.framing import frame
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess, broker_process
from tests.wirebroker.helpers import (
    BROKER,
    SET,
    RawClient,
    alter_configs,
    create_topic,
    end_offset,
    fetch_request,
    metrics_url,
    produce_request,
    scrape,
    server_jaas,
    value,
    wait_until,
)
from wirebroker.peer import PeerAuthenticationFailed, PeerConnection, PeerSecurity
from wirebroker.sasl.oauthbearer import OAuthBearerClient, unsecured_token
from wirebroker.sasl.scram import ScramClient
from wirebroker.sasl.settings import SaslLogin

pytestmark = pytest.mark.integration

TIMEOUT = 15.0
FAILURE_DELAY_MS = 300
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
ADMIN_SECRET = "admin-secret-d41d8"
ALICE_SECRET = "alice-secret-9f3c2"
PLAIN_KEY = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
BROKER_PROPERTIES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
    "connection.failed.authentication.delay.ms": str(FAILURE_DELAY_MS),
    "wirebroker.metrics.listener": "127.0.0.1:0",
    PLAIN_KEY: (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{ADMIN_SECRET}" '
        f'user_admin="{ADMIN_SECRET}" user_alice="{ALICE_SECRET}";'
    ),
    **server_jaas("SASL_PLAINTEXT", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
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
    line = broker.wait_for_log("SASL/PLAIN authentication of User:alice failed", since=since)
    assert line is not None and "from 127.0.0.1" in line  # who, from where; never the secret
    create_topic(plain_bootstrap(broker), topic)
    round_trip(sasl_config(broker, "PLAIN", "alice", ALICE_SECRET), topic)


def handshake(client: RawClient, mechanism: str, version: int = 1) -> Any:
    return client.request(SaslHandshakeRequest(mechanism=mechanism), version)


def test_raw_failure_is_answered_after_the_delay_then_closed(
    broker: BrokerProcess, no_connection_left: None
) -> None:
    since = len(broker.log)
    with RawClient(sasl_bootstrap(broker)) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.NONE
        sent = time.monotonic()
        answer = client.request(SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong-secret"), 2)
        assert time.monotonic() - sent >= FAILURE_DELAY_MS / 1000
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert client.wait_closed()
    line = broker.wait_for_log("authentication of User:alice failed", since=since)
    assert line is not None and "from 127.0.0.1" in line


def test_wrong_scram_password_and_an_expired_token_fail_alike(
    broker: BrokerProcess, no_connection_left: None
) -> None:
    """SCRAM: the standard message (it would tell which users exist); OAUTHBEARER: Kafka's
    JSON error first, the failure once the client acknowledges it with \\x01."""
    user = create_scram_user(broker, "SCRAM-SHA-512")
    since = len(broker.log)
    with RawClient(sasl_bootstrap(broker)) as client:
        assert handshake(client, "SCRAM-SHA-512").error_code == ErrorCode.NONE
        scram = ScramClient("SCRAM-SHA-512", user, "wrong-secret")
        first = client.request(SaslAuthenticateRequest(auth_bytes=scram.initial()), 2)
        final = scram.evaluate(first.auth_bytes)
        assert final is not None
        answer = client.request(SaslAuthenticateRequest(auth_bytes=final), 2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == (
            "Authentication failed during authentication due to invalid credentials with SASL "
            "mechanism SCRAM-SHA-512"
        )
        assert client.wait_closed()
    assert broker.wait_for_log(f"SASL/SCRAM-SHA-512 authentication of User:{user}", since=since)
    expired, _ = unsecured_token(
        {"unsecuredLoginStringClaim_sub": "carol", "unsecuredLoginLifetimeSeconds": "1"},
        int(time.time() * 1000) - 60_000,
    )
    with RawClient(sasl_bootstrap(broker)) as client:
        assert handshake(client, "OAUTHBEARER").error_code == ErrorCode.NONE
        token = OAuthBearerClient(expired, {}).initial()
        answer = client.request(SaslAuthenticateRequest(auth_bytes=token), 2)
        assert (answer.error_code, answer.auth_bytes) == (0, b'{"status":"invalid_token"}')
        answer = client.request(SaslAuthenticateRequest(auth_bytes=b"\x01"), 2)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == '{"status":"invalid_token"}'
        assert client.wait_closed()
    assert broker.wait_for_log("SASL/OAUTHBEARER authentication of User:carol", since=since)


def test_raw_v1_flow_then_requests_are_served(broker: BrokerProcess) -> None:
    with RawClient(sasl_bootstrap(broker)) as client:
        versions = client.request(ApiVersionsRequest(), 0)
        keys = {k.api_key for k in versions.api_keys}
        assert {SaslHandshakeRequest.API_KEY, SaslAuthenticateRequest.API_KEY} <= keys
        shake = handshake(client, "PLAIN")
        assert shake.mechanisms == MECHANISMS
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
        assert answer.mechanisms == MECHANISMS
        assert client.wait_closed()


def test_request_before_authentication_closes_only_that_connection(
    broker: BrokerProcess, no_connection_left: None
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


def test_requests_that_would_change_something_do_nothing_before_authentication(
    broker: BrokerProcess, topic: str, no_connection_left: None
) -> None:
    """Produce, CreateTopics and Fetch before (or during) authentication: the connection is
    closed without an answer and nothing was written, created or read."""
    create_topic(plain_bootstrap(broker), topic)
    produce = produce_request(topic, 0, [SimpleRecord(b"k", b"never")])
    creatable = CreateTopicsRequest.CreatableTopic(
        name=f"{topic}-new", num_partitions=1, replication_factor=1
    )
    fetch = fetch_request(topic)
    for body, version in ((produce, 8), (CreateTopicsRequest(topics=[creatable]), 7), (fetch, 11)):
        for authenticating in (False, True):
            with RawClient(sasl_bootstrap(broker)) as client:
                if authenticating:
                    assert handshake(client, "PLAIN").error_code == ErrorCode.NONE
                client.send(body, version)
                assert client.wait_closed()
                if not authenticating:
                    assert client.buffered == 0  # no answer at all
    assert end_offset(plain_bootstrap(broker), topic) == 0
    with RawClient(plain_bootstrap(broker)) as admin:
        names = [t.name for t in admin.request(MetadataRequest(topics=None), 12).topics]
    assert f"{topic}-new" not in names


@pytest.mark.parametrize(
    "frames",
    [
        # SaslAuthenticate before any SaslHandshake
        [("request", SaslAuthenticateRequest(auth_bytes=b"\0alice\0x"), 2)],
        # a second SaslHandshake during authentication
        [("handshake", "PLAIN"), ("request", SaslHandshakeRequest(mechanism="PLAIN"), 1)],
        # SCRAM's client-final message first
        [
            ("handshake", "SCRAM-SHA-512"),
            ("request", SaslAuthenticateRequest(auth_bytes=b"c=biws,r=abc,p=AAAA"), 2),
        ],
        # ApiVersions during authentication
        [("handshake", "SCRAM-SHA-512"), ("request", ApiVersionsRequest(), 0)],
        # a Kafka request where a v0 handshake's bare token belongs
        [("handshake0", "PLAIN"), ("raw", None, 0)],
        # not a Kafka request at all
        [("raw", None, 0)],
    ],
    ids=[
        "authenticate-first",
        "handshake-twice",
        "scram-final-first",
        "api-versions-midway",
        "request-for-token",
        "garbage",
    ],
)
def test_sasl_frames_out_of_order_close_only_that_connection(
    broker: BrokerProcess, frames: list[tuple[Any, ...]], no_connection_left: None
) -> None:
    with (
        RawClient(sasl_bootstrap(broker)) as bystander,
        RawClient(sasl_bootstrap(broker)) as client,
    ):
        assert handshake(bystander, "PLAIN").error_code == ErrorCode.NONE
        for kind, what, *version in frames:
            if kind.startswith("handshake"):
                assert handshake(client, what, 0 if kind == "handshake0" else 1).error_code == 0
            elif kind == "raw":
                client.send_raw(frame(b"\x00\x03\x00\x01" + bytes(20)))
            else:
                client.send(what, version[0])
        assert client.wait_closed()
        assert client.buffered == 0 or frames[-1][0] == "request"  # at most the error answer
        token = f"\0alice\0{ALICE_SECRET}".encode()
        assert bystander.request(SaslAuthenticateRequest(auth_bytes=token), 2).error_code == 0
        assert bystander.request(MetadataRequest(topics=[]), 1).brokers


def test_request_during_authentication_gets_illegal_sasl_state(broker: BrokerProcess) -> None:
    with RawClient(sasl_bootstrap(broker)) as client:
        assert handshake(client, "SCRAM-SHA-512").error_code == ErrorCode.NONE
        answer = client.request(ApiVersionsRequest(), 0)
        assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert client.wait_closed()


@pytest.mark.parametrize("stage", ["first-frame", "v0-token", "sasl-authenticate"])
def test_oversized_token_is_refused_before_it_is_read(
    broker: BrokerProcess, stage: str, no_connection_left: None
) -> None:
    since = len(broker.log)
    with RawClient(sasl_bootstrap(broker)) as client:
        if stage != "first-frame":
            version = 0 if stage == "v0-token" else 1
            assert handshake(client, "PLAIN", version=version).error_code == ErrorCode.NONE
        client.send_raw(struct.pack(">i", 524_289))  # the size alone: the body never comes
        assert client.wait_closed()
    assert broker.wait_for_log("frame of 524289 bytes exceeds the maximum of 524288", since=since)


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


def test_scram_credentials_survive_a_kill(tmp_path: Path) -> None:
    """The answer waited for the credential's write: kill -9 right after it loses nothing."""
    props = {**BROKER_PROPERTIES, "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"}
    with broker_process(tmp_path, props) as broker:
        admin = AdminClient({"bootstrap.servers": plain_bootstrap(broker)})
        upsertion = UserScramCredentialUpsertion(
            "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-pw"
        )
        admin.alter_user_scram_credentials([upsertion])["dave"].result(TIMEOUT)
        broker.restart(clean=False)
        with RawClient(sasl_bootstrap(broker)) as client:
            client.login_scram("SCRAM-SHA-256", "dave", "dave-pw")
            assert client.request(MetadataRequest(topics=[]), 1).brokers


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
        since = len(broker.log)

        # The broker's own client side renews its session before it ends, as Kafka's clients.
        async def peer() -> None:
            login = SaslLogin(
                "SASL_PLAINTEXT", "PLAIN", {"username": "alice", "password": ALICE_SECRET}
            )
            port = broker.ports["SASL_PLAINTEXT"]
            async with await PeerConnection.open(
                "127.0.0.1", port, client_id="peer-test", security=PeerSecurity(sasl=login)
            ) as connection:
                for _ in range(3):  # past the first session's end, and the second's
                    await trio.sleep(REAUTH_MS / 2000)
                    assert (await connection.request(MetadataRequest(topics=[]), 1)).brokers

        trio.run(peer)
        assert not broker.wait_for_log("expired without re-authentication", timeout=0, since=since)

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


def test_a_mechanism_without_a_jaas_entry_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka 3.9's JaasContext.loadServerContext, for each enabled mechanism: SCRAM without
    its `listener.name.<l>.scram-sha-512.sasl.jaas.config` nor a KafkaServer section of a JAAS
    file, `wirebroker serve` does not start, with Kafka's message and what to set, and a running
    broker refuses the change enabling it (taken with its entry). Kafka's refusal of the same:
    compat/test_jaas_file.py."""
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    kafka = (
        "Could not find a 'KafkaServer' or 'sasl_plaintext.KafkaServer' entry in the JAAS "
        "configuration. System property 'java.security.auth.login.config' is not set"
    )
    [(key, jaas)] = server_jaas("SASL_PLAINTEXT", "SCRAM-SHA-512").items()
    done = subprocess.run(
        [sys.executable, "-m", "wirebroker", "serve", "--log-dirs", str(tmp_path / "refused")]
        + ["--listeners", "SASL_PLAINTEXT://127.0.0.1:0"]
        + ["--override", "sasl.enabled.mechanisms=SCRAM-SHA-512"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"{kafka}: listener SASL_PLAINTEXT enables SCRAM-SHA-512: set {key}={jaas}" in (
        done.stderr
    ), done.stderr
    props = {
        **{k: BROKER_PROPERTIES[k] for k in ("listeners", PLAIN_KEY)},
        "sasl.enabled.mechanisms": "PLAIN",
        "password.encoder.secret": "encoder-secret-3",
    }
    with broker_process(tmp_path / "data", props) as running:
        enable = (
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
            SET,
            "PLAIN,SCRAM-SHA-512",
        )
        code, message = alter_configs(plain_bootstrap(running), BROKER, "0", [enable])
        assert code == ErrorCode.INVALID_REQUEST and message and kafka in message, message
        ok = alter_configs(plain_bootstrap(running), BROKER, "0", [enable, (key, SET, jaas)])
        assert ok == (ErrorCode.NONE, None)
        user = create_scram_user(running, "SCRAM-SHA-512")
        with RawClient(sasl_bootstrap(running)) as client:
            client.login_scram("SCRAM-SHA-512", user, ALICE_SECRET)
            assert client.request(MetadataRequest(topics=[]), 1).brokers


def test_describe_configs_hides_the_jaas_config(broker: BrokerProcess) -> None:
    resource = DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER, resource_name="0", configuration_keys=["sasl.jaas.config"]
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


@pytest.fixture
def no_connection_left(broker: BrokerProcess) -> Iterator[None]:
    """The broker has no more connections open after the test than before it."""
    url = metrics_url(broker)

    def open_connections() -> float:
        gc.collect()  # clients of the tests close their connections
        return value(scrape(url), "kafka_server_socket_server_metrics_connection_count")

    before = open_connections()
    yield
    wait_until(
        lambda: open_connections() <= before,
        what=f"the broker's connection count back at {before:.0f}",
    )


def create_scram_user(broker: BrokerProcess, mechanism: str) -> str:
    """A new user with a SCRAM credential whose password is ALICE_SECRET."""
    user = f"scram-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": plain_bootstrap(broker)})
    info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), 4096)
    upsertion = UserScramCredentialUpsertion(user, info, ALICE_SECRET.encode())
    admin.alter_user_scram_credentials([upsertion])[user].result(TIMEOUT)
    return user


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_broker_login_with_each_mechanism(broker: BrokerProcess, mechanism: str) -> None:
    """This broker's client side (`wirebroker.peer`, as the controller and replica fetchers use
    it) logs in with each mechanism, and a wrong password is a PeerAuthenticationFailed."""
    user = create_scram_user(broker, mechanism) if mechanism.startswith("SCRAM") else "alice"
    options = (
        {"unsecuredLoginStringClaim_sub": user}
        if mechanism == "OAUTHBEARER"
        else {"username": user, "password": ALICE_SECRET}
    )
    host, port = "127.0.0.1", broker.ports["SASL_PLAINTEXT"]

    async def main() -> None:
        login = SaslLogin("SASL_PLAINTEXT", mechanism, options)
        security = PeerSecurity(sasl=login)
        async with await PeerConnection.open(
            host, port, client_id="peer-test", security=security
        ) as connection:
            assert (await connection.request(MetadataRequest(topics=[]), 1)).brokers
        if mechanism != "OAUTHBEARER":
            wrong = PeerSecurity(
                sasl=SaslLogin("SASL_PLAINTEXT", mechanism, {**options, "password": "wrong-secret"})
            )
            with pytest.raises(PeerAuthenticationFailed, match="SASL_AUTHENTICATION_FAILED") as e:
                await PeerConnection.open(host, port, client_id="peer-test", security=wrong)
            assert "wrong-secret" not in str(e.value)

    trio.run(main)
