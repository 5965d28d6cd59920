"""A pytest fixture for users: a real broker on a free port, one per test.

Installed as a pytest plugin with wirebroker, so a test just asks for it::

    def test_roundtrip(wirebroker_bootstrap):
        producer = KafkaProducer(bootstrap_servers=wirebroker_bootstrap)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def wirebroker_bootstrap() -> Iterator[str]:
    """The bootstrap address of a fresh broker with its own temporary data directory."""
    # Imported here: pytest loads this plugin in every run, before a test needs a broker.
    from wirebroker.embed import run_broker

    with run_broker() as bootstrap:
        yield bootstrap
