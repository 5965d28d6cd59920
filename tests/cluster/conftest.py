"""Fixtures of the cluster tests: one real ZooKeeper for the session (from the Kafka jar set).

The tests need `make jars` (ZooKeeper 3.8 comes with Kafka's jars) and a JDK; without them they
are skipped. Each test gets its own chroot, so tests never see each other's znodes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from wirebroker.zookeeper_server import ZooKeeperServer, jars_available, zookeeper


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZooKeeperServer]:
    if not jars_available():
        pytest.skip("no ZooKeeper jars: run `make jars`")
    with zookeeper(heap="128m") as server:
        yield server


@pytest.fixture
def zk_connect(zk_server: ZooKeeperServer) -> str:
    """A `zookeeper.connect` string with a chroot of this test's own."""
    return f"{zk_server.connect}/wb-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kind() -> str:
    """The broker kind the process-level failure tests run: ``wirebroker`` (default) or, with
    ``WIREBROKER_CLUSTER_TARGET=kafka``, Apache Kafka 3.9 (how those scenarios were validated)."""
    return os.environ.get("WIREBROKER_CLUSTER_TARGET", "wirebroker")
