"""AlterClientQuotas v0-v1, DescribeClientQuotas v0-v1.

Client quotas by user, client id, or both, and their defaults (`kafka-configs --entity-type
users/clients`), and connection rate quotas by ip and the default ip (`--entity-type ips`,
KIP-612; an ip entity may be a host name that resolves, as Kafka's), with Kafka's validation
(`wirebroker.quotas.entities`): each alteration is answered on its own (INVALID_REQUEST for a bad entity, key or value; an entity named twice is
answered once, for its last alteration, as Kafka answers with a map), a bad describe filter
fails the whole request. The embedded broker keeps the configs in `client-quotas.json` and
applies a change at once; a cluster keeps them in ZooKeeper (`/config/users`, `/config/clients`,
`/config/ips`) and every broker applies a change when its `/config/changes` notification arrives, as in
Kafka, so the answer may come a moment before the quota is enforced.
Authorization, as Kafka: altering needs ALTER_CONFIGS on the cluster, describing
DESCRIBE_CONFIGS (else CLUSTER_AUTHORIZATION_FAILED, for every entry of an alteration).
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
)
from protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from wirebroker import host_names
from wirebroker.authorizer.acls import AUTHORIZATION_MESSAGES, AclOperation
from wirebroker.dispatch import RequestContext, handles
from wirebroker.quotas.entities import (
    FilterComponent,
    QuotaEntity,
    altered,
    check_filter,
    check_ip_resolved,
    check_stored,
    described,
)


@handles(AlterClientQuotasRequest, (0, 1))
async def alter_client_quotas(
    ctx: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    allowed = ctx.authorize_cluster(AclOperation.ALTER_CONFIGS)
    # One answer per entity, as Kafka's map of them: an entity named twice gets the last one.
    entries: dict[frozenset[tuple[str, str | None]], AlterClientQuotasResponse.EntryData] = {}
    for entry in request.entries:
        named = {e.entity_type: e.entity_name for e in entry.entity}
        result = AlterClientQuotasResponse.EntryData(
            error_message=None,
            entity=[
                AlterClientQuotasResponse.EntityData(entity_type=t, entity_name=n)
                for t, n in named.items()
            ],
        )
        entries[frozenset(named.items())] = result
        if not allowed:
            result.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            result.error_message = AUTHORIZATION_MESSAGES[ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
            continue
        try:
            entity = QuotaEntity.from_components(
                (e.entity_type, e.entity_name) for e in entry.entity
            )
            address = await host_names.ip_entity_address(entity)
            check_ip_resolved(entity, address)
            config = altered(
                entity,
                await _config(ctx, entity),
                [(op.key, None if op.remove else op.value) for op in entry.ops],
            )
            if not request.validate_only:
                check_stored(entity, config)
                await _set_config(ctx, entity, config, address)
        except KafkaError as e:
            result.error_code = e.error_code
            result.error_message = str(e)
    return AlterClientQuotasResponse(entries=list(entries.values()))


async def _config(ctx: RequestContext, entity: QuotaEntity) -> dict[str, str]:
    broker = ctx.broker
    if broker.cluster is not None:
        return await broker.cluster.client_quota_config(entity)
    assert broker.quota_store is not None
    return broker.quota_store.configs().get(entity, {})


async def _set_config(
    ctx: RequestContext, entity: QuotaEntity, config: dict[str, str], address: str | None
) -> None:
    broker = ctx.broker
    if broker.cluster is not None:
        await broker.cluster.set_client_quota_config(entity, config)
        return
    assert broker.quota_store is not None
    await broker.quota_store.set(entity, config)
    broker.quotas.update(entity, config, address)


@handles(DescribeClientQuotasRequest, (0, 1))
async def describe_client_quotas(
    ctx: RequestContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return DescribeClientQuotasResponse(
            error_code=code, error_message=AUTHORIZATION_MESSAGES[code], entries=None
        )
    components = [FilterComponent(c.entity_type, c.match_type, c.match) for c in request.components]
    try:
        check_filter(components)
    except KafkaError as e:
        return DescribeClientQuotasResponse(
            error_code=e.error_code, error_message=str(e), entries=None
        )
    broker = ctx.broker
    if broker.cluster is not None:
        configs = await broker.cluster.client_quota_configs()
    else:
        assert broker.quota_store is not None
        configs = broker.quota_store.configs()
    return DescribeClientQuotasResponse(
        entries=[
            DescribeClientQuotasResponse.EntryData(
                entity=[
                    DescribeClientQuotasResponse.EntityData(entity_type=t, entity_name=n)
                    for t, n in entity.components()
                ],
                values=[
                    DescribeClientQuotasResponse.ValueData(key=k, value=v)
                    for k, v in sorted(values.items())
                ],
            )
            for entity, values in described(configs, components, request.strict)
        ],
    )
