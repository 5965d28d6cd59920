"""The kazoo wrapper: calls from trio, watches and session changes delivered into one channel."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import trio
from kazoo.client import KazooState

from tests.cluster.processes import expire_session
from wirebroker.zk.client import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    ZkClient,
    ZkEvent,
)
from wirebroker.zk.member import allocate_producer_id_block
from wirebroker.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.integration


async def next_event(zk: ZkClient, kind: str, timeout: float = 15) -> ZkEvent:
    with trio.fail_after(timeout):
        while True:
            event = await zk.events.receive()
            if event.kind == kind:
                return event


def test_calls_watches_and_session_events(zk_connect: str) -> None:
    async def main() -> None:
        zk = ZkClient(zk_connect, session_timeout_ms=6000)
        await zk.start()
        try:
            first = await next_event(zk, "session")
            assert (first.state, first.new_session) == ("CONNECTED", False)
            # the chroot was made; paths are relative to it
            await zk.create("/a/b", b"1", makepath=True)
            with pytest.raises(NodeExistsError):
                await zk.create("/a/b", b"2")
            got = await zk.get("/a/b", watch=True)
            assert got is not None and got[0] == b"1"
            await zk.set("/a/b", b"2", version=got[1].version)
            changed = await next_event(zk, "data")
            assert (changed.path, changed.type) == ("/a/b", "CHANGED")
            with pytest.raises(BadVersionError):
                await zk.set("/a/b", b"3", version=got[1].version)
            # a watch on a missing znode fires when it appears
            assert await zk.get("/a/c", watch=True) is None
            await zk.create("/a/c")
            created = await next_event(zk, "data")
            assert (created.path, created.type) == ("/a/c", "CREATED")
            assert sorted(await zk.get_children("/a", watch=True) or []) == ["b", "c"]
            await zk.delete("/a/c")
            child = await next_event(zk, "children")
            assert child.path == "/a"
            assert await zk.get_children("/missing") is None
            # multi: all or nothing
            with pytest.raises(BadVersionError):
                await zk.multi([("check", "/a/b", 0), ("create", "/a/d", b"")])
            assert await zk.exists("/a/d") is None
            # an expired session: LOST, then CONNECTED with a new session
            creds = zk.session_credentials
            assert creds is not None
            await trio.to_thread.run_sync(expire_session, zk_connect, creds)
            states = []
            with trio.fail_after(20):
                while not (states and states[-1].state == "CONNECTED"):
                    states.append(await next_event(zk, "session"))
            assert "LOST" in [s.state for s in states]
            assert states[-1].new_session
            assert zk.session_id != creds[0]
        finally:
            await zk.close()
            await zk.close()  # twice is fine

    trio.run(main)


def test_producer_id_blocks_never_overlap(zk_connect: str) -> None:
    async def main() -> None:
        zk = ZkClient(zk_connect)
        await zk.start()
        try:
            blocks: list[tuple[int, int]] = []

            async def take(broker_id: int) -> None:
                for _ in range(5):
                    blocks.append(await allocate_producer_id_block(zk, broker_id))

            async with trio.open_nursery() as nursery:
                for broker_id in (1, 2, 3):
                    nursery.start_soon(take, broker_id)
            assert sorted(blocks) == [(i * 1000, i * 1000 + 999) for i in range(15)]
            got = await zk.get("/latest_producer_id_block")
            assert got is not None
            assert got[0].startswith(b'{"version":1,"broker":')
            assert got[0].endswith(b'"block_start":"14000","block_end":"14999"}')
        finally:
            await zk.close()

    trio.run(main)


def test_the_state_listener_never_waits_for_trio(zk_connect: str) -> None:
    """kazoo calls its listeners on its connection thread, which must not block: the event is
    queued for trio even while the trio thread is busy."""

    async def main() -> None:
        zk = ZkClient(zk_connect, session_timeout_ms=6000)
        await zk.start()
        try:
            await next_event(zk, "session")  # CONNECTED
            returned = threading.Event()

            def kazoo_thread() -> None:
                zk._on_state(KazooState.SUSPENDED)
                returned.set()

            threading.Thread(target=kazoo_thread, daemon=True).start()
            # Block the trio thread itself: a listener waiting for trio would not return.
            assert returned.wait(5), "the listener waited for the trio thread"
            assert (await next_event(zk, "session")).state == "SUSPENDED"
        finally:
            await zk.close()

    trio.run(main)


def test_calls_are_bounded_while_zookeeper_is_unreachable(
    zk_server: ZooKeeperServer, zk_connect: str
) -> None:
    """With ZooKeeper stopped (SIGSTOP) kazoo queues calls until it reconnects: a read is left
    behind as soon as its caller is cancelled, and a write gives up (ConnectionLoss) after the
    session timeout, instead of both waiting for ZooKeeper to come back."""
    pid = zk_server.process.pid
    assert pid is not None
    resumed = threading.Event()

    def resume() -> None:
        if not resumed.is_set():
            resumed.set()
            os.kill(pid, signal.SIGCONT)

    async def main() -> None:
        zk = ZkClient(zk_connect, session_timeout_ms=4000)
        await zk.start()
        await zk.create("/x")
        os.kill(pid, signal.SIGSTOP)
        safety = threading.Timer(30, resume)  # the old behaviour would wait for this
        safety.start()
        try:
            with trio.fail_after(30):
                while (await next_event(zk, "session")).state != "SUSPENDED":
                    pass
            started = time.monotonic()
            with trio.move_on_after(0.5) as read:
                await zk.get("/x")
            assert read.cancelled_caught and time.monotonic() - started < 3
            started = time.monotonic()
            with pytest.raises(ConnectionLoss):
                await zk.set("/x", b"late")
            assert time.monotonic() - started < 10
        finally:
            resume()
            safety.cancel()
            await zk.close()

    trio.run(main)
