"""The TLS and SASL listeners a client's pytest suite (aiokafka's, kafka-python's) gives the
brokers of a plaintext target (one broker, a cluster), in place of the brokers its own fixtures
would start.

``login_listeners`` makes, in a temporary folder removed on exit, ``tests.wirebroker.pki``'s
certificates and the suite's JAAS file (which Kafka's JVM and wirebroker both read from the system
property ``java.security.auth.login.config``); ``compat.suites.targets.start`` gives each broker
the listeners on ports of its own, and a suite tells its plugin where they are (JSON in the
tests' environment, from ``Target.listeners``).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from compat.suites.targets import tls_settings
from tests.wirebroker.pki import Pki, make_pki


@dataclass(frozen=True)
class Listeners:
    """A suite's listeners for one target run: the folder holding their certificates and JAAS
    file, their names, and the brokers' settings and system properties for them."""

    work: Path
    pki: Pki
    names: tuple[str, ...]  # PLAINTEXT first
    settings: dict[str, str]
    system_properties: dict[str, str]


@contextlib.contextmanager
def login_listeners(
    names: Sequence[str],
    jaas: str,
    mechanisms: Sequence[str],
    *,
    prefix: str,
    overrides: Mapping[str, str] | None = None,
) -> Iterator[Listeners]:
    """Listeners ``names`` (PLAINTEXT first, between brokers too) with ``targets.tls_settings``'
    keys, SASL ``mechanisms`` enabled and the JAAS file ``jaas``; ``overrides`` over those keys."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        pki = make_pki(work)
        jaas_file = work / "kafka_server_jaas.conf"
        jaas_file.write_text(jaas)
        settings = {
            **tls_settings(work),
            "sasl.enabled.mechanisms": ",".join(mechanisms),
            **(overrides or {}),
        }
        yield Listeners(
            work,
            pki,
            tuple(names),
            settings,
            {"java.security.auth.login.config": str(jaas_file)},
        )
