"""SSL listeners: real clients over TLS, keystores of each kind, client authentication.

A CA, a broker certificate for 127.0.0.1/localhost and a client certificate are made at test
time with trustme. One broker serves an SSL listener from a PEM keystore (its key encrypted
with ssl.key.password) without client authentication; another from PKCS12 stores with
ssl.client.auth=required. Both also serve PLAINTEXT (the zero-copy path, untouched).
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from protocol.messages.api_versions import ApiVersionsRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import RawClient, create_topic, end_offset
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.tls import (
    PrincipalMapper,
    inter_broker_client_context,
    server_context,
    subject_dn,
)
from wirebroker.zookeeper_server import jars_available, java_command

API_VERSIONS = ApiVersionsRequest(client_software_name="tls-test", client_software_version="1")
KEY_PASSWORD = "key-secret"
STORE_PASSWORD = "store-secret"


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate, PEM
    server_pem: Path  # key (encrypted with KEY_PASSWORD) and chain
    server_p12: Path  # PKCS12, STORE_PASSWORD
    trust_p12: Path  # the CA certificate in PKCS12, STORE_PASSWORD
    client_cert: Path
    client_key: Path
    client_pem_keystore: Path  # the client's key and certificate in one PEM file
    client_der: bytes


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    client = ca.issue_cert(  # a SAN, or Java refuses the (empty) extension
        "client-1.example",
        common_name="client-1",
        organization_name="Tests",
        organization_unit_name="Ops",
    )
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
    certs = [x509.load_pem_x509_certificate(b.bytes()) for b in server.cert_chain_pems]
    encrypted = key.private_bytes(  # type: ignore[union-attr]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
    )
    (d / "server.pem").write_bytes(encrypted + b"".join(b.bytes() for b in server.cert_chain_pems))
    store = serialization.BestAvailableEncryption(STORE_PASSWORD.encode())
    (d / "server.p12").write_bytes(
        pkcs12.serialize_key_and_certificates(b"broker", key, certs[0], certs[1:], store)  # type: ignore[arg-type]
    )
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    (d / "trust.p12").write_bytes(
        pkcs12.serialize_key_and_certificates(None, None, None, [ca_cert], store)
    )
    client.cert_chain_pems[0].write_to_path(str(d / "client.pem"))
    client.private_key_pem.write_to_path(str(d / "client.key"))
    client_key = serialization.load_pem_private_key(client.private_key_pem.bytes(), None)
    (d / "client-keystore.pem").write_bytes(  # Java wants the key in PKCS#8
        client_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + client.cert_chain_pems[0].bytes()
    )
    der = x509.load_pem_x509_certificate(client.cert_chain_pems[0].bytes()).public_bytes(
        serialization.Encoding.DER
    )
    return Pki(
        d / "ca.pem",
        d / "server.pem",
        d / "server.p12",
        d / "trust.p12",
        d / "client.pem",
        d / "client.key",
        d / "client-keystore.pem",
        der,
    )


def _started(tmp: Path, properties: dict[str, str]) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp, properties, extra_listeners=("SSL",))
    process.start()
    try:
        yield process
    finally:
        alive = process.alive()
        code = process.stop()
    assert alive and code == 0, "\n".join(process.log[-40:])
    assert not process.tracebacks(), "\n".join(process.log)


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
def test_confluent_over_ssl_pem_keystore(pem_broker: BrokerProcess, pki: Pki, topic: str) -> None:
    _confluent_roundtrip(pem_broker, topic, {"ssl.ca.location": str(pki.ca)})


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


@pytest.mark.integration
def test_kafka_python_over_ssl(pem_broker: BrokerProcess, pki: Pki, topic: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    create_topic(pem_broker.bootstrap, topic)
    common = {
        "bootstrap_servers": _ssl_bootstrap(pem_broker),
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.ca),
    }
    producer = KafkaProducer(**common)
    for i in range(5):
        producer.send(topic, f"kp-{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common
    )
    try:
        got = [m.value for m in consumer][:5]
    finally:
        consumer.close()
    assert got == [f"kp-{i}".encode() for i in range(5)]


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


def test_jks_or_mistyped_keystore_says_what_to_do(pki: Pki, tmp_path: Path) -> None:
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    for store, match in [
        (jks, "keytool -importkeystore"),
        (pki.server_pem, "the store is PEM text: set ssl.keystore.type=PEM"),
    ]:
        config = BrokerConfig.from_properties(
            {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(store)}
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


@pytest.mark.integration
def test_java_producer_over_ssl_with_client_certificate(
    mtls_broker: BrokerProcess, pki: Pki, topic: str, tmp_path: Path
) -> None:
    """Kafka's own client (ProducerPerformance) with PEM stores, host names checked."""
    if not jars_available():
        pytest.skip("no Kafka jars: run `make jars`")
    create_topic(mtls_broker.bootstrap, topic)
    client = tmp_path / "client.properties"
    client.write_text(
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki.ca}\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={pki.client_pem_keystore}\n"
    )
    argv = java_command(
        "org.apache.kafka.tools.ProducerPerformance",
        ["--topic", topic, "--num-records", "200", "--record-size", "100"]
        + ["--throughput", "-1", "--producer.config", str(client)]
        + ["--producer-props", f"bootstrap.servers={_ssl_bootstrap(mtls_broker)}", "acks=all"],
        heap="256m",
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert end_offset(mtls_broker.bootstrap, topic) == 200


@pytest.fixture(scope="module")
def sasl_ssl_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """SASL/PLAIN over TLS: the SASL exchange runs inside the TLS session."""
    yield from _started(
        tmp_path_factory.mktemp("sasl-ssl-broker"),
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki.server_pem),
            "ssl.key.password": KEY_PASSWORD,
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'user_alice="alice-secret";'
            ),
        },
    )


@pytest.mark.integration
def test_confluent_over_sasl_ssl(sasl_ssl_broker: BrokerProcess, pki: Pki, topic: str) -> None:
    """A client that logs in over TLS reads what it wrote; a wrong password gets an
    authentication error, and the password never reaches the broker's log."""
    login = {
        "bootstrap.servers": f"127.0.0.1:{sasl_ssl_broker.ports['SASL_SSL']}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "alice",
    }
    _confluent_roundtrip(sasl_ssl_broker, topic, {**login, "sasl.password": "alice-secret"})
    failures: list[KafkaError] = []
    producer = Producer({**login, "sasl.password": "wrong-secret", "error_cb": failures.append})
    producer.produce(topic, b"never")
    producer.flush(5)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in failures), failures
    assert not any("secret" in line for line in sasl_ssl_broker.log)
