"""A keystore holding several keys, served as Kafka serves it: the JDK's TLS server with the key
manager Kafka makes by default (KeystoreServer.java: SunX509, which for each key type a handshake
asks for takes the first of its aliases in its HashMap's order) and a broker's SSL listener given
the same keytool-made PKCS12 and JKS stores (two RSA and two EC keys) answer the same clients
with the same certificate: TLS 1.3 with OpenSSL's signature algorithms (ECDSA first), TLS 1.2
with only ECDSA suites, TLS 1.2 with only RSA ones."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

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


@pytest.fixture
def java_server(request: pytest.FixtureRequest, stores: dict[str, Path]) -> Iterator[int]:
    kind = request.param
    assert JAVA is not None
    proc = subprocess.Popen(
        [JAVA, str(_SERVER), kind, str(stores[kind]), PASSWORD],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait(timeout=30)


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
