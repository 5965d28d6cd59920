"""Start and stop a real ZooKeeper and a real Apache Kafka 3.9 broker (ZooKeeper mode).

This module owns running the reference implementation for compatibility work: it
launches the JVMs from the jars that ``jars/fetch.sh`` puts in ``.cache/jars/kafka/``,
on free loopback ports with throw-away data folders, waits until each one answers
(ZooKeeper's ``ruok``; Kafka's ApiVersions plus a Metadata round trip that lists the
broker), and stops them with SIGTERM, then SIGKILL after a grace period, always
removing the temporary folders. It also runs Kafka's CLI tools by main class.

Stdlib only (plus ``subprocess``): it must not depend on wirebroker's own codec. The JVM and
ZooKeeper launching it builds on lives in ``wirebroker.zookeeper_server`` (shared with
``wirebroker cluster``).

Typical use::

    with kafka_cluster() as cluster:
        print(cluster.bootstrap_servers)   # "127.0.0.1:PORT"

``kafka_reference()`` runs the same broker, with the same settings, in a container of the image
``make image`` builds when Docker works (through ``wirebroker.testcontainers``), and from the jars
otherwise; ``WIREBROKER_COMPAT_KAFKA=jars`` or ``=docker`` chooses.

A broker can also advertise a second, client-facing listener on a port that something
else (e.g. a recording proxy) listens on: ``kafka_cluster(client_advertised_port=P)``;
the proxy then forwards to ``cluster.broker.client_port``. Inter-broker traffic keeps
using the broker's own PLAINTEXT listener, so it never passes through the proxy.
``kafka_cluster(sasl_users={"admin": "pw", ...})`` adds a SASL_PLAINTEXT listener whose PLAIN
users those are (``cluster.broker.sasl_port``), e.g. for an authorizer's tests.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wirebroker.broker_probe import api_versions as kafka_api_versions
from wirebroker.broker_probe import broker_listed
from wirebroker.broker_probe import metadata_brokers as kafka_metadata_brokers  # noqa: F401
from wirebroker.zookeeper_server import (  # noqa: F401  (re-exported for the compat suite)
    _LOG4J_PROPERTIES,
    DEFAULT_HEAP,
    DEFAULT_STARTUP_TIMEOUT,
    JARS_ENV,
    LOOPBACK,
    JavaProcess,
    ZooKeeperServer,
    _wait_until,
    _write_properties,
    free_port,
    jars_available,
    jars_dir,
    java_command,
    java_executable,
    write_log4j_config,
    zookeeper,
    zookeeper_ruok,
)
from wirebroker.zookeeper_server import LaunchError as KafkaProcessError

KAFKA_MAIN = "kafka.Kafka"


def kafka_version(directory: Path | None = None) -> str:
    """The Kafka version of the jar set, read from the ``kafka_2.13-<version>.jar`` name."""
    d = directory or jars_dir()
    for jar in sorted(d.glob("kafka_2.13-*.jar")):
        return jar.name[len("kafka_2.13-") : -len(".jar")]
    raise KafkaProcessError(f"no kafka_2.13-*.jar in {d}; run `make jars`")


# --------------------------------------------------------------------------- Kafka


@dataclass
class KafkaBroker:
    """A running Kafka broker (ZooKeeper mode)."""

    broker_id: int
    host: str
    port: int
    """The PLAINTEXT listener: inter-broker traffic and direct clients; advertised as itself."""
    log_dir: Path
    properties: dict[str, str]
    process: JavaProcess
    client_port: int | None = None
    """Bound port of the CLIENT listener, when ``client_advertised_port`` was given."""
    client_advertised_port: int | None = None
    """Port the CLIENT listener advertises (e.g. a proxy's), or None."""
    sasl_port: int | None = None
    """Port of the SASL_PLAINTEXT listener, when ``sasl_users`` were given."""
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` clients should bootstrap from (the advertised client port if any)."""
        return f"{self.host}:{self.client_advertised_port or self.port}"


def kafka_properties(
    *,
    broker_id: int,
    port: int,
    zookeeper_connect: str,
    log_dir: Path,
    client_port: int | None = None,
    client_advertised_port: int | None = None,
    sasl_port: int | None = None,
    sasl_users: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """``server.properties`` for a single test broker in ZooKeeper mode. With ``sasl_port`` a
    SASL_PLAINTEXT listener offers PLAIN to ``sasl_users`` (user -> password); brokers keep
    talking to each other over PLAINTEXT."""
    props: dict[str, object] = {
        "broker.id": broker_id,
        "zookeeper.connect": zookeeper_connect,
        "zookeeper.connection.timeout.ms": 30000,
        "log.dirs": log_dir,
        "num.partitions": 1,
        "default.replication.factor": 1,
        "offsets.topic.replication.factor": 1,
        # Fewer __consumer_offsets partitions: the first group starts much faster.
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "true",
        "delete.topic.enable": "true",
        "num.network.threads": 2,
        "num.io.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
        "log.flush.interval.messages": 9223372036854775807,
        "controlled.shutdown.enable": "true",
        "controlled.shutdown.max.retries": 1,
    }
    if client_advertised_port is None:
        props["listeners"] = f"PLAINTEXT://{LOOPBACK}:{port}"
        props["advertised.listeners"] = f"PLAINTEXT://{LOOPBACK}:{port}"
    else:
        if client_port is None:
            raise ValueError("client_port is required with client_advertised_port")
        props["listeners"] = f"PLAINTEXT://{LOOPBACK}:{port},CLIENT://{LOOPBACK}:{client_port}"
        props["advertised.listeners"] = (
            f"PLAINTEXT://{LOOPBACK}:{port},CLIENT://{LOOPBACK}:{client_advertised_port}"
        )
        props["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT"
        props["inter.broker.listener.name"] = "PLAINTEXT"
    if sasl_port is not None:
        sasl = f"SASL_PLAINTEXT://{LOOPBACK}:{sasl_port}"
        props["listeners"] = f"{props['listeners']},{sasl}"
        props["advertised.listeners"] = f"{props['advertised.listeners']},{sasl}"
        if "listener.security.protocol.map" in props:
            props["listener.security.protocol.map"] = (
                f"{props['listener.security.protocol.map']},SASL_PLAINTEXT:SASL_PLAINTEXT"
            )
        props["inter.broker.listener.name"] = "PLAINTEXT"
        props["sasl.enabled.mechanisms"] = "PLAIN"
        props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            + " ".join(f'user_{u}="{pw}"' for u, pw in (sasl_users or {}).items())
            + ";"
        )
    if overrides:
        props.update(overrides)
    return {k: str(v) for k, v in props.items()}


@contextlib.contextmanager
def kafka_broker(
    zookeeper_connect: str,
    *,
    broker_id: int = 0,
    port: int | None = None,
    client_advertised_port: int | None = None,
    sasl_users: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    heap: str = DEFAULT_HEAP,
    log_level: str = "INFO",
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    workdir: Path | None = None,
    jvm_options: Sequence[str] = (),
) -> Iterator[KafkaBroker]:
    """Run a Kafka broker against ``zookeeper_connect`` until the block exits.

    Ready means: the port accepts, ApiVersions answers, and Metadata lists this broker
    and a controller. With ``client_advertised_port`` a second listener (CLIENT) is bound
    to its own free port and advertises ``client_advertised_port`` instead. With
    ``sasl_users`` a SASL_PLAINTEXT listener (PLAIN, those users) gets a free port too.
    ``jvm_options`` are the JVM's (``-D`` system properties, as KAFKA_OPTS passes them).
    """
    own_tmp = workdir is None
    base = Path(tempfile.mkdtemp(prefix="wb-kafka-")) if own_tmp else workdir
    assert base is not None
    proc: JavaProcess | None = None
    try:
        base.mkdir(parents=True, exist_ok=True)
        kafka_port = port or free_port()
        client_port = free_port() if client_advertised_port is not None else None
        sasl_port = free_port() if sasl_users is not None else None
        log_dir = base / "kafka-logs"
        props = kafka_properties(
            broker_id=broker_id,
            port=kafka_port,
            zookeeper_connect=zookeeper_connect,
            log_dir=log_dir,
            client_port=client_port,
            client_advertised_port=client_advertised_port,
            sasl_port=sasl_port,
            sasl_users=sasl_users,
            overrides=overrides,
        )
        cfg = _write_properties(base / "server.properties", props)
        log4j = write_log4j_config(base / "log4j.properties", log_level)
        argv = java_command(
            KAFKA_MAIN, [str(cfg)], heap=heap, log4j_config=log4j, jvm_options=jvm_options
        )
        proc = JavaProcess(f"kafka-{broker_id}", argv, base / "kafka.log", base).start()
        _wait_until(
            lambda: bool(kafka_api_versions(LOOPBACK, kafka_port)),
            proc,
            startup_timeout,
            f"Kafka ApiVersions on {LOOPBACK}:{kafka_port}",
        )
        _wait_until(
            lambda: broker_listed(LOOPBACK, kafka_port, broker_id),
            proc,
            startup_timeout,
            f"Kafka Metadata to list broker {broker_id}",
        )
        if client_port is not None:
            _wait_until(
                lambda: bool(kafka_api_versions(LOOPBACK, client_port)),
                proc,
                startup_timeout,
                f"Kafka CLIENT listener on {LOOPBACK}:{client_port}",
            )
        yield KafkaBroker(
            broker_id=broker_id,
            host=LOOPBACK,
            port=kafka_port,
            log_dir=log_dir,
            properties=props,
            process=proc,
            client_port=client_port,
            client_advertised_port=client_advertised_port,
            sasl_port=sasl_port,
            api_versions=kafka_api_versions(LOOPBACK, kafka_port),
        )
    finally:
        if proc is not None:
            proc.stop()
        if own_tmp:
            shutil.rmtree(base, ignore_errors=True)


@dataclass
class KafkaCluster:
    """ZooKeeper plus one Kafka broker."""

    zookeeper: ZooKeeperServer
    broker: KafkaBroker

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers


@contextlib.contextmanager
def kafka_cluster(
    *,
    client_advertised_port: int | None = None,
    sasl_users: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    heap: str = DEFAULT_HEAP,
    log_level: str = "INFO",
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
) -> Iterator[KafkaCluster]:
    """ZooKeeper + one broker; both stopped (broker first) and cleaned up on exit."""
    with (
        zookeeper(heap=heap, startup_timeout=startup_timeout) as zk,
        kafka_broker(
            zk.connect,
            client_advertised_port=client_advertised_port,
            sasl_users=sasl_users,
            overrides=overrides,
            heap=heap,
            log_level=log_level,
            startup_timeout=startup_timeout,
        ) as broker,
    ):
        yield KafkaCluster(zk, broker)


# --------------------------------------------------------------------------- the reference

KAFKA_RUNNER_ENV = "WIREBROKER_COMPAT_KAFKA"
"""``docker`` or ``jars``: how ``kafka_reference`` runs Kafka; unset, Docker when it works."""

#: Settings of a test broker that ``kafka_properties`` makes and a container does not take
#: from them (the image sets its own listeners, ZooKeeper and data folder).
_CONTAINER_OWNS = frozenset({"zookeeper.connect", "log.dirs", "listeners", "advertised.listeners"})


@dataclass
class KafkaReference:
    """A running Kafka 3.9 to compare with: ``how`` says where it runs."""

    bootstrap_servers: str
    how: str


def kafka_runner() -> tuple[str, str]:
    """``("docker", why)`` when Kafka runs in the ``make image`` container, else ``("jars", why)``."""
    choice = os.environ.get(KAFKA_RUNNER_ENV, "")
    if choice == "jars":
        return "jars", f"{KAFKA_RUNNER_ENV}=jars"
    try:
        from wirebroker.testcontainers import KAFKA_IMAGE, docker_problem
    except ImportError:
        problem: str | None = "testcontainers is not installed"
    else:
        problem = docker_problem(KAFKA_IMAGE)
    if problem is None:
        return "docker", f"in a container of {KAFKA_IMAGE}, through testcontainers"
    if choice == "docker":
        raise KafkaProcessError(f"{KAFKA_RUNNER_ENV}=docker, but {problem}")
    return "jars", f"from the jars in {jars_dir()} ({problem})"


@contextlib.contextmanager
def kafka_reference(*, overrides: Mapping[str, object] | None = None) -> Iterator[KafkaReference]:
    """One Kafka 3.9 broker with ``kafka_properties``' settings: in a container of the local
    Kafka image when Docker works (see ``kafka_runner``), else from the jars."""
    runner, how = kafka_runner()
    if runner == "jars":
        with kafka_cluster(overrides=overrides) as cluster:
            yield KafkaReference(cluster.bootstrap_servers, how)
        return
    from wirebroker.testcontainers import ApacheKafkaContainer

    # No image registry here for testcontainers' reaper (Ryuk): the container is removed on exit.
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    # broker.id 0, as the jars' broker and wirebroker's default: scenarios name broker 0.
    props = kafka_properties(
        broker_id=0, port=0, zookeeper_connect="", log_dir=Path("/"), overrides=overrides
    )
    container = ApacheKafkaContainer()
    for key, value in props.items():
        if key not in _CONTAINER_OWNS:
            container.with_env("KAFKA_" + key.upper().replace("_", "__").replace(".", "_"), value)
    with container:  # its start() waits until Metadata lists it (broker_listed)
        bootstrap = container.get_bootstrap_server()
        yield KafkaReference(bootstrap, how)


# --------------------------------------------------------------------------- CLI tools


def kafka_tool_command(
    main_class: str,
    args: Sequence[str],
    *,
    heap: str = "256m",
    log4j_config: Path | None = None,
) -> list[str]:
    """argv for a Kafka CLI tool by main class, e.g. ``kafka.tools.ConsoleProducer``.

    Without ``log4j_config`` the tools log WARN and above to stderr, like Kafka's
    ``config/tools-log4j.properties``.
    """
    opts = [] if log4j_config is not None else ["-Dlog4j.configuration=" + _tools_log4j_url()]
    return java_command(main_class, args, heap=heap, log4j_config=log4j_config, jvm_options=opts)


_tools_log4j_path: Path | None = None


def _tools_log4j_url() -> str:
    global _tools_log4j_path
    if _tools_log4j_path is None or not _tools_log4j_path.exists():
        fd, name = tempfile.mkstemp(prefix="wb-tools-log4j-", suffix=".properties")
        os.close(fd)
        path = Path(name)
        path.write_text(_LOG4J_PROPERTIES.format(level="WARN").replace("System.out", "System.err"))
        atexit.register(lambda: path.unlink(missing_ok=True))
        _tools_log4j_path = path
    return f"file:{_tools_log4j_path}"


def run_kafka_tool(
    main_class: str,
    args: Sequence[str],
    *,
    input: bytes | None = None,
    timeout: float = 120.0,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run a Kafka CLI tool to completion; the child is killed if ``timeout`` passes."""
    argv = kafka_tool_command(main_class, args)
    result = subprocess.run(
        argv,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise KafkaProcessError(
            f"{main_class} exited {result.returncode}:\n"
            f"{result.stderr.decode(errors='replace')[-4000:]}"
        )
    return result
