"""The controller's APIs: AlterPartition v0-v3, ControlledShutdown v0-v3, ElectLeaders v0-v2,
AlterPartitionReassignments v0, ListPartitionReassignments v0.

In a cluster they run on the active controller's task (`Controller.call`); any other broker
answers NOT_CONTROLLER, as Kafka's brokers do, so the sender looks the controller up again.
An embedded broker is its own controller with one replica per partition: there is nothing to
elect or reassign, and it answers accordingly (AlterPartition and ControlledShutdown, which
only other brokers send, are refused).

Authorization, as Kafka: AlterPartition and ControlledShutdown come from brokers only
(`RequestContext.authorize_cluster_action`: CLUSTER_ACTION, and here always the inter-broker
listener of a cluster member; else CLUSTER_AUTHORIZATION_FAILED, nothing changed); ElectLeaders
and AlterPartitionReassignments need ALTER on the cluster, ListPartitionReassignments DESCRIBE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from protocol.errors import ErrorCode
from protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from protocol.messages.controlled_shutdown import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from protocol.primitives import ZERO_UUID
from wirebroker.authorizer.acls import AclOperation
from wirebroker.controller.errors import ControllerError, NotController
from wirebroker.dispatch import RequestContext, handles

if TYPE_CHECKING:
    from wirebroker.controller.controller import Controller

T = TypeVar("T")
PREFERRED, UNCLEAN = 0, 1
MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "Failed to elect leader for partition: "
    "the preferred replica is not live or not in the ISR.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Failed to elect leader for partition: "
    "no live replica.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "The partition does not exist.",
}


def _active(ctx: RequestContext) -> Controller | None:
    cluster = ctx.broker.cluster
    if cluster is None or not cluster.controller.active:
        return None
    return cluster.controller


@handles(AlterPartitionRequest, (0, 3))
async def alter_partition(
    ctx: RequestContext, request: AlterPartitionRequest
) -> AlterPartitionResponse:
    ctx.require_cluster_action()
    controller = _active(ctx)
    if controller is None:
        return AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER)
    try:
        # Topic ids are resolved on the controller's task, after the events before it (as
        # Kafka queues AlterPartition behind its failover): a new controller still loading
        # the topics must not answer UNKNOWN_TOPIC_ID for a topic it is about to know.
        return await controller.call(lambda: _alter_partition(controller, ctx, request))
    except NotController:
        return AlterPartitionResponse(error_code=ErrorCode.NOT_CONTROLLER)


async def _alter_partition(
    controller: Controller, ctx: RequestContext, request: AlterPartitionRequest
) -> AlterPartitionResponse:
    by_ids = ctx.api_version >= 2
    changes: dict[tuple[str, int], tuple[int, tuple[int, ...], int, int]] = {}
    unknown_ids: list[AlterPartitionResponse.TopicData] = []
    for topic in request.topics:
        name: str | None = topic.topic_name
        if by_ids:
            name = next(
                (n for n, t in controller.ctx.topics.items() if t.topic_id == topic.topic_id),
                None,
            )
            if name is None:
                unknown_ids.append(
                    AlterPartitionResponse.TopicData(
                        topic_id=topic.topic_id,
                        partitions=[
                            AlterPartitionResponse.PartitionData(
                                partition_index=p.partition_index,
                                error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                            )
                            for p in topic.partitions
                        ],
                    )
                )
                continue
        if name is None:
            continue
        for p in topic.partitions:
            isr = (
                tuple(b.broker_id for b in p.new_isr_with_epochs)
                if ctx.api_version >= 3
                else tuple(p.new_isr)
            )
            changes[(name, p.partition_index)] = (
                p.leader_epoch,
                isr,
                p.partition_epoch,
                p.leader_recovery_state,
            )
    code, results = await controller.alter_partition(
        request.broker_id, request.broker_epoch, changes
    )
    if code != ErrorCode.NONE:
        return AlterPartitionResponse(error_code=code)
    topics: dict[str, AlterPartitionResponse.TopicData] = {}
    for (name, index), result in results.items():
        data = topics.get(name)
        if data is None:
            data = topics[name] = AlterPartitionResponse.TopicData(
                topic_name=name, topic_id=controller.ctx.topic_id(name) if by_ids else ZERO_UUID
            )
        if isinstance(result, ErrorCode):
            data.partitions.append(
                AlterPartitionResponse.PartitionData(partition_index=index, error_code=result)
            )
        else:
            data.partitions.append(
                AlterPartitionResponse.PartitionData(
                    partition_index=index,
                    error_code=ErrorCode.NONE,
                    leader_id=result.state.leader,
                    leader_epoch=result.state.leader_epoch,
                    isr=list(result.state.isr),
                    leader_recovery_state=result.state.leader_recovery_state,
                    partition_epoch=result.version,
                )
            )
    return AlterPartitionResponse(
        error_code=ErrorCode.NONE, topics=[*topics.values(), *unknown_ids]
    )


@handles(ControlledShutdownRequest, (0, 3))
async def controlled_shutdown(
    ctx: RequestContext, request: ControlledShutdownRequest
) -> ControlledShutdownResponse:
    ctx.require_cluster_action()
    controller = _active(ctx)
    if controller is None:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)
    epoch = request.broker_epoch if ctx.api_version >= 2 else -1
    try:
        remaining = await controller.call(
            lambda: controller.controlled_shutdown(request.broker_id, epoch)
        )
    except NotController:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)
    except ControllerError as e:
        return ControlledShutdownResponse(error_code=e.code)
    return ControlledShutdownResponse(
        error_code=ErrorCode.NONE,
        remaining_partitions=[
            ControlledShutdownResponse.RemainingPartition(topic_name=t, partition_index=p)
            for t, p in sorted(remaining)
        ],
    )


@handles(ElectLeadersRequest, (0, 2))
async def elect_leaders(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    unclean = ctx.api_version >= 1 and request.election_type == UNCLEAN
    if request.topic_partitions is None:
        wanted: list[tuple[str, int]] | None = None
    else:
        wanted = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    refused = not ctx.authorize_cluster(AclOperation.ALTER)
    if refused:  # as Kafka: the code at the top and in every partition asked for
        results = {tp: ErrorCode.CLUSTER_AUTHORIZATION_FAILED for tp in wanted or []}
    elif ctx.broker.cluster is None:
        results = _embedded_elections(ctx, wanted)
    else:
        controller = _active(ctx)
        if controller is None:
            return ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER)
        try:
            results = await controller.call(lambda: controller.elect_leaders(wanted, unclean))
        except NotController:
            return ElectLeadersResponse(error_code=ErrorCode.NOT_CONTROLLER)
    if wanted is None:
        # All partitions: as Kafka, only those elected or failed are reported.
        results = {tp: c for tp, c in results.items() if c != ErrorCode.ELECTION_NOT_NEEDED}
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for (topic, index), code in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            ElectLeadersResponse.PartitionResult(
                partition_id=index, error_code=code, error_message=MESSAGES.get(code)
            )
        )
    return ElectLeadersResponse(
        error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED if refused else ErrorCode.NONE,
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=t, partition_result=r)
            for t, r in by_topic.items()
        ],
    )


def _embedded_elections(
    ctx: RequestContext, wanted: list[tuple[str, int]] | None
) -> dict[tuple[str, int], ErrorCode]:
    broker = ctx.broker
    if wanted is None:
        return {(tp.topic, tp.partition): ErrorCode.ELECTION_NOT_NEEDED for tp in broker.partitions}
    return {
        tp: ErrorCode.ELECTION_NOT_NEEDED
        if broker.partition(*tp) is not None
        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for tp in wanted
    }


@handles(AlterPartitionReassignmentsRequest, (0, 0))
async def alter_partition_reassignments(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    ctx.require_cluster(AclOperation.ALTER)
    targets = {
        (t.name, p.partition_index): (list(p.replicas) if p.replicas is not None else None)
        for t in request.topics
        for p in t.partitions
    }
    results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    if ctx.broker.cluster is None:
        for tp, target in targets.items():
            if ctx.broker.partition(*tp) is None:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
            elif target is None:
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            elif target == [ctx.broker.node_id]:
                results[tp] = (ErrorCode.NONE, None)
            else:
                results[tp] = (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"the only broker is {ctx.broker.node_id}",
                )
    else:
        controller = _active(ctx)
        if controller is None:
            return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)
        try:
            results = await controller.call(lambda: controller.reassignment.reassign(targets))
        except NotController:
            return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)
    by_topic: dict[
        str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]
    ] = {}
    for (topic, index), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(
            AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
                partition_index=index, error_code=code, error_message=message
            )
        )
    return AlterPartitionReassignmentsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        responses=[
            AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=t, partitions=p)
            for t, p in by_topic.items()
        ],
    )


@handles(ListPartitionReassignmentsRequest, (0, 0))
async def list_partition_reassignments(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    ctx.require_cluster(AclOperation.DESCRIBE)
    if ctx.broker.cluster is None:
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.NONE, error_message=None)
    controller = _active(ctx)
    if controller is None:
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)
    wanted = (
        None
        if request.topics is None
        else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    )
    try:
        ongoing = await controller.call(
            lambda: _async_value(controller.reassignment.ongoing(wanted))
        )
    except NotController:
        return ListPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)
    by_topic: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
    for (topic, index), a in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append(
            ListPartitionReassignmentsResponse.OngoingPartitionReassignment(
                partition_index=index,
                replicas=list(a.replicas),
                adding_replicas=list(a.adding),
                removing_replicas=list(a.removing),
            )
        )
    return ListPartitionReassignmentsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        topics=[
            ListPartitionReassignmentsResponse.OngoingTopicReassignment(name=t, partitions=p)
            for t, p in by_topic.items()
        ],
    )


async def _async_value(value: T) -> T:
    return value
