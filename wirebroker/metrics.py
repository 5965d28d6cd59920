"""The broker's metrics, under the names Kafka dashboards know.

This module owns what is measured and what it is called. `BrokerStats` holds the counters the
hot paths bump (plain ints, and one small tuple per request for its times: never a lock,
nothing computed that can wait for a scrape); `BrokerCollector` (`wirebroker.metrics_collector`,
imported with the endpoint only: prometheus_client costs start-up time) turns them, and the
gauges it derives from the broker's state when scraped (partition and leader counts, log sizes,
consumer lag), into Prometheus metric families. `wirebroker.metrics_http` serves them, and
`wirebroker.metrics_lag` fetches, per scrape, the high watermarks of partitions led by other
brokers that lag needs. Without `wirebroker.metrics.listener` the per-request counting is off
(`BrokerStats.on`): the hot paths skip it, so metrics cost nothing unless served.

The names are those Prometheus' JMX exporter gives Kafka's MBeans under its example rules
(`kafka-2_0_0.yml`: `kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=t` becomes
`kafka_server_brokertopicmetrics_messagesin_total{topic="t"}`, a `Value` gauge drops the suffix,
a histogram's percentiles become `{quantile="0.99"}` and its `Count` `_count`); Kafka's
socket-server metrics, which that file has no rule for, as the JMX exporter's default naming
(and Strimzi's rules) give them; consumer group offsets and lag as kafka-exporter (danielqsj)
names them.

Where it differs from Kafka:
- `RequestMetrics` times: a request arrives when its last byte has been read (Kafka: when its
  network thread completed the receive), its local time ends when the handler returns, remote
  time is what the handler spent waiting (a fetch's long poll, a JoinGroup's rebalance: marked
  with `RequestContext.waiting`) plus a `Later` answer's wait (an acks=all Produce's
  replication), the response queue time ends when the write of its response begins and the
  send time when that write returns (the responses of pipelined requests leave in one write).
  Times are in ms with fractions (Kafka rounds to whole ms); the quantiles are those of the last
  `TIME_WINDOW` requests of the API (Kafka: a reservoir biased to the last five minutes), and
  `totaltimems_sum` is exported too.
- `ErrorsPerSec` counts a response's top-level error code (or the error a failed request was
  answered with) and, for Produce and Fetch, each partition's; `error="NONE"` is not counted.
- `BytesInPerSec`/`MessagesInPerSec` count client produce only (not the group coordinator's
  own writes to `__consumer_offsets`); a topic's own series disappear when no partition of it
  is hosted here any more (its counts stay in the all-topics series).
- Connections are counted per listener with `networkProcessor="0"`: one event loop serves them.
- Client quota metrics exist for the quota types that were set (Kafka: once any user or
  client config was set), and are named by the JMX exporter's quota rules:
  `kafka_server_quota_throttle_time{resource="Produce",clientId="app"}`, `..._byte_rate`,
  `..._request_time`, `..._mutation_rate`, `..._tokens`.
- Consumer lag is reported by the group's coordinator (as kafka-exporter reports it from the
  coordinator's OffsetFetch): the partition's high watermark, its own for the partitions it
  leads, else its leader's answer to a ListOffsets at scrape time, minus the committed offset.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from time import perf_counter
from typing import TYPE_CHECKING, Any

from protocol.errors import ErrorCode
from protocol.messages import APIS
from protocol.messages.headers import RequestHeader
from protocol.schema import Message
from wirebroker.quotas.rates import SampledRate

if TYPE_CHECKING:
    from protocol.messages.produce import ProduceResponse
    from wirebroker.dispatch import RequestContext

PRODUCE_KEY, FETCH_KEY = 0, 1
#: Requests whose times the quantiles of one API are computed over (a ring buffer).
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
#: Partition errors of a produce that Kafka does not count as a failed produce request
#: (`ReplicaManager.appendToLocalLog`'s "known exceptions", the acks=all wait's answers) and
#: those it answers before the replica manager sees the partition (not counted at all).
EXPECTED_PRODUCE_ERRORS = frozenset(
    {
        ErrorCode.NONE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)
UNSEEN_PRODUCE_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_REQUIRED_ACKS,
    }
)
#: Partition errors of a fetch that Kafka does not count as a failed fetch request
#: (`ReplicaManager.readFromLog`'s known exceptions).
EXPECTED_FETCH_ERRORS = frozenset(
    {
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.OFFSET_OUT_OF_RANGE,
    }
)

#: One request's times as the connection collects them: [the RequestStats to time it under,
#: arrived, handler started, handler returned, seconds the handler waited, response ready,
#: throttle ms] (perf_counter seconds); `request_sent` adds when its write began and ended.
Timing = list[Any]
STATS, ARRIVED, STARTED, RETURNED, WAITED, READY, THROTTLE_MS = range(7)
#: Kafka's ProducerStateManager.LATE_TRANSACTION_BUFFER_MS.
LATE_TXN_BUFFER_MS = 5 * 60 * 1000


class RequestStats:
    """One request name (an API, or FetchConsumer / FetchFollower): requests per version,
    errors, and the times of its last `TIME_WINDOW` requests."""

    __slots__ = (
        "name",
        "has_error_code",
        "versions",
        "errors",
        "times",
        "count",
        "total_s",
        "alone",
    )

    def __init__(self, name: str, has_error_code: bool, max_version: int) -> None:
        self.name = name
        self.has_error_code = has_error_code
        self.versions = [0] * (max_version + 1)
        self.errors: dict[int, int] = {}
        #: (Timing, write began, write ended) of the last requests: a ring once full.
        self.times: list[tuple[Timing, float, float]] = []
        self.count = 0
        self.total_s = 0.0
        #: This one alone, what a request of this name is timed under (no tuple per request).
        self.alone = (self,)

    def observe(self, timed: tuple[Timing, float, float]) -> None:
        count = self.count
        if count < TIME_WINDOW:
            self.times.append(timed)
        else:
            self.times[count & WINDOW_MASK] = timed
        self.count = count + 1
        self.total_s += timed[2] - timed[0][ARRIVED]


#: Kafka's RequestMetrics histograms: (name, doc, ms of one (Timing, write began, write ended)).
TIME_METRICS: tuple[tuple[str, str, Any], ...] = (
    (
        "requestqueuetimems",
        "Time from a request's arrival until its handling began, in ms.",
        lambda t: (t[0][STARTED] - t[0][ARRIVED]) * 1000,
    ),
    (
        "localtimems",
        "Time the handler worked on the request (its waits excluded), in ms.",
        lambda t: (t[0][RETURNED] - t[0][STARTED] - t[0][WAITED]) * 1000,
    ),
    (
        "remotetimems",
        "Time the request waited on others (replication, a fetch's long poll, a rebalance), in ms.",
        lambda t: (t[0][WAITED] + t[0][READY] - t[0][RETURNED]) * 1000,
    ),
    (
        "throttletimems",
        "Client quota throttle time given with the response, in ms.",
        lambda t: float(t[0][THROTTLE_MS]),
    ),
    (
        "responsequeuetimems",
        "Time from the response being ready until its write began, in ms.",
        lambda t: (t[1] - t[0][READY]) * 1000,
    ),
    (
        "responsesendtimems",
        "Time the write of the response took, in ms.",
        lambda t: (t[2] - t[1]) * 1000,
    ),
    (
        "totaltimems",
        "Time from a request's arrival until its response was written, in ms.",
        lambda t: (t[2] - t[0][ARRIVED]) * 1000,
    ),
)


def request_sent(timing: Timing, began: float, ended: float) -> None:
    """The response of a timed request was written (`began`..`ended`): its times count now."""
    timed = (timing, began, ended)
    for stats in timing[STATS]:
        stats.observe(timed)


@dataclass(slots=True)
class TopicStats:
    """Kafka's BrokerTopicMetrics of one topic (or of all topics)."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    produce_requests: int = 0
    failed_produce_requests: int = 0
    fetch_requests: int = 0
    failed_fetch_requests: int = 0

    def add(self, other: TopicStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


class ListenerStats:
    """Kafka's socket-server-metrics of one listener: connections open, created and closed."""

    __slots__ = ("count", "created", "closed", "creation_rate", "close_rate")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.count = 0
        self.created = 0
        self.closed = 0
        self.creation_rate = SampledRate(samples, window_ms)
        self.close_rate = SampledRate(samples, window_ms)


class _PerApi(dict[int, RequestStats]):
    """The stats of each API, made at its first request: by then its message module is
    imported (the request was decoded), and an API never asked for costs nothing (making them
    all in `Broker.open` imported every response module: ≈110 ms of a broker's start)."""

    def __missing__(self, api_key: int) -> RequestStats:
        info = APIS[api_key]
        has_error_code = any(f.name == "error_code" for f in info.response_class().FIELDS)
        stats = self[api_key] = RequestStats(info.name, has_error_code, info.max_version)
        return stats


@dataclass(eq=False)
class BrokerStats:
    """The counters of the hot paths; everything else is derived when scraped."""

    #: Whether requests are counted and timed (the metrics endpoint is on).
    on: bool = False
    #: Kafka's `metrics.num.samples` and `metrics.sample.window.ms`, for the rates it reports.
    rate_samples: int = 2
    rate_window_ms: int = 30_000
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
    listeners: dict[str, ListenerStats] = field(default_factory=dict)
    replication_bytes_in: int = 0
    replication_bytes_out: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0

    def request_done(
        self, header: RequestHeader, body: Message, response: Message | None, error: int = 0
    ) -> tuple[RequestStats, ...]:
        """Count a handled request (`error`: the code a failed one was answered with); the
        stats its times go to. This runs for every request, so it is written out flat."""
        key = header.request_api_key
        stats = self.requests[key]
        stats.versions[header.request_api_version] += 1
        if error or (
            stats.has_error_code
            and response is not None
            and (error := getattr(response, "error_code", 0))
        ):
            stats.errors[error] = stats.errors.get(error, 0) + 1
        if key != FETCH_KEY:
            return stats.alone
        version = header.request_api_version
        replica_id = body.replica_state.replica_id if version >= 15 else body.replica_id  # type: ignore[attr-defined]
        fetch = self.fetch_follower if replica_id >= 0 else self.fetch_consumer
        fetch.versions[version] += 1
        return (stats, fetch)

    def timing(self, ctx: RequestContext, arrived: float, started: float) -> Timing | None:
        """A handled request's times so far (None when it is not timed): the connection fills
        in when its response was ready (`READY`, for a `Later` one) and `request_sent`."""
        if not ctx.timed:
            return None
        returned = perf_counter()
        return [ctx.timed, arrived, started, returned, ctx.remote_s, returned, ctx.throttle_time_ms]

    def produced(self, topic: str, records: int, size: int) -> None:
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        stats.messages_in += records
        stats.bytes_in += size

    def produce_answered(self, topics: Iterable[ProduceResponse.TopicProduceResponse]) -> None:
        """Kafka's TotalProduceRequestsPerSec and FailedProduceRequestsPerSec per topic (one
        per partition), and the partitions' errors under Produce's ErrorsPerSec."""
        errors = self.requests[PRODUCE_KEY].errors
        for topic in topics:
            stats = None
            for p in topic.partition_responses:
                code = p.error_code
                if code:
                    errors[code] = errors.get(code, 0) + 1
                    if code in UNSEEN_PRODUCE_ERRORS:
                        continue
                if stats is None:
                    stats = self.topics.get(topic.name)
                    if stats is None:
                        stats = self.topics[topic.name] = TopicStats()
                stats.produce_requests += 1
                if code not in EXPECTED_PRODUCE_ERRORS:
                    stats.failed_produce_requests += 1

    def fetch_answered(self, topic: str | None, error: int, size: int, follower: bool) -> None:
        """One partition of a fetch (`topic`: None when not hosted here), `size` bytes sent:
        its error under Fetch's ErrorsPerSec, and for a hosted one Kafka's
        TotalFetchRequestsPerSec, FailedFetchRequestsPerSec and BytesOutPerSec (a follower's:
        ReplicationBytesOutPerSec)."""
        if error:
            errors = self.requests[FETCH_KEY].errors
            errors[error] = errors.get(error, 0) + 1
        if topic is None:
            return
        stats = self.topics.get(topic)
        if stats is None:
            stats = self.topics[topic] = TopicStats()
        stats.fetch_requests += 1
        if error not in EXPECTED_FETCH_ERRORS:
            stats.failed_fetch_requests += 1
        if follower:
            self.replication_bytes_out += size
        else:
            stats.bytes_out += size

    def connection_opened(self, listener: str, now_ms: int) -> None:
        stats = self.listeners.get(listener)
        if stats is None:
            stats = self.listeners[listener] = ListenerStats(self.rate_samples, self.rate_window_ms)
        stats.count += 1
        stats.created += 1
        stats.creation_rate.record(1, now_ms)

    def connection_closed(self, listener: str, now_ms: int) -> None:
        stats = self.listeners[listener]
        stats.count -= 1
        stats.closed += 1
        stats.close_rate.record(1, now_ms)

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
