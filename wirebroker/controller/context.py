"""What the active controller knows about the cluster (Kafka's ControllerContext).

A plain in-memory view, rebuilt from ZooKeeper on every election (`zk_state.ControllerZk` reads
and writes it): the live brokers with their broker epochs, the topics' replica assignments and
their znode versions, each partition's leader/ISR state with its znode version (the partition
epoch), the topics being deleted, the legacy reassignments in progress, and the replicas in
offline log directories. Nothing here reads ZooKeeper or sends a request.

Unlike Kafka's, it holds no replica or partition state machine states (NewReplica,
OnlinePartition, ...): those follow from the facts held here when a decision needs them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from protocol.primitives import ZERO_UUID
from wirebroker.controller.decisions import ReplicaAssignment
from wirebroker.zk.znodes import BrokerRegistration, PartitionState, TopicAssignment

TP = tuple[str, int]


@dataclass
class LiveBroker:
    registration: BrokerRegistration
    epoch: int  # the czxid of its /brokers/ids/<id>


@dataclass
class PartitionInfo:
    state: PartitionState
    version: int  # the state znode's version: the partition epoch


@dataclass
class ControllerContext:
    """What the active controller knows about the cluster (rebuilt on every election)."""

    epoch: int = 0
    epoch_zk_version: int = 0
    live: dict[int, LiveBroker] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    topic_versions: dict[str, int] = field(default_factory=dict)
    states: dict[TP, PartitionInfo] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    legacy_reassignments: set[TP] = field(default_factory=set)
    #: Per live broker, its replicas in an offline log directory (Kafka's replicasOnOfflineDirs).
    offline_replicas: dict[int, set[TP]] = field(default_factory=dict)

    def live_ids(self) -> set[int]:
        """Brokers that may lead or join an ISR: live and not shutting down."""
        return set(self.live) - self.shutting_down

    def online_ids(self, tp: TP) -> set[int]:
        """The brokers whose replica of `tp` may lead or join its ISR: live, not shutting down,
        and not in an offline log directory."""
        return {b for b in self.live_ids() if tp not in self.offline_replicas.get(b, ())}

    def assignment(self, tp: TP) -> ReplicaAssignment:
        t = self.topics[tp[0]]
        return ReplicaAssignment(
            tuple(t.partitions.get(tp[1], [])),
            tuple(t.adding.get(tp[1], [])),
            tuple(t.removing.get(tp[1], [])),
        )

    def partitions(self) -> list[TP]:
        return [(t, p) for t, a in sorted(self.topics.items()) for p in sorted(a.partitions)]

    def partitions_on(self, broker_id: int) -> list[TP]:
        return [tp for tp in self.partitions() if broker_id in self.assignment(tp).replicas]

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id; the zero UUID for a topic we do not know (or know without one)."""
        t = self.topics.get(topic)
        return t.topic_id if t is not None and t.topic_id is not None else ZERO_UUID

    def next_state(
        self,
        tp: TP,
        leader: int,
        isr: Iterable[int],
        *,
        recovering: bool = False,
    ) -> PartitionState:
        """The next state of `tp`: leader epoch + 1, our controller epoch, and the leader
        recovery state kept, except after an unclean election (RECOVERING, as Kafka 3.2+)."""
        info = self.states.get(tp)
        epoch = info.state.leader_epoch + 1 if info else 0
        recovery = 1 if recovering else (info.state.leader_recovery_state if info else 0)
        return PartitionState(leader, epoch, tuple(isr), self.epoch, recovery)

    def forget_topic(self, topic: str) -> None:
        """The topic is gone from ZooKeeper: drop it, its deletion and its partitions' states."""
        self.topics.pop(topic, None)
        self.topic_versions.pop(topic, None)
        self.deleting.discard(topic)
        for tp in [tp for tp in self.states if tp[0] == topic]:
            del self.states[tp]
