"""Connection creation rate quotas (KIP-612) on a broker process: Kafka's kafka-configs
`--entity-type ips`, an address over its `connection_creation_rate` closed unserved after the
throttle time, the default IP, and the broker's and a listener's `max.connection.creation.rate`
changed at run time.

The quotas are sampled over two windows of one second (`quota.window.num=2`). The throttled
clients connect from 127.0.0.2 (another address on the loopback), so the test's own admin
connections from 127.0.0.1 are not held to the quota under test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.kafka_process import jars_available, run_kafka_tool
from protocol.errors import ErrorCode
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from protocol.messages.fetch import FetchRequest
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import (
    BROKER,
    DELETE,
    SET,
    RawClient,
    Samples,
    alter_configs,
    create_topic,
    fetch_request,
    scrape,
    value,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
CLIENT_IP = "127.0.0.2"
A = AlterClientQuotasRequest
D = DescribeClientQuotasRequest
API_VERSIONS = ApiVersionsRequest(client_software_name="test", client_software_version="1")
SOCKET_METRICS = "kafka_server_socket_server_metrics_"
CREATED = f"{SOCKET_METRICS}connection_creation_total"
LISTENER = {"listener": "PLAINTEXT"}

needs_jars = pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    properties = {"quota.window.num": "2", "wirebroker.metrics.listener": "127.0.0.1:0"}
    with serving(BrokerProcess(tmp_path, properties)) as b:
        yield b


def set_ip_quota(bootstrap: str, ip: str | None, rate: float | None) -> None:
    """AlterClientQuotas of an ip entity (None: the default IP); rate None removes it."""
    op = A.OpData(key="connection_creation_rate", value=rate or 0.0, remove=rate is None)
    entry = A.EntryData(entity=[A.EntityData(entity_type="ip", entity_name=ip)], ops=[op])
    with RawClient(bootstrap) as raw:
        answer = raw.request(A(entries=[entry]), 1)
    assert [(e.error_code, e.error_message) for e in answer.entries] == [(ErrorCode.NONE, None)]


def served(bootstrap: str) -> tuple[bool, float]:
    """Connect from CLIENT_IP and ask ApiVersions: (answered, seconds until answered or
    closed)."""
    started = time.monotonic()
    with RawClient(bootstrap, source=CLIENT_IP, timeout=20) as client:
        try:
            answered = client.request(API_VERSIONS, 3).error_code == ErrorCode.NONE
        except ConnectionError:
            answered = False
    return answered, time.monotonic() - started


def answered(bootstrap: str) -> bool:
    """Connect from 127.0.0.1 and ask ApiVersions: answered (not closed unserved)."""
    with RawClient(bootstrap) as client:
        try:
            return client.request(API_VERSIONS, 3).error_code == ErrorCode.NONE
        except ConnectionError:
            return False


def metrics(broker: BrokerProcess) -> Samples:
    line = broker.wait_for_log("metrics endpoint on")
    assert line is not None
    return scrape(line.split("metrics endpoint on ")[1].strip())


def connections_created(broker: BrokerProcess) -> float:
    return value(metrics(broker), CREATED, listener="PLAINTEXT", networkProcessor="0")


def test_an_ip_over_its_rate_is_closed_unserved_after_the_throttle_time(
    broker: BrokerProcess,
) -> None:
    b = broker.bootstrap
    set_ip_quota(b, CLIENT_IP, 1)
    created = connections_created(broker)
    assert served(b)[0]
    # The second within the window is over 1 a second: Kafka accepts it, serves nothing and
    # closes it once the throttle time (about a second here) has passed.
    answered, closed_after = served(b)
    assert not answered
    assert closed_after >= 0.1  # (1000 ms less the time since the first), not at once
    # Only the served connection was created, as Kafka's selector counts them; the throttle
    # time given is Kafka's ip-connection-accept-throttle-time.
    assert connections_created(broker) == created + 1
    samples = metrics(broker)
    ip_throttle = value(samples, f"{SOCKET_METRICS}ip_connection_accept_throttle_time", **LISTENER)
    assert 100 <= ip_throttle <= 1000
    assert value(samples, f"{SOCKET_METRICS}connection_accept_rate", **LISTENER) > 0
    # Another address is not held to it.
    with RawClient(b) as other:
        assert other.request(API_VERSIONS, 3).error_code == ErrorCode.NONE
    # The quota removed: connections from the address are served again at once.
    set_ip_quota(b, CLIENT_IP, None)
    assert all(served(b)[0] for _ in range(5))


def test_the_default_ip_quota_and_an_ip_override(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    set_ip_quota(b, "127.0.0.1", 1000)  # the test's own connections: a quota of their own
    set_ip_quota(b, None, 1)
    assert served(b)[0]
    assert not served(b)[0]  # the default IP's quota
    set_ip_quota(b, CLIENT_IP, 1000)  # an address's own quota wins over the default
    assert all(served(b)[0] for _ in range(5))
    with RawClient(b) as raw:
        answer = raw.request(
            D(
                components=[D.ComponentData(entity_type="ip", match_type=2, match=None)],
                strict=False,
            ),
            1,
        )
    assert answer.error_code == ErrorCode.NONE
    described = {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): [
            (v.key, v.value) for v in entry.values
        ]
        for entry in answer.entries
    }
    assert described == {
        (("ip", None),): [("connection_creation_rate", 1.0)],
        (("ip", "127.0.0.1"),): [("connection_creation_rate", 1000.0)],
        (("ip", CLIENT_IP),): [("connection_creation_rate", 1000.0)],
    }


def test_broker_and_listener_rates_change_at_run_time(broker: BrokerProcess) -> None:
    b = broker.bootstrap
    for resource, key in (
        ("", "max.connection.creation.rate"),
        ("0", "listener.name.plaintext.max.connection.creation.rate"),
    ):
        assert alter_configs(b, BROKER, resource, [(key, SET, "2")])[0] == ErrorCode.NONE
        # Each connection is served, but the accepts are spread to about 2 a second.
        started = time.monotonic()
        assert all(served(b)[0] for _ in range(6))
        assert time.monotonic() - started >= 1.0
        throttle = f"{SOCKET_METRICS}connection_accept_throttle_time"
        assert value(metrics(broker), throttle, **LISTENER) > 0
        assert alter_configs(b, BROKER, resource, [(key, DELETE, None)])[0] == ErrorCode.NONE
    # A rate of 0 is refused, as Kafka's listener validation does.
    code, message = alter_configs(b, BROKER, "", [("max.connection.creation.rate", SET, "0")])
    assert code == ErrorCode.INVALID_REQUEST
    assert message is not None and "Invalid max.connection.creation.rate 0" in message


@needs_jars
def test_kafka_configs_entity_type_ips(broker: BrokerProcess) -> None:
    base = ["--bootstrap-server", broker.bootstrap]
    ip = ("--entity-type", "ips", "--entity-name", CLIENT_IP)
    run_kafka_tool(
        CONFIG_COMMAND, [*base, "--alter", *ip, "--add-config", "connection_creation_rate=3"]
    )
    default = ("--entity-type", "ips", "--entity-default")
    run_kafka_tool(
        CONFIG_COMMAND, [*base, "--alter", *default, "--add-config", "connection_creation_rate=50"]
    )
    out = run_kafka_tool(
        CONFIG_COMMAND, [*base, "--describe", "--entity-type", "ips"]
    ).stdout.decode()
    assert f"Quota configs for ip '{CLIENT_IP}' are connection_creation_rate=3.0" in out
    assert "Quota configs for the default ip are connection_creation_rate=50.0" in out
    run_kafka_tool(
        CONFIG_COMMAND, [*base, "--alter", *ip, "--delete-config", "connection_creation_rate"]
    )
    out = run_kafka_tool(CONFIG_COMMAND, [*base, "--describe", *ip]).stdout.decode()
    assert "connection_creation_rate" not in out
    # The tool checks the address itself, as against Kafka (the broker's own check:
    # test_quotas.py::test_alter_answers_each_entry).
    bad = run_kafka_tool(
        CONFIG_COMMAND,
        [
            *base,
            "--alter",
            "--entity-type",
            "ips",
            "--entity-name",
            "not.an.address.invalid",
            "--add-config",
            "connection_creation_rate=3",
        ],
        check=False,
    )
    assert bad.returncode != 0
    assert b"must be a valid IP or resolvable host" in bad.stdout + bad.stderr


def test_the_inter_broker_listener_closes_the_least_recently_used_connection_of_another(
    tmp_path: Path,
) -> None:
    """KIP-402: with `max.connections` reached, the inter-broker listener (PLAINTEXT) still
    accepts, and the broker closes the least recently used connection of another listener to
    get back to it; a lower `max.connections` closes the least recently used ones too."""
    properties = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT",
        "wirebroker.metrics.listener": "127.0.0.1:0",
    }
    with serving(BrokerProcess(tmp_path, properties, extra_listeners=("EXTRA",))) as broker:
        extra = f"127.0.0.1:{broker.ports['EXTRA']}"
        ok = alter_configs(broker.bootstrap, BROKER, "", [("max.connections", SET, "3")])
        assert ok == (ErrorCode.NONE, None)
        clients = [RawClient(extra) for _ in range(3)]

        def use(*which: int) -> None:
            for i in which:
                assert clients[i].request(API_VERSIONS, 3).error_code == ErrorCode.NONE

        try:
            use(1, 2, 0)  # 1 is the least recently used, not the oldest
            with RawClient(broker.bootstrap) as inter_broker:
                assert inter_broker.request(API_VERSIONS, 3).error_code == ErrorCode.NONE
                assert clients[1].wait_closed(10.0), "the least recently used stays open"
                use(2, 0)
            wait_until(  # (the inter-broker one's close seen by the broker)
                lambda: (
                    value(
                        metrics(broker),
                        f"{SOCKET_METRICS}connection_count",
                        listener="PLAINTEXT",
                        networkProcessor="0",
                    )
                    == 0
                ),
                what="PLAINTEXT's connections to close",
            )
            # Two held (0 and 2); max.connections lowered to 2 by a request of PLAINTEXT (its
            # connection the third): the least recently used of EXTRA goes.
            use(0, 2)
            ok = alter_configs(broker.bootstrap, BROKER, "", [("max.connections", SET, "2")])
            assert ok == (ErrorCode.NONE, None)
            assert clients[0].wait_closed(10.0)
            use(2)
        finally:
            for client in clients:
                client.close()


def test_a_write_counts_as_a_use_for_the_least_recently_used_close(tmp_path: Path) -> None:
    """KIP-402's close takes the least recently used connection counting writes too, as
    Kafka's selector updates its lruConnections on both: a connection whose long-polling Fetch
    was answered after another's last request is the more recently used."""
    properties = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT",
        "num.partitions": "1",
    }
    with serving(BrokerProcess(tmp_path, properties, extra_listeners=("EXTRA",))) as broker:
        extra = f"127.0.0.1:{broker.ports['EXTRA']}"
        create_topic(broker.bootstrap, "t")
        ok = alter_configs(broker.bootstrap, BROKER, "", [("max.connections", SET, "2")])
        assert ok == (ErrorCode.NONE, None)
        with RawClient(extra) as polling, RawClient(extra) as asking:
            # read from `polling` first; its answer (a write) comes after `asking`'s request
            fetch = polling.send(fetch_request("t", max_wait_ms=1500, min_bytes=1), 11)
            assert asking.request(API_VERSIONS, 3).error_code == ErrorCode.NONE
            polling.receive(FetchRequest, 11, fetch)
            with RawClient(broker.bootstrap) as inter_broker:
                assert inter_broker.request(API_VERSIONS, 3).error_code == ErrorCode.NONE
                assert asking.wait_closed(10.0), "the least recently used stays open"
                assert polling.request(API_VERSIONS, 3).error_code == ErrorCode.NONE


def test_per_ip_overrides_by_host_name(broker: BrokerProcess) -> None:
    """`max.connections.per.ip.overrides` names hosts, resolved as Kafka's InetAddress does
    (localhost: 127.0.0.1), set at run time: the second connection from 127.0.0.1 is closed at
    once, another address is not held to it."""
    key = "max.connections.per.ip.overrides"
    # `held` connects first: alter_configs' own connection may still be counted after it closes
    with RawClient(broker.bootstrap) as held:
        assert alter_configs(broker.bootstrap, BROKER, "", [(key, SET, "localhost:1")]) == (
            ErrorCode.NONE,
            None,
        )
        assert held.request(API_VERSIONS, 3).error_code == ErrorCode.NONE

        def second_refused() -> bool:  # (the override applies once localhost is resolved)
            with RawClient(broker.bootstrap) as second:
                return second.wait_closed(1.0)

        wait_until(second_refused, what="the override of localhost to apply")
        assert served(broker.bootstrap)[0]  # 127.0.0.2: no override

    def removed() -> bool:  # (from localhost once the broker has seen `held` close)
        try:
            return alter_configs(broker.bootstrap, BROKER, "", [(key, DELETE, None)]) == (
                ErrorCode.NONE,
                None,
            )
        except ConnectionError:
            return False

    wait_until(removed, what="the override to be deleted")
    with RawClient(broker.bootstrap) as one:
        assert one.request(API_VERSIONS, 3).error_code == ErrorCode.NONE
        wait_until(lambda: not second_refused(), what="the override to be removed")


def test_per_ip_limits_kafka_refuses_at_run_time(broker: BrokerProcess) -> None:
    """KafkaConfig's checks hold for a dynamic change too: a per-IP limit of 0 without
    overrides, an override's host with characters outside Utils.validHostPattern. Nothing
    changes: a client still connects."""
    b = broker.bootstrap
    for changes, message in (
        (
            [("max.connections.per.ip", SET, "0")],
            "requirement failed: max.connections.per.ip can be set to zero only if "
            "max.connections.per.ip.overrides property is set.",
        ),
        (
            [("max.connections.per.ip.overrides", SET, "good-host:2,bad/host:1")],
            "max.connections.per.ip.overrides contains invalid addresses : bad/host",
        ),
    ):
        code, got = alter_configs(b, BROKER, "", changes)
        assert code == ErrorCode.INVALID_REQUEST
        assert got is not None and message in got, got
    # 0 with an override (this address's) is Kafka's allowed form
    changes = [
        ("max.connections.per.ip", SET, "0"),
        ("max.connections.per.ip.overrides", SET, "127.0.0.1:100"),
    ]
    assert alter_configs(b, BROKER, "", changes) == (ErrorCode.NONE, None)
    wait_until(lambda: answered(b), what="the override to apply")  # (resolved off the loop)
    assert not served(b)[0]  # 127.0.0.2: no override, so none


def test_an_ip_quota_of_a_host_name_applies_to_its_address(broker: BrokerProcess) -> None:
    """An ip entity may be a host name that resolves (Kafka's isValidIpEntity): it is kept
    under that name and applies to the address it resolves to; the address's own accept rate
    is exported (`connection_accept_rate{ip}`). A name that does not resolve is refused with
    Kafka's message."""
    admin = f"127.0.0.1:{broker.port}"

    def alter(name: str, rate: float) -> tuple[int, str | None]:
        op = A.OpData(key="connection_creation_rate", value=rate, remove=False)
        entry = A.EntryData(entity=[A.EntityData(entity_type="ip", entity_name=name)], ops=[op])
        with RawClient(admin, source=CLIENT_IP) as raw:
            (answer,) = raw.request(A(entries=[entry]), 1).entries
        return answer.error_code, answer.error_message

    assert alter("localhost", 1) == (ErrorCode.NONE, None)
    assert alter("no-such-host.invalid", 1) == (
        ErrorCode.INVALID_REQUEST,
        "no-such-host.invalid is not a valid IP or resolvable host.",
    )
    # localhost is 127.0.0.1: its second connection within the window is not served.
    assert answered(admin)
    assert not answered(admin)
    assert served(admin)[0]  # 127.0.0.2 is not localhost
    ip_rate = value(metrics(broker), f"{SOCKET_METRICS}connection_accept_rate", ip="127.0.0.1")
    assert ip_rate > 0
    with RawClient(admin, source=CLIENT_IP) as raw:
        answer = raw.request(
            D(components=[D.ComponentData(entity_type="ip", match_type=2)], strict=False), 1
        )
    assert [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in answer.entries] == [
        [("ip", "localhost")]
    ]
    # Kept by name in client-quotas.json, resolved again when the broker starts.
    broker.restart()
    admin = f"127.0.0.1:{broker.port}"
    assert answered(admin)
    assert not answered(admin)
