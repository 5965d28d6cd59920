"""The controller's APIs on an embedded broker: its own controller, one replica per partition.

There is nothing to elect or move, and no other broker to send AlterPartition or
ControlledShutdown, so those two are refused (CLUSTER_AUTHORIZATION_FAILED: no one may act as a
broker towards it; cluster mode is in tests/cluster).
"""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode
from protocol.messages.alter_partition import AlterPartitionRequest
from protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from protocol.messages.controlled_shutdown import ControlledShutdownRequest
from protocol.messages.describe_cluster import DescribeClusterRequest
from protocol.messages.elect_leaders import ElectLeadersRequest
from protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import RawClient, create_topic

pytestmark = pytest.mark.integration


def test_embedded_broker_is_its_own_controller(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    with RawClient(broker.bootstrap) as client:
        assert client.request(DescribeClusterRequest(), 1).controller_id == 0
        elect = ElectLeadersRequest(
            election_type=0,
            topic_partitions=[ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0, 5])],
            timeout_ms=1000,
        )
        answer = client.request(elect, 2)
        codes = {
            r.partition_id: r.error_code
            for r in answer.replica_election_results[0].partition_result
        }
        assert codes == {
            0: ErrorCode.ELECTION_NOT_NEEDED,
            5: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        # For all partitions, those already on their preferred leader are not reported.
        every = client.request(
            ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=1000), 2
        )
        assert (every.error_code, every.replica_election_results) == (ErrorCode.NONE, [])
        listed = client.request(ListPartitionReassignmentsRequest(topics=None), 0)
        assert (listed.error_code, listed.topics) == (ErrorCode.NONE, [])
        move = AlterPartitionReassignmentsRequest(
            topics=[
                AlterPartitionReassignmentsRequest.ReassignableTopic(
                    name=topic,
                    partitions=[
                        AlterPartitionReassignmentsRequest.ReassignablePartition(
                            partition_index=0, replicas=[0]
                        ),
                        AlterPartitionReassignmentsRequest.ReassignablePartition(
                            partition_index=1, replicas=[3]
                        ),
                    ],
                )
            ]
        )
        moved = client.request(move, 0)
        codes = {p.partition_index: p.error_code for p in moved.responses[0].partitions}
        assert codes == {0: ErrorCode.NONE, 1: ErrorCode.INVALID_REPLICA_ASSIGNMENT}
        cancel = AlterPartitionReassignmentsRequest(
            topics=[
                AlterPartitionReassignmentsRequest.ReassignableTopic(
                    name=topic,
                    partitions=[
                        AlterPartitionReassignmentsRequest.ReassignablePartition(
                            partition_index=0, replicas=None
                        )
                    ],
                )
            ]
        )
        cancelled = client.request(cancel, 0)
        assert (
            cancelled.responses[0].partitions[0].error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        )
        shutdown = client.request(ControlledShutdownRequest(broker_id=0, broker_epoch=-1), 3)
        assert shutdown.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        alter = client.request(AlterPartitionRequest(broker_id=0, broker_epoch=-1), 3)
        assert alter.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
