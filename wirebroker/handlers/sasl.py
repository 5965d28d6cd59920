"""SaslHandshake v0-1 and SaslAuthenticate v0-2 after authentication, and the SCRAM credential
admin APIs: AlterUserScramCredentials v0, DescribeUserScramCredentials v0.

Before a SASL connection is authenticated its SaslHandshake and SaslAuthenticate never get here
(`wirebroker.sasl.authenticator` answers them, and a re-authentication's too). Here, as Kafka's
KafkaApis, they come on an authenticated or a PLAINTEXT connection and are answered with
ILLEGAL_SASL_STATE.

AlterUserScramCredentials takes salted passwords (the client salts and hashes; the password
never travels) and keeps Kafka's credential (salt, StoredKey, ServerKey, iterations): in the
embedded broker's `scram-credentials.json`, in a cluster in ZooKeeper's `/config/users/<name>`
with a `/config/changes` notification, both as Kafka writes them; a user's change is answered
once saved, one change at a time (the store's lock), and takes effect then. Errors per user as
Kafka's ZkAdminManager: an empty name or a count of iterations out of [4096, 16384] is
UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, a user altered twice in
one request DUPLICATE_RESOURCE (the whole user fails), deleting a missing credential
RESOURCE_NOT_FOUND, a failed save (a full disk) UNKNOWN_SERVER_ERROR with the reason (Kafka: a
failed ZooKeeper write). Altering them needs ALTER on the cluster, describing them DESCRIBE (else
CLUSTER_AUTHORIZATION_FAILED for every user), as Kafka.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from wirebroker.authorizer.acls import AclOperation
from wirebroker.dispatch import RequestContext, handles
from wirebroker.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential
from wirebroker.sasl.settings import SCRAM_SHA_256, SCRAM_SHA_512

#: Kafka's ScramMechanism type codes on the wire.
MECHANISM_CODES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISMS = {code: name for name, code in MECHANISM_CODES.items()}

AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
DescribeResult = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
#: A change of a credential: user, mechanism code, and the upsertion (None: a deletion).
Change = tuple[str, int, AlterUserScramCredentialsRequest.ScramCredentialUpsertion | None]


@handles(SaslHandshakeRequest, (0, 1))
async def sasl_handshake(
    ctx: RequestContext, request: SaslHandshakeRequest
) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE)


@handles(SaslAuthenticateRequest, (0, 2))
async def sasl_authenticate(
    ctx: RequestContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
    )


@handles(AlterUserScramCredentialsRequest, (0, 0))
async def alter_user_scram_credentials(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    changes: list[Change] = [(d.name, d.mechanism, None) for d in request.deletions] + [
        (u.name, u.mechanism, u) for u in request.upsertions
    ]
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return AlterUserScramCredentialsResponse(
            results=[
                AlterResult(
                    user=user, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None
                )
                for user in sorted({name for name, _, _ in changes})
            ]
        )
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: set[tuple[str, int]] = set()
    users: list[str] = []
    for name, mechanism, upsertion in changes:
        if name not in users:
            users.append(name)
        if (name, mechanism) in seen:
            errors[name] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
        seen.add((name, mechanism))
        if name in errors:
            continue
        if not name:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mechanism not in MECHANISMS:
            errors[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif upsertion is not None and upsertion.iterations < MIN_ITERATIONS:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif upsertion is not None and upsertion.iterations > MAX_ITERATIONS:
            errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        elif upsertion is not None and not (upsertion.salt and upsertion.salted_password):
            errors[name] = (
                ErrorCode.UNACCEPTABLE_CREDENTIAL,
                "Salt and salted password must not be empty",
            )
    store = ctx.broker.scram_credentials
    results = []
    async with store.lock:  # each user's change made from the one before, and saved in order
        for user in users:
            if user not in errors:
                try:
                    await _alter(ctx, user, changes)
                except KafkaError as e:
                    errors[user] = (e.error_code, str(e))
            code, message = errors.get(user, (ErrorCode.NONE, None))
            results.append(AlterResult(user=user, error_code=code, error_message=message))
    return AlterUserScramCredentialsResponse(results=results)


async def _alter(ctx: RequestContext, user: str, changes: list[Change]) -> None:
    """Apply the request's changes of `user`'s credentials and save them (KafkaError: the
    user's error, nothing changed)."""
    broker = ctx.broker
    credentials = broker.scram_credentials.user(user)
    for name, code, upsertion in changes:
        if name != user:
            continue
        mechanism_name = MECHANISMS[code]
        if upsertion is None:
            if credentials.pop(mechanism_name, None) is None:
                raise KafkaError(
                    "Attempt to delete a user credential that does not exist",
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                )
        else:
            credentials[mechanism_name] = ScramCredential.from_salted_password(
                mechanism_name, upsertion.salt, upsertion.salted_password, upsertion.iterations
            )
    if broker.cluster is not None:
        await broker.cluster.set_user_scram_credentials(user, credentials)
    await broker.scram_credentials.set_user(user, credentials)


@handles(DescribeUserScramCredentialsRequest, (0, 0))
async def describe_user_scram_credentials(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        # As Kafka: the code at the top and once per user asked for (its name left empty)
        return DescribeUserScramCredentialsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message=None,
            results=[
                DescribeResult(
                    error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None
                )
                for _ in request.users or []
            ],
        )
    store = ctx.broker.scram_credentials
    requested = [u.name for u in request.users or []]
    results = []
    for user in dict.fromkeys(requested) or store.users():
        credentials = store.user(user)
        if requested.count(user) > 1:
            results.append(
                DescribeResult(
                    user=user,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message="Cannot describe SCRAM credentials for the same user twice in "
                    "a single request",
                )
            )
        elif not credentials:
            results.append(
                DescribeResult(
                    user=user,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message="Attempt to describe a user credential that does not exist",
                )
            )
        else:
            infos = [
                DescribeUserScramCredentialsResponse.CredentialInfo(
                    mechanism=MECHANISM_CODES[m], iterations=c.iterations
                )
                for m, c in sorted(credentials.items())
            ]
            results.append(DescribeResult(user=user, error_message=None, credential_infos=infos))
    return DescribeUserScramCredentialsResponse(error_message=None, results=results)
