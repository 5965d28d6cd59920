"""Delegation tokens (KIP-48) on real Kafka 3.9 and on wirebroker: the same requests, the same
answers.

Both brokers get a SASL_PLAINTEXT listener with PLAIN users (`tests.wirebroker.secured`), the
ACL authorizer, SCRAM-SHA-512 for the tokens' logins and `delegation.token.secret.key`. One
scenario creates, describes, renews and expires tokens as alice and bob, logs in with a token
(`tokenauth=true`) and is refused what a token-authenticated client may not do; what each step
answers (codes, owners, lifetimes, whether the HMAC is HmacSHA512 of the id under the key) is
compared. Timestamps are compared as differences, ids not at all.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

from compat.kafka_process import kafka_cluster
from protocol.messages.create_delegation_token import CreateDelegationTokenRequest
from protocol.messages.describe_delegation_token import DescribeDelegationTokenRequest
from protocol.messages.expire_delegation_token import ExpireDelegationTokenRequest
from protocol.messages.renew_delegation_token import RenewDelegationTokenRequest
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import RawClient
from tests.wirebroker.secured import AUTHORIZER, PASSWORDS, PLAIN_JAAS, login
from wirebroker.sasl.delegation_tokens import create_hmac

pytestmark = pytest.mark.timeout(600)

KEY = "compat-token-key"
TOKEN_KEYS = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ),
    "delegation.token.secret.key": KEY,
    "authorizer.class.name": AUTHORIZER,
    "super.users": "User:admin;User:ANONYMOUS",
}
CR = CreateDelegationTokenRequest
DR = DescribeDelegationTokenRequest


def scenario(plaintext: str, sasl: str) -> list[Any]:
    seen: list[Any] = []

    def created(answer: Any) -> tuple[Any, ...]:
        return (
            answer.error_code,
            answer.principal_type,
            answer.principal_name,
            answer.token_requester_principal_name,
            answer.expiry_timestamp_ms - answer.issue_timestamp_ms,
            answer.max_timestamp_ms - answer.issue_timestamp_ms,
            answer.hmac == create_hmac(answer.token_id, KEY),
        )

    def described(answer: Any) -> tuple[Any, ...]:
        return answer.error_code, sorted(
            (
                t.principal_name,
                t.token_requester_principal_name,
                [(r.principal_type, r.principal_name) for r in t.renewers],
                t.max_timestamp - t.issue_timestamp,
            )
            for t in answer.tokens
        )

    with RawClient(plaintext) as anonymous:
        seen.append(("plaintext create", anonymous.request(CR(), 3).error_code))
        seen.append(("plaintext describe", anonymous.request(DR(owners=None), 3).error_code))
    with RawClient(sasl, plain=login("alice")) as alice, RawClient(sasl, plain=login("bob")) as bob:
        bob_renews = [CR.CreatableRenewers(principal_type="User", principal_name="bob")]
        first = alice.request(CR(renewers=bob_renews), 3)
        seen.append(("create", created(first)))
        second = alice.request(CR(max_lifetime_ms=60_000), 2)
        seen.append(("create v2, 60 s", created(second)))
        group = [CR.CreatableRenewers(principal_type="Group", principal_name="g")]
        seen.append(("group renewer", created(alice.request(CR(renewers=group), 3))))
        for_bob = CR(owner_principal_type="User", owner_principal_name="bob")
        seen.append(("for another owner", created(alice.request(for_bob, 3))))
        seen.append(("alice describes", described(alice.request(DR(owners=None), 3))))
        seen.append(("bob describes", described(bob.request(DR(owners=None), 3))))
        seen.append(("no owners", described(alice.request(DR(owners=[]), 3))))
        renew = RenewDelegationTokenRequest
        answer = bob.request(renew(hmac=first.hmac, renew_period_ms=60_000), 2)
        seen.append(("bob renews", answer.error_code, answer.expiry_timestamp_ms > 0))
        answer = bob.request(renew(hmac=second.hmac, renew_period_ms=60_000), 2)
        seen.append(("bob renews alice's", answer.error_code, answer.expiry_timestamp_ms))
        answer = bob.request(renew(hmac=b"\0" * 64, renew_period_ms=1), 2)
        seen.append(("unknown", answer.error_code, answer.expiry_timestamp_ms))

        with RawClient(sasl) as by_token:
            password = base64.b64encode(first.hmac).decode()
            by_token.login_scram("SCRAM-SHA-512", first.token_id, password, tokenauth=True)
            seen.append(("token creates", by_token.request(CR(), 3).error_code))
            seen.append(("token describes", by_token.request(DR(owners=None), 3).error_code))

        expire = ExpireDelegationTokenRequest
        answer = alice.request(expire(hmac=first.hmac, expiry_time_period_ms=-1), 2)
        seen.append(("expire now", answer.error_code))
        answer = alice.request(expire(hmac=first.hmac, expiry_time_period_ms=-1), 2)
        seen.append(("expire again", answer.error_code, answer.expiry_timestamp_ms))
        with RawClient(sasl) as by_token:
            try:
                by_token.login_scram("SCRAM-SHA-512", first.token_id, password, tokenauth=True)
                seen.append(("expired token logs in", True))
            except ConnectionError:
                seen.append(("expired token logs in", False))
    return seen


@pytest.fixture(scope="module")
def kafka_seen() -> Iterator[list[Any]]:
    with kafka_cluster(sasl_users=PASSWORDS, overrides=TOKEN_KEYS) as cluster:
        sasl = f"127.0.0.1:{cluster.broker.sasl_port}"
        yield scenario(cluster.bootstrap_servers, sasl)


@pytest.fixture(scope="module")
def wirebroker_seen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **TOKEN_KEYS,
    }
    with serving(BrokerProcess(tmp_path_factory.mktemp("tokens"), properties)) as process:
        yield scenario(process.bootstrap, f"127.0.0.1:{process.ports['SASL_PLAINTEXT']}")


def test_same_answers(kafka_seen: list[Any], wirebroker_seen: list[Any]) -> None:
    assert wirebroker_seen == kafka_seen
