"""The embedded broker's dynamic broker configs file (`dynamic-broker-configs.json`) is read
and written in a worker thread when an IncrementalAlterConfigs changes a BROKER resource
(confluent-kafka's AdminClient against an in-process broker): the loop never opens it."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from wirebroker.config import BrokerConfig
from wirebroker.dynamic_config import DynamicBrokerConfig
from wirebroker.server import serve_broker

pytestmark = pytest.mark.integration

TIMEOUT = 30.0


def _alter(bootstrap: str, key: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("BROKER", "0", incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT)


def test_incremental_alter_configs_reads_the_file_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    read_local = DynamicBrokerConfig.read_local

    def recorded(self: DynamicBrokerConfig) -> Any:
        threads.append(threading.get_ident())
        return read_local(self)

    monkeypatch.setattr(DynamicBrokerConfig, "read_local", recorded)
    config = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )

    async def main() -> tuple[int, int]:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(partial(serve_broker, config))
            threads.clear()  # start-up reads the file before any listener opens
            with trio.fail_after(TIMEOUT):
                for value in ("2000", "3000"):
                    bootstrap = running.bootstrap_servers
                    await trio.to_thread.run_sync(
                        _alter, bootstrap, "log.cleaner.backoff.ms", value
                    )
            backoff = running.broker.config.get_int("log.cleaner.backoff.ms")
            nursery.cancel_scope.cancel()
        return threading.get_ident(), backoff

    loop_thread, backoff = trio.run(main)
    assert backoff == 3000
    assert len(threads) >= 4 and loop_thread not in threads  # a read for each answer and write
