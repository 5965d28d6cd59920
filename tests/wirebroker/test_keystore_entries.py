"""How many entries a keystore holds, as Kafka's SslFactory counts them when a listener's keystore
changes at run time (a new one with another number is refused), against Java's own KeyStore
(KeystoreEntries.java, the JDK 17's): PKCS12 stores made by keytool (a trusted CA entry, two keys),
by openssl (PBES2, PKCS#12's 3DES, certificates unencrypted) and by cryptography (a key without
a name; trusted certificates with Oracle's attribute), and JKS stores keytool converted. A store
whose certificates are encrypted with RC2 (openssl -legacy) is not counted, and says so.
"""

from __future__ import annotations

import random
import shutil
import ssl
import subprocess
import uuid
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from wirebroker import tls
from wirebroker.config import BrokerConfig
from wirebroker.pkcs12 import Pkcs12Error, certificate_entries

JAVA = shutil.which("java")
pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        JAVA is None or shutil.which("keytool") is None or shutil.which("openssl") is None,
        reason="needs the JDK (java, keytool) and openssl",
    ),
]
PASSWORD = "store-secret"
_SOURCE = Path(__file__).with_name("KeystoreEntries.java")


def run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def keytool(*args: str) -> None:
    run("keytool", *args, "-noprompt", "-storepass", PASSWORD)


def openssl_export(d: Path, name: str, *options: str) -> Path:
    out = d / f"{name}.p12"
    key, cert, ca = (str(d / n) for n in ("leaf.key", "leaf.pem", "ca.pem"))
    run(
        "openssl", "pkcs12", "-export", "-inkey", key, "-in", cert, "-certfile", ca,
        "-name", "broker", "-passout", f"pass:{PASSWORD}", "-out", str(out), *options,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """PKCS12 and JKS keystores of one broker certificate (by name, as made)."""
    d = tmp_path_factory.mktemp("keystores")
    ca = trustme.CA()
    leaf, other = ca.issue_cert("localhost", "127.0.0.1"), ca.issue_cert("other.example")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    leaf.private_key_pem.write_to_path(str(d / "leaf.key"))
    leaf.cert_chain_pems[0].write_to_path(str(d / "leaf.pem"))
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    other_cert = x509.load_pem_x509_certificate(other.cert_chain_pems[0].bytes())

    def made_by_cryptography(
        cert: trustme.LeafCert, name: bytes | None, encryption: object
    ) -> bytes:
        key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
        certificate = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes())
        return pkcs12.serialize_key_and_certificates(
            name,
            key,
            certificate,
            [ca_cert],
            encryption,  # type: ignore[arg-type]
        )

    out: dict[str, Path] = {}
    aes = serialization.BestAvailableEncryption(PASSWORD.encode())
    des = (
        serialization.PrivateFormat.PKCS12.encryption_builder()
        .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC)
        .hmac_hash(hashes.SHA1())
        .build(PASSWORD.encode())
    )
    for name, alias, encryption in (
        ("cryptography", b"broker", aes),
        ("cryptography-3des", b"broker", des),
        ("cryptography-unnamed", None, aes),
    ):
        out[name] = d / f"{name}.p12"
        out[name].write_bytes(made_by_cryptography(leaf, alias, encryption))
    (d / "other.p12").write_bytes(made_by_cryptography(other, b"other", aes))
    out["keytool-trusted-ca"] = d / "keytool-trusted-ca.p12"
    shutil.copy(out["cryptography"], out["keytool-trusted-ca"])
    keytool("-importcert", "-alias", "CARoot", "-file", str(d / "ca.pem"),
            "-keystore", str(out["keytool-trusted-ca"]))  # fmt: skip
    out["keytool-two-keys"] = d / "keytool-two-keys.p12"
    shutil.copy(out["cryptography"], out["keytool-two-keys"])
    keytool("-importkeystore", "-srckeystore", str(d / "other.p12"), "-srcstorepass", PASSWORD,
            "-destkeystore", str(out["keytool-two-keys"]))  # fmt: skip
    out["keytool-generated"] = d / "keytool-generated.p12"
    keytool("-genkeypair", "-alias", "broker", "-keyalg", "EC", "-dname", "CN=broker",
            "-storetype", "PKCS12", "-keystore", str(out["keytool-generated"]))  # fmt: skip
    out["openssl"] = openssl_export(d, "openssl")
    out["openssl-3des"] = openssl_export(
        d, "openssl-3des", "-certpbe", "PBE-SHA1-3DES", "-keypbe", "PBE-SHA1-3DES"
    )
    out["openssl-unencrypted-certificates"] = openssl_export(
        d, "openssl-unencrypted-certificates", "-certpbe", "NONE"
    )
    out["truststore"] = d / "truststore.p12"  # no key: counted by wirebroker.pkcs12 alone
    out["truststore"].write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca_cert, b"ca"), pkcs12.PKCS12Certificate(other_cert, None)],
            aes,
        )
    )
    for name in ("cryptography", "keytool-trusted-ca", "keytool-two-keys"):
        out[f"jks-{name}"] = d / f"jks-{name}.jks"
        keytool("-importkeystore", "-srckeystore", str(out[name]), "-srcstorepass", PASSWORD,
                "-destkeystore", str(out[f"jks-{name}"]), "-deststoretype", "JKS")  # fmt: skip
    return out


def java_counts(paths: list[Path]) -> list[int]:
    assert JAVA is not None
    args = [a for p in paths for a in ("JKS" if p.suffix == ".jks" else "PKCS12", str(p), PASSWORD)]
    done = subprocess.run(
        [JAVA, str(_SOURCE), *args], capture_output=True, text=True, timeout=120, check=True
    )
    return [int(line) for line in done.stdout.split()]


def wirebroker_count(path: Path) -> int | None:
    """The count a listener keeps of its keystore, as it reads it."""
    if path.name == "truststore.p12":
        return certificate_entries(path.read_bytes(), PASSWORD.encode())
    config = BrokerConfig.from_properties(
        {
            "listeners": "SSL://127.0.0.1:0",
            "log.dirs": str(path.parent / "data"),
            "ssl.keystore.location": str(path),
            "ssl.keystore.password": PASSWORD,
        }
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    keystore = tls._load_keystore(context, tls._Settings(config, "SSL"), count=True)
    assert keystore is not None
    return keystore.entries


def test_counts_are_javas(stores: dict[str, Path]) -> None:
    names = sorted(stores)
    expected = dict(zip(names, java_counts([stores[n] for n in names]), strict=True))
    # Java's rules, stated: a CA certificate is an entry only with Oracle's trusted attribute
    # (keytool -importcert); a chain's certificates are not.
    assert expected["keytool-trusted-ca"] == expected["truststore"] == 2
    assert expected["cryptography"] == expected["openssl"] == 1
    assert {n: wirebroker_count(stores[n]) for n in names} == expected


def test_rc2_encrypted_certificates_are_not_counted(
    stores: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    legacy = openssl_export(stores["openssl"].parent, "openssl-legacy", "-legacy")
    with pytest.raises(Pkcs12Error, match=r"encrypted with 1\.2\.840\.113549\.1\.12\.1\.6"):
        certificate_entries(legacy.read_bytes(), PASSWORD.encode())
    assert java_counts([legacy]) == [1]
    with caplog.at_level("INFO", logger="wirebroker.tls"):
        assert wirebroker_count(legacy) is None
    assert "its entries are not counted" in caplog.text


@pytest.mark.parametrize("name", ["keytool-trusted-ca", "openssl-unencrypted-certificates"])
def test_a_damaged_store_is_a_pkcs12_error_and_never_another(
    stores: dict[str, Path], name: str
) -> None:
    """Every truncation and a thousand damaged copies of a real store (certificates encrypted
    with PBES2, and unencrypted, so the parsing sees the damage): a count or a Pkcs12Error."""
    data = stores[name].read_bytes()
    rng = random.Random(uuid.UUID(int=12).int)
    copies = [data[:n] for n in range(len(data))]
    for _ in range(1000):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(data))] = rng.randrange(256)
        copies.append(bytes(damaged))
    outcomes: set[str] = set()
    for copy in copies:
        try:
            certificate_entries(copy, PASSWORD.encode())
            outcomes.add("counted")
        except Pkcs12Error:
            outcomes.add("refused")
    assert outcomes == {"counted", "refused"}
