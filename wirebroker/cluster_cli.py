"""`wirebroker cluster`: a local ZooKeeper and N broker processes, for trying the cluster out.

This module owns the launcher only: it starts ZooKeeper (from the Kafka jar set, via
`wirebroker.zookeeper_server`) unless `--zookeeper` names one, starts each broker as its own
`wirebroker serve` process with `zookeeper.connect` and its own ports (`--listeners`: broker 1's,
each port one more a broker), prefixes and streams their logs, prints the bootstrap string of
each listener once all are ready, and on Ctrl-C (or SIGTERM) stops the brokers one at a time
(each does a controlled shutdown) and then ZooKeeper. A broker that exits meanwhile is reported
with the command that starts it again (from another shell, on the same port and data); the
others keep running, as a cluster does. It never leaves a process of its own behind: the
children run in their own sessions, so a terminal's Ctrl-C reaches only this launcher, which
stops them in order (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from wirebroker.config import ConfigError, Listener
from wirebroker.zookeeper_server import (
    JARS_ENV,
    LaunchError,
    jars_available,
    jars_dir,
    zookeeper,
)

READY = re.compile(r"wirebroker (?P<id>\d+) ready in \d+ ms on (?P<listeners>.+?) \(cluster ")
METRICS = re.compile(r"metrics endpoint on (?P<url>http://\S+)")
STOP_GRACE_S = 45.0
START_TIMEOUT_S = 60.0

EPILOG = """\
examples:
  wirebroker cluster                          ZooKeeper on 127.0.0.1:2181 + brokers 1-3 on 9092-9094
  wirebroker cluster --brokers 5              five brokers, 9092-9096
  wirebroker cluster --zookeeper zk:2181      use a running ZooKeeper (add /chroot to share one)
  wirebroker cluster --override default.replication.factor=3 --override min.insync.replicas=2
  wirebroker cluster --metrics-port 9404      Prometheus /metrics of broker N on 9404+N-1
  wirebroker cluster --listeners PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9192 \
      --override ssl.keystore.location=server.p12 --override ssl.keystore.password=...
                                              broker N on 9092+N-1 and 9192+N-1 (TLS)

__consumer_offsets gets offsets.topic.replication.factor (Kafka's 3) replicas: with fewer brokers,
one per broker, unless --override sets it.
Data lives in ./data/cluster/broker-<id> (and ./data/cluster/zookeeper), kept between runs.
ZooKeeper comes from the Kafka jars (`make jars`); without them, pass --zookeeper.
Ctrl-C stops the brokers one at a time (controlled shutdown), then ZooKeeper.
A broker that exits is reported with the command that starts it again; the others keep running.
Clients connect with the printed bootstrap string, e.g. bootstrap.servers=127.0.0.1:9092;
with --listeners, that of the first listener, then one line per other listener (SSL: ...).
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "cluster",
        help="run a local cluster: ZooKeeper and N brokers",
        description="Run a local ZooKeeper-mode cluster until Ctrl-C: ZooKeeper (unless "
        "--zookeeper is given) and N wirebroker processes that elect a controller and "
        "replicate through it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="use this ZooKeeper instead of starting one",
    )
    p.add_argument(
        "--zookeeper-port", type=int, default=2181, help="port of the started ZooKeeper (0: any)"
    )
    p.add_argument("--host", help="address the brokers listen on (default 127.0.0.1)")
    p.add_argument(
        "--base-port",
        type=int,
        help="port of broker 1 (default 9092); broker N gets base+N-1 (0: any free ports)",
    )
    p.add_argument(
        "--listeners",
        metavar="NAME://HOST:PORT,...",
        help="broker 1's listeners, instead of --host and --base-port (the first is the one "
        "printed as bootstrap.servers); broker N gets each port+N-1 (0: any free port). The "
        "other keys a listener needs (TLS, SASL) go in --override",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        help="port of broker 1's Prometheus /metrics; broker N gets port+N-1 (default: none)",
    )
    p.add_argument(
        "--data-dir", type=Path, default=Path("data/cluster"), help="default ./data/cluster"
    )
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="for every broker"
    )
    p.add_argument("--log-level", default="INFO", help="the brokers' log level (default INFO)")


class _Broker:
    def __init__(self, broker_id: int, argv: list[str], out_lock: threading.Lock) -> None:
        self.broker_id = broker_id
        self.argv = argv
        self.ready = threading.Event()
        self.listeners: list[Listener] = []  # bound, from its ready line
        self.metrics_url = ""
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._lock = out_lock
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            m = READY.search(line)
            if m:
                self.listeners = [Listener.parse(t) for t in m["listeners"].split(", ")]
                self.ready.set()
            m = METRICS.search(line)
            if m:
                self.metrics_url = m["url"]
            with self._lock:
                sys.stdout.write(f"broker-{self.broker_id} | {line}")
                sys.stdout.flush()
        self.ready.set()

    def address(self, listener: str) -> str:
        """host:port of the bound ``listener``."""
        bound = next(b for b in self.listeners if b.name == listener)
        return str(bound).partition("://")[2]

    def running(self) -> bool:
        return self.proc.poll() is None

    def restart_command(self) -> str:
        """The command that starts this broker again, on the ports it had."""
        argv = list(self.argv)
        at = argv.index("--listeners") + 1
        argv[at] = ",".join(map(str, self.listeners))
        return shlex.join(argv)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _say(lock: threading.Lock, text: str) -> None:
    with lock:
        print(f"cluster  | {text}", flush=True)


@contextlib.contextmanager
def _zookeeper(args: argparse.Namespace, lock: threading.Lock) -> Iterator[str]:
    if args.zookeeper:
        yield args.zookeeper
        return
    if not os.environ.get(JARS_ENV) and jars_available(Path.cwd() / ".cache" / "jars" / "kafka"):
        os.environ[JARS_ENV] = str(Path.cwd() / ".cache" / "jars" / "kafka")
    if not jars_available():
        raise LaunchError(
            f"no ZooKeeper jars in {jars_dir()}: run `make jars`, or pass --zookeeper HOST:PORT"
        )
    workdir = (args.data_dir / "zookeeper").resolve()
    _say(lock, f"starting ZooKeeper (data in {workdir}, log in {workdir / 'zookeeper.log'})")
    with zookeeper(port=args.zookeeper_port or None, heap="256m", workdir=workdir) as zk:
        _say(lock, f"ZooKeeper ready on {zk.connect}")
        yield zk.connect


def broker_listeners(args: argparse.Namespace, broker_id: int) -> list[Listener]:
    """Broker ``broker_id``'s listeners: ``--listeners`` (else PLAINTEXT on ``--host`` and
    ``--base-port``) with each port ``broker_id - 1`` more, 0 staying 0 (any free port)."""
    if args.listeners is not None:
        if args.host is not None or args.base_port is not None:
            raise ConfigError("--listeners names the hosts and ports: not with --host, --base-port")
        first = [Listener.parse(text) for text in args.listeners.split(",")]
    else:
        host = "127.0.0.1" if args.host is None else args.host
        first = [Listener("PLAINTEXT", host, 9092 if args.base_port is None else args.base_port)]
    return [
        Listener(lst.name, lst.host, lst.port + broker_id - 1 if lst.port else 0) for lst in first
    ]


def run(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        print("wirebroker cluster: --brokers must be at least 1", file=sys.stderr)
        return 2
    try:
        broker_listeners(args, 1)
    except ConfigError as e:
        print(f"wirebroker cluster: {e}", file=sys.stderr)
        return 2
    lock = threading.Lock()
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    brokers: list[_Broker] = []
    try:
        with _zookeeper(args, lock) as connect:
            try:
                return _run_brokers(args, connect, brokers, stop, lock)
            finally:
                for b in reversed(brokers):  # before ZooKeeper: they shut down through it
                    b.stop()
                    _say(lock, f"broker {b.broker_id} stopped ({b.proc.returncode})")
    except LaunchError as e:
        print(f"wirebroker cluster: {e}", file=sys.stderr)
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _internal_topic_overrides(args: argparse.Namespace) -> list[str]:
    """`offsets.topic.replication.factor` is Kafka's 3; a smaller cluster could never create
    `__consumer_offsets`, so it gets one replica per broker unless `--override` says otherwise."""
    key = "offsets.topic.replication.factor"
    if args.brokers >= 3 or any(item.startswith(f"{key}=") for item in args.override):
        return []
    return [f"{key}={args.brokers}"]


def _run_brokers(
    args: argparse.Namespace,
    connect: str,
    brokers: list[_Broker],
    stop: threading.Event,
    lock: threading.Lock,
) -> int:
    for broker_id in range(1, args.brokers + 1):
        listeners = broker_listeners(args, broker_id)
        data = (args.data_dir / f"broker-{broker_id}").resolve()
        argv = [
            sys.executable,
            "-m",
            "wirebroker",
            "serve",
            "--listeners",
            ",".join(map(str, listeners)),
            "--log-dirs",
            str(data),
            "--log-level",
            args.log_level,
            "--override",
            f"broker.id={broker_id}",
            "--override",
            f"zookeeper.connect={connect}",
        ]
        if args.metrics_port is not None:
            metrics_port = args.metrics_port + broker_id - 1 if args.metrics_port else 0
            host = listeners[0].host
            argv += ["--override", f"wirebroker.metrics.listener={host}:{metrics_port}"]
        for item in _internal_topic_overrides(args) + args.override:
            argv += ["--override", item]
        brokers.append(_Broker(broker_id, argv, lock))
    deadline = time.monotonic() + START_TIMEOUT_S
    for b in brokers:
        while not b.ready.wait(0.1):
            if stop.is_set() or time.monotonic() > deadline:
                break
        if not b.listeners:
            _say(lock, f"broker {b.broker_id} did not start; stopping the cluster")
            return 1
    _say(lock, f"{len(brokers)} brokers ready; ZooKeeper {connect}")
    for n, listener in enumerate(brokers[0].listeners):
        label = f"{listener.name}: " if n else ""
        addresses = ",".join(b.address(listener.name) for b in brokers)
        _say(lock, f"{label}bootstrap.servers={addresses}")
    if args.metrics_port is not None:
        _say(lock, "metrics: " + " ".join(b.metrics_url for b in brokers))
    _say(lock, "Ctrl-C stops the cluster")
    gone: set[int] = set()
    while not stop.wait(0.2):
        for b in brokers:
            if b.broker_id not in gone and not b.running():
                gone.add(b.broker_id)
                _say(
                    lock,
                    f"broker {b.broker_id} exited ({b.proc.returncode}); the others keep "
                    "running. To start it again, run in another shell (and stop it before "
                    "this cluster):",
                )
                _say(lock, "  " + b.restart_command())
    _say(lock, "stopping: brokers one at a time (controlled shutdown), then ZooKeeper")
    return 0
