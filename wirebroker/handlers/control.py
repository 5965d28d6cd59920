"""LeaderAndIsr v0-v7, UpdateMetadata v0-v8, StopReplica v0-v4: the controller's requests.

Only a broker may send them: the sender must be allowed to act as one
(`RequestContext.authorize_cluster_action`: CLUSTER_ACTION on the cluster with an authorizer, as
Kafka, and here always a request to a cluster member on its inter-broker listener), else the
answer is CLUSTER_AUTHORIZATION_FAILED and nothing changes. The embedded single broker has no
controller but itself and refuses them all. Then each is checked for a stale broker epoch (a
request meant for an earlier registration of this broker, or one without an epoch once this
broker has one: STALE_BROKER_EPOCH, nothing applied). A refused LeaderAndIsr carries its error
on each of its partitions too, as does a StopReplica refused for CLUSTER_ACTION (Kafka's
getErrorResponse of each; its StopReplica of a stale broker epoch lists none). The others are
handed to the replica manager, which refuses an older controller epoch (STALE_CONTROLLER_EPOCH)
and, per partition, a leader epoch that is not newer than ours (LeaderAndIsr:
STALE_CONTROLLER_EPOCH, as Kafka 3.9's ReplicaManager answers; StopReplica: FENCED_LEADER_EPOCH
for an older one).
"""

from __future__ import annotations

import logging

from protocol.errors import KafkaError
from protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from protocol.messages.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from wirebroker.dispatch import RequestContext, handles
from wirebroker.replication.manager import refused_leader_and_isr, refused_stop_replica

log = logging.getLogger(__name__)


@handles(LeaderAndIsrRequest, (0, 7))
async def leader_and_isr(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    manager = ctx.broker.replica_manager
    try:
        ctx.require_cluster_action()
        manager.check_broker_epoch(request.broker_epoch)
    except KafkaError as e:
        log.info("LeaderAndIsr v%d refused: %s", ctx.api_version, e)
        return refused_leader_and_isr(request, ctx.api_version, e.error_code)
    return await manager.become_leader_or_follower(request, ctx.api_version)


@handles(UpdateMetadataRequest, (0, 8))
async def update_metadata(
    ctx: RequestContext, request: UpdateMetadataRequest
) -> UpdateMetadataResponse:
    ctx.require_cluster_action()
    manager = ctx.broker.replica_manager
    manager.check_broker_epoch(request.broker_epoch)
    return UpdateMetadataResponse(error_code=manager.update_metadata(request, ctx.api_version))


@handles(StopReplicaRequest, (0, 4))
async def stop_replica(ctx: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse:
    try:
        ctx.require_cluster_action()
    except KafkaError as e:
        log.info("StopReplica v%d refused: %s", ctx.api_version, e)
        return refused_stop_replica(request, ctx.api_version, e.error_code)
    manager = ctx.broker.replica_manager
    try:
        manager.check_broker_epoch(request.broker_epoch)
    except KafkaError as e:
        return StopReplicaResponse(error_code=e.error_code)  # Kafka lists no partitions then
    return await manager.stop_replicas(request, ctx.api_version)
