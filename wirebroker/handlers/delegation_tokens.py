"""CreateDelegationToken v0-3, RenewDelegationToken v0-2, ExpireDelegationToken v0-2,
DescribeDelegationToken v0-3 (KIP-48), as Kafka 3.9's KafkaApis and DelegationTokenManagerZk.

Refusals, in Kafka's order: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a PLAINTEXT listener, on SSL
without a client certificate (ANONYMOUS) and for a client authenticated with a token; creating a
token for another owner needs CREATE_TOKENS on that owner's USER resource (KIP-373, else
DELEGATION_TOKEN_AUTHORIZATION_FAILED) and renewers must be `User`s (INVALID_PRINCIPAL_TYPE);
then DELEGATION_TOKEN_AUTH_DISABLED without `delegation.token.secret.key`. Renew and Expire find
the token by its HMAC (DELEGATION_TOKEN_NOT_FOUND), are for its owner and renewers
(DELEGATION_TOKEN_OWNER_MISMATCH) and refuse a token past its expiry (DELEGATION_TOKEN_EXPIRED),
except an Expire with a negative period, which removes the token at once. Describe lists the
tokens the requester owns or renews, and the others it may DESCRIBE (DELEGATION_TOKEN resource)
or whose owner it may DESCRIBE_TOKENS (USER resource); an empty owner list lists none.
"""

from __future__ import annotations

from dataclasses import replace

from protocol.errors import ErrorCode
from protocol.messages.create_delegation_token import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
)
from protocol.messages.describe_delegation_token import (
    DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse,
)
from protocol.messages.expire_delegation_token import (
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
)
from protocol.messages.renew_delegation_token import (
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from wirebroker.authorizer.acls import AclOperation, ResourceType
from wirebroker.dispatch import RequestContext, handles
from wirebroker.sasl.delegation_tokens import (
    ERROR_TIMESTAMP,
    TokenInformation,
    TokenPrincipal,
    new_token_id,
)

Described = DescribeDelegationTokenResponse.DescribedDelegationToken
Renewer = DescribeDelegationTokenResponse.DescribedDelegationTokenRenewer


def _allowed(ctx: RequestContext) -> bool:
    """Kafka's allowTokenRequests."""
    protocol = ctx.broker.config.security_protocol(ctx.listener_name)
    return not (
        isinstance(ctx.principal, TokenPrincipal)
        or protocol == "PLAINTEXT"
        or (protocol == "SSL" and ctx.principal == "User:ANONYMOUS")
    )


def _split(principal: str) -> tuple[str, str]:
    principal_type, _, name = principal.partition(":")
    return principal_type, name


@handles(CreateDelegationTokenRequest, (0, 3))
async def create_delegation_token(
    ctx: RequestContext, request: CreateDelegationTokenRequest
) -> CreateDelegationTokenResponse:
    requester = str(ctx.principal)
    owner = requester
    if request.owner_principal_name:
        owner = f"{request.owner_principal_type or 'User'}:{request.owner_principal_name}"
    renewers = tuple(f"{r.principal_type}:{r.principal_name}" for r in request.renewers)

    def answer(
        code: ErrorCode, token: TokenInformation | None = None
    ) -> CreateDelegationTokenResponse:
        owner_type, owner_name = _split(owner)
        response = CreateDelegationTokenResponse(
            error_code=code,
            principal_type=owner_type,
            principal_name=owner_name,
            issue_timestamp_ms=token.issue_timestamp if token else ERROR_TIMESTAMP,
            expiry_timestamp_ms=token.expiry_timestamp if token else ERROR_TIMESTAMP,
            max_timestamp_ms=token.max_timestamp if token else ERROR_TIMESTAMP,
            token_id=token.token_id if token else "",
            hmac=tokens.hmac(token) if token and tokens else b"",
        )
        if ctx.api_version > 2:
            response.token_requester_principal_type, response.token_requester_principal_name = (
                _split(requester)
            )
        return response

    tokens = ctx.broker.delegation_tokens
    if not _allowed(ctx):
        return answer(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    if owner != requester and not ctx.authorize(
        AclOperation.CREATE_TOKENS, ResourceType.USER, owner
    ):
        return answer(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
    if any(r.principal_type != "User" for r in request.renewers):
        return answer(ErrorCode.INVALID_PRINCIPAL_TYPE)
    if tokens is None:
        return answer(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
    config = ctx.broker.config
    max_lifetime = config.get_int("delegation.token.max.lifetime.ms")
    if request.max_lifetime_ms > 0:
        max_lifetime = min(request.max_lifetime_ms, max_lifetime)
    async with tokens.lock:
        now = ctx.broker.now_ms()
        token = TokenInformation(
            token_id=new_token_id(),
            owner=owner,
            token_requester=requester,
            renewers=renewers,
            issue_timestamp=now,
            max_timestamp=now + max_lifetime,
            expiry_timestamp=min(
                now + max_lifetime, now + config.get_int("delegation.token.expiry.time.ms")
            ),
        )
        await tokens.update(token)
    return answer(ErrorCode.NONE, token)


async def _change_expiry(
    ctx: RequestContext, token_hmac: bytes, period_ms: int, *, expire: bool
) -> tuple[ErrorCode, int]:
    """Kafka's renewToken (`expire` False) and expireToken: the error and the new expiry
    (a failed save: KafkaError, answered UNKNOWN_SERVER_ERROR)."""
    if not _allowed(ctx):
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, ERROR_TIMESTAMP
    tokens = ctx.broker.delegation_tokens
    if tokens is None:
        return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, ERROR_TIMESTAMP
    async with tokens.lock:
        token = tokens.for_hmac(bytes(token_hmac))
        if token is None:
            return ErrorCode.DELEGATION_TOKEN_NOT_FOUND, ERROR_TIMESTAMP
        now = ctx.broker.now_ms()
        if not token.owner_or_renewer(str(ctx.principal)):
            return ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, ERROR_TIMESTAMP
        if expire and period_ms < 0:
            await tokens.remove(token.token_id)
            return ErrorCode.NONE, now
        if token.expired(now):
            return ErrorCode.DELEGATION_TOKEN_EXPIRED, ERROR_TIMESTAMP
        if not expire and period_ms < 0:
            period_ms = ctx.broker.config.get_int("delegation.token.expiry.time.ms")
        expiry = min(token.max_timestamp, now + period_ms)
        await tokens.update(replace(token, expiry_timestamp=expiry))
    return ErrorCode.NONE, expiry


@handles(RenewDelegationTokenRequest, (0, 2))
async def renew_delegation_token(
    ctx: RequestContext, request: RenewDelegationTokenRequest
) -> RenewDelegationTokenResponse:
    code, expiry = await _change_expiry(ctx, request.hmac, request.renew_period_ms, expire=False)
    return RenewDelegationTokenResponse(error_code=code, expiry_timestamp_ms=expiry)


@handles(ExpireDelegationTokenRequest, (0, 2))
async def expire_delegation_token(
    ctx: RequestContext, request: ExpireDelegationTokenRequest
) -> ExpireDelegationTokenResponse:
    code, expiry = await _change_expiry(
        ctx, request.hmac, request.expiry_time_period_ms, expire=True
    )
    return ExpireDelegationTokenResponse(error_code=code, expiry_timestamp_ms=expiry)


@handles(DescribeDelegationTokenRequest, (0, 3))
async def describe_delegation_token(
    ctx: RequestContext, request: DescribeDelegationTokenRequest
) -> DescribeDelegationTokenResponse:
    tokens = ctx.broker.delegation_tokens
    if not _allowed(ctx):
        return DescribeDelegationTokenResponse(
            error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        )
    if tokens is None:
        return DescribeDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
    owners = (
        None
        if request.owners is None
        else [f"{o.principal_type}:{o.principal_name}" for o in request.owners]
    )
    requester = str(ctx.principal)

    def eligible(token: TokenInformation) -> bool:
        """Kafka's DelegationTokenManager.filterToken."""
        if owners is not None and not any(token.owner_or_renewer(o) for o in owners):
            return False
        return (
            token.owner_or_renewer(requester)
            or ctx.authorize(AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token.token_id)
            or ctx.authorize(AclOperation.DESCRIBE_TOKENS, ResourceType.USER, token.owner)
        )

    described = []
    for token in tokens.all() if owners != [] else []:
        if not eligible(token):
            continue
        owner_type, owner_name = _split(token.owner)
        requester_type, requester_name = _split(token.token_requester)
        described.append(
            Described(
                principal_type=owner_type,
                principal_name=owner_name,
                token_requester_principal_type=requester_type if ctx.api_version > 2 else "",
                token_requester_principal_name=requester_name if ctx.api_version > 2 else "",
                issue_timestamp=token.issue_timestamp,
                expiry_timestamp=token.expiry_timestamp,
                max_timestamp=token.max_timestamp,
                token_id=token.token_id,
                hmac=tokens.hmac(token),
                renewers=[
                    Renewer(principal_type=t, principal_name=n)
                    for t, n in map(_split, token.renewers)
                ],
            )
        )
    return DescribeDelegationTokenResponse(tokens=described)
