"""Kafka's rules for a change of the listener keys, without a broker
(`wirebroker.listeners.validate_reconfiguration`; tests/wirebroker/test_dynamic_listeners.py
changes them on a running broker)."""

from __future__ import annotations

import pytest

from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.listeners import validate_reconfiguration

MAP = "PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT,SASL:SASL_PLAINTEXT"
OLD = BrokerConfig(
    {
        "listeners": "PLAINTEXT://127.0.0.1:9092,EXTRA://127.0.0.1:9093",
        "listener.security.protocol.map": MAP,
        "listener.name.extra.max.connections": "10",
    }
)


def changed(**values: str) -> BrokerConfig:
    return OLD.with_dynamic({k.replace("_", "."): v for k, v in values.items()}, {})


def test_a_listener_added_or_removed_passes() -> None:
    validate_reconfiguration(OLD, changed(listeners="PLAINTEXT://127.0.0.1:9092"))
    validate_reconfiguration(
        OLD,
        changed(
            listeners="PLAINTEXT://127.0.0.1:9092,EXTRA://127.0.0.1:9093,NEW://127.0.0.1:0",
            listener_security_protocol_map=MAP + ",NEW:PLAINTEXT",
            listener_name_extra_max_connections="20",  # reconfigurable on a kept listener
        ),
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,EXTRA://127.0.0.1:9093,EXTRA://:9094"},
            "Each listener must have a different name, listeners: PLAINTEXT://127.0.0.1:9092,"
            "EXTRA://127.0.0.1:9093,EXTRA://:9094",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,EXTRA://127.0.0.1:9092"},
            "Each listener must have a different port, listeners: PLAINTEXT://127.0.0.1:9092,"
            "EXTRA://127.0.0.1:9092",
        ),
        (
            {"advertised.listeners": "PLAINTEXT://h:1,OTHER://h:2"},
            "Advertised listeners 'Map(ListenerName(PLAINTEXT) -> EndPoint(h,1,"
            "ListenerName(PLAINTEXT),PLAINTEXT), ListenerName(OTHER) -> EndPoint(h,2,"
            "ListenerName(OTHER),null))' must be a subset of listeners 'Map(ListenerName("
            "PLAINTEXT) -> EndPoint(127.0.0.1,9092,ListenerName(PLAINTEXT),PLAINTEXT), "
            "ListenerName(EXTRA) -> EndPoint(127.0.0.1,9093,ListenerName(EXTRA),PLAINTEXT))'",
        ),
        (
            {"listeners": "EXTRA://127.0.0.1:9093"},
            "Advertised listener must be specified for inter-broker listener "
            "ListenerName(PLAINTEXT)",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:9092,EXTRA://127.0.0.1:9093",
                "listener.name.extra.sasl.enabled.mechanisms": "PLAIN",
            },
            "Configs cannot be updated dynamically for existing listener ListenerName(EXTRA), "
            "restart broker or create a new listener for update",
        ),
    ],
)
def test_refusals_have_kafkas_messages(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_reconfiguration(OLD, OLD.with_dynamic(values, {}))
    assert str(refused.value) == message
