"""Delegation tokens in a cluster: kept in ZooKeeper as Kafka keeps them
(`/delegation_token/tokens/<id>`, announced under `/delegation_token/token_changes`), so a token
created on one broker authenticates on another, and expiring it there removes it everywhere."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.create_delegation_token import CreateDelegationTokenRequest
from protocol.messages.describe_delegation_token import DescribeDelegationTokenRequest
from protocol.messages.expire_delegation_token import ExpireDelegationTokenRequest
from protocol.schema import Message
from tests.cluster.harness import call, eventually, sha512_upsertion, start_broker
from tests.wirebroker.helpers import RawClient, server_jaas
from wirebroker.server import RunningBroker
from wirebroker.zk import change_notifications, znodes
from wirebroker.zk.client import ZkClient
from wirebroker.zk.delegation_tokens import TOKEN_CHANGES
from wirebroker.zk.znodes import DELEGATION_TOKENS

pytestmark = pytest.mark.integration

MECHANISM = "SCRAM-SHA-512"
SASL = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": MECHANISM,
    **server_jaas("SASL_PLAINTEXT", MECHANISM),
    "delegation.token.secret.key": "cluster-token-key",
}


def sasl_address(running: RunningBroker) -> str:
    [listener] = [x for x in running.listeners if x.name == "SASL_PLAINTEXT"]
    return f"{listener.host}:{listener.port}"


def test_a_token_made_on_one_broker_works_on_another(zk_connect: str, tmp_path: Path) -> None:
    upsert = sha512_upsertion("alice", b"alice-pw")

    def create_as_alice(address: str) -> Any:
        with RawClient(address) as client:
            client.login_scram(MECHANISM, "alice", "alice-pw")
            return client.request(CreateDelegationTokenRequest(), 3)

    def with_token(address: str, token_id: str, token_hmac: bytes, body: Message) -> Any:
        with RawClient(address) as client:
            password = base64.b64encode(token_hmac).decode()
            client.login_scram(MECHANISM, token_id, password, tokenauth=True)
            return client.request(body, 3)

    def expire_as_alice(address: str, token_hmac: bytes) -> Any:
        with RawClient(address) as client:
            client.login_scram(MECHANISM, "alice", "alice-pw")
            request = ExpireDelegationTokenRequest(hmac=token_hmac, expiry_time_period_ms=-1)
            return client.request(request, 2)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, **SASL)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2, **SASL)
            answer = await call(b1, AlterUserScramCredentialsRequest(upsertions=[upsert]), 0)
            assert answer.results[0].error_code == ErrorCode.NONE
            await eventually(
                lambda: b2.broker.scram_credentials.get("alice", MECHANISM),
                what="broker 2 knows alice",
            )
            created = await trio.to_thread.run_sync(create_as_alice, sasl_address(b1))
            assert created.error_code == ErrorCode.NONE

            # Kafka's znode, the principals sanitized
            assert b1.broker.cluster is not None
            got = await b1.broker.cluster.zk.get(f"{DELEGATION_TOKENS}/{created.token_id}")
            assert got is not None
            assert json.loads(got[0]) == {
                "version": 3,
                "owner": "User%3Aalice",
                "tokenRequester": "User%3Aalice",
                "renewers": [],
                "issueTimestamp": created.issue_timestamp_ms,
                "maxTimestamp": created.max_timestamp_ms,
                "expiryTimestamp": created.expiry_timestamp_ms,
                "tokenId": created.token_id,
            }
            assert await b1.broker.cluster.zk.get_children(TOKEN_CHANGES)

            # broker 2 follows the announcement: the token authenticates there, as alice
            tokens2 = b2.broker.delegation_tokens
            assert tokens2 is not None
            await eventually(lambda: tokens2.get(created.token_id), what="broker 2 has it")
            described = await trio.to_thread.run_sync(
                with_token,
                sasl_address(b2),
                created.token_id,
                created.hmac,
                DescribeDelegationTokenRequest(owners=None),
            )
            assert described.error_code == ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED

            # expired on broker 2: gone from ZooKeeper and from broker 1
            expired = await trio.to_thread.run_sync(expire_as_alice, sasl_address(b2), created.hmac)
            assert expired.error_code == ErrorCode.NONE
            tokens1 = b1.broker.delegation_tokens
            assert tokens1 is not None
            await eventually(
                lambda: tokens1.get(created.token_id) is None, what="broker 1 forgets it"
            )
            assert await b1.broker.cluster.zk.get(f"{DELEGATION_TOKENS}/{created.token_id}") is None
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_old_announcements_are_purged(
    zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's ZkNodeChangeNotificationListener: a broker processing notifications deletes those
        older than changeExpirationMs (15 minutes; 3 s here), token and config changes alike, and so
    does a broker starting, before any change."""
    monkeypatch.setattr(change_notifications, "CHANGE_EXPIRATION_MS", 3000)

    def create_as_alice(address: str) -> Any:
        with RawClient(address) as client:
            client.login_scram(MECHANISM, "alice", "alice-pw")
            return client.request(CreateDelegationTokenRequest(), 3)

    async def children(zk: ZkClient, path: str) -> list[str]:
        return sorted(await zk.get_children(path) or [])

    async def purged(zk: ZkClient, path: str, old: list[str]) -> None:
        async def gone() -> bool:
            return not set(old) & set(await children(zk, path))

        await eventually(gone, interval=0.05, what=f"the old changes under {path} purged")

    async def change(b1: RunningBroker, b2: RunningBroker, user: str) -> None:
        """A config change (a user's SCRAM credential) and a token change, both followed by
        broker 2."""
        upsert = sha512_upsertion(user, b"alice-pw")
        answer = await call(b1, AlterUserScramCredentialsRequest(upsertions=[upsert]), 0)
        assert answer.results[0].error_code == ErrorCode.NONE
        await eventually(lambda: b2.broker.scram_credentials.get(user, MECHANISM))
        created = await trio.to_thread.run_sync(create_as_alice, sasl_address(b1))
        assert created.error_code == ErrorCode.NONE
        tokens2 = b2.broker.delegation_tokens
        assert tokens2 is not None
        await eventually(lambda: tokens2.get(created.token_id), what="broker 2 has it")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, **SASL)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2, **SASL)
            assert b1.broker.cluster is not None
            zk = b1.broker.cluster.zk
            paths = (TOKEN_CHANGES, znodes.CONFIG_CHANGES)
            await change(b1, b2, "alice")
            first = {path: await children(zk, path) for path in paths}
            assert all(first.values())

            # once they are older than the expiration, the next changes' processing purges them
            newest_ms = 0
            for path, names in first.items():
                for name in names:
                    stat = await zk.exists(f"{path}/{name}")
                    assert stat is not None  # young: kept
                    newest_ms = max(newest_ms, stat.ctime)
            # their age passing the expiration is the scenario
            await trio.sleep(max(0.0, (newest_ms + 3100) / 1000 - time.time()))
            await change(b1, b2, "bob")
            for path in paths:
                await purged(zk, path, first[path])
            # the new ones (younger than 3 s) stay
            for path in paths:
                assert await children(zk, path)

            # a broker starting purges the old ones it finds, with no change since (ACL
            # notifications too, when it has an authorizer)
            for path in znodes.ACL_CHANGES.values():
                await zk.create(
                    f"{path}/acl_changes_", b"Topic:LITERAL:t", sequence=True, makepath=True
                )
            kept = {
                path: await children(zk, path) for path in (*paths, *znodes.ACL_CHANGES.values())
            }
            stats = [
                await zk.exists(f"{path}/{name}") for path, names in kept.items() for name in names
            ]
            newest_ms = max(stat.ctime for stat in stats if stat is not None)
            await trio.sleep(max(0.0, (newest_ms + 3100) / 1000 - time.time()))  # (as above)
            await start_broker(
                nursery,
                zk_connect,
                tmp_path,
                3,
                **SASL,
                **{
                    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                    "allow.everyone.if.no.acl.found": "true",
                },
            )
            for path, names in kept.items():
                await purged(zk, path, names)
            nursery.cancel_scope.cancel()

    trio.run(main)
