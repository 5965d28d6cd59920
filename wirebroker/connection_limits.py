"""Connection limits: `max.connections` (per broker and per listener) and `max.connections.per.ip`.

As Kafka's ConnectionQuotas: a client address over `max.connections.per.ip` (or its entry in
`max.connections.per.ip.overrides`, `host:count,...`) has its new connection closed at once;
when the broker holds `max.connections` connections, or a listener its
`listener.name.<l>.max.connections`, a new connection waits until another closes (Kafka stops
accepting until then; the client sees the same). Connections on the inter-broker listener are
counted but never wait for the broker-wide limit, so brokers always reach each other. The
limits are read at every new connection, so dynamic changes apply to the next one.

Differences from Kafka: `max.connection.creation.rate` is accepted without effect; the
inter-broker listener does not close another listener's least recently used connection to make
room, it is simply exempt.
"""

from __future__ import annotations

from collections import Counter

import trio

from wirebroker.config import BrokerConfig, ConfigError


class ConnectionLimits:
    """The connections open now, by listener and client address, against the limits."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.total = 0
        self.by_listener: Counter[str] = Counter()
        self.by_host: Counter[str] = Counter()
        self._freed = trio.lowlevel.ParkingLot()

    def _full(self, listener: str) -> bool:
        own = self.config.get(f"listener.name.{listener.lower()}.max.connections")
        if own is not None and self.by_listener[listener] >= int(own):
            return True
        if listener == (self.config.inter_broker_listener() or "PLAINTEXT"):
            return False
        return self.total >= self.config.get_int("max.connections")

    def per_ip_limit(self, host: str) -> int:
        overrides = parse_overrides(self.config.get("max.connections.per.ip.overrides") or "")
        return overrides.get(host, self.config.get_int("max.connections.per.ip"))

    async def admit(self, listener: str, host: str) -> bool:
        """Wait for room under the broker's and the listener's limits; False (close the
        connection) when its client address already holds its own limit."""
        while self._full(listener):
            await self._freed.park()
        if self.by_host[host] >= self.per_ip_limit(host):
            return False
        self.total += 1
        self.by_listener[listener] += 1
        self.by_host[host] += 1
        return True

    def release(self, listener: str, host: str) -> None:
        self.total -= 1
        self.by_listener[listener] -= 1
        self.by_host[host] -= 1
        self._freed.unpark_all()

    def reconfigure(self, changed: frozenset[str]) -> None:
        """Higher limits may let waiting connections in."""
        self._freed.unpark_all()


def parse_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: `host:count,...` (ConfigError when malformed)."""
    out: dict[str, int] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(
                f"max.connections.per.ip.overrides: {item.strip()!r} is not host:count"
            )
        out[host.strip()] = int(count)
    return out


def validate(candidate: BrokerConfig) -> None:
    """Kafka's checks of new limits (its messages)."""
    parse_overrides(candidate.get("max.connections.per.ip.overrides") or "")
    for name, value in candidate.current().items():
        if (name == "max.connections" or name.endswith(".max.connections")) and int(value) <= 0:
            raise ConfigError(f"Invalid max.connections {value}")


def follows(name: str) -> bool:
    """A key the limits are made of."""
    return name.startswith("max.connection") or name.endswith(".max.connections")
