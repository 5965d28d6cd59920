"""Broker configuration: server.properties parsing, Kafka's defaults, clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from protocol.errors import ErrorCode, KafkaError
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig, ConfigError, Listener, parse_properties
from wirebroker.config_sources import DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG
from wirebroker.topic_configs import effective_values, log_config_for
from wirebroker.topics import validate_topic_name


def test_properties_syntax() -> None:
    text = "# comment\n! also\nlisteners=PLAINTEXT://0.0.0.0:9093\nlog.dirs : /a,/b\nnum.partitions 3\nx=a\\\n  b\n"
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://0.0.0.0:9093",
        "log.dirs": "/a,/b",
        "num.partitions": "3",
        "x": "ab",
    }


def test_defaults_are_kafkas_except_the_listed_ones() -> None:
    config = BrokerConfig.from_properties({})
    assert config.listeners() == [Listener("PLAINTEXT", "127.0.0.1", 9092)]
    assert config.log_dirs() == [Path("./data")]
    assert config.get_int("num.partitions") == 1
    assert config.get_int("message.max.bytes") == 1048588
    assert config.socket_request_max_bytes == 104857600
    assert config.connections_max_idle_ms == 600000
    assert config.retention_ms() == 168 * 3600 * 1000
    assert config.get_bool("auto.create.topics.enable")


def test_load_file_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("log.retention.hours=1\nlisteners=PLAINTEXT://127.0.0.1:0\n")
    config = BrokerConfig.load(path, {"num.partitions": "4"})
    assert config.retention_ms() == 3_600_000
    assert config.get_int("num.partitions") == 4
    assert config.listeners()[0].port == 0


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "127.0.0.1:9092"}, "NAME://host:port"),
        ({"num.partitions": "three"}, "not a whole number"),
        ({"auto.create.topics.enable": "yes"}, "true or false"),
        ({"log.cleaner.io.buffer.load.factor": "most"}, "not a number"),
        # never silently without the authorization asked for
        (
            {"authorizer.class.name": "kafka.security.auth.SimpleAclAuthorizer"},
            "is not implemented: wirebroker has Kafka's ACL authorizer "
            r"\(kafka.security.authorizer.AclAuthorizer\)",
        ),
        (
            {"super.users": "admin"},
            "super.users: expected a principal as principalType:principalName",
        ),
        ({"allow.everyone.if.no.acl.found": "1"}, "true or false"),
        ({"zookeeper.set.acl": "yes"}, "true or false"),
    ],
)
def test_bad_values_say_what_is_wrong(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(props)


def test_sasl_between_brokers_needs_its_mechanism_enabled() -> None:
    """Kafka's default inter-broker mechanism, GSSAPI, must be enabled on the inter-broker
    listener (refused here: it offers PLAIN only); with PLAIN set (and its JAAS entry holding the broker's login) the cluster config is good."""
    props = {
        "zookeeper.connect": "127.0.0.1:2181",
        "listeners": "INTERNAL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="b" password="p" user_b="p";'
        ),
    }
    with pytest.raises(
        ConfigError, match="sasl.mechanism.inter.broker.protocol=GSSAPI must be enabled"
    ):
        BrokerConfig.from_properties(props)
    config = BrokerConfig.from_properties(
        {**props, "sasl.mechanism.inter.broker.protocol": "PLAIN"}
    )
    assert config.inter_broker_listener() == "INTERNAL"


def test_listener_security_protocol_map() -> None:
    config = BrokerConfig.from_properties(
        {
            "listeners": "INTERNAL://127.0.0.1:9093,client://127.0.0.1:9092",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT, client:plaintext",
        }
    )
    assert config.security_protocol("INTERNAL") == "PLAINTEXT"
    assert config.security_protocol("CLIENT") == "PLAINTEXT"
    with pytest.raises(ConfigError, match="unknown security protocol 'TLS'"):
        BrokerConfig.from_properties(
            {"listeners": "A://127.0.0.1:1", "listener.security.protocol.map": "A:TLS"}
        )
    # As in Kafka, a listener name the map does not know is an error, not plaintext.
    with pytest.raises(ConfigError, match="INTERNAL:PLAINTEXT"):
        BrokerConfig.from_properties({"listeners": "INTERNAL://127.0.0.1:9093"})


def test_the_cleaner_offset_map_is_bounded_by_the_dedupe_buffer(tmp_path: Path) -> None:
    """Kafka's entry is 24 bytes (an MD5 and an offset), filled up to the load factor."""
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "log.cleaner.dedupe.buffer.size": "2400",
            "log.cleaner.io.buffer.load.factor": "0.5",
        }
    )
    broker = Broker.open(config)
    try:
        assert broker.log_manager.max_map_keys == 50
    finally:
        broker.close()
    default = Broker.open(BrokerConfig.from_properties({"log.dirs": str(tmp_path)}))
    try:
        assert default.log_manager.max_map_keys == int(134217728 // 24 * 0.9)
    finally:
        default.close()


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        BrokerConfig.load(tmp_path / "missing.properties")


def test_topic_config_sources() -> None:
    config = BrokerConfig.from_properties({"log.retention.hours": "2", "log.roll.ms": "60000"})
    values = {v.name: v for v in effective_values(config, {"segment.bytes": "1048576"})}
    assert (values["segment.bytes"].value, values["segment.bytes"].source) == (
        "1048576",
        DYNAMIC_TOPIC_CONFIG,
    )
    assert (values["segment.ms"].value, values["segment.ms"].source) == (
        "60000",
        STATIC_BROKER_CONFIG,
    )
    # As Kafka 3.9 reports it: the value follows log.retention.hours, but synonyms start at
    # log.retention.ms, which nothing sets, so none is listed and the source is the default.
    assert (values["retention.ms"].value, values["retention.ms"].source) == (
        "7200000",
        DEFAULT_CONFIG,
    )
    assert values["retention.ms"].synonyms == ()
    assert values["cleanup.policy"].source == DEFAULT_CONFIG
    assert log_config_for(config, {"segment.bytes": "1048576"}).segment_bytes == 1048576


@pytest.mark.parametrize("overrides", [{"no.such.config": "1"}, {"retention.ms": "soon"}])
def test_invalid_topic_configs(overrides: dict[str, str]) -> None:
    with pytest.raises(KafkaError) as e:
        log_config_for(BrokerConfig.from_properties({}), overrides)
    assert e.value.error_code == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "ünïcode"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(KafkaError) as e:
        validate_topic_name(name)
    assert e.value.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_valid_topic_names() -> None:
    for name in ["a", "A-b_c.1", "x" * 249]:
        validate_topic_name(name)


@pytest.mark.integration
def test_an_ssl_listener_without_keystore_exits_before_listening(tmp_path: Path) -> None:
    """`wirebroker serve` with an SSL listener but no keystore says why and exits 2: it never
    says ready (and never serves that listener in plaintext)."""
    done = subprocess.run(
        [sys.executable, "-m", "wirebroker", "serve", "--listeners", "SSL://127.0.0.1:0"]
        + ["--log-dirs", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "listener SSL is SSL but has no keystore" in done.stderr
    assert "ready" not in done.stdout + done.stderr
    assert not any(tmp_path.iterdir())
