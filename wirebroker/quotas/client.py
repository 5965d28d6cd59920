"""Client quotas enforced: Kafka's ClientQuotaManager, ClientRequestQuotaManager and
ControllerMutationQuotaManager.

`ClientQuotas` holds one manager per quota type: `produce` (`producer_byte_rate`, request
bytes), `fetch` (`consumer_byte_rate`, response bytes), `request` (`request_percentage`, the
handler's time on the event loop as a percentage of one second) and `controller_mutation`
(`controller_mutation_rate`, partitions created or deleted, a token bucket). `update` applies
an entity's config; an ip entity's `connection_creation_rate` is kept in `connection_rates`
for the connection quotas (`wirebroker.connection_limits`). A manager records its value under the client's *metric tags* (user,
client id) and answers the throttle time in milliseconds. As in Kafka:

- The quota of a request is the most specific one set, in this order: user and client id,
  user and default client id, user, default user and client id, default user and default
  client id, default user, client id, default client id. Requests that fall under the same
  entity share one rate (a user quota is shared by all that user's client ids).
- Until a quota of a type is first set, nothing of that type is measured (the hot paths pay
  one attribute read); once set, it is measured until the broker restarts.
- Rates are sampled windows (`quota.window.num` windows of `quota.window.size.seconds`), the
  throttle time is the delay that brings the rate back under the quota, a request quota's
  throttle is at most one window, and a client's sensors are forgotten after an hour without
  requests.

Differences from Kafka: the request time is the time the request's task ran on the event loop
while it was handled (decoding, the handler, encoding not included); time spent waiting (a
fetch's long poll, an acks=all wait) is not counted, as Kafka counts purgatory time not. There
is no `client.quota.callback.class`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, KafkaError
from wirebroker.quotas.entities import (
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    ip_address,
)
from wirebroker.quotas.rates import SampledRate, TokenBucket, Violation, token_throttle_time_ms
from wirebroker.zk.sanitizer import desanitize, sanitize

if TYPE_CHECKING:
    from storage.clock import Clock
    from wirebroker.config import BrokerConfig

log = logging.getLogger(__name__)

# Kafka's QuotaTypes: which levels of quotas were ever set.
CLIENT_ID_LEVEL, USER_LEVEL, USER_CLIENT_ID_LEVEL = 1, 2, 4
INACTIVE_SENSOR_MS = 3_600_000  # ClientQuotaManager.InactiveSensorExpirationTimeSeconds
PURGE_INTERVAL_MS = 60_000
#: The throttle-time sensor's windows (a default MetricConfig: two of 30 s).
THROTTLE_SAMPLES, THROTTLE_WINDOW_MS = 2, 30_000

#: (sanitized user, client id) a quota is measured under; "" where the level leaves it out.
Tags = tuple[str, str]


@functools.lru_cache(maxsize=4096)
def session_names(principal: str, client_id: str | None) -> tuple[str, str]:
    """The sanitized user of a `User:<name>` principal and the sanitized client id."""
    return sanitize(principal.partition(":")[2]), sanitize(client_id or "")


class Sensor:
    """One client's measure of one quota type, its bound, and its throttle times."""

    __slots__ = ("tags", "bound", "rate", "bucket", "throttles", "last_ms")

    def __init__(
        self, tags: Tags, bound: float | None, rate: SampledRate, bucket: TokenBucket | None
    ) -> None:
        self.tags = tags
        self.bound = bound
        self.rate = rate
        self.bucket = bucket
        self.throttles = SampledRate(THROTTLE_SAMPLES, THROTTLE_WINDOW_MS)
        self.last_ms = 0


class QuotaWindows:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("samples", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms


class ClientQuotaManager:
    """The quotas of one type and the sensors of the clients they apply to."""

    def __init__(self, quota_type: str, windows: QuotaWindows) -> None:
        self.quota_type = quota_type
        self.windows = windows
        self.overrides: dict[QuotaEntity, float] = {}
        #: Kafka's quotaTypesEnabled: the levels ever set (0: nothing is measured).
        self.levels = 0
        #: A quota of this type was ever set: its requests are measured (read on hot paths).
        self.enabled = False
        self.sensors: dict[Tags, Sensor] = {}
        self._purged_ms = 0

    def update_quota(self, entity: QuotaEntity, bound: float | None) -> None:
        """Set (or with None remove) the quota of `entity`, and re-bound the live sensors."""
        if entity.user is not None:
            self.levels |= USER_CLIENT_ID_LEVEL if entity.client_id is not None else USER_LEVEL
        else:
            self.levels |= CLIENT_ID_LEVEL
        self.enabled = True
        if bound is None:
            if self.overrides.pop(entity, None) is not None:
                log.info("removed the %s quota of %s", self.quota_type, entity.path)
        elif self.overrides.get(entity) != bound:
            self.overrides[entity] = bound
            log.info("%s quota of %s is now %s", self.quota_type, entity.path, bound)
        for sensor in self.sensors.values():
            sensor.bound = self.quota_limit(sensor.tags)

    def metric_tags(self, user: str, client_id: str) -> Tags:
        """Which entity's rate a client's requests count in (Kafka's quotaMetricTags)."""
        levels = self.levels
        if levels in (0, CLIENT_ID_LEVEL):
            return ("", client_id)
        if levels == USER_LEVEL:
            return (user, "")
        if levels == USER_CLIENT_ID_LEVEL:
            return (user, client_id)
        o = self.overrides
        if (
            QuotaEntity(user, client_id) in o
            or QuotaEntity(user, DEFAULT) in o
            or (QuotaEntity(user, None) not in o and QuotaEntity(DEFAULT, client_id) in o)
            or (QuotaEntity(user, None) not in o and QuotaEntity(DEFAULT, DEFAULT) in o)
        ):
            return (user, client_id)
        if QuotaEntity(user, None) in o or QuotaEntity(DEFAULT, None) in o:
            return (user, "")
        return ("", client_id)

    def quota_limit(self, tags: Tags) -> float | None:
        """The bound of the requests measured under `tags`: the most specific quota set."""
        user, client_id = tags
        o = self.overrides
        if user and client_id:
            candidates = [
                QuotaEntity(user, client_id),
                QuotaEntity(user, DEFAULT),
                QuotaEntity(DEFAULT, client_id),
                QuotaEntity(DEFAULT, DEFAULT),
            ]
        elif user:
            candidates = [QuotaEntity(user, None), QuotaEntity(DEFAULT, None)]
        elif client_id:
            candidates = [QuotaEntity(None, client_id), QuotaEntity(None, DEFAULT)]
        else:
            return None
        for entity in candidates:
            bound = o.get(entity)
            if bound is not None:
                return bound
        return None

    def sensor(self, user: str, client_id: str, now_ms: int) -> Sensor:
        tags = self.metric_tags(user, client_id)
        sensor = self.sensors.get(tags)
        if sensor is None:
            if now_ms - self._purged_ms >= PURGE_INTERVAL_MS:
                self._purge(now_ms)
            sensor = self.sensors[tags] = self._new_sensor(tags)
        sensor.last_ms = now_ms
        return sensor

    def _new_sensor(self, tags: Tags) -> Sensor:
        w = self.windows
        return Sensor(tags, self.quota_limit(tags), SampledRate(w.samples, w.window_ms), None)

    def _purge(self, now_ms: int) -> None:
        self._purged_ms = now_ms
        for tags in [
            t for t, s in self.sensors.items() if now_ms - s.last_ms >= INACTIVE_SENSOR_MS
        ]:
            del self.sensors[tags]

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` for the client; the throttle time its rate now calls for (0 when
        within its quota). Nothing is recorded while no quota of this type was ever set."""
        if not self.levels:
            return 0
        sensor = self.sensor(user, client_id, now_ms)
        sensor.rate.record(value, now_ms)
        if sensor.bound is None:
            return 0
        violation = sensor.rate.check(sensor.bound, now_ms)
        return 0 if violation is None else self.throttle_time_ms(violation)

    def throttle_time_ms(self, violation: Violation) -> int:
        return violation.throttle_time_ms()

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch answers without its records)."""
        if self.levels:
            self.sensor(user, client_id, now_ms).rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str, now_ms: int) -> float | None:
        """The most a client can take at once without being throttled for sure, quota x
        (samples - 1) x window; None when unlimited."""
        if not self.levels:
            return None
        bound = self.sensor(user, client_id, now_ms).bound
        if bound is None:
            return None
        return bound * (self.windows.samples - 1) * self.windows.window_ms / 1000

    def throttled(self, user: str, client_id: str, throttle_ms: int, now_ms: int) -> None:
        """Count a throttle time the client was given (the `throttle-time` metric)."""
        self.sensor(user, client_id, now_ms).throttles.record(throttle_ms, now_ms)

    def live_sensors(self) -> Iterator[Sensor]:
        yield from self.sensors.values()


class RequestQuotaManager(ClientQuotaManager):
    """`request_percentage`: handler time as a percentage; a throttle of at most one window."""

    def throttle_time_ms(self, violation: Violation) -> int:
        return min(violation.throttle_time_ms(), self.windows.window_ms)


class ControllerMutationQuotaManager(ClientQuotaManager):
    """`controller_mutation_rate`: partitions created or deleted, a token bucket per client."""

    def _new_sensor(self, tags: Tags) -> Sensor:
        w = self.windows
        return Sensor(
            tags,
            self.quota_limit(tags),
            SampledRate(w.samples, w.window_ms),
            TokenBucket(w.samples, w.window_ms),
        )

    def quota_for(self, user: str, client_id: str, strict: bool, clock: Clock) -> MutationQuota:
        """One request's quota: strict (CreateTopics v6+, CreatePartitions v3+, DeleteTopics
        v5+) refuses mutations once the bucket is empty; permissive only throttles."""
        sensor = self.sensor(user, client_id, clock()) if self.levels else None
        return MutationQuota(sensor, strict, clock)


class MutationQuota:
    """Kafka's Strict/PermissiveControllerMutationQuota, for the life of one request."""

    def __init__(self, sensor: Sensor | None, strict: bool, clock: Clock) -> None:
        self.sensor = sensor
        self.strict = strict
        self.clock = clock
        self._throttle_ms = 0
        self._recorded_ms = 0

    @property
    def measured(self) -> bool:
        """Mutations are counted (a controller mutation quota was ever set)."""
        return self.sensor is not None

    def record(self, permits: float) -> None:
        """Take `permits` (partitions) from the bucket. Strict: if the bucket is already
        empty, nothing is taken and THROTTLING_QUOTA_EXCEEDED is raised; permissive: always
        taken, and a throttle time follows."""
        sensor = self.sensor
        if sensor is None or sensor.bucket is None or sensor.bound is None:
            if sensor is not None:
                sensor.rate.record(permits, self.clock())
            return
        now = self.clock()
        if self.strict:
            violation = sensor.bucket.check(sensor.bound, now)
            if violation is not None:
                self._violated(violation, now)
                raise KafkaError(
                    "The throttling quota has been exceeded.",
                    error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                )
        sensor.bucket.record(permits, sensor.bound, now)
        sensor.rate.record(permits, now)
        if not self.strict and (violation := sensor.bucket.check(sensor.bound, now)):
            self._violated(violation, now)

    def _violated(self, violation: Violation, now_ms: int) -> None:
        self._throttle_ms = token_throttle_time_ms(violation)
        self._recorded_ms = now_ms

    def throttle_time_ms(self) -> int:
        """The throttle time left now (it shrinks while the request goes on)."""
        return max(0, self._throttle_ms - (self.clock() - self._recorded_ms))


class ClientQuotas:
    """The broker's client quota managers; `update` applies an entity's config to them."""

    def __init__(self, config: BrokerConfig) -> None:
        client = QuotaWindows(
            config.get_int("quota.window.num"), config.get_int("quota.window.size.seconds") * 1000
        )
        controller = QuotaWindows(
            config.get_int("controller.quota.window.num"),
            config.get_int("controller.quota.window.size.seconds") * 1000,
        )
        self.produce = ClientQuotaManager("Produce", client)
        self.fetch = ClientQuotaManager("Fetch", client)
        self.request = RequestQuotaManager("Request", client)
        self.controller_mutation = ControllerMutationQuotaManager("ControllerMutation", controller)
        #: `connection_creation_rate` by IP address (canonical text; None: the default IP).
        self.connection_rates: dict[str | None, int] = {}
        self._ip_entities: set[QuotaEntity] = set()

    def managers(self) -> list[tuple[str, ClientQuotaManager]]:
        return [
            (PRODUCER_BYTE_RATE, self.produce),
            (CONSUMER_BYTE_RATE, self.fetch),
            (REQUEST_PERCENTAGE, self.request),
            (CONTROLLER_MUTATION_RATE, self.controller_mutation),
        ]

    def entities(self) -> set[QuotaEntity]:
        """The entities with a quota set."""
        out = {entity for _, manager in self.managers() for entity in manager.overrides}
        return out | self._ip_entities

    def update(
        self, entity: QuotaEntity, config: Mapping[str, str], address: str | None = None
    ) -> None:
        """Apply an entity's config (Kafka's QuotaConfigHandler): each quota key sets that
        type's quota, a missing one removes it. A value that is not a number is logged and
        ignored (as missing). Unlike Kafka, a config without quota keys (a user's SCRAM
        credentials) does not turn measuring on: only a quota does. An ip entity named by a
        host name applies to `address`, what the name resolved to
        (`wirebroker.host_names.resolve`)."""
        if entity.ip is not None:
            self._ip_configured(entity, config, address)
            return
        for key, manager in self.managers():
            text = config.get(key)
            bound = None
            if text is not None:
                try:
                    bound = float(int(text) if QUOTA_KEYS[key] == "long" else text)
                except ValueError:
                    log.error("ignoring %s=%r of %s: not a number", key, text, entity.path)
            if bound is not None or entity in manager.overrides:
                manager.update_quota(entity, bound)

    def _ip_configured(
        self, entity: QuotaEntity, config: Mapping[str, str], address: str | None
    ) -> None:
        """Kafka's IpConfigHandler: the ip's connection rate quota set or, missing, removed,
        for the address its name is (or resolved to: `address`)."""
        assert entity.ip is not None
        ip = None
        if entity.ip != DEFAULT:
            ip = ip_address(desanitize(entity.ip)) or address
            if ip is None:  # Kafka's IpConfigHandler fails the same way
                log.error("ignoring the quota of %s: Unable to resolve address", entity.path)
                return
        text = config.get(CONNECTION_CREATION_RATE)
        try:
            rate = None if text is None else int(text)
        except ValueError:
            log.error(
                "ignoring %s=%r of %s: not a number", CONNECTION_CREATION_RATE, text, entity.path
            )
            rate = None
        if rate is None:
            self.connection_rates.pop(ip, None)
            self._ip_entities.discard(entity)
        else:
            self.connection_rates[ip] = rate
            self._ip_entities.add(entity)
        log.info(
            "max connection rate of %s: %s",
            ip or "the default IP",
            "removed" if rate is None else rate,
        )

    def connection_rate(self, ip: str) -> int | None:
        """The connection creation rate quota of an address (Kafka's connectionRateForIp);
        None without one."""
        rates = self.connection_rates
        return rates.get(ip, rates.get(None)) if rates else None
