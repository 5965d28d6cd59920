"""SASL/GSSAPI on real Kafka 3.9 and on wirebroker: the same KDC, the same keytab, the same
raw exchanges, and the same answers back (but for a replayed token: finding F13).

One MIT KDC (tests/wirebroker/kdc.py) serves both: Kafka's JVM reads its krb5.conf through
`JAVA_TOOL_OPTIONS=-Djava.security.krb5.conf=...`, wirebroker through `KRB5_CONFIG`. Each
broker's SASL_PLAINTEXT listener offers GSSAPI (the `kafka/localhost` keytab in its
Krb5LoginModule JAAS entry) and PLAIN, with the same `sasl.kerberos.principal.to.local.rules`.
The client is wirebroker's own GssapiClient over raw SaslHandshake / SaslAuthenticate
requests, so every answer's fields can be compared: a login (its session lifetime), a token
that is not Kerberos, a principal no rule maps.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat.kafka_process import kafka_cluster
from protocol.errors import ErrorCode
from protocol.messages.metadata import MetadataRequest
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import RawClient
from tests.wirebroker.kdc import REALM, Kdc, krb5_jaas, requires_kdc, serving_kdc
from wirebroker.sasl.kerberos import GssapiClient
from wirebroker.zookeeper_server import jars_available

pytestmark = [
    pytest.mark.integration,
    requires_kdc,
    pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`"),
]

RULES = rf"RULE:[1:$1@$0](.*@{REALM})s/@.*//"  # one-component principals only
SERVICE = "kafka/localhost"


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    directory = tmp_path_factory.mktemp("kdc")
    java = f"-Djava.security.krb5.conf={directory / 'krb5.conf'}"  # Kafka's JVM
    with serving_kdc(directory, JAVA_TOOL_OPTIONS=java) as kdc:
        yield kdc


def gssapi_properties(keytab: Path) -> dict[str, str]:
    return {
        "sasl.enabled.mechanisms": "GSSAPI,PLAIN",
        "sasl.kerberos.service.name": "kafka",
        "sasl.kerberos.principal.to.local.rules": RULES,
        "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": krb5_jaas(
            keytab, f"{SERVICE}@{REALM}"
        ),
        "connections.max.reauth.ms": "600000",
        "connection.failed.authentication.delay.ms": "0",
    }


@pytest.fixture(scope="module")
def service_keytab(kdc: Kdc) -> Path:
    """The one keytab of both brokers (each `ktadd` gives the principal new keys)."""
    return kdc.keytab(SERVICE)


@pytest.fixture(scope="module")
def kafka(service_keytab: Path) -> Iterator[str]:
    props = gssapi_properties(service_keytab)
    with kafka_cluster(sasl_users={"admin": "admin-pw"}, overrides=props) as cluster:
        yield f"127.0.0.1:{cluster.broker.sasl_port}"


@pytest.fixture(scope="module")
def wirebroker(service_keytab: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **gssapi_properties(service_keytab),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw";'
        ),
    }
    with serving(BrokerProcess(tmp_path_factory.mktemp("gssapi"), props)) as process:
        yield f"127.0.0.1:{process.ports['SASL_PLAINTEXT']}"


def both(kafka: str, wirebroker: str) -> dict[str, str]:
    return {"kafka": kafka, "wirebroker": wirebroker}


def login(kdc: Kdc, bootstrap: str, principal: str) -> dict[str, Any]:
    """A GSSAPI login of `principal`: the handshake's and every SaslAuthenticate answer's
    fields (not the tokens: each is the exchange's own), and whether it then serves."""
    client = GssapiClient(f"{principal}@{REALM}", str(kdc.keytab(principal)), "kafka", "localhost")
    seen: dict[str, Any] = {}
    with RawClient(bootstrap) as raw:
        shake = raw.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        seen["handshake"] = (shake.error_code, sorted(shake.mechanisms))
        token: bytes | None = client.initial()
        rounds = []
        while token is not None:
            answer = raw.request(SaslAuthenticateRequest(auth_bytes=token), 2)
            rounds.append((answer.error_code, answer.error_message, answer.session_lifetime_ms))
            if answer.error_code != ErrorCode.NONE:
                break
            token = client.evaluate(answer.auth_bytes)
        seen["rounds"] = rounds
        try:
            seen["serves"] = bool(raw.request(MetadataRequest(topics=[]), 1).brokers)
        except ConnectionError:
            seen["serves"] = False
    return seen


def test_a_login(kdc: Kdc, kafka: str, wirebroker: str) -> None:
    """Four rounds each (the context, its mutual-authentication answer, the security layer
    offered, the layer chosen), the session lifetime in the last, then requests served."""
    seen = {name: login(kdc, b, "alice") for name, b in both(kafka, wirebroker).items()}
    assert seen["wirebroker"] == seen["kafka"], seen
    assert seen["kafka"]["serves"] is True
    assert seen["kafka"]["rounds"][-1] == (0, "", 600000)


def test_a_principal_no_rule_maps(kdc: Kdc, kafka: str, wirebroker: str) -> None:
    """`etl/w...` has two components: no rule applies. Kafka's SASL server completes, then its
    principal builder fails: every round answered as a success, then the connection closed."""
    principal = f"etl/w{uuid.uuid4().hex[:6]}"
    seen = {name: login(kdc, b, principal) for name, b in both(kafka, wirebroker).items()}
    assert seen["wirebroker"] == seen["kafka"], seen
    assert seen["kafka"]["serves"] is False


def test_a_token_that_is_not_kerberos(kafka: str, wirebroker: str) -> None:
    seen = {}
    for name, bootstrap in both(kafka, wirebroker).items():
        with RawClient(bootstrap) as raw:
            raw.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
            answer = raw.request(SaslAuthenticateRequest(auth_bytes=b"\x60\x01junk"), 2)
            seen[name] = (answer.error_code, answer.error_message, raw.wait_closed())
    assert seen["wirebroker"] == seen["kafka"], seen


def test_a_replayed_token(kdc: Kdc, kafka: str, wirebroker: str) -> None:
    """A context token accepted once, sent again on a new connection: each broker's replay
    cache finds it. Finding F13 (compat/FINDINGS.md): Kafka 3.9's code makes it a retriable
    error (KerberosError.REPLAY: the connection closed unanswered, the client connects again),
    which wirebroker does; on Java 16+ its KerberosError cannot read the Kerberos code
    (java.security.jgss does not export sun.security.krb5), so Kafka on this Java 17 answers
    SASL_AUTHENTICATION_FAILED instead. Each side's answer is asserted."""
    seen = {}
    for name, bootstrap in both(kafka, wirebroker).items():
        client = GssapiClient(f"alice@{REALM}", str(kdc.keytab("alice")), "kafka", "localhost")
        token = client.initial()
        answers: list[tuple[object, object]] = []
        for _ in range(2):
            with RawClient(bootstrap) as raw:
                raw.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
                try:
                    answer = raw.request(SaslAuthenticateRequest(auth_bytes=token), 2)
                    answers.append((answer.error_code, answer.error_message))
                except ConnectionError:
                    answers.append(("closed", None))
        seen[name] = answers
    refused = "Authentication failed during authentication due to invalid credentials with SASL "
    assert seen["kafka"] == [
        (ErrorCode.NONE, ""),
        (ErrorCode.SASL_AUTHENTICATION_FAILED, refused + "mechanism GSSAPI"),
    ], seen
    assert seen["wirebroker"] == [(ErrorCode.NONE, ""), ("closed", None)], seen
