"""The controller's requests to the brokers: LeaderAndIsr, UpdateMetadata and StopReplica.

Each request is built from the `ControllerContext` for one broker, carrying our controller id
and epoch and that broker's epoch, and handed to the send function (the `ControllerChannel`,
which delivers each broker's requests in order): LeaderAndIsr v7 with the partition states of
the broker's replicas and the endpoints of their leaders, UpdateMetadata v8 with the states of
the partitions asked for (leader -2 for a topic being deleted, the offline replicas) and every
live broker, StopReplica v4 (leader epoch -2 when the replica is deleted). `announce` is the
usual pair after a state change: LeaderAndIsr to the replicas, UpdateMetadata to every broker.

Kafka's ControllerBrokerRequestBatch collects requests and sends them when the batch ends;
here each call sends at once, which the in-order channel makes equivalent. The versions are
the ones Kafka 3.9's ZooKeeper-mode controller sends; Kafka picks older ones for an older
`inter.broker.protocol.version`, which wirebroker does not have.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable

from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from protocol.schema import Message
from wirebroker.controller.context import TP, ControllerContext
from wirebroker.zk import znodes

state_log = logging.getLogger("wirebroker.state.change")

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
EPOCH_DURING_DELETE = -2

#: Sends a request body at a version to a broker (`ControllerChannel.send` with the callback).
Send = Callable[[int, Message, int], None]


class RequestBatch:
    """Builds and sends one election's requests to the brokers (Kafka's
    ControllerBrokerRequestBatch)."""

    def __init__(
        self, ctx: ControllerContext, controller_id: int, listener: str | None, send: Send
    ) -> None:
        self.ctx = ctx
        self.controller_id = controller_id
        self.listener = (
            listener  # the inter-broker listener: the leaders' endpoints in LeaderAndIsr
        )
        self._send = send

    def leader_and_isr(
        self, brokers: Iterable[int], tps: Iterable[TP], *, is_new: Collection[TP] = ()
    ) -> None:
        ctx = self.ctx
        tps = [
            tp
            for tp in tps
            if tp in ctx.states and tp[0] in ctx.topics and tp[0] not in ctx.deleting
        ]
        for broker_id in brokers:
            live = ctx.live.get(broker_id)
            if live is None:
                continue
            by_topic: dict[str, list[LeaderAndIsrRequest.LeaderAndIsrPartitionState]] = {}
            leaders: set[int] = set()
            for tp in tps:
                assignment = ctx.assignment(tp)
                if broker_id not in assignment.replicas:
                    continue
                info = ctx.states[tp]
                leaders.add(info.state.leader)
                by_topic.setdefault(tp[0], []).append(
                    LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                        partition_index=tp[1],
                        controller_epoch=info.state.controller_epoch,
                        leader=info.state.leader,
                        leader_epoch=info.state.leader_epoch,
                        isr=list(info.state.isr),
                        partition_epoch=info.version,
                        replicas=list(assignment.replicas),
                        adding_replicas=list(assignment.adding),
                        removing_replicas=list(assignment.removing),
                        is_new=tp in is_new,
                        leader_recovery_state=info.state.leader_recovery_state,
                    )
                )
            if not by_topic:
                continue
            live_leaders = []
            for leader in sorted(leaders):
                if leader in ctx.live:
                    try:
                        ep = ctx.live[leader].registration.endpoint(self.listener)
                    except KeyError:
                        continue
                    live_leaders.append(
                        LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                            broker_id=leader, host_name=ep.host, port=ep.port
                        )
                    )
            body = LeaderAndIsrRequest(
                controller_id=self.controller_id,
                is_k_raft_controller=False,
                controller_epoch=ctx.epoch,
                broker_epoch=live.epoch,
                type=0,
                topic_states=[
                    LeaderAndIsrRequest.LeaderAndIsrTopicState(
                        topic_name=topic, topic_id=ctx.topic_id(topic), partition_states=states
                    )
                    for topic, states in sorted(by_topic.items())
                ],
                live_leaders=live_leaders,
            )
            names = [f"{t}-{ps.partition_index}" for t, pss in by_topic.items() for ps in pss]
            state_log.info(
                "LeaderAndIsr to broker %d: %s%s",
                broker_id,
                ", ".join(names[:8]),
                f" and {len(names) - 8} more" if len(names) > 8 else "",
            )
            self._send(broker_id, body, LEADER_AND_ISR_VERSION)

    def update_metadata(self, brokers: Iterable[int], tps: Iterable[TP]) -> None:
        """UpdateMetadata for `tps` (leader -2 for topics being deleted) and every live broker."""
        ctx = self.ctx
        deleting = ctx.deleting
        by_topic: dict[str, list[UpdateMetadataRequest.UpdateMetadataPartitionState]] = {}
        for tp in tps:
            info = ctx.states.get(tp)
            if info is None or tp[0] not in ctx.topics:
                continue
            replicas = list(ctx.assignment(tp).replicas)
            delete = tp[0] in deleting
            by_topic.setdefault(tp[0], []).append(
                UpdateMetadataRequest.UpdateMetadataPartitionState(
                    partition_index=tp[1],
                    controller_epoch=info.state.controller_epoch,
                    leader=znodes.LEADER_DURING_DELETE if delete else info.state.leader,
                    leader_epoch=info.state.leader_epoch,
                    isr=list(info.state.isr),
                    zk_version=info.version,
                    replicas=replicas,
                    offline_replicas=[
                        b
                        for b in replicas
                        if b not in ctx.live or tp in ctx.offline_replicas.get(b, ())
                    ],
                )
            )
        live_brokers = [
            UpdateMetadataRequest.UpdateMetadataBroker(
                id=b,
                endpoints=[
                    UpdateMetadataRequest.UpdateMetadataEndpoint(
                        port=e.port,
                        host=e.host,
                        listener=e.listener,
                        security_protocol=SECURITY_PROTOCOLS.get(e.security_protocol, 0),
                    )
                    for e in live.registration.endpoints
                ],
                rack=live.registration.rack,
            )
            for b, live in sorted(ctx.live.items())
        ]
        topic_states = [
            UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=topic, topic_id=ctx.topic_id(topic), partition_states=states
            )
            for topic, states in sorted(by_topic.items())
        ]
        for broker_id in brokers:
            live = ctx.live.get(broker_id)
            if live is None:
                continue
            body = UpdateMetadataRequest(
                controller_id=self.controller_id,
                is_k_raft_controller=False,
                type=0,
                controller_epoch=ctx.epoch,
                broker_epoch=live.epoch,
                topic_states=topic_states,
                live_brokers=live_brokers,
            )
            self._send(broker_id, body, UPDATE_METADATA_VERSION)

    def stop_replica(self, broker_id: int, tps: Iterable[TP], *, delete: bool) -> None:
        live = self.ctx.live.get(broker_id)
        if live is None:
            return
        by_topic: dict[str, list[StopReplicaRequest.StopReplicaPartitionState]] = {}
        for tp in tps:
            info = self.ctx.states.get(tp)
            epoch = EPOCH_DURING_DELETE if delete else (info.state.leader_epoch if info else -1)
            by_topic.setdefault(tp[0], []).append(
                StopReplicaRequest.StopReplicaPartitionState(
                    partition_index=tp[1], leader_epoch=epoch, delete_partition=delete
                )
            )
        if not by_topic:
            return
        body = StopReplicaRequest(
            controller_id=self.controller_id,
            is_k_raft_controller=False,
            controller_epoch=self.ctx.epoch,
            broker_epoch=live.epoch,
            topic_states=[
                StopReplicaRequest.StopReplicaTopicState(topic_name=t, partition_states=s)
                for t, s in sorted(by_topic.items())
            ],
        )
        self._send(broker_id, body, STOP_REPLICA_VERSION)

    def announce(self, tps: Collection[TP], *, is_new: Collection[TP] = ()) -> None:
        """LeaderAndIsr to the live replicas of `tps`, then UpdateMetadata to every live broker.

        A broker in controlled shutdown gets no LeaderAndIsr (Kafka's isReplicaOnline without
        shutting-down brokers): made a follower again, it would restart the fetchers its
        StopReplica stopped and be proposed for the ISRs it just left, holding back the high
        watermark of every partition it follows until its session ends."""
        if not tps:
            return
        replicas = {b for tp in tps for b in self.ctx.assignment(tp).replicas}
        replicas -= self.ctx.shutting_down
        self.leader_and_isr(sorted(replicas), tps, is_new=is_new)
        self.update_metadata(self.ctx.live, tps)
