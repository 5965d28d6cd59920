"""Brokers that log in to each other with OIDC tokens (KIP-768): the inter-broker listener is
SASL_PLAINTEXT with OAUTHBEARER, its tokens verified against the identity provider's JWKS
(Kafka's OAuthBearerValidatorCallbackHandler), and each broker gets its own token from the
provider's token endpoint with its client credentials (Kafka's OAuthBearerLoginCallbackHandler).
The provider is `tests.wirebroker.oidc.Issuer`, served over HTTP from this test; its tokens
live 8 s, and the brokers allow no clock skew, so a broker that did not fetch its token again
in time could not log in to its peers.

- Three brokers replicate a topic (RF 3, acks=all, min.insync.replicas=2), each fetching its
  token again before it expires, and replicate again after the first tokens have expired; no
  secret and no token reaches the log.
- A wrong client secret: the broker refuses to start and says what to check.
- `org.apache.kafka.sasl.oauthbearer.allowed.urls` without the token endpoint: refused.
- A client secret rotated at run time (the JAAS config set dynamically): a token fetched with
  it; another change to the listener keeps the token held.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.cluster.harness import consume, eventually, produce, replicated, start_broker
from tests.cluster.test_controller import create_topic
from tests.wirebroker.helpers import alter_configs
from tests.wirebroker.oidc import AUDIENCE, ISSUER, Issuer
from wirebroker.sasl.access_token import AccessTokenLogin
from wirebroker.sasl.provider import ALLOWED_URLS
from wirebroker.server import RunningBroker

pytestmark = pytest.mark.integration

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
SECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
)
SECURED_LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
SECRETS = {i: f"client-secret-{i}-5c0ffee" for i in (1, 2, 3)}
LIFETIME_S = 8
PREFIX = "listener.name.sasl_plaintext.oauthbearer."


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    idp = Issuer()
    idp.add_key("k1")
    idp.clients = {f"broker-{i}": secret for i, secret in SECRETS.items()}
    idp.token_lifetime_s = LIFETIME_S
    yield idp
    idp.close()


def properties(issuer: Issuer, broker_id: int, secret: str) -> dict[str, str]:
    """A broker whose inter-broker listener takes and makes OIDC tokens; the OAUTHBEARER keys
    in Kafka's mechanism-prefixed spelling (`listener.name.<l>.oauthbearer.sasl.oauthbearer.*`)."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        f"{PREFIX}sasl.server.callback.handler.class": SECURED_VALIDATOR,
        f"{PREFIX}sasl.login.callback.handler.class": SECURED_LOGIN,
        f"{PREFIX}sasl.jaas.config": (
            f'{LOGIN_MODULE} required clientId="broker-{broker_id}" clientSecret="{secret}" '
            'scope="kafka";'
        ),
        f"{PREFIX}sasl.oauthbearer.jwks.endpoint.url": issuer.url,
        f"{PREFIX}sasl.oauthbearer.token.endpoint.url": issuer.token_url,
        f"{PREFIX}sasl.oauthbearer.expected.audience": AUDIENCE,
        f"{PREFIX}sasl.oauthbearer.expected.issuer": ISSUER,
        f"{PREFIX}sasl.oauthbearer.clock.skew.seconds": "0",
        "min.insync.replicas": "2",
    }


async def replicate_with_own_tokens(brokers: list[RunningBroker], topic: str) -> dict[str, str]:
    """`topic` created with a replica on each broker and 10 records produced with acks=all
    (min.insync.replicas=2): answered once the followers fetched from their leader's SASL
    listener (the second), logged in with the token each got from the provider. The config
    of a client of the first broker's PLAINTEXT listener."""
    b1 = brokers[0]
    await eventually(lambda: b1.broker.controller_id > 0, what="a controller")
    result = await create_topic(b1, topic, 1, len(brokers))
    assert result.error_code == 0, result.error_message
    plaintext = {"bootstrap.servers": b1.bootstrap_servers.split(",")[0]}
    await trio.to_thread.run_sync(produce, plaintext, topic, 10)
    await replicated(brokers, topic, 10)
    sasl_ports = {b.broker.node_id: b.listeners[1].port for b in brokers}
    fetchers = [f for b in brokers for f in b.broker.replica_manager.fetchers.values()]
    assert fetchers and all(
        f.peer.address == ("127.0.0.1", sasl_ports[f.source_id]) for f in fetchers
    )
    for b in brokers:
        login = b.broker.peer_security.sasl
        assert login is not None and login.access_token is not None
        token = login.access_token.token
        assert token is not None and token.principal == f"broker-{b.broker.node_id}"
    return plaintext


def test_brokers_log_in_to_each_other_with_client_credentials(
    zk_connect: str,
    tmp_path: Path,
    issuer: Issuer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG, logger="wirebroker")
    # the endpoints allowed, as Kafka 3.9.1's system property allows them
    monkeypatch.setenv(ALLOWED_URLS, f"{issuer.url}, {issuer.token_url}")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            brokers = [
                await start_broker(
                    nursery, zk_connect, tmp_path, i, **properties(issuer, i, SECRETS[i])
                )
                for i in (1, 2, 3)
            ]
            plaintext = await replicate_with_own_tokens(brokers, "oidc")
            # each broker fetches its token again before it expires: two more each, the
            # first ones long expired by then, and replication still logs in
            await eventually(
                lambda: all(issuer.issued[f"broker-{i}"] >= 3 for i in (1, 2, 3)),
                timeout=4 * LIFETIME_S,
                what="every broker's third token",
            )
            await trio.to_thread.run_sync(produce, plaintext, "oidc", 10)
            await replicated(brokers, "oidc", 20)
            got = await trio.to_thread.run_sync(consume, plaintext, "oidc", 20)
            assert got == [f"replicated-{i}".encode() for i in range(10)] * 2
            nursery.cancel_scope.cancel()

    trio.run(main)
    # the client credentials grant, as Kafka's HttpAccessTokenRetriever asks for it
    assert issuer.forms and all(
        form == {"grant_type": ["client_credentials"], "scope": ["kafka"]} for form in issuer.forms
    )
    # every login with a token that had not expired: no token was refused
    assert "OAUTHBEARER token refused" not in caplog.text
    assert "access token for this broker's logins on SASL_PLAINTEXT: principal broker-1" in (
        caplog.text
    )
    for secret in SECRETS.values():
        assert secret not in caplog.text
    assert "eyJ" not in caplog.text  # a JWS's base64url JSON header: no token in the log


def serve(
    tmp_path: Path, properties: dict[str, str], **env: str
) -> subprocess.CompletedProcess[str]:
    """`wirebroker serve` with `properties` in its own process, until it exits."""
    props = dict(properties)
    command = [sys.executable, "-m", "wirebroker", "serve", "--log-dirs", str(tmp_path / "data")]
    command += ["--listeners", props.pop("listeners")]
    command += [arg for k, v in props.items() for arg in ("--override", f"{k}={v}")]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )


def test_a_wrong_client_secret_refuses_to_start(
    zk_connect: str, tmp_path: Path, issuer: Issuer
) -> None:
    wrong = "not-the-secret-9f3b"
    props = {
        **properties(issuer, 1, wrong),
        "zookeeper.connect": zk_connect,
        "broker.id": "1",
        f"{PREFIX}sasl.login.retry.backoff.max.ms": "5000",
    }
    done = serve(tmp_path, props)
    assert done.returncode == 2, done.stderr
    # a refusal retrying cannot mend: one attempt, then the reason and what to check
    assert "attempt 1, failed: HTTP 401" in done.stderr
    assert "attempt 2" not in done.stderr
    assert "cannot get this broker's OAUTHBEARER access token" in done.stderr
    assert "invalid_client - bad client credentials" in done.stderr
    assert f"clientSecret and scope of {PREFIX}sasl.jaas.config" in done.stderr
    assert wrong not in done.stderr
    assert issuer.issued["broker-1"] == 0


def test_allowed_urls_refuse_an_endpoint_not_listed(tmp_path: Path, issuer: Issuer) -> None:
    props = {**properties(issuer, 1, SECRETS[1]), "zookeeper.connect": "127.0.0.1:9/none"}
    # the JWKS allowed, the token endpoint not: refused before anything is opened
    done = serve(tmp_path, props, **{ALLOWED_URLS: issuer.url})
    assert done.returncode == 2, done.stderr
    assert f"sasl.oauthbearer.token.endpoint.url={issuer.token_url} is not allowed" in done.stderr
    assert ALLOWED_URLS in done.stderr
    # Kafka's own spelling, a JVM flag in KAFKA_OPTS, is read too: the JWKS is refused now
    done = serve(tmp_path, props, KAFKA_OPTS=f"-Xmx1g -D{ALLOWED_URLS}={issuer.token_url}")
    assert done.returncode == 2, done.stderr
    assert f"sasl.oauthbearer.jwks.endpoint.url={issuer.url} is not allowed" in done.stderr
    assert issuer.requests == 0 and not issuer.forms


def test_a_client_secret_rotated_at_run_time(
    zk_connect: str, tmp_path: Path, issuer: Issuer
) -> None:
    """The JAAS config set dynamically (a password config) with a new secret: the broker gets a
    token with it at once, in the background; a change that leaves the login alone keeps the
    token."""
    new_secret = "rotated-secret-2-77d1"
    jaas_key = f"{PREFIX}sasl.jaas.config"
    broker_resource, set_op = 4, 0  # Kafka's ConfigResource type and AlterConfigOp codes

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            brokers = [
                await start_broker(
                    nursery,
                    zk_connect,
                    tmp_path,
                    i,
                    **properties(issuer, i, SECRETS[i]),
                    **{"password.encoder.secret": "encoder-secret-31c"},
                )
                for i in (1, 2)
            ]
            b2 = brokers[1]
            await eventually(lambda: b2.broker.controller_id > 0, what="a controller")
            result = await create_topic(b2, "rotated", 1, 2)
            assert result.error_code == 0, result.error_message
            plaintext = {"bootstrap.servers": b2.bootstrap_servers.split(",")[0]}

            def login() -> AccessTokenLogin:
                sasl = b2.broker.peer_security.sasl
                assert sasl is not None and sasl.access_token is not None
                return sasl.access_token

            def alter(name: str, value: str) -> None:
                done = alter_configs(
                    plaintext["bootstrap.servers"], broker_resource, "2", [(name, set_op, value)]
                )
                assert done == (0, None), done

            first = login()
            # a change to the listener that leaves the login alone: the token is kept
            await trio.to_thread.run_sync(
                alter, "listener.name.sasl_plaintext.sasl.enabled.mechanisms", "OAUTHBEARER"
            )
            await eventually(
                lambda: b2.broker.config.get(
                    "listener.name.sasl_plaintext.sasl.enabled.mechanisms"
                ),
                what="the change applied",
            )
            assert login() is first and issuer.issued["broker-2"] == 1
            # the secret rotated at the provider, then in the broker's JAAS config
            issuer.clients["broker-2"] = new_secret
            jaas = properties(issuer, 2, new_secret)[jaas_key]
            await trio.to_thread.run_sync(alter, jaas_key, jaas)
            await eventually(
                lambda: issuer.issued["broker-2"] == 2, what="a token with the new secret"
            )
            # the same login carries on (the controller's channel, made before, holds it too)
            assert login() is first
            await trio.to_thread.run_sync(produce, plaintext, "rotated", 5)
            await replicated(brokers, "rotated", 5)
            nursery.cancel_scope.cancel()

    trio.run(main)
