"""The active controller's reads and writes of ZooKeeper, kept in its `ControllerContext`.

Reads fill the context: the live brokers (`/brokers/ids`, a broker's epoch is its znode's
czxid), a topic's assignment (`/brokers/topics/<t>`, given a topic id if an old tool wrote it
without one, as Kafka's controller does) and its partitions' states. Every write is a multi that
first checks `/controller_epoch` still has the version this controller wrote when it won
(`fenced`): when another broker has won since, the write fails with `ControllerMoved` and the
controller resigns. Partition states are written with the znode version read (their version is
the partition epoch); a state that changed under us is read again instead of overwritten.

Kafka keeps these in KafkaZkClient's controller calls and ControllerContext's initialisation;
here they are one object per election, bound to that election's context.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from wirebroker.controller.context import TP, ControllerContext, LiveBroker, PartitionInfo
from wirebroker.controller.decisions import ReplicaAssignment
from wirebroker.zk import znodes
from wirebroker.zk.client import BadVersionError, NodeExistsError, NoNodeError, ZkClient
from wirebroker.zk.znodes import BrokerRegistration, PartitionState, TopicAssignment

log = logging.getLogger(__name__)
state_log = logging.getLogger("wirebroker.state.change")


class ControllerMoved(Exception):
    """Our controller epoch is no longer the current one: another broker took over."""


class ControllerZk:
    """ZooKeeper as one election's controller sees it: reads into `ctx`, fenced writes."""

    def __init__(self, zk: ZkClient, ctx: ControllerContext) -> None:
        self.zk = zk
        self.ctx = ctx

    # reading ------------------------------------------------------------------------------
    async def live_brokers(self) -> dict[int, LiveBroker]:
        """The registered brokers (watching `/brokers/ids` for the next change, and each
        registration for a change of its endpoints: Kafka's BrokerModificationsHandler)."""
        live: dict[int, LiveBroker] = {}
        for name in await self.zk.get_children(znodes.BROKER_IDS, watch=True) or []:
            broker_id = int(name)
            got = await self.zk.get(znodes.broker_path(broker_id), watch=True)
            if got is not None:
                live[broker_id] = LiveBroker(
                    BrokerRegistration.decode(broker_id, got[0]), got[1].czxid
                )
        return live

    async def broker(self, broker_id: int) -> LiveBroker | None:
        """A broker's registration (watching it for the next change); None when gone."""
        got = await self.zk.get(znodes.broker_path(broker_id), watch=True)
        if got is None:
            return None
        return LiveBroker(BrokerRegistration.decode(broker_id, got[0]), got[1].czxid)

    async def load_topic(self, topic: str) -> bool:
        """Read a topic's assignment and its partitions' states (watching the assignment);
        False if the topic is gone."""
        got = await self.zk.get(znodes.topic_path(topic), watch=True)
        if got is None:
            return False
        assignment = TopicAssignment.decode(got[0])
        version = got[1].version
        if assignment.topic_id is None:
            # Written by an old tool: give it an id, as Kafka's controller does.
            assignment.topic_id = uuid.uuid4()
            results = await self.fenced(
                [("set", znodes.topic_path(topic), assignment.encode(), version)]
            )
            version = results[1].version
        self.ctx.topics[topic] = assignment
        self.ctx.topic_versions[topic] = version
        for p in self.ctx.topics[topic].partitions:
            await self.load_state((topic, p))
        return True

    async def load_state(self, tp: TP) -> None:
        got = await self.zk.get(znodes.partition_state_path(*tp))
        if got is not None:
            self.ctx.states[tp] = PartitionInfo(PartitionState.decode(got[0]), got[1].version)

    # writing (fenced by the controller epoch's version) -----------------------------------
    async def fenced(self, ops: list[tuple[Any, ...]]) -> list[Any]:
        """Run `ops` in a multi that checks our controller epoch first; ControllerMoved if
        another controller has won since (the results start with the check's)."""
        try:
            return await self.zk.multi(
                [("check", znodes.CONTROLLER_EPOCH, self.ctx.epoch_zk_version), *ops]
            )
        except BadVersionError:
            stat = await self.zk.exists(znodes.CONTROLLER_EPOCH)
            if stat is None or stat.version != self.ctx.epoch_zk_version:
                raise ControllerMoved() from None
            raise

    async def write_states(self, updates: dict[TP, PartitionState]) -> set[TP]:
        """Write new states with the versions we read; the ones written are returned."""
        done: set[TP] = set()
        for tp, state in updates.items():
            info = self.ctx.states.get(tp)
            try:
                if info is None:
                    await self.zk.ensure_path(znodes.partition_path(*tp))
                    await self.fenced(
                        [("create", znodes.partition_state_path(*tp), state.encode())]
                    )
                    version = 0
                else:
                    results = await self.fenced(
                        [("set", znodes.partition_state_path(*tp), state.encode(), info.version)]
                    )
                    version = results[1].version
            except (BadVersionError, NodeExistsError, NoNodeError) as e:
                log.warning(
                    "state of %s-%d changed under us (%s); re-reading it", *tp, type(e).__name__
                )
                await self.load_state(tp)
                continue
            self.ctx.states[tp] = PartitionInfo(state, version)
            state_log.info(
                "%s-%d: leader %d, leader epoch %d, isr %s, partition epoch %d",
                tp[0],
                tp[1],
                state.leader,
                state.leader_epoch,
                list(state.isr),
                version,
            )
            done.add(tp)
        return done

    async def write_assignment(self, tp: TP, new: ReplicaAssignment) -> None:
        """Write a partition's replicas (and adding/removing ones) into its topic's znode."""
        ctx = self.ctx
        t = ctx.topics[tp[0]]
        t.partitions[tp[1]] = list(new.replicas)
        t.adding[tp[1]] = list(new.adding)
        t.removing[tp[1]] = list(new.removing)
        for d in (t.adding, t.removing):
            if not d[tp[1]]:
                del d[tp[1]]
        results = await self.fenced(
            [("set", znodes.topic_path(tp[0]), t.encode(), ctx.topic_versions[tp[0]])]
        )
        ctx.topic_versions[tp[0]] = results[1].version
