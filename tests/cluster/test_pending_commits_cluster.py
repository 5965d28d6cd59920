"""Offset commits still being written when their offsets are removed, on a real three-broker
cluster of processes (RF 3, min.insync.replicas 2).

A commit is answered once every in-sync replica has it, so a follower of the group's
`__consumer_offsets` partition stopped with SIGSTOP holds it in flight. Meanwhile, as in Kafka
3.9 (GroupMetadata.removeOffsets, hasOffsets): OffsetDelete, DeleteGroups and the deletion of
the commit's topic drop it (acknowledged when the follower resumes, it is never installed, and
the group left without offsets is gone), while the retention check expires the group's other
offsets but keeps the group, whose commit then lands. The leader is then stopped: what its
successor loads from the log agrees. The test runs against Kafka 3.9 too
(``WIREBROKER_CLUSTER_TARGET=kafka``), where it shows the one difference: Kafka tombstones only
the committed offsets it removes, so a dropped commit of a partition that had none comes back
at the next load; ours is tombstoned too and stays gone.
"""

from __future__ import annotations

from contextlib import ExitStack
from functools import partial

import pytest

from compat.transactions import group_offset
from protocol.errors import ErrorCode
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from tests.cluster.processes import Cluster, running_cluster, wait_for
from tests.wirebroker.helpers import RawClient, offset_commit_request, offset_delete_request
from wirebroker.topics import OFFSETS_TOPIC

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

E = ErrorCode
TOPIC = "kept"  # partition 0: OffsetDelete, 1: DeleteGroups, 2 and 3: expiry
DELETED = "deleted"
RETENTION_MS = 4000  # of the offset that expires while its group's other commit is in flight

#: One `__consumer_offsets` partition (one coordinator for every group); the commit's wait,
#: the follower's lag and its ZooKeeper session outlast the pause by far.
OVERRIDES = {
    "offsets.topic.num.partitions": "1",
    "offsets.commit.timeout.ms": "60000",
    "replica.lag.time.max.ms": "60000",
    "zookeeper.session.timeout.ms": "60000",
    "offsets.retention.check.interval.ms": "200",
}

Offsets = dict[tuple[str, int], int]


def committed(c: RawClient, request: OffsetCommitRequest, version: int) -> None:
    """Commit, again while the coordinator still loads (a new `__consumer_offsets`)."""

    def done() -> bool:
        answer = c.request(request, version)
        return bool(answer.topics[0].partitions[0].error_code == E.NONE)

    wait_for(done, 30, f"a commit of {request.group_id}")


def fetched(c: RawClient, group: str) -> Offsets:
    """The group's committed offsets (OffsetFetch v8 of every partition)."""
    request = OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]
    )
    (answer,) = c.request(request, 8).groups
    assert answer.error_code == E.NONE, answer
    return {
        (t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
    }


def unstable(bootstrap: str, group: str, topic: str, partition: int) -> bool:
    """Whether `group` has a commit of the partition in flight (require_stable says so)."""
    found = group_offset(bootstrap, group, topic, partition)
    return bool(found["require_stable_error"] == E.UNSTABLE_OFFSET_COMMIT)


def state(c: RawClient, group: str) -> str:
    (described,) = c.request(DescribeGroupsRequest(groups=[group]), 5).groups
    assert described.error_code == E.NONE
    return str(described.group_state)


def coordinator(cluster: Cluster) -> int:
    """The broker that coordinates the groups (`__consumer_offsets` made on first lookup)."""

    def found() -> int | None:
        asked = next(i for i, n in cluster.nodes.items() if n.alive())
        with RawClient(address(cluster, asked), timeout=5) as c:
            answer = c.request(FindCoordinatorRequest(key="any", key_type=0), 3)
        node = int(answer.node_id)
        return node if answer.error_code == E.NONE and cluster.node(node).alive() else None

    return int(wait_for(found, 60, "a group coordinator"))


def address(cluster: Cluster, node_id: int) -> str:
    return f"127.0.0.1:{cluster.node(node_id).port}"


def test_commits_in_flight_when_their_offsets_are_removed(kind: str) -> None:
    with running_cluster(kind, overrides=OVERRIDES) as cluster:
        cluster.create_topic(TOPIC, 4)
        cluster.create_topic(DELETED, 1)
        leader = coordinator(cluster)
        cluster.wait_fully_replicated(OFFSETS_TOPIC)
        (offsets_partition,) = cluster.partitions(OFFSETS_TOPIC).values()
        # a follower whose silence holds the commits; not the controller, which deletes topics
        controller = cluster.controller()
        stopped = next(n for n in offsets_partition.replicas if n not in (leader, controller))
        groups = {
            "offset-deleted": (TOPIC, 0),
            "group-deleted": (TOPIC, 1),
            "topic-deleted": (DELETED, 0),
        }
        # dropped by OffsetDelete too, but without an offset committed before
        pending = {**groups, "never-committed": (TOPIC, 0), "expiring": (TOPIC, 3)}
        leader_at = address(cluster, leader)
        with RawClient(leader_at, timeout=30) as c, ExitStack() as closing:
            # a connection per commit in flight: a broker reads a connection's next request
            # only once it answered the one before
            in_flight = {
                g: closing.enter_context(RawClient(leader_at, timeout=90)) for g in pending
            }
            for group, (topic, partition) in groups.items():
                committed(c, offset_commit_request(group, topic, {partition: 5}), 8)
            # (v2: with its own retention) the last commit before the pause
            request = offset_commit_request(
                "expiring", TOPIC, {2: 5}, retention_time_ms=RETENTION_MS
            )
            committed(c, request, 2)

            cluster.pause(stopped)
            try:
                sent = {
                    g: in_flight[g].send(offset_commit_request(g, topic, {partition: 9}), 8)
                    for g, (topic, partition) in pending.items()
                }
                for group, (topic, partition) in pending.items():
                    what = f"{group}'s commit in flight"
                    wait_for(partial(unstable, leader_at, group, topic, partition), 10, what)

                for group in ("offset-deleted", "never-committed"):
                    answer = c.request(offset_delete_request(group, TOPIC, [0]), 0)
                    assert answer.error_code == E.NONE
                    assert answer.topics[0].partitions[0].error_code == E.NONE
                answer = c.request(DeleteGroupsRequest(groups_names=["group-deleted"]), 2)
                assert answer.results[0].error_code == E.NONE
                with RawClient(address(cluster, controller)) as admin:
                    deletion = admin.send(
                        DeleteTopicsRequest(topic_names=[DELETED], timeout_ms=1), 5
                    )
                    admin.receive(DeleteTopicsRequest, 5, deletion)
                # the coordinator learns of the deletion with its metadata (UpdateMetadata)
                wait_for(lambda: not _known(c, DELETED), 30, "the deletion at the coordinator")

                # the retention check expires the offset without a commit in flight, but an
                # Empty group with one in flight is not Dead (Kafka's hasOffsets)
                wait_for(
                    lambda: (TOPIC, 2) not in fetched(c, "expiring"),
                    RETENTION_MS / 1000 + 20,
                    "the expiry of the offset without a commit in flight",
                )
                assert unstable(leader_at, "expiring", TOPIC, 3)
                assert state(c, "expiring") == "Empty"
            finally:
                cluster.resume(stopped)

            for group, correlation_id in sent.items():
                answer = in_flight[group].receive(OffsetCommitRequest, 8, correlation_id)
                assert answer.topics[0].partitions[0].error_code == E.NONE
            expected: dict[str, Offsets] = dict.fromkeys(pending, {})
            expected["expiring"] = {(TOPIC, 3): 9}
            assert {g: fetched(c, g) for g in expected} == expected
            assert {state(c, g) for g in pending if g != "expiring"} == {"Dead"}

        # what the next coordinator loads from the log agrees (Kafka's: but for the commit
        # dropped without a tombstone, read again)
        if kind == "kafka":
            expected["never-committed"] = {(TOPIC, 0): 9}
        cluster.node(leader).stop()
        successor = coordinator(cluster)
        assert successor != leader
        with RawClient(address(cluster, successor), timeout=30) as c:
            assert wait_for(
                lambda: {g: fetched(c, g) for g in expected} == expected,
                60,
                "the groups loaded by the next coordinator",
            )


def _known(c: RawClient, topic: str) -> bool:
    """Whether the broker's metadata still has the topic."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    (answer,) = c.request(request, 12).topics
    return bool(answer.error_code == E.NONE)
