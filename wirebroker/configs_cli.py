"""`wirebroker configs --zookeeper`: SCRAM credentials in ZooKeeper before any broker runs.

Brokers that log in to each other with SCRAM need their own user's credential in ZooKeeper
before they start (no broker is there yet to take AlterUserScramCredentials). Kafka's way is
`kafka-configs.sh --zookeeper ... --alter --entity-type users --add-config 'SCRAM-SHA-512=[...]'`
(which works against a wirebroker cluster's ZooKeeper too: the znodes are Kafka's); this is the
same command without a JVM, taking the same arguments for users' SCRAM credentials only.

It writes `/config/users/<user>` as Kafka's AdminZkClient does (the user name sanitized, other
keys of the user's config, its quotas, kept) and a `/config/changes` notification, so running
brokers pick the change up too. `--describe` lists users and their mechanisms and iterations,
never the credential itself. `--zk-tls-config-file` connects over TLS, as kafka-configs.sh's:
the file's `zookeeper.ssl.*` keys (and `zookeeper.clientCnxnSocket`) are read as a broker's,
any other key is ignored.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from wirebroker.config import BrokerConfig, ConfigError, parse_properties
from wirebroker.sasl.credentials import with_scram_credentials
from wirebroker.sasl.settings import SCRAM
from wirebroker.zk.sanitizer import sanitize

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from wirebroker.sasl.scram import ScramCredential
    from wirebroker.zk.tls import ZkTls

EPILOG = """\
examples (the brokers' own user, before the first broker starts):
  wirebroker configs --zookeeper 127.0.0.1:2181 --alter --entity-type users --entity-name broker \\
      --add-config 'SCRAM-SHA-512=[password=broker-secret]'
  wirebroker configs --zookeeper 127.0.0.1:2181 --alter --entity-type users --entity-name alice \\
      --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
  wirebroker configs --zookeeper 127.0.0.1:2181 --alter --entity-type users --entity-name alice \\
      --delete-config SCRAM-SHA-256
  wirebroker configs --zookeeper 127.0.0.1:2181 --describe --entity-type users

The arguments are kafka-configs.sh's; once a broker runs, `kafka-configs.sh --bootstrap-server`
(AlterUserScramCredentials) does the same through it.
"""

_ITEM = re.compile(
    r"\s*(?P<key>[^=,\[\]\s]+)\s*=\s*(?:\[(?P<group>[^\]]*)\]|(?P<value>[^,]*))\s*(?:,|$)"
)


class UsageError(ValueError):
    """Arguments that do not say a valid change; the message says what to write."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "configs",
        help="SCRAM credentials of users in ZooKeeper (as kafka-configs.sh --zookeeper)",
        description="Create, delete or list users' SCRAM credentials in a cluster's ZooKeeper, "
        "as `kafka-configs.sh --zookeeper` does: how the brokers' own user gets its "
        "credential before the brokers start.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]")
    p.add_argument(
        "--zk-tls-config-file",
        type=Path,
        metavar="FILE",
        help="properties with the brokers' zookeeper.ssl.* keys, to reach ZooKeeper over TLS "
        "(other keys are ignored)",
    )
    p.add_argument("--entity-type", required=True, choices=["users"])
    p.add_argument("--entity-name", help="the user (all users with --describe if left out)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--alter", action="store_true", help="add or delete credentials")
    action.add_argument("--describe", action="store_true", help="list users and mechanisms")
    p.add_argument(
        "--add-config",
        default="",
        metavar="MECHANISM=[iterations=N,password=P],...",
        help="credentials to set (iterations: 4096 unless given)",
    )
    p.add_argument("--delete-config", default="", metavar="MECHANISM,...")


def parse_add_config(text: str) -> dict[str, ScramCredential]:
    """`SCRAM-SHA-512=[password=x],SCRAM-SHA-256=[iterations=8192,password=y]` to credentials."""
    # not at import: `wirebroker serve` parses this module's flags
    from wirebroker.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential

    out: dict[str, ScramCredential] = {}
    position = 0
    while position < len(text):
        m = _ITEM.match(text, position)
        if m is None or m.end() == position:
            raise UsageError(f"--add-config: cannot parse {text[position:]!r}")
        position = m.end()
        mechanism = m["key"].upper()
        if mechanism not in SCRAM:
            raise UsageError(
                f"--add-config: {m['key']} is not a SCRAM mechanism ({', '.join(SCRAM)}); "
                "only SCRAM credentials are set here"
            )
        fields = dict(item.split("=", 1) for item in (m["group"] or "").split(",") if "=" in item)
        if m["group"] is None or "password" not in fields:
            raise UsageError(f"--add-config: write {mechanism}=[password=...]")
        iterations = fields.get("iterations", str(MIN_ITERATIONS))
        if not iterations.isdigit() or not MIN_ITERATIONS <= int(iterations) <= MAX_ITERATIONS:
            raise UsageError(
                f"--add-config: iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
            )
        out[mechanism] = ScramCredential.from_password(
            mechanism, fields["password"], int(iterations)
        )
    return out


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (UsageError, ConfigError) as e:
        print(f"wirebroker configs: {e}", file=sys.stderr)
        return 2


def _zk_tls(path: Path | None) -> ZkTls | None:
    """The TLS of `--zk-tls-config-file` (None without it, or when it leaves TLS off)."""
    from wirebroker.zk.tls import ZK_TLS_KEYS, client_tls

    if path is None:
        return None
    try:
        properties = parse_properties(path.read_text())
    except OSError as e:
        raise UsageError(f"--zk-tls-config-file {path}: {e.strerror}") from None
    return client_tls(BrokerConfig({k: v for k, v in properties.items() if k in ZK_TLS_KEYS}))


def _run(args: argparse.Namespace) -> int:
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    if args.alter:
        if not args.entity_name:
            raise UsageError("--alter needs --entity-name")
        added = parse_add_config(args.add_config)
        deleted = [m.strip().upper() for m in args.delete_config.split(",") if m.strip()]
        unknown = [m for m in deleted if m not in SCRAM]
        if unknown or not (added or deleted):
            raise UsageError(
                "--alter needs --add-config or --delete-config with SCRAM mechanisms "
                f"({', '.join(SCRAM)})"
            )
    from wirebroker.zk.tls import failure, kazoo_options

    tls = _zk_tls(args.zk_tls_config_file)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries; we say it once
    warnings.filterwarnings("ignore", "No chroot path exists")  # created with the first znode
    zk = KazooClient(hosts=args.zookeeper, **kazoo_options(tls))
    try:
        zk.start(timeout=15)
    except KazooTimeoutError:
        why = failure(tls) or "unreachable"
        print(f"wirebroker configs: ZooKeeper {args.zookeeper}: {why}", file=sys.stderr)
        return 1
    try:
        if args.describe:
            _describe(zk, args.entity_name)
        else:
            _alter(zk, args.entity_name, added, deleted)
    finally:
        zk.stop()
        zk.close()
    return 0


def _alter(
    zk: KazooClient, user: str, added: dict[str, ScramCredential], deleted: list[str]
) -> None:
    from wirebroker.sasl.scram import ScramCredential
    from wirebroker.zk import znodes  # not at import: `wirebroker serve` parses this module's flags

    sanitized = sanitize(user)
    path = znodes.user_config_path(sanitized)
    data = zk.get(path)[0] if zk.exists(path) else None
    config = znodes.EntityConfig.decode(data).config
    current = {m: ScramCredential.from_kafka_string(config[m]) for m in SCRAM if m in config}
    for mechanism in deleted:
        current.pop(mechanism, None)
    current.update(added)
    encoded = znodes.EntityConfig(with_scram_credentials(config, current)).encode()
    if data is None:
        zk.create(path, encoded, makepath=True)
    else:
        zk.set(path, encoded)
    zk.create(
        f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
        znodes.ConfigChangeNotification(f"users/{sanitized}").encode(),
        sequence=True,
        makepath=True,
    )
    print(f"Completed updating config for user {user}.")


def _describe(zk: KazooClient, user: str | None) -> None:
    from wirebroker.sasl.scram import ScramCredential
    from wirebroker.zk import znodes

    names = (
        [sanitize(user)]
        if user
        else sorted(zk.get_children(znodes.CONFIG_USERS) if zk.exists(znodes.CONFIG_USERS) else [])
    )
    for sanitized in names:
        path = znodes.user_config_path(sanitized)
        config = znodes.EntityConfig.decode(zk.get(path)[0] if zk.exists(path) else None).config
        infos = [
            f"{m}=iterations={ScramCredential.from_kafka_string(config[m]).iterations}"
            for m in SCRAM
            if m in config
        ]
        print(
            f"SCRAM credential configs for user-principal '{unquote(sanitized)}' are "
            + ", ".join(infos)
        )
