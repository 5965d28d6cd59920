"""Partition reassignment by the controller (KIP-455, ZooKeeper mode).

AlterPartitionReassignments (through the controller's `call`) and the legacy
`/admin/reassign_partitions` znode start or cancel a reassignment; the decisions (replicas =
target + original, adding, removing, when it is done, who leads after) are `decisions.py`'s.
Phase A writes the full replica set with adding/removing into the topic's znode, bumps the
leader epoch and tells the replicas (the new ones as new); they catch up and join the ISR
through AlterPartition. Phase B, once the whole target is in the ISR (`maybe_complete`, tried
after AlterPartition, an election and a broker start): the target is written as the replicas,
a leader outside the target (or not live) is replaced, the removed replicas get StopReplica
with `delete_partition`, and every broker hears. A partition reassigned through the legacy
znode is taken out of it when done; the znode is deleted once empty.

Kafka keeps this in KafkaController (onPartitionReassignment and its helpers); here it is an
object of its own per election, with the same two phases.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from wirebroker.controller import decisions
from wirebroker.controller.context import TP, ControllerContext
from wirebroker.controller.decisions import ReplicaAssignment
from wirebroker.controller.request_batch import RequestBatch
from wirebroker.controller.zk_state import ControllerZk
from wirebroker.zk import znodes

log = logging.getLogger(__name__)


class PartitionReassignment:
    """Starts, cancels and completes one election's partition reassignments."""

    def __init__(
        self, ctx: ControllerContext, zk_state: ControllerZk, requests: RequestBatch
    ) -> None:
        self.ctx = ctx
        self.zk_state = zk_state
        self.zk = zk_state.zk
        self.requests = requests

    def ongoing(self, tps: list[TP] | None) -> dict[TP, ReplicaAssignment]:
        """The reassignments in progress among `tps` (every partition's if None)."""
        ctx = self.ctx
        wanted = ctx.partitions() if tps is None else tps
        return {
            tp: ctx.assignment(tp)
            for tp in wanted
            if tp[0] in ctx.topics
            and tp[1] in ctx.topics[tp[0]].partitions
            and ctx.assignment(tp).reassigning
        }

    async def reassign(
        self, targets: dict[TP, list[int] | None]
    ) -> dict[TP, tuple[ErrorCode, str | None]]:
        """Start (or with None cancel) partition reassignments; the per-partition outcome."""
        ctx = self.ctx
        results: dict[TP, tuple[ErrorCode, str | None]] = {}
        for tp, target in targets.items():
            if (
                tp[0] not in ctx.topics
                or tp[1] not in ctx.topics[tp[0]].partitions
                or tp[0] in ctx.deleting
            ):
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
                continue
            current = ctx.assignment(tp)
            if target is None:
                if not current.reassigning:
                    results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
                    continue
                new = decisions.cancel_reassignment(current)
            else:
                try:
                    decisions.validate_assignment({tp[1]: target}, ctx.live, first_partition=tp[1])
                except Exception as e:
                    results[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(e))
                    continue
                new = decisions.start_reassignment(current, target)
            await self.zk_state.write_assignment(tp, new)
            results[tp] = (ErrorCode.NONE, None)
            log.info("%s-%d: reassignment %s -> %s", tp[0], tp[1], current, new)
            if new.reassigning:
                # Phase A: the new replicas join; everyone hears of the full replica set.
                info = ctx.states.get(tp)
                if info is not None:
                    written = await self.zk_state.write_states(
                        {tp: ctx.next_state(tp, info.state.leader, info.state.isr)}
                    )
                    staying = [b for b in new.replicas if b not in new.adding]
                    self.requests.leader_and_isr(staying, written)
                    self.requests.leader_and_isr(new.adding, written, is_new=written)
                    self.requests.update_metadata(ctx.live, written)
                await self.maybe_complete(tp)
            else:
                await self._finish(tp, current, new.replicas)
        return results

    async def complete_ready(self) -> None:
        """Complete every reassignment whose target is all in the ISR (after an election or a
        broker start)."""
        for tp in self.ctx.partitions():
            if self.ctx.assignment(tp).reassigning:
                await self.maybe_complete(tp)

    async def maybe_complete(self, tp: TP) -> None:
        """Phase B for `tp` if its whole target is in the ISR now."""
        ctx = self.ctx
        info = ctx.states.get(tp)
        current = ctx.assignment(tp)
        if info is None or not decisions.reassignment_complete(current, info.state.isr):
            return
        await self._finish(tp, current, current.target)

    async def _finish(self, tp: TP, current: ReplicaAssignment, target: tuple[int, ...]) -> None:
        """Phase B: leadership onto the target, removed replicas stopped, the target written."""
        ctx = self.ctx
        info = ctx.states.get(tp)
        removed = [b for b in current.replicas if b not in target]
        await self.zk_state.write_assignment(tp, ReplicaAssignment(tuple(target)))
        if info is not None:
            isr = tuple(b for b in info.state.isr if b in target) or info.state.isr
            leader = info.state.leader
            if leader not in target or leader not in ctx.live_ids():
                election = decisions.reassignment_election(target, isr, ctx.live_ids())
                leader = election.leader if election else znodes.NO_LEADER
            await self.zk_state.write_states({tp: ctx.next_state(tp, leader, isr)})
        for b in removed:
            self.requests.stop_replica(b, [tp], delete=True)
        self.requests.announce([tp])
        log.info("%s-%d: reassignment to %s complete", tp[0], tp[1], list(target))
        if tp in ctx.legacy_reassignments:
            ctx.legacy_reassignments.discard(tp)
            await self._rewrite_legacy_znode()

    async def on_legacy_znode(self) -> None:
        """`/admin/reassign_partitions` changed (or we were elected): start what is new in it."""
        got = await self.zk.get(znodes.REASSIGN_PARTITIONS, watch=True)
        if got is None:
            return
        wanted = znodes.LegacyReassignment.decode(got[0]).partitions
        fresh = {tp: r for tp, r in wanted.items() if tp not in self.ctx.legacy_reassignments}
        if not fresh:
            return
        self.ctx.legacy_reassignments |= set(fresh)
        results = await self.reassign({tp: list(r) for tp, r in fresh.items()})
        for tp, (code, _) in results.items():
            if code != ErrorCode.NONE:
                self.ctx.legacy_reassignments.discard(tp)
        await self._rewrite_legacy_znode()

    async def _rewrite_legacy_znode(self) -> None:
        got = await self.zk.get(znodes.REASSIGN_PARTITIONS)
        if got is None:
            return
        wanted = znodes.LegacyReassignment.decode(got[0]).partitions
        left = {tp: r for tp, r in wanted.items() if tp in self.ctx.legacy_reassignments}
        if not left:
            await self.zk.delete(znodes.REASSIGN_PARTITIONS)
        elif left != wanted:
            await self.zk.set(znodes.REASSIGN_PARTITIONS, znodes.LegacyReassignment(left).encode())
