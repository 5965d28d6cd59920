"""A keystore holding several keys, served as Kafka serves it: the JDK's TLS server with the key
manager Kafka makes by default (KeystoreServer.java: SunX509, which for each key type a handshake
asks for takes the first of its aliases in its HashMap's order) and a broker's SSL listener given
the same keytool-made PKCS12 and JKS stores (two RSA and two EC keys) answer the same clients
with the same certificate: TLS 1.3 with OpenSSL's signature algorithms (ECDSA first), TLS 1.2
with only ECDSA suites, TLS 1.2 with only RSA ones. A PKCS12 store of one key among other
certificates is served with the chain Java builds, and its key read with `ssl.key.password`, as
Kafka reads it."""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.broker_process import BrokerProcess, serving

JAVA = shutil.which("java")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        JAVA is None or shutil.which("keytool") is None, reason="needs the JDK (java, keytool)"
    ),
]
PASSWORD = "store-secret"
_SERVER = Path(__file__).with_name("KeystoreServer.java")
#: Clients by what they offer: (TLS 1.2 cipher suites or None for OpenSSL's, highest version).
CLIENTS = {
    "tls13": (None, ssl.TLSVersion.TLSv1_3),
    "tls12-ecdsa": ("ECDHE-ECDSA-AES128-GCM-SHA256", ssl.TLSVersion.TLSv1_2),
    "tls12-rsa": ("ECDHE-RSA-AES128-GCM-SHA256", ssl.TLSVersion.TLSv1_2),
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """PKCS12 and JKS stores of four keys keytool generated, each its alias as its subject."""
    d = tmp_path_factory.mktemp("keys")
    out = {"PKCS12": d / "keys.p12", "JKS": d / "keys.jks"}
    for kind, path in out.items():
        for alias in ("rsa-a", "ec-b", "rsa-c", "ec-d"):
            algorithm = ["-keyalg", "EC", "-groupname", "secp256r1"] if alias[:2] == "ec" else []
            subprocess.run(
                ["keytool", "-genkeypair", "-alias", alias, *(algorithm or ["-keyalg", "RSA"])]
                + ["-dname", f"CN={alias}", "-validity", "2", "-keystore", str(path)]
                + ["-storetype", kind, "-storepass", PASSWORD, "-keypass", PASSWORD],
                check=True,
                capture_output=True,
                timeout=60,
            )
    return out


def served(port: int, ciphers: str | None, version: ssl.TLSVersion) -> str:
    """The subject of the certificate a handshake with these offers gets."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.maximum_version = version
    if ciphers is not None:
        context.set_ciphers(ciphers)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


@contextmanager
def java_tls_server(*args: str) -> Iterator[int]:
    """KeystoreServer.java's port, given its arguments (type, file, password[, key password])."""
    assert JAVA is not None
    proc = subprocess.Popen([JAVA, str(_SERVER), *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def java_server(request: pytest.FixtureRequest, stores: dict[str, Path]) -> Iterator[int]:
    kind = request.param
    with java_tls_server(kind, str(stores[kind]), PASSWORD) as port:
        yield port


@pytest.mark.parametrize("java_server", ["PKCS12", "JKS"], indirect=True)
def test_the_certificates_served_are_kafkas(
    java_server: int, request: pytest.FixtureRequest, stores: dict[str, Path], tmp_path: Path
) -> None:
    kind = request.node.callspec.params["java_server"]
    expected = {name: served(java_server, *offers) for name, offers in CLIENTS.items()}
    # (Java's choice, stated: ECDSA where the client offers it, each type's alias by its hash)
    assert expected == {"tls13": "CN=ec-d", "tls12-ecdsa": "CN=ec-d", "tls12-rsa": "CN=rsa-a"}
    properties = {
        "ssl.keystore.type": kind,
        "ssl.keystore.location": str(stores[kind]),
        "ssl.keystore.password": PASSWORD,
    }
    with serving(BrokerProcess(tmp_path, properties, extra_listeners=("SSL",))) as broker:
        port = broker.ports["SSL"]
        assert {name: served(port, *offers) for name, offers in CLIENTS.items()} == expected


@pytest.fixture(scope="module")
def one_key_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PKCS12 store of one key, issued by a CA, with the CA's certificate and an unrelated
    CA's among its certificates (as `openssl pkcs12 -export -certfile` of a bundle makes it)."""
    ca, other = trustme.CA(), trustme.CA()
    leaf = ca.issue_cert("localhost")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    certificates = [
        x509.load_pem_x509_certificate(pem.bytes())
        for pem in (leaf.cert_chain_pems[0], other.cert_pem, ca.cert_pem)
    ]
    path = tmp_path_factory.mktemp("one-key") / "one-key.p12"
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"leaf",
            key,  # type: ignore[arg-type]
            certificates[0],
            certificates[1:],
            serialization.BestAvailableEncryption(PASSWORD.encode()),
        )
    )
    return path


def served_chain(port: int) -> list[str]:
    """The subjects of the certificates a TLS server sends, in order (`openssl s_client`: the
    ssl module of Python 3.11 shows only the first)."""
    out = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-showcerts"],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return [
        x509.load_pem_x509_certificate(pem.encode()).subject.rfc4514_string()
        for pem in re.findall(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", out, re.S)
    ]


def test_a_single_key_is_served_with_the_chain_java_builds(
    one_key_store: Path, tmp_path: Path
) -> None:
    with java_tls_server("PKCS12", str(one_key_store), PASSWORD) as port:
        expected = served_chain(port)
    assert len(expected) == 2  # (stated: the key's certificate and its CA, not the other CA)
    properties = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(one_key_store),
        "ssl.keystore.password": PASSWORD,
    }
    with serving(BrokerProcess(tmp_path, properties, extra_listeners=("SSL",))) as broker:
        assert served_chain(broker.ports["SSL"]) == expected


def test_a_pkcs12_key_is_read_with_the_key_password(one_key_store: Path, tmp_path: Path) -> None:
    """Kafka gives its key manager `ssl.key.password` (the store's password without it): a
    PKCS12 key encrypted with the store's password and another `ssl.key.password` is refused
    at start, as the JDK refuses it."""
    assert JAVA is not None
    java = subprocess.run(
        [JAVA, str(_SERVER), "PKCS12", str(one_key_store), PASSWORD, "another-password"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert java.returncode != 0 and "UnrecoverableKeyException" in java.stderr, java.stderr
    properties = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(one_key_store),
        "ssl.keystore.password": PASSWORD,
        "ssl.key.password": "another-password",
    }
    broker = BrokerProcess(tmp_path, properties, extra_listeners=("SSL",))
    try:
        with pytest.raises(
            RuntimeError, match=r"cannot read the key 'leaf' \(ssl.key.password\?\)"
        ):
            broker.start()
    finally:
        broker.kill()  # (started, had it not refused)
