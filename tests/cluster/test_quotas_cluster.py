"""Client quotas in a cluster: kept in ZooKeeper as Kafka keeps them (beside a user's SCRAM
credentials; an ip's connection rate at `/config/ips/<ip>`), followed by every broker through
`/config/changes`, and enforced there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from compat.kafka_process import jars_available, kafka_broker
from protocol.errors import ErrorCode
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from protocol.messages.produce import ProduceRequest
from protocol.record_batch import SimpleRecord
from tests.cluster.harness import call, eventually, sha512_upsertion, start_broker
from tests.wirebroker.helpers import RawClient, produce_request
from wirebroker.peer import request_once
from wirebroker.quotas.entities import QuotaEntity
from wirebroker.server import RunningBroker
from wirebroker.zk import znodes

pytestmark = pytest.mark.integration

A = AlterClientQuotasRequest


def alteration(entity: list[tuple[str, str | None]], **ops: float | None) -> A.EntryData:
    return A.EntryData(
        entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[A.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in sorted(ops.items())],
    )


async def znode(running: RunningBroker, path: str) -> Any:
    assert running.broker.cluster is not None
    got = await running.broker.cluster.zk.get(path)
    return None if got is None else json.loads(got[0])


def test_quotas_go_to_zookeeper_and_every_broker(zk_connect: str, tmp_path: Path) -> None:
    upsert = sha512_upsertion("alice", b"pw")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2)
            await call(b1, AlterUserScramCredentialsRequest(upsertions=[upsert]), 0)
            request = A(
                entries=[
                    alteration([("user", "alice")], producer_byte_rate=5000.0),
                    alteration(
                        [("user", "alice"), ("client-id", "my app")], consumer_byte_rate=7000.0
                    ),
                    alteration([("client-id", None)], request_percentage=200.0),
                    alteration([("client-id", "tiny")], producer_byte_rate=1000.0),
                    alteration([("ip", "10.1.2.3")], connection_creation_rate=7.0),
                    # a host name, kept as named, applied to the address it resolves to
                    alteration([("ip", "localhost")], connection_creation_rate=1000.0),
                ]
            )
            answer = await call(b1, request, 1)
            assert [e.error_code for e in answer.entries] == [ErrorCode.NONE] * 6

            # Kafka's znodes: the quota beside the SCRAM credential, names sanitized
            user = await znode(b1, "/config/users/alice")
            assert set(user["config"]) == {"SCRAM-SHA-512", "producer_byte_rate"}
            assert user["config"]["producer_byte_rate"] == "5000"
            assert await znode(b1, "/config/users/alice/clients/my%20app") == {
                "version": 1,
                "config": {"consumer_byte_rate": "7000"},
            }
            assert await znode(b1, "/config/clients/<default>") == {
                "version": 1,
                "config": {"request_percentage": "200.0"},
            }
            assert await znode(b1, "/config/ips/10.1.2.3") == {
                "version": 1,
                "config": {"connection_creation_rate": "7"},
            }
            assert b1.broker.cluster is not None
            zk = b1.broker.cluster.zk
            changes = sorted(await zk.get_children(znodes.CONFIG_CHANGES) or [])
            notified = [
                json.loads((await zk.get(f"{znodes.CONFIG_CHANGES}/{c}") or (b"",))[0])
                for c in changes
            ]
            assert {"version": 2, "entity_path": "users/alice/clients/my%20app"} in notified
            assert {"version": 2, "entity_path": "ips/10.1.2.3"} in notified
            assert {"version": 2, "entity_path": "ips/localhost"} in notified

            # every broker applies them, and describes them from ZooKeeper
            def applied() -> bool:
                q = b2.broker.quotas
                return (
                    q.produce.overrides.get(QuotaEntity("alice", None)) == 5000
                    and q.fetch.overrides.get(QuotaEntity("alice", "my%20app")) == 7000
                    and q.request.overrides.get(QuotaEntity(None, "<default>")) == 200
                    and q.produce.overrides.get(QuotaEntity(None, "tiny")) == 1000
                    and q.connection_rate("10.1.2.3") == 7
                    and q.connection_rate("127.0.0.1") == 1000
                )

            await eventually(applied, what="broker 2 applies the quotas")
            assert b2.broker.scram_credentials.get("alice", "SCRAM-SHA-512") is not None
            described = await call(b2, DescribeClientQuotasRequest(components=[]), 1)
            assert _entries(described) == {
                ((("client-id", None),), (("request_percentage", 200.0),)),
                ((("client-id", "tiny"),), (("producer_byte_rate", 1000.0),)),
                ((("user", "alice"),), (("producer_byte_rate", 5000.0),)),
                (
                    (("user", "alice"), ("client-id", "my app")),
                    (("consumer_byte_rate", 7000.0),),
                ),
                ((("ip", "10.1.2.3"),), (("connection_creation_rate", 7.0),)),
                ((("ip", "localhost"),), (("connection_creation_rate", 1000.0),)),
            }

            # enforced on the other broker
            # with a follower: acks=all waits for it, the answer is a `Later`
            await call(b2, _create("held", 2, 1), 2)
            await eventually(
                lambda: (
                    (p := b2.broker.partition("held", 0)) is not None
                    and p.is_local_leader
                    and len(p.isr) == 2
                ),
                what="broker 2 leads held-0, broker 1 in its ISR",
            )
            listener = b2.listeners[0]
            body: ProduceRequest = produce_request("held", 0, [SimpleRecord(None, b"q" * 15_000)])
            produced = await request_once(listener.host, listener.port, body, 9, client_id="tiny")
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            assert produced.throttle_time_ms > 2000  # 15 kB over 10 s of windows at 1 kB/s

            # removing the last quota of an entity deletes its znodes, as Kafka does
            answer = await call(
                b2,
                A(
                    entries=[
                        alteration(
                            [("user", "alice"), ("client-id", "my app")], consumer_byte_rate=None
                        )
                    ]
                ),
                1,
            )
            assert answer.entries[0].error_code == ErrorCode.NONE
            assert await znode(b1, "/config/users/alice/clients") is None
            assert await znode(b1, "/config/users/alice") is not None  # it holds more
            await eventually(
                lambda: QuotaEntity("alice", "my%20app") not in b1.broker.quotas.fetch.overrides,
                what="broker 1 drops the quota",
            )
            nursery.cancel_scope.cancel()

    trio.run(main)


def _create(name: str, *replicas: int) -> CreateTopicsRequest:
    """One partition on `replicas`, led by the first."""
    T = CreateTopicsRequest
    topic = T.CreatableTopic(
        name=name,
        num_partitions=-1,
        replication_factor=-1,
        assignments=[T.CreatableReplicaAssignment(partition_index=0, broker_ids=list(replicas))],
    )
    return T(topics=[topic], timeout_ms=10_000)


@pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")
def test_kafka_reads_our_quotas_and_we_read_its(zk_connect: str, tmp_path: Path) -> None:
    """On one ZooKeeper: what our broker wrote, Kafka 3.9 describes and enforces the same; what
    Kafka writes, we read (and would write byte for byte the same)."""
    ours = A(
        entries=[
            alteration([("user", "alice")], producer_byte_rate=5000.0),
            alteration([("user", "alice"), ("client-id", "my app")], request_percentage=12.5),
            alteration([("client-id", None)], consumer_byte_rate=3000.0),
            alteration([("ip", "10.1.2.3")], connection_creation_rate=7.0),
        ]
    )

    async def write_ours() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            answer = await call(b1, ours, 1)
            assert [e.error_code for e in answer.entries] == [ErrorCode.NONE] * 4
            nursery.cancel_scope.cancel()

    trio.run(write_ours)
    with (
        kafka_broker(zk_connect, broker_id=0, heap="384m") as kafka,
        RawClient(kafka.bootstrap_servers) as client,
    ):
        described = client.request(DescribeClientQuotasRequest(components=[]), 1)
        assert described.error_code == ErrorCode.NONE
        assert _entries(described) == {
            ((("user", "alice"),), (("producer_byte_rate", 5000.0),)),
            (
                (("user", "alice"), ("client-id", "my app")),
                (("request_percentage", 12.5),),
            ),
            ((("client-id", None),), (("consumer_byte_rate", 3000.0),)),
            ((("ip", "10.1.2.3"),), (("connection_creation_rate", 7.0),)),
        }
        theirs = A(
            entries=[
                alteration([("client-id", "their app")], producer_byte_rate=1234.0),
                alteration([("ip", None)], connection_creation_rate=9.0),
            ]
        )
        answer = client.request(theirs, 1)
        assert [e.error_code for e in answer.entries] == [ErrorCode.NONE] * 2

    async def read_theirs() -> None:
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1)
            assert b1.broker.cluster is not None
            raw = await znode(b1, "/config/clients/their%20app")
            assert raw == {"version": 1, "config": {"producer_byte_rate": "1234"}}
            await eventually(
                lambda: (
                    b1.broker.quotas.produce.overrides.get(QuotaEntity(None, "their%20app")) == 1234
                ),
                what="our broker applies Kafka's quota",
            )
            raw = await znode(b1, "/config/ips/<default>")
            assert raw == {"version": 1, "config": {"connection_creation_rate": "9"}}
            assert b1.broker.quotas.connection_rate("10.9.9.9") == 9
            nursery.cancel_scope.cancel()

    trio.run(read_theirs)


def _entries(answer: Any) -> set[tuple[Any, ...]]:
    return {
        (
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            tuple((v.key, v.value) for v in entry.values),
        )
        for entry in answer.entries
    }
