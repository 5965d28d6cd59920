"""Listeners added and removed at run time on an embedded broker (Kafka's dynamic `listeners`,
`advertised.listeners`, `listener.security.protocol.map`, per broker only).

Each test runs its own broker process and changes its listeners over the wire
(IncrementalAlterConfigs, as `kafka-configs --entity-name <id>` does); clients then use them
(confluent-kafka, TLS with Python's ssl). tests/cluster/test_dynamic_listeners_cluster.py
checks that the other brokers of a cluster learn them.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import trustme

from compat.kafka_process import free_port
from protocol.errors import ErrorCode
from protocol.messages.metadata import MetadataRequest
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import (
    BROKER,
    SET,
    RawClient,
    alter_configs,
    create_topic,
    round_trip_confluent,
    scrape,
    wait_until,
)
from tests.wirebroker.test_dynamic_configs import der, served_certificate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MAP = "listener.security.protocol.map"
PLAIN_MAP = "PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT"
SOCKET_METRICS = "kafka_server_socket_server_metrics_"


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def advertised(bootstrap: str) -> dict[int, tuple[str, int]]:
    """The brokers a Metadata answer on this connection's listener advertises."""
    with RawClient(bootstrap) as client:
        response = client.request(MetadataRequest(topics=[]), 12)
    return {b.node_id: (b.host, b.port) for b in response.brokers}


def add_listener(
    broker: BrokerProcess, name: str, protocol: str, *more: tuple[str, int, str | None]
) -> int:
    """Add listener `name` (`protocol`, on a free port, with the keys `more`) beside
    PLAINTEXT, as kafka-configs does; its port once it accepts."""
    port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{broker.port},{name}://127.0.0.1:{port}"
    operations = [
        ("listeners", SET, listeners),
        (MAP, SET, f"PLAINTEXT:PLAINTEXT,{name}:{protocol}"),
        *more,
    ]
    assert alter_configs(broker.bootstrap, BROKER, "0", operations) == (ErrorCode.NONE, None)
    wait_until(lambda: accepts(port), what=f"the new listener {name} to accept")
    return port


def test_a_listener_added_serves_clients_and_comes_back_after_a_restart(tmp_path: Path) -> None:
    with serving(BrokerProcess(tmp_path)) as broker:
        plain = broker.port
        extra = add_listener(broker, "EXTRA", "PLAINTEXT")
        listeners = f"PLAINTEXT://127.0.0.1:{plain},EXTRA://127.0.0.1:{extra}"
        assert broker.wait_for_log("listener EXTRA://127.0.0.1") is not None
        # Each listener's clients are told the endpoints of their own listener.
        assert advertised(f"127.0.0.1:{extra}") == {0: ("127.0.0.1", extra)}
        assert advertised(broker.bootstrap) == {0: ("127.0.0.1", plain)}
        create_topic(broker.bootstrap, "through-extra")
        assert round_trip_confluent(f"127.0.0.1:{extra}", "through-extra") == [b"m0", b"m1", b"m2"]

        stored = json.loads((tmp_path / "dynamic-broker-configs.json").read_text())
        assert stored["brokers"]["0"] == {"listeners": listeners, MAP: PLAIN_MAP}
        broker.restart()
        assert broker.ports == {"PLAINTEXT": plain, "EXTRA": extra}
        assert advertised(f"127.0.0.1:{extra}") == {0: ("127.0.0.1", extra)}
        create_topic(broker.bootstrap, "after-restart")
        assert round_trip_confluent(f"127.0.0.1:{extra}", "after-restart") == [b"m0", b"m1", b"m2"]


def test_a_listener_removed_refuses_connections_and_closes_its_open_ones(tmp_path: Path) -> None:
    props = {MAP: PLAIN_MAP}
    with serving(BrokerProcess(tmp_path, props, extra_listeners=("EXTRA",))) as broker:
        extra = broker.ports["EXTRA"]
        with RawClient(f"127.0.0.1:{extra}") as open_one:
            assert open_one.request(MetadataRequest(topics=[]), 12).brokers
            ok = alter_configs(
                broker.bootstrap,
                BROKER,
                "0",
                [("listeners", SET, f"PLAINTEXT://127.0.0.1:{broker.port}")],
            )
            assert ok == (ErrorCode.NONE, None)
            assert open_one.wait_closed(10.0), "the removed listener's connection stays open"
        wait_until(lambda: not accepts(extra), what="the removed listener to refuse")
        assert advertised(broker.bootstrap) == {0: ("127.0.0.1", broker.port)}
        # Adding it back under its name opens it again.
        back = f"PLAINTEXT://127.0.0.1:{broker.port},EXTRA://127.0.0.1:{extra}"
        ok = alter_configs(broker.bootstrap, BROKER, "0", [("listeners", SET, back)])
        assert ok == (ErrorCode.NONE, None)
        wait_until(lambda: accepts(extra), what="the listener added again to accept")


def test_refusals_use_kafkas_messages(tmp_path: Path) -> None:
    props = {MAP: PLAIN_MAP + ",SECURE:SSL"}
    with serving(BrokerProcess(tmp_path, props, extra_listeners=("EXTRA",))) as broker:
        b, plain, extra = broker.bootstrap, broker.port, broker.ports["EXTRA"]
        here = f"PLAINTEXT://127.0.0.1:{plain},EXTRA://127.0.0.1:{extra}"

        def refused(*operations: tuple[str, int, str | None], entity: str = "0") -> str:
            code, message = alter_configs(b, BROKER, entity, list(operations))
            assert code == ErrorCode.INVALID_REQUEST, (code, message)
            return message or ""

        assert refused(("listeners", SET, here), entity="") == (
            "Cannot update these configs at default cluster level, broker id must be "
            "specified: Set(listeners)"
        )
        assert refused(("listeners", SET, f"EXTRA://127.0.0.1:{extra}")) == (
            "requirement failed: inter.broker.listener.name must be a listener name defined in "
            "advertised.listeners. The valid options based on currently configured listeners "
            "are EXTRA"
        )
        assert "No security protocol defined for listener NEW" in refused(
            ("listeners", SET, f"{here},NEW://127.0.0.1:{free_port()}")
        )
        assert "Security protocol cannot be updated for existing listener ListenerName(EXTRA)" in (
            refused((MAP, SET, "PLAINTEXT:PLAINTEXT,EXTRA:SSL"))
        )
        assert "advertised.listeners listener names must be equal to or a subset" in refused(
            ("advertised.listeners", SET, f"{here},SECURE://127.0.0.1:1")
        )
        # An SSL listener without a keystore: nothing insecure.
        assert "listener SECURE is SSL but has no keystore" in refused(
            ("listeners", SET, f"{here},SECURE://127.0.0.1:{free_port()}")
        )
        assert not (tmp_path / "dynamic-broker-configs.json").exists()
        assert advertised(f"127.0.0.1:{extra}") == {0: ("127.0.0.1", extra)}


def test_an_ssl_listener_added_with_its_keystore_in_the_same_request(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    with serving(BrokerProcess(tmp_path / "data")) as broker:
        secure = add_listener(
            broker,
            "SECURE",
            "SSL",
            ("listener.name.secure.ssl.keystore.type", SET, "PEM"),
            ("listener.name.secure.ssl.keystore.location", SET, str(tmp_path / "server.pem")),
        )
        assert served_certificate(("127.0.0.1", secure), ca) == der(cert)
        # A plaintext client on it gets no Kafka answer.
        with socket.create_connection(("127.0.0.1", secure), timeout=10) as raw:
            raw.sendall(b"\x00\x00\x00\x0a" + b"\x00" * 10)
            raw.settimeout(10)
            try:
                answer = raw.recv(100)
            except ConnectionResetError:
                answer = b""
        assert not answer.startswith(b"\x00\x00")


def test_a_sasl_listener_added_with_its_users_in_the_same_request(tmp_path: Path) -> None:
    """Its mechanisms and JAAS config (a password: encrypted with password.encoder.secret) come
    with it; a connection on it that does not log in gets no answer to anything else."""
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_ann="ann-pw";'
    props = {"password.encoder.secret": "encoder-secret-9"}
    with serving(BrokerProcess(tmp_path, props)) as broker:
        sasl = add_listener(
            broker,
            "SASL",
            "SASL_PLAINTEXT",
            ("listener.name.sasl.sasl.enabled.mechanisms", SET, "PLAIN"),
            ("listener.name.sasl.plain.sasl.jaas.config", SET, jaas),
        )
        with RawClient(f"127.0.0.1:{sasl}", plain=("ann", "ann-pw")) as client:
            assert client.request(MetadataRequest(topics=[]), 12).brokers
        with pytest.raises(ConnectionError):
            RawClient(f"127.0.0.1:{sasl}", plain=("ann", "wrong")).close()
        with RawClient(f"127.0.0.1:{sasl}") as anonymous:
            anonymous.send(MetadataRequest(topics=[]), 12)
            assert anonymous.wait_closed(10.0)
        assert not any("ann-pw" in line for line in broker.log)


def test_a_listener_added_has_its_connection_limit(tmp_path: Path) -> None:
    """`listener.name.<l>.max.connections` given with the new listener: its second connection
    waits (in the listen backlog) until the first closes, as on a listener of the start."""
    with serving(BrokerProcess(tmp_path)) as broker:
        # (the check that it accepts closes its connection at once)
        extra = add_listener(
            broker, "EXTRA", "PLAINTEXT", ("listener.name.extra.max.connections", SET, "1")
        )
        first = RawClient(f"127.0.0.1:{extra}")
        assert first.request(MetadataRequest(topics=[]), 12).brokers
        with RawClient(f"127.0.0.1:{extra}", timeout=1.0) as second:
            second.send(MetadataRequest(topics=[]), 12)
            with pytest.raises(TimeoutError):
                second.receive_frame()
            first.close()
            second.sock.settimeout(10.0)
            assert second.receive_frame()


def test_a_listener_removed_takes_its_metrics_with_it(tmp_path: Path) -> None:
    """Its connection quota metrics (rates, throttle times) and its connection metrics go
    when it is removed, as Kafka's removeListener: they do not wait for a restart."""
    props = {MAP: PLAIN_MAP, "wirebroker.metrics.listener": "127.0.0.1:0"}
    with serving(BrokerProcess(tmp_path, props, extra_listeners=("EXTRA",))) as broker:
        line = broker.wait_for_log("metrics endpoint on")
        assert line is not None
        url = line.split("metrics endpoint on ")[1].strip()

        def of_extra() -> set[str]:
            return {name for name, labels in scrape(url) if ("listener", "EXTRA") in labels}

        with RawClient(f"127.0.0.1:{broker.ports['EXTRA']}") as client:
            assert client.request(MetadataRequest(topics=[]), 12).brokers
            assert {
                f"{SOCKET_METRICS}connection_accept_rate",
                f"{SOCKET_METRICS}connection_accept_throttle_time",
                f"{SOCKET_METRICS}ip_connection_accept_throttle_time",
                f"{SOCKET_METRICS}connection_count",
            } <= of_extra()
            only_plain = [("listeners", SET, f"PLAINTEXT://127.0.0.1:{broker.port}")]
            assert alter_configs(broker.bootstrap, BROKER, "0", only_plain) == (
                ErrorCode.NONE,
                None,
            )
            assert client.wait_closed(10.0)
        wait_until(lambda: not of_extra(), what="EXTRA's metrics to go")


def test_a_listener_whose_bind_fails_is_kept_as_kafka_keeps_it(tmp_path: Path) -> None:
    """Its port is taken: AlterConfigs succeeds (it was answered on validation), the config is
    kept, the failure logged as Kafka logs it; another change of the listeners does not bind
    it again (Kafka starts its acceptor once), removing it and adding it back does."""
    with serving(BrokerProcess(tmp_path)) as broker, socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        listeners = f"PLAINTEXT://127.0.0.1:{broker.port},EXTRA://127.0.0.1:{port}"
        operations = [("listeners", SET, listeners), (MAP, SET, PLAIN_MAP)]
        assert alter_configs(broker.bootstrap, BROKER, "0", operations) == (ErrorCode.NONE, None)
        assert broker.wait_for_log("Unable to start acceptor for EXTRA") is not None
        stored = json.loads((tmp_path / "dynamic-broker-configs.json").read_text())
        assert stored["brokers"]["0"]["listeners"] == listeners
        taken.close()
        other = free_port()
        more = [("listeners", SET, f"{listeners},OTHER://127.0.0.1:{other}"),
                (MAP, SET, f"{PLAIN_MAP},OTHER:PLAINTEXT")]  # fmt: skip
        assert alter_configs(broker.bootstrap, BROKER, "0", more) == (ErrorCode.NONE, None)
        wait_until(lambda: accepts(other), what="OTHER to accept")
        assert not accepts(port)
        without = [("listeners", SET, f"PLAINTEXT://127.0.0.1:{broker.port}")]
        assert alter_configs(broker.bootstrap, BROKER, "0", without) == (ErrorCode.NONE, None)
        wait_until(lambda: not accepts(other), what="OTHER to be removed")
        assert alter_configs(broker.bootstrap, BROKER, "0", operations) == (ErrorCode.NONE, None)
        wait_until(lambda: accepts(port), what="EXTRA, added back, to accept")
