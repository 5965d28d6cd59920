"""Delegation tokens (KIP-48) against a real broker process: Kafka's own
`kafka-delegation-tokens.sh` (DelegationTokenCommand) creates, describes, renews and expires
them over SASL/SCRAM, the Java client authenticates with one (`tokenauth=true`), refusals come
with Kafka's error codes, and a restart keeps the tokens.
"""

from __future__ import annotations

import base64
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism
from confluent_kafka.admin import UserScramCredentialUpsertion as Upsertion

from protocol.errors import ErrorCode
from protocol.messages.create_acls import CreateAclsRequest
from protocol.messages.create_delegation_token import CreateDelegationTokenRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_delegation_token import DescribeDelegationTokenRequest
from protocol.messages.expire_delegation_token import ExpireDelegationTokenRequest
from protocol.messages.renew_delegation_token import RenewDelegationTokenRequest
from tests.broker_process import BrokerProcess, broker_process
from tests.wirebroker.helpers import RawClient, create_topic, fill, server_jaas
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.sasl.delegation_tokens import create_hmac
from wirebroker.zookeeper_server import jars_available, jars_dir, java_executable

pytestmark = pytest.mark.integration

TIMEOUT = 15.0
SECRET_KEY = "token-secret-key-5b1e"
PASSWORDS = {"alice": "alice-pw-77a1", "bob": "bob-pw-0c3d", "carol": "carol-pw-e912"}
MECHANISM = "SCRAM-SHA-512"
BROKER_PROPERTIES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    **server_jaas("SASL_PLAINTEXT", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "delegation.token.secret.key": SECRET_KEY,
    "delegation.token.expiry.check.interval.ms": "200",
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    # the PLAINTEXT listener's ANONYMOUS sets users and ACLs up; carol has only her ACLs
    "super.users": "User:ANONYMOUS;User:alice;User:bob",
}

CR = CreateDelegationTokenRequest
DR = DescribeDelegationTokenRequest


def sasl_bootstrap(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}"


def add_users(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    futures = admin.alter_user_scram_credentials(
        [Upsertion(user, info, password.encode()) for user, password in PASSWORDS.items()]
    )
    for future in futures.values():
        future.result(TIMEOUT)


@pytest.fixture(scope="module", autouse=True)
def _users(broker: BrokerProcess) -> Iterator[None]:
    add_users(broker)
    yield
    for line in broker.log:
        for secret in (SECRET_KEY, *PASSWORDS.values()):
            assert secret not in line, line


def as_user(broker: BrokerProcess, user: str) -> RawClient:
    client = RawClient(sasl_bootstrap(broker))
    client.login_scram(MECHANISM, user, PASSWORDS[user])
    return client


def as_token(broker: BrokerProcess, token_id: str, token_hmac: bytes) -> RawClient:
    client = RawClient(sasl_bootstrap(broker))
    client.login_scram(MECHANISM, token_id, base64.b64encode(token_hmac).decode(), tokenauth=True)
    return client


def create(client: RawClient, version: int = 3, **fields: Any) -> Any:
    return client.request(CR(**fields), version)


def test_create_describe_renew_expire_and_the_hmac_is_kafkas(broker: BrokerProcess) -> None:
    with as_user(broker, "alice") as alice, as_user(broker, "bob") as bob:
        created = create(
            alice, renewers=[CR.CreatableRenewers(principal_type="User", principal_name="bob")]
        )
        assert created.error_code == ErrorCode.NONE
        assert (created.principal_type, created.principal_name) == ("User", "alice")
        assert created.token_requester_principal_name == "alice"
        assert created.hmac == create_hmac(created.token_id, SECRET_KEY)
        day, week = 86_400_000, 7 * 86_400_000
        assert created.expiry_timestamp_ms - created.issue_timestamp_ms == day
        assert created.max_timestamp_ms - created.issue_timestamp_ms == week

        listed = alice.request(DR(owners=None), 3)
        assert created.token_id in [t.token_id for t in listed.tokens]
        assert bob.request(DR(owners=None), 3).tokens  # a renewer sees it
        with as_user(broker, "carol") as carol:
            assert created.token_id not in [
                t.token_id for t in carol.request(DR(owners=None), 3).tokens
            ]
            renew = carol.request(
                RenewDelegationTokenRequest(hmac=created.hmac, renew_period_ms=1000), 2
            )
            assert renew.error_code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
            allow(broker, ResourceType.DELEGATION_TOKEN, created.token_id, AclOperation.DESCRIBE)
            assert created.token_id in [
                t.token_id for t in carol.request(DR(owners=None), 3).tokens
            ]
        assert alice.request(DR(owners=[]), 3).tokens == []

        renewed = bob.request(
            RenewDelegationTokenRequest(hmac=created.hmac, renew_period_ms=60_000), 2
        )
        assert renewed.error_code == ErrorCode.NONE
        assert renewed.expiry_timestamp_ms < created.expiry_timestamp_ms
        unknown = bob.request(RenewDelegationTokenRequest(hmac=b"x" * 64, renew_period_ms=1), 2)
        assert unknown.error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND

        expired = alice.request(
            ExpireDelegationTokenRequest(hmac=created.hmac, expiry_time_period_ms=-1), 2
        )
        assert expired.error_code == ErrorCode.NONE
        assert created.token_id not in [
            t.token_id for t in alice.request(DR(owners=None), 3).tokens
        ]
        with pytest.raises(ConnectionError):
            as_token(broker, created.token_id, created.hmac)


def allow(
    broker: BrokerProcess, resource_type: ResourceType, name: str, operation: AclOperation
) -> None:
    """Allow User:carol `operation` on the resource."""
    creation = CreateAclsRequest.AclCreation(
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=3,  # LITERAL
        principal="User:carol",
        host="*",
        operation=operation,
        permission_type=3,  # ALLOW
    )
    with RawClient(broker.bootstrap) as client:
        [result] = client.request(CreateAclsRequest(creations=[creation]), 3).results
        assert result.error_code == ErrorCode.NONE


def test_a_token_authenticates_as_its_owner(broker: BrokerProcess, topic: str) -> None:
    """alice may create topics (a super user), carol may not: so may their tokens."""
    with as_user(broker, "alice") as alice, as_user(broker, "carol") as carol:
        alices, carols = create(alice), create(carol)
    creation = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)
        ],
        timeout_ms=10_000,
    )
    with as_token(broker, carols.token_id, carols.hmac) as client:
        [result] = client.request(creation, 7).topics
        assert result.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with as_token(broker, alices.token_id, alices.hmac) as client:
        [result] = client.request(creation, 7).topics
        assert result.error_code == ErrorCode.NONE


def test_a_token_for_another_owner_needs_create_tokens(broker: BrokerProcess) -> None:
    """KIP-373: carol creates a token owned by alice once she may CREATE_TOKENS on User:alice,
    and describes alice's tokens once she may DESCRIBE_TOKENS on User:alice."""
    with as_user(broker, "carol") as carol:
        for_alice = {"owner_principal_type": "User", "owner_principal_name": "alice"}
        refused = create(carol, **for_alice)
        assert refused.error_code == ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
        assert refused.principal_name == "alice"
        allow(broker, ResourceType.USER, "User:alice", AclOperation.CREATE_TOKENS)
        created = create(carol, **for_alice)
        assert created.error_code == ErrorCode.NONE
        assert (created.principal_name, created.token_requester_principal_name) == (
            "alice",
            "carol",
        )
        # carol requested it but does not own or renew it
        assert created.token_id not in [
            t.token_id for t in carol.request(DR(owners=None), 3).tokens
        ]
        allow(broker, ResourceType.USER, "User:alice", AclOperation.DESCRIBE_TOKENS)
        [token] = [
            t for t in carol.request(DR(owners=None), 3).tokens if t.token_id == created.token_id
        ]
        assert token.token_requester_principal_name == "carol"


def test_refusals_with_kafkas_codes(broker: BrokerProcess) -> None:
    with RawClient(broker.bootstrap) as plaintext:
        assert create(plaintext).error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        assert plaintext.request(DR(owners=None), 3).error_code == (
            ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        )
    with as_user(broker, "alice") as alice:
        bad_renewer = [CR.CreatableRenewers(principal_type="Group", principal_name="g")]
        assert create(alice, renewers=bad_renewer).error_code == ErrorCode.INVALID_PRINCIPAL_TYPE
        created = create(alice, max_lifetime_ms=60_000)
        assert created.max_timestamp_ms - created.issue_timestamp_ms == 60_000
        assert created.expiry_timestamp_ms == created.max_timestamp_ms  # the shorter of the two
        with as_token(broker, created.token_id, created.hmac) as by_token:
            # authenticated as alice, by a token: no token requests
            assert create(by_token).error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            renew = by_token.request(
                RenewDelegationTokenRequest(hmac=created.hmac, renew_period_ms=1), 2
            )
            assert renew.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        # expired in 1 ms: the expiry check (every 200 ms) removes it, then it is unknown
        shortened = alice.request(
            ExpireDelegationTokenRequest(hmac=created.hmac, expiry_time_period_ms=1), 2
        )
        assert shortened.error_code == ErrorCode.NONE
        broker.wait_for_log(f"Delegation token expired for token: {created.token_id}", TIMEOUT)
        gone = alice.request(RenewDelegationTokenRequest(hmac=created.hmac, renew_period_ms=1), 2)
        assert gone.error_code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        with pytest.raises(ConnectionError):
            as_token(broker, created.token_id, created.hmac)


def test_disabled_without_a_secret_key(tmp_path: Path) -> None:
    props = {k: v for k, v in BROKER_PROPERTIES.items() if not k.startswith("delegation.")}
    with broker_process(tmp_path, props) as broker:
        add_users(broker)
        with as_user(broker, "alice") as alice:
            assert create(alice).error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
            assert alice.request(DR(owners=None), 3).error_code == (
                ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
            )
            renew = alice.request(RenewDelegationTokenRequest(hmac=b"h", renew_period_ms=1), 2)
            assert renew.error_code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED


def test_tokens_survive_a_restart(tmp_path: Path) -> None:
    with broker_process(tmp_path, BROKER_PROPERTIES) as broker:
        add_users(broker)
        with as_user(broker, "alice") as alice:
            created = create(alice)
        broker.restart(clean=False)
        with as_token(broker, created.token_id, created.hmac) as by_token:
            assert by_token.request(DR(owners=None), 3).error_code == (
                ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
            )
        with as_user(broker, "alice") as alice:
            [token] = alice.request(DR(owners=None), 3).tokens
            assert (token.token_id, token.hmac) == (created.token_id, created.hmac)


def test_a_full_disk_refuses_the_change_and_changes_nothing(disk: Path) -> None:
    """The file's write fails: UNKNOWN_SERVER_ERROR (as Kafka answers a failed ZooKeeper write),
    the broker stays up, the token exists neither now nor after a restart; then space again."""
    with broker_process(disk / "data", BROKER_PROPERTIES) as broker:
        add_users(broker)
        with as_user(broker, "alice") as alice:
            kept = create(alice)
            fill(disk / "filler")
            assert create(alice).error_code == ErrorCode.UNKNOWN_SERVER_ERROR
            renew = alice.request(
                RenewDelegationTokenRequest(hmac=kept.hmac, renew_period_ms=1000), 2
            )
            assert renew.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
            [token] = alice.request(DR(owners=None), 3).tokens
            assert token.expiry_timestamp == kept.expiry_timestamp_ms  # not renewed
            (disk / "filler").unlink()
        broker.restart(clean=False)
        with as_user(broker, "alice") as alice:
            assert [t.token_id for t in alice.request(DR(owners=None), 3).tokens] == [kept.token_id]
            assert create(alice).error_code == ErrorCode.NONE


# Kafka's own tools and Java client --------------------------------------------------------

needs_java = pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")
JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required {};"


def client_properties(path: Path, bootstrap: str, options: str) -> Path:
    path.write_text(
        f"bootstrap.servers={bootstrap}\nsecurity.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={MECHANISM}\nsasl.jaas.config={JAAS.format(options)}\n"
    )
    return path


def delegation_tokens_tool(broker: BrokerProcess, config: Path, *args: str) -> str:
    argv = [java_executable(), "-Xmx256m", "-cp", f"{jars_dir()}/*"]
    argv += ["org.apache.kafka.tools.DelegationTokenCommand"]
    argv += ["--bootstrap-server", sasl_bootstrap(broker), "--command-config", str(config)]
    done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout


def token_rows(output: str) -> dict[str, str]:
    """The tool's table: token id -> HMAC."""
    rows = re.findall(r"^(\S+)\s+(\S+)\s+User:", output, re.MULTILINE)
    return dict(rows)


@needs_java
def test_kafka_tool_and_the_java_client_with_a_token(
    broker: BrokerProcess, tmp_path: Path, topic: str, round_trip_class: Path
) -> None:
    alice = client_properties(
        tmp_path / "alice.properties",
        sasl_bootstrap(broker),
        f'username="alice" password="{PASSWORDS["alice"]}"',
    )
    out = delegation_tokens_tool(
        broker, alice, "--create", "--max-life-time-period", "-1", "--renewer-principal", "User:bob"
    )
    token_id = re.search(r"tokenId : (\S+)", out)[1]  # type: ignore[index]
    token_hmac = token_rows(out)[token_id]
    assert base64.b64decode(token_hmac) == create_hmac(token_id, SECRET_KEY)
    describe = ("--describe", "--owner-principal", "User:alice")
    assert token_id in token_rows(delegation_tokens_tool(broker, alice, *describe))
    # as Kafka 3.9: the tool sends an empty owner list without --owner-principal: no tokens
    assert token_rows(delegation_tokens_tool(broker, alice, "--describe")) == {}
    out = delegation_tokens_tool(
        broker, alice, "--renew", "--hmac", token_hmac, "--renew-time-period", "-1"
    )
    assert "Completed renew operation" in out

    create_topic(broker.bootstrap, topic)
    by_token = client_properties(
        tmp_path / "token.properties",
        sasl_bootstrap(broker),
        f'username="{token_id}" password="{token_hmac}" tokenauth=true',
    )
    argv = [java_executable(), "-Xmx256m", "-cp", f"{round_trip_class}:{jars_dir()}/*"]
    argv += ["RoundTrip", str(by_token), topic, "t0", "t1"]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.split() == [b"t0", b"t1"]

    out = delegation_tokens_tool(
        broker, alice, "--expire", "--hmac", token_hmac, "--expiry-time-period", "-1"
    )
    assert "Completed expire operation" in out
    assert token_id not in token_rows(delegation_tokens_tool(broker, alice, *describe))
