"""Prometheus metric families of one broker's counters and state, built when scraped.

Imported only when the metrics endpoint is on (`wirebroker.metrics_http`): prometheus_client
costs a broker's start ≈19 ms (with http.server, urllib and cramjam). What is measured, the
names and how they differ from Kafka's: `wirebroker.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from protocol.errors import ErrorCode
from wirebroker.group.state import GroupState
from wirebroker.metrics import LATE_TXN_BUFFER_MS, QUANTILES, TIME_METRICS
from wirebroker.zk.sanitizer import desanitize

if TYPE_CHECKING:
    from storage.partition_log import PartitionLog
    from wirebroker.broker import Broker


class BrokerCollector(Collector):
    """Every metric family of one broker, built when scraped (on the broker's trio thread).

    `remote_high_watermarks` is what `wirebroker.metrics_lag` fetched for this scrape: the
    high watermarks of partitions other brokers lead, by (topic, partition)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.remote_high_watermarks: dict[tuple[str, int], int] = {}

    def collect(self) -> Iterator[Metric]:
        yield from self._broker_topic_metrics()
        yield from self._request_metrics()
        yield from self._replica_manager()
        yield from self._controller()
        yield from self._logs()
        yield from self._topic_partitions()
        yield from self._consumer_groups()
        yield from self._group_coordinator()
        yield from self._transactions()
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
            (
                "totalproducerequests",
                "produce_requests",
                "Partitions produced to (one per partition of a produce request).",
            ),
            (
                "failedproducerequests",
                "failed_produce_requests",
                "Partitions of produce requests that failed (invalid records, producer "
                "state errors, unexpected errors; not NOT_LEADER and the like).",
            ),
            (
                "totalfetchrequests",
                "fetch_requests",
                "Partitions fetched from, by consumers and followers (one per partition).",
            ),
            (
                "failedfetchrequests",
                "failed_fetch_requests",
                "Partitions of fetch requests that failed unexpectedly.",
            ),
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
        all_stats = [s for s in stats.requests.values() if s.count or any(s.versions)]
        all_stats += [s for s in (stats.fetch_consumer, stats.fetch_follower) if s.count]
        requests = _counter(
            "kafka_network_requestmetrics_requests",
            "Requests handled, per API and version.",
            ["request", "version"],
        )
        errors = _counter(
            "kafka_network_requestmetrics_errors",
            "Errors answered (top-level; and each partition's for Produce and Fetch), per "
            "API and error.",
            ["request", "error"],
        )
        for s in all_stats:
            for version, count in enumerate(s.versions):
                if count:
                    requests.add_metric([s.name, str(version)], count)
            for code, count in sorted(s.errors.items()):
                errors.add_metric([s.name, _error_name(code)], count)
        yield requests
        yield errors
        timed = [s for s in all_stats if s.count]
        for name, doc, ms in TIME_METRICS:
            family = Metric(f"kafka_network_requestmetrics_{name}", doc, "summary")
            for s in timed:
                labels = {"request": s.name}
                family.samples += _quantiles(family.name, labels, [ms(t) for t in s.times])
                family.samples.append(Sample(f"{family.name}_count", labels, s.count))
                if name == "totaltimems":
                    family.samples.append(Sample(f"{family.name}_sum", labels, s.total_s * 1000))
            yield family

    def _replica_manager(self) -> Iterator[Metric]:
        broker = self.broker
        partitions = list(broker.partitions.values())
        leaders = [p for p in partitions if p.is_local_leader]
        late_after_ms = broker.config.get_int("transaction.max.timeout.ms") + LATE_TXN_BUFFER_MS
        now_ms = broker.now_ms()
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
            (
                "produceridcount",
                sum(len(p.log.producer_state.producers) for p in partitions),
                "Producer ids in the producer state of the partitions hosted here.",
            ),
            (
                "partitionswithlatetransactionscount",
                sum(1 for p in leaders if _has_late_transaction(p.log, now_ms, late_after_ms)),
                "Partitions led here with a transaction open longer than "
                "transaction.max.timeout.ms plus 5 minutes.",
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
        active, offline, topics = 0, 0, self._controller_topics()
        broker = self.broker
        if broker.cluster is not None and broker.cluster.controller.active:
            ctx = broker.cluster.controller.ctx
            active = 1
            offline = sum(
                1
                for tp, info in ctx.states.items()
                if tp[0] not in ctx.deleting and info.state.leader not in ctx.live
            )
        elif not broker.cluster_mode:  # the embedded broker is its own controller
            active = 1
        prefix = "kafka_controller_kafkacontroller_"
        yield _gauge(f"{prefix}activecontrollercount", "1 on the active controller.", active)
        yield _gauge(
            f"{prefix}offlinepartitionscount",
            "Partitions without a live leader (on the active controller).",
            offline,
        )
        yield _gauge(f"{prefix}globaltopiccount", "Topics (on the active controller).", len(topics))
        yield _gauge(
            f"{prefix}globalpartitioncount",
            "Partitions (on the active controller).",
            sum(topics.values()),
        )

    def _controller_topics(self) -> dict[str, int]:
        """Partitions of every topic, as the active controller knows them (empty elsewhere)."""
        broker = self.broker
        if broker.cluster is not None:
            controller = broker.cluster.controller
            if not controller.active:
                return {}
            return {name: len(t.partitions) for name, t in controller.ctx.topics.items()}
        if broker.cluster_mode:
            return {}
        return {name: r.partitions for name, r in broker.topics.topics.items()}

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
        for tp, p in self._sorted_partitions():
            names = [tp.topic, str(tp.partition)]
            log = p.log
            size.add_metric(names, log.size_in_bytes)
            end.add_metric(names, log.log_end_offset)
            start.add_metric(names, log.log_start_offset)
            segments.add_metric(names, len(log.segments))
        yield from (size, end, start, segments)

    def _topic_partitions(self) -> Iterator[Metric]:
        """kafka-exporter's topic metrics: per partition from its leader (so that summing over
        brokers counts each once), the partition counts from the active controller."""
        labels = ["topic", "partition"]
        families = {
            name: GaugeMetricFamily(f"kafka_topic_partition_{name}", doc, None, labels)
            for name, doc in (
                ("current_offset", "The high watermark of a partition led here."),
                ("oldest_offset", "The log start offset of a partition led here."),
                ("leader", "The leader's broker id (partitions led here)."),
                ("replicas", "Replicas of a partition led here."),
                ("in_sync_replica", "In-sync replicas of a partition led here."),
                ("leader_is_preferred", "1 if a partition led here is on its preferred leader."),
                ("under_replicated_partition", "1 if a partition led here is under-replicated."),
            )
        }
        for tp, p in self._sorted_partitions():
            if not p.is_local_leader:
                continue
            names = [tp.topic, str(tp.partition)]
            for name, value in (
                ("current_offset", p.high_watermark),
                ("oldest_offset", p.log_start_offset),
                ("leader", p.leader),
                ("replicas", len(p.replicas)),
                ("in_sync_replica", len(p.isr)),
                ("leader_is_preferred", int(bool(p.replicas) and p.replicas[0] == p.leader)),
                ("under_replicated_partition", int(len(p.isr) < len(p.replicas))),
            ):
                families[name].add_metric(names, value)
        yield from families.values()
        partitions = GaugeMetricFamily(
            "kafka_topic_partitions",
            "Partitions of a topic (on the active controller).",
            None,
            ["topic"],
        )
        for topic, count in sorted(self._controller_topics().items()):
            partitions.add_metric([topic], count)
        yield partitions
        broker = self.broker
        live = sum(1 for _ in broker.metadata_cache.alive_brokers()) if broker.cluster_mode else 1
        yield _gauge(
            "kafka_brokers", "Live brokers of the cluster, as this broker knows them.", live
        )

    def _sorted_partitions(self) -> list[tuple[Any, Any]]:
        return sorted(self.broker.partitions.items(), key=lambda kv: (kv[0].topic, kv[0].partition))

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
            "The partition's high watermark minus the group's committed offset.",
            None,
            ["consumergroup", "topic", "partition"],
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "The group's lag of a topic, summed over the partitions whose lag is known.",
            None,
            ["consumergroup", "topic"],
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of the group.", None, ["consumergroup"]
        )
        remote = self.remote_high_watermarks
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
                    high_watermark: int | None = p.high_watermark
                else:
                    high_watermark = remote.get((topic, index))
                if high_watermark is not None:
                    behind = high_watermark - committed.offset
                    lag.add_metric(names, behind)
                    lags[topic] = lags.get(topic, 0) + behind
            for topic, total in offsets.items():
                offset_sum.add_metric([group.group_id, topic], total)
            for topic, total in lags.items():
                lag_sum.add_metric([group.group_id, topic], total)
        yield from (offset, offset_sum, lag, lag_sum, members)

    def _group_coordinator(self) -> Iterator[Metric]:
        """Kafka's GroupMetadataManager gauges, for the groups coordinated here."""
        groups = self.broker.groups
        by_state = groups.statistics()
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield _gauge(
            f"{prefix}numgroups", "Groups coordinated here.", len(groups.group_manager.groups)
        )
        for state in GroupState:
            yield _gauge(
                f"{prefix}numgroups{state.value.lower()}",
                f"Groups coordinated here in state {state.value}.",
                by_state[state.value],
            )
        yield _gauge(
            f"{prefix}numoffsets",
            "Committed offsets of the groups coordinated here.",
            sum(len(g.offsets) for g in groups.group_manager.groups.values()),
        )

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
        times.samples += _quantiles(times.name, {}, list(verifier.times_ms))
        times.samples.append(Sample(f"{times.name}_count", {}, verifier.verifications))
        yield times

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
        now_ms = broker.now_ms()
        listeners = sorted(broker.stats.listeners.items())
        prefix = "kafka_server_socket_server_metrics_"
        labels = ["listener", "networkProcessor"]
        count = GaugeMetricFamily(f"{prefix}connection_count", "Open connections.", None, labels)
        created = _counter(f"{prefix}connection_creation", "Connections accepted.", labels)
        closed = _counter(f"{prefix}connection_close", "Connections closed.", labels)
        creation_rate = GaugeMetricFamily(
            f"{prefix}connection_creation_rate",
            "Connections accepted per second (Kafka's sampled windows).",
            None,
            labels,
        )
        close_rate = GaugeMetricFamily(
            f"{prefix}connection_close_rate",
            "Connections closed per second (Kafka's sampled windows).",
            None,
            labels,
        )
        for name, s in listeners:
            names = [name, "0"]
            count.add_metric(names, s.count)
            created.add_metric(names, s.created)
            closed.add_metric(names, s.closed)
            creation_rate.add_metric(names, s.creation_rate.measure(now_ms))
            close_rate.add_metric(names, s.close_rate.measure(now_ms))
        yield from (count, created, closed, creation_rate, close_rate)
        yield from self._connection_quotas(now_ms)

    def _connection_quotas(self, now_ms: int) -> Iterator[Metric]:
        """Kafka's ConnectionQuotas metrics (socket-server-metrics, per listener)."""
        limits = self.broker.connection_limits
        prefix = "kafka_server_socket_server_metrics_"
        yield _gauge(
            f"{prefix}broker_connection_accept_rate",
            "Connections a second the broker-wide creation rate quota measures.",
            limits.broker_rate.measure(now_ms),
        )
        accept_rate = GaugeMetricFamily(
            f"{prefix}connection_accept_rate",
            "Connections a second the listener's creation rate quota measures.",
            None,
            ["listener"],
        )
        throttle = GaugeMetricFamily(
            f"{prefix}connection_accept_throttle_time",
            "Mean of the accept delays (ms) given for the broker's or listener's rate.",
            None,
            ["listener"],
        )
        ip_throttle = GaugeMetricFamily(
            f"{prefix}ip_connection_accept_throttle_time",
            "Mean of the throttle times (ms) of connections closed for their IP's rate.",
            None,
            ["listener"],
        )
        for name, rate in sorted(limits.listener_rates.items()):
            accept_rate.add_metric([name], rate.measure(now_ms))
            throttle.add_metric([name], limits.throttles[name].average(now_ms))
            ip_throttle.add_metric([name], limits.ip_throttles[name].average(now_ms))
        # An address's own rate, measured while it has a quota (Kafka's tag `ip`, not listener).
        for ip, (rate, _) in sorted(limits.ip_rates.items()):
            accept_rate.add_sample(accept_rate.name, {"ip": ip}, rate.measure(now_ms))
        yield from (accept_rate, throttle, ip_throttle)


def _has_late_transaction(log: PartitionLog, now_ms: int, late_after_ms: int) -> bool:
    """Kafka's ProducerStateManager.hasLateTransaction: the oldest open transaction's producer
    last wrote more than `late_after_ms` ago."""
    producers = log.producer_state
    oldest = next(iter(producers.ongoing.values()), None)
    if oldest is None:
        return False
    entry = producers.producers.get(oldest)
    return (
        entry is not None
        and entry.last_timestamp > 0
        and now_ms - entry.last_timestamp > late_after_ms
    )


_QUOTA_DOCS = {
    "byte_rate": "Bytes a second the client produced or fetched (its quota's measure).",
    "request_time": "Percent of a second the client's requests took to handle.",
    "mutation_rate": "Partitions a second the client created or deleted.",
}


def _quantiles(name: str, labels: dict[str, str], values: list[float]) -> list[Sample]:
    """A histogram's percentiles (`QUANTILES`) of `values`, as the JMX exporter labels them."""
    recent = sorted(values)
    last = len(recent) - 1
    return [
        Sample(name, {**labels, "quantile": label}, recent[min(last, int(q * len(recent)))])
        for label, q in QUANTILES
        if recent
    ]


def _counter(name: str, doc: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels or [])


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
