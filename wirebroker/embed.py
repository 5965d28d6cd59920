"""Run a broker inside a Python program or a test suite.

Two ways, both yielding the bootstrap address of a broker on a free port:

* in trio code::

      async with open_broker() as bootstrap:
          ...  # bootstrap == "127.0.0.1:54321"

* in plain (threaded or asyncio) code::

      with run_broker() as bootstrap:
          producer = KafkaProducer(bootstrap_servers=bootstrap)

Without `log.dirs` the data goes to a temporary directory removed on exit. Any other
`server.properties` key can be passed as a keyword with dots written as underscores
(`num_partitions="3"`) or in the `properties` mapping.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import ExitStack, asynccontextmanager, contextmanager
from typing import Any

import trio

from wirebroker.config import BrokerConfig
from wirebroker.server import RunningBroker, serve_broker


def _config(
    properties: Mapping[str, str] | None, overrides: dict[str, str], data_dir: str
) -> BrokerConfig:
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data_dir}
    props.update(properties or {})
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return BrokerConfig.from_properties(props)


@asynccontextmanager
async def open_broker(
    properties: Mapping[str, str] | None = None, **overrides: str
) -> AsyncIterator[str]:
    """A broker served by the current trio run; yields its bootstrap address."""
    with ExitStack() as stack:
        data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="wirebroker-"))
        config = _config(properties, overrides, data_dir)
        async with trio.open_nursery() as nursery:
            running: RunningBroker = await nursery.start(serve_broker, config)
            try:
                yield running.bootstrap_servers
            finally:
                nursery.cancel_scope.cancel()


@contextmanager
def run_broker(properties: Mapping[str, str] | None = None, **overrides: str) -> Iterator[str]:
    """A broker on its own thread (with its own trio run); yields its bootstrap address."""
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        async with open_broker(properties, **overrides) as bootstrap:
            stop = trio.Event()
            state["bootstrap"] = bootstrap
            state["stop"] = stop
            state["token"] = trio.lowlevel.current_trio_token()
            ready.set()
            await stop.wait()

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as e:  # reported to the caller below
            state["error"] = e
        finally:
            ready.set()

    thread = threading.Thread(target=thread_main, name="wirebroker", daemon=True)
    thread.start()
    ready.wait()
    if "error" in state:
        raise RuntimeError("the embedded broker failed to start") from state["error"]
    try:
        yield str(state["bootstrap"])
    finally:
        stop = state["stop"]
        trio.from_thread.run_sync(stop.set, trio_token=state["token"])
        thread.join()
        if "error" in state:
            raise RuntimeError("the embedded broker failed") from state["error"]
