"""wirebroker in a throw-away Docker container for tests, with testcontainers-python.

This module owns ``WirebrokerContainer``: for wirebroker what testcontainers' ``KafkaContainer``
is for Kafka, with the same API (``get_bootstrap_server()``, ``with_env("KAFKA_...")`` config
overrides, ``with_*`` methods, a context manager that removes its container on exit). It needs
the ``testcontainers`` extra (``pip install 'wirebroker[testcontainers]'``) and the image that
``make image`` builds (``wirebroker:latest``)::

    with WirebrokerContainer() as broker:
        producer = Producer({"bootstrap.servers": broker.get_bootstrap_server()})

As in ``KafkaContainer`` the broker starts only once the container's port is mapped, so it
advertises the mapped host port to clients (listener ``PLAINTEXT`` on container port 9093) and
its container address to other containers (listener ``BROKER`` on 9092).

Two things differ from a stock testcontainers set-up, both for machines like this project's:

- Ryuk, testcontainers' reaper, is an image pulled from a registry. Where none is reachable set
  ``TESTCONTAINERS_RYUK_DISABLED=true``; the container is still removed when the ``with`` block
  exits (only a killed test process leaves it behind). Without it, a failed pull says so.
- testcontainers takes a ``/.dockerenv`` file to mean it runs inside a container and then dials
  the default gateway. When the Docker engine answers on a local socket and its bridge is on
  this machine's own network (its gateway address is one of ours), the engine is local: ports
  are published on 127.0.0.1 only and clients dial 127.0.0.1. Setting
  ``TESTCONTAINERS_HOST_OVERRIDE`` or ``TESTCONTAINERS_CONNECTION_MODE`` turns that detection
  off and testcontainers' own rules apply.

``ApacheKafkaContainer`` is the same for real Kafka 3.9 (the ``wirebroker-kafka:3.9`` image, also
built by ``make image``), to run the same tests against both. ``start()`` returns once the broker
serves clients: its log line, then its Metadata listing itself at the mapped address and a
controller (``wirebroker.broker_probe.broker_listed``; Kafka 3.9 logs "started" before its
controller's UpdateMetadata reached it, and for that moment CreateTopics fails). ``docker_problem()`` says why
containers cannot run here (or None), for tests to skip with.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import re
import shlex
import socket
import time
from collections.abc import Mapping
from typing import Any, Self

from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.utils import inside_container
from testcontainers.core.wait_strategies import LogMessageWaitStrategy

from wirebroker.broker_probe import broker_listed

DEFAULT_IMAGE = "wirebroker:latest"
"""The image ``make image`` builds."""
KAFKA_IMAGE = "wirebroker-kafka:3.9"
"""Apache Kafka 3.9 (ZooKeeper mode) from the project's jars, also built by ``make image``."""

_START_SCRIPT = "/tmp/tc-start.sh"
_WAIT_FOR_SCRIPT = f"while [ ! -f {_START_SCRIPT} ]; do sleep 0.1; done; exec sh {_START_SCRIPT}"
# Environment variables of the JVM or the image, not broker configs.
_NOT_CONFIGS = frozenset({"KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_LOG4J_OPTS"})


def env_to_config(name: str) -> str:
    """``KAFKA_LOG_RETENTION_MS`` -> ``log.retention.ms``, as Confluent's images read them
    (``__`` is ``_``, ``___`` is ``-``)."""
    key = name.removeprefix("KAFKA_").lower()
    return key.replace("___", "-").replace("__", "\0").replace("_", ".").replace("\0", "_")


@functools.cache
def _local_engine() -> bool:
    """True when testcontainers would wrongly think it runs in a container beside the engine.

    That is: a ``/.dockerenv`` file, no override from the user, a unix-socket engine, and the
    engine's bridge gateway bindable here (so the engine publishes ports on our loopback)."""
    if testcontainers_config.tc_host_override or testcontainers_config.connection_mode_override:
        return False
    if not inside_container():
        return False
    import docker

    try:
        client = docker.from_env()
        if not client.api.base_url.startswith("http+docker://localhost"):
            return False  # the engine is remote (tcp:// or ssh://): testcontainers' rules apply
        configs = client.networks.get("bridge").attrs["IPAM"]["Config"] or []
    except Exception:
        return False
    # The engine gives its bridge the subnet's first address unless told otherwise.
    gateways = [
        c.get("Gateway") or str(next(ipaddress.ip_network(c["Subnet"]).hosts()))
        for c in configs
        if c.get("Gateway") or c.get("Subnet")
    ]
    for gateway in gateways:
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind((gateway, 0))  # only an address of this machine's own interfaces binds
            return True
    return False


def docker_problem(*images: str) -> str | None:
    """Why containers of ``images`` cannot run here, or None when they can."""
    try:
        import docker
    except ImportError:
        return "the docker package is missing: pip install 'wirebroker[testcontainers]'"
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:
        return (
            f"no Docker engine answers ({type(e).__name__}): `make image` starts dockerd when run "
            "as root, or start one yourself"
        )
    for image in images:
        try:
            client.images.get(image)
        except Exception:
            return f"image {image} is missing: build it with `make image`"
    return None


class LocalEngineContainer(DockerContainer):
    """A ``DockerContainer`` that knows when the engine is on this machine (see the module's
    docstring): it then publishes its ports on 127.0.0.1 and dials them there."""

    def start(self) -> Self:
        if _local_engine():
            self.ports = {port: ("127.0.0.1",) for port in self.ports}  # type: ignore[misc]
        try:
            super().start()
        except Exception as e:
            if not testcontainers_config.ryuk_disabled and "ryuk" in str(e).lower():
                raise RuntimeError(
                    f"testcontainers could not start its reaper ({testcontainers_config.ryuk_image}):"
                    " with no image registry, set TESTCONTAINERS_RYUK_DISABLED=true"
                ) from e
            raise
        return self

    def get_container_host_ip(self) -> str:
        if _local_engine():
            return "127.0.0.1"
        return super().get_container_host_ip()

    def _get_exposed_port(self, port: int) -> int:
        if _local_engine():
            return int(self.get_docker_client().port(self.get_container_id(), port))
        return super()._get_exposed_port(port)

    def write_file(self, content: bytes, path: str) -> None:
        """Put ``content`` at ``path`` inside the (started) container."""
        import io
        import tarfile
        import time

        with io.BytesIO() as archive:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                info = tarfile.TarInfo(name=path.lstrip("/"))
                info.size = len(content)
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(content))
            self.get_wrapped_container().put_archive("/", archive.getvalue())


class _AdvertisingContainer(LocalEngineContainer):
    """A broker container that starts its broker only once the client port is mapped (as
    testcontainers' ``KafkaContainer``): it waits for a start script, written after the container
    starts, which advertises ``PLAINTEXT://<host>:<mapped port>`` to clients and
    ``BROKER://<container address>:9092`` to other containers."""

    ready: re.Pattern[str]

    def __init__(self, image: str, port: int, **kwargs: Any) -> None:
        super().__init__(image, **kwargs)
        self.port = port
        self.with_exposed_ports(port)

    def get_bootstrap_server(self) -> str:
        """``host:port`` for clients outside the container (the mapped port)."""
        return f"{self.get_container_host_ip()}:{self.get_exposed_port(self.port)}"

    def start_script(self, advertised: str) -> str:
        """The shell script that runs the broker, advertising ``advertised``."""
        raise NotImplementedError

    def start(self, timeout: float = 90) -> Self:
        self.with_kwargs(entrypoint=["sh", "-c", _WAIT_FOR_SCRIPT])
        super().start()
        host = self.get_container_host_ip()
        mapped = self.get_exposed_port(self.port)
        advertised = f"PLAINTEXT://{host}:{mapped},BROKER://$(hostname -i | cut -d' ' -f1):9092"
        self.write_file(self.start_script(advertised).encode(), _START_SCRIPT)
        deadline = time.monotonic() + timeout
        LogMessageWaitStrategy(self.ready).with_startup_timeout(int(timeout)).wait_until_ready(self)
        # Kafka logs "started" before its controller's UpdateMetadata reached it; until then
        # its Metadata lists no broker and CreateTopics fails ("larger than available brokers")
        while not broker_listed(host, mapped):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the broker in container {self.get_container_id()[:12]} logged it started, "
                    f"but its Metadata did not list it at {host}:{mapped} within {timeout:g} s"
                )
            time.sleep(0.05)
        return self


class WirebrokerContainer(_AdvertisingContainer):
    """One wirebroker broker in a container, advertising its mapped port.

    ``overrides`` (and ``with_override``, or ``with_env("KAFKA_NUM_PARTITIONS", "3")`` as with
    ``KafkaContainer``) are server.properties keys passed as ``--override``."""

    ready = re.compile(r"ready in \d+ ms on")

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        port: int = 9093,
        overrides: Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(image, port, **kwargs)
        self.overrides: dict[str, str] = {
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.overrides.update({k: str(v) for k, v in (overrides or {}).items()})

    def with_override(self, key: str, value: object) -> Self:
        """Set one broker config (a server.properties key)."""
        self.overrides[key] = str(value)
        return self

    def broker_configs(self) -> dict[str, str]:
        """The overrides, with ``KAFKA_*`` environment variables read as configs."""
        configs = dict(self.overrides)
        for name, value in self.env.items():
            if name.startswith("KAFKA_") and name not in _NOT_CONFIGS:
                configs[env_to_config(name)] = str(value)
        return configs

    def start_script(self, advertised: str) -> str:
        argv = [
            "wirebroker",
            "serve",
            f"--listeners=PLAINTEXT://0.0.0.0:{self.port},BROKER://0.0.0.0:9092",
            "--log-dirs=/data",
            "--override=listener.security.protocol.map=PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT",
            "--override=inter.broker.listener.name=BROKER",
        ]
        argv += [f"--override={k}={v}" for k, v in self.broker_configs().items()]
        return f'exec {shlex.join(argv)} --advertised-listeners="{advertised}"\n'


class ApacheKafkaContainer(_AdvertisingContainer):
    """Apache Kafka 3.9 (ZooKeeper mode, its own ZooKeeper inside) from the ``make image`` image:
    the reference to run the same tests against. Configs are ``KAFKA_*`` variables, as in
    Confluent's images (``with_env("KAFKA_NUM_PARTITIONS", "3")``)."""

    ready = re.compile(r"\[KafkaServer id=\d+\] started")

    def __init__(self, image: str = KAFKA_IMAGE, port: int = 9093, **kwargs: Any) -> None:
        super().__init__(image, port, **kwargs)
        self.with_env("KAFKA_LISTENERS", f"PLAINTEXT://0.0.0.0:{port},BROKER://0.0.0.0:9092")
        self.with_env("KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS", "1")
        self.with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")

    def start_script(self, advertised: str) -> str:
        return f'export KAFKA_ADVERTISED_LISTENERS="{advertised}"\nexec /opt/kafka/entrypoint.sh kafka\n'
