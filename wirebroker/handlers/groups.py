"""The classic group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, ListGroups, DeleteGroups — every version Kafka 3.9 accepts.

- FindCoordinator v0-6: key type 0 (group) and 1 (transaction) both answer with this broker
  when embedded; in a cluster, with the leader of the key's `__consumer_offsets` (group) or
  `__transaction_state` (transaction) partition, COORDINATOR_NOT_AVAILABLE while it has none.
  Other key types get INVALID_REQUEST. v4+ batches keys. A lookup creates the topic on first
  use and answers COORDINATOR_NOT_AVAILABLE until the key's partition exists, as Kafka's
  (clients ask again); embedded, its logs are made off the loop meanwhile.
- JoinGroup v0-9: v0 has no rebalance timeout (the session timeout is used, as Kafka does);
  v4+ requires a known member id (KIP-394, MEMBER_ID_REQUIRED); v5+ static membership; v9
  `skip_assignment` is set for a static leader rejoining a stable group (before v9 that leader
  gets the member list and its SyncGroup, the group being Stable, returns its assignment).
- SyncGroup v0-5 (v5 checks protocol type and name), Heartbeat v0-4.
- LeaveGroup v0-5: v0-2 one member (its code is the top-level code), v3+ batched members.
- DescribeGroups v0-5: an unknown group is described as Dead with no error (Kafka < v6);
  member metadata and assignments only for a Stable group, as Kafka does.
- ListGroups v0-5: v4 state filter, v5 type filter (every group here is "classic").
- DeleteGroups v0-2: only Empty groups (NON_EMPTY_GROUP otherwise).

In a cluster, a group this broker does not coordinate (its `__consumer_offsets` partition is led
elsewhere) gets NOT_COORDINATOR: top-level in JoinGroup, SyncGroup, Heartbeat and LeaveGroup,
per group in DescribeGroups (with an empty state) and DeleteGroups; ListGroups lists only the
groups coordinated here, as Kafka's brokers each do. While a group's partition loads, the same
places answer COORDINATOR_LOAD_IN_PROGRESS (ListGroups at the top, beside what it lists);
FindCoordinator still answers.

Authorization, as Kafka: FindCoordinator needs DESCRIBE on the group (or the transactional id)
it names; JoinGroup, SyncGroup, Heartbeat and LeaveGroup READ on the group, else
GROUP_AUTHORIZATION_FAILED for the request; DescribeGroups DESCRIBE per group (refused groups
come first, with no state); ListGroups lists every group with DESCRIBE on the cluster, else
those the client may DESCRIBE; DeleteGroups DELETE per group (refused ones come last).
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from wirebroker import auto_topics
from wirebroker.authorizer.acls import (
    AUTHORIZATION_MESSAGES,
    NOT_REQUESTED,
    AclOperation,
    ResourceType,
)
from wirebroker.dispatch import RequestContext, handles
from wirebroker.group.state import GroupState
from wirebroker.topics import OFFSETS_TOPIC, TXN_TOPIC

GROUP_KEY, TRANSACTION_KEY = 0, 1
CLASSIC = "classic"


@handles(FindCoordinatorRequest, (0, 6))
async def find_coordinator(
    ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    listener = next(
        (a for a in ctx.broker.advertised if a.name == ctx.listener_name),
        ctx.broker.advertised[0] if ctx.broker.advertised else None,
    )
    host, port = (listener.host, listener.port) if listener else ("", -1)
    keys = request.coordinator_keys if ctx.api_version >= 4 else [request.key]
    found = []
    for key in keys:
        c = FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1)
        if request.key_type not in (GROUP_KEY, TRANSACTION_KEY):
            c.error_code = ErrorCode.INVALID_REQUEST
            c.error_message = f"unknown coordinator key type {request.key_type}"
        elif not key:
            c.error_code = ErrorCode.INVALID_REQUEST
            c.error_message = "the coordinator key is empty"
        elif (refused := _coordinator_refused(ctx, request.key_type, key)) is not None:
            c.error_code = refused
            if ctx.api_version < 4:
                c.error_message = AUTHORIZATION_MESSAGES[refused]
        else:
            code = await _ensure_topic(ctx, request.key_type, key)
            if code != ErrorCode.NONE:
                c.error_code = code
                c.error_message = None
            elif ctx.broker.cluster_mode:
                _cluster_coordinator(ctx, request.key_type, key, c)
            else:
                c.node_id, c.host, c.port = ctx.broker.node_id, host, port
                c.error_message = "NONE"  # Kafka sends Errors.NONE.message() on success
        found.append(c)
    if ctx.api_version >= 4:
        return FindCoordinatorResponse(coordinators=found)
    c = found[0]
    return FindCoordinatorResponse(
        error_code=c.error_code,
        error_message=c.error_message,
        node_id=c.node_id,
        host=c.host,
        port=c.port,
    )


def _coordinator_refused(ctx: RequestContext, key_type: int, key: str) -> ErrorCode | None:
    """A group key needs DESCRIBE on the group, a transactional one on the transactional id."""
    if key_type == GROUP_KEY:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return None


async def _ensure_topic(ctx: RequestContext, key_type: int, key: str) -> ErrorCode:
    """The coordinator's topic exists: created on first use (`wirebroker.auto_topics`: embedded
    here, off the loop, COORDINATOR_NOT_AVAILABLE until the key's partition is served; in a
    cluster in ZooKeeper with its replication factor). As in Kafka 3.9 the factor is not capped
    at the live brokers: until enough are up the coordinator is not available."""
    broker = ctx.broker
    cluster = broker.cluster
    name = OFFSETS_TOPIC if key_type == GROUP_KEY else TXN_TOPIC
    if cluster is None:
        if broker.cluster_mode:
            return ErrorCode.NONE
        if auto_topics.internal_partition_served(broker, *_partition_of(ctx, key_type, key)):
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if await cluster.topic_assignment(name) is not None:
        return ErrorCode.NONE
    try:
        await auto_topics.create(broker, name)
    except KafkaError as e:
        if e.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.NONE


def _partition_of(ctx: RequestContext, key_type: int, key: str) -> tuple[str, int]:
    """The coordinator's topic and the key's partition in it."""
    if key_type == GROUP_KEY:
        return OFFSETS_TOPIC, ctx.broker.groups.group_manager.partition_of(key)
    return TXN_TOPIC, ctx.broker.transactions.state.partition_for(key)


def _cluster_coordinator(
    ctx: RequestContext, key_type: int, key: str, c: FindCoordinatorResponse.Coordinator
) -> None:
    """In a cluster the coordinator of a key is the leader of its partition."""
    cache = ctx.broker.metadata_cache
    p = cache.partition(*_partition_of(ctx, key_type, key))
    endpoint = None
    if p is not None:
        endpoint = cache.endpoint(p.leader, ctx.listener_name)
    if p is None or endpoint is None:
        c.error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        c.error_message = "the coordinator is not available"
        return
    c.node_id, c.host, c.port = p.leader, endpoint.host, endpoint.port
    c.error_message = "NONE"


@handles(JoinGroupRequest, (0, 9))
async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    version = ctx.api_version
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return JoinGroupResponse(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            protocol_name=None if version >= 7 else "",  # as Kafka's error answer
        )
    rebalance_timeout = request.session_timeout_ms if version == 0 else request.rebalance_timeout_ms
    with ctx.waiting():  # for the rebalance
        result = await ctx.broker.groups.join(
            request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 5 else None,
            client_id=ctx.client_id or "",
            client_host=f"/{ctx.client_host}",
            rebalance_timeout_ms=rebalance_timeout,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            require_known_member_id=version >= 4,
        )
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment and version >= 9,
        member_id=result.member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata
            )
            for m in result.members
        ],
    )


@handles(SyncGroupRequest, (0, 5))
async def sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
    v5 = ctx.api_version >= 5
    with ctx.waiting():  # for the leader's assignment
        result = await ctx.broker.groups.sync(
            request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            generation_id=request.generation_id,
            protocol_type=request.protocol_type if v5 else None,
            protocol_name=request.protocol_name if v5 else None,
            assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
        )
    return SyncGroupResponse(
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


@handles(HeartbeatRequest, (0, 4))
async def heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    ctx.require(AclOperation.READ, ResourceType.GROUP, request.group_id)
    error = ctx.broker.groups.heartbeat(
        request.group_id, request.member_id, request.group_instance_id, request.generation_id
    )
    return HeartbeatResponse(error_code=error)


@handles(LeaveGroupRequest, (0, 5))
async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        # Kafka answers the code alone, listing no members
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = ctx.broker.groups.group_manager.coordinator_error(request.group_id)
    if error != ErrorCode.NONE:
        return LeaveGroupResponse(error_code=error)
    if ctx.api_version < 3:
        (error,) = ctx.broker.groups.leave(request.group_id, [(request.member_id, None)])
        return LeaveGroupResponse(error_code=error)
    members = [(m.member_id, m.group_instance_id) for m in request.members]
    errors = ctx.broker.groups.leave(request.group_id, members)
    return LeaveGroupResponse(
        error_code=ErrorCode.NONE,
        members=[
            LeaveGroupResponse.MemberResponse(
                member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=e
            )
            for m, e in zip(request.members, errors, strict=True)
        ],
    )


@handles(DescribeGroupsRequest, (0, 5))
async def describe_groups(
    ctx: RequestContext, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    refused = []  # listed first, as Kafka does
    described = []
    for group_id in request.groups:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            refused.append(
                DescribeGroupsResponse.DescribedGroup(
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    group_id=group_id,
                    group_state="",
                    authorized_operations=NOT_REQUESTED,
                )
            )
            continue
        error = ctx.broker.groups.group_manager.coordinator_error(group_id)
        group = ctx.broker.groups.describe(group_id) if error == ErrorCode.NONE else None
        d = DescribeGroupsResponse.DescribedGroup(
            error_code=error,
            group_id=group_id,
            # Kafka describes a group it does not coordinate with no state at all
            group_state=GroupState.DEAD.value if error == ErrorCode.NONE else "",
            authorized_operations=(
                ctx.authorized_operations(ResourceType.GROUP, group_id)
                if request.include_authorized_operations and error == ErrorCode.NONE
                else NOT_REQUESTED
            ),
        )
        described.append(d)
        if group is None:
            continue
        stable = group.state == GroupState.STABLE
        d.group_state = group.state.value
        d.protocol_type = group.protocol_type or ""
        d.protocol_data = (group.protocol_name or "") if stable else ""
        d.members = [
            DescribeGroupsResponse.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata(group.protocol_name) if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
    return DescribeGroupsResponse(groups=refused + described)


@handles(ListGroupsRequest, (0, 5))
async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    states = {s.lower() for s in request.states_filter}
    types = {t.lower() for t in request.types_filter}
    listed = []
    # As Kafka: DESCRIBE on the cluster lists every group, else those the client may describe.
    every = ctx.authorize_cluster(AclOperation.DESCRIBE, log_if_denied=False)
    for group in ctx.broker.groups.list_groups():
        if states and group.state.value.lower() not in states:
            continue
        if not every and not ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id, log_if_denied=False
        ):
            continue
        if types and CLASSIC not in types:
            continue
        listed.append(
            ListGroupsResponse.ListedGroup(
                group_id=group.group_id,
                protocol_type=group.protocol_type or "",
                group_state=group.state.value,
                group_type=CLASSIC,
            )
        )
    # Kafka lists what it has and says some partitions are still loading
    error = (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if ctx.broker.groups.group_manager.loading
        else ErrorCode.NONE
    )
    return ListGroupsResponse(error_code=error, groups=listed)


@handles(DeleteGroupsRequest, (0, 2))
async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    names = list(dict.fromkeys(request.groups_names))
    allowed = ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, names)
    return DeleteGroupsResponse(
        results=[
            DeleteGroupsResponse.DeletableGroupResult(
                group_id=g, error_code=ctx.broker.groups.group_manager.delete_group(g)
            )
            for g in names
            if g in allowed
        ]
        + [
            DeleteGroupsResponse.DeletableGroupResult(
                group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED
            )
            for g in names
            if g not in allowed
        ]
    )
