"""UpdateFeatures v0-v1 (KIP-584), answered as a ZooKeeper-mode Kafka 3.9 answers it.

A ZooKeeper-mode broker supports no features (ApiVersions lists none) and so none is ever
finalized: its controller refuses every update, feature by feature, with INVALID_REQUEST and the
reason KafkaController.validateFeatureUpdate gives, in its order -- an empty name, an unknown
upgrade type (v1), a deletion (a level below 1 that is not an UPGRADE) of a feature that is not
finalized, an UPGRADE to a level below 1, and otherwise a feature that is not supported.
Nothing is stored, so `validate_only` changes nothing.

Before that, as KafkaApis: ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the whole
request), and in a cluster only the active controller answers (NOT_CONTROLLER elsewhere, so the
admin client looks it up again).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.update_features import UpdateFeaturesRequest, UpdateFeaturesResponse
from wirebroker.authorizer.acls import AUTHORIZATION_MESSAGES, AclOperation
from wirebroker.dispatch import RequestContext, handles
from wirebroker.java_hashing import hash_set_order, string_hash

#: FeatureUpdate.UpgradeType codes (v1's `upgrade_type`; v0 has only `allow_downgrade`).
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
NOT_CONTROLLER_MESSAGE = "This is not the correct controller for this cluster."

Result = UpdateFeaturesResponse.UpdatableFeatureResult


@handles(UpdateFeaturesRequest, (0, 1))
async def update_features(
    ctx: RequestContext, request: UpdateFeaturesRequest
) -> UpdateFeaturesResponse:
    if not ctx.authorize_cluster(AclOperation.ALTER):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return UpdateFeaturesResponse(error_code=code, error_message=AUTHORIZATION_MESSAGES[code])
    cluster = ctx.broker.cluster
    if cluster is not None and not cluster.controller.active:
        return UpdateFeaturesResponse(
            error_code=ErrorCode.NOT_CONTROLLER, error_message=NOT_CONTROLLER_MESSAGE
        )
    refusals = {u.feature: _refusal(ctx.api_version, u) for u in request.feature_updates}
    # Listed as Kafka's controller lists them, from a Scala mutable.HashMap of the names: by
    # bucket of the spread String.hashCode as a Java HashSet (the two differ only within a bucket).
    names = hash_set_order(refusals, string_hash)
    return UpdateFeaturesResponse(
        error_code=ErrorCode.NONE,
        error_message=None,  # Kafka's ApiError.NONE
        results=[
            Result(feature=name, error_code=ErrorCode.INVALID_REQUEST, error_message=refusals[name])
            for name in names
        ],
    )


def _refusal(api_version: int, update: UpdateFeaturesRequest.FeatureUpdateKey) -> str:
    """Why the controller refuses ``update`` when no feature is supported or finalized."""
    if not update.feature:
        return "Feature name can not be empty."
    if api_version >= 1:
        upgrade_type = update.upgrade_type
    else:
        upgrade_type = SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return "Received unknown upgrade type."
    if update.max_version_level < 1:
        if upgrade_type != UPGRADE:  # a deletion
            return "Can not delete non-existing finalized feature."
        return (
            f"Can not provide versionLevel: {update.max_version_level} less than 1 without "
            "setting the SAFE downgradeType in the request."
        )
    return "Could not apply finalized feature update because the provided feature is not supported."
