"""The cluster controller (ZooKeeper mode): election, the event loop, and the events it handles.

Every broker runs a `Controller`; the one that creates `/controller` is active. Winning bumps
`/controller_epoch` in the same multi, and every later write of the active controller is a multi
that checks `/controller_epoch` still has the version it wrote: a deposed controller's writes
fail (it then resigns), and brokers fence its requests by the controller epoch they carry.

One task owns the controller's state (`run`): it takes events from one queue, in order. ZooKeeper
watches (forwarded by the broker's `ClusterMember`) and requests from handlers (AlterPartition,
ControlledShutdown, ElectLeaders, reassignments, through `call`) are such events. Each election
won builds a fresh `ControllerContext` and the parts that work on it (`_bind`): its ZooKeeper
reads and fenced writes (`zk_state`), the requests to the brokers (`request_batch`, sent through
`ControllerChannel`), leader elections and ISR changes (`elections`), topic deletion
(`topic_deletion`) and partition reassignment (`reassignment`); the decisions themselves are
pure functions (`decisions`). This module handles what ties them: broker and topic changes,
failed log directories, AlterPartition and ControlledShutdown (Kafka's KafkaController).

A failed log directory (Kafka's onBrokerLogDirFailure): a broker writes a
`/log_dir_event_notification` znode; the controller sends that broker LeaderAndIsr for all its
replicas, and every LeaderAndIsr answer's KAFKA_STORAGE_ERROR partitions become offline replicas
(`ControllerContext.offline_replicas`, until the broker restarts). They are handled as replicas
of a failed broker: new leaders for the partitions they led, out of every ISR, and reported in
UpdateMetadata's `offline_replicas`; the broker gets StopReplica for them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from protocol.errors import ErrorCode
from protocol.messages.leader_and_isr import LeaderAndIsrResponse
from protocol.schema import Message
from wirebroker.controller import decisions
from wirebroker.controller.channel import ControllerChannel
from wirebroker.controller.context import TP, ControllerContext, PartitionInfo
from wirebroker.controller.elections import LeaderElections
from wirebroker.controller.errors import ControllerError, NotController
from wirebroker.controller.reassignment import PartitionReassignment
from wirebroker.controller.request_batch import RequestBatch
from wirebroker.controller.topic_deletion import TopicDeletionManager
from wirebroker.controller.zk_state import ControllerMoved, ControllerZk
from wirebroker.zk import znodes
from wirebroker.zk.client import (
    BadVersionError,
    NodeExistsError,
    ZkClient,
    ZkEvent,
    ZookeeperError,
)
from wirebroker.zk.znodes import PartitionState

if TYPE_CHECKING:
    from wirebroker.config import BrokerConfig
    from wirebroker.peer import PeerSecurity

log = logging.getLogger(__name__)
state_log = logging.getLogger("wirebroker.state.change")

T = TypeVar("T")


@dataclass
class _Call:
    fn: Callable[[], Awaitable[Any]]
    done: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: BaseException | None = None


class Controller:
    """This broker's controller: a candidate always, active while it holds `/controller`."""

    def __init__(
        self, zk: ZkClient, broker_id: int, config: BrokerConfig, security: PeerSecurity
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.config = config
        self.security = security  # of the channel's connections to the brokers
        self.active = False
        self.active_id = -1  # the controller we know of (ourselves included), -1 if none
        self._bind(ControllerContext())
        self.channel: ControllerChannel | None = None
        self.on_controller_change: Callable[[int], None] = lambda _id: None
        #: A topic's config overrides (the broker's `ClusterMember` keeps them current).
        self.topic_config: Callable[[str], dict[str, str]] = lambda _topic: {}
        self._queue, self._receive = trio.open_memory_channel[_Call | ZkEvent](math.inf)
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None

    def use_peer_security(self, security: PeerSecurity) -> None:
        """The channel's next connections to the brokers use `security` (the inter-broker
        listener's stores or login changed at run time); open ones keep theirs."""
        self.security = security
        if self.channel is not None:
            self.channel.security = security

    def _bind(self, ctx: ControllerContext) -> None:
        """Take `ctx` (a new election's) and the parts that work on it."""
        self.ctx = ctx
        self.zk_state = ControllerZk(self.zk, ctx)
        listener = self.config.inter_broker_listener()
        self.requests = RequestBatch(ctx, self.broker_id, listener, self._send)
        self.deletion = TopicDeletionManager(
            ctx,
            self.zk_state,
            self.requests,
            lambda: self.config.get_bool("delete.topic.enable"),
        )
        self.reassignment = PartitionReassignment(ctx, self.zk_state, self.requests)
        self.elections = LeaderElections(
            ctx, self.zk_state, self.requests, self.config, lambda t: self.topic_config(t)
        )

    @property
    def epoch(self) -> int:
        return self.ctx.epoch

    # the owner task ---------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._safe_elect()
            async for item in self._receive:
                if isinstance(item, ZkEvent):
                    await self._guarded(self._on_zk_event(item))
                else:
                    await self._run_call(item)

    async def _guarded(self, work: Awaitable[None]) -> None:
        try:
            await work
        except ControllerMoved:
            log.warning("controller %d: another broker took over; resigning", self.broker_id)
            await self._start_over()
        except ZookeeperError as e:
            # Typically the connection dropped mid-way: what we know may be stale. Resign and
            # run again from ZooKeeper's state, now or (if ZooKeeper is unreachable) on the
            # next CONNECTED.
            log.warning("controller %d: ZooKeeper failed (%r); resigning", self.broker_id, e)
            await self._start_over()

    async def _start_over(self) -> None:
        """Resign, and run for controller again from what ZooKeeper holds."""
        await self._resign()
        await self._safe_elect()

    async def _safe_elect(self) -> None:
        try:
            await self._elect()
        except ZookeeperError as e:
            log.warning("controller %d: election failed (%r)", self.broker_id, e)

    async def _run_call(self, call: _Call) -> None:
        try:
            if not self.active:
                raise NotController()
            call.result = await call.fn()
        except ControllerMoved:
            call.error = NotController()
            await self._start_over()
        except ZookeeperError as e:
            call.error = e
            await self._start_over()
        except Exception as e:
            call.error = e
        finally:
            call.done.set()

    def submit_zk_event(self, event: ZkEvent) -> None:
        """From the broker's ZooKeeper owner task: a watch or session change for the controller."""
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            self._queue.send_nowait(event)

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn` on the controller's task (after the events before it); NotController if
        this broker is not the active controller."""
        if not self.active:
            raise NotController()
        call = _Call(fn)
        self._queue.send_nowait(call)
        await call.done.wait()
        if call.error is not None:
            raise call.error
        return call.result

    async def _on_zk_event(self, ev: ZkEvent) -> None:
        if ev.kind == "session":
            if ev.state == "LOST":
                if self.active:
                    log.warning("controller %d: ZooKeeper session lost; resigning", self.broker_id)
                await self._resign()
            elif ev.state == "CONNECTED" and (ev.new_session or not self.active):
                await self._elect()
            return
        if ev.path == znodes.CONTROLLER:
            await self._elect()
            return
        if not self.active:
            return
        if ev.path == znodes.BROKER_IDS:
            await self._on_broker_change()
        elif ev.path.startswith(znodes.BROKER_IDS + "/"):
            await self._on_broker_modification(int(ev.path.rsplit("/", 1)[1]))
        elif ev.path == znodes.BROKER_TOPICS:
            await self._on_topic_change()
        elif ev.path.startswith(znodes.BROKER_TOPICS + "/"):
            await self._on_partition_modification(ev.path.rsplit("/", 1)[1])
        elif ev.path == znodes.DELETE_TOPICS:
            await self.deletion.on_delete_topics()
        elif ev.path == znodes.REASSIGN_PARTITIONS:
            await self.reassignment.on_legacy_znode()
        elif ev.path == znodes.PREFERRED_REPLICA_ELECTION:
            await self.elections.on_preferred_znode()
        elif ev.path == znodes.LOG_DIR_EVENT_NOTIFICATION:
            await self._on_log_dir_events()

    # election ---------------------------------------------------------------------------
    def _set_active_id(self, controller_id: int) -> None:
        if controller_id != self.active_id:
            self.active_id = controller_id
            self.on_controller_change(controller_id)

    async def _elect(self) -> None:
        if self.active:
            got = await self.zk.get(znodes.CONTROLLER, watch=True)
            if (
                got is not None
                and znodes.ControllerZNode.decode(got[0]).broker_id == self.broker_id
            ):
                return
            await self._resign()
        while True:
            got = await self.zk.get(znodes.CONTROLLER, watch=True)
            if got is not None:
                holder = znodes.ControllerZNode.decode(got[0]).broker_id
                if holder == self.broker_id and got[1].ephemeralOwner == self.zk.session_id:
                    # Ours, from before we resigned on a ZooKeeper error: give it up and run
                    # again, so the controller epoch is bumped and all state is re-read.
                    await self.zk.delete(znodes.CONTROLLER, version=got[1].version)
                    continue
                self._set_active_id(holder)
                return
            epoch_node = await self.zk.get(znodes.CONTROLLER_EPOCH)
            if epoch_node is None:
                with contextlib.suppress(NodeExistsError):
                    await self.zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(0))
                continue
            epoch = znodes.decode_controller_epoch(epoch_node[0])
            registration = znodes.ControllerZNode(self.broker_id, int(time.time() * 1000))
            try:
                results = await self.zk.multi(
                    [
                        ("create", znodes.CONTROLLER, registration.encode(), True),
                        (
                            "set",
                            znodes.CONTROLLER_EPOCH,
                            znodes.encode_controller_epoch(epoch + 1),
                            epoch_node[1].version,
                        ),
                    ]
                )
            except (NodeExistsError, BadVersionError):
                continue
            await self.zk.exists(znodes.CONTROLLER, watch=True)
            self._bind(ControllerContext(epoch=epoch + 1, epoch_zk_version=results[1].version))
            self.active = True
            log.info("broker %d is the controller (epoch %d)", self.broker_id, self.ctx.epoch)
            self._set_active_id(self.broker_id)
            try:
                await self._on_become_controller()
            except ControllerMoved:
                await self._resign()
                continue
            return

    async def _resign(self) -> None:
        if not self.active:
            return
        self.active = False
        log.info("controller %d resigns (epoch %d)", self.broker_id, self.ctx.epoch)
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None
        self.channel = None
        self._set_active_id(-1)

    async def _start_channel(self) -> None:
        assert self._nursery is not None
        channel = ControllerChannel(self.broker_id, self.security)
        scope = trio.CancelScope()

        async def run_channel(task_status: trio.TaskStatus[None]) -> None:
            with scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(channel.run)
                    if self.config.get_bool("auto.leader.rebalance.enable"):
                        nursery.start_soon(self._rebalance_timer)
                    task_status.started()

        await self._nursery.start(run_channel)
        self._scope = scope
        self.channel = channel

    async def _rebalance_timer(self) -> None:
        """Every `leader.imbalance.check.interval.seconds`, queue a leader rebalance check."""
        interval = self.config.get_int("leader.imbalance.check.interval.seconds")
        while True:
            await trio.sleep(interval)
            self._queue.send_nowait(_Call(lambda: self.elections.rebalance()))

    async def _on_become_controller(self) -> None:
        await self._start_channel()
        ctx = self.ctx
        for path in (znodes.BROKER_IDS, znodes.BROKER_TOPICS, znodes.DELETE_TOPICS):
            await self.zk.ensure_path(path)
        ctx.live.update(await self.zk_state.live_brokers())
        self._connect_channels()
        for topic in await self.zk.get_children(znodes.BROKER_TOPICS, watch=True) or []:
            await self.zk_state.load_topic(topic)
        # Partitions without a state yet, or whose leader is gone, get one now.
        created = await self.elections.initialize(
            [tp for tp in ctx.partitions() if tp not in ctx.states]
        )
        elected = await self.elections.elect_offline(
            [
                tp
                for tp, info in ctx.states.items()
                if info.state.leader not in ctx.live_ids() and tp not in created
            ]
        )
        # Replicas on brokers that are not live leave the ISRs, as Kafka's replica state
        # machine starts them OfflineReplica: a broker that died with the previous controller
        # would otherwise hold back the high watermark of every partition it followed.
        in_isrs = {b for info in ctx.states.values() for b in info.state.isr}
        await self.elections.remove_from_isrs(in_isrs - set(ctx.live), skip=elected | created)
        self.requests.update_metadata(ctx.live, ctx.partitions())
        for broker_id in ctx.live:
            self.requests.leader_and_isr([broker_id], ctx.partitions_on(broker_id), is_new=created)
        await self.deletion.on_delete_topics()
        await self.reassignment.on_legacy_znode()
        await self.elections.on_preferred_znode()
        await self._on_log_dir_events()
        await self.reassignment.complete_ready()

    def _connect_channels(self) -> None:
        assert self.channel is not None
        for broker_id, live in self.ctx.live.items():
            try:
                ep = live.registration.endpoint(self.config.inter_broker_listener())
            except KeyError as e:
                log.error("cannot reach broker %d: %s", broker_id, e)
                continue
            self.channel.add_broker(broker_id, ep.host, ep.port)
        for broker_id in self.channel.brokers():
            if broker_id not in self.ctx.live:
                self.channel.remove_broker(broker_id)

    # this election's ZooKeeper writes and next states, by short names ----------------------
    async def _fenced(self, ops: list[tuple[Any, ...]]) -> list[Any]:
        return await self.zk_state.fenced(ops)

    async def _write_states(self, updates: dict[TP, PartitionState]) -> set[TP]:
        return await self.zk_state.write_states(updates)

    def _new_state(
        self, tp: TP, leader: int, isr: Iterable[int], *, recovering: bool = False
    ) -> PartitionState:
        return self.ctx.next_state(tp, leader, isr, recovering=recovering)

    # sending ------------------------------------------------------------------------------
    def _on_response(self, broker_id: int, body: Message) -> None:
        if isinstance(body, LeaderAndIsrResponse):
            self._queue.send_nowait(
                _Call(lambda: self._on_leader_and_isr_response(broker_id, body))
            )
        code = getattr(body, "error_code", 0)
        if code:
            state_log.warning(
                "broker %d answered %s with %s",
                broker_id,
                type(body).__name__,
                ErrorCode(code).name,
            )

    def _send(self, broker_id: int, body: Message, version: int) -> None:
        if self.channel is not None:
            self.channel.send(broker_id, body, version, self._on_response)

    # elections ----------------------------------------------------------------------------
    def unclean_election_enabled(self) -> None:
        """`unclean.leader.election.enable` was turned on for every topic at run time (Kafka's
        enableDefaultUncleanLeaderElection): the offline partitions are elected again, a
        replica outside the ISR now allowed to lead."""
        if self.active:
            self._queue.send_nowait(_Call(lambda: self.elections.elect_offline_partitions()))

    async def elect_leaders(self, tps: list[TP] | None, unclean: bool) -> dict[TP, ErrorCode]:
        """ElectLeaders: preferred or unclean elections; the outcome per partition."""
        return await self.elections.elect(tps, unclean)

    # broker changes -----------------------------------------------------------------------
    async def _on_broker_change(self) -> None:
        ctx = self.ctx
        current = await self.zk_state.live_brokers()
        dead = {b for b in ctx.live if b not in current}
        bounced = {b for b in ctx.live if b in current and current[b].epoch != ctx.live[b].epoch}
        new = {b for b in current if b not in ctx.live} | bounced
        if not dead and not new:
            for b, live in current.items():  # a registration changed in place (endpoints)
                ctx.live[b] = live
            return
        log.info(
            "brokers: live %s, new %s, dead %s, bounced %s",
            sorted(current),
            sorted(new - bounced),
            sorted(dead),
            sorted(bounced),
        )
        if dead | bounced:
            for b in dead | bounced:
                ctx.live.pop(b, None)
                ctx.shutting_down.discard(b)
                ctx.offline_replicas.pop(b, None)  # a restart brings its log directories back
            self._connect_channels()
            await self._on_brokers_failure(dead | bounced)
        if new:
            for b in new:
                ctx.live[b] = current[b]
            self._connect_channels()
            await self._on_brokers_startup(new)

    async def _on_broker_modification(self, broker_id: int) -> None:
        """A live broker registered other endpoints (its listeners changed at run time): every
        broker learns them (Kafka's processBrokerModification and onBrokerUpdate)."""
        ctx = self.ctx
        now = await self.zk_state.broker(broker_id)
        before = ctx.live.get(broker_id)
        if now is None or before is None or now.epoch != before.epoch:
            return  # gone or bounced: the change of /brokers/ids handles it
        if now.registration.endpoints == before.registration.endpoints:
            return
        log.info(
            "broker %d: endpoints now %s",
            broker_id,
            ", ".join(e.connection_string() for e in now.registration.endpoints),
        )
        ctx.live[broker_id] = now
        self.requests.update_metadata(ctx.live, [])

    async def _on_brokers_failure(
        self, gone: set[int], *, within: Collection[TP] | None = None
    ) -> None:
        """The replicas of the brokers `gone` (only those of `within`, if given: a failed log
        directory) went offline: their partitions get new leaders and ISRs without them."""
        ctx = self.ctx
        led = [
            tp
            for tp, info in ctx.states.items()
            if info.state.leader in gone
            and tp[0] in ctx.topics
            and (within is None or tp in within)
        ]
        changed = await self.elections.elect_offline(led)
        changed |= await self.elections.remove_from_isrs(gone, skip=changed, within=within)
        replicas = {b for tp in changed for b in ctx.assignment(tp).replicas}
        self.requests.leader_and_isr(sorted(replicas), changed)
        self.requests.update_metadata(ctx.live, ctx.partitions())

    async def _on_brokers_startup(self, new: set[int]) -> None:
        ctx = self.ctx
        # Everyone learns the new broker list (and the new broker everything).
        self.requests.update_metadata(ctx.live, ctx.partitions())
        for b in sorted(new):
            self.requests.leader_and_isr([b], ctx.partitions_on(b))
        offline = [
            tp
            for tp, info in ctx.states.items()
            if tp[0] in ctx.topics
            and info.state.leader not in ctx.live_ids()
            and any(b in ctx.assignment(tp).replicas for b in new)
        ]
        never = [
            tp
            for tp in ctx.partitions()
            if tp not in ctx.states and any(b in ctx.assignment(tp).replicas for b in new)
        ]
        created = await self.elections.initialize(never)
        changed = await self.elections.elect_offline(offline)
        self.requests.announce(changed | created, is_new=created)
        await self.reassignment.complete_ready()
        await self.deletion.resume()

    # failed log directories ---------------------------------------------------------------
    async def _on_log_dir_events(self) -> None:
        """Brokers reported a failed log directory: each gets LeaderAndIsr for all its replicas,
        whose answers say which are offline; the notifications are then deleted."""
        ctx = self.ctx
        names = await self.zk.get_children(znodes.LOG_DIR_EVENT_NOTIFICATION, watch=True) or []
        paths = [f"{znodes.LOG_DIR_EVENT_NOTIFICATION}/{name}" for name in sorted(names)]
        brokers: set[int] = set()
        for path in paths:
            got = await self.zk.get(path)
            if got is not None:
                brokers.add(znodes.LogDirEventNotification.decode(got[0]).broker)
        for b in sorted(brokers & set(ctx.live)):
            log.info("broker %d reported a failed log directory", b)
            self.requests.leader_and_isr([b], ctx.partitions_on(b))
        for path in paths:
            await self.zk.delete(path)

    async def _on_leader_and_isr_response(self, broker_id: int, body: LeaderAndIsrResponse) -> None:
        """Kafka's LeaderAndIsrResponseReceived: the broker's replicas that answered
        KAFKA_STORAGE_ERROR are offline, those that answered NONE online again."""
        ctx = self.ctx
        if body.error_code != ErrorCode.NONE or broker_id not in ctx.live:
            return
        names = {t.topic_id: name for name, t in ctx.topics.items()}
        errors = {
            (names[t.topic_id], e.partition_index): e.error_code
            for t in body.topics
            if t.topic_id in names
            for e in t.partition_errors
        }
        before = ctx.offline_replicas.get(broker_id, set())
        now = decisions.offline_replicas(before, errors)
        ctx.offline_replicas[broker_id] = now
        if now - before:
            state_log.info("replicas of broker %d offline: %s", broker_id, sorted(now - before))
            await self._on_brokers_failure({broker_id}, within=now - before)
            # Kafka's OfflineReplica: the replica stops (fetchers, a coordinator it hosts).
            self.requests.stop_replica(broker_id, sorted(now - before), delete=False)

    # topic changes ------------------------------------------------------------------------
    async def _on_topic_change(self) -> None:
        ctx = self.ctx
        names = set(await self.zk.get_children(znodes.BROKER_TOPICS, watch=True) or [])
        for gone in set(ctx.topics) - names:
            self.ctx.forget_topic(gone)
        new = sorted(names - set(ctx.topics))
        created: set[TP] = set()
        for topic in new:
            if await self.zk_state.load_topic(topic):
                log.info("new topic %s: %s", topic, ctx.topics[topic].partitions)
                created |= await self.elections.initialize(
                    [
                        (topic, p)
                        for p in sorted(ctx.topics[topic].partitions)
                        if (topic, p) not in ctx.states
                    ]
                )
        self.requests.announce(created, is_new=created)

    async def _on_partition_modification(self, topic: str) -> None:
        ctx = self.ctx
        if topic not in ctx.topics:
            return
        if not await self.zk_state.load_topic(topic):
            return
        new = [
            (topic, p) for p in sorted(ctx.topics[topic].partitions) if (topic, p) not in ctx.states
        ]
        if new:
            log.info("topic %s: new partitions %s", topic, [p for _, p in new])
            created = await self.elections.initialize(new)
            self.requests.announce(created, is_new=created)

    # AlterPartition ------------------------------------------------------------------------
    async def alter_partition(
        self,
        broker_id: int,
        broker_epoch: int,
        changes: dict[TP, tuple[int, tuple[int, ...], int, int]],
    ) -> tuple[ErrorCode, dict[TP, ErrorCode | PartitionInfo]]:
        """A leader's ISR changes: tp -> (leader epoch, new ISR, partition epoch, recovery state)."""
        ctx = self.ctx
        live = ctx.live.get(broker_id)
        if live is None or live.epoch != broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH, {}
        results: dict[TP, ErrorCode | PartitionInfo] = {}
        updates: dict[TP, PartitionState] = {}
        for tp, (leader_epoch, isr, partition_epoch, recovery) in changes.items():
            info = ctx.states.get(tp)
            if info is None or tp[0] not in ctx.topics:
                results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            cur = info.state
            if partition_epoch > info.version or leader_epoch > cur.leader_epoch:
                results[tp] = ErrorCode.NOT_CONTROLLER
            elif leader_epoch < cur.leader_epoch:
                results[tp] = ErrorCode.FENCED_LEADER_EPOCH
            elif (
                broker_id == cur.leader
                and tuple(isr) == cur.isr
                and recovery == cur.leader_recovery_state
            ):
                results[tp] = info
            elif partition_epoch < info.version:
                results[tp] = ErrorCode.INVALID_UPDATE_VERSION
            elif recovery == 1 and len(isr) > 1 or cur.leader_recovery_state == 0 and recovery == 1:
                results[tp] = ErrorCode.INVALID_REQUEST
            elif any(b not in ctx.online_ids(tp) for b in isr):
                results[tp] = ErrorCode.INELIGIBLE_REPLICA
            else:
                updates[tp] = PartitionState(
                    broker_id, leader_epoch, tuple(isr), ctx.epoch, recovery
                )
        written = await self._write_states(updates)
        for tp in updates:
            results[tp] = ctx.states[tp] if tp in written else ErrorCode.INVALID_UPDATE_VERSION
        self.requests.update_metadata(ctx.live, list(changes))
        for tp in written:
            if tp[0] in ctx.topics and ctx.assignment(tp).reassigning:
                await self.reassignment.maybe_complete(tp)
        return ErrorCode.NONE, results

    # controlled shutdown -------------------------------------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP]:
        """Move leadership off a broker that is stopping; the partitions it still leads."""
        ctx = self.ctx
        live = ctx.live.get(broker_id)
        if live is None:
            raise ControllerError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not live")
        if broker_epoch < live.epoch:  # Kafka lets -1 (no epoch, before v2) through; not here
            raise ControllerError(ErrorCode.STALE_BROKER_EPOCH, "stale broker epoch")
        log.info("controlled shutdown of broker %d", broker_id)
        ctx.shutting_down.add(broker_id)
        act_on = [
            tp
            for tp in ctx.partitions_on(broker_id)
            if len(ctx.assignment(tp).replicas) > 1
            and tp in ctx.states
            and tp[0] not in ctx.deleting
        ]
        led = [tp for tp in act_on if ctx.states[tp].state.leader == broker_id]
        followed = [tp for tp in act_on if ctx.states[tp].state.leader != broker_id]
        updates: dict[TP, PartitionState] = {}
        for tp in led:
            info = ctx.states[tp]
            election = decisions.controlled_shutdown_election(
                ctx.assignment(tp).replicas, info.state.isr, ctx.live, ctx.shutting_down
            )
            if election is not None:
                updates[tp] = self._new_state(tp, election.leader, election.isr)
        for tp in followed:
            info = ctx.states[tp]
            if broker_id in info.state.isr:
                leader, isr = decisions.shrink_isr(info.state.leader, info.state.isr, broker_id)
                if isr != info.state.isr:
                    updates[tp] = self._new_state(tp, leader, isr)
        changed = await self._write_states(updates)
        self.requests.stop_replica(broker_id, followed, delete=False)
        self.requests.announce(changed)
        # Still led by it: partitions with other replicas (one replica has nowhere to go).
        return [
            tp
            for tp in ctx.partitions_on(broker_id)
            if tp in ctx.states
            and ctx.states[tp].state.leader == broker_id
            and len(ctx.assignment(tp).replicas) > 1
            and tp[0] not in ctx.deleting
        ]
