"""The broker's view of the cluster: live brokers, every partition's state, topic ids, controller.

In a cluster this module owns what the controller last told us through UpdateMetadata (Kafka's
ZkMetadataCache): the live brokers with their endpoints per listener and racks, every partition's
leader, leader epoch, ISR, replicas and offline replicas, the topic ids, and the controller id.
Metadata, FindCoordinator and DescribeCluster answer from it; the replica side finds other
brokers' addresses in it. The embedded single broker fills it from its own state instead, so
clients are answered by one code path in both modes: the broker adds a partition when it serves
it and removes it when it forgets it (:meth:`MetadataCache.put_partition`,
:meth:`MetadataCache.remove_partition`), and tells itself as the one broker and controller with
its advertised listeners before each answer (:meth:`MetadataCache.set_local_broker`). It is
never rebuilt per request: a Metadata request costs what its answer holds, not the cluster's
size (docs/perf-notes.md, "Metadata at thousands of partitions"). Readers may keep what they
derive from a topic in `derived` (the Metadata handler keeps each topic's answer and its
encodings there): the cache drops a topic's entry when the topic changes, and all of them
when the brokers do. It must not do I/O, and it knows nothing about logs.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field

import trio

from protocol.messages.update_metadata import UpdateMetadataRequest
from protocol.primitives import ZERO_UUID

NO_LEADER = -1
#: UpdateMetadata marks the partitions of a topic being deleted with this leader (Kafka's
#: LeaderAndIsr.LeaderDuringDelete); the cache drops them.
LEADER_DURING_DELETE = -2


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None

    def endpoint(self, listener: str | None) -> Endpoint | None:
        """The endpoint on `listener` (None: the first one)."""
        for e in self.endpoints:
            if listener is None or e.listener == listener:
                return e
        return None


@dataclass(slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    zk_version: int = 0
    controller_epoch: int = 0


class MetadataCache:
    """What the broker knows about the cluster; replaced piecewise by UpdateMetadata."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.partitions: dict[str, dict[int, PartitionInfo]] = {}
        #: Topic ids by name, and names by id: changed only through `_set_topic_id` and
        #: `_forget_topic`, which keep the two in step.
        self.topic_ids: dict[str, uuid.UUID] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self.controller_id: int | None = None
        #: What readers derived from each topic's partitions and the brokers, by topic and the
        #: reader's key: a topic's entry goes when it changes, every entry when the brokers do.
        self.derived: dict[str, dict[Hashable, object]] = {}
        #: Set once the cache describes the cluster: by the controller's first UpdateMetadata
        #: (before it, a broker that just started knows no brokers and no topics).
        self.populated = trio.Event()

    # reading ------------------------------------------------------------------------------
    def topics(self) -> list[str]:
        return sorted(self.partitions)

    def has_topic(self, name: str) -> bool:
        return name in self.partitions

    def partitions_of(self, topic: str) -> list[PartitionInfo]:
        parts = self.partitions.get(topic, {})
        return [parts[index] for index in sorted(parts)]

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        return self.partitions.get(topic, {}).get(index)

    def topic_id(self, topic: str) -> uuid.UUID:
        return self.topic_ids.get(topic, ZERO_UUID)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._topic_names.get(topic_id)

    def alive_broker(self, broker_id: int) -> BrokerInfo | None:
        return self.brokers.get(broker_id)

    def is_alive(self, broker_id: int) -> bool:
        return broker_id in self.brokers

    def alive_brokers(self) -> Iterator[BrokerInfo]:
        for _, b in sorted(self.brokers.items()):
            yield b

    def endpoint(self, broker_id: int, listener: str | None) -> Endpoint | None:
        broker = self.brokers.get(broker_id)
        return None if broker is None else broker.endpoint(listener)

    # changing -----------------------------------------------------------------------------
    def update(self, request: UpdateMetadataRequest, version: int) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata request (any version); returns the deleted partitions.

        As Kafka's ZkMetadataCache: the live brokers and the controller are replaced, partition
        states are upserted (a leader of -2 deletes the partition), topic ids are merged (a
        topic sent with the zero id, as every one in v5 and v6, loses the id it had).
        """
        brokers: dict[int, BrokerInfo] = {}
        for b in request.live_brokers:
            if version == 0:
                endpoints: tuple[Endpoint, ...] = (Endpoint("PLAINTEXT", b.v0_host, b.v0_port),)
            else:
                endpoints = tuple(
                    Endpoint(
                        e.listener or _protocol_name(e.security_protocol),
                        e.host,
                        e.port,
                        e.security_protocol,
                    )
                    for e in b.endpoints
                )
            brokers[b.id] = BrokerInfo(b.id, endpoints, b.rack if version >= 2 else None)
        self._set_brokers(brokers)
        self.controller_id = request.controller_id if request.controller_id >= 0 else None
        states: Iterable[UpdateMetadataRequest.UpdateMetadataPartitionState]
        if version >= 5:
            states = [
                _with_topic(s, t.topic_name)
                for t in request.topic_states
                for s in t.partition_states
            ]
            for t in request.topic_states:  # v5 and v6 have no ids: every one zero
                topic_id = t.topic_id if version >= 7 else ZERO_UUID
                if topic_id != ZERO_UUID:
                    self._set_topic_id(t.topic_name, topic_id)
                elif t.topic_name in self.topic_ids:
                    self.derived.pop(t.topic_name, None)
                    self._forget_topic(t.topic_name)
        else:
            states = request.ungrouped_partition_states
        deleted: dict[tuple[str, int], None] = {}  # in order, without those given again
        for s in states:
            if s.leader == LEADER_DURING_DELETE:
                if self.remove_partition(s.topic_name, s.partition_index):
                    deleted[s.topic_name, s.partition_index] = None
                continue
            deleted.pop((s.topic_name, s.partition_index), None)
            self.derived.pop(s.topic_name, None)
            self.partitions.setdefault(s.topic_name, {})[s.partition_index] = PartitionInfo(
                s.topic_name,
                s.partition_index,
                s.leader,
                s.leader_epoch,
                list(s.isr),
                list(s.replicas),
                list(s.offline_replicas) if version >= 4 else [],
                s.zk_version,
                s.controller_epoch,
            )
        self.populated.set()
        return list(deleted)

    def put_partition(self, topic_id: uuid.UUID, partition: PartitionInfo) -> None:
        """Add or replace a partition of the topic with `topic_id` (the embedded broker: one
        it serves from now on)."""
        self.derived.pop(partition.topic, None)
        self.partitions.setdefault(partition.topic, {})[partition.partition] = partition
        self._set_topic_id(partition.topic, topic_id)

    def remove_partition(self, topic: str, index: int) -> bool:
        """Forget a partition, and its topic with its last one; whether it was known."""
        parts = self.partitions.get(topic)
        if parts is None:
            return False
        self.derived.pop(topic, None)
        known = parts.pop(index, None) is not None
        if not parts:
            del self.partitions[topic]
            self._forget_topic(topic)
        return known

    def _set_topic_id(self, topic: str, topic_id: uuid.UUID) -> None:
        """`topic` has `topic_id` (a re-created topic a new one; its old id names nothing).
        An id a controller gives two topics names the last given it (Kafka's ZkMetadataCache
        names one of them)."""
        old = self.topic_ids.get(topic)
        if old == topic_id:
            return
        self.derived.pop(topic, None)
        if old is not None:
            self._unname(old, topic)
        self.topic_ids[topic] = topic_id
        self._topic_names[topic_id] = topic

    def _forget_topic(self, topic: str) -> None:
        topic_id = self.topic_ids.pop(topic, None)
        if topic_id is not None:
            self._unname(topic_id, topic)

    def _unname(self, topic_id: uuid.UUID, topic: str) -> None:
        """`topic_id` no longer names `topic` (it may name another by now)."""
        if self._topic_names.get(topic_id) == topic:
            del self._topic_names[topic_id]

    def set_local_broker(self, broker: BrokerInfo) -> None:
        """The embedded broker: itself the only broker and the controller."""
        self._set_brokers({broker.id: broker})
        self.controller_id = broker.id
        self.populated.set()

    def _set_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        if brokers != self.brokers:
            self.derived.clear()  # leaders' liveness and endpoints are told with every topic
        self.brokers = brokers


def _with_topic(
    state: UpdateMetadataRequest.UpdateMetadataPartitionState, topic: str
) -> UpdateMetadataRequest.UpdateMetadataPartitionState:
    state.topic_name = topic
    return state


def _protocol_name(code: int) -> str:
    return {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}.get(code, "PLAINTEXT")
