"""A worker thread's call held while the event loop is shown to answer: how the tests of disk
work taken off the loop (cold fetches, segment rolls, a leader's deletions, flushes and index
reads) prove that the loop does not wait for it."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from protocol.errors import ErrorCode
from protocol.messages.metadata import MetadataRequest
from tests.wirebroker.helpers import RawClient

TIMEOUT = 30.0


def metadata(bootstrap: str) -> None:
    """A Metadata request answered (of every topic, our codec): the loop is serving."""
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        response = client.request(MetadataRequest(topics=None), 12)
    assert response.topics and response.topics[0].error_code == ErrorCode.NONE


class Held:
    """Wraps a function: holds the calls `hold` picks (all by default) until `release` is
    set, recording their threads and counting them."""

    def __init__(
        self, call: Callable[..., Any], hold: Callable[..., bool] = lambda *_: True
    ) -> None:
        self.call = call
        self.hold = hold
        self.threads: set[int] = set()
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.hold(*args):
            self.calls += 1
            self.threads.add(threading.get_ident())
            self.started.set()
            assert self.release.wait(TIMEOUT)
        return self.call(*args, **kwargs)

    @asynccontextmanager
    async def answering(self, bootstrap: str) -> AsyncIterator[None]:
        """Once a call is held, the loop answers Metadata on `bootstrap`; the body runs while
        it is still held; the calls are released on the way out (a failure too)."""
        try:
            assert await trio.to_thread.run_sync(self.started.wait, TIMEOUT)
            await trio.to_thread.run_sync(metadata, bootstrap)
            yield
        finally:
            self.release.set()
