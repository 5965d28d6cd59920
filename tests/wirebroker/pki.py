"""Certificates for the TLS tests, made at test time with trustme: a CA, the broker's
certificate (for localhost and 127.0.0.1) in a PEM keystore whose key is encrypted with
KEY_PASSWORD and in PKCS12 stores (STORE_PASSWORD), and a client certificate
(`CN=client-1,OU=Ops,O=Tests`) in the files each client wants."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

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


def pkcs12_keystore(cert: trustme.LeafCert, password: str) -> bytes:
    """A PKCS12 keystore of `cert`'s key and chain, encrypted with `password`."""
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    chain = [x509.load_pem_x509_certificate(b.bytes()) for b in cert.cert_chain_pems]
    store = serialization.BestAvailableEncryption(password.encode())
    return pkcs12.serialize_key_and_certificates(b"key", key, chain[0], chain[1:], store)  # type: ignore[arg-type]


def make_pki(d: Path) -> Pki:
    """A CA, a broker certificate for localhost and 127.0.0.1, and a client's, in `d`."""
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
    encrypted = key.private_bytes(  # type: ignore[union-attr]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
    )
    (d / "server.pem").write_bytes(encrypted + b"".join(b.bytes() for b in server.cert_chain_pems))
    store = serialization.BestAvailableEncryption(STORE_PASSWORD.encode())
    (d / "server.p12").write_bytes(pkcs12_keystore(server, STORE_PASSWORD))
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
