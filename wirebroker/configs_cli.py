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
any other key is ignored, over ZooKeeper's `-Dzookeeper.*` system properties in KAFKA_OPTS
(`wirebroker.zk.tool_session.tool_tls`).

As kafka-configs.sh, it logs in to ZooKeeper with the JAAS file's `Client` section when the
system properties name one (`KAFKA_OPTS`, as `wirebroker.zk.sasl_login` reads it), and, logged
in so (or with a TLS client certificate), creates its znodes with Kafka's secure ACLs
(`wirebroker.zk.acls`), as ConfigCommand does.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from wirebroker.config import ConfigError
from wirebroker.sasl.credentials import with_scram_credentials
from wirebroker.sasl.settings import SCRAM
from wirebroker.zk.sanitizer import sanitize

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from wirebroker.sasl.scram import ScramCredential

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
    from wirebroker.zk.tool_session import ZkToolError

    try:
        return _run(args)
    except (UsageError, ConfigError) as e:
        print(f"wirebroker configs: {e}", file=sys.stderr)
        return 2
    except ZkToolError as e:
        print(f"wirebroker configs: {e}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from wirebroker.zk.sasl_login import zk_login
    from wirebroker.zk.tool_session import tool_session, tool_tls

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
    tls, certificate = tool_tls(args.zk_tls_config_file)
    login = zk_login()
    # ConfigCommand's KafkaZkClient is secure with a SASL login or a TLS client certificate
    secure = login is not None or certificate
    with tool_session(
        args.zookeeper, login, tls, connection_timeout_s=15.0, create_chroot=secure
    ) as zk:
        if args.describe:
            _describe(zk, args.entity_name)
        else:
            _alter(zk, args.entity_name, added, deleted, secure=secure)
    return 0


def _alter(
    zk: KazooClient,
    user: str,
    added: dict[str, ScramCredential],
    deleted: list[str],
    *,
    secure: bool,
) -> None:
    from wirebroker.sasl.scram import ScramCredential
    from wirebroker.zk import znodes  # not at import: `wirebroker serve` parses this module's flags
    from wirebroker.zk.acls import ensure_path, parent_path, znode_acls

    def create(path: str, data: bytes, *, sequence: bool = False) -> None:
        ensure_path(lambda p, acl: zk.create(p, b"", acl=acl), parent_path(path), secure)
        zk.create(path, data, acl=znode_acls(path, secure), sequence=sequence)

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
        create(path, encoded)
    else:
        zk.set(path, encoded)
    create(
        f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
        znodes.ConfigChangeNotification(f"users/{sanitized}").encode(),
        sequence=True,
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
