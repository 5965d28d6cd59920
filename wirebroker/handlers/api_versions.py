"""ApiVersions, v0-v4.

Advertises exactly the table of handled APIs (`wirebroker.dispatch.VERSIONS`, from
`wirebroker.handlers.HANDLED`, which every handler's registration must match), with the version
range each implements (always a whole range within Kafka 3.9's). No supported or finalized
features are listed, as Kafka 3.9 in ZooKeeper mode lists none; the finalized features' epoch is
0, the version of the (empty) feature znode its controller writes at start-up.
`zk_migration_ready` is false.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from wirebroker.dispatch import VERSIONS, RequestContext, handles

#: Kafka 3.9's in ZooKeeper mode: its controller creates `/feature` (no features) at start-up.
FINALIZED_FEATURES_EPOCH = 0


@handles(ApiVersionsRequest, (0, 4))
async def api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in VERSIONS.items()
    ]
    error = ErrorCode.NONE
    if ctx.api_version >= 3 and not _valid_client_software(request):
        error = ErrorCode.INVALID_REQUEST
    return ApiVersionsResponse(
        error_code=error, api_keys=keys, finalized_features_epoch=FINALIZED_FEATURES_EPOCH
    )


def _valid_client_software(request: ApiVersionsRequest) -> bool:
    """KIP-511: name and version must be non-empty and of letters, digits, '.', '-'."""
    import re

    pattern = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
    return bool(
        pattern.match(request.client_software_name or "")
        and pattern.match(request.client_software_version or "")
    )
