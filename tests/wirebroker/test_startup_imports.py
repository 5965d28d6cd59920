"""A broker starts without the libraries only some brokers need (bench row 7: spawn to first
acknowledged produce is mostly Python imports): prometheus_client comes with the metrics
endpoint, the codecs with the first compressed batch, kazoo and the znodes' classes with
`zookeeper.connect`, the ACL authorizer with `authorizer.class.name`, the group and transaction
coordinators with their first use or their internal topic, each handler module with its API's
first request, TLS with an SSL listener, the SASL authenticator with a SASL listener's first connection and each
mechanism's module with its first exchange or credential, the log cleaner with the first
compaction, and nothing asks importlib.metadata for a version; the command imports what it
needs with the cyclic collector off. Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from wirebroker.handlers import HANDLED

COORDINATORS = (
    "wirebroker.group.coordinator",
    "wirebroker.group.metadata_manager",
    "wirebroker.group.state",
    "wirebroker.txn.coordinator",
    "wirebroker.txn.state_manager",
    "wirebroker.txn.markers",
    "wirebroker.coordinator_store",
)
HANDLER_MODULES = tuple(sorted({f"wirebroker.handlers.{m}" for m, _, _ in HANDLED.values()}))
ONLY_WHEN_NEEDED = (
    "prometheus_client",
    "cramjam",
    "lz4",
    "zstandard",
    "xxhash",
    "kazoo",
    "importlib.metadata",
    "wirebroker.zk.znodes",
    "wirebroker.authorizer.acl_authorizer",
    "wirebroker.tls",
    "wirebroker.sasl.authenticator",
    "wirebroker.sasl.plain",
    "wirebroker.sasl.scram",
    "wirebroker.sasl.oauthbearer",
    "storage.cleaner",
    *COORDINATORS,
    *HANDLER_MODULES,
)

# Starts a broker on a free port, runs the statement given (with `broker`), stops it, and prints
# which of the modules above it loaded.
SCRIPT = """
import json, sys
import trio
from wirebroker.cli import serve_broker
from wirebroker.config import BrokerConfig

async def main():
    config = BrokerConfig.from_properties(json.loads(sys.argv[1]))
    async with trio.open_nursery() as nursery:
        running = await nursery.start(serve_broker, config)
        broker = running.broker
        exec(sys.argv[3])
        await running.stop()

trio.run(main)
print(json.dumps(sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)))
"""


def loaded_after_start(tmp_path: Path, properties: dict[str, str], then: str = "") -> list[str]:
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), **properties}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(settings), json.dumps(ONLY_WHEN_NEEDED), then],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_a_plain_broker_loads_none_of_them(tmp_path: Path) -> None:
    assert loaded_after_start(tmp_path, {}) == []


def test_the_metrics_endpoint_brings_prometheus_client(tmp_path: Path) -> None:
    loaded = loaded_after_start(tmp_path, {"wirebroker.metrics.listener": "127.0.0.1:0"})
    assert "prometheus_client" in loaded


def test_the_coordinators_come_with_their_topics(tmp_path: Path) -> None:
    """Built on first use (here: the registry's), and at the next start because their topic
    exists: an embedded broker loads `__consumer_offsets` and `__transaction_state` when it
    starts, as Kafka does."""
    first = loaded_after_start(
        tmp_path,
        {},
        "broker.groups; broker.transactions; "
        "broker.create_topic('__consumer_offsets', 1, 1, {}); "
        "broker.create_topic('__transaction_state', 1, 1, {})",
    )
    assert set(COORDINATORS) <= set(first)
    assert set(COORDINATORS) <= set(loaded_after_start(tmp_path, {}))


def test_a_request_brings_only_its_handler(tmp_path: Path) -> None:
    lookup = "from wirebroker.dispatch import REGISTRY; REGISTRY[0]"  # Produce's first request
    loaded = loaded_after_start(tmp_path, {}, lookup)
    assert [m for m in loaded if m in HANDLER_MODULES] == ["wirebroker.handlers.produce"]


def test_the_command_imports_without_collections_and_then_collects() -> None:
    # `wirebroker.__main__` imports the broker with the cyclic collector off, then freezes those
    # objects and turns it back on: a broker left without collection would leak every cycle
    script = (
        "import gc, sys\n"
        "sys.argv = ['wirebroker', 'serve', '--list-configs']\n"
        "collections = []\n"
        "def during_import(phase, info):\n"
        "    if not hasattr(sys.modules.get('wirebroker.cli'), 'main'):\n"
        "        collections.append(phase)\n"
        # (after the entry's own import: compiling it when no .pyc exists yet may collect)
        "from wirebroker.__main__ import main\n"
        "gc.callbacks.append(during_import)\n"
        "main()\n"
        "print(len(collections), gc.isenabled(), gc.get_freeze_count())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    collections, enabled, frozen = out.stdout.splitlines()[-1].split()
    assert collections == "0"
    assert enabled == "True"
    assert int(frozen) > 10_000
