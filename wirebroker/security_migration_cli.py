"""`wirebroker zookeeper-security-migration`: Kafka's ZooKeeper ACLs set on an existing cluster.

`zookeeper.set.acl=true` gives the znodes a broker creates Kafka's secure ACLs
(`wirebroker.zk.acls`), but those a cluster wrote before stay open to all. Kafka's answer is
`zookeeper-security-migration.sh` (kafka.admin.ZkSecurityMigrator); this is the same tool, with
its arguments, without a JVM. With `--zookeeper.acl secure` it sets, as Kafka 3.9's does, the
ACLs `zookeeper.set.acl=true` would give each znode on the chroot (or ZooKeeper's root without
one) and on every znode under Kafka's secure root paths (`secure_root_paths`), creating those
roots that are missing but `/controller` and `/migration` (as Kafka 3.9.2's tool, which the
differential test runs); with `unsecure` it opens them to all again, the way back. Other
znodes (`/consumers`, `/zookeeper`) are left as they are.

As Kafka's, it refuses to run without a login ZooKeeper can name the znodes' creator by: the
JAAS file's `Client` section (named in KAFKA_OPTS, as `wirebroker.zk.sasl_login` reads it) or a
TLS client certificate (zookeeper.ssl.client.enable and zookeeper.ssl.keystore.location, from
`--zk-tls-config-file` or ZooKeeper's `-Dzookeeper.*` system properties, as
`wirebroker.zk.tool_session.tool_tls` reads them: `client_auth_configured`, which does not ask
for Kafka's zookeeper.clientCnxnSocket, Netty being a JVM's choice); with Kafka's messages, and
its exit codes (1 for any failure; `--help`, or no argument, prints the usage and exits 1
before any check, and `--version` prints the version, wirebroker's, and exits 0, as Kafka's
CommandLineUtils). The options are parsed as Kafka's joptsimple parser does (`_Options`): an
unknown or abbreviated option, one without its value or with a value that is not one, or one
given twice is refused, exit 1, saying which (Kafka's prints the exception, exit 1; it refuses
a wrong value or a second one only once it asks for it, after the login checks). As joptsimple,
a word that is not an option (and every word after `--`) is ignored, and an option that takes
no value (`--enable.path.check`, `--help`, `--version`) given one (`--enable.path.check=false`)
is that option, the value ignored. The walk is pipelined as Kafka's asynchronous
one: a level of the tree at a time, its setACL and getChildren requests in flight together
(IN_FLIGHT at most).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from wirebroker import version
from wirebroker.config import ConfigError

if TYPE_CHECKING:
    from kazoo.client import KazooClient

MIGRATION = "/migration"
USAGE = (
    "ZooKeeper Migration Tool Help. This tool updates the ACLs of znodes as part of the process "
    "of setting up ZooKeeper authentication."
)
NO_LOGIN = (
    "ERROR: No JAAS configuration file has been specified and no TLS client certificate has "
    "been specified. Please make sure that you set the system property "
    "java.security.auth.login.config or provide a ZooKeeper client TLS configuration via "
    "--zk-tls-config-file <filename> identifying at least zookeeper.ssl.client.enable, "
    "zookeeper.clientCnxnSocket, and zookeeper.ssl.keystore.location"
)
#: Kafka's defaults of --zookeeper.connect and of the two timeouts (ms).
DEFAULT_CONNECT = "localhost:2181"
DEFAULT_TIMEOUT_MS = 30000
#: Requests in flight at once (Kafka's are unbounded; this bounds the tool's memory).
IN_FLIGHT = 1000
#: How long each answer is awaited, as Kafka's `Await.result(future, 6000 millis)`.
ANSWER_TIMEOUT_S = 6.0

EPILOG = """\
steps (Kafka's): to secure a cluster, a rolling restart with the JAAS login in KAFKA_OPTS and
zookeeper.set.acl=false, a second with zookeeper.set.acl=true, then
  KAFKA_OPTS=-Djava.security.auth.login.config=/etc/kafka/jaas.conf \\
      wirebroker zookeeper-security-migration --zookeeper.acl secure --zookeeper.connect zk1:2181/kafka
and the way back: a rolling restart with zookeeper.set.acl=false, `--zookeeper.acl unsecure`,
then a rolling restart without the login.
"""


def secure_root_paths() -> tuple[str, ...]:
    """Kafka 3.9's ZkData.SecureRootPaths, in its order (ZkAclStore.securePaths last)."""
    # not at import: `wirebroker serve` parses this module's flags
    from wirebroker.zk.znodes import (
        ACL_CHANGES,
        ACL_ROOTS,
        CONTROLLER,
        CONTROLLER_EPOCH,
        ISR_CHANGE_NOTIFICATION,
        LATEST_PRODUCER_ID_BLOCK,
        LOG_DIR_EVENT_NOTIFICATION,
        PatternType,
    )

    return (
        "/admin",
        "/brokers",
        "/cluster",
        "/config",
        CONTROLLER,
        CONTROLLER_EPOCH,
        ISR_CHANGE_NOTIFICATION,
        LATEST_PRODUCER_ID_BLOCK,
        LOG_DIR_EVENT_NOTIFICATION,
        "/delegation_token",
        "/kafka-acl-extended",
        MIGRATION,
        "/feature",
        ACL_ROOTS[PatternType.LITERAL],
        ACL_CHANGES[PatternType.LITERAL],
        ACL_ROOTS[PatternType.PREFIXED],
        ACL_CHANGES[PatternType.PREFIXED],
    )


class MigrationFailed(Exception):
    """A ZooKeeper answer that ends the tool; the message is Kafka's."""


class OptionError(Exception):
    """An option Kafka's tool refuses too: unknown, abbreviated, without its value, with a value
    that is not one, or a value given twice; the message says which."""


class _Options(argparse.ArgumentParser):
    """The tool's options, parsed as Kafka's joptsimple parser (no abbreviations; the module's
    docstring): a wrong one is an OptionError for `run`, not argparse's exit 2."""

    def error(self, message: str) -> NoReturn:
        raise OptionError(message)

    def parse_options(self, words: list[str]) -> argparse.Namespace:
        """`words` parsed; the words that are not options ignored."""
        if "--" in words:
            words = words[: words.index("--")]
        words = [w.partition("=")[0] if w.partition("=")[0] in _FLAGS else w for w in words]
        options, extra = self.parse_known_args(words)
        unknown = [w for w in extra if w.startswith("-") and w != "-"]
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return options


#: The options that take no value, as joptsimple's `accepts` without an argument.
_FLAGS = ("--help", "--version", "--enable.path.check")


class _Once(argparse.Action):
    """An option whose value is taken once: Kafka's `valueOf` refuses a second."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest) is not None:
            raise argparse.ArgumentError(self, "given more than once")
        setattr(namespace, self.dest, values)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "zookeeper-security-migration",
        help="set Kafka's ZooKeeper ACLs on an existing cluster's znodes "
        "(as zookeeper-security-migration.sh)",
        add_help=False,  # Kafka's --help: the usage on stderr, exit 1 (`run`)
        prefix_chars="\0",  # every word is the tool's, parsed by `run` as Kafka's (`_Options`)
    )
    p.add_argument("options", nargs=argparse.REMAINDER)


def options_parser() -> _Options:
    """The tool's options: Kafka's, and its `--help` and `--version`."""
    p = _Options(
        prog="wirebroker zookeeper-security-migration",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        allow_abbrev=False,
    )
    # the options that take no value: _FLAGS
    p.add_argument("--help", action="store_true", help="Print usage information (exit 1).")
    p.add_argument("--version", action="store_true", help="Print wirebroker's version (exit 0).")
    p.add_argument(
        "--zookeeper.acl",
        action=_Once,
        dest="zookeeper_acl",
        metavar="secure|unsecure",
        help="Indicates whether to make the Kafka znodes in ZooKeeper secure or unsecure. The "
        "options are 'secure' and 'unsecure'",
    )
    p.add_argument(
        "--zookeeper.connect",
        action=_Once,
        dest="zookeeper_connect",
        metavar="HOST:PORT[,...][/CHROOT]",
        help="Sets the ZooKeeper connect string (ensemble). This parameter takes a "
        "comma-separated list of host:port pairs. (default: localhost:2181)",
    )
    for name, what in (("session", "session"), ("connection", "connection")):
        p.add_argument(
            f"--zookeeper.{name}.timeout",
            action=_Once,
            dest=f"zookeeper_{name}_timeout",
            type=int,
            metavar="MS",
            help=f"Sets the ZooKeeper {what} timeout. (default: 30000)",
        )
    p.add_argument(
        "--enable.path.check",
        dest="enable_path_check",
        action="store_true",
        help="Checks if all the root paths exist in ZooKeeper before migration. If not, exit "
        "the command.",
    )
    p.add_argument(
        "--zk-tls-config-file",
        action=_Once,
        type=Path,
        metavar="FILE",
        help="Identifies the file where ZooKeeper client TLS connectivity properties are "
        "defined (its zookeeper.ssl.* keys; any other key is ignored).",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from wirebroker.zk.tool_session import ZkToolError

    try:
        options = options_parser().parse_options(args.options)
    except OptionError as e:
        print(
            f"wirebroker zookeeper-security-migration: {e} (--help lists the options)",
            file=sys.stderr,
        )
        return 1
    # Kafka's CommandLineUtils.maybePrintHelpOrVersion, before any check: --help, or no
    # argument, prints the usage and exits 1; --version prints the version and exits 0
    if options.help or not args.options:
        return usage()
    if options.version:
        print(version())
        return 0
    try:
        return _run(options)
    except (ConfigError, MigrationFailed, ZkToolError) as e:
        print(f"wirebroker zookeeper-security-migration: {e}", file=sys.stderr)
        return 1


def usage() -> int:
    """Kafka's printUsageAndExit: the tool's message and its options on stderr; 1."""
    print(f"{USAGE}\n{options_parser().format_help()}", file=sys.stderr)
    return 1


def _run(args: argparse.Namespace) -> int:
    from kazoo.exceptions import NoNodeError

    from wirebroker.system_properties import JAAS_FILE, system_property
    from wirebroker.zk.client import split_connect
    from wirebroker.zk.sasl_login import zk_login
    from wirebroker.zk.tool_session import tool_session, tool_tls

    # Kafka checks the login first, then the value of --zookeeper.acl
    tls, certificate = tool_tls(args.zk_tls_config_file)
    jaas_file = system_property(JAAS_FILE)
    if jaas_file is None and not certificate:
        print(NO_LOGIN, file=sys.stderr)
        return 1
    login = zk_login()
    if login is None and not certificate:
        print(
            f"ERROR: Security isn't enabled, most likely the file isn't set properly: {jaas_file}"
        )
        return 1
    if args.zookeeper_acl not in ("secure", "unsecure"):
        return usage()
    connect = args.zookeeper_connect or DEFAULT_CONNECT
    session_ms, connection_ms = (
        DEFAULT_TIMEOUT_MS if ms is None else ms
        for ms in (args.zookeeper_session_timeout, args.zookeeper_connection_timeout)
    )
    try:
        with tool_session(
            connect,
            login,
            tls,
            session_timeout_s=session_ms / 1000,
            connection_timeout_s=connection_ms / 1000,
        ) as zk:
            return migrate(zk, args.zookeeper_acl == "secure", args.enable_path_check)
    except NoNodeError:  # a root path's parent: the chroot
        chroot = split_connect(connect)[1]
        raise MigrationFailed(f"the chroot {chroot} does not exist in ZooKeeper") from None


def migrate(zk: KazooClient, secure: bool, enable_path_check: bool) -> int:
    """Kafka's ZkSecurityMigrator.run on the session `zk` (its chroot as "/"): the ACLs of
    `zookeeper.set.acl` = `secure` on "/" and on the trees of `secure_root_paths()`; 1 when
    `enable_path_check` finds a root path missing, else 0."""
    from wirebroker.zk.acls import ensure_path
    from wirebroker.zk.znodes import CONTROLLER

    set_acls(zk, ["/"], secure, recursive=False)
    roots = secure_root_paths()
    missing = [path for path in roots if zk.exists(path) is None]
    if missing:
        print(
            "Warning: The following secure root paths do not exist in ZooKeeper: "
            + ",".join(missing)
        )
        print("That might be due to an incorrect chroot is specified when executing the command.")
        if enable_path_check:
            print("Exit the command.")
            return 1
    walked = []
    for path in roots:
        if path in (CONTROLLER, MIGRATION) and zk.exists(path) is None:
            continue  # an ephemeral, and KRaft migration's state: not made here (as 3.9.2's)
        ensure_path(lambda p, acl: zk.create(p, b"", acl=acl), path, secure)
        walked.append(path)
    set_acls(zk, walked, secure, recursive=True)
    return 0


def set_acls(zk: KazooClient, paths: list[str], secure: bool, *, recursive: bool) -> None:
    """Set each of `paths` (and, `recursive`, every znode below) to the ACLs
    `wirebroker.zk.acls` gives a new znode there; a level of the tree at a time, IN_FLIGHT
    requests at once. A znode deleted meanwhile is passed over, as Kafka's."""
    from wirebroker.zk.acls import znode_acls

    level = paths
    while level:
        below: list[str] = []
        for start in range(0, len(level), IN_FLIGHT // 2):
            chunk = level[start : start + IN_FLIGHT // 2]
            acl_answers = [
                (path, zk.set_acls_async(path, znode_acls(path, secure))) for path in chunk
            ]
            child_answers = (
                [(path, zk.get_children_async(path)) for path in chunk] if recursive else []
            )
            for path, answer in acl_answers:
                _answer(zk, path, answer, lambda p: zk.set_acls(p, znode_acls(p, secure)))
            for path, answer in child_answers:
                children = _answer(zk, path, answer, zk.get_children) or []
                below += [f"{path.rstrip('/')}/{child}" for child in children]
        level = below


def _answer(zk: KazooClient, path: str, answer: Any, again: Callable[[str], Any]) -> Any:
    """The result of one request about `path`; None if the znode is gone. A lost connection
    asks `again` (with kazoo's retries, as Kafka's callbacks send the request again); an
    expired session or another error ends the tool, with Kafka's words."""
    from kazoo.exceptions import (
        ConnectionLoss,
        NoNodeError,
        SessionExpiredError,
        ZookeeperError,
    )
    from kazoo.handlers.threading import KazooTimeoutError

    try:
        return answer.get(timeout=ANSWER_TIMEOUT_S)
    except NoNodeError:
        print(
            f"WARN Znode is gone, it could be have been legitimately deleted: {path}",
            file=sys.stderr,
        )
        return None
    except ConnectionLoss:
        try:
            return zk.retry(again, path)
        except NoNodeError:
            return None
    except SessionExpiredError:
        print("ZooKeeper session expired while changing ACLs")
        raise MigrationFailed("SESSIONEXPIRED") from None
    except KazooTimeoutError:
        raise MigrationFailed(
            f"no answer from ZooKeeper about {path} within {ANSWER_TIMEOUT_S:g} s"
        ) from None
    except ZookeeperError as e:  # another return code
        code = getattr(e, "code", None)
        print(f"Unexpected return code: {code}")
        raise MigrationFailed(f"{type(e).__name__} on {path}") from None
