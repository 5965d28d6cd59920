"""Kafka's rules for the listener keys, without a broker (`wirebroker.listeners`:
`validate_listeners`, `validate_reconfiguration`; tests/wirebroker/test_dynamic_listeners.py
changes them on a running broker)."""

from __future__ import annotations

import pytest

from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.listeners import validate_listeners, validate_reconfiguration

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
    for candidate in (
        changed(listeners="PLAINTEXT://127.0.0.1:9092"),
        changed(
            listeners="PLAINTEXT://127.0.0.1:9092,EXTRA://127.0.0.1:9093,NEW://[::1]:9093",
            listener_security_protocol_map=MAP + ",NEW:PLAINTEXT",
            listener_name_extra_max_connections="20",  # reconfigurable on a kept listener
        ),
    ):
        validate_listeners(OLD, candidate)
        validate_reconfiguration(OLD, candidate)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"listeners": "PLAINTEXT://:9092,NEW://:9094"},
            "Error creating broker listeners from 'PLAINTEXT://:9092,NEW://:9094': No security "
            "protocol defined for listener NEW",
        ),
        (
            {"listeners": "PLAINTEXT://:9092,EXTRA://:9093,EXTRA://:9094"},
            "requirement failed: Each listener must have a different name, listeners: "
            "PLAINTEXT://:9092,EXTRA://:9093,EXTRA://:9094",
        ),
        (
            {"listeners": "PLAINTEXT://a:9092,EXTRA://b:9092"},
            "requirement failed: Each listener must have a different port, listeners: "
            "PLAINTEXT://a:9092,EXTRA://b:9092",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,EXTRA://127.0.0.2:9092"},
            "requirement failed: If you have two listeners on the same port then one needs to be "
            "IPv4 and the other IPv6, listeners: PLAINTEXT://127.0.0.1:9092,"
            "EXTRA://127.0.0.2:9092, port: 9092",
        ),
        (
            {"listeners": "EXTRA://127.0.0.1:9093"},
            "requirement failed: inter.broker.listener.name must be a listener name defined in "
            "advertised.listeners. The valid options based on currently configured listeners "
            "are EXTRA",
        ),
        (
            {"advertised.listeners": "PLAINTEXT://h:1,SASL://h:2"},
            "requirement failed: advertised.listeners listener names must be equal to or a subset "
            "of the ones defined in listeners. Found PLAINTEXT,SASL. The valid options based on "
            "the current configuration are PLAINTEXT,EXTRA",
        ),
    ],
)
def test_a_configs_refusals_have_kafkas_messages(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_listeners(OLD, OLD.with_dynamic(values, {}))
    assert str(refused.value) == message


def test_a_kept_listener_keeps_its_protocol_and_fixed_configs() -> None:
    with pytest.raises(ConfigError) as refused:
        validate_reconfiguration(OLD, changed(listener_security_protocol_map=MAP + ",EXTRA:SSL"))
    assert str(refused.value) == (
        "Security protocol cannot be updated for existing listener ListenerName(EXTRA)"
    )
    with pytest.raises(ConfigError) as refused:
        validate_reconfiguration(OLD, changed(listener_name_extra_sasl_enabled_mechanisms="PLAIN"))
    assert str(refused.value) == (
        "Configs cannot be updated dynamically for existing listener ListenerName(EXTRA), "
        "restart broker or create a new listener for update"
    )
