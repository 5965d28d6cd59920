"""Prometheus metric families of one broker's counters and state, built when scraped.

Imported only when the metrics endpoint is on (`wirebroker.metrics_http`): prometheus_client
costs start-up time. The names and how they differ from Kafka's are described in
`wirebroker.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from protocol.errors import ErrorCode
from wirebroker.zk.znodes import desanitize

if TYPE_CHECKING:
    from wirebroker.broker import Broker


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
            name, labels = total_time.name, {"request": s.name}
            for q, value in s.quantiles_ms():
                total_time.samples.append(Sample(name, {**labels, "quantile": q}, value))
            total_time.samples.append(Sample(f"{name}_count", labels, s.count))
            total_time.samples.append(Sample(f"{name}_sum", labels, s.time_sum * 1000))
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
