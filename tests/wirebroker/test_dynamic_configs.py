"""Dynamic broker configs on an embedded broker: changes that take effect, survive restarts, and
are refused as Kafka refuses them; broker loggers; connection limits; a SASL listener's users.

Each test runs its own broker process (its settings differ), changes configs over the wire
(IncrementalAlterConfigs, as `kafka-configs` does; `compat/scenarios/test_broker_configs.py`
runs kafka-configs itself against Kafka and wirebroker) and checks what clients see.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import trustme
from confluent_kafka.admin import AdminClient
from cryptography import x509

from protocol.errors import ErrorCode
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import (
    BROKER,
    BROKER_LOGGER,
    DELETE,
    SET,
    TOPIC,
    RawClient,
    alter_configs,
    create_topic,
    describe_configs,
    list_offset,
    produce_request,
    replace_configs,
    wait_until,
)
from tests.wirebroker.pki import STORE_PASSWORD, pkcs12_keystore
from wirebroker.config_sources import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
)

pytestmark = pytest.mark.integration

API_VERSIONS = ApiVersionsRequest(client_software_name="dyn-test", client_software_version="1")


def running(
    tmp: Path, properties: dict[str, str] | None = None, listeners: tuple[str, ...] = ()
) -> AbstractContextManager[BrokerProcess]:
    return serving(BrokerProcess(tmp, properties, extra_listeners=listeners))


def produce(bootstrap: str, topic: str, value_size: int) -> int:
    """Produce one record of `value_size` bytes; the partition's error code."""
    request = produce_request(
        topic, 0, [SimpleRecord(None, b"x" * value_size, timestamp=int(time.time() * 1000))]
    )
    with RawClient(bootstrap) as client:
        response = client.request(request, 9)
    return int(response.responses[0].partition_responses[0].error_code)


def configs(bootstrap: str, resource_type: int, name: str, keys: list[str]) -> dict[str, tuple]:
    result = describe_configs(bootstrap, resource_type, name, keys)
    assert result.error_code == ErrorCode.NONE, result.error_message
    return {
        c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
        for c in result.configs
    }


def test_message_max_bytes_default_and_per_broker_survive_a_restart(tmp_path: Path) -> None:
    with running(tmp_path) as broker:
        create_topic(broker.bootstrap, "big")
        assert produce(broker.bootstrap, "big", 20_000) == ErrorCode.NONE
        ok = alter_configs(broker.bootstrap, BROKER, "", [("message.max.bytes", SET, "5000")])
        assert ok == (ErrorCode.NONE, None)
        # At once, for the topic without its own max.message.bytes.
        assert produce(broker.bootstrap, "big", 20_000) == ErrorCode.MESSAGE_TOO_LARGE
        assert produce(broker.bootstrap, "big", 1_000) == ErrorCode.NONE
        topic = configs(broker.bootstrap, TOPIC, "big", ["max.message.bytes"])
        assert topic["max.message.bytes"][:2] == ("5000", DYNAMIC_DEFAULT_BROKER_CONFIG)
        # This broker's own value wins over the default.
        alter_configs(broker.bootstrap, BROKER, "0", [("message.max.bytes", SET, "30000")])
        assert produce(broker.bootstrap, "big", 20_000) == ErrorCode.NONE
        expected = {
            "message.max.bytes": (
                "30000",
                DYNAMIC_BROKER_CONFIG,
                [
                    ("message.max.bytes", "30000", DYNAMIC_BROKER_CONFIG),
                    ("message.max.bytes", "5000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                    ("message.max.bytes", "1048588", DEFAULT_CONFIG),
                ],
            )
        }
        assert configs(broker.bootstrap, BROKER, "0", ["message.max.bytes"]) == expected
        broker.restart()
        assert configs(broker.bootstrap, BROKER, "0", ["message.max.bytes"]) == expected
        stored = json.loads((tmp_path / "dynamic-broker-configs.json").read_text())
        assert stored["brokers"] == {
            "<default>": {"message.max.bytes": "5000"},
            "0": {"message.max.bytes": "30000"},
        }
        # DELETE: back to the default's value.
        alter_configs(broker.bootstrap, BROKER, "0", [("message.max.bytes", DELETE, None)])
        assert produce(broker.bootstrap, "big", 20_000) == ErrorCode.MESSAGE_TOO_LARGE
        # A topic's own override still wins over both.
        alter_configs(broker.bootstrap, TOPIC, "big", [("max.message.bytes", SET, "50000")])
        assert produce(broker.bootstrap, "big", 20_000) == ErrorCode.NONE
        topic = configs(broker.bootstrap, TOPIC, "big", ["max.message.bytes"])
        assert topic["max.message.bytes"][1] == DYNAMIC_TOPIC_CONFIG


def test_retention_default_deletes_old_segments(tmp_path: Path) -> None:
    props = {"log.retention.check.interval.ms": "100", "log.segment.bytes": "1024"}
    with running(tmp_path, props) as broker:
        create_topic(broker.bootstrap, "old")
        for _ in range(8):  # 600-byte records: one segment each
            assert produce(broker.bootstrap, "old", 600) == ErrorCode.NONE
        assert list_offset(broker.bootstrap, "old", 0, -2) == (ErrorCode.NONE, 0)
        alter_configs(broker.bootstrap, BROKER, "", [("log.retention.ms", SET, "1")])
        # Every segment but the active one goes at the next retention check.
        wait_until(
            lambda: list_offset(broker.bootstrap, "old", 0, -2)[1] >= 7,
            what="retention to delete the rolled segments",
        )
        assert broker.wait_for_log("retention deleted") is not None


def test_refusals_use_kafkas_errors(tmp_path: Path) -> None:
    with running(tmp_path) as broker:
        b = broker.bootstrap
        assert alter_configs(b, BROKER, "0", [("broker.id", SET, "3")]) == (
            ErrorCode.INVALID_REQUEST,
            "Cannot update these configs dynamically: Set(broker.id)",
        )
        assert alter_configs(b, BROKER, "", [("message.max.bytes", SET, "big")]) == (
            ErrorCode.INVALID_REQUEST,
            "Invalid value big for configuration message.max.bytes: Not a number of type INT",
        )
        assert alter_configs(
            b, BROKER, "0", [("listener.name.plaintext.ssl.key.password", SET, "pw")]
        ) == (
            ErrorCode.INVALID_CONFIG,
            "Invalid config value for resource ConfigResource(type=BROKER, name='0'): "
            "Password encoder secret not configured",
        )
        assert (
            alter_configs(b, BROKER, "", [("listener.name.plaintext.ssl.key.password", SET, "pw")])[
                0
            ]
            == ErrorCode.INVALID_REQUEST
        )
        # Validate-only, as Kafka, the password is not encoded: no secret is needed, incrementally
        # or not, and nothing is stored.
        password = "listener.name.plaintext.ssl.key.password"
        ok = (ErrorCode.NONE, None)
        assert alter_configs(b, BROKER, "0", [(password, SET, "pw")], validate_only=True) == ok
        assert replace_configs(b, BROKER, "0", {password: "pw"}, validate_only=True) == ok
        assert alter_configs(b, BROKER, "1", [("message.max.bytes", SET, "5000")]) == (
            ErrorCode.INVALID_REQUEST,
            "Unexpected broker id, expected 0, but received 1",
        )
        # Listeners change per broker only (tests/wirebroker/test_dynamic_listeners.py).
        assert alter_configs(b, BROKER, "", [("listeners", SET, "PLAINTEXT://127.0.0.1:1")]) == (
            ErrorCode.INVALID_REQUEST,
            "Cannot update these configs at default cluster level, broker id must be specified: "
            "Set(listeners)",
        )
        # validate_only checks without changing anything.
        assert alter_configs(
            b, BROKER, "", [("message.max.bytes", SET, "5000")], validate_only=True
        ) == (ErrorCode.NONE, None)
        assert configs(b, BROKER, "", ["message.max.bytes"]) == {}
        assert not (tmp_path / "dynamic-broker-configs.json").exists()


def test_client_metrics_subscriptions_are_refused_as_on_a_zookeeper_cluster(
    tmp_path: Path,
) -> None:
    """KIP-714's subscriptions (resource type 16) are KRaft-only: Kafka 3.9 in ZooKeeper mode
    refuses describing and altering them, with these messages (compat/test_cli_tools.py runs
    kafka-client-metrics against both)."""
    client_metrics = 16
    with running(tmp_path) as broker:
        b = broker.bootstrap
        described = describe_configs(b, client_metrics, "m1")
        assert (described.error_code, described.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "Config type client-metrics is only supported on KRaft clusters",
        )
        unnamed = describe_configs(b, client_metrics, "")
        assert (unnamed.error_code, unnamed.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "Client metrics subscription name must not be empty",
        )
        assert alter_configs(b, client_metrics, "m1", [("interval.ms", SET, "1000")]) == (
            ErrorCode.INVALID_REQUEST,
            "AlterConfigs is only supported for topics and brokers, but resource type is "
            "CLIENT_METRICS",
        )


def test_broker_loggers_change_levels_at_run_time(tmp_path: Path) -> None:
    with running(tmp_path) as broker:
        b = broker.bootstrap
        loggers = configs(b, BROKER_LOGGER, "0", ["root", "wirebroker.broker"])
        assert loggers["root"][0] == "INFO" and loggers["wirebroker.broker"][0] == "INFO"
        # WARN on wirebroker.broker: a topic's creation is no longer logged.
        assert alter_configs(b, BROKER_LOGGER, "0", [("wirebroker.broker", SET, "WARN")])[0] == 0
        create_topic(b, "quiet")
        assert alter_configs(b, BROKER_LOGGER, "0", [("wirebroker.broker", DELETE, None)])[0] == 0
        create_topic(b, "loud")
        assert broker.wait_for_log("created topic loud") is not None
        assert not any("created topic quiet" in line for line in broker.log)
        assert (
            configs(b, BROKER_LOGGER, "0", ["wirebroker.broker"])["wirebroker.broker"][0] == "INFO"
        )
        # Not kept across a restart, as in Kafka.
        alter_configs(b, BROKER_LOGGER, "0", [("root", SET, "ERROR")])
        broker.restart()
        assert configs(broker.bootstrap, BROKER_LOGGER, "0", ["root"])["root"][0] == "INFO"


def test_max_connections_per_ip(tmp_path: Path) -> None:
    with running(tmp_path) as broker:
        b = broker.bootstrap
        alter_configs(b, BROKER, "", [("max.connections.per.ip", SET, "2")])
        # The broker counts a closed connection out when it notices the close: retry until
        # each of the two is served.
        first = wait_until(lambda: _served(b), what="a first connection")
        second = wait_until(lambda: _served(b), what="a second connection")
        with first, second:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as third:
                assert third.recv(1) == b""  # closed at once
            assert broker.wait_for_log("max.connections.per.ip") is not None
        # A higher limit applies to the next connection.
        alter = wait_until(lambda: _served(b), what="room again")
        with alter:
            assert alter.request(API_VERSIONS, 3).error_code == 0


def _served(bootstrap: str) -> RawClient | None:
    """A connection the broker answers, left open; None if it was closed."""
    client = RawClient(bootstrap)
    try:
        if client.request(API_VERSIONS, 3).error_code == 0:
            return client
    except ConnectionError:
        pass
    client.close()
    return None


def test_sasl_users_and_passwords_change_at_run_time(tmp_path: Path) -> None:
    """A PLAIN listener's JAAS config set dynamically (a password config: encrypted with
    password.encoder.secret): new logins use it at once, and after a restart."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-secret"{more};'
    )
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas.format(more=""),
        "password.encoder.secret": "encoder-secret-5e1",
    }
    key = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    with running(tmp_path, props) as broker:
        assert not _logs_in(broker, "bob", "bob-secret-77")
        new = jaas.format(more=' user_bob="bob-secret-77"')
        assert alter_configs(broker.bootstrap, BROKER, "0", [(key, SET, new)]) == (0, None)
        assert _logs_in(broker, "bob", "bob-secret-77")
        assert _logs_in(broker, "admin", "admin-secret")
        stored = (tmp_path / "dynamic-broker-configs.json").read_text()
        assert "bob-secret-77" not in stored and "encryptedPassword" in stored
        described = describe_configs(broker.bootstrap, BROKER, "0", [key]).configs
        assert [(c.value, c.is_sensitive, c.config_source) for c in described] == [
            (None, True, DYNAMIC_BROKER_CONFIG)
        ]
        assert not any("bob-secret-77" in line for line in broker.log)
        broker.restart()
        assert _logs_in(broker, "bob", "bob-secret-77")


def _logs_in(broker: BrokerProcess, user: str, password: str) -> bool:
    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": password,
        }
    )
    try:
        admin.list_topics(timeout=5)
    except Exception:
        return False
    return True


def renewal(ca: trustme.CA, *names: str, unit: str = "brokers") -> trustme.LeafCert:
    """A certificate for `names` whose subject is the same for the same `unit` (trustme's own
    varies), as a renewed certificate's is."""
    return ca.issue_cert(*names, organization_unit_name=unit)


def test_a_listeners_keystore_changes_for_new_connections(tmp_path: Path) -> None:
    """A new keystore for the SSL listener (per broker, with the listener prefix): the next
    TLS connection gets the new certificate; a store that does not load is refused, and so is
    one whose certificate has another subject or fewer alternative names (Kafka's
    `ssl.allow.dn.changes` and `ssl.allow.san.changes`, false by default)."""
    ca = trustme.CA()
    certs = {
        "old.pem": renewal(ca, "localhost", "127.0.0.1"),
        "new.pem": renewal(ca, "localhost", "127.0.0.1", "broker.example"),
        "other-subject.pem": renewal(ca, "localhost", "127.0.0.1", "broker.example", unit="x"),
        "fewer-names.pem": renewal(ca, "localhost"),
    }
    for name, cert in certs.items():
        cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / name))
    old, new = certs["old.pem"], certs["new.pem"]
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "old.pem")}
    with running(tmp_path / "data", props, listeners=("SSL",)) as broker:
        address = ("127.0.0.1", broker.ports["SSL"])
        assert served_certificate(address, ca) == der(old)
        key = "listener.name.ssl.ssl.keystore.location"
        code, message = alter_configs(broker.bootstrap, BROKER, "0", [(key, SET, "/no/such.pem")])
        assert code == ErrorCode.INVALID_REQUEST and "/no/such.pem" in (message or "")
        for name, refusal in (  # Kafka's (a PEM keystore's entry is `kafka`, as Kafka's)
            ("other-subject.pem", "Keystore DistinguishedName does not match:  existing={alias="
             "kafka, DN=OU=brokers, O=trustme"),
            ("fewer-names.pem", "Keystore SubjectAltNames do not match:  existing={alias=kafka, "
             "SAN=[[2, localhost], [7, 127.0.0.1]]}, new={alias=kafka, SAN=[[2, localhost]]}"),
        ):  # fmt: skip
            code, message = alter_configs(
                broker.bootstrap, BROKER, "0", [(key, SET, str(tmp_path / name))]
            )
            assert code == ErrorCode.INVALID_REQUEST and refusal in (message or ""), message
        assert served_certificate(address, ca) == der(old)
        ok = alter_configs(broker.bootstrap, BROKER, "0", [(key, SET, str(tmp_path / "new.pem"))])
        assert ok == (ErrorCode.NONE, None)
        assert served_certificate(address, ca) == der(new)
        # The same location again reads the file again (a renewed certificate).
        renewed = renewal(ca, "localhost", "127.0.0.1", "broker.example")
        renewed.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "new.pem"))
        again = [(key, SET, str(tmp_path / "new.pem"))]
        assert alter_configs(broker.bootstrap, BROKER, "0", again) == (ErrorCode.NONE, None)
        assert served_certificate(address, ca) == der(renewed)
    # Allowed, a certificate of another subject is taken.
    allowed = {**props, "ssl.allow.dn.changes": "true"}
    with running(tmp_path / "data", allowed, listeners=("SSL",)) as broker:
        other = [(key, SET, str(tmp_path / "other-subject.pem"))]
        assert alter_configs(broker.bootstrap, BROKER, "0", other) == (ErrorCode.NONE, None)
        address = ("127.0.0.1", broker.ports["SSL"])
        assert served_certificate(address, ca) == der(certs["other-subject.pem"])


def test_the_inter_broker_listener_s_new_stores_must_connect_to_the_old(tmp_path: Path) -> None:
    """As Kafka's SslEngineValidator on the inter-broker listener: a keystore from a new CA is
    refused while the truststore trusts only the old one (the other brokers could not connect),
    and taken once the truststore trusts both, the usual rotation."""
    old_ca, new_ca = trustme.CA(), trustme.CA()
    old, new = renewal(old_ca, "localhost", "127.0.0.1"), renewal(new_ca, "localhost", "127.0.0.1")
    old.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "old.pem"))
    new.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "new.pem"))
    old_ca.cert_pem.write_to_path(str(tmp_path / "old-ca.pem"))
    both = old_ca.cert_pem.bytes() + new_ca.cert_pem.bytes()
    (tmp_path / "both-ca.pem").write_bytes(both)
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tmp_path / "old.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tmp_path / "old-ca.pem"),
        "ssl.client.auth": "requested",
    }
    prefix = "listener.name.ssl.ssl."
    with running(tmp_path / "data", props) as broker:
        bootstrap = f"127.0.0.1:{broker.ports['PLAINTEXT']}"
        keystore = [(prefix + "keystore.location", SET, str(tmp_path / "new.pem"))]
        code, message = alter_configs(bootstrap, BROKER, "0", keystore)
        assert code == ErrorCode.INVALID_REQUEST, message
        assert "cannot connect to one with the" in (message or ""), message
        truststore = [(prefix + "truststore.location", SET, str(tmp_path / "both-ca.pem"))]
        assert alter_configs(bootstrap, BROKER, "0", truststore) == (ErrorCode.NONE, None)
        assert alter_configs(bootstrap, BROKER, "0", keystore) == (ErrorCode.NONE, None)
        assert served_certificate(("127.0.0.1", broker.ports["SSL"]), new_ca) == der(new)


def renew(path: Path, data: bytes) -> None:
    """Write a store anew at `path`, its modification time a second past the last one's: a
    file system stamps files with a coarse clock (two writes within a tick share a time), and
    a real renewal comes long after the broker read the file."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_bytes(data)
    after = max(before + 1_000_000_000, path.stat().st_mtime_ns)
    os.utime(path, ns=(after, after))


def test_stores_renewed_in_place_on_the_inter_broker_listener(tmp_path: Path) -> None:
    """As Kafka, a change of the broker's own configs (the same store location again, or any
    other key) reads again the listeners' store files modified since they were read, and
    checks them as new stores: on the inter-broker listener, the handshakes between the old
    stores, as read then, and the new. A keystore renewed from a CA the truststores do not
    trust, or with a truststore trusting both at once, is refused (Kafka's INVALID_CONFIG: the
    other brokers, with the old truststore, would not trust it); the rotation in place,
    truststore first, is taken. No client certificates: only the brokers' own are checked."""
    old_ca, new_ca = trustme.CA(), trustme.CA()
    keystore, truststore = tmp_path / "keystore.pem", tmp_path / "truststore.pem"

    def renew_keystore(ca: trustme.CA) -> trustme.LeafCert:
        cert = renewal(ca, "localhost", "127.0.0.1")
        renew(keystore, cert.private_key_and_cert_chain_pem.bytes())
        return cert

    served = renew_keystore(old_ca)
    renew(truststore, old_ca.cert_pem.bytes())
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(truststore),
    }
    both = old_ca.cert_pem.bytes() + new_ca.cert_pem.bytes()
    refused = (
        "Invalid config value for resource ConfigResource(type=BROKER, name='0'): Validation "
        "of dynamic config update of SSLFactory failed: a broker with the {} stores of the "
        "inter-broker listener SSL cannot connect to one with the {} ones"
    )
    same_keystore = [("listener.name.ssl.ssl.keystore.location", SET, str(keystore))]
    with running(tmp_path / "data", props) as broker:
        bootstrap = f"127.0.0.1:{broker.ports['PLAINTEXT']}"
        address = ("127.0.0.1", broker.ports["SSL"])
        renew_keystore(new_ca)  # the other brokers do not trust it
        for ops in (same_keystore, [("message.max.bytes", SET, "1000013")]):
            code, message = alter_configs(bootstrap, BROKER, "0", ops)
            assert code == ErrorCode.INVALID_CONFIG, message
            assert (message or "").startswith(refused.format("old", "new")), message
        served = renew_keystore(old_ca)
        assert alter_configs(bootstrap, BROKER, "0", same_keystore) == (ErrorCode.NONE, None)
        assert served_certificate(address, old_ca) == der(served)
        # Both at once: the other brokers, with the old truststore, would not trust it.
        renew_keystore(new_ca)
        renew(truststore, both)
        code, message = alter_configs(bootstrap, BROKER, "0", same_keystore)
        assert (message or "").startswith(refused.format("old", "new")), message
        # The rotation: the truststores first (the keystore as it was), then the keystore.
        renew_keystore(old_ca)
        assert alter_configs(bootstrap, BROKER, "0", same_keystore) == (ErrorCode.NONE, None)
        served = renew_keystore(new_ca)
        assert alter_configs(bootstrap, BROKER, "0", same_keystore) == (ErrorCode.NONE, None)
        assert served_certificate(address, new_ca) == der(served)


@pytest.mark.skipif(shutil.which("keytool") is None, reason="no JDK keytool")
def test_a_keystore_with_another_number_of_entries_is_refused(tmp_path: Path) -> None:
    """As Kafka's SslFactory, a new keystore must hold as many entries with a certificate as
    the old one (here, keytool added the CA as a trusted entry to a copy), unless both
    `ssl.allow.dn.changes` and `ssl.allow.san.changes` are true; Kafka's answer."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    one, two = tmp_path / "one.p12", tmp_path / "two.p12"
    one.write_bytes(pkcs12_keystore(renewal(ca, "localhost"), STORE_PASSWORD))
    shutil.copy(one, two)
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "caroot", "-file",
         str(tmp_path / "ca.pem"), "-keystore", str(two), "-storepass", STORE_PASSWORD],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    props = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(one),
        "ssl.keystore.password": STORE_PASSWORD,
    }
    new = [("listener.name.ssl.ssl.keystore.location", SET, str(two))]
    with running(tmp_path / "data", props, listeners=("SSL",)) as broker:
        code, message = alter_configs(broker.bootstrap, BROKER, "0", new)
    assert code == ErrorCode.INVALID_REQUEST
    assert (message or "").startswith(  # Kafka 3.9's answer, as it gave it
        "Invalid value org.apache.kafka.common.config.ConfigException: Validation of dynamic "
        "config update of SSLFactory failed: org.apache.kafka.common.config.ConfigException: "
        "Keystore entries do not match, existing store contains 1 entries, new store contains "
        "2 entries"
    ), message
    assert (message or "").endswith(" for configuration Invalid dynamic configuration")
    allowed = {**props, "ssl.allow.dn.changes": "true", "ssl.allow.san.changes": "true"}
    with running(tmp_path / "data", allowed, listeners=("SSL",)) as broker:
        assert alter_configs(broker.bootstrap, BROKER, "0", new) == (ErrorCode.NONE, None)


@pytest.mark.skipif(shutil.which("keytool") is None, reason="no JDK keytool")
def test_every_entry_of_a_keystore_is_compared(tmp_path: Path) -> None:
    """As Kafka's SslFactory, each entry of a new keystore is compared with the old one's at its
    place, not only the key's: a keystore whose key is renewed but whose trusted CA entry (keytool
    added it) is another CA's is refused, with Kafka's message (the entry's alias, the subject as
    Java prints it); allowed by `ssl.allow.dn.changes`."""
    ca, other_ca = trustme.CA(), trustme.CA()
    stores = {}
    for name, trusted in (("old", ca), ("new", other_ca)):
        trusted.cert_pem.write_to_path(str(tmp_path / f"{name}-ca.pem"))
        stores[name] = tmp_path / f"{name}.p12"
        stores[name].write_bytes(pkcs12_keystore(renewal(ca, "localhost"), STORE_PASSWORD))
        subprocess.run(
            ["keytool", "-importcert", "-noprompt", "-alias", "CARoot", "-file",
             str(tmp_path / f"{name}-ca.pem"), "-keystore", str(stores[name]), "-storepass",
             STORE_PASSWORD],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    props = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(stores["old"]),
        "ssl.keystore.password": STORE_PASSWORD,
    }
    new = [("listener.name.ssl.ssl.keystore.location", SET, str(stores["new"]))]
    with running(tmp_path / "data", props, listeners=("SSL",)) as broker:
        code, message = alter_configs(broker.bootstrap, BROKER, "0", new)
    ca_name = x509.load_pem_x509_certificate(ca.cert_pem.bytes()).subject
    ou, o = (
        ca_name.get_attributes_for_oid(oid)[0].value
        for oid in (x509.NameOID.ORGANIZATIONAL_UNIT_NAME, x509.NameOID.ORGANIZATION_NAME)
    )
    subject = f'OU="{ou!s}", O={o!s}'  # as Java prints it: the last first, "#" quoted
    assert code == ErrorCode.INVALID_REQUEST
    assert (  # Kafka's, the alias in lower case as Java lists it
        "Keystore DistinguishedName does not match:  existing={alias=caroot, "
        f'DN={subject}}}, new={{alias=caroot, DN=OU="Testing CA #'
    ) in (message or ""), message
    allowed = {**props, "ssl.allow.dn.changes": "true"}
    with running(tmp_path / "data", allowed, listeners=("SSL",)) as broker:
        assert alter_configs(broker.bootstrap, BROKER, "0", new) == (ErrorCode.NONE, None)


def der(cert: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


def served_certificate(address: tuple[str, int], ca: trustme.CA) -> bytes:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with (
        socket.create_connection(address, timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der
