"""Fixtures of the broker tests: one broker process per module, unique topic names.

A module configures its broker with a module-level `BROKER_PROPERTIES` dict (server.properties
keys). The broker is stopped cleanly at the end of the module, and the module fails if the broker
died, exited uncleanly, or logged a traceback (a handler bug answered as UNKNOWN_SERVER_ERROR
would otherwise go unnoticed). A failing test gets the tail of the broker's log in its report.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat.kafka_process import kafka_cluster
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.pki import Pki, make_pki
from wirebroker.zookeeper_server import jars_available, jars_dir

LOG_TAIL = 60


@pytest.fixture(scope="module")
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    properties = getattr(request.module, "BROKER_PROPERTIES", {})
    with serving(BrokerProcess(tmp_path_factory.mktemp("broker"), properties), LOG_TAIL) as b:
        yield b


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA with broker and client certificates (`tests.wirebroker.pki`)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def target_bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Like `broker` (the module's `BROKER_PROPERTIES`, checked the same way at the end), but
    with ``WIREBROKER_CLUSTER_TARGET=kafka`` an Apache Kafka 3.9 broker instead (needs the
    jars): how a module's scenarios are checked against Kafka. Its address."""
    if os.environ.get("WIREBROKER_CLUSTER_TARGET") != "kafka":
        yield request.getfixturevalue("broker").bootstrap
        return
    if not jars_available():
        pytest.skip("no Kafka jars: run `make jars`")
    with kafka_cluster(overrides=getattr(request.module, "BROKER_PROPERTIES", {})) as cluster:
        yield cluster.bootstrap_servers


@pytest.fixture(scope="session")
def round_trip_class(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RoundTrip.java (the Java client's produce-and-consume) compiled against the Kafka jars;
    the folder holding the class."""
    if not jars_available() or shutil.which("javac") is None:
        pytest.skip("no Kafka jars (`make jars`) or no javac")
    classes = tmp_path_factory.mktemp("java")
    source = Path(__file__).with_name("RoundTrip.java")
    cp = f"{jars_dir()}/*"
    subprocess.run(["javac", "-cp", cp, "-d", str(classes), str(source)], check=True, timeout=120)
    return classes


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test (not created)."""
    stem = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:80].strip("-")
    return f"{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs to fill (`helpers.fill`), unmounted afterwards; skipped unless root."""
    yield from _tmpfs(tmp_path, "size=16m")


@pytest.fixture
def few_inodes_disk(tmp_path: Path) -> Iterator[Path]:
    """Like `disk`, with 300 inodes: full once that many files and directories exist (no new
    one can be made: ENOSPC)."""
    yield from _tmpfs(tmp_path, "size=16m,nr_inodes=300")


def _tmpfs(tmp_path: Path, options: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], timeout=10).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], timeout=10)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        for value in funcargs.values():
            if isinstance(value, BrokerProcess):
                report.sections.append(("broker log", "\n".join(value.log[-LOG_TAIL:])))
    return report
