"""The broker's metrics, under the names Kafka dashboards know.

This module owns what is measured and what it is called. `BrokerStats` holds the counters the
hot paths bump (plain ints: one dict lookup and an addition or two per request, never a lock);
`BrokerCollector` turns them, and the gauges it derives from the broker's state when scraped
(partition and leader counts, log sizes, consumer lag), into Prometheus metric families.
`wirebroker.metrics_http` serves them.

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

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from protocol.errors import ErrorCode
from protocol.messages import APIS
from protocol.messages.headers import RequestHeader
from protocol.schema import Message
from wirebroker.dispatch import Later
from wirebroker.zk.znodes import desanitize

if TYPE_CHECKING:
    from wirebroker.broker import Broker

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


class Timings:
    """How long something took, the last `TIME_WINDOW` times (seconds), their count and sum:
    a Kafka histogram as the JMX exporter shows it (quantiles, `_count`)."""

    __slots__ = ("times", "count", "time_sum")

    def __init__(self) -> None:
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

    def summary_samples(self, name: str, labels: dict[str, str]) -> list[Sample]:
        """The quantiles (ms), `_count` and `_sum` (ms) of a summary family `name`."""
        samples = [Sample(name, {**labels, "quantile": q}, v) for q, v in self.quantiles_ms()]
        samples.append(Sample(f"{name}_count", labels, self.count))
        samples.append(Sample(f"{name}_sum", labels, self.time_sum * 1000))
        return samples


class RequestStats(Timings):
    """One request name's counts per version, errors, and its recent total times (seconds)."""

    __slots__ = ("name", "has_error_code", "versions", "errors")

    def __init__(self, name: str, has_error_code: bool, max_version: int) -> None:
        super().__init__()
        self.name = name
        self.has_error_code = has_error_code
        self.versions = [0] * (max_version + 1)
        self.errors: dict[int, int] = {}


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


def _has_top_level_error_code(api_key: int) -> bool:
    response_class = APIS[api_key].response_class()
    return any(f.name == "error_code" for f in response_class.FIELDS)


def _request_stats() -> dict[int, RequestStats]:
    return {
        key: RequestStats(info.name, _has_top_level_error_code(key), info.max_version)
        for key, info in APIS.items()
    }


@dataclass(eq=False)
class BrokerStats:
    """The counters of the hot paths; everything else is derived when scraped."""

    connections: int = 0
    requests: dict[int, RequestStats] = field(default_factory=_request_stats)
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


class BrokerCollector(Collector):
    """Every metric family of one broker, built when scraped (on the broker's trio thread)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        yield from self._broker_topic_metrics()
        yield from self._request_metrics()
        yield from self._replica_manager()
        yield from self._controller()
        yield from self._logs()
        yield from self._consumer_groups()
        yield from self._quotas()
        yield from self._transactions()
        yield from self._other()

    def _broker_topic_metrics(self) -> Iterator[Metric]:
        stats = self.broker.stats
        hosted = {tp.topic for tp in self.broker.partitions}
        total, per_topic = stats.topic_totals(hosted)
        for name, attr, doc in (
            ("messagesin", "messages_in", "Records appended by produce requests."),
            ("bytesin", "bytes_in", "Bytes of record batches received by produce requests."),
            ("bytesout", "bytes_out", "Bytes of records sent to consumers."),
        ):
            family = _counter(f"kafka_server_brokertopicmetrics_{name}", doc, ["topic"])
            family.add_metric([], getattr(total, attr))
            for topic, topic_stats in sorted(per_topic.items()):
                family.add_metric([topic], getattr(topic_stats, attr))
            yield family
        for name, value, doc in (
            ("replicationbytesin", stats.replication_bytes_in, "Bytes fetched from leaders."),
            ("replicationbytesout", stats.replication_bytes_out, "Bytes sent to followers."),
        ):
            family = _counter(f"kafka_server_brokertopicmetrics_{name}", doc)
            family.add_metric([], value)
            yield family

    def _request_metrics(self) -> Iterator[Metric]:
        stats = self.broker.stats
        all_stats = [s for s in stats.requests.values() if s.count]
        all_stats += [s for s in (stats.fetch_consumer, stats.fetch_follower) if s.count]
        requests = _counter(
            "kafka_network_requestmetrics_requests",
            "Requests handled, per API and version.",
            ["request", "version"],
        )
        errors = _counter(
            "kafka_network_requestmetrics_errors",
            "Responses carrying a request-level error, per API and error.",
            ["request", "error"],
        )
        total_time = Metric(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a request's arrival to its response being ready, in ms.",
            "summary",
        )
        for s in all_stats:
            for version, count in enumerate(s.versions):
                if count:
                    requests.add_metric([s.name, str(version)], count)
            for code, count in sorted(s.errors.items()):
                errors.add_metric([s.name, _error_name(code)], count)
            total_time.samples += s.summary_samples(total_time.name, {"request": s.name})
        yield requests
        yield errors
        yield total_time

    def _replica_manager(self) -> Iterator[Metric]:
        broker = self.broker
        partitions = list(broker.partitions.values())
        leaders = [p for p in partitions if p.is_local_leader]
        gauges = (
            ("partitioncount", len(partitions), "Partitions hosted here (leader or follower)."),
            ("leadercount", len(leaders), "Partitions led here."),
            (
                "underreplicatedpartitions",
                sum(1 for p in leaders if len(p.isr) < len(p.replicas)),
                "Partitions led here whose ISR is smaller than their replica set.",
            ),
            (
                "underminisrpartitioncount",
                sum(1 for p in leaders if len(p.isr) < p.effective_min_isr),
                "Partitions led here whose ISR is smaller than min.insync.replicas.",
            ),
            (
                "atminisrpartitioncount",
                sum(1 for p in leaders if len(p.isr) == p.effective_min_isr),
                "Partitions led here whose ISR is exactly min.insync.replicas.",
            ),
        )
        for name, value, doc in gauges:
            yield _gauge(f"kafka_server_replicamanager_{name}", doc, value)
        for name, value, doc in (
            ("isrshrinks", broker.stats.isr_shrinks, "ISR shrinks the controller accepted."),
            ("isrexpands", broker.stats.isr_expands, "ISR expansions the controller accepted."),
        ):
            family = _counter(f"kafka_server_replicamanager_{name}", doc)
            family.add_metric([], value)
            yield family

    def _controller(self) -> Iterator[Metric]:
        broker = self.broker
        active, offline, topics, partitions = 0, 0, 0, 0
        if broker.cluster is not None:
            controller = broker.cluster.controller
            if controller.active:
                ctx = controller.ctx
                active = 1
                offline = sum(
                    1
                    for tp, info in ctx.states.items()
                    if tp[0] not in ctx.deleting and info.state.leader not in ctx.live
                )
                topics = len(ctx.topics)
                partitions = sum(len(t.partitions) for t in ctx.topics.values())
        elif not broker.cluster_mode:  # the embedded broker is its own controller
            active = 1
            topics = len(broker.topics.topics)
            partitions = sum(r.partitions for r in broker.topics.topics.values())
        prefix = "kafka_controller_kafkacontroller_"
        yield _gauge(f"{prefix}activecontrollercount", "1 on the active controller.", active)
        yield _gauge(
            f"{prefix}offlinepartitionscount",
            "Partitions without a live leader (on the active controller).",
            offline,
        )
        yield _gauge(f"{prefix}globaltopiccount", "Topics (on the active controller).", topics)
        yield _gauge(
            f"{prefix}globalpartitioncount", "Partitions (on the active controller).", partitions
        )

    def _logs(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes of the partition's log.", None, labels
        )
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "The log end offset.", None, labels)
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "The log start offset.", None, labels
        )
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "Segments of the log.", None, labels
        )
        current = GaugeMetricFamily(
            "kafka_topic_partition_current_offset",
            "The high watermark of a partition led here.",
            None,
            labels,
        )
        oldest = GaugeMetricFamily(
            "kafka_topic_partition_oldest_offset",
            "The log start offset of a partition led here.",
            None,
            labels,
        )
        for tp, p in sorted(
            self.broker.partitions.items(), key=lambda kv: (kv[0].topic, kv[0].partition)
        ):
            names = [tp.topic, str(tp.partition)]
            log = p.log
            size.add_metric(names, log.size_in_bytes)
            end.add_metric(names, log.log_end_offset)
            start.add_metric(names, log.log_start_offset)
            segments.add_metric(names, len(log.segments))
            if p.is_local_leader:
                current.add_metric(names, p.high_watermark)
                oldest.add_metric(names, p.log_start_offset)
        yield from (size, end, start, segments, current, oldest)

    def _consumer_groups(self) -> Iterator[Metric]:
        broker = self.broker
        offset = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "The group's committed offset of a partition.",
            None,
            ["consumergroup", "topic", "partition"],
        )
        offset_sum = GaugeMetricFamily(
            "kafka_consumergroup_current_offset_sum",
            "The group's committed offsets of a topic, summed over its partitions.",
            None,
            ["consumergroup", "topic"],
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus the group's committed offset, for partitions led here.",
            None,
            ["consumergroup", "topic", "partition"],
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "The group's lag of a topic, summed over the partitions led here.",
            None,
            ["consumergroup", "topic"],
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of the group.", None, ["consumergroup"]
        )
        for group in sorted(broker.groups.list_groups(), key=lambda g: g.group_id):
            members.add_metric([group.group_id], len(group.members))
            offsets: dict[str, int] = {}
            lags: dict[str, int] = {}
            for (topic, index), committed in sorted(group.offsets.items()):
                names = [group.group_id, topic, str(index)]
                offset.add_metric(names, committed.offset)
                offsets[topic] = offsets.get(topic, 0) + committed.offset
                p = broker.partition(topic, index)
                if p is not None and p.is_local_leader:
                    behind = max(p.high_watermark - committed.offset, 0)
                    lag.add_metric(names, behind)
                    lags[topic] = lags.get(topic, 0) + behind
            for topic, total in offsets.items():
                offset_sum.add_metric([group.group_id, topic], total)
            for topic, total in lags.items():
                lag_sum.add_metric([group.group_id, topic], total)
        yield from (offset, offset_sum, lag, lag_sum, members)

    def _quotas(self) -> Iterator[Metric]:
        """Kafka's per-client quota metrics (`kafka.server:type=Produce,user=..,client-id=..`
        and the like), as the JMX exporter's quota rules name them; a tag Kafka leaves empty
        is no label, as JMX drops it."""
        quotas = self.broker.quotas
        now = self.broker.now_ms()
        families: dict[str, Metric] = {}

        def add(name: str, doc: str, labels: dict[str, str], value: float) -> None:
            family = families.get(name)
            if family is None:
                family = families[name] = Metric(f"kafka_server_quota_{name}", doc, "gauge")
            family.samples.append(Sample(family.name, labels, value))

        for resource, manager, measured in (
            ("Produce", quotas.produce, "byte_rate"),
            ("Fetch", quotas.fetch, "byte_rate"),
            ("Request", quotas.request, "request_time"),
            ("ControllerMutation", quotas.controller_mutation, "mutation_rate"),
        ):
            for sensor in manager.live_sensors():
                user, client_id = sensor.tags
                labels = {"resource": resource}
                if user:
                    labels["user"] = user
                if client_id:
                    labels["clientId"] = desanitize(client_id)
                add(measured, _QUOTA_DOCS[measured], labels, sensor.rate.measure(now))
                add(
                    "throttle_time",
                    "Mean throttle time given to the client (ms).",
                    labels,
                    sensor.throttles.average(now),
                )
                if sensor.bucket is not None and sensor.bound is not None:
                    sensor.bucket.check(sensor.bound, now)  # refills it to now
                    add(
                        "tokens",
                        "Tokens left in the client's bucket.",
                        labels,
                        sensor.bucket.tokens,
                    )
        yield from families.values()

    def _transactions(self) -> Iterator[Metric]:
        """The transaction coordinator's and KIP-890 verification's metrics."""
        coordinator = self.broker.transactions
        markers = coordinator.markers.statistics()
        prefix = "kafka_coordinator_transaction_transactionmarkerchannelmanager_"
        yield _gauge(
            f"{prefix}unknowndestinationqueuesize",
            "Transaction markers waiting for their partition's leader.",
            markers["unknown_destination_markers"],
        )
        yield _gauge(
            f"{prefix}logappendretryqueuesize",
            "Completed transactions whose Complete record waits to be written again.",
            markers["log_append_retries"],
        )
        loads = coordinator.state.recent_load_times_ms()
        prefix = "kafka_server_transaction_coordinator_metrics_partition_load_time_"
        yield _gauge(
            f"{prefix}max",
            "Longest __transaction_state partition load of the last 30 s, in ms.",
            max(loads, default=math.nan),
        )
        yield _gauge(
            f"{prefix}avg",
            "Average __transaction_state partition load of the last 30 s, in ms.",
            sum(loads) / len(loads) if loads else math.nan,
        )
        verifier = coordinator.verifier
        failures = Metric(
            "kafka_server_addpartitionstotxnmanager_verificationfailurerate_count",
            "Partitions whose transactional write failed KIP-890 verification.",
            "unknown",
        )
        failures.samples.append(Sample(failures.name, {}, verifier.failures))
        yield failures
        times = Metric(
            "kafka_server_addpartitionstotxnmanager_verificationtimems",
            "Time to verify a transactional write with its coordinator (KIP-890), in ms.",
            "summary",
        )
        times.samples += verifier.times.summary_samples(times.name, {})
        yield times

    def _other(self) -> Iterator[Metric]:
        broker = self.broker
        sessions = broker.fetch_sessions.sessions
        yield _gauge(
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "Incremental fetch sessions (KIP-227) cached.",
            len(sessions),
        )
        yield _gauge(
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions in the cached fetch sessions.",
            sum(len(s.partitions) for s in sessions.values()),
        )
        yield _gauge(
            "kafka_server_socket_server_metrics_connection_count",
            "Open client connections.",
            broker.stats.connections,
        )


_QUOTA_DOCS = {
    "byte_rate": "Bytes a second the client produced or fetched (its quota's measure).",
    "request_time": "Percent of a second the client's requests took to handle.",
    "mutation_rate": "Partitions a second the client created or deleted.",
}


def _counter(name: str, doc: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels or [])


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
