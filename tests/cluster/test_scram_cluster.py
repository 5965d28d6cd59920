"""SCRAM credentials in a cluster: kept in ZooKeeper as Kafka keeps them, seen by every broker;
`wirebroker configs --zookeeper` writes them before (and while) brokers run."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from tests.cluster.harness import call, eventually, start_broker
from wirebroker.configs_cli import UsageError, parse_add_config
from wirebroker.sasl.mechanism import SaslFailure
from wirebroker.sasl.scram import ScramClient, ScramCredential, ScramServer
from wirebroker.server import RunningBroker
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


def configs(zk_connect: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`wirebroker configs --zookeeper ...` in its own process."""
    argv = [sys.executable, "-m", "wirebroker", "configs", "--zookeeper", zk_connect, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def logs_in(broker: RunningBroker, user: str, mechanism: str, password: str) -> bool:
    """Whether the broker's SCRAM server takes `password` for `user` (no socket)."""
    store = broker.broker.scram_credentials
    try:
        client = ScramClient(mechanism, user, password)
        server = ScramServer(mechanism, lambda name: store.get(name, mechanism))
        token: bytes | None = client.initial()
        while token is not None:
            token = client.evaluate(server.evaluate(token))
    except SaslFailure:
        return False
    return True


def test_wirebroker_configs_writes_credentials_before_and_while_brokers_run(
    zk_connect: str, tmp_path: Path
) -> None:
    users = ("--alter", "--entity-type", "users", "--entity-name", "a b")
    added = configs(
        zk_connect,
        *users,
        "--add-config",
        "SCRAM-SHA-512=[iterations=8192,password=pw],SCRAM-SHA-256=[password=pw]",
    )
    assert added.returncode == 0, added.stderr
    assert "Completed updating config for user a b." in added.stdout
    described = configs(zk_connect, "--describe", "--entity-type", "users")
    assert described.stdout.splitlines() == [
        "SCRAM credential configs for user-principal 'a b' are "
        "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192"
    ]
    with pytest.raises(UsageError, match="not a SCRAM mechanism"):
        parse_add_config("producer_byte_rate=1024")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            assert logs_in(b1, "a b", "SCRAM-SHA-512", "pw")
            assert not logs_in(b1, "a b", "SCRAM-SHA-512", "nope")
            deleted = await trio.to_thread.run_sync(
                lambda: configs(zk_connect, *users, "--delete-config", "SCRAM-SHA-256")
            )
            assert deleted.returncode == 0, deleted.stderr
            await eventually(
                lambda: b1.broker.scram_credentials.get("a b", "SCRAM-SHA-256") is None,
                what="the running broker follows the change notification",
            )
            assert logs_in(b1, "a b", "SCRAM-SHA-512", "pw")
            nursery.cancel_scope.cancel()

    trio.run(main)
