"""A broker starts without the libraries only some brokers need (bench row 7: spawn to first
acknowledged produce is mostly Python imports): prometheus_client comes with the metrics
endpoint, the codecs with the first compressed batch, kazoo and the znodes' classes with
`zookeeper.connect`, the ACL authorizer with `authorizer.class.name`, and nothing asks
importlib.metadata for a version. Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
)

# Starts a broker on a free port, stops it, and prints which of the modules above it loaded.
SCRIPT = """
import json, sys
import trio
from wirebroker.cli import serve_broker
from wirebroker.config import BrokerConfig

async def main():
    config = BrokerConfig.from_properties(json.loads(sys.argv[1]))
    async with trio.open_nursery() as nursery:
        running = await nursery.start(serve_broker, config)
        await running.stop()

trio.run(main)
print(json.dumps(sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)))
"""


def loaded_after_start(tmp_path: Path, properties: dict[str, str]) -> list[str]:
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), **properties}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(settings), json.dumps(ONLY_WHEN_NEEDED)],
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
