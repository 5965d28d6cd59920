"""`wirebroker cluster`: a local ZooKeeper and N broker processes, for trying the cluster out.

This module owns the launcher only: it starts ZooKeeper (from the Kafka jar set, via
`wirebroker.zookeeper_server`) unless `--zookeeper` names one, starts each broker as its own
`wirebroker serve` process with `zookeeper.connect`, prefixes and streams their logs, prints the
bootstrap string once all are ready, and on Ctrl-C (or SIGTERM) stops the brokers one at a time
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

from wirebroker.zookeeper_server import (
    JARS_ENV,
    LaunchError,
    jars_available,
    jars_dir,
    zookeeper,
)

READY = re.compile(
    r"wirebroker (?P<id>\d+) ready in \d+ ms on PLAINTEXT://(?P<host>[^:,\s]+):(?P<port>\d+)"
)
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

__consumer_offsets gets offsets.topic.replication.factor (Kafka's 3) replicas: with fewer brokers,
one per broker, unless --override sets it.
Data lives in ./data/cluster/broker-<id> (and ./data/cluster/zookeeper), kept between runs.
ZooKeeper comes from the Kafka jars (`make jars`); without them, pass --zookeeper.
Ctrl-C stops the brokers one at a time (controlled shutdown), then ZooKeeper.
A broker that exits is reported with the command that starts it again; the others keep running.
Clients connect with the printed bootstrap string, e.g. bootstrap.servers=127.0.0.1:9092.
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
    p.add_argument("--host", default="127.0.0.1", help="address the brokers listen on")
    p.add_argument(
        "--base-port",
        type=int,
        default=9092,
        help="port of broker 1; broker N gets base+N-1 (0: any free ports)",
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
        self.address = ""
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
                self.address = f"{m['host']}:{m['port']}"
                self.ready.set()
            m = METRICS.search(line)
            if m:
                self.metrics_url = m["url"]
            with self._lock:
                sys.stdout.write(f"broker-{self.broker_id} | {line}")
                sys.stdout.flush()
        self.ready.set()

    def running(self) -> bool:
        return self.proc.poll() is None

    def restart_command(self) -> str:
        """The command that starts this broker again, on the port it had."""
        argv = list(self.argv)
        at = argv.index("--listeners") + 1
        argv[at] = f"PLAINTEXT://{self.address}"
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


def run(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        print("wirebroker cluster: --brokers must be at least 1", file=sys.stderr)
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
        port = args.base_port + broker_id - 1 if args.base_port else 0
        data = (args.data_dir / f"broker-{broker_id}").resolve()
        argv = [
            sys.executable,
            "-m",
            "wirebroker",
            "serve",
            "--listeners",
            f"PLAINTEXT://{args.host}:{port}",
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
            argv += ["--override", f"wirebroker.metrics.listener={args.host}:{metrics_port}"]
        for item in _internal_topic_overrides(args) + args.override:
            argv += ["--override", item]
        brokers.append(_Broker(broker_id, argv, lock))
    deadline = time.monotonic() + START_TIMEOUT_S
    for b in brokers:
        while not b.ready.wait(0.1):
            if stop.is_set() or time.monotonic() > deadline:
                break
        if not b.address:
            _say(lock, f"broker {b.broker_id} did not start; stopping the cluster")
            return 1
    _say(lock, f"{len(brokers)} brokers ready; ZooKeeper {connect}")
    _say(lock, "bootstrap.servers=" + ",".join(b.address for b in brokers))
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
