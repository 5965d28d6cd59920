"""In-process brokers of a ZooKeeper cluster for trio tests, and a tiny async Kafka client.

`start_brokers(nursery, zk_connect, tmp, ids)` runs `serve_broker` for each id on a free port
(each its own data dir) and returns their `RunningBroker`s; `call(running, body, version)` sends
one request over TCP with our codec. Everything is a child of the caller's nursery.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from protocol.schema import Message
from wirebroker.config import BrokerConfig
from wirebroker.controller.channel import request_once
from wirebroker.server import RunningBroker, serve_broker


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
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return BrokerConfig.from_properties(props)


async def start_broker(
    nursery: trio.Nursery, zk_connect: str, tmp: Path, broker_id: int, **extra: str
) -> RunningBroker:
    running: RunningBroker = await nursery.start(
        serve_broker, broker_config(zk_connect, tmp, broker_id, **extra)
    )
    return running


async def call(running: RunningBroker, body: Message, version: int) -> Any:
    listener = running.listeners[0]
    return await request_once(listener.host, listener.port, body, version, client_id="test")


async def eventually(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if value:
                return value
            await trio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
