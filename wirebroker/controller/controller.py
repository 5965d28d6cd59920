"""The cluster controller (ZooKeeper mode): election, cluster state, and applying decisions.

Every broker runs a `Controller`; the one that creates `/controller` is active. Winning bumps
`/controller_epoch` in the same multi, and every later write of the active controller is a multi
that checks `/controller_epoch` still has the version it wrote: a deposed controller's writes
fail (it then resigns), and brokers fence its requests by the controller epoch they carry.

One task owns the controller's state (`run`): it takes events from one queue, in order. ZooKeeper
watches (forwarded by the broker's `ClusterMember`) and requests from handlers (AlterPartition,
ControlledShutdown, ElectLeaders, reassignments, through `call`) are such events. Decisions come
from `decisions.py`; applying one writes partition state znodes with the version read (their
version is the partition epoch), then sends LeaderAndIsr v7, UpdateMetadata v8 and StopReplica v4
through `ControllerChannel`.

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
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from protocol.errors import ErrorCode
from protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from protocol.schema import Message
from wirebroker.controller import decisions
from wirebroker.controller.channel import ControllerChannel
from wirebroker.controller.decisions import ReplicaAssignment
from wirebroker.controller.errors import ControllerError, NotController
from wirebroker.zk import znodes
from wirebroker.zk.client import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    ZkClient,
    ZkEvent,
    ZookeeperError,
)
from wirebroker.zk.znodes import BrokerRegistration, PartitionState, TopicAssignment

if TYPE_CHECKING:
    from wirebroker.config import BrokerConfig
    from wirebroker.peer import PeerSecurity

log = logging.getLogger(__name__)
state_log = logging.getLogger("wirebroker.state.change")

T = TypeVar("T")
TP = tuple[str, int]

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
EPOCH_DURING_DELETE = -2


class ControllerMoved(Exception):
    """Our controller epoch is no longer the current one: another broker took over."""


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
        self.ctx = ControllerContext()
        self.channel: ControllerChannel | None = None
        self.on_controller_change: Callable[[int], None] = lambda _id: None
        #: A topic's config overrides (the broker's `ClusterMember` keeps them current).
        self.topic_config: Callable[[str], dict[str, str]] = lambda _topic: {}
        self._queue, self._receive = trio.open_memory_channel[_Call | ZkEvent](math.inf)
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._stopped = False
        self.responses: list[tuple[int, Message]] = []  # answers to our requests (tests, logs)

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
            await self._resign()
            await self._safe_elect()
        except ZookeeperError as e:
            # Typically the connection dropped mid-way: what we know may be stale. Resign and
            # run again from ZooKeeper's state, now or (if ZooKeeper is unreachable) on the
            # next CONNECTED.
            log.warning("controller %d: ZooKeeper failed (%r); resigning", self.broker_id, e)
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
            await self._resign()
            await self._safe_elect()
        except ZookeeperError as e:
            call.error = e
            await self._resign()
            await self._safe_elect()
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
        elif ev.path == znodes.BROKER_TOPICS:
            await self._on_topic_change()
        elif ev.path.startswith(znodes.BROKER_TOPICS + "/"):
            await self._on_partition_modification(ev.path.rsplit("/", 1)[1])
        elif ev.path == znodes.DELETE_TOPICS:
            await self._on_delete_topics()
        elif ev.path == znodes.REASSIGN_PARTITIONS:
            await self._on_legacy_reassignment()
        elif ev.path == znodes.PREFERRED_REPLICA_ELECTION:
            await self._on_preferred_election_znode()
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
            self.ctx = ControllerContext(epoch=epoch + 1, epoch_zk_version=results[1].version)
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

    async def _on_become_controller(self) -> None:
        await self._start_channel()
        ctx = self.ctx
        for path in (znodes.BROKER_IDS, znodes.BROKER_TOPICS, znodes.DELETE_TOPICS):
            await self.zk.ensure_path(path)
        ids = await self.zk.get_children(znodes.BROKER_IDS, watch=True) or []
        for name in ids:
            live = await self._read_broker(int(name))
            if live is not None:
                ctx.live[live.registration.id] = live
        self._connect_channels()
        for topic in await self.zk.get_children(znodes.BROKER_TOPICS, watch=True) or []:
            await self._load_topic(topic)
        # Partitions without a state yet, or whose leader is gone, get one now.
        created = await self._initialize_partitions(
            [tp for tp in ctx.partitions() if tp not in ctx.states]
        )
        elected = await self._elect_offline(
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
        await self._remove_from_isrs(in_isrs - set(ctx.live), skip=elected | created)
        self._send_update_metadata(ctx.live, ctx.partitions())
        for broker_id in ctx.live:
            self._send_leader_and_isr([broker_id], ctx.partitions_on(broker_id), is_new=created)
        await self._on_delete_topics()
        await self._on_legacy_reassignment()
        await self._on_preferred_election_znode()
        await self._on_log_dir_events()
        for tp in ctx.partitions():
            if ctx.assignment(tp).reassigning:
                await self._maybe_complete_reassignment(tp)

    # reading ZooKeeper --------------------------------------------------------------------
    async def _read_broker(self, broker_id: int) -> LiveBroker | None:
        got = await self.zk.get(znodes.broker_path(broker_id))
        if got is None:
            return None
        return LiveBroker(BrokerRegistration.decode(broker_id, got[0]), got[1].czxid)

    async def _load_topic(self, topic: str) -> bool:
        got = await self.zk.get(znodes.topic_path(topic), watch=True)
        if got is None:
            return False
        assignment = TopicAssignment.decode(got[0])
        version = got[1].version
        if assignment.topic_id is None:
            # Written by an old tool: give it an id, as Kafka's controller does.
            assignment.topic_id = uuid.uuid4()
            results = await self._fenced(
                [("set", znodes.topic_path(topic), assignment.encode(), version)]
            )
            version = results[1].version
        self.ctx.topics[topic] = assignment
        self.ctx.topic_versions[topic] = version
        for p in self.ctx.topics[topic].partitions:
            await self._load_state((topic, p))
        return True

    async def _load_state(self, tp: TP) -> None:
        got = await self.zk.get(znodes.partition_state_path(*tp))
        if got is not None:
            self.ctx.states[tp] = PartitionInfo(PartitionState.decode(got[0]), got[1].version)

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

    # writing ZooKeeper (fenced by the controller epoch's version) -------------------------
    async def _fenced(self, ops: list[tuple[Any, ...]]) -> list[Any]:
        try:
            return await self.zk.multi(
                [("check", znodes.CONTROLLER_EPOCH, self.ctx.epoch_zk_version), *ops]
            )
        except BadVersionError:
            stat = await self.zk.exists(znodes.CONTROLLER_EPOCH)
            if stat is None or stat.version != self.ctx.epoch_zk_version:
                raise ControllerMoved() from None
            raise

    async def _write_states(self, updates: dict[TP, PartitionState]) -> set[TP]:
        """Write new states with the versions we read; the ones written are returned."""
        done: set[TP] = set()
        for tp, state in updates.items():
            info = self.ctx.states.get(tp)
            try:
                if info is None:
                    await self.zk.ensure_path(znodes.partition_path(*tp))
                    await self._fenced(
                        [("create", znodes.partition_state_path(*tp), state.encode())]
                    )
                    version = 0
                else:
                    results = await self._fenced(
                        [("set", znodes.partition_state_path(*tp), state.encode(), info.version)]
                    )
                    version = results[1].version
            except (BadVersionError, NodeExistsError, NoNodeError) as e:
                log.warning(
                    "state of %s-%d changed under us (%s); re-reading it", *tp, type(e).__name__
                )
                await self._load_state(tp)
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

    def _new_state(
        self,
        tp: TP,
        leader: int,
        isr: Iterable[int],
        *,
        bump: bool = True,
        recovering: bool = False,
    ) -> PartitionState:
        """The next state of `tp`: leader epoch + 1, our controller epoch, and the leader
        recovery state kept, except after an unclean election (RECOVERING, as Kafka 3.2+)."""
        info = self.ctx.states.get(tp)
        epoch = (info.state.leader_epoch + 1 if bump else info.state.leader_epoch) if info else 0
        recovery = 1 if recovering else (info.state.leader_recovery_state if info else 0)
        return PartitionState(leader, epoch, tuple(isr), self.ctx.epoch, recovery)

    # sending ------------------------------------------------------------------------------
    def _on_response(self, broker_id: int, body: Message) -> None:
        self.responses.append((broker_id, body))
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

    def _topic_id(self, topic: str) -> uuid.UUID:
        t = self.ctx.topics.get(topic)
        return t.topic_id if t is not None and t.topic_id is not None else uuid.UUID(int=0)

    def _send_leader_and_isr(
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
                        ep = ctx.live[leader].registration.endpoint(
                            self.config.inter_broker_listener()
                        )
                    except KeyError:
                        continue
                    live_leaders.append(
                        LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                            broker_id=leader, host_name=ep.host, port=ep.port
                        )
                    )
            body = LeaderAndIsrRequest(
                controller_id=self.broker_id,
                is_k_raft_controller=False,
                controller_epoch=ctx.epoch,
                broker_epoch=live.epoch,
                type=0,
                topic_states=[
                    LeaderAndIsrRequest.LeaderAndIsrTopicState(
                        topic_name=topic, topic_id=self._topic_id(topic), partition_states=states
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

    def _send_update_metadata(self, brokers: Iterable[int], tps: Iterable[TP]) -> None:
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
                topic_name=topic, topic_id=self._topic_id(topic), partition_states=states
            )
            for topic, states in sorted(by_topic.items())
        ]
        for broker_id in brokers:
            live = ctx.live.get(broker_id)
            if live is None:
                continue
            body = UpdateMetadataRequest(
                controller_id=self.broker_id,
                is_k_raft_controller=False,
                type=0,
                controller_epoch=ctx.epoch,
                broker_epoch=live.epoch,
                topic_states=topic_states,
                live_brokers=live_brokers,
            )
            self._send(broker_id, body, UPDATE_METADATA_VERSION)

    def _send_stop_replica(self, broker_id: int, tps: Iterable[TP], *, delete: bool) -> None:
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
            controller_id=self.broker_id,
            is_k_raft_controller=False,
            controller_epoch=self.ctx.epoch,
            broker_epoch=live.epoch,
            topic_states=[
                StopReplicaRequest.StopReplicaTopicState(topic_name=t, partition_states=s)
                for t, s in sorted(by_topic.items())
            ],
        )
        self._send(broker_id, body, STOP_REPLICA_VERSION)

    def _announce(self, tps: Collection[TP], *, is_new: Collection[TP] = ()) -> None:
        """LeaderAndIsr to the live replicas of `tps`, then UpdateMetadata to every live broker.

        A broker in controlled shutdown gets no LeaderAndIsr (Kafka's isReplicaOnline without
        shutting-down brokers): made a follower again, it would restart the fetchers its
        StopReplica stopped and be proposed for the ISRs it just left, holding back the high
        watermark of every partition it follows until its session ends."""
        if not tps:
            return
        replicas = {b for tp in tps for b in self.ctx.assignment(tp).replicas}
        replicas -= self.ctx.shutting_down
        self._send_leader_and_isr(sorted(replicas), tps, is_new=is_new)
        self._send_update_metadata(self.ctx.live, tps)

    # partitions ---------------------------------------------------------------------------
    async def _initialize_partitions(self, tps: Iterable[TP]) -> set[TP]:
        updates: dict[TP, PartitionState] = {}
        for tp in tps:
            election = decisions.initial_election(
                self.ctx.assignment(tp).replicas, self.ctx.live_ids()
            )
            if election is None:
                log.warning("%s-%d: no live replica; it stays offline", *tp)
                continue
            updates[tp] = PartitionState(election.leader, 0, election.isr, self.ctx.epoch)
        return await self._write_states(updates)

    def _unclean_allowed(self, topic: str) -> bool:
        """The topic's `unclean.leader.election.enable` override, else the broker's setting."""
        value = self.topic_config(topic).get("unclean.leader.election.enable")
        if value is None:
            value = self.config.get("unclean.leader.election.enable") or "false"
        return value.strip().lower() == "true"

    def unclean_election_enabled(self) -> None:
        """`unclean.leader.election.enable` was turned on for every topic at run time (Kafka's
        enableDefaultUncleanLeaderElection): the offline partitions are elected again, a
        replica outside the ISR now allowed to lead."""
        if self.active:
            self._queue.send_nowait(_Call(self._elect_offline_partitions))

    async def _elect_offline_partitions(self) -> None:
        ctx = self.ctx
        offline = [
            tp
            for tp, info in ctx.states.items()
            if info.state.leader not in ctx.live_ids()
            and tp[0] in ctx.topics
            and tp[0] not in ctx.deleting
        ]
        self._announce(await self._elect_offline(offline))

    async def _elect_offline(self, tps: Iterable[TP]) -> set[TP]:
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
                    updates[tp] = self._new_state(tp, leader, isr)
                log.warning("%s-%d: no eligible leader; the partition is offline", *tp)
                continue
            if election.unclean:
                log.warning("%s-%d: unclean election of broker %d", tp[0], tp[1], election.leader)
            updates[tp] = self._new_state(
                tp, election.leader, election.isr, recovering=election.unclean
            )
        return await self._write_states(updates)

    # broker changes -----------------------------------------------------------------------
    async def _on_broker_change(self) -> None:
        ctx = self.ctx
        ids = {int(n) for n in await self.zk.get_children(znodes.BROKER_IDS, watch=True) or []}
        current: dict[int, LiveBroker] = {}
        for broker_id in ids:
            live = await self._read_broker(broker_id)
            if live is not None:
                current[broker_id] = live
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
        changed = await self._elect_offline(led)
        changed |= await self._remove_from_isrs(gone, skip=changed, within=within)
        replicas = {b for tp in changed for b in ctx.assignment(tp).replicas}
        self._send_leader_and_isr(sorted(replicas), changed)
        self._send_update_metadata(ctx.live, ctx.partitions())

    async def _remove_from_isrs(
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
                updates[tp] = self._new_state(tp, leader, isr)
        return await self._write_states(updates)

    async def _on_brokers_startup(self, new: set[int]) -> None:
        ctx = self.ctx
        # Everyone learns the new broker list (and the new broker everything).
        self._send_update_metadata(ctx.live, ctx.partitions())
        for b in sorted(new):
            self._send_leader_and_isr([b], ctx.partitions_on(b))
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
        created = await self._initialize_partitions(never)
        changed = await self._elect_offline(offline)
        self._announce(changed | created, is_new=created)
        for tp in ctx.partitions():
            if ctx.assignment(tp).reassigning:
                await self._maybe_complete_reassignment(tp)
        for topic in sorted(ctx.deleting & set(ctx.topics)):  # waiting for a replica's broker
            await self._delete_topic(topic)

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
            self._send_leader_and_isr([b], ctx.partitions_on(b))
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
            self._send_stop_replica(broker_id, sorted(now - before), delete=False)

    # topic changes ------------------------------------------------------------------------
    async def _on_topic_change(self) -> None:
        ctx = self.ctx
        names = set(await self.zk.get_children(znodes.BROKER_TOPICS, watch=True) or [])
        for gone in set(ctx.topics) - names:
            self._forget_topic(gone)
        new = sorted(names - set(ctx.topics))
        created: set[TP] = set()
        for topic in new:
            if await self._load_topic(topic):
                log.info("new topic %s: %s", topic, ctx.topics[topic].partitions)
                created |= await self._initialize_partitions(
                    [
                        (topic, p)
                        for p in sorted(ctx.topics[topic].partitions)
                        if (topic, p) not in ctx.states
                    ]
                )
        self._announce(created, is_new=created)

    def _forget_topic(self, topic: str) -> None:
        ctx = self.ctx
        ctx.topics.pop(topic, None)
        ctx.topic_versions.pop(topic, None)
        ctx.deleting.discard(topic)
        for tp in [tp for tp in ctx.states if tp[0] == topic]:
            del ctx.states[tp]

    async def _on_partition_modification(self, topic: str) -> None:
        ctx = self.ctx
        if topic not in ctx.topics:
            return
        if not await self._load_topic(topic):
            return
        new = [
            (topic, p) for p in sorted(ctx.topics[topic].partitions) if (topic, p) not in ctx.states
        ]
        if new:
            log.info("topic %s: new partitions %s", topic, [p for _, p in new])
            created = await self._initialize_partitions(new)
            self._announce(created, is_new=created)

    # topic deletion -----------------------------------------------------------------------
    async def _on_delete_topics(self) -> None:
        ctx = self.ctx
        names = await self.zk.get_children(znodes.DELETE_TOPICS, watch=True) or []
        for topic in sorted(names):
            if topic not in ctx.topics:
                await self.zk.delete(znodes.delete_topic_path(topic))
                continue
            if not self.config.get_bool("delete.topic.enable"):
                log.info("not deleting topic %s: delete.topic.enable is false", topic)
                await self.zk.delete(znodes.delete_topic_path(topic))
                continue
            await self._delete_topic(topic)

    async def _delete_topic(self, topic: str) -> None:
        ctx = self.ctx
        tps = [(topic, p) for p in sorted(ctx.topics[topic].partitions)]
        if topic not in ctx.deleting:
            log.info("deleting topic %s", topic)
        ctx.deleting.add(topic)
        self._send_update_metadata(ctx.live, tps)
        replicas = {b for tp in tps for b in ctx.assignment(tp).replicas}
        down = sorted(b for b in replicas if b not in ctx.live)
        if down:
            # As Kafka: the deletion waits until every replica can be told to delete its log.
            log.warning("deleting topic %s waits for brokers %s, which hold replicas", topic, down)
            return
        for b in sorted(replicas):
            self._send_stop_replica(
                b, [tp for tp in tps if b in ctx.assignment(tp).replicas], delete=True
            )
        await self._fenced([])  # still the controller?
        await self.zk.delete(znodes.topic_path(topic), recursive=True)
        await self.zk.delete(znodes.topic_config_path(topic))
        await self.zk.delete(znodes.delete_topic_path(topic))
        self._forget_topic(topic)

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
        self._send_update_metadata(ctx.live, list(changes))
        for tp in written:
            if tp[0] in ctx.topics and ctx.assignment(tp).reassigning:
                await self._maybe_complete_reassignment(tp)
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
        self._send_stop_replica(broker_id, followed, delete=False)
        self._announce(changed)
        # Still led by it: partitions with other replicas (one replica has nowhere to go).
        return [
            tp
            for tp in ctx.partitions_on(broker_id)
            if tp in ctx.states
            and ctx.states[tp].state.leader == broker_id
            and len(ctx.assignment(tp).replicas) > 1
            and tp[0] not in ctx.deleting
        ]

    # leader elections on request ------------------------------------------------------------
    async def elect_leaders(self, tps: list[TP] | None, unclean: bool) -> dict[TP, ErrorCode]:
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
            updates[tp] = self._new_state(
                tp, election.leader, election.isr, recovering=election.unclean
            )
        written = await self._write_states(updates)
        for tp in updates:
            results[tp] = ErrorCode.NONE if tp in written else ErrorCode.UNKNOWN_SERVER_ERROR
        self._announce(written)
        return results

    async def _rebalance_timer(self) -> None:
        """Every `leader.imbalance.check.interval.seconds`, queue a leader rebalance check."""
        interval = self.config.get_int("leader.imbalance.check.interval.seconds")
        while True:
            await trio.sleep(interval)
            self._queue.send_nowait(_Call(self.rebalance_leaders))

    async def rebalance_leaders(self) -> dict[TP, ErrorCode]:
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
        return await self.elect_leaders(moves, unclean=False)

    async def _on_preferred_election_znode(self) -> None:
        got = await self.zk.get(znodes.PREFERRED_REPLICA_ELECTION, watch=True)
        if got is None:
            return
        tps = sorted(znodes.PreferredReplicaElection.decode(got[0]).partitions)
        log.info("preferred replica election requested for %s", tps)
        await self.elect_leaders(tps, unclean=False)
        await self.zk.delete(znodes.PREFERRED_REPLICA_ELECTION)

    # reassignment --------------------------------------------------------------------------
    def ongoing_reassignments(self, tps: list[TP] | None) -> dict[TP, ReplicaAssignment]:
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
            await self._set_assignment(tp, new)
            results[tp] = (ErrorCode.NONE, None)
            log.info("%s-%d: reassignment %s -> %s", tp[0], tp[1], current, new)
            if new.reassigning:
                # Phase A: the new replicas join; everyone hears of the full replica set.
                info = ctx.states.get(tp)
                if info is not None:
                    written = await self._write_states(
                        {tp: self._new_state(tp, info.state.leader, info.state.isr)}
                    )
                    staying = [b for b in new.replicas if b not in new.adding]
                    self._send_leader_and_isr(staying, written)
                    self._send_leader_and_isr(new.adding, written, is_new=written)
                    self._send_update_metadata(ctx.live, written)
                await self._maybe_complete_reassignment(tp)
            else:
                await self._finish_reassignment(tp, current, new.replicas)
        return results

    async def _set_assignment(self, tp: TP, new: ReplicaAssignment) -> None:
        ctx = self.ctx
        t = ctx.topics[tp[0]]
        t.partitions[tp[1]] = list(new.replicas)
        t.adding[tp[1]] = list(new.adding)
        t.removing[tp[1]] = list(new.removing)
        for d in (t.adding, t.removing):
            if not d[tp[1]]:
                del d[tp[1]]
        results = await self._fenced(
            [("set", znodes.topic_path(tp[0]), t.encode(), ctx.topic_versions[tp[0]])]
        )
        ctx.topic_versions[tp[0]] = results[1].version

    async def _maybe_complete_reassignment(self, tp: TP) -> None:
        ctx = self.ctx
        info = ctx.states.get(tp)
        current = ctx.assignment(tp)
        if info is None or not decisions.reassignment_complete(current, info.state.isr):
            return
        await self._finish_reassignment(tp, current, current.target)

    async def _finish_reassignment(
        self, tp: TP, current: ReplicaAssignment, target: tuple[int, ...]
    ) -> None:
        """Phase B: leadership onto the target, removed replicas stopped, the target written."""
        ctx = self.ctx
        info = ctx.states.get(tp)
        removed = [b for b in current.replicas if b not in target]
        await self._set_assignment(tp, ReplicaAssignment(tuple(target)))
        if info is not None:
            isr = tuple(b for b in info.state.isr if b in target) or info.state.isr
            leader = info.state.leader
            if leader not in target or leader not in ctx.live_ids():
                election = decisions.reassignment_election(target, isr, ctx.live_ids())
                leader = election.leader if election else znodes.NO_LEADER
            await self._write_states({tp: self._new_state(tp, leader, isr)})
        for b in removed:
            self._send_stop_replica(b, [tp], delete=True)
        self._announce([tp])
        log.info("%s-%d: reassignment to %s complete", tp[0], tp[1], list(target))
        if tp in ctx.legacy_reassignments:
            ctx.legacy_reassignments.discard(tp)
            await self._rewrite_legacy_znode()

    async def _on_legacy_reassignment(self) -> None:
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
