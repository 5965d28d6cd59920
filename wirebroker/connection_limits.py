"""Connection quotas, as Kafka's ConnectionQuotas: how many connections, and how fast new ones.

`admit` decides each accepted connection before it is served, one at a time per listener (the
listener's acceptor, `wirebroker.listeners`, waits for it before accepting the next, as Kafka's
Acceptor thread blocks):

- Creation rate (KIP-612): the connection is recorded in the broker's rate
  (`max.connection.creation.rate`) and its listener's (`listener.name.<l>.max.connection.
  creation.rate`, else the broker-wide value, as Kafka's prefix override), each sampled over
  `quota.window.num` windows of `quota.window.size.seconds`. Over either, the acceptor waits
  the longer throttle time, Kafka's `(rate - quota) / quota * window` capped at one window,
  before the connection is served: clients connecting too fast see their connections wait.
- Count: when the broker holds `max.connections` connections, or the listener its
  `listener.name.<l>.max.connections` (else `max.connections`), the acceptor waits until one
  closes.
- The inter-broker listener, when the broker has more than one, is not held to the broker-wide
  rate and count (only to its listener's), so brokers always reach each other (KIP-402). When
  the broker then holds more than `max.connections` (or the limit is lowered below what it
  holds), `on_excess` is told: the connection watch (`wirebroker.connection`) closes the least
  recently used connections of the other listeners until it does not, as Kafka's processors'
  closeExcessConnections.
- Per IP: an address whose own rate is over its `connection_creation_rate` quota (an `ip`
  client quota, or the default IP's: `wirebroker.quotas`) is not served and its connection is
  closed only after the throttle time (`ConnectionThrottled`), so a client retrying at once
  does not add to the rate; the connection is then taken back out of the three rates. An
  address holding `max.connections.per.ip` connections (or its entry in
  `max.connections.per.ip.overrides`, `host:count,...`) has its new one closed at once
  (`TooManyConnections`).

Every limit applies from the next connection decided, so dynamic changes apply to the next one;
a connection already waiting out a rate throttle waits its whole delay, as in Kafka. The
overrides are parsed once per change, their host names resolved off the loop
(`wirebroker.host_names`, Kafka's InetAddress.getByName when it reads them) by `run`; until
then the previous ones apply.

The rates and the throttle times given (Kafka's `connection-accept-rate`,
`broker-connection-accept-rate`, `connection-accept-throttle-time` and
`ip-connection-accept-throttle-time`: means of the non-zero ones per listener) and each
measured address's rate (`connection-accept-rate{ip}`) are kept here for the metrics
(`wirebroker.metrics_collector`); a removed listener's go with it, as Kafka's removeListener.

Differences from Kafka: which connection is the least recently used (`ConnectionWatch`) is
decided across the broker's listeners, by the time it last began to wait for bytes or, if later,
wrote an answer meanwhile (to within the watch's tick).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable

import trio

from wirebroker import host_names
from wirebroker.config import INT_MAX, BrokerConfig, ConfigError
from wirebroker.quotas.client import THROTTLE_SAMPLES, THROTTLE_WINDOW_MS, ClientQuotas
from wirebroker.quotas.rates import SampledRate

log = logging.getLogger(__name__)

#: The characters a host of `max.connections.per.ip.overrides` may hold (Kafka's
#: Utils.VALID_HOST_CHARACTERS).
_VALID_HOST = re.compile(r"[0-9a-zA-Z\-%._:]*")

#: Kafka's ConnectionQuotaEntity.ipQuotaEntity sensor expiration: an address's rate is
#: forgotten an hour after its last connection.
IP_RATE_EXPIRY_MS = 3_600_000


class TooManyConnections(Exception):
    """Raised by `ConnectionLimits.admit` when the client address already holds its
    `max.connections.per.ip`; the acceptor closes the connection at once."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the address holds its {limit} connections (max.connections.per.ip)")
        self.limit = limit


class ConnectionThrottled(Exception):
    """Raised by `ConnectionLimits.admit` when the client address is over its connection
    creation rate; the acceptor closes the connection after `throttle_ms`."""

    def __init__(self, throttle_ms: int) -> None:
        super().__init__(f"over its connection_creation_rate: closed in {throttle_ms} ms")
        self.throttle_ms = throttle_ms


class ConnectionLimits:
    """The connections open now, by listener and client address, and the connection creation
    rates, against the limits."""

    def __init__(
        self, config: BrokerConfig, quotas: ClientQuotas, now_ms: Callable[[], int]
    ) -> None:
        self.config = config
        self.quotas = quotas
        self.now_ms = now_ms
        self.total = 0
        self.by_listener: Counter[str] = Counter()
        self.by_host: Counter[str] = Counter()
        self._freed = trio.lowlevel.ParkingLot()
        self._samples = config.get_int("quota.window.num")
        self._window_ms = config.get_int("quota.window.size.seconds") * 1000
        self.broker_rate = self._new_rate()
        self.listener_rates: dict[str, SampledRate] = {}
        #: Per listener: the throttle times given for the broker's or listener's rate, and
        #: for an address's.
        self.throttles: dict[str, SampledRate] = {}
        self.ip_throttles: dict[str, SampledRate] = {}
        #: By address, with the time of its last connection (those with a quota only).
        self.ip_rates: dict[str, tuple[SampledRate, int]] = {}
        self._acceptors: dict[str, trio.Lock] = {}
        self._protected: str | None = None
        #: `max.connections.per.ip.overrides` by address (`run` keeps it to the config's).
        self.overrides: dict[str, int] = {}
        self._overrides_changed = trio.Event()
        #: Told when the broker holds more than `max.connections` (`excess`): set by the
        #: connection watch, which closes connections to make room.
        self.on_excess: Callable[[], None] = lambda: None
        self.listeners_changed([listener.name for listener in config.listeners()])
        self._purged_ms = 0

    def listeners_changed(self, names: list[str]) -> None:
        """The broker's listeners are `names` (some added at run time, `wirebroker.listeners`,
        as Kafka's addListener): each has its rates and acceptor; the inter-broker one is
        protected while there are others. A removed listener's rates and throttle times go
        (Kafka's removeListener), its connections being closed."""
        for name in names:
            if name not in self._acceptors:
                self.listener_rates[name] = self._new_rate()
                self.throttles[name] = _throttle_times()
                self.ip_throttles[name] = _throttle_times()
                self._acceptors[name] = trio.Lock()
        for name in [n for n in self._acceptors if n not in names]:
            for held in (self.listener_rates, self.throttles, self.ip_throttles, self._acceptors):
                del held[name]
        inter_broker = self.config.inter_broker_listener() or "PLAINTEXT"
        self._protected = inter_broker if len(names) > 1 else None
        self._check_excess()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read `max.connections.per.ip.overrides` (host names resolved off the loop: one that
        does not resolve fails the start, as Kafka's), report started, then read them again at
        each change (one that does not resolve then keeps the previous ones, logged, as Kafka
        fails to apply the change)."""
        self.overrides = await resolved_overrides(self._overrides_text())
        task_status.started()
        while True:
            await self._overrides_changed.wait()
            self._overrides_changed = trio.Event()
            try:
                self.overrides = await resolved_overrides(self._overrides_text())
            except ConfigError as e:
                log.error("max.connections.per.ip.overrides not applied: %s", e)

    def _overrides_text(self) -> str:
        return self.config.get("max.connections.per.ip.overrides") or ""

    def _new_rate(self) -> SampledRate:
        return SampledRate(self._samples, self._window_ms)

    def _listener_limit(self, listener: str, key: str) -> int:
        """The listener's own value of `key`, else the broker's (Kafka's prefix override)."""
        own = self.config.get(f"listener.name.{listener.lower()}.{key}")
        return int(own) if own is not None else self.config.get_int(key)

    def _full(self, listener: str) -> bool:
        if self.by_listener[listener] >= self._listener_limit(listener, "max.connections"):
            return True
        if self.protected(listener):
            return False
        return self.total >= self.config.get_int("max.connections")

    def protected(self, listener: str) -> bool:
        """The inter-broker listener of a broker with others (Kafka's protectedListener)."""
        return listener == self._protected

    def excess(self) -> int:
        """Connections held beyond `max.connections` (Kafka's maxConnectionsExceeded: only
        the protected listener takes them), which connections of the other listeners make
        room for; 0 within it."""
        return max(0, self.total - self.config.get_int("max.connections"))

    def _check_excess(self) -> None:
        if self.excess():
            self.on_excess()

    def per_ip_limit(self, host: str) -> int:
        return self.overrides.get(host, self.config.get_int("max.connections.per.ip"))

    async def admit(self, listener: str, host: str) -> None:
        """Wait until the listener may take the connection from `host` (its rate throttle,
        room under the counts), then count it in. Raises `ConnectionThrottled` or
        `TooManyConnections` (not counted in) when the address may not have it."""
        async with self._acceptors[listener]:
            throttle_ms = self._record(listener, 1.0)
            if throttle_ms > 0:
                self.throttles[listener].record(throttle_ms, self.now_ms())
                await trio.sleep(throttle_ms / 1000)
            while self._full(listener):
                await self._freed.park()
            ip_throttle_ms = self._record_ip(host)
            if ip_throttle_ms > 0:
                self.ip_throttles[listener].record(ip_throttle_ms, self.now_ms())
                self._record(listener, -1.0)  # not accepted: out of the broker's rates too
                raise ConnectionThrottled(ip_throttle_ms)
            limit = self.per_ip_limit(host)
            if self.by_host[host] >= limit:
                raise TooManyConnections(limit)
            self.total += 1
            self.by_listener[listener] += 1
            self.by_host[host] += 1
            self._check_excess()

    def _record(self, listener: str, value: float) -> int:
        """Record a connection (or take one back, -1) in the broker's and the listener's
        rates; the longer throttle time of the two (0 within both)."""
        now_ms = self.now_ms()
        throttle_ms = 0
        if listener != self._protected:
            bound = self.config.get_int("max.connection.creation.rate")
            throttle_ms = self._record_in(self.broker_rate, value, bound, now_ms)
        bound = self._listener_limit(listener, "max.connection.creation.rate")
        own = self._record_in(self.listener_rates[listener], value, bound, now_ms)
        return max(throttle_ms, own)

    def _record_ip(self, host: str) -> int:
        """Record a connection from `host` in its rate when it has a quota; the throttle time
        (the connection taken back out again) when that is over it."""
        bound = self.quotas.connection_rate(host)
        now_ms = self.now_ms()
        self._purge_ip_rates(now_ms)
        if bound is None or bound == INT_MAX:
            return 0
        rate = self.ip_rates[host][0] if host in self.ip_rates else self._new_rate()
        self.ip_rates[host] = (rate, now_ms)
        throttle_ms = self._record_in(rate, 1.0, bound, now_ms)
        if throttle_ms > 0:
            rate.record(-1.0, now_ms)
        return throttle_ms

    def _record_in(self, rate: SampledRate, value: float, bound: int, now_ms: int) -> int:
        """Kafka's Sensor.record with its quota checked (when recording one more) and
        QuotaUtils.boundedThrottleTime; a quota of 0 (an ip's may be) throttles every
        connection for the whole window, as Kafka's infinite throttle time capped."""
        rate.record(value, now_ms)
        if value < 0 or bound >= INT_MAX:
            return 0
        violation = rate.check(bound, now_ms)
        if violation is None:
            return 0
        if bound <= 0:
            return self._window_ms
        return min(violation.throttle_time_ms(), self._window_ms)

    def _purge_ip_rates(self, now_ms: int) -> None:
        if now_ms - self._purged_ms < 60_000:
            return
        self._purged_ms = now_ms
        for host, (_, last_ms) in list(self.ip_rates.items()):
            if now_ms - last_ms >= IP_RATE_EXPIRY_MS:
                del self.ip_rates[host]

    def release(self, listener: str, host: str) -> None:
        self.total -= 1
        for counts, key in ((self.by_listener, listener), (self.by_host, host)):
            counts[key] -= 1
            if not counts[key]:
                del counts[key]  # (as Kafka's counts: an address not held is forgotten)
        self._freed.unpark_all()

    def reconfigure(self, changed: frozenset[str]) -> None:
        """Higher limits may let a waiting connection in; a lower `max.connections` may close
        some (`excess`); new overrides are read again (`run`)."""
        if "max.connections.per.ip.overrides" in changed:
            self._overrides_changed.set()
        self._freed.unpark_all()
        self._check_excess()


def _throttle_times() -> SampledRate:
    """A throttle-time sensor (Kafka's Avg on a default MetricConfig: two windows of 30 s)."""
    return SampledRate(THROTTLE_SAMPLES, THROTTLE_WINDOW_MS)


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


async def resolved_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides` by address: a host name counts for the address it
    resolves to, as Kafka's InetAddress.getByName (ConfigError when one does not)."""
    out: dict[str, int] = {}
    for host, count in parse_overrides(text).items():
        address = await host_names.resolve(host)
        if address is None:
            raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve {host}")
        out[address] = count
    return out


def check_per_ip(config: BrokerConfig) -> None:
    """KafkaConfig's checks of `max.connections.per.ip` and its overrides (its messages), run by
    `BrokerConfig.validate`: at start-up and on every dynamic change. A limit of 0 needs
    overrides (else no client could connect), and an override's host holds only the characters
    of Kafka's Utils.validHostPattern."""
    overrides = parse_overrides(config.get("max.connections.per.ip.overrides") or "")
    if config.get_int("max.connections.per.ip") == 0 and not overrides:
        raise ConfigError(
            "requirement failed: max.connections.per.ip can be set to zero only if "
            "max.connections.per.ip.overrides property is set."
        )
    invalid = [host for host in overrides if not _VALID_HOST.fullmatch(host)]
    if invalid:
        raise ConfigError(
            f"max.connections.per.ip.overrides contains invalid addresses : {','.join(invalid)}"
        )


def validate(candidate: BrokerConfig) -> None:
    """Kafka's checks of new limits (its messages; a listener's limits are checked with the
    broker-wide value where it has none of its own, as Kafka's ListenerConnectionQuota). The
    per-IP ones are the whole config's (`check_per_ip`)."""
    for listener in candidate.listeners():
        for key in ("max.connections", "max.connection.creation.rate"):
            own = candidate.get(f"listener.name.{listener.name.lower()}.{key}")
            value = int(own) if own is not None else candidate.get_int(key)
            if value <= 0:
                raise ConfigError(f"Invalid {key} {value}")


def follows(name: str) -> bool:
    """A key the limits are made of."""
    return name.startswith("max.connection") or name.endswith(
        (".max.connections", ".max.connection.creation.rate")
    )
