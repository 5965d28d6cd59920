"""The TLS and SASL listeners a client's pytest suite (aiokafka's, kafka-python's) gives the one
broker of a target, in place of the brokers its own fixtures would start.

``login_listeners`` makes, in a temporary folder removed on exit, ``tests.wirebroker.pki``'s
certificates, the suite's JAAS file (which Kafka's JVM and wirebroker both read from the system
property ``java.security.auth.login.config``) and free ports for the listeners; a suite adds what
its plugin is told of them (``Listeners.plugin_target``, JSON in the tests' environment).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from compat.kafka_process import free_port
from compat.suites.targets import tls_listeners
from tests.wirebroker.pki import Pki, make_pki


@dataclass(frozen=True)
class Listeners:
    """A suite's listeners for one target run: the folder holding their certificates and JAAS
    file, the ports, the broker's settings and system properties for them, and what the suite's
    plugin is told of them (set by the suite, with ``dataclasses.replace``)."""

    work: Path
    pki: Pki
    ports: dict[str, int]  # listener name -> port, on 127.0.0.1
    settings: dict[str, str]
    system_properties: dict[str, str]
    plugin_target: str = ""  # JSON


@contextlib.contextmanager
def login_listeners(
    names: Sequence[str],
    jaas: str,
    mechanisms: Sequence[str],
    *,
    prefix: str,
    overrides: Mapping[str, str] | None = None,
) -> Iterator[Listeners]:
    """Listeners ``names`` (PLAINTEXT first, between brokers too) with ``targets.tls_listeners``'
    keys, SASL ``mechanisms`` enabled and the JAAS file ``jaas``; ``overrides`` over those keys."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        pki = make_pki(work)
        jaas_file = work / "kafka_server_jaas.conf"
        jaas_file.write_text(jaas)
        ports = {name: free_port() for name in names}
        settings = {
            **tls_listeners(work, ports),
            "sasl.enabled.mechanisms": ",".join(mechanisms),
            **(overrides or {}),
        }
        yield Listeners(
            work, pki, ports, settings, {"java.security.auth.login.config": str(jaas_file)}
        )
