"""A keystore's entries as Kafka's SslFactory compares them when a listener's keystore changes at
run time (a new one with another number, or whose entries differ position by position in subject
or alternative names, is refused), against Java's own KeyStore and X509Certificate
(KeystoreEntries.java, the JDK 17's): each entry's alias in Java's order, its subject as
X500Principal prints it and its alternative names as a HashSet. PKCS12 stores made by keytool (a
trusted CA entry, two keys), by openssl (PBES2, PKCS#12's 3DES, certificates unencrypted) and by
cryptography (a key without a name; trusted certificates with Oracle's attribute, among them
sixteen with subjects and names of every kind Java prints differently), and JKS and JCEKS stores
keytool converted (the sixteen: Java's Hashtable grown once; the JCEKS ones hold a secret key
too, which Java lists among the aliases but not as an entry). A store whose certificates are
encrypted with RC2 (openssl -legacy) is not listed, and says so.
"""

from __future__ import annotations

import datetime
import ipaddress
import random
import re
import shutil
import ssl
import subprocess
import uuid
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from wirebroker import tls
from wirebroker.certificate_entries import (
    CertificateEntry,
    _java_alt_names,
    _printed,
    canonical_subject,
    check_change,
    java_subject,
    rfc2253_name,
    subject_rdns,
)
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.jks import read_jks
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


def attribute(
    oid: x509.ObjectIdentifier, value: str | bytes, kind: _ASN1Type | None = None
) -> x509.NameAttribute:
    if kind is None:
        return x509.NameAttribute(oid, value)
    return x509.NameAttribute(oid, value, _type=kind)


def unusual_certificates() -> list[tuple[bytes, x509.Certificate]]:
    """Certificates whose subjects and alternative names Java prints in all its ways, by alias:
    values quoted and escaped, not strings (hex), of every string type; Java's keywords and
    `OID.`; several attributes in one RDN; no subject; IP addresses of each kind, a directory
    name, an other name, a name twice, more names than a HashSet's first table holds."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cn, o, ou, loc, st = (
        NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME,
        NameOID.LOCALITY_NAME, NameOID.STATE_OR_PROVINCE_NAME,
    )  # fmt: skip

    def made(
        subject: list[x509.NameAttribute | list[x509.NameAttribute]], *names: x509.GeneralName
    ) -> x509.Certificate:
        rdns = [x509.RelativeDistinguishedName(a if isinstance(a, list) else [a]) for a in subject]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(rdns))
            .issuer_name(x509.Name([x509.NameAttribute(cn, "issuer")]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=not rdns)
        return builder.sign(key, hashes.SHA256())

    dns = x509.DNSName
    return [
        (b"Quoted", made([attribute(cn, "Smith, John"), attribute(o, 'say "hi" \\ there'),
                          attribute(ou, " lead"), attribute(loc, "trail "), attribute(st, "a  b")])),
        (b"specials", made([attribute(cn, "#hash"), attribute(o, "a=b"), attribute(ou, "x+y<z>;"),
                            attribute(loc, '"quoted already"'), attribute(st, "tab\there\nline")])),
        (b"unicode", made([attribute(cn, "Zürich"), attribute(o, "東京"),
                           attribute(ou, "Ωmega", _ASN1Type.BMPString),
                           attribute(loc, "cafe", _ASN1Type.T61String)])),
        (b"not-strings", made([attribute(x509.ObjectIdentifier("1.2.3.4"), "value"),
                               attribute(NameOID.X500_UNIQUE_IDENTIFIER, b"\x01\x02",
                                         _ASN1Type.BitString),
                               attribute(cn, "visible", _ASN1Type.VisibleString),
                               attribute(o, "universal", _ASN1Type.UniversalString)])),
        (b"keywords", made([attribute(NameOID.EMAIL_ADDRESS, "a@b.example"),
                            attribute(NameOID.DOMAIN_COMPONENT, "example"),
                            attribute(NameOID.USER_ID, "uid-1"),
                            attribute(NameOID.SERIAL_NUMBER, "42"),
                            attribute(NameOID.TITLE, "Dr"),
                            attribute(NameOID.DN_QUALIFIER, "q"),
                            attribute(NameOID.SURNAME, "Doe"),
                            attribute(NameOID.GIVEN_NAME, "Jane"),
                            attribute(NameOID.INITIALS, "JD"),
                            attribute(NameOID.GENERATION_QUALIFIER, "III"),
                            attribute(NameOID.STREET_ADDRESS, "Main St"),
                            attribute(NameOID.PSEUDONYM, "jd"),
                            attribute(NameOID.COUNTRY_NAME, "CH")])),
        (b"multi-valued", made([attribute(cn, "broker"),
                                [attribute(ou, "Unit"), attribute(o, "Org")]])),
        (b"no-subject", made([], dns("nameless.example"))),
        (b"addresses", made([attribute(cn, "addresses")],
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                            x509.IPAddress(ipaddress.ip_address("::1")),
                            x509.IPAddress(ipaddress.ip_address("2001:db8::1:0:0:1")),
                            x509.IPAddress(ipaddress.ip_address("::ffff:10.0.0.1")))),
        (b"kinds", made([attribute(cn, "kinds")], x509.RFC822Name("a@b.example"),
                        x509.UniformResourceIdentifier("https://broker.example/"),
                        x509.RegisteredID(x509.ObjectIdentifier("1.2.3.4")),
                        x509.DirectoryName(x509.Name([attribute(cn, "dir"), attribute(o, "Org")])),
                        x509.DirectoryName(x509.Name([attribute(NameOID.EMAIL_ADDRESS, "d@b.example"),
                                                      attribute(cn, " #a=b+c "),
                                                      attribute(o, "Ωmega", _ASN1Type.BMPString)])),
                        dns("kinds.example"))),
        (b"other-name", made([attribute(cn, "other")], dns("other.example"),
                             x509.OtherName(x509.ObjectIdentifier("1.2.3.5"), b"\x04\x01a"))),
        (b"twice", made([attribute(cn, "twice")], dns("dup.example"), dns("dup.example"))),
        (b"many", made([attribute(cn, "many")], *(dns(f"b{i}.example") for i in range(30)))),
        *((f"Plain-{i}".encode(), made([attribute(cn, f"plain {i}")], dns(f"p{i}.example")))
          for i in range(4)),
    ]  # fmt: skip


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
    out["truststore"] = d / "truststore.p12"  # no key: listed by wirebroker.pkcs12 alone
    out["truststore"].write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca_cert, b"ca"), pkcs12.PKCS12Certificate(other_cert, None)],
            aes,
        )
    )
    out["unusual"] = d / "unusual.p12"  # no key either
    out["unusual"].write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(c, a) for a, c in unusual_certificates()], aes
        )
    )
    for name in ("cryptography", "keytool-trusted-ca", "keytool-two-keys", "unusual"):
        out[f"jks-{name}"] = d / f"jks-{name}.jks"
        keytool("-importkeystore", "-srckeystore", str(out[name]), "-srcstorepass", PASSWORD,
                "-destkeystore", str(out[f"jks-{name}"]), "-deststoretype", "JKS")  # fmt: skip
    for name in ("keytool-two-keys", "unusual"):
        out[f"jceks-{name}"] = d / f"jceks-{name}.jceks"
        keytool("-genseckey", "-alias", "sealed", "-keyalg", "AES", "-keysize", "128",
                "-keystore", str(out[f"jceks-{name}"]), "-storetype", "JCEKS")  # fmt: skip
        keytool("-importkeystore", "-srckeystore", str(out[name]), "-srcstorepass", PASSWORD,
                "-destkeystore", str(out[f"jceks-{name}"]), "-deststoretype", "JCEKS")  # fmt: skip
    return out


#: An entry as both sides print it: alias, subject, the subject's canonical form (what Java
#: compares subjects by), its RFC 2253 form (a TLS client's principal name), alternative names, and whether those names contain the same
#: certificate's read again (not when one is an other name: Java's byte arrays).
Entry = tuple[str, str, str, str, str, bool]
#: An other name among alternative names: Java's byte array, which prints its identity, and
#: comes at a place in the set that varies with it.
_BYTE_ARRAY = re.compile(r"\[0, \[B@[0-9a-f]+\](, )?|, \[0, \[B@[0-9a-f]+\]")


def java_entries(paths: list[Path]) -> list[list[Entry]]:
    assert JAVA is not None
    kinds = {".jks": "JKS", ".jceks": "JCEKS"}
    args = [a for p in paths for a in (kinds.get(p.suffix, "PKCS12"), str(p), PASSWORD)]
    done = subprocess.run(
        [JAVA, str(_SOURCE), *args], capture_output=True, text=True, timeout=120, check=True
    )
    stores: list[list[Entry]] = [[]]
    for line in done.stdout.splitlines():
        if line == "--":
            stores.append([])
            continue
        alias, subject, canonical, rfc2253, names, contained = line.split("\t")
        stores[-1].append(
            (alias, subject, canonical, rfc2253, _BYTE_ARRAY.sub("", names), contained == "true")
        )
    return stores[:-1]


def escaped(text: str) -> str:
    """As KeystoreEntries.java prints a field: backslashes, tabs and line ends escaped."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def printed(entry: CertificateEntry) -> Entry:
    names = _java_alt_names(entry.certificate)
    again = _java_alt_names(entry.certificate)
    return (
        escaped(entry.alias),
        escaped(java_subject(entry.certificate)),
        escaped(canonical_subject(entry.certificate)),
        escaped(rfc2253_name(subject_rdns(entry.certificate))),
        _BYTE_ARRAY.sub("", escaped(_printed(names))),
        all(n in again for n in names),
    )


def wirebroker_entries(path: Path) -> list[Entry] | None:
    """The entries a listener keeps of its keystore, as it reads it (a store without a key, by
    the store's reader alone)."""
    data = path.read_bytes()
    if path.stem in ("truststore", "unusual", "jks-unusual", "jceks-unusual"):
        listed = (
            read_jks(data, PASSWORD).certificate_entries()
            if path.suffix in (".jks", ".jceks")
            else certificate_entries(data, PASSWORD.encode())
        )
        return [printed(CertificateEntry(a, x509.load_der_x509_certificate(c))) for a, c in listed]
    config = BrokerConfig.from_properties(
        {
            "listeners": "SSL://127.0.0.1:0",
            "log.dirs": str(path.parent / "data"),
            "ssl.keystore.location": str(path),
            "ssl.keystore.password": PASSWORD,
            "ssl.keystore.type": "JCEKS" if path.suffix == ".jceks" else "JKS",
        }
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    keystore = tls._load_keystore(context, tls._Settings(config, "SSL"), list_entries=True)
    assert keystore is not None
    return None if keystore.entries is None else [printed(e) for e in keystore.entries]


def test_entries_are_javas(stores: dict[str, Path]) -> None:
    names = sorted(stores)
    expected = dict(zip(names, java_entries([stores[n] for n in names]), strict=True))
    # Java's rules, stated: a CA certificate is an entry only with Oracle's trusted attribute
    # (keytool -importcert); a chain's certificates are not; aliases are in lower case, a
    # PKCS12 store's in the order read (keytool writes its keys first), a JKS store's not.
    assert [e[0] for e in expected["keytool-trusted-ca"]] == ["broker", "caroot"]
    assert len(expected["truststore"]) == 2
    assert len(expected["cryptography"]) == len(expected["openssl"]) == 1
    assert [e[0] for e in expected["unusual"]] == [
        "quoted", "specials", "unicode", "not-strings", "keywords", "multi-valued", "no-subject",
        "addresses", "kinds", "other-name", "twice", "many", *(f"plain-{i}" for i in range(4)),
    ]  # fmt: skip
    assert sorted(expected["jks-unusual"]) == sorted(expected["unusual"])
    assert expected["jks-unusual"] != expected["unusual"]
    assert sorted(expected["jceks-unusual"]) == sorted(expected["unusual"])
    assert {n: wirebroker_entries(stores[n]) for n in names} == expected


def test_rc2_encrypted_certificates_are_not_listed(
    stores: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    legacy = openssl_export(stores["openssl"].parent, "openssl-legacy", "-legacy")
    with pytest.raises(Pkcs12Error, match=r"encrypted with 1\.2\.840\.113549\.1\.12\.1\.6"):
        certificate_entries(legacy.read_bytes(), PASSWORD.encode())
    assert len(java_entries([legacy])[0]) == 1
    with caplog.at_level("INFO", logger="wirebroker.tls"):
        assert wirebroker_entries(legacy) is None
    assert "its entries are not listed" in caplog.text


@pytest.mark.parametrize("name", ["keytool-trusted-ca", "openssl-unencrypted-certificates"])
def test_a_damaged_store_is_a_pkcs12_error_and_never_another(
    stores: dict[str, Path], name: str
) -> None:
    """Every truncation and a thousand damaged copies of a real store (certificates encrypted
    with PBES2, and unencrypted, so the parsing sees the damage): entries or a Pkcs12Error."""
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
            outcomes.add("listed")
        except Pkcs12Error:
            outcomes.add("refused")
    assert outcomes == {"listed", "refused"}


def named(*attributes: x509.NameAttribute) -> CertificateEntry:
    """An entry whose certificate has the subject of `attributes`, one RDN each."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name(list(attributes))
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return CertificateEntry("broker", certificate)


def test_subjects_compared_as_java_compares_them() -> None:
    """As X500Principal.equals (the canonical forms `test_entries_are_javas` checks against
    Java's): case, spaces at the ends or repeated, and a PrintableString for a UTF8String make no
    other subject; an e-mail address (an IA5String, compared by its encoding) in other case does."""
    cn, o, email = NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME, NameOID.EMAIL_ADDRESS
    old = named(attribute(cn, "Broker  One"), attribute(o, "Acme", _ASN1Type.PrintableString))
    same = named(attribute(cn, " broker one"), attribute(o, "ACME"))
    check_change([old], [same], allow_dn_changes=False, allow_san_changes=False)
    with pytest.raises(ConfigError, match="Keystore DistinguishedName does not match"):
        check_change(
            [named(attribute(email, "ops@acme.example"))],
            [named(attribute(email, "OPS@acme.example"))],
            allow_dn_changes=False,
            allow_san_changes=False,
        )
