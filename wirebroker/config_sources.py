"""What DescribeConfigs reports of a broker key: its value, source and synonyms, in Kafka's order.

As Kafka's ConfigHelper: a key's synonyms are the keys that set the same thing
(`config.broker_synonyms`: `log.retention.ms`, `.minutes`, `.hours`; a listener key and its
unprefixed one), listed source by source from the highest -- this broker's dynamic value
(DYNAMIC_BROKER_CONFIG), the cluster's dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG),
server.properties (STATIC_BROKER_CONFIG), Kafka's default (DEFAULT_CONFIG) -- and the list
starts at the key itself, so that a `log.retention.hours` set in server.properties is no synonym
of `log.retention.ms` (Kafka's quirk, kept). The key's source is its first synonym's
(DEFAULT_CONFIG when there is none). Keys whose type is unknown (names Kafka does not define)
are treated as sensitive, as Kafka does: described without their value.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from wirebroker.config import BROKER_KEYS, QUOTA, BrokerConfig, broker_synonyms, key_of

# ConfigSource codes of DescribeConfigs (org.apache.kafka.common.requests.DescribeConfigsResponse)
UNKNOWN, DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG = 0, 1, 2
DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 3, 4, 5
DYNAMIC_BROKER_LOGGER_CONFIG, CLIENT_METRICS_CONFIG = 6, 7
# ConfigType codes (v3+)
TYPE_CODES = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}

#: (name, value, source): one entry of a config's synonym list.
Synonym = tuple[str, str | None, int]


class ConfigValue:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = (
        "name",
        "value",
        "source",
        "read_only",
        "is_sensitive",
        "type",
        "doc",
        "default_value",
        "synonyms",
    )

    def __init__(
        self,
        name: str,
        value: str | None,
        source: int,
        read_only: bool,
        is_sensitive: bool,
        type: int,
        doc: str,
        default_value: str | None,
        synonyms: tuple[Synonym, ...] = (),
    ) -> None:
        self.name = name
        self.value = value
        self.source = source
        self.read_only = read_only
        self.is_sensitive = is_sensitive
        self.type = type
        self.doc = doc
        self.default_value = default_value
        self.synonyms = synonyms


@cache
def _kafka_defaults() -> dict[str, str]:
    """Kafka's own defaults (its DEFAULT_CONFIG synonyms); the quota keys have none."""
    return {
        k.name: k.default
        for k in BROKER_KEYS.values()
        if k.default is not None and k.update != QUOTA
    }


def config_synonyms(
    config: BrokerConfig, name: str, names: Iterable[str], *, sensitive: bool
) -> list[Synonym]:
    """`names`' values in every source where they are set, highest source first, from `name` on."""
    names = list(names)
    layers = (
        (DYNAMIC_BROKER_CONFIG, config.dynamic.per_broker),
        (DYNAMIC_DEFAULT_BROKER_CONFIG, config.dynamic.default),
        (STATIC_BROKER_CONFIG, config.values),
        (DEFAULT_CONFIG, _kafka_defaults()),
    )
    found = [
        (n, None if sensitive else values[n], source)
        for source, values in layers
        for n in names
        if n in values
    ]
    while found and found[0][0] != name:
        found.pop(0)
    return found


def is_sensitive(name: str) -> bool:
    """A password key, or one whose type is unknown (Kafka's KafkaConfig.maybeSensitive)."""
    key = key_of(name)
    return key is None or key.type == "password"


def broker_value(config: BrokerConfig, name: str, *, per_broker: bool) -> ConfigValue:
    """One broker key as described for this broker (`per_broker`) or for the cluster default,
    whose synonyms are its dynamic default alone."""
    key = key_of(name)
    sensitive = is_sensitive(name)
    synonyms = config_synonyms(
        config, name, broker_synonyms(name, match_listener_override=True), sensitive=sensitive
    )
    if not per_broker:
        synonyms = [s for s in synonyms if s[2] == DYNAMIC_DEFAULT_BROKER_CONFIG]
        value = config.dynamic.default.get(name)
    else:
        value = config.get(name)
    exact = BROKER_KEYS.get(name)
    return ConfigValue(
        name,
        None if sensitive else value,
        synonyms[0][2] if synonyms else DEFAULT_CONFIG,
        exact.read_only if exact is not None else True,
        sensitive,
        TYPE_CODES.get(key.type, UNKNOWN) if key is not None else UNKNOWN,
        key.doc if key is not None else "",
        key.default if key is not None else None,
        tuple(synonyms),
    )


def describe_broker(config: BrokerConfig, *, per_broker: bool) -> list[ConfigValue]:
    """Every key of this broker (Kafka's keys we know, and whatever else is set), or the keys
    set as the cluster's dynamic default."""
    if not per_broker:
        names = list(config.dynamic.default)
    else:
        names = [k.name for k in BROKER_KEYS.values() if k.update != QUOTA]
        names += [n for n in config.current() if n not in names]
    return [broker_value(config, name, per_broker=per_broker) for name in names]
