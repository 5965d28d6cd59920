"""JKS and JCEKS keystores and truststores (Kafka's default `ssl.keystore.type`, and Java's
older one), made by the JDK's own keytool: a broker serving TLS from each kind with client
certificates required, a key whose password differs from its store's, an EC key keytool
generated, a JCEKS store holding a secret key too, a JKS file given as PKCS12 or as JCEKS (Java
reads it so), and what is refused: a wrong password, a JCEKS file given as JKS or PKCS12, a
truncated or damaged store."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.pki import STORE_PASSWORD, Pki
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.jks import JksError, read_jks
from wirebroker.tls import server_context

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("keytool") is None, reason="no JDK keytool"),
]

KEY_PASSWORD = "jks-key-secret"


def keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def stores(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """server.jks and server.jceks (the PKCS12 keystore's key, its own password; the JCEKS
    store also holds an AES key, first), trust.jks and trust.jceks (the CA), ec.jks (a key
    pair keytool generated)."""
    d = tmp_path_factory.mktemp("jks")
    keytool(
        *("-genseckey", "-alias", "sealed", "-keyalg", "AES", "-keysize", "128"),
        *("-keystore", str(d / "server.jceks"), "-storetype", "JCEKS"),
        *("-storepass", STORE_PASSWORD, "-keypass", KEY_PASSWORD),
    )
    shutil.copy(pki.trust_p12, d / "trust.p12")
    for name, kind in (("server.jks", "JKS"), ("server.jceks", "JCEKS")):
        keytool(
            *("-importkeystore", "-noprompt", "-srckeystore", str(pki.server_p12)),
            *("-srcstoretype", "PKCS12", "-srcstorepass", STORE_PASSWORD),
            *("-destkeystore", str(d / name), "-deststoretype", kind),
            *("-deststorepass", STORE_PASSWORD, "-destkeypass", KEY_PASSWORD),
        )
    for name, kind in (("trust.jks", "JKS"), ("trust.jceks", "JCEKS")):
        keytool(
            *("-importcert", "-noprompt", "-alias", "ca", "-file", str(pki.ca)),
            *("-keystore", str(d / name), "-storetype", kind, "-storepass", STORE_PASSWORD),
        )
    keytool(
        *("-genkeypair", "-alias", "ec", "-keyalg", "EC", "-groupname", "secp256r1"),
        *("-dname", "CN=localhost", "-validity", "2", "-ext", "SAN=ip:127.0.0.1,dns:localhost"),
        *("-keystore", str(d / "ec.jks"), "-storetype", "JKS", "-storepass", STORE_PASSWORD),
        *("-keypass", STORE_PASSWORD),
    )
    return {p.name: p for p in d.iterdir()}


def jks_listener(stores: dict[str, Path], **extra: str) -> dict[str, str]:
    return {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(stores["server.jks"]),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": str(stores["trust.jks"]),
        "ssl.truststore.password": STORE_PASSWORD,
        "ssl.client.auth": "required",  # (the truststore is read for it)
        **extra,
    }


@pytest.fixture(scope="module", params=["JKS", "JCEKS"])
def jks_broker(
    request: pytest.FixtureRequest,
    stores: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[BrokerProcess]:
    """SSL from JKS stores (the types left at Kafka's default, JKS), or from JCEKS ones;
    client certificates required."""
    props = jks_listener(stores)
    del props["listeners"]
    if request.param == "JCEKS":
        props |= {
            "ssl.keystore.location": str(stores["server.jceks"]),
            "ssl.keystore.type": "JCEKS",
            "ssl.truststore.location": str(stores["trust.jceks"]),
            "ssl.truststore.type": "JCEKS",
        }
    broker = BrokerProcess(tmp_path_factory.mktemp("jks-broker"), props, extra_listeners=("SSL",))
    with serving(broker):
        yield broker


@pytest.mark.integration
def test_a_client_with_a_certificate_over_jks_stores(jks_broker: BrokerProcess, pki: Pki) -> None:
    tls = {
        "bootstrap.servers": f"127.0.0.1:{jks_broker.ports['SSL']}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    }
    producer = Producer(tls)
    producer.produce("over-jks", b"v", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({**tls, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("over-jks", 0, 0)])
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None and msg.value() == b"v"
    finally:
        consumer.close()
    assert not any(STORE_PASSWORD in line or KEY_PASSWORD in line for line in jks_broker.log)


def test_the_key_and_chain_are_keytool_s(stores: dict[str, Path], pki: Pki) -> None:
    """The key decrypted from the JKS store is the PKCS12 store's: it fits the certificate."""
    store = read_jks(stores["server.jks"].read_bytes(), STORE_PASSWORD)
    assert [e.alias for e in store.private_keys] == ["key"] and not store.trusted_certs
    (entry,) = store.private_keys
    key = serialization.load_der_private_key(entry.key(KEY_PASSWORD), None)
    leaf = x509.load_der_x509_certificate(entry.chain[0])
    assert leaf.public_key() == key.public_key()
    trust = read_jks(stores["trust.jks"].read_bytes(), None)  # as Java: read without a password
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    assert [x509.load_der_x509_certificate(c) for c in trust.trusted_certs] == [ca]


def test_a_jceks_store_s_key_is_keytool_s_and_its_secret_key_passed_over(
    stores: dict[str, Path], pki: Pki
) -> None:
    """The JCEKS store's key (PBEWithMD5AndTripleDES) is the PKCS12 store's; the sealed AES
    key before it is read past, and listed as Java's JceKeyStore lists its aliases."""
    store = read_jks(stores["server.jceks"].read_bytes(), STORE_PASSWORD)
    assert [type(e).__name__ for e in store.entries] == ["SecretKeyEntry", "PrivateKeyEntry"]
    (entry,) = store.private_keys
    key = serialization.load_der_private_key(entry.key(KEY_PASSWORD), None)
    p12 = pkcs12.load_pkcs12(pki.server_p12.read_bytes(), STORE_PASSWORD.encode())
    assert p12.key is not None and key.public_key() == p12.key.public_key()
    assert [alias for alias, _ in store.certificate_entries()] == ["key"]
    with pytest.raises(JksError, match="Cannot recover key"):
        entry.key("wrong")


@pytest.mark.parametrize(
    "extra",
    [
        {"ssl.keystore.location": "ec.jks", "ssl.key.password": STORE_PASSWORD},
        # no ssl.key.password: the store's password is the key's (keytool's default)
        {"ssl.keystore.location": "ec.jks", "ssl.key.password": ""},
        {"ssl.keystore.type": "PKCS12", "ssl.truststore.type": "PKCS12"},
        {"ssl.truststore.password": ""},
        # Java's JCEKS reads JKS files too
        {"ssl.keystore.type": "JCEKS", "ssl.truststore.type": "JCEKS"},
        {
            "ssl.keystore.location": "server.jceks",
            "ssl.keystore.type": "JCEKS",
            "ssl.truststore.location": "trust.jceks",
            "ssl.truststore.type": "jceks",
        },
    ],
)
def test_stores_that_are_read(stores: dict[str, Path], extra: dict[str, str]) -> None:
    props = jks_listener(stores, **extra)
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        if props[key] in stores:
            props[key] = str(stores[props[key]])
    props = {k: v for k, v in props.items() if v}
    context, _ = server_context(BrokerConfig.from_properties(props), "SSL")
    assert context.get_ca_certs()[0]["subject"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"ssl.keystore.password": "wrong"},
            r"^ssl.keystore.location=.*server.jks: Keystore was tampered with, or password was "
            r"incorrect$",
        ),
        (
            {"ssl.key.password": "wrong"},
            r"^ssl.keystore.location: cannot read the key 'key' \(ssl.key.password\?\): Cannot "
            r"recover key",
        ),
        (
            {"ssl.truststore.password": "wrong"},
            r"^ssl.truststore.location=.*trust.jks: Keystore was tampered with",
        ),
        (
            {"ssl.keystore.password": ""},
            r"^SSL key store is specified, but key store password is not specified: set "
            r"ssl.keystore.password",
        ),
        (
            {"ssl.truststore.location": "trust.jceks"},
            r"^ssl.truststore.type=JKS: the store is a JCEKS store: set ssl.truststore.type=JCEKS$",
        ),
        (
            {"ssl.keystore.location": "server.jceks", "ssl.keystore.type": "PKCS12"},
            r"^ssl.keystore.type=PKCS12: the store is a JCEKS store: set ssl.keystore.type=JCEKS$",
        ),
        (
            {"ssl.truststore.type": "JCEKS", "ssl.truststore.location": "trust.p12"},
            r"^ssl.truststore.type=JCEKS: the store is neither a JCEKS nor a JKS store$",
        ),
        (
            {
                "ssl.keystore.location": "server.jceks",
                "ssl.keystore.type": "JCEKS",
                "ssl.key.password": "wrong",
            },
            r"^ssl.keystore.location: cannot read the key 'key' \(ssl.key.password\?\): Cannot "
            r"recover key",
        ),
    ],
)
def test_what_is_refused(stores: dict[str, Path], extra: dict[str, str], message: str) -> None:
    props = jks_listener(stores, **extra)
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        if props[key] in stores:
            props[key] = str(stores[props[key]])
    props = {k: v for k, v in props.items() if v}
    with pytest.raises(ConfigError, match=message) as refused:
        server_context(BrokerConfig.from_properties(props), "SSL")
    assert "wrong" not in str(refused.value)


@pytest.mark.parametrize("name", ["server.jks", "server.jceks"])
def test_a_damaged_store_is_a_jks_error_and_never_another(
    stores: dict[str, Path], name: str
) -> None:
    """Every truncation and a thousand damaged copies of a real store, read without a
    password (its digest unchecked, so the parsing sees the damage): a JksError or the store.
    The JKS store's key is decrypted too (the JCEKS one's takes 400,000 MD5 rounds: not a
    thousand times)."""
    data = stores[name].read_bytes()
    rng = random.Random(uuid.UUID(int=7).int)
    copies = [data[:n] for n in range(len(data))]
    for _ in range(1000):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(4, len(data))] = rng.randrange(256)
        copies.append(bytes(damaged))
    outcomes: set[str] = set()
    for copy in copies:
        try:
            store = read_jks(copy, None)
            for entry in store.private_keys if name.endswith(".jks") else ():
                entry.key(KEY_PASSWORD)
            outcomes.add("read")
        except JksError:
            outcomes.add("refused")
    assert outcomes == {"read", "refused"}
    with pytest.raises(JksError, match="truncated"):
        read_jks(data[:-200], None)


def _class_desc(name: str) -> bytes:
    """A serialization stream's new class descriptor: serializable, no fields, no annotation."""
    return b"\x72" + struct.pack(">H", len(name)) + name.encode() + bytes(8) + b"\x02\x00\x00\x78"


@pytest.mark.parametrize(
    ("sealed", "why"),
    [
        (b"\x73" + _class_desc("A") * 5000 + b"\x70", "classes nested deeper than 32"),
        (b"\x73" + _class_desc("A") + b"\x71\x00\x7e\x00\x00", "classes nested deeper than 32"),
        (b"\x75" + _class_desc("[Ljava.lang.Object;") + b"\x70\xff\xff\xff\xff", "truncated"),
        (b"\x7e", "a stream element of tag 0x7e"),
    ],
    ids=["deep-superclasses", "its-own-superclass", "huge-array", "enum"],
)
def test_a_hostile_secret_key_entry_is_refused(sealed: bytes, why: str) -> None:
    """A JCEKS secret-key entry whose serialized object nests without end, refers to itself
    or claims more than the file holds is refused, in bounded time and stack."""
    entry = b"\x00\x00\x00\x03\x00\x01k" + bytes(8) + b"\xac\xed\x00\x05" + sealed
    data = b"\xce\xce\xce\xce\x00\x00\x00\x02\x00\x00\x00\x01" + entry + bytes(20)
    with pytest.raises(JksError, match=f"the secret key entry 'k' cannot be read: .*{why}"):
        read_jks(data, None)
