"""The `wirebroker` command.

    wirebroker serve [server.properties] [--override key=value ...]
    wirebroker cluster [--brokers 3] [--zookeeper host:port]
    wirebroker configs --zookeeper host:port --alter --entity-type users ...
    wirebroker zookeeper-security-migration --zookeeper.acl secure --zookeeper.connect host:port

`serve` runs one broker until SIGINT or SIGTERM, then shuts down cleanly (checkpoints written;
in a cluster, after a controlled shutdown). Once it serves, what its start made (the opened
logs and their indexes, about a hundred objects a partition) is frozen out of the cyclic
collector's full passes, as `wirebroker.__main__` freezes the imported modules: at 3,000
partitions a full pass walked about 300,000 objects, 70-190 ms with the event loop stopped;
so is what each later creation of partitions made (`wirebroker.gc_freeze`). `cluster` runs
ZooKeeper and N brokers locally. `configs` writes users' SCRAM credentials to ZooKeeper before
brokers start. `zookeeper-security-migration` sets Kafka's ZooKeeper ACLs on the znodes of a
cluster that ran without `zookeeper.set.acl` (or opens them again).

An OSError that ends `serve` is one line saying what failed (`describe_os_error`): the operation
(a listener's bind, opening log.dirs), the address or file, the system's reason, where it was
raised; only an address in use asks whether another broker holds the port.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
from pathlib import Path
from types import TracebackType

import trio

from wirebroker import cluster_cli, configs_cli, gc_freeze, security_migration_cli, version
from wirebroker.config import BROKER_KEYS, READ_ONLY, BrokerConfig, ConfigError
from wirebroker.server import RunningBroker, serve_broker
from wirebroker.zk.errors import ZooKeeperUnreachable

log = logging.getLogger("wirebroker")

#: How long a thread may hold the GIL while another waits for it (CPython's default: 5 ms). The
#: broker's chores (compaction, flushes, coordinator loads) run Python in worker threads; each
#: time the event loop comes back from a system call it may wait this long for the GIL, several
#: times per request. Switching more often costs only while two threads want the GIL: row 1
#: (produce, the loop alone) measured no difference.
SWITCH_INTERVAL_S = 0.0005

EPILOG = """\
examples:
  wirebroker serve                                   one broker on 127.0.0.1:9092, data in ./data
  wirebroker serve config/server.properties          Kafka's server.properties keys and defaults
  wirebroker serve --override log.dirs=/var/lib/wb --override num.partitions=3
  wirebroker serve --listeners PLAINTEXT://0.0.0.0:9092 --advertised-listeners PLAINTEXT://host:9092

Clients connect with bootstrap.servers=127.0.0.1:9092. `wirebroker serve --list-configs`
prints every server.properties key it understands, with its default.
"""


class _PrintVersion(argparse.Action):
    """`wirebroker --version`: the version line on stdout, exit 0."""

    def __init__(self, option_strings: list[str], dest: str) -> None:
        super().__init__(
            option_strings, argparse.SUPPRESS, nargs=0, help="print the version and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(version())
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="wirebroker",
        description="A Kafka-wire-compatible message broker.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_PrintVersion)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run one broker",
        description="Run one broker until SIGINT/SIGTERM.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("config", nargs="?", type=Path, help="a server.properties file")
    serve.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="set one config key"
    )
    serve.add_argument("--listeners", help="listeners, e.g. PLAINTEXT://127.0.0.1:9092")
    serve.add_argument("--advertised-listeners", help="the addresses clients are told")
    serve.add_argument("--log-dirs", help="comma-separated data directories (default ./data)")
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    serve.add_argument(
        "--list-configs",
        action="store_true",
        help="print known keys (those that may change at run time marked dynamic) and exit",
    )
    cluster_cli.add_parser(sub)
    configs_cli.add_parser(sub)
    security_migration_cli.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "cluster":
        return cluster_cli.run(args)
    if args.command == "configs":
        return configs_cli.run(args)
    if args.command == "zookeeper-security-migration":
        return security_migration_cli.run(args)

    if args.list_configs:
        for key in BROKER_KEYS.values():
            mode = "" if key.update == READ_ONLY else f" [dynamic: {key.update}]"
            print(f"{key.name}={key.default or ''}\t# {key.doc}{mode}")
        return 0
    logging.basicConfig(
        level=args.log_level.upper(),
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    overrides: dict[str, str] = {}
    for item in args.override:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--override expects KEY=VALUE, got {item!r}")
        overrides[name.strip()] = value.strip()
    for flag, name in (
        ("listeners", "listeners"),
        ("advertised_listeners", "advertised.listeners"),
        ("log_dirs", "log.dirs"),
    ):
        if getattr(args, flag):
            overrides[name] = getattr(args, flag)
    try:
        if args.config:
            config = BrokerConfig.load(args.config, overrides)
        else:
            config = BrokerConfig.from_properties(overrides)
    except ConfigError as e:
        print(f"wirebroker: configuration error: {e}", file=sys.stderr)
        return 2
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # `_run` reads SIGINT and SIGTERM while the broker runs; a Ctrl-C that comes as it exits
    # is ignored (not a KeyboardInterrupt's traceback at the end of a clean shutdown)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        trio.run(_run, config)
    except BaseException as e:
        # trio wraps errors of nursery children in exception groups: report the cause plainly
        problem = find_exception(e, ConfigError)
        if problem is not None:
            print(f"wirebroker: {problem}", file=sys.stderr)
            return 2
        problem = find_exception(e, ZooKeeperUnreachable)
        if problem is not None:
            print(f"wirebroker: {problem}", file=sys.stderr)
            return 1
        problem = find_exception(e, OSError)
        if isinstance(problem, OSError):
            print(f"wirebroker: {describe_os_error(problem)}", file=sys.stderr)
            return 1
        raise
    return 0


def find_exception(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`error` itself or the first exception of `kind` inside (nested) exception groups."""
    if isinstance(error, kind):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = find_exception(inner, kind)
            if found is not None:
                return found
    return None


def describe_os_error(error: OSError) -> str:
    """One line for an OSError that ended the broker: what it was doing (the notes added where
    it happened: a listener's bind, opening log.dirs), the system's reason with the file, and
    where it was raised (the failing call, in which function of ours); the question of another
    broker on the port only for an address in use."""
    reason = error.strerror or str(error)
    for name in (error.filename, error.filename2):
        if name is not None:
            reason += f": {os.fsdecode(name) if isinstance(name, bytes) else name}"
    doing = "".join(f"{note}: " for note in getattr(error, "__notes__", ()))
    text = f"{doing}{reason} ({_raised_at(error.__traceback__)})"
    if error.errno == errno.EADDRINUSE:
        text += "; is another broker already on that port?"
    return text


def _raised_at(tb: TracebackType | None) -> str:
    """The library call that raised (if not ours) in the innermost of our functions, its line."""
    root = Path(__file__).resolve().parent.parent
    call = ours = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        path = Path(code.co_filename)
        mine = path.is_relative_to(root) and ".venv" not in path.parts
        call = "" if mine else code.co_qualname
        if mine:
            ours = f"{code.co_qualname}, {path.relative_to(root)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return " in ".join(part for part in (call, ours) if part)


async def _run(config: BrokerConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            running: RunningBroker = await nursery.start(serve_broker, config)
            gc_freeze.freeze("start-up state")
            running.broker.freeze_created = True
            stopping = False
            async for signum in signals:
                if stopping:
                    log.info("received %s again: stopping now", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    break
                log.info("received %s: shutting down", signal.Signals(signum).name)
                stopping = True
                nursery.start_soon(_stop, running, nursery.cancel_scope)


async def _stop(running: RunningBroker, scope: trio.CancelScope) -> None:
    await running.stop()  # a controlled shutdown first, in a cluster
    scope.cancel()


if __name__ == "__main__":
    sys.exit(main())
