"""DescribeCluster, v0-v1.

Lists the brokers (v1: endpoint type 1, brokers; controllers are not listed, as in ZooKeeper
mode), the cluster id, and the controller id. Embedded, that is this broker alone, its own
controller; in a cluster, the brokers registered in ZooKeeper and whoever holds `/controller`.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from wirebroker import authorized_operations as ops
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
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        endpoint_type=BROKERS,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        brokers=_brokers(ctx),
        cluster_authorized_operations=(
            ops.CLUSTER if request.include_cluster_authorized_operations else ops.NOT_REQUESTED
        ),
    )


def _brokers(ctx: RequestContext) -> list[DescribeClusterResponse.DescribeClusterBroker]:
    broker = ctx.broker
    if broker.cluster is None:
        return [
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=broker.node_id, host=listener.host, port=listener.port, rack=None
            )
            for listener in broker.advertised[:1]
        ]
    out = []
    for broker_id, registration in sorted(broker.cluster.registrations.items()):
        try:
            ep = registration.endpoint(ctx.listener_name)
        except KeyError:
            continue
        out.append(
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=broker_id, host=ep.host, port=ep.port, rack=registration.rack
            )
        )
    return out
