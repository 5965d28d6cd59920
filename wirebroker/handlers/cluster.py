"""DescribeCluster, v0-v1.

Lists the live brokers (v1: endpoint type 1, brokers; controllers are not listed, as in ZooKeeper
mode), the cluster id, and the controller id, from the metadata cache (embedded: this broker,
its own controller). The cluster's authorized operations, when asked for, are 0 without DESCRIBE
on the cluster, else those the ACLs allow, as Kafka.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from wirebroker.authorizer.acls import (
    CLUSTER_NAME,
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
)
from wirebroker.dispatch import RequestContext, handles

BROKERS = 1


@handles(DescribeClusterRequest, (0, 1))
async def describe_cluster(
    ctx: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    broker = ctx.broker
    if request.endpoint_type != BROKERS:
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="only broker endpoints are described",
            endpoint_type=request.endpoint_type,
        )
    cache = broker.metadata()
    brokers = []
    for b in cache.alive_brokers():
        endpoint = b.endpoint(ctx.listener_name)  # as Kafka: those on the client's listener
        if endpoint is not None:
            brokers.append(
                DescribeClusterResponse.DescribeClusterBroker(
                    broker_id=b.id, host=endpoint.host, port=endpoint.port, rack=b.rack
                )
            )
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        endpoint_type=BROKERS,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        brokers=brokers,
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


def _cluster_operations(ctx: RequestContext, request: DescribeClusterRequest) -> int:
    """As Kafka: 0 without DESCRIBE on the cluster, else the operations the ACLs allow."""
    if not request.include_cluster_authorized_operations:
        return NOT_REQUESTED
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
