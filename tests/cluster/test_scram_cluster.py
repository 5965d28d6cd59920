"""SCRAM credentials in a cluster: kept in ZooKeeper as Kafka keeps them, seen by every broker."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from tests.cluster.harness import call, eventually, start_broker
from wirebroker.sasl.scram import ScramCredential
from wirebroker.zk import znodes

pytestmark = pytest.mark.integration

SHA_512 = 2


def test_credentials_go_to_zookeeper_and_every_broker(zk_connect: str, tmp_path: Path) -> None:
    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 4096)
    upsert = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name="a b", mechanism=SHA_512, iterations=4096, salt=salt, salted_password=salted
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2)
            answer = await call(b1, AlterUserScramCredentialsRequest(upsertions=[upsert]), 0)
            assert [(r.user, r.error_code) for r in answer.results] == [("a b", ErrorCode.NONE)]

            # Kafka's znode, the user name sanitized as Kafka's Sanitizer does
            assert b1.broker.cluster is not None
            got = await b1.broker.cluster.zk.get(znodes.user_config_path("a%20b"))
            assert got is not None
            stored = json.loads(got[0])
            expected = ScramCredential.from_salted_password("SCRAM-SHA-512", salt, salted, 4096)
            assert stored == {
                "version": 1,
                "config": {"SCRAM-SHA-512": expected.to_kafka_string()},
            }

            # the other broker follows the change notification
            await eventually(
                lambda: b2.broker.scram_credentials.get("a b", "SCRAM-SHA-512") == expected,
                what="broker 2 sees the credential",
            )
            described = await call(b2, DescribeUserScramCredentialsRequest(users=None), 0)
            assert [
                (r.user, [(i.mechanism, i.iterations) for i in r.credential_infos])
                for r in described.results
            ] == [("a b", [(SHA_512, 4096)])]

            delete = AlterUserScramCredentialsRequest.ScramCredentialDeletion(
                name="a b", mechanism=SHA_512
            )
            answer = await call(b2, AlterUserScramCredentialsRequest(deletions=[delete]), 0)
            assert answer.results[0].error_code == ErrorCode.NONE
            await eventually(
                lambda: not b1.broker.scram_credentials.users(), what="broker 1 forgets it"
            )
            nursery.cancel_scope.cancel()

    trio.run(main)
