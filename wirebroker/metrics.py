"""The broker's metrics, under the names Kafka dashboards know.

This module owns what is measured. `BrokerStats` holds the counters the hot paths bump (plain
ints: one dict lookup and an addition or two per request, never a lock);
`wirebroker.metrics_collector.BrokerCollector` names them, and turns them and the gauges it
derives from the broker's state when scraped (partition and leader counts, log sizes, consumer
lag) into Prometheus metric families; `wirebroker.metrics_http` serves them. Only those two
import prometheus_client, and only when the endpoint is on (it costs start-up time).

The names are those Prometheus' JMX exporter gives Kafka's MBeans under its example rules
(`kafka-2_0_0.yml`: `kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t` becomes
`kafka_server_brokertopicmetrics_messagesin_total{topic="t"}`, a `Value` gauge drops the suffix,
a histogram's percentiles become `{quantile="0.99"}`), so existing Kafka dashboards work;
consumer group offsets and lag are named as kafka-exporter (danielqsj) names them.

Where it differs from Kafka:
- `RequestMetrics` time is from the request's decoding to its response being ready (an acks=all
  Produce: until replicated), not until the response is written; its quantiles are those of
  the last `TIME_WINDOW` requests of that API (Kafka: a reservoir biased to the last five
  minutes), and `_sum` is exported too.
- `ErrorsPerSec` counts the request-level error of a response (its top-level error code, or
  the error a failed request was answered with); per-partition error codes and `error="NONE"`
  are not counted.
- `BytesInPerSec`/`MessagesInPerSec` count client produce only (not the group coordinator's
  own writes to `__consumer_offsets`); a topic's own series disappear when no partition of it
  is hosted here any more (its counts stay in the all-topics series).
- Connections are one count for the broker (`socket-server-metrics` has no listener label).
- Client quota metrics exist for the quota types that were set (Kafka: once any user or
  client config was set), and are named by the JMX exporter's quota rules:
  `kafka_server_quota_throttle_time{resource="Produce",clientId="app"}`, `..._byte_rate`,
  `..._request_time`, `..._mutation_rate`, `..._tokens`.
- Consumer lag is reported by the group's coordinator, for the partitions this broker leads
  (it knows their high watermark); lag is the high watermark minus the committed offset.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from time import perf_counter

from protocol.messages import APIS
from protocol.messages.headers import RequestHeader
from protocol.schema import Message
from wirebroker.dispatch import Later

FETCH_KEY = 1
#: Requests whose total time the quantiles of one API are computed over (a ring buffer).
TIME_WINDOW = 1024
WINDOW_MASK = TIME_WINDOW - 1  # TIME_WINDOW is a power of two
#: Kafka's histogram percentiles, labelled as the JMX exporter labels them (`99thPercentile`
#: becomes quantile="0.99", `50thPercentile` quantile="0.50").
QUANTILES = (
    ("0.50", 0.5),
    ("0.75", 0.75),
    ("0.95", 0.95),
    ("0.98", 0.98),
    ("0.99", 0.99),
    ("0.999", 0.999),
)


class RequestStats:
    """One request name's counts per version, errors, and its recent total times (seconds)."""

    __slots__ = ("name", "has_error_code", "versions", "errors", "times", "count", "time_sum")

    def __init__(self, name: str, has_error_code: bool, max_version: int) -> None:
        self.name = name
        self.has_error_code = has_error_code
        self.versions = [0] * (max_version + 1)
        self.errors: dict[int, int] = {}
        self.times = [0.0] * TIME_WINDOW
        self.count = 0
        self.time_sum = 0.0

    def observe(self, seconds: float) -> None:
        count = self.count
        self.times[count & WINDOW_MASK] = seconds
        self.count = count + 1
        self.time_sum += seconds

    def quantiles_ms(self) -> list[tuple[str, float]]:
        """(quantile label, ms) over the last `TIME_WINDOW` requests."""
        recent = sorted(self.times[: min(self.count, TIME_WINDOW)])
        if not recent:
            return []
        last = len(recent) - 1
        return [(label, recent[min(last, int(q * len(recent)))] * 1000) for label, q in QUANTILES]


@dataclass(slots=True)
class TopicStats:
    """Kafka's BrokerTopicMetrics of one topic (or of all topics)."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0

    def add(self, other: TopicStats) -> None:
        self.messages_in += other.messages_in
        self.bytes_in += other.bytes_in
        self.bytes_out += other.bytes_out


class _PerApi(dict[int, RequestStats]):
    """The stats of each API, made at its first request: by then its message module is
    imported (the request was decoded), and an API never asked for costs nothing."""

    def __missing__(self, api_key: int) -> RequestStats:
        info = APIS[api_key]
        has_error_code = any(f.name == "error_code" for f in info.response_class().FIELDS)
        stats = self[api_key] = RequestStats(info.name, has_error_code, info.max_version)
        return stats


@dataclass(eq=False)
class BrokerStats:
    """The counters of the hot paths; everything else is derived when scraped."""

    connections: int = 0
    requests: dict[int, RequestStats] = field(default_factory=_PerApi)
    #: Fetch is also counted as FetchConsumer or FetchFollower, as Kafka does.
    fetch_consumer: RequestStats = field(
        default_factory=lambda: RequestStats("FetchConsumer", True, APIS[FETCH_KEY].max_version)
    )
    fetch_follower: RequestStats = field(
        default_factory=lambda: RequestStats("FetchFollower", True, APIS[FETCH_KEY].max_version)
    )
    topics: dict[str, TopicStats] = field(default_factory=dict)
    #: The counts of topics no longer hosted here (part of the all-topics totals).
    retired: TopicStats = field(default_factory=TopicStats)
    replication_bytes_in: int = 0
    replication_bytes_out: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0

    def request_done(
        self,
        header: RequestHeader,
        body: Message,
        started: float,
        response: Message | Later | None,
        error: int = 0,
    ) -> Message | Later | None:
        """Count a handled request; `error` is the code a failed one was answered with.

        A `Later` answer is timed until it is ready: the returned `Later` wraps it. This runs
        for every request, so the usual case is written out rather than factored.
        """
        key = header.request_api_key
        stats = self.requests[key]
        stats.versions[header.request_api_version] += 1
        if error or (
            stats.has_error_code
            and response is not None
            and (error := getattr(response, "error_code", 0))
        ):
            stats.errors[error] = stats.errors.get(error, 0) + 1
        if key == FETCH_KEY:
            return self._fetch_done(stats, header, body, started, response)
        if type(response) is Later:
            return Later(partial(_timed, response, started, (stats,)))
        elapsed = perf_counter() - started
        count = stats.count
        stats.times[count & WINDOW_MASK] = elapsed
        stats.count = count + 1
        stats.time_sum += elapsed
        return response

    def _fetch_done(
        self,
        stats: RequestStats,
        header: RequestHeader,
        body: Message,
        started: float,
        response: Message | Later | None,
    ) -> Message | Later | None:
        """Fetch is also counted as FetchConsumer or FetchFollower, as Kafka does."""
        version = header.request_api_version
        replica_id = body.replica_state.replica_id if version >= 15 else body.replica_id  # type: ignore[attr-defined]
        fetch = self.fetch_follower if replica_id >= 0 else self.fetch_consumer
        fetch.versions[version] += 1
        if type(response) is Later:  # a long poll: timed until answered
            return Later(partial(_timed, response, started, (stats, fetch)))
        elapsed = perf_counter() - started
        stats.observe(elapsed)
        fetch.observe(elapsed)
        return response

    def produced(self, topic: str, records: int, size: int) -> None:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        stats.messages_in += records
        stats.bytes_in += size

    def fetched(self, topic: str, size: int, follower: bool) -> None:
        if follower:
            self.replication_bytes_out += size
            return
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        stats.bytes_out += size

    def isr_changed(self, expanded: bool) -> None:
        if expanded:
            self.isr_expands += 1
        else:
            self.isr_shrinks += 1

    def topic_totals(self, hosted: set[str]) -> tuple[TopicStats, dict[str, TopicStats]]:
        """(all topics, each hosted topic); a topic no longer hosted is folded into `retired`."""
        for name in [t for t in self.topics if t not in hosted]:
            self.retired.add(self.topics.pop(name))
        total = TopicStats()
        total.add(self.retired)
        for stats in self.topics.values():
            total.add(stats)
        return total, self.topics


async def _timed(later: Later, started: float, stats: Iterable[RequestStats]) -> Message:
    try:
        return await later.finish()
    finally:
        elapsed = perf_counter() - started
        for s in stats:
            s.observe(elapsed)
