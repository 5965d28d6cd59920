"""The brokers under test: real Apache Kafka 3.9 and wirebroker, started the same way.

A ``Target`` starts brokers of one kind; every broker gets a fresh data folder, a free
loopback port and the same settings (``SHARED_PROPERTIES``: RF 1, the same segment size, no
fsync on either). Kafka runs in ZooKeeper mode from the project's jars with the JVM options
``kafka-server-start.sh`` would give it (``-Xmx1G -Xms1G`` plus ``kafka-run-class.sh``'s G1
settings); its ZooKeeper lives for the whole target session and each broker gets its own
chroot, so a fresh broker never inherits an earlier broker's topics. wirebroker runs as a
``python -m wirebroker serve`` process with this tree on its path, its modules compiled to
bytecode first, as ``pip install`` leaves them (Kafka runs from compiled jars; a broker started
under ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module at every start, which
doubled row 7); the ``wirebroker-metrics`` target is the same with its Prometheus endpoint on
(``wirebroker.metrics.listener``, not scraped), for the cost of metrics (its figures over
``wirebroker``'s).

A broker counts as ready when ApiVersions answers and Metadata lists it with a controller
(the same probes for both).

Rows 13 and 14 run against a broker that also has an SSL and a SASL_SSL listener
(``Secured``): the same server.properties keys for both, a PKCS12 keystore with a self-signed
ECDSA certificate for 127.0.0.1 made for the run, and SASL/PLAIN with one user.

Rows 10 and 11 run against a cluster of each kind (``running_cluster``): a fresh ZooKeeper
(``wirebroker.zookeeper_server.zookeeper``, the same launcher for both) and ``CLUSTER_SIZE``
brokers with ids 1..N, fresh data folders and ``CLUSTER_PROPERTIES`` (RF 3, min ISR 2, the
same ZooKeeper session timeout, no fsync). It is ready when every broker's Metadata lists all
N brokers and a controller; it is stopped brokers first, then ZooKeeper, also on Ctrl-C. ``Broker`` also reads what the report needs from ``/proc``: the
process's resident memory (VmRSS) and its CPU seconds (utime + stime).
"""

from __future__ import annotations

import compileall
import contextlib
import datetime
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from compat.kafka_process import (
    KAFKA_MAIN,
    LOOPBACK,
    ZooKeeperServer,
    free_port,
    jars_dir,
    java_executable,
    kafka_api_versions,
    kafka_metadata_brokers,
    kafka_properties,
    write_log4j_config,
    zookeeper,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

SHARED_PROPERTIES: dict[str, str] = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    # One __consumer_offsets partition on both: ConsumerPerformance's first group is not a
    # 50-partition topic creation on either broker.
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # The transaction log (rows 15 and 16) as one partition on both, as __consumer_offsets.
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "auto.create.topics.enable": "true",
    "log.segment.bytes": str(1 << 30),
    # No fsync on either: both brokers leave flushing to the OS (Kafka's default).
    "log.flush.interval.messages": str(2**63 - 1),
}
"""server.properties keys given to both brokers, with the same values."""

KAFKA_ONLY_PROPERTIES: dict[str, str] = {
    # compat's test settings shrink these; the benchmark runs Kafka's defaults.
    "num.network.threads": "3",
    "num.io.threads": "8",
    "num.recovery.threads.per.data.dir": "1",
}
"""Kafka's own defaults restored over compat's test settings."""

CLUSTER_SIZE = 3
SESSION_TIMEOUT_MS = 6000
"""``zookeeper.session.timeout.ms`` of both clusters: how long a killed broker stays registered."""
ZOOKEEPER_TICK_MS = 200
"""The ``tickTime`` of both clusters' ZooKeeper. ZooKeeper expires sessions once a tick; at
its usual 2 s a kill's session expiry moved by up to 2 s from run to run, more than the two
brokers' whole difference in row 11."""

CLUSTER_PROPERTIES: dict[str, str] = {
    **SHARED_PROPERTIES,
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "min.insync.replicas": "2",
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "unclean.leader.election.enable": "false",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    # compat's kafka_properties() gives Kafka this already: the last broker of a cluster
    # cannot hand its leaders on, and each retry waits 5 s before the broker stops anyway.
    "controlled.shutdown.max.retries": "1",
}
"""server.properties keys given to every broker of both clusters (plus ``broker.id``)."""

KAFKA_CLUSTER_ONLY_PROPERTIES: dict[str, str] = {**KAFKA_ONLY_PROPERTIES}
"""Kafka's own defaults restored over compat's, in the clusters too."""

KAFKA_HEAP = ("-Xmx1G", "-Xms1G")
"""``kafka-server-start.sh``'s default heap."""

KAFKA_JVM_PERFORMANCE_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
"""``kafka-run-class.sh``'s default JVM options (brokers and tools alike)."""

READY_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0


SASL_USER = "bench"
SASL_PASSWORD = "bench-secret"


@dataclass(frozen=True)
class Secured:
    """Rows 13-14's listeners: SSL and SASL_SSL (PLAIN, one user) beside PLAINTEXT, from a
    PKCS12 keystore whose self-signed certificate (``certificate``, PEM, what clients trust)
    names 127.0.0.1."""

    keystore: Path
    certificate: Path
    password: str = "bench-store"

    @classmethod
    def create(cls, workdir: Path) -> Secured:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LOOPBACK)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        secured = cls(workdir / "bench-keystore.p12", workdir / "bench-certificate.pem")
        encryption = serialization.BestAvailableEncryption(secured.password.encode())
        secured.keystore.write_bytes(
            pkcs12.serialize_key_and_certificates(b"broker", key, cert, None, encryption)
        )
        secured.certificate.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return secured

    def properties(self, ports: Mapping[str, int]) -> dict[str, str]:
        """The server.properties keys both brokers get, listening on ``ports`` by listener."""
        listeners = ",".join(f"{name}://{LOOPBACK}:{port}" for name, port in ports.items())
        return {
            "listeners": listeners,
            "advertised.listeners": listeners,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": self.password,
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_{SASL_USER}="{SASL_PASSWORD}";'
            ),
        }


def secured_ports(port: int, secured: Secured | None) -> dict[str, int]:
    """Every listener's port: PLAINTEXT's, and with ``secured`` fresh ones for the others."""
    return {"PLAINTEXT": port} | (
        {name: free_port() for name in ("SSL", "SASL_SSL")} if secured else {}
    )


class BrokerError(RuntimeError):
    """A broker did not start, or died."""


@dataclass(eq=False)
class Broker:
    """One broker process: spawned at ``spawned_at`` (``time.monotonic()``), output in ``log_path``."""

    target: str
    argv: list[str]
    port: int
    log_path: Path
    env: Mapping[str, str] | None = None
    broker_id: int = 0
    #: Its log directory (Kafka's on-disk layout on both targets).
    log_dir: Path | None = None
    #: Every log directory (``log_dir`` first): more than one for row 17.
    log_dirs: list[Path] = field(default_factory=list)
    #: Every listener's port by name (PLAINTEXT's is ``port``).
    ports: dict[str, int] = field(default_factory=dict)
    spawned_at: float = 0.0
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise BrokerError(f"{self.target} broker was not spawned")
        return self.popen.pid

    def spawn(self) -> None:
        """Start the process (its own session: a terminal's Ctrl-C reaches only the harness)."""
        with open(self.log_path, "ab") as log:
            self.spawned_at = time.monotonic()
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(self.env) if self.env is not None else None,
                cwd=REPO_ROOT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_alive(self) -> None:
        """Raise with the tail of the broker's log if the process has exited."""
        if not self.alive():
            code = self.popen.returncode if self.popen else None
            raise BrokerError(f"{self.target} broker exited (code {code}):\n{self.log_tail()}")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> float:
        """Block until ApiVersions and Metadata answer; seconds from spawn to ready."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            with contextlib.suppress(OSError, ValueError):
                if kafka_api_versions(LOOPBACK, self.port, timeout=2.0):
                    brokers, controller = kafka_metadata_brokers(LOOPBACK, self.port, timeout=2.0)
                    if brokers and controller >= 0:
                        return time.monotonic() - self.spawned_at
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"{self.target} not ready after {timeout:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def terminate(self) -> None:
        """SIGTERM (a clean shutdown) without waiting; ``stop`` waits."""
        p = self.popen
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL (no shutdown at all: sockets reset, ZooKeeper session left to expire)."""
        p = self.popen
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait(10.0)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL after ``timeout`` seconds."""
        p = self.popen
        if p is None or p.poll() is not None:
            return
        self.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10.0)

    def rss_bytes(self) -> int:
        """Resident memory of the broker process (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise BrokerError(f"no VmRSS for pid {self.pid}")

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the broker process has used so far (all its threads)."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Target(Protocol):
    """Starts brokers of one kind; ``describe`` says how, for the report."""

    name: str
    workdir: Path

    def new_broker(self, secured: Secured | None = None, log_dirs: int = 1) -> Broker:
        """A broker with a fresh data folder (``log_dirs`` log directories in it), not yet
        spawned; with ``secured``, its SSL and SASL_SSL listeners too."""
        ...

    def cluster_broker(self, broker_id: int, zookeeper_connect: str, base: Path) -> Broker:
        """Broker ``broker_id`` of a cluster on ``zookeeper_connect``, data under ``base``."""
        ...

    def describe(self) -> str:
        """The launch command and settings, for the report."""
        ...


def _fresh_dir(parent: Path, prefix: str) -> Path:
    index = sum(1 for p in parent.iterdir() if p.name.startswith(prefix))
    path = parent / f"{prefix}{index}"
    path.mkdir()
    return path


@dataclass
class KafkaTarget:
    """ZooKeeper-mode Kafka brokers, all on the session's one ZooKeeper (one chroot each)."""

    workdir: Path
    zk: ZooKeeperServer
    name: str = "kafka"
    #: Settings of this target's brokers beyond the shared ones (``target_session``'s).
    own: Mapping[str, str] = field(default_factory=dict)
    last_argv: list[str] = field(default_factory=list)
    cluster_argv: list[str] = field(default_factory=list)

    def new_broker(self, secured: Secured | None = None, log_dirs: int = 1) -> Broker:
        base = _fresh_dir(self.workdir, "broker-")
        zk_connect = f"{self.zk.connect}/{base.name}"
        overrides = {**SHARED_PROPERTIES, **KAFKA_ONLY_PROPERTIES}
        broker = self._broker(0, zk_connect, base, overrides, secured, log_dirs)
        if secured is None and log_dirs == 1:  # the shared broker's command, for the report
            self.last_argv = broker.argv
        return broker

    def cluster_broker(self, broker_id: int, zookeeper_connect: str, base: Path) -> Broker:
        overrides = {**CLUSTER_PROPERTIES, **KAFKA_CLUSTER_ONLY_PROPERTIES}
        broker = self._broker(broker_id, zookeeper_connect, base, overrides)
        self.cluster_argv = broker.argv
        return broker

    def _broker(
        self,
        broker_id: int,
        zookeeper_connect: str,
        base: Path,
        overrides: Mapping[str, str],
        secured: Secured | None = None,
        log_dirs: int = 1,
    ) -> Broker:
        base.mkdir(parents=True, exist_ok=True)
        port = free_port()
        ports = secured_ports(port, secured)
        dirs = _log_dirs(base / "kafka-logs", log_dirs)
        props = kafka_properties(
            broker_id=broker_id,
            port=port,
            zookeeper_connect=zookeeper_connect,
            log_dir=dirs[0],
            overrides={
                **overrides,
                **(secured.properties(ports) if secured else {}),
                **self.own,
                "log.dirs": ",".join(map(str, dirs)),
            },
        )
        config = base / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = write_log4j_config(base / "log4j.properties", "INFO")
        argv = [
            java_executable(),
            *KAFKA_HEAP,
            *KAFKA_JVM_PERFORMANCE_OPTS,
            f"-Dlog4j.configuration=file:{log4j}",
            "-cp",
            str(jars_dir() / "*"),
            KAFKA_MAIN,
            str(config),
        ]
        return Broker(
            self.name,
            argv,
            port,
            base / "kafka.log",
            broker_id=broker_id,
            log_dir=dirs[0],
            log_dirs=dirs,
            ports=ports,
        )

    def describe(self) -> str:
        lines = []
        if self.last_argv:
            settings = {**SHARED_PROPERTIES, **KAFKA_ONLY_PROPERTIES}
            lines += [
                self._command(self.last_argv),
                "# server.properties: compat.kafka_process.kafka_properties() with "
                + " ".join(f"{k}={v}" for k, v in settings.items()),
                "# ZooKeeper: compat.kafka_process.zookeeper() on the same machine, one chroot per broker",
            ]
        if self.cluster_argv:
            settings = {**CLUSTER_PROPERTIES, **KAFKA_CLUSTER_ONLY_PROPERTIES}
            lines += [
                f"# rows 10-11, {CLUSTER_SIZE} brokers, each (broker.id=1..{CLUSTER_SIZE}):",
                self._command(self.cluster_argv),
                "# server.properties: compat.kafka_process.kafka_properties() with "
                + " ".join(f"{k}={v}" for k, v in settings.items()),
                "# ZooKeeper: wirebroker.zookeeper_server.zookeeper(), a fresh one per cluster",
            ]
        return "\n".join(lines) if lines else "(no broker started)"

    @staticmethod
    def _command(argv: list[str]) -> str:
        argv = [a.replace(str(jars_dir()), ".cache/jars/kafka") for a in argv]
        return " ".join(argv[:-1] + ["server.properties"])


def _log_dirs(first: Path, count: int) -> list[Path]:
    """``first`` and, for more than one, ``first-2``, ``first-3``...: a broker's log dirs."""
    return [first, *(first.with_name(f"{first.name}-{i}") for i in range(2, count + 1))]


@dataclass
class WirebrokerTarget:
    """``wirebroker serve`` processes run by this Python with this tree first on the path."""

    workdir: Path
    name: str = "wirebroker"
    #: Settings of this target's brokers beyond the shared ones.
    own: Mapping[str, str] = field(default_factory=dict)
    last_argv: list[str] = field(default_factory=list)
    cluster_argv: list[str] = field(default_factory=list)

    def new_broker(self, secured: Secured | None = None, log_dirs: int = 1) -> Broker:
        broker = self._broker(
            _fresh_dir(self.workdir, "broker-"),
            SHARED_PROPERTIES,
            secured=secured,
            log_dirs=log_dirs,
        )
        if secured is None and log_dirs == 1:  # the shared broker's command, for the report
            self.last_argv = broker.argv
        return broker

    def cluster_broker(self, broker_id: int, zookeeper_connect: str, base: Path) -> Broker:
        overrides = {
            **CLUSTER_PROPERTIES,
            "broker.id": str(broker_id),
            "zookeeper.connect": zookeeper_connect,
        }
        broker = self._broker(base, overrides, broker_id)
        self.cluster_argv = broker.argv
        return broker

    def _broker(
        self,
        base: Path,
        overrides: Mapping[str, str],
        broker_id: int = 0,
        secured: Secured | None = None,
        log_dirs: int = 1,
    ) -> Broker:
        base.mkdir(parents=True, exist_ok=True)
        port = free_port()
        ports = secured_ports(port, secured)
        dirs = _log_dirs(base / "data", log_dirs)
        settings = {**overrides, **(secured.properties(ports) if secured else {})}
        listeners = settings.pop("listeners", f"PLAINTEXT://{LOOPBACK}:{port}")
        settings.pop("advertised.listeners", None)  # the same as listeners
        argv = [sys.executable, "-m", "wirebroker", "serve"]
        argv += ["--listeners", listeners, "--log-dirs", ",".join(map(str, dirs))]
        for key, value in {**settings, **self.own}.items():
            argv += ["--override", f"{key}={value}"]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        return Broker(
            self.name,
            argv,
            port,
            base / "wirebroker.log",
            env=env,
            broker_id=broker_id,
            log_dir=dirs[0],
            log_dirs=dirs,
            ports=ports,
        )

    def describe(self) -> str:
        lines = [self._command(self.last_argv)] if self.last_argv else []
        if self.cluster_argv:
            lines += [
                f"# rows 10-11, {CLUSTER_SIZE} brokers, each (broker.id=1..{CLUSTER_SIZE}), "
                "and a ZooKeeper from wirebroker.zookeeper_server.zookeeper():",
                self._command(self.cluster_argv),
            ]
        return "\n".join(lines) if lines else "(no broker started)"

    @staticmethod
    def _command(argv: list[str]) -> str:
        argv = ["python" if a == sys.executable else a for a in argv]
        text = " ".join("$SCRATCH/DATA_DIR" if a.endswith("/data") else a for a in argv)
        text = re.sub(r"broker\.id=\d+", "broker.id=$ID", text)
        text = re.sub(r"zookeeper\.connect=[\d.]+:\d+", "zookeeper.connect=$ZOOKEEPER", text)
        return re.sub(r"PLAINTEXT://[\d.]+:\d+", "PLAINTEXT://$BOOTSTRAP", text)


TARGET_NAMES = ("kafka", "wirebroker", "wirebroker-metrics")
DEFAULT_TARGETS = ("kafka", "wirebroker")
METRICS_TARGET = "wirebroker-metrics"
#: The packages a wirebroker process imports from this tree.
WIREBROKER_PACKAGES = ("protocol", "storage", "wirebroker")


@contextlib.contextmanager
def target_session(
    name: str, workdir: Path, own: Mapping[str, str] | None = None
) -> Iterator[Target]:
    """A target whose brokers live under ``workdir`` (removed afterwards); Kafka's ZooKeeper too.
    ``own``: settings every broker of the session gets beyond the shared ones."""
    workdir.mkdir(parents=True, exist_ok=True)
    own = dict(own or {})
    try:
        if name == "kafka":
            with zookeeper(workdir=workdir / "zookeeper") as zk:
                yield KafkaTarget(workdir, zk, own=own)
        elif name in ("wirebroker", METRICS_TARGET):
            for package in WIREBROKER_PACKAGES:
                compileall.compile_dir(REPO_ROOT / package, quiet=1)
            if name == METRICS_TARGET:
                metrics = {"wirebroker.metrics.listener": f"{LOOPBACK}:0"}
                yield WirebrokerTarget(workdir, METRICS_TARGET, metrics | own)
            else:
                yield WirebrokerTarget(workdir, own=own)
        else:
            raise ValueError(f"unknown target {name!r}; known: {', '.join(TARGET_NAMES)}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def running(target: Target, secured: Secured | None = None, log_dirs: int = 1) -> Iterator[Broker]:
    """A fresh broker of ``target`` (with ``secured``'s listeners, ``log_dirs`` log
    directories), spawned and ready, stopped on exit."""
    broker = target.new_broker(secured, log_dirs)
    broker.spawn()
    try:
        broker.wait_ready()
        yield broker
    finally:
        broker.stop()


@dataclass
class Cluster:
    """A running cluster of one kind: its ZooKeeper and brokers by id."""

    zk: ZooKeeperServer
    brokers: dict[int, Broker]

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated (dead ones too: clients skip them)."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def live(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.alive()]

    def controller_id(self, timeout: float = 30.0) -> int:
        """The controller's id, as a live broker's Metadata reports it."""
        deadline = time.monotonic() + timeout
        while True:
            for b in self.live():
                with contextlib.suppress(OSError, ValueError):
                    _, controller = kafka_metadata_brokers(LOOPBACK, b.port, timeout=2.0)
                    if controller >= 0:
                        return controller
            if time.monotonic() > deadline:
                raise BrokerError(f"no controller after {timeout:.0f} s")
            time.sleep(0.05)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until every live broker answers and its Metadata lists every broker and a controller."""
        deadline = time.monotonic() + timeout
        for b in self.live():
            b.wait_ready(max(1.0, deadline - time.monotonic()))
        wanted = set(self.brokers)
        while True:
            pending = []
            for b in self.brokers.values():
                b.check_alive()
                try:
                    listed, controller = kafka_metadata_brokers(LOOPBACK, b.port, timeout=2.0)
                except (OSError, ValueError):
                    listed, controller = {}, -1
                if set(listed) != wanted or controller < 0:
                    pending.append(b.broker_id)
            if not pending:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(self.brokers[i].log_tail(10) for i in pending)
                raise BrokerError(
                    f"{self.brokers[pending[0]].target} cluster: brokers {pending} do not list "
                    f"all of {sorted(wanted)} after {timeout:.0f} s:\n{tails}"
                )
            time.sleep(0.1)

    @contextlib.contextmanager
    def deregistration(self, broker_id: int) -> Iterator[list[float]]:
        """Watch ``/brokers/ids/<broker_id>`` in ZooKeeper; the list gets the
        ``time.monotonic()`` of its deletion (the session's expiry after a kill -9), which
        is when the controller learns the broker is gone."""
        from kazoo.client import KazooClient

        path = f"/brokers/ids/{broker_id}"
        deleted: list[float] = []

        def on_change(event: object) -> None:
            if getattr(event, "type", None) == "DELETED":
                deleted.append(time.monotonic())

        zk = KazooClient(hosts=self.zk.connect)
        zk.start(timeout=30)
        try:
            if zk.exists(path, watch=on_change) is None:
                raise BrokerError(f"broker {broker_id} is not registered at {path}")
            yield deleted
        finally:
            zk.stop()
            zk.close()

    def restart(self, broker_id: int) -> None:
        """Spawn a killed broker again on its data folder and wait until the cluster is whole."""
        self.brokers[broker_id].spawn()
        self.wait_ready()

    def stop(self) -> None:
        """Stop the brokers one at a time (each a controlled shutdown), the controller last.

        All at once, the brokers' controlled shutdowns would race the controller's own and
        wait out their retry backoffs; one at a time, as ``wirebroker cluster`` does, each
        is quick and the controller moves at most once.
        """
        try:
            controller = self.controller_id(timeout=2.0) if self.live() else -1
        except BrokerError:
            controller = -1
        for broker_id in sorted(self.brokers, key=lambda i: (i == controller, -i)):
            self.brokers[broker_id].stop()


@contextlib.contextmanager
def running_cluster(target: Target, size: int = CLUSTER_SIZE) -> Iterator[Cluster]:
    """A fresh ZooKeeper and ``size`` fresh brokers of ``target``, ready; all stopped on exit."""
    base = _fresh_dir(target.workdir, "cluster-")
    with zookeeper(workdir=base / "zookeeper", tick_ms=ZOOKEEPER_TICK_MS) as zk:
        brokers = {
            i: target.cluster_broker(i, zk.connect, base / f"broker-{i}")
            for i in range(1, size + 1)
        }
        cluster = Cluster(zk, brokers)
        try:
            for b in brokers.values():
                b.spawn()
            cluster.wait_ready()
            yield cluster
        finally:
            cluster.stop()  # before ZooKeeper, which the brokers shut down through
