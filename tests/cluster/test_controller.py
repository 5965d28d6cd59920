"""The controller against a real ZooKeeper: election and fencing, topic creation, broker loss,
AlterPartition, controlled shutdown, elections, reassignment, deletion and config changes.

Brokers run in-process (`serve_broker`) and talk over TCP; "fake" brokers only register in
ZooKeeper and record what the controller sends them (the replica side that acts on
LeaderAndIsr lives elsewhere).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.alter_configs import AlterConfigsRequest
from protocol.messages.alter_partition import AlterPartitionRequest
from protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from protocol.messages.controlled_shutdown import ControlledShutdownRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_cluster import DescribeClusterRequest
from protocol.messages.elect_leaders import ElectLeadersRequest
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_features import UpdateFeaturesRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from tests.cluster.harness import FakeBroker, call, eventually, start_broker
from tests.cluster.processes import expire_session
from wirebroker.controller.controller import Controller, ControllerMoved
from wirebroker.peer import request_once
from wirebroker.server import RunningBroker
from wirebroker.zk import znodes
from wirebroker.zk.client import BadVersionError, ZkClient

pytestmark = pytest.mark.integration


def run(fn: Any, *args: Any) -> None:
    trio.run(fn, *args)


async def read_state(zk: ZkClient, topic: str, p: int) -> tuple[znodes.PartitionState, int] | None:
    got = await zk.get(znodes.partition_state_path(topic, p))
    return (znodes.PartitionState.decode(got[0]), got[1].version) if got else None


async def create_topic(
    running: RunningBroker, name: str, partitions: int = -1, rf: int = -1, **kw: Any
) -> Any:
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf, **kw
    )
    response = await call(running, CreateTopicsRequest(topics=[topic], timeout_ms=10_000), 7)
    return response.topics[0]


def controller_of(*brokers: RunningBroker) -> RunningBroker:
    active = [b for b in brokers if b.broker.cluster and b.broker.cluster.controller.active]
    assert len(active) == 1, [b.broker.node_id for b in active]
    return active[0]


def test_election_fencing_and_reregistration(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            await eventually(lambda: b1.broker.controller_id == 1, what="broker 1 controller")
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2)
            await eventually(lambda: b2.broker.controller_id == 1, what="broker 2 learns it")
            c1 = b1.broker.cluster
            c2 = b2.broker.cluster
            assert c1 is not None and c2 is not None
            epoch = c1.controller.epoch
            old_version = c1.controller.ctx.epoch_zk_version
            old_broker_epoch = b1.broker.broker_epoch
            got = await c2.zk.get(znodes.CONTROLLER_EPOCH)
            assert got is not None and znodes.decode_controller_epoch(got[0]) == epoch

            # DescribeCluster and Metadata report the real controller from either broker
            # (broker 2 learned it from ZooKeeper; both learn it live from UpdateMetadata).
            await eventually(
                lambda: all(
                    len(list(b.broker.metadata_cache.alive_brokers())) == 2 for b in (b1, b2)
                ),
                what="2 live brokers in both metadata caches",
            )
            for b in (b1, b2):
                described = await call(b, DescribeClusterRequest(), 1)
                assert described.controller_id == 1
                assert [x.broker_id for x in described.brokers] == [1, 2]
                meta = await call(b, MetadataRequest(topics=[]), 12)
                assert meta.controller_id == 1
                assert [x.node_id for x in meta.brokers] == [1, 2]

            # topics made before the failover: one by a non-controller, one by an old tool
            kept = await create_topic(b2, "kept", 2, 2, configs=[])
            assert kept.error_code == ErrorCode.NONE
            await eventually(lambda: "kept" in c1.topic_configs, what="config cache of broker 1")
            await c2.zk.create(
                znodes.topic_path("no-id"), b'{"version":1,"partitions":{"0":[2,1]}}'
            )
            await eventually(lambda: ("no-id", 0) in c1.controller.ctx.states, what="old topic")
            no_id = await c2.topic_assignment("no-id")
            assert no_id is not None and no_id.topic_id is not None

            creds = c1.zk.session_credentials
            assert creds is not None
            await trio.to_thread.run_sync(expire_session, zk_connect, creds)

            await eventually(lambda: c2.controller.active, what="broker 2 takes over")
            assert c2.controller.epoch == epoch + 1
            assert b2.broker.controller_id == 2
            await eventually(lambda: b1.broker.controller_id == 2, what="broker 1 learns it")
            assert not c1.controller.active
            # broker 1 registered again in its new session: a new broker epoch
            await eventually(
                lambda: b1.broker.broker_epoch != old_broker_epoch, what="re-registration"
            )
            stat = await c2.zk.exists(znodes.broker_path(1))
            assert stat is not None and stat.czxid == b1.broker.broker_epoch
            # a write fenced with the deposed controller's epoch version fails
            with pytest.raises(BadVersionError):
                await c2.zk.multi(
                    [
                        ("check", znodes.CONTROLLER_EPOCH, old_version),
                        ("create", "/fenced-write", b""),
                    ]
                )
            assert await c2.zk.exists("/fenced-write") is None
            # ... and so does every write of the deposed controller itself
            assert c1.controller.ctx.epoch_zk_version == old_version
            with pytest.raises(ControllerMoved):
                await c1.controller._fenced([("create", "/zombie-write", b"")])
            assert await c2.zk.exists("/zombie-write") is None
            # the new controller sees both brokers live, and the topics with live leaders
            # (broker 1 may be live before the failover has read the topics: both waited for)
            states = c2.controller.ctx.states
            await eventually(
                lambda: (
                    set(c2.controller.ctx.live) == {1, 2}
                    and set(states) == {("kept", 0), ("kept", 1), ("no-id", 0)}
                    and all(info.state.leader in (1, 2) for info in states.values())
                ),
                what=f"both live and every partition led by one (states: {states})",
            )
            assert c2.controller.ctx.topics["no-id"].topic_id == no_id.topic_id
            # a non-controller answers the controller APIs with NOT_CONTROLLER
            answer = await call(b1, ControlledShutdownRequest(broker_id=1, broker_epoch=-1), 3)
            assert answer.error_code == ErrorCode.NOT_CONTROLLER
            nursery.cancel_scope.cancel()

    run(main)


def test_create_topic_leaders_isr_and_requests(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            fakes = [FakeBroker(2), FakeBroker(3)]
            for f in fakes:
                await nursery.start(f.run, zk_connect)
            cluster = b1.broker.cluster
            assert cluster is not None
            controller = cluster.controller
            await eventually(lambda: set(controller.ctx.live) == {1, 2, 3}, what="3 live")

            result = await create_topic(b1, "orders", 3, 3)
            assert result.error_code == ErrorCode.NONE, result.error_message
            assert (result.num_partitions, result.replication_factor) == (3, 3)
            again = await create_topic(b1, "orders", 1, 1)
            assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
            too_many = await create_topic(b1, "wide", 1, 4)
            assert too_many.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
            assert (
                too_many.error_message == "Replication factor: 4 larger than available brokers: 3."
            )

            assignment = await cluster.topic_assignment("orders")
            assert assignment is not None and assignment.topic_id == result.topic_id
            for p in range(3):
                state = await read_state(cluster.zk, "orders", p)
                assert state is not None
                replicas = assignment.partitions[p]
                assert sorted(replicas) == [1, 2, 3]
                assert state[0].leader == replicas[0]
                assert sorted(state[0].isr) == [1, 2, 3]
                assert state[0].leader_epoch == 0 and state[1] == 0
                assert state[0].controller_epoch == controller.epoch

            # every fake broker got LeaderAndIsr for all three partitions, and UpdateMetadata
            for f in fakes:
                await eventually(
                    lambda f=f: any(
                        t.topic_name == "orders"
                        for r in f.received(LeaderAndIsrRequest)
                        for t in r.topic_states
                    ),
                    what=f"LeaderAndIsr at broker {f.broker_id}",
                )
                lai = [
                    r
                    for r in f.received(LeaderAndIsrRequest)
                    if any(t.topic_name == "orders" for t in r.topic_states)
                ][-1]
                assert lai.controller_id == 1 and lai.controller_epoch == controller.epoch
                assert lai.broker_epoch == f.epoch
                (topic_state,) = lai.topic_states
                assert topic_state.topic_id == result.topic_id
                assert sorted(p.partition_index for p in topic_state.partition_states) == [0, 1, 2]
                assert all(p.is_new for p in topic_state.partition_states)
                assert {x.broker_id for x in lai.live_leaders} <= {1, 2, 3}
                await eventually(
                    lambda f=f: any(
                        t.topic_name == "orders"
                        for r in f.received(UpdateMetadataRequest)
                        for t in r.topic_states
                    ),
                    what=f"UpdateMetadata at broker {f.broker_id}",
                )
                um = f.received(UpdateMetadataRequest)[-1]
                assert sorted(b.id for b in um.live_brokers) == [1, 2, 3]
            # the real broker 1 was sent LeaderAndIsr too (it does not act on it yet)
            channel = controller.channel
            assert channel is not None
            await eventually(
                lambda: (1, "LeaderAndIsrRequest") in channel.sent + channel.dropped,
                what="LeaderAndIsr to broker 1",
            )

            # AlterPartition from a fake leader: accepted, then fenced by partition epoch
            p2 = next(p for p in range(3) if assignment.partitions[p][0] == 2)
            state, version = await read_state(cluster.zk, "orders", p2) or (None, 0)
            assert state is not None

            async def alter(
                isr: list[int], leader_epoch: int, partition_epoch: int, epoch: int = fakes[0].epoch
            ) -> Any:
                body = AlterPartitionRequest(
                    broker_id=2,
                    broker_epoch=epoch,
                    topics=[
                        AlterPartitionRequest.TopicData(
                            topic_id=result.topic_id,
                            partitions=[
                                AlterPartitionRequest.PartitionData(
                                    partition_index=p2,
                                    leader_epoch=leader_epoch,
                                    new_isr_with_epochs=[
                                        AlterPartitionRequest.BrokerState(
                                            broker_id=b, broker_epoch=-1
                                        )
                                        for b in isr
                                    ],
                                    partition_epoch=partition_epoch,
                                )
                            ],
                        )
                    ],
                )
                return await call(b1, body, 3)

            ok = await alter([2, 1], state.leader_epoch, version)
            assert ok.error_code == ErrorCode.NONE
            part = ok.topics[0].partitions[0]
            assert part.error_code == ErrorCode.NONE
            assert (part.leader_id, part.isr, part.partition_epoch) == (2, [2, 1], version + 1)
            stale = await alter([2], state.leader_epoch, version)
            assert stale.topics[0].partitions[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
            fenced = await alter([2], state.leader_epoch - 1, version + 1)
            assert fenced.topics[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
            same = await alter([2, 1], state.leader_epoch, version)  # already so: idempotent
            assert same.topics[0].partitions[0].error_code == ErrorCode.NONE
            bad_epoch = await alter([2, 1], state.leader_epoch, version + 1, epoch=12345)
            assert bad_epoch.error_code == ErrorCode.STALE_BROKER_EPOCH
            ineligible = await alter([2, 1, 9], state.leader_epoch, version + 1)
            assert ineligible.topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA
            after = await read_state(cluster.zk, "orders", p2)
            assert after is not None and after[0].isr == (2, 1) and after[1] == version + 1

            # broker 3 leaves (its session ends): it leads nothing, and is out of every ISR
            f3 = fakes[1]
            assert f3.zk is not None
            await f3.zk.close()

            async def settled() -> bool:
                for p in range(3):
                    s = await read_state(cluster.zk, "orders", p)
                    if s is None or s[0].leader == 3 or 3 in s[0].isr:
                        return False
                return True

            await eventually(settled, 15, 0.05, what="orders' partitions led without broker 3")
            p3 = next(p for p in range(3) if assignment.partitions[p][0] == 3)
            moved = await read_state(cluster.zk, "orders", p3)
            assert moved is not None and moved[0].leader in (1, 2) and moved[0].leader_epoch == 1

            # controlled shutdown of broker 2: leadership moves to broker 1
            before = {}  # each partition's leader epoch before the shutdown's changes
            for p in range(3):
                s = await read_state(cluster.zk, "orders", p)
                assert s is not None
                before[p] = s[0].leader_epoch
            answer = await call(
                b1, ControlledShutdownRequest(broker_id=2, broker_epoch=fakes[0].epoch), 3
            )
            assert answer.error_code == ErrorCode.NONE
            assert answer.remaining_partitions == []
            for p in range(3):
                s = await read_state(cluster.zk, "orders", p)
                assert s is not None and s[0].leader == 1 and 2 not in s[0].isr
            await eventually(
                lambda: any(
                    not ps.delete_partition
                    for r in fakes[0].received(StopReplicaRequest)
                    for t in r.topic_states
                    for ps in t.partition_states
                ),
                what="StopReplica (no delete) at broker 2",
            )
            # no LeaderAndIsr of the shutdown's changes to the broker shutting down (it would
            # start following again); those of broker 3's failure may still be arriving
            assert not [
                ps
                for r in fakes[0].received(LeaderAndIsrRequest)
                for t in r.topic_states
                for ps in t.partition_states
                if ps.leader_epoch > before[ps.partition_index]
            ]
            nursery.cancel_scope.cancel()

    run(main)


def test_reassignment_elections_configs_and_deletion(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2)
            fakes = {i: FakeBroker(i) for i in (3, 4)}
            for f in fakes.values():
                await nursery.start(f.run, zk_connect)
            c1 = b1.broker.cluster
            c2 = b2.broker.cluster
            assert c1 is not None and c2 is not None
            controller = c1.controller
            await eventually(lambda: set(controller.ctx.live) == {1, 2, 3, 4}, what="4 live")

            manual = [
                CreateTopicsRequest.CreatableReplicaAssignment(partition_index=0, broker_ids=[3, 2])
            ]
            created = await create_topic(b2, "moving", assignments=manual)
            assert created.error_code == ErrorCode.NONE, created.error_message

            # reassign [3, 2] -> [4, 2]: adding 4, removing 3, until 4 is in the ISR
            answer = await call(
                b1,
                AlterPartitionReassignmentsRequest(
                    topics=[
                        AlterPartitionReassignmentsRequest.ReassignableTopic(
                            name="moving",
                            partitions=[
                                AlterPartitionReassignmentsRequest.ReassignablePartition(
                                    partition_index=0, replicas=[4, 2]
                                )
                            ],
                        )
                    ]
                ),
                0,
            )
            assert answer.error_code == ErrorCode.NONE
            assert answer.responses[0].partitions[0].error_code == ErrorCode.NONE
            listed = await call(b1, ListPartitionReassignmentsRequest(topics=None), 0)
            (ongoing,) = listed.topics[0].partitions
            assert (ongoing.replicas, ongoing.adding_replicas, ongoing.removing_replicas) == (
                [4, 2, 3],
                [4],
                [3],
            )
            not_here = await call(b2, ListPartitionReassignmentsRequest(topics=None), 0)
            assert not_here.error_code == ErrorCode.NOT_CONTROLLER
            await eventually(
                lambda: any(
                    t.topic_name == "moving"
                    for r in fakes[4].received(LeaderAndIsrRequest)
                    for t in r.topic_states
                ),
                what="LeaderAndIsr at the new replica",
            )
            state = await read_state(c1.zk, "moving", 0)
            assert state is not None and state[0].leader == 3
            # the leader (3) reports 4 caught up: the move completes, 3 loses leadership
            grow = AlterPartitionRequest(
                broker_id=3,
                broker_epoch=fakes[3].epoch,
                topics=[
                    AlterPartitionRequest.TopicData(
                        topic_name="moving",
                        partitions=[
                            AlterPartitionRequest.PartitionData(
                                partition_index=0,
                                leader_epoch=state[0].leader_epoch,
                                new_isr=[3, 2, 4],
                                partition_epoch=state[1],
                            )
                        ],
                    )
                ],
            )
            grown = await call(b1, grow, 1)
            assert grown.topics[0].partitions[0].error_code == ErrorCode.NONE
            done = await c1.topic_assignment("moving")
            assert done is not None and done.partitions == {0: [4, 2]} and not done.adding
            final = await read_state(c1.zk, "moving", 0)
            assert final is not None and final[0].leader == 4 and 3 not in final[0].isr
            await eventually(
                lambda: any(
                    ps.delete_partition
                    for r in fakes[3].received(StopReplicaRequest)
                    for t in r.topic_states
                    for ps in t.partition_states
                ),
                what="StopReplica (delete) at the removed replica",
            )

            # preferred election: 4 leads and is preferred; unclean not needed either
            elect = ElectLeadersRequest(
                election_type=0,
                topic_partitions=[
                    ElectLeadersRequest.TopicPartitions(topic="moving", partitions=[0, 7])
                ],
                timeout_ms=1000,
            )
            elected = await call(b1, elect, 2)
            codes = {
                r.partition_id: r.error_code
                for r in elected.replica_election_results[0].partition_result
            }
            assert codes == {
                0: ErrorCode.ELECTION_NOT_NEEDED,
                7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            }
            assert (await call(b2, elect, 2)).error_code == ErrorCode.NOT_CONTROLLER
            # feature updates: only the controller answers, refusing each (none is supported)
            update = UpdateFeaturesRequest.FeatureUpdateKey(
                feature="group.version", max_version_level=1
            )
            features = UpdateFeaturesRequest(feature_updates=[update])
            assert (await call(b2, features, 1)).error_code == ErrorCode.NOT_CONTROLLER
            refused = await call(b1, features, 1)
            assert refused.error_code == ErrorCode.NONE
            assert [(r.feature, r.error_code) for r in refused.results] == [
                ("group.version", ErrorCode.INVALID_REQUEST)
            ]

            # a config change through broker 2 reaches broker 1 through /config/changes
            alter = AlterConfigsRequest(
                resources=[
                    AlterConfigsRequest.AlterConfigsResource(
                        resource_type=2,
                        resource_name="moving",
                        configs=[
                            AlterConfigsRequest.AlterableConfig(name="retention.ms", value="1234")
                        ],
                    )
                ]
            )
            altered = await call(b2, alter, 2)
            assert altered.responses[0].error_code == ErrorCode.NONE
            await eventually(
                lambda: c1.topic_configs.get("moving") == {"retention.ms": "1234"},
                what="broker 1 applies the config change",
            )
            got = await c1.zk.get(znodes.topic_config_path("moving"))
            assert got is not None and got[0] == b'{"version":1,"config":{"retention.ms":"1234"}}'

            # deletion: StopReplica(delete) to the replicas, then the znodes go
            deleted = await call(
                b2, DeleteTopicsRequest(topic_names=["moving"], timeout_ms=10_000), 5
            )
            assert deleted.responses[0].error_code == ErrorCode.NONE
            assert await c1.topic_assignment("moving") is None
            # the config and deletion znodes go right after the assignment, as in Kafka's
            # completeDeleteTopic: not necessarily before the answer
            await eventually_znode_gone(c1.zk, znodes.topic_config_path("moving"))
            await eventually(lambda: "moving" not in controller.ctx.topics, what="forgotten")
            unknown = await call(
                b2, DeleteTopicsRequest(topic_names=["moving"], timeout_ms=1000), 5
            )
            assert unknown.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            nursery.cancel_scope.cancel()

    run(main)


def test_auto_create_and_clean_stop(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(
                nursery, zk_connect, tmp_path, 1, default_replication_factor="2"
            )
            b2 = await start_broker(
                nursery, zk_connect, tmp_path, 2, default_replication_factor="2"
            )
            c1 = b1.broker.cluster
            assert c1 is not None
            await eventually(lambda: set(c1.controller.ctx.live) == {1, 2}, what="2 live")
            meta = await call(
                b2, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="auto")]), 12
            )
            assert meta.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
            assignment = await c1.topic_assignment("auto")
            assert assignment is not None and len(assignment.partitions[0]) == 2
            await eventually(lambda: ("auto", 0) in c1.controller.ctx.states, what="state")
            # a clean stop of broker 2 is a controlled shutdown: broker 1 leads everything
            await b2.stop()
            state = c1.controller.ctx.states[("auto", 0)].state
            assert state.leader == 1 and state.isr == (1,)
            await eventually(lambda: set(c1.controller.ctx.live) == {1}, what="broker 2 gone")
            nursery.cancel_scope.cancel()

    run(main)


def test_inter_broker_listener(zk_connect: str, tmp_path: Path) -> None:
    """With two listeners, the controller uses `inter.broker.listener.name`; clients are told
    the endpoints of the listener they came in on."""

    async def main() -> None:
        extra = {
            "listeners": "INTERNAL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "listener_security_protocol_map": "INTERNAL:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter_broker_listener_name": "INTERNAL",
        }
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, **extra)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2, **extra)
            c1 = b1.broker.cluster
            assert c1 is not None
            channel = c1.controller.channel
            assert channel is not None
            await eventually(lambda: channel.brokers() == [1, 2], what="channels")
            internal2 = next(x for x in b2.listeners if x.name == "INTERNAL")
            assert (channel._links[2].host, channel._links[2].port) == ("127.0.0.1", internal2.port)
            reg = c1.registrations[2]
            assert [e.listener for e in reg.endpoints] == ["INTERNAL", "PLAINTEXT"]
            for listener in b1.listeners:
                answer = await request_once(
                    listener.host, listener.port, DescribeClusterRequest(), 1, client_id="t"
                )
                ports = {x.broker_id: x.port for x in answer.brokers}
                expected = {
                    b.broker.node_id: next(x.port for x in b.listeners if x.name == listener.name)
                    for b in (b1, b2)
                }
                assert ports == expected
            nursery.cancel_scope.cancel()

    run(main)


def test_new_controller_takes_dead_brokers_out_of_isrs(zk_connect: str, tmp_path: Path) -> None:
    """A broker that died while there was no controller leaves the ISRs when the next one
    starts (Kafka's replica state machine starts its replicas offline); otherwise leaders
    would wait on it for acks=all until their own lag check."""

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fakes, b1, made = await controller_and_topic_x(nursery, zk_connect, tmp_path)
            zk = ZkClient(zk_connect, session_timeout_ms=6000)
            await zk.start()
            try:
                assert b1.scope is not None
                b1.scope.cancel()  # the controller goes...
                await eventually_znode_gone(zk, znodes.CONTROLLER)
                assert fakes[1].zk is not None
                await fakes[1].zk.close()  # ...then broker 3, with nobody to notice
                await eventually_znode_gone(zk, znodes.broker_path(3))
                b4 = await start_broker(nursery, zk_connect, tmp_path, 4)
                c4 = b4.broker.cluster
                assert c4 is not None
                await eventually(lambda: c4.controller.active, what="broker 4 controls")

                async def shrunk() -> Any:
                    got = await read_state(zk, "x", 0)
                    assert got is not None
                    return got if got[0].isr == (2,) else None

                got = await eventually(shrunk, 10, 0.05, what="x-0's ISR shrunk to [2]")
                assert got[0].leader == 2 and got[0].leader_epoch == 1
            finally:
                await zk.close()
            nursery.cancel_scope.cancel()

    run(main)


async def controller_and_topic_x(
    nursery: trio.Nursery, zk_connect: str, tmp_path: Path
) -> tuple[list[FakeBroker], RunningBroker, Any]:
    """Fake brokers 2 and 3, then broker 1 (the controller) with topic `x`'s one partition on
    2 and 3 in its state: the fakes, broker 1 and CreateTopics' result."""
    fakes = [FakeBroker(2), FakeBroker(3)]
    for fake in fakes:
        await nursery.start(fake.run, zk_connect)
    b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
    cluster = b1.broker.cluster
    assert cluster is not None
    made = await create_topic(b1, "x", assignments=[_assign(0, [2, 3])])
    assert made.error_code == ErrorCode.NONE
    await eventually(lambda: ("x", 0) in cluster.controller.ctx.states, what="state")
    return fakes, b1, made


def _assign(index: int, replicas: list[int]) -> CreateTopicsRequest.CreatableReplicaAssignment:
    return CreateTopicsRequest.CreatableReplicaAssignment(
        partition_index=index, broker_ids=replicas
    )


async def eventually_znode_gone(zk: ZkClient, path: str) -> None:
    async def gone() -> bool:
        return await zk.exists(path) is None

    await eventually(gone, 10, 0.05, what=f"{path} gone")


def test_alter_partition_waits_for_a_new_controllers_failover(
    zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An AlterPartition reaching a controller that has just won the election but not yet read
    the topics is answered after its failover, as Kafka queues it behind that event: answering
    UNKNOWN_TOPIC_ID then left the leader's ISR change pending for good."""
    failover_may_go = trio.Event()
    become = Controller._on_become_controller

    async def held_failover(self: Controller) -> None:
        if self.broker_id == 4:
            await failover_may_go.wait()
        await become(self)

    monkeypatch.setattr(Controller, "_on_become_controller", held_failover)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fakes, b1, made = await controller_and_topic_x(nursery, zk_connect, tmp_path)
            assert b1.scope is not None
            b1.scope.cancel()
            b4 = await start_broker(nursery, zk_connect, tmp_path, 4)
            c4 = b4.broker.cluster
            assert c4 is not None
            await eventually(lambda: c4.controller.active, what="broker 4 wins the election")
            shrink = AlterPartitionRequest(
                broker_id=2,
                broker_epoch=fakes[0].epoch,
                topics=[
                    AlterPartitionRequest.TopicData(
                        topic_id=made.topic_id,
                        partitions=[
                            AlterPartitionRequest.PartitionData(
                                partition_index=0,
                                leader_epoch=0,
                                new_isr_with_epochs=[
                                    AlterPartitionRequest.BrokerState(broker_id=2, broker_epoch=-1)
                                ],
                                partition_epoch=0,
                            )
                        ],
                    )
                ],
            )
            answers: list[Any] = []

            async def alter() -> None:
                answers.append(await call(b4, shrink, 3))

            nursery.start_soon(alter)
            queue = c4.controller._queue
            await eventually(
                lambda: queue.statistics().current_buffer_used > 0, what="the request queued"
            )
            assert not answers
            failover_may_go.set()
            await eventually(lambda: answers, what="the answer")
            (answer,) = answers
            assert answer.error_code == ErrorCode.NONE
            part = answer.topics[0].partitions[0]
            assert (part.error_code, part.isr) == (ErrorCode.NONE, [2])
            nursery.cancel_scope.cancel()

    run(main)
