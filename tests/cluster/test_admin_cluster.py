"""Cluster-mode admin against a real ZooKeeper: partitions, configs, elections through znodes and
the API, the internal topic, and a broker that belongs elsewhere (cluster id, duplicate id)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.create_partitions import CreatePartitionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.elect_leaders import ElectLeadersRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from tests.cluster.harness import FakeBroker, call, eventually, start_broker
from wirebroker.cli import find_exception
from wirebroker.config import ConfigError
from wirebroker.meta_properties import load_or_create_meta
from wirebroker.zk import znodes

pytestmark = pytest.mark.integration


async def create(
    running: Any, name: str, assignment: dict[int, list[int]] | None = None, **kw: Any
) -> Any:
    if assignment is not None:
        kw["assignments"] = [
            CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=r)
            for p, r in assignment.items()
        ]
        kw.update(num_partitions=-1, replication_factor=-1)
    topic = CreateTopicsRequest.CreatableTopic(name=name, **kw)
    answer = await call(running, CreateTopicsRequest(topics=[topic], timeout_ms=10_000), 7)
    return answer.topics[0]


def test_partitions_configs_and_elections(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)  # offsets topic RF: default
            fake = FakeBroker(2)
            await nursery.start(fake.run, zk_connect)
            cluster = b1.broker.cluster
            assert cluster is not None
            controller = cluster.controller
            await eventually(lambda: set(controller.ctx.live) == {1, 2}, what="2 live")

            # CreatePartitions: 1 -> 3 partitions, assigned over the live brokers
            made = await create(b1, "grow", num_partitions=1, replication_factor=2)
            assert made.error_code == ErrorCode.NONE
            grow = CreatePartitionsRequest(
                topics=[
                    CreatePartitionsRequest.CreatePartitionsTopic(
                        name="grow", count=3, assignments=None
                    )
                ],
                timeout_ms=5000,
            )
            grown = await call(b1, grow, 3)
            assert grown.results[0].error_code == ErrorCode.NONE
            # answered once this broker's metadata has the new partitions' leaders, as Kafka's:
            # a Metadata request that follows finds them
            led = [b1.broker.metadata_cache.partition("grow", p) for p in range(3)]
            assert all(info is not None and info.leader in (1, 2) for info in led), led
            assignment = await cluster.topic_assignment("grow")
            assert assignment is not None and sorted(assignment.partitions) == [0, 1, 2]
            assert all(sorted(r) == [1, 2] for r in assignment.partitions.values())
            await eventually(
                lambda: ("grow", 2) in controller.ctx.states, what="new partition state"
            )
            shrink = await call(b1, grow, 3)  # 3 again: not an increase
            assert shrink.results[0].error_code == ErrorCode.INVALID_PARTITIONS

            # IncrementalAlterConfigs, then DescribeConfigs reads ZooKeeper
            inc = IncrementalAlterConfigsRequest(
                resources=[
                    IncrementalAlterConfigsRequest.AlterConfigsResource(
                        resource_type=2,
                        resource_name="grow",
                        configs=[
                            IncrementalAlterConfigsRequest.AlterableConfig(
                                name="cleanup.policy", config_operation=0, value="compact"
                            )
                        ],
                    )
                ]
            )
            assert (await call(b1, inc, 1)).responses[0].error_code == ErrorCode.NONE
            described = await call(
                b1,
                DescribeConfigsRequest(
                    resources=[
                        DescribeConfigsRequest.DescribeConfigsResource(
                            resource_type=2,
                            resource_name="grow",
                            configuration_keys=["cleanup.policy"],
                        )
                    ]
                ),
                4,
            )
            (entry,) = described.results[0].configs
            assert (entry.name, entry.value) == ("cleanup.policy", "compact")
            await eventually(
                lambda: cluster.topic_configs.get("grow") == {"cleanup.policy": "compact"}
            )
            missing = await call(
                b1,
                DescribeConfigsRequest(
                    resources=[
                        DescribeConfigsRequest.DescribeConfigsResource(
                            resource_type=2, resource_name="nope"
                        )
                    ]
                ),
                4,
            )
            assert missing.results[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

            # unclean election: a partition whose only ISR member (2) is gone
            only2 = await create(b1, "lonely", {0: [2, 1]})
            assert only2.error_code == ErrorCode.NONE
            await eventually(lambda: ("lonely", 0) in controller.ctx.states)
            # broker 2 (leader) shrinks the ISR to itself, then leaves
            info = controller.ctx.states[("lonely", 0)]
            await controller.call(
                lambda: controller.alter_partition(
                    2, fake.epoch, {("lonely", 0): (info.state.leader_epoch, (2,), info.version, 0)}
                )
            )
            assert fake.zk is not None
            await fake.zk.close()
            await eventually(lambda: 2 not in controller.ctx.live, what="broker 2 gone")
            await eventually(
                lambda: controller.ctx.states[("lonely", 0)].state.leader != 2,
                what="the controller to handle the loss",
            )
            state = controller.ctx.states[("lonely", 0)].state
            assert state.leader == -1 and state.isr == (2,)  # offline, ISR not emptied
            elect = ElectLeadersRequest(
                election_type=1,
                topic_partitions=[
                    ElectLeadersRequest.TopicPartitions(topic="lonely", partitions=[0])
                ],
                timeout_ms=1000,
            )
            elected = await call(b1, elect, 1)
            result = elected.replica_election_results[0].partition_result[0]
            assert result.error_code == ErrorCode.NONE
            state = controller.ctx.states[("lonely", 0)].state
            assert state.leader == 1 and state.isr == (1,)
            assert state.leader_recovery_state == 1  # RECOVERING until the leader says otherwise
            got = await cluster.zk.get(znodes.partition_state_path("lonely", 0))
            assert got is not None and got[0].endswith(b',"leader_recovery_state":1}')
            # the new leader reports itself recovered (AlterPartition), as Kafka's leaders do
            info = controller.ctx.states[("lonely", 0)]
            recovered = await controller.call(
                lambda: controller.alter_partition(
                    1,
                    b1.broker.broker_epoch,
                    {("lonely", 0): (info.state.leader_epoch, (1,), info.version, 0)},
                )
            )
            assert recovered[0] == ErrorCode.NONE
            assert controller.ctx.states[("lonely", 0)].state.leader_recovery_state == 0
            again = await call(b1, elect, 1)
            assert (
                again.replica_election_results[0].partition_result[0].error_code
                == ErrorCode.ELECTION_NOT_NEEDED
            )

            # the internal topic needs offsets.topic.replication.factor (Kafka's default, 3)
            # live brokers; with two, the lookup fails and nothing is created, as in Kafka 3.9
            found = await call(b1, FindCoordinatorRequest(key="g", key_type=0), 3)
            assert found.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert await cluster.topic_assignment("__consumer_offsets") is None
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_znode_requests_reassign_and_prefer(zk_connect: str, tmp_path: Path) -> None:
    """The legacy paths tools write: /admin/reassign_partitions, /admin/preferred_replica_election."""

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
            assert (await create(b1, "legacy", {0: [1, 2]})).error_code == ErrorCode.NONE
            await eventually(lambda: ("legacy", 0) in controller.ctx.states)

            # move [1, 2] -> [3, 2]: phase A waits for 3 in the ISR
            await cluster.zk.create(
                znodes.REASSIGN_PARTITIONS,
                znodes.LegacyReassignment({("legacy", 0): [3, 2]}).encode(),
            )
            await eventually(
                lambda: controller.ctx.assignment(("legacy", 0)).adding == (3,), what="phase A"
            )

            def phase_b() -> bool:
                return (
                    controller.ctx.assignment(("legacy", 0)).replicas == (3, 2)
                    and controller.ctx.states[("legacy", 0)].state.leader == 3
                )

            # Broker 1, the leader, adds 3 to the ISR (the fake broker fetches nothing). Its
            # own ISR changes (2 dropped for lagging, say) can make one attempt stale
            # (INVALID_UPDATE_VERSION): each attempt reads the state afresh, until phase B.
            async def towards_phase_b() -> bool:
                """Whether in phase B; if not, one more attempt to add 3 to the ISR."""
                if phase_b():
                    return True
                info = controller.ctx.states[("legacy", 0)]
                isr = tuple(sorted({*info.state.isr, 3}))
                change = (info.state.leader_epoch, isr, info.version, 0)
                if info.state.leader == 1 and 3 not in info.state.isr:
                    await controller.call(
                        lambda: controller.alter_partition(
                            1, b1.broker.broker_epoch, {("legacy", 0): change}
                        )
                    )
                return False

            await eventually(towards_phase_b, 15, 0.05, what="phase B (3 added to the ISR)")
            await eventually(
                lambda: not controller.ctx.legacy_reassignments,
                what="done",
            )
            assert await cluster.zk.exists(znodes.REASSIGN_PARTITIONS) is None

            # leader 3 is preferred already; make 2 lead, then ask for the preferred leader
            info = controller.ctx.states[("legacy", 0)]
            await controller.call(lambda: controller.elect_leaders([("legacy", 0)], unclean=False))
            assert controller.ctx.states[("legacy", 0)].state.leader == 3
            await controller.call(
                lambda: controller._write_states(
                    {("legacy", 0): controller._new_state(("legacy", 0), 2, info.state.isr)}
                )
            )
            await cluster.zk.create(
                znodes.PREFERRED_REPLICA_ELECTION,
                znodes.PreferredReplicaElection(frozenset({("legacy", 0)})).encode(),
            )
            await eventually(
                lambda: controller.ctx.states[("legacy", 0)].state.leader == 3, what="preferred"
            )
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_broker_of_another_cluster_or_a_duplicate_id_does_not_start(
    zk_connect: str, tmp_path: Path
) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await start_broker(nursery, zk_connect, tmp_path, 1)
            # log dirs of another cluster
            other = tmp_path / "broker-2"
            other.mkdir()
            load_or_create_meta([other], 2, "SomeOtherCluster00000w")
            with pytest.raises(BaseException) as e:
                await start_broker(nursery, zk_connect, tmp_path, 2)
            assert "does not match" in str(find_exception(e.value, ConfigError))
            # broker id 1 again, from other log dirs
            with pytest.raises(BaseException) as e:
                await start_broker(nursery, zk_connect, tmp_path / "elsewhere", 1)
            assert "already registered" in str(find_exception(e.value, ConfigError))
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_auto_leader_rebalance(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(
                nursery, zk_connect, tmp_path, 1, leader_imbalance_check_interval_seconds="1"
            )
            fake = FakeBroker(2)
            await nursery.start(fake.run, zk_connect)
            cluster = b1.broker.cluster
            assert cluster is not None
            controller = cluster.controller
            await eventually(lambda: set(controller.ctx.live) == {1, 2}, what="2 live")
            assert (
                await create(b1, "balance", {0: [2, 1], 1: [1, 2]})
            ).error_code == ErrorCode.NONE
            await eventually(lambda: ("balance", 1) in controller.ctx.states)
            tp = ("balance", 0)
            info = controller.ctx.states[tp]
            assert info.state.leader == 2
            # leadership of partition 0 wanders to broker 1 (as after a restart of broker 2)
            await controller.call(
                lambda: controller._write_states({tp: controller._new_state(tp, 1, info.state.isr)})
            )
            assert controller.ctx.states[tp].state.leader == 1
            # broker 2 leads none of its one preferred partition: 100% > 10%, so it gets it back
            await eventually(
                lambda: controller.ctx.states[tp].state.leader == 2, what="auto rebalance"
            )
            assert controller.ctx.states[("balance", 1)].state.leader == 1
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_unclean_election_by_topic_override(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            fake = FakeBroker(2)
            await nursery.start(fake.run, zk_connect)
            cluster = b1.broker.cluster
            assert cluster is not None
            controller = cluster.controller
            await eventually(lambda: set(controller.ctx.live) == {1, 2}, what="2 live")
            unclean = [
                CreateTopicsRequest.CreatableTopicConfig(
                    name="unclean.leader.election.enable", value="true"
                )
            ]
            for name, configs in (("dirty", unclean), ("clean", [])):
                made = await create(b1, name, {0: [2, 1]}, configs=configs)
                assert made.error_code == ErrorCode.NONE
            for name in ("dirty", "clean"):
                await eventually(lambda n=name: (n, 0) in controller.ctx.states)
                info = controller.ctx.states[(name, 0)]
                await controller.call(
                    lambda n=name, i=info: controller.alter_partition(
                        2, fake.epoch, {(n, 0): (i.state.leader_epoch, (2,), i.version, 0)}
                    )
                )
            assert fake.zk is not None
            await fake.zk.close()
            await eventually(lambda: 2 not in controller.ctx.live, what="broker 2 gone")
            # The controller handles the loss partition by partition: wait until both are done.
            await eventually(
                lambda: all(
                    controller.ctx.states[(n, 0)].state.leader != 2 for n in ("dirty", "clean")
                ),
                what="both partitions re-elected",
            )
            dirty = controller.ctx.states[("dirty", 0)].state
            assert (dirty.leader, dirty.isr, dirty.leader_recovery_state) == (1, (1,), 1)
            clean = controller.ctx.states[("clean", 0)].state
            assert (clean.leader, clean.isr) == (-1, (2,))
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_deletion_waits_for_a_replica_that_is_down(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            f2, f3 = FakeBroker(2), FakeBroker(3)
            for f in (f2, f3):
                await nursery.start(f.run, zk_connect)
            cluster = b1.broker.cluster
            assert cluster is not None
            controller = cluster.controller
            await eventually(lambda: set(controller.ctx.live) == {1, 2, 3}, what="3 live")
            assert (await create(b1, "doomed", {0: [2, 3]})).error_code == ErrorCode.NONE
            await eventually(lambda: ("doomed", 0) in controller.ctx.states)
            assert f3.zk is not None
            await f3.zk.close()
            await eventually(lambda: 3 not in controller.ctx.live, what="broker 3 gone")
            answer = await call(b1, DeleteTopicsRequest(topic_names=["doomed"], timeout_ms=1000), 5)
            assert answer.responses[0].error_code == ErrorCode.REQUEST_TIMED_OUT
            assert await cluster.topic_assignment("doomed") is not None
            assert "doomed" in controller.ctx.deleting
            # broker 2 was told the topic is going (leader -2) ...
            await eventually(
                lambda: any(
                    p.leader == -2
                    for r in f2.received(UpdateMetadataRequest)
                    for t in r.topic_states
                    if t.topic_name == "doomed"
                    for p in t.partition_states
                ),
                what="UpdateMetadata with LeaderDuringDelete",
            )
            # ... and once broker 3 is back, both replicas are stopped and the topic is gone
            back = FakeBroker(3)
            await nursery.start(back.run, zk_connect)
            await eventually(lambda: "doomed" not in controller.ctx.topics, what="deleted")
            assert await cluster.topic_assignment("doomed") is None
            assert await cluster.zk.exists(znodes.delete_topic_path("doomed")) is None
            await eventually(lambda: back.received(StopReplicaRequest), what="StopReplica at 3")
            assert not any(
                t.topic_name == "doomed"
                for r in back.received(LeaderAndIsrRequest)
                for t in r.topic_states
            )
            nursery.cancel_scope.cancel()

    trio.run(main)
