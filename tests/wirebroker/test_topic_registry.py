"""The embedded broker's topic registry (`topics.json`) is written off the event loop, in order,
before a topic change is answered, and a failed write costs neither the broker nor the change.

- A burst of CreateTopics, DeleteTopics and IncrementalAlterConfigs from concurrent
  confluent-kafka AdminClients, every one answered OK, and a FindCoordinator (which creates
  `__consumer_offsets`), then kill -9: the restarted broker has exactly the final topics,
  partition counts and config overrides (each answer waited for the write that holds its
  change).
- An in-process broker whose registry writes are held in their worker thread: Metadata is
  answered meanwhile and does not show the new topic yet (its log is made once the registry
  holds it, as Kafka makes a topic once ZooKeeper holds it), the CreateTopics is not answered
  until its write lands, and the changes made during a held write are written once, as the
  latest state, after it (never an older state over a newer one).
- A full disk (a 16 MiB tmpfs, root only): CreateTopics, DeleteTopics, CreatePartitions and
  IncrementalAlterConfigs are answered UNKNOWN_SERVER_ERROR with the reason and logged, the broker
  stays up, and none of the changes is made: not now, and not after space is freed and the broker
  killed and restarted; then the same changes succeed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

import wirebroker.topics
from protocol.errors import ErrorCode
from protocol.messages.create_partitions import CreatePartitionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.metadata import MetadataRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    alter_configs,
    assert_refused_for_a_full_disk,
    describe_configs,
    fill,
    find_coordinator,
    serving_in_process,
)
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig
from wirebroker.topics import OFFSETS_TOPIC, TopicRegistry

pytestmark = pytest.mark.integration

TIMEOUT = 30.0
WORKERS = 6
TOPICS_EACH = 6

#: name -> (partitions, config overrides)
Topics = dict[str, tuple[int, dict[str, str]]]


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _done(futures: dict[Any, Any]) -> None:
    for future in futures.values():
        future.result(timeout=TIMEOUT)  # raises the broker's error, if any


def _burst(bootstrap: str, worker: int) -> Topics:
    """One client's creates, config changes, deletes and re-creates, each answered before the
    next; what it leaves."""
    admin = _admin(bootstrap)
    left: Topics = {}
    names = [f"burst-{worker}-{i}" for i in range(TOPICS_EACH)]
    for i, name in enumerate(names):
        configs = {"retention.ms": str(60_000 * (worker * TOPICS_EACH + i + 1))}
        _done(admin.create_topics([NewTopic(name, 1 + i % 3, config=configs)]))
        left[name] = (1 + i % 3, configs)
    for i, name in enumerate(names):
        if i % 3 == 0:
            _done(admin.delete_topics([name]))
            del left[name]
        elif i % 3 == 1:
            entry = ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET
            )
            resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry])
            _done(admin.incremental_alter_configs([resource]))
            left[name][1]["cleanup.policy"] = "compact"
    again = names[0]  # deleted above: created again, with another size and config
    _done(admin.create_topics([NewTopic(again, 4, config={"segment.ms": "3600000"})]))
    left[again] = (4, {"segment.ms": "3600000"})
    return left


def _topics(bootstrap: str, prefix: str) -> Topics:
    """The broker's topics named `prefix`..., with their partition counts and overrides."""
    admin = _admin(bootstrap)
    listed = admin.list_topics(timeout=TIMEOUT).topics
    names = [name for name in listed if name.startswith(prefix)]
    if not names:
        return {}
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names])
    found: Topics = {}
    for resource, future in described.items():
        entries = future.result(timeout=TIMEOUT)
        overrides = {
            key: entry.value
            for key, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        }
        found[resource.name] = (len(listed[resource.name].partitions), overrides)
    return found


def test_a_burst_of_topic_changes_survives_a_kill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            results = list(pool.map(partial(_burst, broker.bootstrap), range(WORKERS)))
        expected = {name: topic for left in results for name, topic in left.items()}
        assert len(expected) == WORKERS * (TOPICS_EACH - TOPICS_EACH // 3 + 1)
        assert _topics(broker.bootstrap, "burst-") == expected
        with RawClient(broker.bootstrap, timeout=TIMEOUT) as client:
            found = find_coordinator(client, FindCoordinatorRequest(key="g", key_type=0), 3)
        assert found.error_code == ErrorCode.NONE
        broker.restart(clean=False)  # kill -9: only what the answers waited for is on disk
        assert _topics(broker.bootstrap, "burst-") == expected
        assert OFFSETS_TOPIC in _listed(broker.bootstrap)
        stored = json.loads((tmp_path / "data" / "topics.json").read_text())["topics"]
        del stored[OFFSETS_TOPIC]
        assert {n: (t["partitions"], t["configs"]) for n, t in stored.items()} == expected
    finally:
        broker.stop()
    assert not broker.tracebacks(), "\n".join(broker.log)


class _HeldWrites:
    """Wraps the registry's `write_json_atomically`: records the thread and the topics of every
    write, and holds the first until `release` is set."""

    def __init__(self) -> None:
        self.write = wirebroker.topics.write_json_atomically
        self.writes: list[tuple[int, list[str]]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, path: Path, obj: Any, **kwargs: Any) -> None:
        self.writes.append((threading.get_ident(), sorted(obj["topics"])))
        if len(self.writes) == 1:
            self.started.set()
            assert self.release.wait(TIMEOUT)
        self.write(path, obj, **kwargs)


def _create(bootstrap: str, name: str) -> tuple[int, str | None]:
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=1)
        ],
        timeout_ms=10_000,
    )
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (result,) = client.request(request, 7).topics
    return result.error_code, result.error_message


def _delete(bootstrap: str, name: str) -> tuple[int, str | None]:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (result,) = client.request(DeleteTopicsRequest(topic_names=[name]), 5).responses
    return result.error_code, result.error_message


def _listed(bootstrap: str) -> set[str]:
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        response = client.request(MetadataRequest(topics=None), 12)
    return {t.name for t in response.topics}


class _Changes:
    """Counts the registry's changes (it wraps `TopicRegistry.changed`), so that a
    test on the broker's loop can await the n-th."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.event = trio.Event()
        changed = TopicRegistry.changed

        def counted(registry: TopicRegistry, *args: Any, **kwargs: Any) -> None:
            changed(registry, *args, **kwargs)
            self.count += 1
            self.event.set()

        monkeypatch.setattr(TopicRegistry, "changed", counted)

    async def wait_for(self, count: int) -> None:
        while self.count < count:
            self.event = trio.Event()
            await self.event.wait()


class _Served(_Changes):
    """Counts the creations whose logs the broker serves (it wraps `Broker._serve_created`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.event = trio.Event()
        serve = Broker._serve_created

        def counted(broker: Broker, *args: Any) -> Any:
            failed = serve(broker, *args)
            self.count += 1
            self.event.set()
            return failed

        monkeypatch.setattr(Broker, "_serve_created", counted)


def test_writes_run_off_the_loop_in_order_and_before_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _HeldWrites()
    monkeypatch.setattr(wirebroker.topics, "write_json_atomically", held)
    changes = _Changes(monkeypatch)
    served = _Served(monkeypatch)
    config = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}
    )
    answers: dict[str, tuple[int, str | None]] = {}

    async def ask(what: str, call: Callable[[], tuple[int, str | None]]) -> None:
        answers[what] = await trio.to_thread.run_sync(call)

    async def main() -> None:
        async with (
            serving_in_process(config, held.release, TIMEOUT) as running,
            trio.open_nursery() as nursery,
        ):
            bootstrap = running.bootstrap_servers
            nursery.start_soon(ask, "create a", partial(_create, bootstrap, "a"))
            assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
            # The write of {a} is held: the loop answers others; `a` has no partition yet.
            assert "a" not in await trio.to_thread.run_sync(_listed, bootstrap)
            assert served.count == 0
            assert "create a" not in answers  # answered only once written
            nursery.start_soon(ask, "create b", partial(_create, bootstrap, "b"))
            nursery.start_soon(ask, "create c", partial(_create, bootstrap, "c"))
            nursery.start_soon(ask, "delete a", partial(_delete, bootstrap, "a"))
            await changes.wait_for(4)
            held.release.set()

    loop_thread = threading.get_ident()
    trio.run(main)
    ok = (ErrorCode.NONE, None)
    assert answers == {"create a": ok, "create b": ok, "create c": ok, "delete a": ok}
    # The state of the held write, then the latest one: never {a, b} or {a, b, c} after {b, c}.
    assert [topics for _thread, topics in held.writes] == [["a"], ["b", "c"]]
    assert loop_thread not in {thread for thread, _topics in held.writes}
    assert sorted(json.loads((tmp_path / "topics.json").read_text())["topics"]) == ["b", "c"]


def test_a_full_disk_fails_the_write_and_undoes_the_change(disk: Path) -> None:
    broker = BrokerProcess(disk / "data")
    broker.start()
    try:
        assert _create(broker.bootstrap, "before") == (ErrorCode.NONE, None)
        retention = [("retention.ms", 0, "3600000")]
        fill(disk / "filler")
        since = len(broker.log)
        assert_refused_for_a_full_disk(*_create(broker.bootstrap, "during"), disk)
        assert broker.wait_for_log("cannot write the topic registry", since=since)
        assert_refused_for_a_full_disk(*_delete(broker.bootstrap, "before"), disk)
        assert_refused_for_a_full_disk(*_add_partitions(broker.bootstrap, "before", 3), disk)
        assert_refused_for_a_full_disk(
            *alter_configs(broker.bootstrap, 2, "before", retention), disk
        )
        assert broker.alive()
        _assert_unchanged(broker.bootstrap)
        (disk / "filler").unlink()
        broker.restart(clean=False)
        _assert_unchanged(broker.bootstrap)
        # Now the same changes are made.
        assert _create(broker.bootstrap, "during") == (ErrorCode.NONE, None)
        assert _add_partitions(broker.bootstrap, "before", 3) == (ErrorCode.NONE, None)
        assert alter_configs(broker.bootstrap, 2, "before", retention) == (ErrorCode.NONE, None)
        assert {"before", "during"} <= _listed(broker.bootstrap)
        assert _partition_count(broker.bootstrap, "before") == 3
    finally:
        broker.stop()
    assert not broker.tracebacks(), "\n".join(broker.log)


def _assert_unchanged(bootstrap: str) -> None:
    """As before the disk filled: `before` with one partition and no override, no `during`."""
    assert {"before", "during"} & _listed(bootstrap) == {"before"}
    assert _partition_count(bootstrap, "before") == 1
    (retention,) = describe_configs(bootstrap, 2, "before", ["retention.ms"]).configs
    assert retention.value == "604800000"


def _add_partitions(bootstrap: str, name: str, count: int) -> tuple[int, str | None]:
    request = CreatePartitionsRequest(
        topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count)],
        timeout_ms=10_000,
    )
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (result,) = client.request(request, 3).results
    return result.error_code, result.error_message


def _partition_count(bootstrap: str, name: str) -> int:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)])
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        (topic,) = client.request(request, 12).topics
    return len(topic.partitions)
