"""The controller's connections to the brokers: one connection and one sender task per broker.

`ControllerChannel.send(broker_id, body, version)` queues a request for a broker and returns at
once; the broker's task sends queued requests one at a time, in order, and waits for each
answer (Kafka's RequestSendThread). A broker that cannot be reached, or drops the connection,
is reconnected with a growing backoff (`BACKOFF_S` up to `MAX_BACKOFF_S`) and the request in
hand is sent again, until the broker is removed (it left the cluster) or the controller
resigns (the whole channel is cancelled). Answers go to the optional callback, so the
controller can log errors; a callback must not block.

Requests go over `wirebroker.peer.PeerConnection`, secured as the inter-broker listener says
(TLS, a SASL login: `security`, which the controller replaces when they change at run time,
for the next connections); every request carries the controller's id and epoch and the
broker's epoch, which the caller puts in the body. A broker that refuses the controller's
login is retried like an unreachable one, with a warning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol.schema import Message
from wirebroker.peer import (
    PLAINTEXT,
    PeerAuthenticationFailed,
    PeerConnection,
    PeerError,
    PeerSecurity,
)

log = logging.getLogger(__name__)

BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
REQUEST_TIMEOUT_S = 30.0  # Kafka's controller.socket.timeout.ms
#: A request a reachable broker closed the connection on this many times is dropped (logged):
#: a broker that does not implement it (yet) must not stall the requests queued behind it.
MAX_ATTEMPTS = 3

ResponseCallback = Callable[[int, Message], Any]


@dataclass
class _Queued:
    body: Message
    version: int
    callback: ResponseCallback | None


@dataclass
class _BrokerLink:
    broker_id: int
    host: str
    port: int
    send: trio.MemorySendChannel[_Queued]
    receive: trio.MemoryReceiveChannel[_Queued]
    cancel: trio.CancelScope = field(default_factory=trio.CancelScope)
    connected_once: bool = False


class ControllerChannel:
    """Per-broker request queues of one controller, run as children of `run()`'s nursery."""

    def __init__(self, controller_id: int, security: PeerSecurity = PLAINTEXT) -> None:
        self.controller_id = controller_id
        self.security = security  # TLS and/or SASL, as the inter-broker listener
        self._links: dict[int, _BrokerLink] = {}
        self._nursery: trio.Nursery | None = None
        self.sent: list[tuple[int, str]] = []  # (broker, request name) answered: logs, tests
        self.dropped: list[tuple[int, str]] = []  # (broker, request name) given up on

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        old = self._links.get(broker_id)
        if old is not None and (old.host, old.port) == (host, port):
            return
        self.remove_broker(broker_id)
        assert self._nursery is not None, "ControllerChannel.run() is not running"
        send, receive = trio.open_memory_channel[_Queued](math.inf)
        link = _BrokerLink(broker_id, host, port, send, receive)
        self._links[broker_id] = link
        self._nursery.start_soon(self._sender, link)

    def remove_broker(self, broker_id: int) -> None:
        link = self._links.pop(broker_id, None)
        if link is not None:
            link.cancel.cancel()
            link.send.close()

    def brokers(self) -> list[int]:
        return sorted(self._links)

    def send(
        self,
        broker_id: int,
        body: Message,
        version: int,
        callback: ResponseCallback | None = None,
    ) -> None:
        link = self._links.get(broker_id)
        if link is None:
            log.info("not sending %s to broker %d: not connected", type(body).__name__, broker_id)
            return
        link.send.send_nowait(_Queued(body, version, callback))

    async def _sender(self, link: _BrokerLink) -> None:
        with link.cancel:
            backoff = BACKOFF_S
            pending: _Queued | None = None
            attempts = 0
            while True:
                try:
                    with trio.fail_after(REQUEST_TIMEOUT_S):
                        connection = await PeerConnection.open(
                            link.host,
                            link.port,
                            client_id=f"controller-{self.controller_id}",
                            security=self.security,
                        )
                except (PeerError, trio.TooSlowError) as e:
                    (log.warning if isinstance(e, PeerAuthenticationFailed) else log.debug)(
                        "broker %d at %s:%d: %s", link.broker_id, link.host, link.port, e
                    )
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, MAX_BACKOFF_S)
                    continue
                (log.debug if link.connected_once else log.info)(
                    "controller %d connected to broker %d at %s:%d",
                    self.controller_id,
                    link.broker_id,
                    link.host,
                    link.port,
                )
                link.connected_once = True
                backoff = BACKOFF_S
                try:
                    async with connection:
                        while True:
                            if pending is None:
                                pending = await link.receive.receive()
                                attempts = 0
                            attempts += 1
                            with trio.fail_after(REQUEST_TIMEOUT_S):
                                response = await connection.request(pending.body, pending.version)
                            self.sent.append((link.broker_id, type(pending.body).__name__))
                            callback, pending = pending.callback, None
                            if callback is not None:
                                try:
                                    callback(link.broker_id, response)
                                except Exception:
                                    log.exception("response callback failed")
                except (
                    OSError,
                    trio.BrokenResourceError,
                    trio.ClosedResourceError,
                    EOFError,
                    PeerError,
                ) as e:
                    log.debug(
                        "lost the connection to broker %d (%s); reconnecting", link.broker_id, e
                    )
                    if pending is not None and attempts >= MAX_ATTEMPTS:
                        log.warning(
                            "broker %d closed the connection on %s v%d %d times: dropping it",
                            link.broker_id,
                            type(pending.body).__name__,
                            pending.version,
                            attempts,
                        )
                        self.dropped.append((link.broker_id, type(pending.body).__name__))
                        pending = None
                except trio.TooSlowError:
                    log.warning("broker %d did not answer in time; reconnecting", link.broker_id)
                except trio.EndOfChannel:
                    return
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
