"""Dynamic broker configs without a broker: precedence, validation, storage form, notification."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import trio
import trustme

from tests.storage.helpers import T0, keyed
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.config_sources import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    broker_value,
)
from wirebroker.dynamic_config import (
    DEFAULT_ENTITY,
    DynamicBrokerConfig,
    Reconfigurable,
    thread_count_check,
)
from wirebroker.password_encoder import PasswordEncoder
from wirebroker.server import run_compactions

#: `listener.name.plaintext.ssl.key.password=hunter2` as Kafka 3.9 stored it in
#: /config/brokers/0 with password.encoder.secret=wb-secret (its defaults otherwise).
KAFKA_ENCODED = (
    "initializationVector:ezw5bNla4psNQndhnRohWQ==,keyLength:128,salt:FVTksHkGh6FJKZxGA3+T+Lnil"
    "ljMUfIuWJQZ5e78nrAstF5gaczmIYsY7dxSA3gTSbJuc65ohlBHP/XSRcbfhNRML0DXefMiYYlosXu4e4CCfzUWpS2"
    "41d3c8Gh/1qkdnauZ4xsRMnaNtPj+mdlglUZOI9YwqLf/MxOI2dglyfb8fAQrVX907ab4wkjuF0xJ9VOevFfM7Bzd8"
    "MJzTX6ivatH4fcqlQDBMgbRtzDL6E/RFLNBoEjEaTPbHW0z8Vy04cEwxy+F8ZDSTtru3EEB27Y4LH1UxyqxCMqG2Vu"
    "ZIvQZdeYLl+wK52waO4BGrmnR7w/z+fucy13RJsYvgQ54FA==,keyFactoryAlgorithm:PBKDF2WithHmacSHA512,"
    "cipherAlgorithm:AES/CBC/PKCS5Padding,iterations:4096,passwordLength:7,"
    "encryptedPassword:guI+JNQI95aq25f/NhZWag=="
)


def test_kafkas_encrypted_password_is_read_and_ours_round_trip() -> None:
    assert PasswordEncoder("wb-secret").decode(KAFKA_ENCODED) == "hunter2"
    with pytest.raises(ConfigError, match="could not be decoded"):
        PasswordEncoder("another-secret").decode(KAFKA_ENCODED)
    for cipher in ("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"):
        encoder = PasswordEncoder("s", cipher=cipher)
        encoded = encoder.encode("pässword")
        assert "pässword" not in encoded and f"cipherAlgorithm:{cipher}" in encoded
        assert encoder.decode(encoded) == "pässword"


def test_precedence_and_synonyms_as_kafka() -> None:
    config = BrokerConfig.from_properties({"log.retention.ms": "5000", "log.dirs": "/nowhere"})
    config.set_dynamic(
        {"message.max.bytes": "600000"}, {"log.retention.hours": "1", "message.max.bytes": "500000"}
    )
    # A dynamic log.retention.hours replaces a static log.retention.ms (Kafka's overrideProps).
    assert config.retention_ms() == 3_600_000
    assert config.get_int("message.max.bytes") == 600000
    value = broker_value(config, "message.max.bytes", per_broker=True)
    assert (value.value, value.source) == ("600000", DYNAMIC_BROKER_CONFIG)
    assert value.synonyms == (
        ("message.max.bytes", "600000", DYNAMIC_BROKER_CONFIG),
        ("message.max.bytes", "500000", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("message.max.bytes", "1048588", DEFAULT_CONFIG),
    )
    # Synonyms start at the key described: the hours are listed for .ms, not the other way.
    ms = broker_value(config, "log.retention.ms", per_broker=True)
    assert ms.synonyms == (
        ("log.retention.ms", "5000", STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", DEFAULT_CONFIG),
    )
    hours = broker_value(config, "log.retention.hours", per_broker=True)
    assert hours.source == DYNAMIC_DEFAULT_BROKER_CONFIG and hours.read_only
    default = broker_value(config, "message.max.bytes", per_broker=False)
    assert default.synonyms == (("message.max.bytes", "500000", DYNAMIC_DEFAULT_BROKER_CONFIG),)
    custom = broker_value(config.with_dynamic({"my.own": "x"}, {}), "my.own", per_broker=True)
    assert (custom.value, custom.is_sensitive, custom.read_only) == (None, True, True)


def test_validation_changes_and_notification(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path)})
    dynamic = DynamicBrokerConfig.open(config)
    told: list[frozenset[str]] = []
    dynamic.add_reconfigurable(Reconfigurable({"message.max.bytes"}, told.append))
    dynamic.add_reconfigurable(thread_count_check(config, "num.io.threads"))
    with pytest.raises(
        ConfigError, match=r"Cannot update these configs dynamically: Set\(broker.id, log.dirs\)"
    ):
        dynamic.validate("0", {"log.dirs": "/x", "broker.id": "2"})
    with pytest.raises(ConfigError, match="at least half the current value 8"):
        dynamic.validate(DEFAULT_ENTITY, {"num.io.threads": "3"})
    with pytest.raises(ConfigError, match="broker id must be specified"):
        dynamic.validate(DEFAULT_ENTITY, {"listener.name.plaintext.ssl.keystore.location": "/k"})
    dynamic.validate(
        DEFAULT_ENTITY, {"num.io.threads": "4", "listener.name.plaintext.max.connections": "9"}
    )
    dynamic.apply(DEFAULT_ENTITY, {"message.max.bytes": "1000", "num.io.threads": "4"})
    assert told == [frozenset({"message.max.bytes", "num.io.threads"})]
    dynamic.apply(DEFAULT_ENTITY, {"message.max.bytes": "1000", "num.io.threads": "4"})
    assert len(told) == 1  # nothing changed
    dynamic.apply("7", {"message.max.bytes": "5"})  # another broker's: not ours
    assert config.get("message.max.bytes") == "1000"


def test_stored_values_that_are_invalid_are_left_out(caplog: pytest.LogCaptureFixture) -> None:
    config = BrokerConfig.from_properties({"log.dirs": "/nowhere", "zookeeper.connect": "zk:2181"})
    dynamic = DynamicBrokerConfig(config, None)
    with caplog.at_level(logging.ERROR):
        values = dynamic.from_persistent(
            DEFAULT_ENTITY,
            {
                "message.max.bytes": "nope",
                "broker.id": "4",
                "log.retention.ms": "1000",
                "listener.name.ssl.ssl.key.password": KAFKA_ENCODED,
            },
        )
    assert values == {"log.retention.ms": "1000"}
    assert "hunter2" not in caplog.text and "message.max.bytes" in caplog.text
    with pytest.raises(ConfigError, match="Password encoder secret not configured"):
        dynamic.to_persistent("0", {"listener.name.ssl.ssl.key.password": "x"})


def test_peer_connections_follow_the_inter_broker_listeners_stores(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    for name in ("old.pem", "new.pem"):
        cert = ca.issue_cert("localhost", "127.0.0.1")
        cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / name))
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path / "data"),
            "listeners": "SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SSL",
            "wirebroker.external.controller": "true",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tmp_path / "old.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tmp_path / "ca.pem"),
        }
    )
    broker = Broker.open(config)
    try:
        manager = broker.replica_manager
        before = broker.peer_security
        assert before.ssl_context is not None and manager.controller.security is before
        key = "listener.name.ssl.ssl.keystore.location"
        broker.dynamic_config.apply("0", {key: str(tmp_path / "new.pem")})
        assert broker.peer_security is not before and broker.peer_security.ssl_context
        assert manager.controller.security is broker.peer_security
        with pytest.raises(ConfigError, match="missing.pem"):
            broker.dynamic_config.validate("0", {key: str(tmp_path / "missing.pem")})
    finally:
        broker.close()


def test_passwords_under_the_old_secret_are_stored_again_under_the_new(tmp_path: Path) -> None:
    key = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    stored = {"version": 1, "brokers": {"0": {key: PasswordEncoder("old").encode("jaas-text")}}}
    (tmp_path / "dynamic-broker-configs.json").write_text(json.dumps(stored))
    config = BrokerConfig.from_properties(
        {
            "log.dirs": str(tmp_path),
            "password.encoder.secret": "new",
            "password.encoder.old.secret": "old",
        }
    )
    DynamicBrokerConfig.open(config)
    assert config.get(key) == "jaas-text"
    again = json.loads((tmp_path / "dynamic-broker-configs.json").read_text())
    assert PasswordEncoder("new").decode(again["brokers"]["0"][key]) == "jaas-text"


def test_log_cleaner_threads_compact_logs_at_once(tmp_path: Path) -> None:
    """`log.cleaner.threads` logs are compacted at once (0: none), from the next cleaner run."""
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path), "log.cleaner.threads": "0"})
    broker = Broker.open(config)
    compacted = {"cleanup.policy": "compact", "segment.bytes": "1024"}
    try:
        for name in ("a", "b", "c"):
            broker.create_topic(name, 1, 1, {**compacted, "min.cleanable.dirty.ratio": "0.01"})
            plog = broker.log_manager.get(name, 0)
            assert plog is not None
            for i in range(60):
                plog.append_as_leader(keyed([(b"k%d" % (i % 3), b"v" * 50)]), 0, T0)
            plog.update_high_watermark(plog.log_end_offset)
        sizes = {n: broker.log_manager.get(n, 0).size_in_bytes for n in "abc"}  # type: ignore[union-attr]
        assert trio.run(run_compactions, broker) == 0
        broker.dynamic_config.apply(DEFAULT_ENTITY, {"log.cleaner.threads": "2"})
        assert trio.run(run_compactions, broker) > 0
        for name, size in sizes.items():
            assert broker.log_manager.get(name, 0).size_in_bytes < size  # type: ignore[union-attr]
    finally:
        broker.close()
