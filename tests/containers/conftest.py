"""The container tests: skipped, with the reason, where Docker cannot run them.

They need a Docker engine and the images ``make image`` builds (``wirebroker:latest``,
``wirebroker-kafka:3.9``); ``make test`` runs without them and these tests then say what is
missing. No image registry is reachable here, so testcontainers' reaper (Ryuk, an image it would
pull) is off unless the environment says otherwise; every test removes its own containers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def _problem() -> str | None:
    try:
        from wirebroker.testcontainers import DEFAULT_IMAGE, KAFKA_IMAGE, docker_problem
    except ImportError:
        return "testcontainers is not installed: pip install -e '.[testcontainers]'"
    return docker_problem(DEFAULT_IMAGE, KAFKA_IMAGE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    mine = [item for item in items if here in Path(str(item.fspath)).parents]
    reason = _problem() if mine else None
    for item in mine:
        item.add_marker(pytest.mark.integration)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
