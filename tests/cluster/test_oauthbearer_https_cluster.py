"""Brokers that get their own OIDC tokens from an https token endpoint (Kafka's
OAuthBearerLoginCallbackHandler), trusting the identity provider through the `ssl.truststore.*`
options of their OAUTHBEARER JAAS entry (Kafka's JaasOptionsUtils). The inter-broker listener
is SASL_SSL with OAUTHBEARER, its own TLS from the brokers' CA (the `ssl.*` broker keys); the
provider (`tests.wirebroker.oidc.Issuer`, over https from this test) has a certificate from
another CA, which only the JAAS entry's truststore (PKCS12, with a password) holds. Its JWKS,
which verifies the tokens, is fetched over https through the same entry.

- Two brokers replicate a topic (RF 2, acks=all, min.insync.replicas=2): the followers log in
  to their leaders with the tokens fetched over https; neither the client secrets, the
  truststore password nor a token reaches the log.
- A JAAS truststore without the provider's CA (the brokers' own CA): the TLS failure is retried
  as Kafka retries it (an IOException), then the broker refuses to start, saying the provider's
  certificate is not trusted by that truststore and which option to set, no secret in what it
  says (Kafka 3.9 fails its start too: the LoginException of the inter-broker login).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.cluster.harness import start_broker
from tests.cluster.test_oauthbearer_cluster import (
    LOGIN_MODULE,
    SECURED_LOGIN,
    SECURED_VALIDATOR,
    replicate_with_own_tokens,
)
from tests.cluster.test_oauthbearer_cluster import serve as serve_process
from tests.wirebroker.oidc import AUDIENCE, ISSUER, Issuer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRETS = {i: f"https-client-secret-{i}-d00d" for i in (1, 2)}
STORE_PASSWORD = "idp-trust-secret-4e1"
PREFIX = "listener.name.sasl_ssl.oauthbearer."
JAAS_KEY = f"{PREFIX}sasl.jaas.config"


@pytest.fixture
def provider_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def issuer(provider_ca: trustme.CA) -> Iterator[Issuer]:
    idp = Issuer(provider_ca.issue_cert("127.0.0.1"))
    idp.add_key("k1")
    idp.clients = {f"broker-{i}": secret for i, secret in SECRETS.items()}
    yield idp
    idp.close()


def truststore(ca: trustme.CA, path: Path) -> Path:
    """`ca`'s certificate in a PKCS12 truststore at `path`, encrypted with STORE_PASSWORD."""
    cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    path.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(cert, b"ca")],
            serialization.BestAvailableEncryption(STORE_PASSWORD.encode()),
        )
    )
    return path


def properties(
    tmp_path: Path, issuer: Issuer, broker_id: int, provider_trust: Path, jwks_url: str
) -> dict[str, str]:
    """A broker whose SASL_SSL inter-broker listener verifies OIDC tokens and logs in with its
    own, fetched from the https token endpoint through the JAAS entry's `provider_trust`."""
    brokers_ca = tmp_path / "brokers-ca.pem"
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tmp_path / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(brokers_ca),
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        f"{PREFIX}sasl.server.callback.handler.class": SECURED_VALIDATOR,
        f"{PREFIX}sasl.login.callback.handler.class": SECURED_LOGIN,
        JAAS_KEY: (
            f'{LOGIN_MODULE} required clientId="broker-{broker_id}" '
            f'clientSecret="{SECRETS[broker_id]}" scope="kafka" '
            f'ssl.truststore.location="{provider_trust}" ssl.truststore.type="PKCS12" '
            f'ssl.truststore.password="{STORE_PASSWORD}";'
        ),
        "sasl.oauthbearer.jwks.endpoint.url": jwks_url,
        "sasl.oauthbearer.token.endpoint.url": issuer.token_url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "min.insync.replicas": "2",
    }


@pytest.fixture
def brokers_ca(tmp_path: Path) -> trustme.CA:
    """The CA of the brokers' own listener certificates (not the provider's)."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "brokers-ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "broker.pem")
    )
    return ca


def test_brokers_replicate_with_tokens_fetched_over_https(
    zk_connect: str,
    tmp_path: Path,
    issuer: Issuer,
    provider_ca: trustme.CA,
    brokers_ca: trustme.CA,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="wirebroker")
    trust = truststore(provider_ca, tmp_path / "idp-trust.p12")
    props = {i: properties(tmp_path, issuer, i, trust, issuer.url) for i in (1, 2)}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            brokers = [
                await start_broker(nursery, zk_connect, tmp_path, i, **props[i]) for i in props
            ]
            # the followers log in to the leader's SASL_SSL listener with the tokens they
            # got over https
            await replicate_with_own_tokens(brokers, "oidc-https")
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert all(issuer.issued[f"broker-{i}"] >= 1 for i in (1, 2))
    assert issuer.forms and all(
        form == {"grant_type": ["client_credentials"], "scope": ["kafka"]} for form in issuer.forms
    )
    assert "OAUTHBEARER token refused" not in caplog.text
    for secret in (*SECRETS.values(), STORE_PASSWORD):
        assert secret not in caplog.text
    assert "eyJ" not in caplog.text  # a JWS's base64url JSON header: no token in the log


def test_a_truststore_without_the_providers_ca_refuses_to_start(
    zk_connect: str,
    tmp_path: Path,
    issuer: Issuer,
    brokers_ca: trustme.CA,
) -> None:
    # the brokers' CA, not the provider's; the JWKS from a file, so the token fetch is refused
    wrong_trust = truststore(brokers_ca, tmp_path / "brokers-trust.p12")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(issuer.jwks()))
    props = {
        **properties(tmp_path, issuer, 1, wrong_trust, jwks.as_uri()),
        "zookeeper.connect": zk_connect,
        "broker.id": "1",
        f"{PREFIX}sasl.login.retry.backoff.ms": "50",
        f"{PREFIX}sasl.login.retry.backoff.max.ms": "300",
    }
    done = serve_process(tmp_path, props)
    assert done.returncode == 2, done.stderr
    # a handshake that failed is retried, as Kafka's Retry retries its SSLHandshakeException
    assert "attempt 2, failed" in done.stderr
    assert (
        "cannot get this broker's OAUTHBEARER access token from "
        f"sasl.oauthbearer.token.endpoint.url={issuer.token_url}"
    ) in done.stderr
    assert f"the provider's certificate is not trusted by the truststore {wrong_trust}" in (
        done.stderr
    )
    assert f"set the ssl.truststore.location option of {JAAS_KEY}" in done.stderr
    # the one thing to mend: not the client credentials, which were never sent
    assert "check the clientId, clientSecret" not in done.stderr
    for secret in (SECRETS[1], STORE_PASSWORD):
        assert secret not in done.stderr
    assert issuer.issued["broker-1"] == 0 and not issuer.forms
