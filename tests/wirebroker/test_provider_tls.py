"""The identity provider over https (a private CA made with trustme) and its redirects, for
this broker's token (the client credentials POST) and the JWKS (GET), fetched as the broker's
worker threads fetch them: TLS from the JAAS entry's `ssl.*` options (PEM and PKCS12
truststores; none: the system's CAs, which refuse the private CA and say which option to set),
the host name checked, and Java's HttpURLConnection's redirects. Against a broker process:
tests/wirebroker/test_oauthbearer_oidc.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.wirebroker.oidc import Issuer
from tests.wirebroker.pki import STORE_PASSWORD
from wirebroker.config import ConfigError
from wirebroker.sasl.access_token import AccessTokenLogin, TokenEndpoint, fetch_access_token
from wirebroker.sasl.jwks import fetch_jwks
from wirebroker.sasl.provider import FetchError, ProviderTls

pytestmark = pytest.mark.timeout(30)

JAAS_KEY = "listener.name.internal.oauthbearer.sasl.jaas.config"
SECRET = "client-secret-7f2"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def https(ca: trustme.CA) -> Iterator[Issuer]:
    idp = Issuer(ca.issue_cert("127.0.0.1"))
    idp.add_key("k1")
    idp.clients["broker"] = SECRET
    yield idp
    idp.close()


@pytest.fixture
def trusted(ca: trustme.CA, tmp_path: Path) -> ProviderTls:
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    options = {"ssl.truststore.location": str(tmp_path / "ca.pem"), "ssl.truststore.type": "PEM"}
    return ProviderTls({**options, "clientId": "broker"}, JAAS_KEY)


def endpoint(url: str, tls: ProviderTls) -> TokenEndpoint:
    return TokenEndpoint(url, "broker", SECRET, jaas_key=JAAS_KEY, tls=tls, read_timeout_ms=5000)


def fetch(url: str, tls: ProviderTls) -> str:
    return fetch_access_token(endpoint(url, tls), 0).principal


def test_the_truststore_option_trusts_the_providers_ca(https: Issuer, trusted: ProviderTls) -> None:
    assert fetch(https.token_url, trusted) == "broker"
    assert [k.key_id for k in fetch_jwks(https.url, trusted)] == ["k1"]
    assert [k for k, _ in trusted.options] == ["ssl.truststore.location", "ssl.truststore.type"]


def test_a_pkcs12_truststore_with_its_password(
    https: Issuer, ca: trustme.CA, tmp_path: Path
) -> None:
    cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    store = tmp_path / "trust.p12"
    store.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(cert, b"ca")],
            serialization.BestAvailableEncryption(STORE_PASSWORD.encode()),
        )
    )
    tls = ProviderTls(
        {
            "ssl.truststore.location": str(store),
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.password": STORE_PASSWORD,
        },
        JAAS_KEY,
    )
    assert [k.key_id for k in fetch_jwks(https.url, tls)] == ["k1"]
    assert STORE_PASSWORD not in repr(tls) and STORE_PASSWORD not in repr(endpoint("x", tls))


def test_without_a_truststore_the_private_ca_is_refused_naming_the_option(https: Issuer) -> None:
    with pytest.raises(FetchError) as refused:
        fetch(https.token_url, ProviderTls({}, JAAS_KEY))
    assert "not trusted by the system's trusted CAs" in str(refused.value)
    assert f"set the ssl.truststore.location option of {JAAS_KEY}" in str(refused.value)
    with pytest.raises(FetchError, match="ssl.truststore.location option"):
        fetch_jwks(https.url, ProviderTls({}, JAAS_KEY))


def test_the_host_name_is_checked_even_without_endpoint_identification(
    ca: trustme.CA, trusted: ProviderTls
) -> None:
    other = Issuer(ca.issue_cert("idp.example"))
    try:
        tls = ProviderTls(
            {**dict(trusted.options), "ssl.endpoint.identification.algorithm": ""}, JAAS_KEY
        )
        with pytest.raises(FetchError, match="not for 127.0.0.1"):
            fetch_jwks(other.url, tls)
    finally:
        other.close()


def test_a_bad_truststore_option_is_not_retried(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a store")
    tls = ProviderTls({"ssl.truststore.location": str(tmp_path / "ca.pem")}, JAAS_KEY)
    with pytest.raises(FetchError) as refused:
        fetch_jwks("https://127.0.0.1:9/jwks", tls)
    assert not refused.value.retryable


def test_a_tls_failure_at_start_up_does_not_blame_the_credentials(
    https: Issuer, tmp_path: Path
) -> None:
    """The broker's first token fetch fails before the provider answered (a truststore that
    cannot be read): it does not start, naming the option, without telling to check the
    clientId, clientSecret and scope (which were not refused)."""
    (tmp_path / "ca.pem").write_text("not a store")
    tls = ProviderTls({"ssl.truststore.location": str(tmp_path / "ca.pem")}, JAAS_KEY)
    login = AccessTokenLogin(endpoint(https.token_url, tls), "INTERNAL")
    requests = len(https.seen)
    with pytest.raises(ConfigError) as refused:
        trio.run(login.run)
    assert f"the ssl.truststore.location option of {JAAS_KEY}" in str(refused.value)
    assert "clientSecret" not in str(refused.value) and SECRET not in str(refused.value)
    assert len(https.seen) == requests


def test_redirects_as_javas_http_url_connection(https: Issuer, trusted: ProviderTls) -> None:
    https.redirects = {
        "/old-token": (307, "/token"),  # the POST is repeated, credentials and all
        "/moved-token": (302, f"{https.base}/token"),  # a POST goes on as a GET: refused
        "/keys": (301, "/hop"),
        "/hop": (303, "/jwks"),
        "/loop": (302, "/loop"),
        "/to-http": (302, "http://127.0.0.1:9/token"),  # no redirect to another scheme
    }
    try:
        https.seen.clear()
        assert fetch(f"{https.base}/old-token", trusted) == "broker"
        assert https.seen == [("POST", "/old-token"), ("POST", "/token")]
        with pytest.raises(FetchError, match="HTTP 405") as refused:
            fetch(f"{https.base}/moved-token", trusted)
        assert not refused.value.retryable
        assert https.seen[-1] == ("GET", "/token")
        assert [k.key_id for k in fetch_jwks(f"{https.base}/keys", trusted)] == ["k1"]
        with pytest.raises(FetchError, match="redirected more than 20 times"):
            fetch_jwks(f"{https.base}/loop", trusted)
        assert https.seen.count(("GET", "/loop")) == 21
        with pytest.raises(FetchError, match="HTTP 302"):
            fetch(f"{https.base}/to-http", trusted)
    finally:
        https.redirects = {}
