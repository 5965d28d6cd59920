"""Replication throttles: Kafka's ReplicationQuotaManager, on the leader and the follower side,
and for the copies of replicas moved between this broker's log dirs.

A topic's `leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`
(`partition:broker,...` or `*`) name the replicas whose replication is throttled; each broker
keeps the partitions listed with its own id (`*`: all of the topic's). The rate is the broker
config `leader.replication.throttled.rate` / `follower.replication.throttled.rate` (bytes a
second, Long.MAX by default: unlimited), read from the broker's config whenever it is needed,
so a dynamic change applies at once. As in Kafka:

- The bytes of every throttled partition are counted (a follower in the ISR too), over
  `replication.quota.window.num` windows of `replication.quota.window.size.seconds` (Kafka's
  SimpleRate).
- Only replicas out of the ISR are held back, so a throttle never pushes a follower out of the
  ISR: the leader answers a throttled partition's fetch without records while its rate is over
  the limit and the fetching replica is not in the ISR; the follower leaves a throttled
  partition out of its fetches while its rate is over the limit and the partition has not
  caught up with the leader's high watermark.
- The moves between log dirs (AlterReplicaLogDirs) share one rate,
  `replica.alter.log.dirs.io.max.bytes.per.second`: every partition is throttled, and no move
  copies while the rate is over it (Kafka's alterLogDirs quota, LocalLeaderEndPoint.buildFetch).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from wirebroker.config import LONG_MAX
from wirebroker.quotas.rates import SampledRate

if TYPE_CHECKING:
    from wirebroker.config import BrokerConfig

log = logging.getLogger(__name__)

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
#: Every partition of a topic is throttled (`*`).
ALL_PARTITIONS = None
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def valid_throttled_replicas(value: str) -> bool:
    """Kafka's ThrottledReplicaListValidator: `*`, or `partition:broker` items (a list of
    them, comma separated, blanks allowed around the items)."""
    items = [item.strip() for item in value.split(",")]
    if "".join(items) == "*":
        return True
    return all(_REPLICA.fullmatch(item) for item in items)


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled replica list names for `broker_id` (None: all)."""
    text = value.strip()
    if text == "*":
        return ALL_PARTITIONS
    out = set()
    for item in text.split(","):
        partition, _, broker = item.strip().partition(":")
        if broker.isdigit() and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's throttled partitions, their replication rate, and its limit."""

    def __init__(
        self,
        side: str,
        rate_key: str,
        replicas_key: str,
        config: Callable[[], BrokerConfig],
        samples: int,
        window_ms: int,
    ) -> None:
        self.side = side
        self.rate_key = rate_key
        self.replicas_key = replicas_key
        self._config = config
        #: Throttled partitions by topic (ALL_PARTITIONS: every one).
        self.throttled: dict[str, frozenset[int] | None] = {}
        self.rate = SampledRate(samples, window_ms, simple=True)

    def is_throttled(self, topic: str, partition: int) -> bool:
        if topic not in self.throttled:
            return False
        partitions = self.throttled[topic]
        return partitions is ALL_PARTITIONS or partition in partitions

    def limit(self) -> int:
        """The rate limit in bytes a second, from the broker's config now."""
        return self._config().get_int(self.rate_key)

    def is_exceeded(self, now_ms: int) -> bool:
        limit = self.limit()
        return limit < LONG_MAX and self.rate.check(limit, now_ms) is not None

    def record(self, size: int, now_ms: int) -> None:
        self.rate.record(size, now_ms)

    def topic_configured(self, topic: str, overrides: Mapping[str, str], broker_id: int) -> None:
        """Take a topic's throttled replica list (Kafka's TopicConfigHandler)."""
        value = (overrides.get(self.replicas_key) or "").strip()
        old = self.throttled.get(topic, frozenset())
        if value and valid_throttled_replicas(value):
            partitions = throttled_partitions(value, broker_id)
            self.throttled[topic] = partitions
        else:
            partitions = frozenset()
            self.throttled.pop(topic, None)
        if partitions != old:
            log.info(
                "%s replication of %s throttled: %s",
                self.side,
                topic,
                "all partitions"
                if partitions is ALL_PARTITIONS
                else (", ".join(map(str, sorted(partitions))) or "none"),
            )


class ReplicationQuotas:
    """The leader and the follower side of this broker's replication throttles, and the
    log dir moves' (no throttled replica list: all are)."""

    def __init__(self, config: Callable[[], BrokerConfig], broker_id: int) -> None:
        settings = config()
        samples = settings.get_int("replication.quota.window.num")
        window_ms = settings.get_int("replication.quota.window.size.seconds") * 1000
        self.broker_id = broker_id
        self.leader = ReplicationQuota(
            "leader", LEADER_RATE, LEADER_REPLICAS, config, samples, window_ms
        )
        self.follower = ReplicationQuota(
            "follower", FOLLOWER_RATE, FOLLOWER_REPLICAS, config, samples, window_ms
        )
        self.alter_log_dirs = ReplicationQuota(
            "log dir move", ALTER_LOG_DIRS_RATE, "", config, samples, window_ms
        )

    def topics(self) -> set[str]:
        """The topics with throttled replicas here."""
        return set(self.leader.throttled) | set(self.follower.throttled)

    def topic_configured(self, topic: str, overrides: Mapping[str, str]) -> None:
        """A topic's configs are (now) these overrides; {} when it is gone."""
        self.leader.topic_configured(topic, overrides, self.broker_id)
        self.follower.topic_configured(topic, overrides, self.broker_id)
