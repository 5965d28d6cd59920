"""Who leads each partition and who is in its ISR, as the controller changes them.

Applies `decisions.py`'s elections and writes the results (`ControllerZk.write_states`): the
first state of a new partition (the first live replica leads, the live replicas are the ISR),
a new leader for partitions whose leader went offline (clean, or unclean where
`unclean.leader.election.enable` allows it, the topic's override first: the leader is then
RECOVERING), brokers taken out of ISRs, ElectLeaders (preferred or unclean), the preferred
elections asked for through `/admin/preferred_replica_election`, and the auto leader rebalance
(`leader.imbalance.per.broker.percentage`). Most return the partitions they changed and leave
telling the brokers to the caller; ElectLeaders, the rebalance and electing the offline
partitions again after unclean election was enabled announce their own changes.

Kafka splits this between the PartitionStateMachine (its leader election strategies) and the
ReplicaStateMachine (removing a replica from the ISR), over explicit partition and replica
states; here the states follow from the context's facts, so there is one object per election.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode
from wirebroker.controller import decisions
from wirebroker.controller.context import TP, ControllerContext
from wirebroker.controller.request_batch import RequestBatch
from wirebroker.controller.zk_state import ControllerZk
from wirebroker.zk import znodes
from wirebroker.zk.znodes import PartitionState

if TYPE_CHECKING:
    from wirebroker.config import BrokerConfig

log = logging.getLogger(__name__)


class LeaderElections:
    """Elects leaders and shrinks ISRs for one election's controller."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk_state: ControllerZk,
        requests: RequestBatch,
        config: BrokerConfig,
        topic_config: Callable[[str], dict[str, str]],
    ) -> None:
        self.ctx = ctx
        self.zk_state = zk_state
        self.zk = zk_state.zk
        self.requests = requests
        self.config = config  # the unclean election and leader imbalance settings
        self.topic_config = topic_config  # a topic's config overrides

    async def initialize(self, tps: Iterable[TP]) -> set[TP]:
        """First states for new partitions; the ones written are returned."""
        updates: dict[TP, PartitionState] = {}
        for tp in tps:
            election = decisions.initial_election(
                self.ctx.assignment(tp).replicas, self.ctx.live_ids()
            )
            if election is None:
                log.warning("%s-%d: no live replica; it stays offline", *tp)
                continue
            updates[tp] = PartitionState(election.leader, 0, election.isr, self.ctx.epoch)
        return await self.zk_state.write_states(updates)

    def _unclean_allowed(self, topic: str) -> bool:
        """The topic's `unclean.leader.election.enable` override, else the broker's setting."""
        value = self.topic_config(topic).get("unclean.leader.election.enable")
        if value is None:
            value = self.config.get("unclean.leader.election.enable") or "false"
        return value.strip().lower() == "true"

    async def elect_offline_partitions(self) -> None:
        """Elect every partition without a live leader again, and announce the changes."""
        ctx = self.ctx
        offline = [
            tp
            for tp, info in ctx.states.items()
            if info.state.leader not in ctx.live_ids()
            and tp[0] in ctx.topics
            and tp[0] not in ctx.deleting
        ]
        self.requests.announce(await self.elect_offline(offline))

    async def elect_offline(self, tps: Iterable[TP]) -> set[TP]:
        """Elect leaders for partitions whose leader is gone; the ones that changed are returned."""
        ctx = self.ctx
        updates: dict[TP, PartitionState] = {}
        for tp in tps:
            info = ctx.states.get(tp)
            if info is None or tp[0] in ctx.deleting:
                continue
            election = decisions.offline_election(
                ctx.assignment(tp).target,
                info.state.isr,
                ctx.online_ids(tp),
                unclean_allowed=self._unclean_allowed(tp[0]),
            )
            if election is None:
                if info.state.leader != znodes.NO_LEADER:
                    leader, isr = decisions.shrink_isr(
                        info.state.leader, info.state.isr, info.state.leader
                    )
                    updates[tp] = ctx.next_state(tp, leader, isr)
                log.warning("%s-%d: no eligible leader; the partition is offline", *tp)
                continue
            if election.unclean:
                log.warning("%s-%d: unclean election of broker %d", tp[0], tp[1], election.leader)
            updates[tp] = ctx.next_state(
                tp, election.leader, election.isr, recovering=election.unclean
            )
        return await self.zk_state.write_states(updates)

    async def remove_from_isrs(
        self, gone: set[int], *, skip: Collection[TP], within: Collection[TP] | None = None
    ) -> set[TP]:
        """Take the brokers `gone` out of every ISR (or those of `within`; but those of `skip`,
        just elected); the partitions whose state changed."""
        ctx = self.ctx
        updates: dict[TP, PartitionState] = {}
        for tp, info in ctx.states.items():
            if tp in skip or tp[0] not in ctx.topics or (within is not None and tp not in within):
                continue
            isr = info.state.isr
            leader = info.state.leader
            if not any(b in gone for b in isr):
                continue
            for b in gone:
                leader, isr = decisions.shrink_isr(leader, isr, b)
            if isr != info.state.isr:
                updates[tp] = ctx.next_state(tp, leader, isr)
        return await self.zk_state.write_states(updates)

    async def elect(self, tps: list[TP] | None, unclean: bool) -> dict[TP, ErrorCode]:
        """ElectLeaders for `tps` (every partition if None): the preferred replica, or with
        `unclean` any live replica where the leader is offline; the outcome per partition."""
        ctx = self.ctx
        wanted = ctx.partitions() if tps is None else tps
        results: dict[TP, ErrorCode] = {}
        updates: dict[TP, PartitionState] = {}
        for tp in wanted:
            info = ctx.states.get(tp)
            if info is None or tp[0] not in ctx.topics or tp[0] in ctx.deleting:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            replicas = ctx.assignment(tp).replicas
            if unclean:
                if info.state.leader in ctx.live_ids():
                    results[tp] = ErrorCode.ELECTION_NOT_NEEDED
                    continue
                election = decisions.offline_election(
                    replicas, info.state.isr, ctx.live_ids(), unclean_allowed=True
                )
                if election is None:
                    results[tp] = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                    continue
            else:
                if replicas and info.state.leader == replicas[0]:
                    results[tp] = ErrorCode.ELECTION_NOT_NEEDED
                    continue
                election = decisions.preferred_election(replicas, info.state.isr, ctx.live_ids())
                if election is None:
                    results[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                    continue
            updates[tp] = ctx.next_state(
                tp, election.leader, election.isr, recovering=election.unclean
            )
        written = await self.zk_state.write_states(updates)
        for tp in updates:
            results[tp] = ErrorCode.NONE if tp in written else ErrorCode.UNKNOWN_SERVER_ERROR
        self.requests.announce(written)
        return results

    async def rebalance(self) -> dict[TP, ErrorCode]:
        """Kafka's auto leader rebalance: a broker whose share of partitions led by another
        broker, among those it is the preferred replica of, is above
        `leader.imbalance.per.broker.percentage` gets them back (preferred election)."""
        ctx = self.ctx
        limit = self.config.get_int("leader.imbalance.per.broker.percentage") / 100
        moves: list[TP] = []
        for broker_id in sorted(ctx.live_ids()):
            preferred = [
                tp
                for tp in ctx.partitions()
                if tp in ctx.states
                and ctx.assignment(tp).replicas[:1] == (broker_id,)
                and not ctx.assignment(tp).reassigning
                and tp[0] not in ctx.deleting
            ]
            elsewhere = [tp for tp in preferred if ctx.states[tp].state.leader != broker_id]
            if preferred and len(elsewhere) / len(preferred) > limit:
                moves += [tp for tp in elsewhere if broker_id in ctx.states[tp].state.isr]
        if not moves:
            return {}
        log.info("leader rebalance: moving %d partitions to their preferred leader", len(moves))
        return await self.elect(moves, unclean=False)

    async def on_preferred_znode(self) -> None:
        """`/admin/preferred_replica_election` was written (or we were elected): elect its
        partitions' preferred replicas, then delete it."""
        got = await self.zk.get(znodes.PREFERRED_REPLICA_ELECTION, watch=True)
        if got is None:
            return
        tps = sorted(znodes.PreferredReplicaElection.decode(got[0]).partitions)
        log.info("preferred replica election requested for %s", tps)
        await self.elect(tps, unclean=False)
        await self.zk.delete(znodes.PREFERRED_REPLICA_ELECTION)
