"""SASL/OAUTHBEARER with secured (OIDC) tokens against a broker process (KIP-768).

The broker verifies tokens with Kafka's OAuthBearerValidatorCallbackHandler settings against a
JWKS served over HTTP by this test (`tests.wirebroker.oidc.Issuer`). Real clients log in: confluent-kafka (librdkafka's `oauth_cb`)
and aiokafka (a token provider). The principal is observed through the ACL authorizer: alice is
the super user, so her produce succeeds and a valid token of bob's is denied the topic. Every
refused token (bad signature, unknown key id, expired, wrong audience, wrong issuer, `alg:
none`) is an authentication failure in the client; a key added to the JWKS is found by the
refresh an unknown key id triggers, as Kafka's RefreshingHttpsJwks; a failed fetch's warning
says what it leaves (no key at start-up, the keys held after a refresh), and a broker whose
provider is gone goes on verifying tokens with the keys held. A JWKS served over https
with a private CA's certificate is trusted through the JAAS entry's `ssl.truststore.*` options.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from confluent_kafka import KafkaError, Producer

from compat.kafka_process import free_port
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.conftest import LOG_TAIL
from tests.wirebroker.helpers import BROKER, SET, alter_configs, eventually
from tests.wirebroker.oidc import AUDIENCE, ISSUER, Issuer
from wirebroker.config import ConfigError
from wirebroker.sasl.jwks import JwksEndpoint, KeySet

pytestmark = pytest.mark.integration

TIMEOUT = 15.0
SECURED = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    idp = Issuer()
    idp.add_key("k1")
    idp.add_key("ec1", curve=True)
    idp.add_key("unpublished", publish=False)
    yield idp
    idp.close()


def properties(jwks_url: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": SECURED,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        ),
        "sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "sasl.oauthbearer.expected.audience": f"other,{AUDIENCE}",
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:alice",
        "connection.failed.authentication.delay.ms": "0",
    }


@pytest.fixture(scope="module")
def broker(issuer: Issuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker"), properties(issuer.url))
    with serving(process, LOG_TAIL) as b:
        yield b


@pytest.fixture(autouse=True)
def _no_token_in_the_log(broker: BrokerProcess) -> Iterator[None]:
    yield
    for line in broker.log:
        assert "eyJ" not in line, line  # a JWS's base64url JSON header never reaches the log


def librdkafka(
    broker: BrokerProcess, token: str, errors: list[KafkaError], listener: str = "SASL_PLAINTEXT"
) -> Producer:
    def oauth_cb(_config: str) -> tuple[str, float, str]:
        return token, time.time() + 600, "alice"

    return Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": oauth_cb,
            "error_cb": errors.append,
            "message.timeout.ms": int(TIMEOUT * 1000),
        }
    )


def produce(
    broker: BrokerProcess, token: str, topic: str, listener: str = "SASL_PLAINTEXT"
) -> tuple[KafkaError | None, list[Any]]:
    """Produce one record with `token` on `listener`: the delivery error (None: written) and
    client errors."""
    errors: list[KafkaError] = []
    producer = librdkafka(broker, token, errors, listener)
    delivered: list[KafkaError | None] = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda e, _m: delivered.append(e))
    deadline = time.monotonic() + TIMEOUT
    while not delivered and time.monotonic() < deadline:
        producer.poll(0.1)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            break
    producer.purge()
    producer.flush(1)
    return (delivered[0] if delivered else None), errors


def authentication_fails(broker: BrokerProcess, token: str) -> None:
    """librdkafka's first login with `token` fails as Kafka's refusal of a token does."""
    errors: list[KafkaError] = []
    producer = librdkafka(broker, token, errors)
    deadline = time.monotonic() + TIMEOUT
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "invalid_token" in errors[0].str(), errors[0].str()


def test_valid_token_logs_in_as_its_sub_claim(broker: BrokerProcess, issuer: Issuer) -> None:
    topic = f"oidc-{uuid.uuid4().hex[:8]}"
    error, client_errors = produce(broker, issuer.token("alice"), topic)
    assert error is None, (error, client_errors)
    # an EC key verifies too (ES256)
    error, client_errors = produce(broker, issuer.token("alice", kid="ec1"), topic)
    assert error is None, (error, client_errors)
    # bob's token is valid, but bob is not the super user: the principal is the sub claim
    error, client_errors = produce(broker, issuer.token("bob"), topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (
        error,
        client_errors,
    )


def test_aiokafka_token_provider(broker: BrokerProcess, issuer: Issuer) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):
        async def token(self) -> str:
            return issuer.token("alice")

    async def send() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Tokens(),
        )
        await producer.start()
        try:
            await producer.send_and_wait(f"oidc-aio-{uuid.uuid4().hex[:8]}", b"v", partition=0)
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(send(), TIMEOUT))


def unsigned(token: str) -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"none","kid":"k1"}').rstrip(b"=").decode()
    return f"{header}.{token.split('.')[1]}."


@pytest.mark.parametrize(
    "case",
    ["bad signature", "expired", "wrong audience", "no audience", "wrong issuer", "alg none"],
)
def test_refused_tokens_fail_authentication(
    broker: BrokerProcess, issuer: Issuer, case: str
) -> None:
    good = issuer.token("alice")
    token = {
        "bad signature": lambda: good[:-8] + ("A" * 8 if not good.endswith("A" * 8) else "B" * 8),
        "expired": lambda: issuer.token("alice", iat=1_700_000_000, exp=1_700_000_600),
        "wrong audience": lambda: issuer.token("alice", aud="someone-else"),
        "no audience": lambda: issuer.token("alice", aud=[]),
        "wrong issuer": lambda: issuer.token("alice", iss="https://evil.example"),
        "alg none": lambda: unsigned(good),
    }[case]()
    since = len(broker.log)
    authentication_fails(broker, token)
    assert broker.wait_for_log("OAUTHBEARER token refused", since=since)


def test_unknown_kid_refreshes_the_jwks_and_finds_a_rotated_key(
    broker: BrokerProcess, issuer: Issuer
) -> None:
    # a key the issuer never published: the refresh it triggers finds nothing
    since, before = len(broker.log), issuer.requests
    authentication_fails(broker, issuer.token("alice", kid="unpublished"))
    assert broker.wait_for_log("verification key(s)", since=since)
    assert issuer.requests > before
    # the same unknown key id again within a minute: refused, and no fetch (rate limited)
    fetched = issuer.requests
    authentication_fails(broker, issuer.token("alice", kid="unpublished"))
    assert issuer.requests == fetched
    # a new key published (rotation): the first token naming it triggers the refresh (and
    # fails, as Kafka's); once the refresh is in, its tokens log in
    issuer.add_key("k2")
    since = len(broker.log)
    authentication_fails(broker, issuer.token("alice", kid="k2"))
    assert broker.wait_for_log("verification key(s) (k1, ec1, k2)", since=since)
    error, client_errors = produce(broker, issuer.token("alice", kid="k2"), "oidc-rotated")
    assert error is None, (error, client_errors)


def alice_produces(log_dir: Path, props: dict[str, str], token: str, topic: str) -> None:
    """A broker started with `props` takes alice's `token`: her record is written."""
    with serving(BrokerProcess(log_dir, props), LOG_TAIL) as b:
        error, client_errors = produce(b, token, topic)
        assert error is None, (error, client_errors)


def jwks_refused(log_dir: Path, props: dict[str, str], backoff_max_ms: int) -> str:
    """The stderr of `wirebroker serve` with `props`, which must refuse to start (exit status
    2) because it cannot fetch its JWKS (retrying for `backoff_max_ms`)."""
    props = {**props, "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": str(backoff_max_ms)}
    command = [sys.executable, "-m", "wirebroker", "serve", "--log-dirs", str(log_dir)]
    command += ["--listeners", props.pop("listeners")]
    command += [arg for k, v in props.items() for arg in ("--override", f"{k}={v}")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "cannot fetch the JWKS of sasl.oauthbearer.jwks.endpoint.url" in done.stderr
    return done.stderr


def test_jwks_from_a_file_and_a_broker_that_cannot_fetch_its_jwks(
    issuer: Issuer, tmp_path: Path
) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(issuer.jwks()))
    alice_produces(tmp_path / "file", properties(jwks.as_uri()), issuer.token("alice"), "oidc-file")
    # nothing listens on port 9: the broker retries, then refuses to start and says why
    stderr = jwks_refused(tmp_path / "m", properties("http://127.0.0.1:9/jwks"), 300)
    assert "attempt 2, failed" in stderr  # retried
    # the last attempt says what it leaves: no key (there was none to keep)
    assert "giving up: no key is held yet" in stderr and "keeping" not in stderr


def test_a_failed_fetch_says_whether_it_keeps_keys(caplog: pytest.LogCaptureFixture) -> None:
    """A failed first fetch gives up holding no key (the broker does not start, as Kafka's
    RefreshingHttpsJwks.init fails); a failed refresh keeps the keys it had and names them
    (Kafka's "not updating local JWKS cache"), or says it still holds none."""
    with_key, without = Issuer(), Issuer()
    with_key.add_key("k1")

    def failures() -> list[str]:
        return [r.getMessage() for r in caplog.records if ", failed: " in r.getMessage()]

    async def refresh_fails(idp: Issuer) -> str:
        """The warning of a refresh of `idp`'s keys once `idp` is gone (tried once)."""
        keys = KeySet(JwksEndpoint(idp.url, 3_600_000, 10, 0))
        async with trio.open_nursery() as nursery:
            await nursery.start(keys.run)
            seen = len(failures())
            idp.close()
            assert keys.candidates("k2", "RS256") == []  # an unknown key id: a refresh now
            await eventually(
                lambda: len(failures()) > seen, TIMEOUT, 0.01, "the failed refresh's warning"
            )
            nursery.cancel_scope.cancel()
        return failures()[-1]

    async def main() -> None:
        with pytest.raises(ConfigError, match="cannot fetch the JWKS"):
            await KeySet(JwksEndpoint("http://127.0.0.1:9/jwks", 3_600_000, 10, 0)).run()
        first = failures()[-1]
        assert first.startswith("JWKS fetch of http://127.0.0.1:9/jwks, attempt 1, failed: ")
        assert first.endswith("; giving up: no key is held yet")
        held = await refresh_fails(with_key)
        assert held.startswith(f"JWKS fetch of {with_key.url}, attempt 1, failed: ")
        assert held.endswith("; keeping the 1 key(s) held (k1)")
        none = await refresh_fails(without)  # its set had no key
        assert none.endswith("; still holding no key: tokens are refused until a refresh finds one")

    caplog.set_level(logging.WARNING, logger="wirebroker.sasl.provider")
    try:
        trio.run(main)
    finally:
        with_key.close()
        without.close()


@pytest.mark.timeout(60)
def test_a_broker_whose_provider_is_gone_still_verifies_with_the_keys_held(
    tmp_path: Path,
) -> None:
    """What the warning says is so: the provider gone after start-up, the broker's scheduled
    refresh fails (retried, then "keeping the 1 key(s) held") and tokens its keys verify still
    log in."""
    own = Issuer()  # its fetches this broker's alone
    own.add_key("k1")
    props = {
        **properties(own.url),
        "sasl.oauthbearer.jwks.endpoint.refresh.ms": "300",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "200",
    }
    with serving(BrokerProcess(tmp_path, props), LOG_TAIL) as broker:
        own.close()
        line = broker.wait_for_log("; keeping the 1 key(s) held (k1)", timeout=TIMEOUT)
        assert line is not None and "failed" in line, line
        error, client_errors = produce(broker, own.token("alice"), "oidc-kept")
        assert error is None, (error, client_errors)


def oidc_listener(broker: BrokerProcess, port: int, jwks_url: str, **more: str) -> list[Any]:
    """The IncrementalAlterConfigs operations adding listener OIDC (SASL_PLAINTEXT, secured
    OAUTHBEARER tokens) at `port` with a JWKS endpoint of its own (and `more` of its
    `sasl.oauthbearer.*` settings)."""
    prefix = "listener.name.oidc.oauthbearer."
    return [
        ("listeners", SET, f"PLAINTEXT://127.0.0.1:{broker.port},OIDC://127.0.0.1:{port}"),
        ("listener.security.protocol.map", SET, "PLAINTEXT:PLAINTEXT,OIDC:SASL_PLAINTEXT"),
        ("listener.name.oidc.sasl.enabled.mechanisms", SET, "OAUTHBEARER"),
        (f"{prefix}sasl.server.callback.handler.class", SET, SECURED),
        (
            f"{prefix}sasl.jaas.config",
            SET,
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        ),
        (f"{prefix}sasl.oauthbearer.jwks.endpoint.url", SET, jwks_url),
        (f"{prefix}sasl.oauthbearer.expected.audience", SET, AUDIENCE),
        (f"{prefix}sasl.oauthbearer.expected.issuer", SET, ISSUER),
        *((f"{prefix}sasl.oauthbearer.{k.replace('_', '.')}", SET, v) for k, v in more.items()),
    ]


@pytest.mark.timeout(120)
def test_a_listener_added_at_run_time_fetches_its_own_jwks(tmp_path: Path) -> None:
    """A SASL listener added by AlterConfigs with a JWKS endpoint of its own
    (`listener.name.oidc.oauthbearer.sasl.oauthbearer.jwks.endpoint.url`) verifies tokens at
    once, as Kafka's new listener's callback handler fetches its keys: no restart. Removed, its
    endpoint is no longer refreshed, as Kafka closes the removed listener's handler."""
    props = {"password.encoder.secret": "encoder-secret-9"}
    own = Issuer()  # its fetches this broker's alone
    own.add_key("k1")
    with serving(BrokerProcess(tmp_path, props), LOG_TAIL) as broker, closing(own):
        port = free_port()
        operations = oidc_listener(broker, port, own.url, jwks_endpoint_refresh_ms="300")
        assert alter_configs(broker.bootstrap, BROKER, "0", operations) == (ErrorCode.NONE, None)
        broker.ports["OIDC"] = port
        assert broker.wait_for_log("listener OIDC://") is not None  # added: accepting
        error, client_errors = produce(broker, own.token("alice"), "oidc-added", "OIDC")
        assert error is None, (error, client_errors)

        # removed: its JWKS is no longer fetched (it was, every 300 ms)
        removal = [("listeners", SET, f"PLAINTEXT://127.0.0.1:{broker.port}")]
        assert alter_configs(broker.bootstrap, BROKER, "0", removal) == (ErrorCode.NONE, None)
        assert broker.wait_for_log("no listener uses it, not refreshed") is not None
        time.sleep(0.5)  # (a fetch under way when it was removed may still arrive)
        fetched = own.requests
        time.sleep(1.5)  # five refresh intervals: none may come
        assert own.requests == fetched


@pytest.mark.timeout(120)
def test_a_listener_added_whose_jwks_cannot_be_fetched_is_not_started(tmp_path: Path) -> None:
    """As Kafka, whose new listener's callback handler fails to configure without its keys:
    the listener is not started (logged as Kafka's "Unable to start acceptor"), the broker
    goes on serving its other listeners."""
    props = {"password.encoder.secret": "encoder-secret-9"}
    with serving(BrokerProcess(tmp_path, props), LOG_TAIL) as broker:
        port = free_port()
        operations = oidc_listener(  # nothing listens on port 9
            broker, port, "http://127.0.0.1:9/jwks", jwks_endpoint_retry_backoff_max_ms="300"
        )
        assert alter_configs(broker.bootstrap, BROKER, "0", operations) == (ErrorCode.NONE, None)
        line = broker.wait_for_log("Unable to start acceptor for OIDC", timeout=30)
        assert line is not None and "cannot fetch the JWKS" in line, line
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        # the broker goes on: a config change is answered
        removal = [("listeners", SET, f"PLAINTEXT://127.0.0.1:{broker.port}")]
        assert alter_configs(broker.bootstrap, BROKER, "0", removal) == (ErrorCode.NONE, None)


def test_a_jwks_over_https_from_a_private_ca_and_the_jaas_truststore_option(
    issuer: Issuer, tmp_path: Path
) -> None:
    """The JAAS entry's `ssl.truststore.*` options trust the provider's private CA (Kafka's
    JaasOptionsUtils); without them the broker refuses to start and names the option."""
    ca = trustme.CA()
    https = Issuer(ca.issue_cert("127.0.0.1"))
    https.private, https.published = issuer.private, ["k1"]
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    jaas_key = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"
    try:
        trusting = {
            **properties(https.url),
            jaas_key: (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                f'ssl.truststore.location="{tmp_path / "ca.pem"}" ssl.truststore.type="PEM";'
            ),
        }
        alice_produces(tmp_path / "trusting", trusting, issuer.token("alice"), "oidc-https")
        stderr = jwks_refused(tmp_path / "u", properties(https.url), 0)
        assert f"set the ssl.truststore.location option of {jaas_key}" in stderr
    finally:
        https.close()
