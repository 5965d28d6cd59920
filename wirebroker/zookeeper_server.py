"""Run a standalone ZooKeeper 3.8 (and other JVMs) from the Kafka jar set, for clusters and tests.

This module owns launching JVM processes from the jars that ``jars/fetch.sh`` puts in
``.cache/jars/kafka/``: building the command line, starting the child in its own session with
its output in a log file, waiting until it answers (ZooKeeper's ``ruok``), and stopping it
(SIGTERM, then SIGKILL after a grace period). ``wirebroker cluster`` and the tests use
:func:`zookeeper`; ``compat/kafka_process.py`` builds its Kafka broker on the same pieces.

Stdlib only: it must not import trio or wirebroker's codec, so tools can use it anywhere.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JARS_DIR = REPO_ROOT / ".cache" / "jars" / "kafka"
JARS_ENV = "WIREBROKER_KAFKA_JARS"
"""Environment variable that overrides the folder holding the Kafka jars."""

LOOPBACK = "127.0.0.1"
DEFAULT_HEAP = "512m"
DEFAULT_STARTUP_TIMEOUT = 90.0
DEFAULT_TICK_MS = 2000  # ZooKeeper's sample zoo.cfg
MAX_SESSION_TIMEOUT_MS = 40_000  # ZooKeeper's default (20 ticks of 2 s), kept for any tick
DEFAULT_STOP_TIMEOUT = 30.0
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-Xss1m",
    # Light on a 2-core machine: one GC thread, C1 only (starts faster, less CPU).
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)

ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"

_LOG4J_PROPERTIES = """\
log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target=System.out
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.controller=INFO
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.org.apache.kafka.clients=WARN
"""


class LaunchError(RuntimeError):
    """A ZooKeeper/Kafka process could not be started or did not become ready."""


# --------------------------------------------------------------------------- helpers


def jars_dir() -> Path:
    """Folder holding the Kafka + ZooKeeper jars (``$WIREBROKER_KAFKA_JARS`` or the cache)."""
    override = os.environ.get(JARS_ENV)
    return Path(override) if override else DEFAULT_JARS_DIR


def jars_available(directory: Path | None = None) -> bool:
    """True when the jar set looks usable (``kafka_2.13-*.jar`` and zookeeper present)."""
    d = directory or jars_dir()
    return any(d.glob("kafka_2.13-*.jar")) and any(d.glob("zookeeper-[0-9]*.jar"))


def java_executable() -> str:
    """Path of ``java`` (``$JAVA_HOME/bin/java`` when set, else from ``PATH``)."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise LaunchError("java not found (install a JDK 17 or set JAVA_HOME)")
    return found


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0 and release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def write_log4j_config(path: Path, level: str = "INFO") -> Path:
    """Write a log4j 1.x (reload4j) config that logs to stdout at ``level``."""
    path.write_text(_LOG4J_PROPERTIES.format(level=level))
    return path


def java_command(
    main_class: str,
    args: Sequence[str] = (),
    *,
    heap: str = DEFAULT_HEAP,
    log4j_config: Path | None = None,
    jvm_options: Sequence[str] = (),
    directory: Path | None = None,
) -> list[str]:
    """The argv that runs ``main_class`` from the Kafka jar set."""
    d = directory or jars_dir()
    if not jars_available(d):
        raise LaunchError(f"Kafka jars missing in {d}; run `make jars`")
    cmd = [java_executable(), f"-Xmx{heap}", *DEFAULT_JVM_OPTIONS]
    if log4j_config is not None:
        cmd.append(f"-Dlog4j.configuration=file:{log4j_config}")
    cmd += list(jvm_options)
    cmd += ["-cp", str(d / "*"), main_class, *args]
    return cmd


def _write_properties(path: Path, props: Mapping[str, object]) -> Path:
    lines = [f"{k}={v}" for k, v in props.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------- processes

_live: set[JavaProcess] = set()
_live_lock = threading.Lock()


def _kill_leftovers() -> None:
    with _live_lock:
        leftovers = list(_live)
    for proc in leftovers:
        proc.stop(timeout=5.0)


atexit.register(_kill_leftovers)


@dataclass(eq=False)
class JavaProcess:
    """One JVM child process with its output going to ``log_path``."""

    name: str
    argv: list[str]
    log_path: Path
    cwd: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> JavaProcess:
        """Launch the process (in its own session, so a terminal's Ctrl-C does not reach it)."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        finally:
            log.close()
        with _live_lock:
            _live.add(self)
        return self

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """Last ``lines`` lines of the process output (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> int | None:
        """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; returns the exit code."""
        p = self.popen
        if p is None:
            return None
        try:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        p.kill()
                    p.wait(timeout=10.0)
            return p.returncode
        finally:
            with _live_lock:
                _live.discard(self)


def _wait_until(
    check: Callable[[], bool],
    proc: JavaProcess,
    timeout: float,
    what: str,
) -> None:
    """Poll ``check`` until it is true; fail early if ``proc`` exits, or at ``timeout``."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    last_error: BaseException | None = None
    while True:
        if not proc.running():
            code = proc.popen.returncode if proc.popen else None
            raise LaunchError(f"{proc.name} exited (code {code}) before {what}:\n{proc.log_tail()}")
        try:
            if check():
                return
        except (OSError, ValueError, struct.error) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise LaunchError(
                f"{proc.name}: timed out after {timeout:.0f}s waiting for {what}"
                f" (last error: {last_error!r}):\n{proc.log_tail()}"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


# --------------------------------------------------------------------------- probes


def zookeeper_ruok(
    host: str, port: int, timeout: float = 2.0, tls: ssl.SSLContext | None = None
) -> bool:
    """True when ZooKeeper answers the ``ruok`` four-letter command with ``imok`` (over TLS
    with a context: a secureClientPort)."""
    with contextlib.ExitStack() as stack:
        s = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
        if tls is not None:
            s = stack.enter_context(tls.wrap_socket(s))
        s.sendall(b"ruok")
        if tls is None:  # an SSLSocket's shutdown drops TLS; ZooKeeper closes after answering
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
    return data == b"imok"


# --------------------------------------------------------------------------- ZooKeeper


@dataclass(frozen=True)
class ServerTls:
    """What a TLS-only ZooKeeper serves with: its keystore and truststore (as ZooKeeper reads
    them, the type from the file name: .pem, .p12, .jks), whether clients must show a
    certificate (ZooKeeper's ``ssl.clientAuth``: none, want, need), and the PEM key and
    certificate the readiness probe shows when they must."""

    keystore: Path
    keystore_password: str
    truststore: Path
    client_auth: str = "none"
    probe_pem: Path | None = None

    def properties(self) -> dict[str, object]:
        """ZooKeeper's zoo.cfg keys: Netty serves TLS; no plaintext clientPort."""
        return {
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location": self.keystore,
            "ssl.keyStore.password": self.keystore_password,
            "ssl.trustStore.location": self.truststore,
            "ssl.clientAuth": self.client_auth,
        }

    def probe_context(self) -> ssl.SSLContext:
        """The readiness probe's TLS: it checks nothing (it asks ``ruok``, nothing more)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if self.probe_pem is not None:
            context.load_cert_chain(self.probe_pem)
        return context


@dataclass
class ZooKeeperServer:
    """A running standalone ZooKeeper."""

    host: str
    port: int
    data_dir: Path
    process: JavaProcess

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` string."""
        return f"{self.host}:{self.port}"


@contextlib.contextmanager
def zookeeper(
    *,
    port: int | None = None,
    heap: str = DEFAULT_HEAP,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    workdir: Path | None = None,
    tick_ms: int = DEFAULT_TICK_MS,
    tls: ServerTls | None = None,
    settings: Mapping[str, object] | None = None,
    jvm_options: Sequence[str] = (),
) -> Iterator[ZooKeeperServer]:
    """Run a standalone ZooKeeper on a free loopback port until the block exits.

    ``tick_ms`` is ZooKeeper's ``tickTime``: sessions expire on tick boundaries, so a session
    ends up to one tick after its timeout; a benchmark timing failovers shortens it. The
    session timeouts it grants stay 2 ticks to 40 s whatever the tick. With ``tls`` it serves
    TLS only, on ``port`` (its secureClientPort). ``settings`` are added to (or replace) the
    ``zoo.cfg`` entries and ``jvm_options`` to the JVM's: a ZooKeeper requiring SASL, say.
    Everything lives in a temporary folder (``workdir`` if given, kept then) that is removed
    afterwards; its ``zookeeper.log`` holds the output.
    """
    own_tmp = workdir is None
    base = Path(tempfile.mkdtemp(prefix="wb-zookeeper-")) if own_tmp else workdir
    assert base is not None
    proc: JavaProcess | None = None
    try:
        base.mkdir(parents=True, exist_ok=True)
        zk_port = port or free_port()
        data_dir = base / "data"
        data_dir.mkdir(exist_ok=True)
        listen: dict[str, object] = (
            {"clientPort": zk_port, "clientPortAddress": LOOPBACK}
            if tls is None
            else {"secureClientPort": zk_port, "secureClientPortAddress": LOOPBACK}
        )
        cfg = _write_properties(
            base / "zoo.cfg",
            {
                "tickTime": tick_ms,
                "maxSessionTimeout": MAX_SESSION_TIMEOUT_MS,
                "initLimit": 10,
                "syncLimit": 5,
                "dataDir": data_dir,
                **listen,
                **(tls.properties() if tls else {}),
                "maxClientCnxns": 0,
                "admin.enableServer": "false",
                "4lw.commands.whitelist": "ruok,srvr,stat",
                "autopurge.purgeInterval": 0,
                **(settings or {}),
            },
        )
        log4j = write_log4j_config(base / "log4j.properties", "INFO")
        argv = java_command(
            ZOOKEEPER_MAIN, [str(cfg)], heap=heap, log4j_config=log4j, jvm_options=jvm_options
        )
        proc = JavaProcess("zookeeper", argv, base / "zookeeper.log", base).start()
        probe = tls.probe_context() if tls else None
        _wait_until(
            lambda: zookeeper_ruok(LOOPBACK, zk_port, tls=probe),
            proc,
            startup_timeout,
            f"ZooKeeper to answer ruok on {LOOPBACK}:{zk_port}",
        )
        yield ZooKeeperServer(LOOPBACK, zk_port, data_dir, proc)
    finally:
        if proc is not None:
            proc.stop()
        if own_tmp:
            shutil.rmtree(base, ignore_errors=True)
