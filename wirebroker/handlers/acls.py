"""DescribeAcls v0-3, CreateAcls v0-3, DeleteAcls v0-3 (Kafka's AclApis).

DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER (else
CLUSTER_AUTHORIZATION_FAILED); without an authorizer they answer SECURITY_DISABLED, as Kafka.
Filters match as Kafka's AclBindingFilter (ANY and MATCH pattern types, null names, principals
and hosts: see `wirebroker.authorizer.acls`); DeleteAcls reports, per filter, the bindings it
removed. As Kafka: a request naming an UNKNOWN (code 0) element is unparsable and closes the
connection, a creation on the CLUSTER resource must name `kafka-cluster` and no
creation may have an empty name (INVALID_REQUEST), nor an unknown element or a `/` in its name
(INVALID_REQUEST), and a principal that is not `Type:name` fails every creation on that
pattern (UNKNOWN_SERVER_ERROR). v0 has no pattern types: its patterns are LITERAL.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from wirebroker.authorizer.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    from_code,
    parse_principal,
    storable,
)
from wirebroker.dispatch import CloseConnection, RequestContext, handles

NO_AUTHORIZER = "No Authorizer is configured."
Creation = CreateAclsRequest.AclCreation
CreationResult = CreateAclsResponse.AclCreationResult


@handles(DescribeAclsRequest, (0, 3))
async def describe_acls(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    binding_filter = _filter(ctx, request)
    ctx.require_cluster(AclOperation.DESCRIBE)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return DescribeAclsResponse(
            error_code=ErrorCode.SECURITY_DISABLED,
            error_message="No Authorizer is configured on the broker",
        )
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for pattern, entry in authorizer.acls(binding_filter):
        by_pattern.setdefault(pattern, []).append(entry)
    return DescribeAclsResponse(
        resources=[
            DescribeAclsResponse.DescribeAclsResource(
                resource_type=pattern.resource_type,
                resource_name=pattern.name,
                pattern_type=pattern.pattern_type,
                acls=[
                    DescribeAclsResponse.AclDescription(
                        principal=e.principal,
                        host=e.host,
                        operation=e.operation,
                        permission_type=e.permission_type,
                    )
                    for e in entries
                ],
            )
            for pattern, entries in by_pattern.items()
        ]
    )


@handles(CreateAclsRequest, (0, 3))
async def create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    for c in request.creations:
        _check_parsable(
            ctx, c.resource_pattern_type, c.resource_type, c.operation, c.permission_type
        )
    ctx.require_cluster(AclOperation.ALTER)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return _create_failed(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    bindings = [_binding(c) for c in request.creations]
    if any(b is None for b in bindings):
        # Kafka cannot even build such a binding (ANY or MATCH where a value is needed)
        return _create_failed(request, ErrorCode.UNKNOWN_SERVER_ERROR, None)
    results = [CreationResult() for _ in bindings]
    valid: list[tuple[int, tuple[ResourcePattern, AccessControlEntry]]] = []
    bad_principal: set[ResourcePattern] = set()
    for i, binding in enumerate(bindings):
        assert binding is not None
        pattern, entry = binding
        problem = _creation_problem(pattern, entry)
        if problem is not None:
            results[i].error_code, results[i].error_message = ErrorCode.INVALID_REQUEST, problem
            continue
        try:
            parse_principal(entry.principal)
        except ValueError:
            bad_principal.add(pattern)
        valid.append((i, binding))
    for i, (pattern, _) in valid:
        if pattern in bad_principal:
            results[i].error_code, results[i].error_message = ErrorCode.UNKNOWN_SERVER_ERROR, None
    to_create = [(i, b) for i, b in valid if b[0] not in bad_principal]
    failures = await authorizer.create_acls([b for _, b in to_create])
    for (i, _), failure in zip(to_create, failures, strict=True):
        if failure is not None:
            results[i].error_code, results[i].error_message = ErrorCode.UNKNOWN_SERVER_ERROR, None
    return CreateAclsResponse(results=results)


def _creation_problem(pattern: ResourcePattern, entry: AccessControlEntry) -> str | None:
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not pattern.name:
        return "Invalid empty resource name"
    if not storable(pattern, entry):
        return "Failed to create ACL"
    return None


def _binding(c: Creation) -> tuple[ResourcePattern, AccessControlEntry] | None:
    """The binding a creation names; None where it has a filter-only value (ANY, MATCH)."""
    resource_type = from_code(ResourceType, c.resource_type)
    pattern_type = from_code(PatternType, c.resource_pattern_type)
    operation = from_code(AclOperation, c.operation)
    permission = from_code(AclPermissionType, c.permission_type)
    if (
        resource_type == ResourceType.ANY
        or pattern_type in (PatternType.ANY, PatternType.MATCH)
        or operation == AclOperation.ANY
        or permission == AclPermissionType.ANY
    ):
        return None
    return (
        ResourcePattern(resource_type, c.resource_name, pattern_type),
        AccessControlEntry(c.principal, c.host, operation, permission),
    )


def _create_failed(
    request: CreateAclsRequest, code: ErrorCode, message: str | None
) -> CreateAclsResponse:
    return CreateAclsResponse(
        results=[CreationResult(error_code=code, error_message=message) for _ in request.creations]
    )


@handles(DeleteAclsRequest, (0, 3))
async def delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    filters = [_filter(ctx, f) for f in request.filters]
    ctx.require_cluster(AclOperation.ALTER)
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return DeleteAclsResponse(
            filter_results=[
                DeleteAclsResponse.DeleteAclsFilterResult(
                    error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER
                )
                for _ in filters
            ]
        )
    deleted = await authorizer.delete_acls(filters)
    return DeleteAclsResponse(
        filter_results=[
            DeleteAclsResponse.DeleteAclsFilterResult(
                error_message=None,
                matching_acls=[
                    DeleteAclsResponse.DeleteAclsMatchingAcl(
                        error_code=ErrorCode.NONE
                        if failure is None
                        else ErrorCode.UNKNOWN_SERVER_ERROR,
                        error_message=None,
                        resource_type=pattern.resource_type,
                        resource_name=pattern.name,
                        pattern_type=pattern.pattern_type,
                        principal=entry.principal,
                        host=entry.host,
                        operation=entry.operation,
                        permission_type=entry.permission_type,
                    )
                    for (pattern, entry), failure in bindings
                ],
            )
            for bindings in deleted
        ]
    )


def _filter(
    ctx: RequestContext, f: DescribeAclsRequest | DeleteAclsRequest.DeleteAclsFilter
) -> AclBindingFilter:
    """The binding filter of a DescribeAcls request or a DeleteAcls filter (v0 has no pattern
    type: LITERAL, as Kafka reads it)."""
    _check_parsable(
        ctx, f.pattern_type_filter, f.resource_type_filter, f.operation, f.permission_type
    )
    return AclBindingFilter(
        ResourcePatternFilter(
            from_code(ResourceType, f.resource_type_filter),
            f.resource_name_filter,
            from_code(PatternType, f.pattern_type_filter),
        ),
        AccessControlEntryFilter(
            f.principal_filter,
            f.host_filter,
            from_code(AclOperation, f.operation),
            from_code(AclPermissionType, f.permission_type),
        ),
    )


def _check_parsable(
    ctx: RequestContext, pattern_type: int, resource_type: int, operation: int, permission: int
) -> None:
    """Kafka cannot parse a request naming an UNKNOWN (0) element: it closes the connection."""
    if 0 in (pattern_type, resource_type, operation, permission):
        raise CloseConnection(f"{ctx.api_name} names an UNKNOWN element")
