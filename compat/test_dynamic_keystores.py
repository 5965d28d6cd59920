"""A listener's keystore changed at run time on real Kafka 3.9 and on wirebroker: the same stores,
the same IncrementalAlterConfigs and AlterConfigs, the same answers.

Both brokers get a PLAINTEXT listener for the admin requests and an SSL one between brokers (a
PKCS12 keystore, a PEM truststore of the CA), and no `password.encoder.secret`. Then, on each:
the keystore's password set validate-only, incrementally and with the legacy AlterConfigs,
answered without the secret (NONE; a wrong one refused, INVALID_REQUEST), and set for good,
refused for want of it (INVALID_CONFIG); a new keystore holding one more entry (the CA, which
keytool added as a trusted entry), refused by the count of entries Kafka's SslFactory compares (INVALID_REQUEST, as a validation); the keystore renewed in place from a CA
the truststore does not trust, refused by the handshakes between the old and the new stores
when the same location is set again, and when any other key of the broker is
(INVALID_CONFIG, as Kafka's reload of modified files); a good renewal in place, taken and
served; a renewal in place with one more entry, refused. The handshake's failure is Java's
exception in Kafka's message and OpenSSL's reason in wirebroker's, and wirebroker adds what to
do: both are cut from the answers compared.
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
from tests.wirebroker.helpers import alter_configs, replace_configs
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


def properties(d: Path, listeners: str) -> dict[str, str]:
    return {
        "listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(d / "keystore.p12"),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(d / "ca.pem"),
    }


@contextmanager
def kafka(d: Path) -> Iterator[dict[str, int]]:
    ports = {"PLAINTEXT": free_port(), "SSL": free_port()}
    listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
    props = {**properties(d, listeners), "advertised.listeners": listeners}
    with zookeeper() as zk, kafka_broker(zk.connect, port=ports["PLAINTEXT"], overrides=props):
        yield ports


@contextmanager
def wirebroker(d: Path) -> Iterator[dict[str, int]]:
    props = properties(d, "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
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
    return code, message


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
    shutil.copy(stores / "renewed.p12", stores / "two-entries.p12")
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "caroot", "-file",
         str(stores / "ca.pem"), "-keystore", str(stores / "two-entries.p12"), "-storepass",
         STORE_PASSWORD],
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
            # Validated all the same (the messages differ: Java's exception, OpenSSL's reason).
            *(code for code, _ in password("not-the-password", validate_only=True)),
            *password(STORE_PASSWORD, validate_only=False),
            alter((KEYSTORE, SET, str(d / "two-entries.p12"))),
            renewed_in_place("untrusted"),
            alter(("message.max.bytes", SET, "1000013")),
            renewed_in_place("renewed"),
            served_certificate(("127.0.0.1", ports["SSL"]), ca) == der(certs["renewed"]),
            renewed_in_place("two-entries"),
        ]

    observed = {}
    for target, run in (("kafka", kafka), ("wirebroker", wirebroker)):
        d = tmp_path / target
        d.mkdir()
        for name in ("ca.pem", "two-entries.p12"):
            shutil.copy(stores / name, d / name)
        renew(d / "keystore.p12", (stores / "old.p12").read_bytes())
        with run(d) as ports:
            observed[target] = scenario(d, ports)
    assert observed["kafka"][10] is True, observed["kafka"]
    assert observed["wirebroker"] == observed["kafka"]
