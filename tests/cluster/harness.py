"""In-process brokers of a ZooKeeper cluster for trio tests, and a tiny async Kafka client.

`start_broker(nursery, zk_connect, tmp, id)` runs `serve_broker` on a free port (its own data
dir) and returns its `RunningBroker`; `start_cluster` starts brokers 1-3 and waits until they
all see each other; `create_topic` creates a topic through one of them; `call(running, body,
version)` sends one request over TCP with our codec; `produce` (acks=all) and `consume` are
confluent-kafka's (blocking: run them in a thread), `replicated` waits for every replica.
Everything is a child of the caller's nursery.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.api import decode_request, encode_response
from protocol.errors import ErrorCode
from protocol.framing import FrameBuffer, frame
from protocol.messages import APIS
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.headers import ResponseHeader
from protocol.schema import Message
from tests.wirebroker.helpers import eventually
from wirebroker.config import BrokerConfig
from wirebroker.peer import request_once
from wirebroker.server import RunningBroker, serve_broker
from wirebroker.zk import znodes
from wirebroker.zk.client import ZkClient


def broker_config(zk_connect: str, tmp: Path, broker_id: int, **extra: str) -> BrokerConfig:
    props = {
        "broker.id": str(broker_id),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp / f"broker-{broker_id}"),
        "zookeeper.connect": zk_connect,
        "zookeeper.session.timeout.ms": "6000",
        "controlled.shutdown.retry.backoff.ms": "200",
        "offsets.topic.num.partitions": "1",
    }
    # keyword style (`min_insync_replicas`) or the key itself (`listener.name.sasl_ssl....`)
    props.update({k if "." in k else k.replace("_", "."): v for k, v in extra.items()})
    return BrokerConfig.from_properties(props)


async def start_broker(
    nursery: trio.Nursery, zk_connect: str, tmp: Path, broker_id: int, **extra: str
) -> RunningBroker:
    running: RunningBroker = await nursery.start(
        serve_broker, broker_config(zk_connect, tmp, broker_id, **extra)
    )
    return running


async def start_cluster(
    nursery: trio.Nursery, zk_connect: str, tmp: Path, **extra: str
) -> dict[int, RunningBroker]:
    """Brokers 1-3, once each knows all three alive."""
    brokers = {i: await start_broker(nursery, zk_connect, tmp, i, **extra) for i in (1, 2, 3)}
    await eventually(
        lambda: all(
            len(list(b.broker.metadata_cache.alive_brokers())) == 3 for b in brokers.values()
        ),
        what="3 live brokers",
    )
    return brokers


async def create_topic(
    running: RunningBroker,
    name: str,
    partitions: int,
    replicas: int = 3,
    assignments: dict[int, list[int]] | None = None,
) -> None:
    """CreateTopics through `running` (and fail unless the topic was created); with
    `assignments`, each partition's replicas (`partitions` and `replicas` unused)."""
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replicas
    )
    if assignments is not None:
        topic.num_partitions = topic.replication_factor = -1
        topic.assignments = [
            CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=r)
            for p, r in assignments.items()
        ]
    made = await call(running, CreateTopicsRequest(topics=[topic], timeout_ms=10_000), 7)
    assert made.topics[0].error_code == ErrorCode.NONE, made.topics[0]


def sha512_upsertion(user: str, password: bytes) -> Any:
    """AlterUserScramCredentials' upsertion of `user`'s SCRAM-SHA-512 password (4096 iterations)."""
    salt = b"0123456789abcdef"
    return AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user,
        mechanism=2,
        iterations=4096,
        salt=salt,
        salted_password=hashlib.pbkdf2_hmac("sha512", password, salt, 4096),
    )


async def call(running: RunningBroker, body: Message, version: int) -> Any:
    listener = running.listeners[0]
    return await request_once(listener.host, listener.port, body, version, client_id="test")


def produce(config: dict[str, str], topic: str, count: int) -> None:
    """`count` records `replicated-<i>` to partition 0 of `topic`, acks=all (blocking)."""
    producer = Producer({**config, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, f"replicated-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def consume(config: dict[str, str], topic: str, count: int) -> list[bytes]:
    """The first `count` records of partition 0 of `topic` (blocking)."""
    consumer = Consumer({**config, "group.id": "readers", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        while len(got) < count:
            message = consumer.poll(30)
            assert message is not None and message.error() is None, message
            got.append(message.value())
    finally:
        consumer.close()
    return got


async def replicated(brokers: list[RunningBroker], topic: str, count: int) -> None:
    """Until every replica of partition 0 of `topic` ends at offset `count`."""

    def done() -> bool:
        parts = [b.broker.partition(topic, 0) for b in brokers]
        return all(p is not None and p.log_end_offset == count for p in parts)

    await eventually(done, what=f"every replica of {topic} at offset {count}")


class FakeBroker:
    """A broker that only registers in ZooKeeper and records the controller's requests.

    It answers every request with that API's empty (success) response, so the controller's
    LeaderAndIsr / UpdateMetadata / StopReplica can be checked field by field without the
    replica side. `zk` is its own session (expire it, close it, to make it leave).
    """

    def __init__(self, broker_id: int, rack: str | None = None) -> None:
        self.broker_id = broker_id
        self.rack = rack
        self.port = 0
        self.requests: list[Message] = []
        self.zk: ZkClient | None = None
        self.epoch = -1

    def received(self, kind: type[Message]) -> list[Any]:
        return [r for r in self.requests if isinstance(r, kind)]

    async def run(self, zk_connect: str, *, task_status: trio.TaskStatus[None]) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, self._serve, listeners)
            self.zk = ZkClient(zk_connect, session_timeout_ms=6000)
            await self.zk.start()
            try:
                await self.register()
                task_status.started()
                await trio.sleep_forever()
            finally:
                await self.zk.close()

    async def register(self) -> None:
        assert self.zk is not None
        reg = znodes.BrokerRegistration(
            self.broker_id, (znodes.Endpoint("PLAINTEXT", "127.0.0.1", self.port),), self.rack
        )
        path = znodes.broker_path(self.broker_id)
        await self.zk.create(path, reg.encode(), ephemeral=True, makepath=True)
        stat = await self.zk.exists(path)
        assert stat is not None
        self.epoch = stat.czxid

    async def _serve(self, stream: trio.SocketStream) -> None:
        buffer = FrameBuffer()
        try:
            async with stream:
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer.receive_data(data)
                    while True:
                        got = buffer.next_frame()
                        if not isinstance(got, memoryview):
                            break
                        request = decode_request(got)
                        self.requests.append(request.body)
                        info = APIS[request.api_key]
                        answer = encode_response(
                            ResponseHeader(correlation_id=request.header.correlation_id),
                            info.response_class()(),
                            request.api_key,
                            request.api_version,
                        )
                        await stream.send_all(frame(answer))
        except trio.BrokenResourceError:
            return
