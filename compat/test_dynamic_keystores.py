"""A listener's keystore changed at run time on real Kafka 3.9 and on wirebroker: the same stores,
the same IncrementalAlterConfigs and AlterConfigs, the same answers.

Both brokers get a PLAINTEXT listener for the admin requests, an SSL one between brokers (a
PKCS12 keystore, a PEM truststore of the CA) and a second SSL one, EXTERNAL, whose keystore holds
a key entry and a trusted CA entry (keytool's), and no `password.encoder.secret`. Then, on each:
the keystore's password set validate-only, incrementally and with the legacy AlterConfigs,
answered without the secret (NONE; a wrong one refused, INVALID_REQUEST), and set for good,
refused for want of it (INVALID_CONFIG); stores that cannot be loaded (no such file, not a
store, the wrong password), refused with Kafka's "Failed to load SSL keystore" (INVALID_REQUEST;
wirebroker adds why, cut from the answers compared with each broker's folder); a new keystore
holding one more entry (the CA, which keytool added as a trusted entry), refused by the count
of entries Kafka's SslFactory compares
(INVALID_REQUEST, as a validation); the keystore renewed in place from a CA the truststore does
not trust, refused by the handshakes between the old and the new stores when the same location
is set again, and when any other key of the broker is (INVALID_CONFIG, as Kafka's reload of
modified files); a good renewal in place, taken and served. On EXTERNAL, new keystores compared
entry by entry: the CA entry another CA's, the key's subject another (quoted as Java prints it),
the key with fewer alternative names, the same entries in a JKS store (listed in another
order), all refused with Kafka's messages; a good one, taken and served. Last, a renewal in
place with one more entry, refused. The handshake's failure is Java's exception in Kafka's
message and OpenSSL's reason in wirebroker's, and wirebroker adds what to do: both are cut from
the answers compared.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trustme

from compat.kafka_process import free_port, kafka_broker, zookeeper
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import alter_configs, replace_configs, wait_until
from tests.wirebroker.pki import STORE_PASSWORD, pkcs12_keystore
from tests.wirebroker.test_dynamic_configs import der, renew, renewal, served_certificate
from wirebroker.zookeeper_server import jars_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`"),
    pytest.mark.skipif(shutil.which("keytool") is None, reason="no JDK keytool"),
]
BROKER, SET = 4, 0
KEYSTORE = "listener.name.ssl.ssl.keystore.location"
PASSWORD = "listener.name.ssl.ssl.keystore.password"
EXTERNAL_KEYSTORE = "listener.name.external.ssl.keystore.location"


def properties(d: Path, listeners: str) -> dict[str, str]:
    return {
        "listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,EXTERNAL:SSL",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(d / "keystore.p12"),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(d / "ca.pem"),
        EXTERNAL_KEYSTORE: str(d / "external.p12"),
    }


@contextmanager
def kafka(d: Path) -> Iterator[dict[str, int]]:
    ports = {"PLAINTEXT": free_port(), "SSL": free_port(), "EXTERNAL": free_port()}
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    props = {**properties(d, listeners), "advertised.listeners": listeners}
    with zookeeper() as zk, kafka_broker(zk.connect, port=ports["PLAINTEXT"], overrides=props):
        yield ports


@contextmanager
def wirebroker(d: Path) -> Iterator[dict[str, int]]:
    listeners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,EXTERNAL://127.0.0.1:0"
    props = properties(d, listeners)
    with serving(BrokerProcess(d / "data", props)) as process:
        yield process.ports


def answer(code: int, message: str | None) -> tuple[int, str | None]:
    """An answer, the handshake's failure and wirebroker's advice cut from its message."""
    if message is not None:
        message = re.sub(
            r"(SSLFactory failed: )(javax\.net\.ssl\.\w+|a broker with the).*",
            r"\1<handshake>",
            message,
        )
        message = re.sub(r" \((keytool -list|ssl\.allow)[^()]*\)", "", message)
        # A store that cannot be loaded: its folder (each broker's own), and why (wirebroker's).
        message = re.sub(
            r"(Failed to load (?:PEM )?SSL keystore )\S*/(\S+)( of type \w+)?(?: \(.*\))?"
            r"( for configuration)",
            r"\1\2\3\4",
            message,
        )
    return code, message


def with_ca(keystore: Path, ca: Path) -> None:
    """Add the CA certificate `ca` to `keystore` as a trusted entry, as keytool does."""
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "caroot", "-file", str(ca),
         "-keystore", str(keystore), "-storepass", STORE_PASSWORD],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def test_keystore_changes_answered_as_kafka(tmp_path: Path) -> None:
    ca, other_ca = trustme.CA(), trustme.CA()
    certs = {
        "old": renewal(ca, "localhost", "127.0.0.1"),
        "untrusted": renewal(other_ca, "localhost", "127.0.0.1"),
        "renewed": renewal(ca, "localhost", "127.0.0.1"),
    }
    stores = tmp_path / "stores"
    stores.mkdir()
    ca.cert_pem.write_to_path(str(stores / "ca.pem"))
    for name, cert in certs.items():
        (stores / f"{name}.p12").write_bytes(pkcs12_keystore(cert, STORE_PASSWORD))
    other_ca.cert_pem.write_to_path(str(stores / "other-ca.pem"))
    shutil.copy(stores / "renewed.p12", stores / "two-entries.p12")
    with_ca(stores / "two-entries.p12", stores / "ca.pem")
    # The EXTERNAL listener's: a key entry and a trusted CA entry each (keytool's).
    external = {
        "external": (renewal(ca, "localhost", "127.0.0.1", unit="external"), "ca"),
        "external-other-ca": (renewal(ca, "localhost", "127.0.0.1", unit="external"), "other-ca"),
        "external-other-subject": (renewal(ca, "localhost", "127.0.0.1", unit="x, y"), "ca"),
        "external-fewer-names": (renewal(ca, "localhost", unit="external"), "ca"),
        "external-renewed": (renewal(ca, "localhost", "127.0.0.1", unit="external"), "ca"),
    }
    for name, (cert, trusted) in external.items():
        (stores / f"{name}.p12").write_bytes(pkcs12_keystore(cert, STORE_PASSWORD))
        with_ca(stores / f"{name}.p12", stores / f"{trusted}.pem")
    subprocess.run(
        ["keytool", "-importkeystore", "-srckeystore", str(stores / "external-renewed.p12"),
         "-srcstorepass", STORE_PASSWORD, "-destkeystore", str(stores / "external-renewed.jks"),
         "-deststoretype", "JKS", "-deststorepass", STORE_PASSWORD, "-noprompt"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip

    def scenario(d: Path, ports: dict[str, int]) -> list[object]:
        bootstrap = f"127.0.0.1:{ports['PLAINTEXT']}"
        keystore = d / "keystore.p12"

        def alter(*ops: tuple[str, int, str]) -> tuple[int, str | None]:
            return answer(*alter_configs(bootstrap, BROKER, "0", list(ops)))

        def renewed_in_place(name: str) -> tuple[int, str | None]:
            renew(keystore, (stores / f"{name}.p12").read_bytes())
            return alter((KEYSTORE, SET, str(keystore)))

        def served(port: int, cert: trustme.LeafCert) -> bool:
            """Whether the listener serves `cert`, as Kafka does once ZooKeeper told it of the
            change (wirebroker at once)."""
            return wait_until(
                lambda: served_certificate(("127.0.0.1", port), ca) == der(cert),
                timeout=30,
                what=f"the listener on port {port} to serve the new certificate",
            )

        def password(value: str, validate_only: bool) -> list[tuple[int, str | None]]:
            """Incrementally and not (the legacy request replaces all: none is set yet)."""
            op = [(PASSWORD, SET, value)]
            return [
                answer(*alter_configs(bootstrap, BROKER, "0", op, validate_only=validate_only)),
                answer(
                    *replace_configs(
                        bootstrap, BROKER, "0", {PASSWORD: value}, validate_only=validate_only
                    )
                ),
            ]

        return [
            *password(STORE_PASSWORD, validate_only=True),
            *password("not-the-password", validate_only=True),
            *password(STORE_PASSWORD, validate_only=False),
            # Stores that cannot be loaded: no such file, not a store, the wrong password.
            alter((KEYSTORE, SET, str(d / "missing.p12"))),
            alter((KEYSTORE, SET, str(d / "not-a-store.p12"))),
            alter((KEYSTORE, SET, str(d / "two-entries.p12")), (PASSWORD, SET, "not-it")),
            alter((KEYSTORE, SET, str(d / "two-entries.p12"))),
            renewed_in_place("untrusted"),
            alter(("message.max.bytes", SET, "1000013")),
            renewed_in_place("renewed"),
            served(ports["SSL"], certs["renewed"]),
            # A keystore of two entries, compared entry by entry: the key's certificate renewed
            # with a new CA certificate; another subject (Java's form of it, quoted); fewer
            # alternative names (Java's HashSet of them); the same entries in a JKS store (in
            # the order of its Hashtable, refused); the key's certificate renewed alone, taken.
            *(
                alter((EXTERNAL_KEYSTORE, SET, str(stores / name)))
                for name in (
                    "external-other-ca.p12",
                    "external-other-subject.p12",
                    "external-fewer-names.p12",
                    "external-renewed.jks",
                    "external-renewed.p12",
                )
            ),
            served(ports["EXTERNAL"], external["external-renewed"][0]),
            renewed_in_place("two-entries"),
        ]

    observed = {}
    for target, run in (("kafka", kafka), ("wirebroker", wirebroker)):
        d = tmp_path / target
        d.mkdir()
        for name in ("ca.pem", "two-entries.p12", "external.p12"):
            shutil.copy(stores / name, d / name)
        (d / "not-a-store.p12").write_bytes(b"not a keystore\n")
        renew(d / "keystore.p12", (stores / "old.p12").read_bytes())
        with run(d) as ports:
            observed[target] = scenario(d, ports)
    assert observed["wirebroker"] == observed["kafka"]
