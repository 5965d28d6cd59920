"""SSL listeners: real clients over TLS, keystores of each kind, client authentication.

A CA, a broker certificate for 127.0.0.1/localhost and a client certificate are made at test
time with trustme. One broker serves an SSL listener from a PEM keystore (its key encrypted
with ssl.key.password) without client authentication; another from PKCS12 stores with
ssl.client.auth=required. Both also serve PLAINTEXT (the zero-copy path, untouched). Round trips
of every client over every protocol: test_security_matrix.py.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from protocol.messages.api_versions import ApiVersionsRequest
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import RawClient, create_topic
from tests.wirebroker.pki import KEY_PASSWORD, STORE_PASSWORD, Pki
from tests.wirebroker.secured import AUTHORIZER
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.tls import (
    PrincipalMapper,
    inter_broker_client_context,
    server_context,
    subject_dn,
)

API_VERSIONS = ApiVersionsRequest(client_software_name="tls-test", client_software_version="1")


def _started(tmp: Path, properties: dict[str, str]) -> Iterator[BrokerProcess]:
    with serving(BrokerProcess(tmp, properties, extra_listeners=("SSL",))) as process:
        yield process


@pytest.fixture(scope="module")
def pem_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """SSL from a PEM keystore whose key is encrypted; no client authentication."""
    yield from _started(
        tmp_path_factory.mktemp("pem-broker"),
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server_pem),
            "ssl.key.password": KEY_PASSWORD,
        },
    )


@pytest.fixture(scope="module")
def mtls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """SSL from PKCS12 stores, given per listener; client certificates required."""
    prefix = "listener.name.ssl."
    yield from _started(
        tmp_path_factory.mktemp("mtls-broker"),
        {
            "ssl.keystore.location": "/nonexistent/overridden-per-listener.p12",
            prefix + "ssl.keystore.type": "PKCS12",
            prefix + "ssl.keystore.location": str(pki.server_p12),
            prefix + "ssl.keystore.password": STORE_PASSWORD,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(pki.trust_p12),
            "ssl.truststore.password": STORE_PASSWORD,
            "ssl.client.auth": "required",
        },
    )


def _ssl_bootstrap(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['SSL']}"


def _confluent_roundtrip(broker: BrokerProcess, topic: str, tls: dict[str, str]) -> list[bytes]:
    create_topic(broker.bootstrap, topic)
    common = {"security.protocol": "SSL", **tls}  # `tls` may name another listener
    if "bootstrap.servers" not in common:
        common["bootstrap.servers"] = _ssl_bootstrap(broker)
    producer = Producer({**common, "linger.ms": 0})
    values = [f"secret-{i}".encode() * 50 for i in range(20)]
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**common, "group.id": topic, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message.value())
            if len(got) == len(values):
                break
    finally:
        consumer.close()
    assert got == values
    return got


@pytest.mark.integration
def test_confluent_over_ssl_pkcs12_with_client_certificate(
    mtls_broker: BrokerProcess, pki: Pki, topic: str
) -> None:
    _confluent_roundtrip(
        mtls_broker,
        topic,
        {
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
        },
    )


def _tls_client(
    broker: BrokerProcess, pki: Pki, *, with_certificate: bool
) -> tuple[RawClient, ssl.SSLContext]:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if with_certificate:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    client = RawClient(_ssl_bootstrap(broker))
    client.sock = context.wrap_socket(client.sock, server_hostname="localhost")
    return client, context


@pytest.mark.integration
def test_required_client_auth_refuses_a_client_without_certificate(
    mtls_broker: BrokerProcess, pki: Pki
) -> None:
    since = len(mtls_broker.log)
    refused = False
    try:
        client, _ = _tls_client(mtls_broker, pki, with_certificate=False)
        # TLS 1.3: the client's side of the handshake ends before the broker checks it.
        with client:
            client.request(API_VERSIONS, 3)
    except (ssl.SSLError, ConnectionError, OSError):
        refused = True
    assert refused
    line = mtls_broker.wait_for_log("TLS handshake failed", since=since)
    assert line is not None and "127.0.0.1:" in line
    # A certificate from a CA the truststore does not hold is refused alike.
    stranger = trustme.CA().issue_cert("stranger.example", common_name="stranger")
    context = ssl.create_default_context(cafile=str(pki.ca))
    with stranger.private_key_and_cert_chain_pem.tempfile() as pem:
        context.load_cert_chain(pem)
    with pytest.raises(OSError), RawClient(_ssl_bootstrap(mtls_broker)) as untrusted:
        untrusted.sock = context.wrap_socket(untrusted.sock, server_hostname="localhost")
        untrusted.request(API_VERSIONS, 3)  # SSLError, or the broker's close
    # The same listener serves a client with a certificate.
    client, _ = _tls_client(mtls_broker, pki, with_certificate=True)
    with client:
        assert client.request(API_VERSIONS, 3).error_code == 0


@pytest.mark.integration
def test_garbage_instead_of_a_handshake_closes_only_that_connection(
    pem_broker: BrokerProcess, pki: Pki
) -> None:
    since = len(pem_broker.log)
    with (
        RawClient(pem_broker.bootstrap) as plain,
        socket.create_connection(("127.0.0.1", pem_broker.ports["SSL"]), timeout=10) as garbage,
    ):
        garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 4)
        garbage.settimeout(10)
        while garbage.recv(4096):  # a TLS alert perhaps, then EOF
            pass
        assert plain.request(API_VERSIONS, 3).error_code == 0
    client, _ = _tls_client(pem_broker, pki, with_certificate=False)
    with client:
        assert client.request(API_VERSIONS, 3).error_code == 0
        # Garbage after the handshake, beside the TLS records: that connection ends too.
        os.write(client.sock.fileno(), b"\x17\x03\x03\x00\x20" + bytes(32))
        assert client.wait_closed()
    line = pem_broker.wait_for_log("TLS handshake failed", since=since)
    assert line is not None and "127.0.0.1:" in line
    assert not pem_broker.tracebacks()


@pytest.mark.integration
def test_close_notify_ends_the_connection(pem_broker: BrokerProcess, pki: Pki) -> None:
    """A client's close_notify (librdkafka sends one closing its bootstrap connection) ends that
    connection; the broker goes on serving."""
    client, _ = _tls_client(pem_broker, pki, with_certificate=False)
    with client:
        assert client.request(API_VERSIONS, 3).error_code == 0
        assert isinstance(client.sock, ssl.SSLSocket)
        client.sock.settimeout(10)
        # unwrap sends close_notify and waits for the broker's: the broker just closes.
        with pytest.raises(ssl.SSLEOFError):
            client.sock.unwrap()
    with RawClient(pem_broker.bootstrap) as plain:
        assert plain.request(API_VERSIONS, 3).error_code == 0


@pytest.mark.integration
def test_passwords_are_described_as_null_and_sensitive(pem_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": pem_broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    key_password = configs["ssl.key.password"]
    assert key_password.is_sensitive and key_password.value is None
    assert configs["ssl.keystore.location"].value is not None
    assert not configs["ssl.keystore.location"].is_sensitive
    assert all(KEY_PASSWORD not in line for line in pem_broker.log)


#: Kafka's name for a client whose subject is CN=alice, emailAddress=alice@example.com, O=a=b:
#: Java's X500Principal.getName() (RFC 2253), an attribute without an RFC 2253 keyword as its
#: OID and the hex of its encoding, `=` escaped (test_keystore_entries.py checks the form
#: against the JDK).
ALICE = r"O=a\=b,1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,CN=alice"


@pytest.mark.integration
def test_a_client_certificate_names_the_principal_kafka_names(pki: Pki, tmp_path: Path) -> None:
    """A client whose certificate's subject has an emailAddress is the super user named as
    Kafka names it, so the ACLs and mapping rules written for Kafka apply."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "email CA")])
    now = datetime.datetime.now(datetime.UTC)

    def issued(subject: x509.Name, public_key: ec.EllipticCurvePublicKey, ca: bool) -> bytes:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
            .public_bytes(serialization.Encoding.PEM)
        )

    (tmp_path / "ca.pem").write_bytes(issued(ca_name, ca_key.public_key(), True))
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "alice@example.com"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "a=b"),
        ]
    )
    (tmp_path / "alice.pem").write_bytes(issued(subject, key.public_key(), False))
    (tmp_path / "alice.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    properties = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_pem),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tmp_path / "ca.pem"),
        "ssl.client.auth": "required",
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:{ALICE}",
    }
    with serving(BrokerProcess(tmp_path / "broker", properties, extra_listeners=("SSL",))) as b:
        admin = AdminClient(
            {
                "bootstrap.servers": _ssl_bootstrap(b),
                "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca),
                "ssl.certificate.location": str(tmp_path / "alice.pem"),
                "ssl.key.location": str(tmp_path / "alice.key"),
            }
        )
        (created,) = admin.create_topics([NewTopic("by-alice", 1, 1)]).values()
        assert created.result(30) is None  # TOPIC_AUTHORIZATION_FAILED under another name


# without a broker ---------------------------------------------------------------------------
def test_principal_mapping_rules() -> None:
    mapper = PrincipalMapper(
        r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=([a-z]+)-\d,O=(.*)$/$2\/$1/L, DEFAULT"
    )
    assert mapper.name("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert mapper.name("CN=client-1,O=Tests") == "tests/client"
    assert mapper.name("CN=other,O=X") == "CN=other,O=X"
    lines = PrincipalMapper("RULE:^CN=([^,]*),.*$/$1/\n  DEFAULT")
    assert [lines.name("CN=a,O=b"), lines.name("O=b")] == ["a", "O=b"]
    only = PrincipalMapper("RULE:^CN=(.*)$/$1/U")
    assert only.name("CN=admin") == "ADMIN"
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules rule"):
        only.name("O=nobody")
    with pytest.raises(ConfigError, match="cannot parse"):
        PrincipalMapper("RULE:broken")


def test_subject_dn_is_rfc2253(pki: Pki) -> None:
    assert subject_dn(pki.client_der) == "CN=client-1,OU=Ops,O=Tests"


def test_a_malformed_jks_or_mistyped_keystore_says_what_to_do(pki: Pki, tmp_path: Path) -> None:
    # A JKS store of version 0 whose digest is right (JKS stores: test_tls_jks.py).
    body = b"\xfe\xed\xfe\xed" + bytes(8)
    digest = hashlib.sha1(STORE_PASSWORD.encode("utf-16-be") + b"Mighty Aphrodite" + body)
    jks = tmp_path / "broker.jks"
    jks.write_bytes(body + digest.digest())
    for store, match in [
        (jks, "JKS version 0 is not 1 or 2 .or convert it to PKCS12: `keytool -importkeystore"),
        (pki.server_pem, "the store is PEM text: set ssl.keystore.type=PEM"),
    ]:
        config = BrokerConfig.from_properties(
            {
                "listeners": "SSL://127.0.0.1:0",
                "ssl.keystore.location": str(store),
                "ssl.keystore.password": STORE_PASSWORD,
            }
        )
        with pytest.raises(ConfigError, match=match):
            server_context(config, "SSL")


def test_inline_pem_keystore_and_protocols(pki: Pki) -> None:
    text = pki.server_pem.read_text()
    begin = text.index("-----BEGIN CERTIFICATE-----")
    config = BrokerConfig.from_properties(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": text[:begin],
            "ssl.keystore.certificate.chain": text[begin:],
            "ssl.key.password": KEY_PASSWORD,
            "ssl.enabled.protocols": "TLSv1.3",
            "ssl.client.auth": "requested",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": pki.ca.read_text(),
        }
    )
    context, _ = server_context(config, "SSL")
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert context.verify_mode == ssl.CERT_OPTIONAL
    with pytest.raises(ConfigError, match="ssl.key.password"):
        server_context(
            BrokerConfig.from_properties({**config.values, "ssl.key.password": "wrong"}), "SSL"
        )


def test_inter_broker_client_context(pki: Pki) -> None:
    stores = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }
    plain = BrokerConfig.from_properties(stores)
    assert plain.inter_broker_listener() is None
    assert inter_broker_client_context(plain) is None
    # security.inter.broker.protocol names the listener when inter.broker.listener.name is unset.
    config = BrokerConfig.from_properties({**stores, "security.inter.broker.protocol": "SSL"})
    assert config.inter_broker_listener() == "SSL"
    context = inter_broker_client_context(config)
    assert context is not None and context.check_hostname
    unchecked = BrokerConfig.from_properties(
        {**config.values, "listener.name.ssl.ssl.endpoint.identification.algorithm": ""}
    )
    context = inter_broker_client_context(unchecked)
    assert context is not None and not context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_cipher_suites_by_iana_or_openssl_name(pki: Pki) -> None:
    base = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_pem),
        "ssl.key.password": KEY_PASSWORD,
    }
    suites = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, ECDHE-ECDSA-AES256-GCM-SHA384"
    context, _ = server_context(
        BrokerConfig.from_properties({**base, "ssl.cipher.suites": suites}), "SSL"
    )
    tls12 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384"}
    with pytest.raises(ConfigError, match="TLS_AES_128_GCM_SHA256 is not a TLS 1.2 suite"):
        server_context(
            BrokerConfig.from_properties({**base, "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}),
            "SSL",
        )
