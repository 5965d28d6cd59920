"""`wirebroker zookeeper-security-migration` against a real ZooKeeper requiring SASL: a cluster
written with `zookeeper.set.acl=false` gets Kafka's secure ACLs on every znode the tool walks
(those `wirebroker.zk.acls` gives a new znode there), then `unsecure` opens them again; the
same ACLs as Kafka 3.9's own tool sets on the same tree; and Kafka's refusals: no login, a
JAAS file without the `Client` section, a missing root path with `--enable.path.check`; and
Kafka's usage on `--help` or no argument, exit 1; the version on `--version`, exit 0; a wrong
option refused, exit 1, as by Kafka's tool run alongside.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
import trio
from kazoo.security import ACL

from compat.kafka_process import kafka_tool_command
from protocol.errors import ErrorCode
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from tests.cluster.harness import call, create_topic, sha512_upsertion, start_broker
from tests.cluster.test_zk_sasl_cluster import (
    ENFORCE_SASL,
    OPEN,
    PASSWORD,
    acl_tree,
    client_jaas,
    kazoo,
    sasl_zookeeper,
)
from wirebroker.security_migration_cli import NO_LOGIN, USAGE, secure_root_paths
from wirebroker.zk.acls import znode_acls
from wirebroker.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.integration

TOOL = [sys.executable, "-m", "wirebroker", "zookeeper-security-migration"]


@pytest.fixture(scope="module")
def sasl_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with sasl_zookeeper(tmp_path_factory.mktemp("zk-migration"), ENFORCE_SASL) as server:
        yield server


def migrate(
    argv: list[str], connect: str, acl: str, kafka_opts: str | None, *more: str
) -> subprocess.CompletedProcess[str]:
    """`argv` (our tool or Kafka's) on `connect` with `--zookeeper.acl acl`, KAFKA_OPTS set."""
    return migrate_with(
        argv, kafka_opts, "--zookeeper.acl", acl, "--zookeeper.connect", connect, *more
    )


def migrate_with(
    argv: list[str], kafka_opts: str | None, *args: str
) -> subprocess.CompletedProcess[str]:
    """`argv` (our tool or Kafka's) with `args`, KAFKA_OPTS set (or unset: None)."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_OPTS"}
    if kafka_opts is not None:
        env["KAFKA_OPTS"] = kafka_opts
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=90, env=env)


def kafka_migrator(kafka_opts: str) -> list[str]:
    """Kafka 3.9's ZkSecurityMigrator from the jars, with the JAAS -D of `kafka_opts` (as
    zookeeper-security-migration.sh passes KAFKA_OPTS to the JVM)."""
    argv = kafka_tool_command("kafka.admin.ZkSecurityMigrator", [])
    return [argv[0], *kafka_opts.split()[1:], *argv[1:]]


def as_set(acls: list[ACL]) -> set[tuple[int, str, str]]:
    """ACLs as ZooKeeper stores them for the `kafka` SASL user (`auth` becomes its identity)."""
    return {
        (a.perms, *(("sasl", "kafka") if a.id.scheme == "auth" else (a.id.scheme, a.id.id)))
        for a in acls
    }


def walked(path: str) -> bool:
    """Whether the tool sets `path` (below the chroot): the chroot and the secure roots' trees."""
    return path == "" or any(path == r or path.startswith(r + "/") for r in secure_root_paths())


async def write_open_cluster(nursery: trio.Nursery, connect: str, tmp: Path) -> None:
    """Two brokers with zookeeper.set.acl=false, a topic, a user's SCRAM credential (a
    sensitive znode) and the delegation token paths."""
    tokens = {"delegation.token.secret.key": "cluster-token-key"}
    brokers = [await start_broker(nursery, connect, tmp, i, **tokens) for i in (1, 2)]
    await create_topic(brokers[0], "opened", 2, replicas=2)
    upsert = AlterUserScramCredentialsRequest(upsertions=[sha512_upsertion("alice", b"pw")])
    answer = await call(brokers[0], upsert, 0)
    assert answer.results[0].error_code == ErrorCode.NONE


@pytest.mark.timeout(150)
def test_secure_sets_kafkas_acls_on_an_open_cluster_and_unsecure_opens_them(
    sasl_zk: ZooKeeperServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = client_jaas(tmp_path)
    monkeypatch.setenv("KAFKA_OPTS", opts)  # the brokers log in, but set no ACLs
    chroot = "/open-cluster"
    connect = sasl_zk.connect + chroot

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await write_open_cluster(nursery, connect, tmp_path)
            await trio.to_thread.run_sync(check)
            nursery.cancel_scope.cancel()

    def check() -> None:
        with kazoo(sasl_zk.connect, "kafka", PASSWORD) as broker_user:
            before = acl_tree(broker_user, chroot, chroot)
            assert all(v == OPEN for v in before.values())
            done = migrate(TOOL, connect, "secure", opts)
            assert done.returncode == 0, done.stderr
            # /migration and /feature are not written by a ZooKeeper-mode cluster
            assert "secure root paths do not exist in ZooKeeper: " in done.stdout
            tree = acl_tree(broker_user, chroot, chroot)
            assert set(secure_root_paths()) - {"/migration"} <= tree.keys()  # the missing ones made
            for must in ("/config/users/alice", "/delegation_token/tokens", "/brokers/ids/2"):
                assert must in tree
            expected = {p: as_set(znode_acls(p or "/", True)) if walked(p) else OPEN for p in tree}
            assert tree == expected
            assert tree["/consumers"] == OPEN  # kept open, and not walked
            undone = migrate(TOOL, connect, "unsecure", opts)
            assert undone.returncode == 0, undone.stderr
            assert all(v == OPEN for v in acl_tree(broker_user, chroot, chroot).values())

    trio.run(main)


@pytest.mark.timeout(180)
def test_the_same_acls_as_kafkas_own_tool(
    sasl_zk: ZooKeeperServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Differential: two open clusters written alike, one migrated by Kafka 3.9's
    ZkSecurityMigrator (the 3.9.2 jars), the other by ours, `secure` then `unsecure`; after
    each the same znodes with the same ACLs, and the same output."""
    opts = client_jaas(tmp_path)
    monkeypatch.setenv("KAFKA_OPTS", opts)
    for name in ("theirs", "ours"):
        (tmp_path / name).mkdir()

        async def main(name: str = name) -> None:
            async with trio.open_nursery() as nursery:
                await write_open_cluster(nursery, f"{sasl_zk.connect}/{name}", tmp_path / name)
                nursery.cancel_scope.cancel()

        trio.run(main)
    for acl in ("secure", "unsecure"):
        theirs = migrate(kafka_migrator(opts), sasl_zk.connect + "/theirs", acl, opts)
        assert theirs.returncode == 0, theirs.stderr
        ours = migrate(TOOL, sasl_zk.connect + "/ours", acl, opts)
        assert ours.returncode == 0, ours.stderr
        assert ours.stdout == theirs.stdout
        with kazoo(sasl_zk.connect, "kafka", PASSWORD) as broker_user:
            kafka = acl_tree(broker_user, "/theirs", "/theirs")
            wirebroker = acl_tree(broker_user, "/ours", "/ours")
        assert kafka.keys() == wirebroker.keys()
        assert kafka == wirebroker
        assert any(v != OPEN for v in kafka.values()) == (acl == "secure")


@pytest.mark.timeout(90)
def test_help_and_no_arguments_print_the_usage_and_exit_1_as_kafkas(tmp_path: Path) -> None:
    """Kafka's CommandLineUtils.maybePrintHelpOrVersion: `--help`, or no argument at all, prints
    the usage on stderr and exits 1, before the login is checked (with or without one)."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_OPTS"}
    for tool in (kafka_tool_command("kafka.admin.ZkSecurityMigrator", []), TOOL):
        for more in (["--help"], [], ["--zookeeper.acl", "secure", "--help"]):
            done = subprocess.run(tool + more, capture_output=True, text=True, timeout=60, env=env)
            assert done.returncode == 1, (tool, more, done.stderr)
            assert done.stdout == ""
            assert done.stderr.startswith(USAGE + "\n"), done.stderr
            assert "--zookeeper.acl" in done.stderr
            assert NO_LOGIN not in done.stderr


@pytest.mark.timeout(90)
def test_version_prints_the_version_and_exits_0_as_kafkas() -> None:
    """Kafka's CommandLineUtils.maybePrintHelpOrVersion: `--version`, alone or with other
    options, prints the version alone on stdout and exits 0, before the login is checked;
    `--help` with it wins. Kafka's prints its own (the jars'), ours wirebroker's."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_OPTS"}
    for tool, printed in (
        (kafka_tool_command("kafka.admin.ZkSecurityMigrator", []), r"3\.9\.\d+\n"),
        (TOOL, re.escape(f"wirebroker {version('wirebroker')}\n")),
    ):
        for more in (["--version"], ["--zookeeper.acl", "secure", "--version"]):
            done = subprocess.run(tool + more, capture_output=True, text=True, timeout=60, env=env)
            assert done.returncode == 0, (tool, more, done.stderr)
            assert re.fullmatch(printed, done.stdout), done.stdout
            assert done.stderr == ""
        done = subprocess.run(
            [*tool, "--version", "--help"], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.returncode == 1
        assert done.stdout == ""
        assert done.stderr.startswith(USAGE + "\n"), done.stderr


@pytest.mark.timeout(150)
def test_a_wrong_option_exits_1_saying_which_as_kafkas(tmp_path: Path) -> None:
    """Differential, Kafka 3.9.2's tool from the jars and ours with a login (so Kafka's goes as
    far as asking for the values): an unknown option, an abbreviated one, one without its
    value, a value that is not a number, an option given twice: exit 1, nothing done (no
    ZooKeeper listens at the connect string), the option named. Ours says so in one line on
    stderr, no usage, no traceback."""
    opts = client_jaas(tmp_path)
    connect = ["--zookeeper.connect", "127.0.0.1:1"]
    for more, option in (
        (["--bogus"], "bogus"),
        (["--zookeeper.a", "secure"], "zookeeper.a"),
        (["--zookeeper.acl"], "zookeeper.acl"),
        (["--zookeeper.acl", "secure", "--zookeeper.session.timeout", "abc"], "session.timeout"),
        (["--zookeeper.acl", "secure", "--zookeeper.acl", "unsecure"], "zookeeper.acl"),
    ):
        theirs = migrate_with(kafka_migrator(opts), opts, *connect, *more)
        ours = migrate_with(TOOL, opts, *connect, *more)
        assert theirs.returncode == 1, theirs.stdout
        assert option in theirs.stderr.splitlines()[0], theirs.stderr  # joptsimple's exception
        assert ours.returncode == 1, ours.stdout
        assert ours.stdout == ""
        assert ours.stderr.count("\n") == 1, ours.stderr
        assert option in ours.stderr, ours.stderr
        assert "(--help lists the options)" in ours.stderr


@pytest.mark.timeout(180)
def test_words_joptsimple_ignores_as_kafkas(sasl_zk: ZooKeeperServer, tmp_path: Path) -> None:
    """Differential, Kafka 3.9.2's tool from the jars and ours, each on an empty chroot of its
    own: as joptsimple, a word that is not an option (first, last, or an option after `--`)
    is ignored, both securing the chroot (exit 0, the same output); an option that takes no
    value given one is that option, the value ignored: `--enable.path.check=false` checks the
    paths, both stopping at the missing ones (exit 1); `--help=no` prints the usage (exit 1)."""
    opts = client_jaas(tmp_path)
    for n, (more, code) in enumerate(
        (
            (["stray", "--zookeeper.acl", "secure", "-", "more"], 0),
            (["--zookeeper.acl", "secure", "--", "--bogus"], 0),
            (["--zookeeper.acl", "secure", "--enable.path.check=false"], 1),
            (["--zookeeper.acl", "secure", "--help=no"], 1),
        )
    ):
        ran = {}
        for name, tool in (("theirs", kafka_migrator(opts)), ("ours", TOOL)):
            chroot = f"/words-{n}-{name}"
            with kazoo(sasl_zk.connect, "kafka", PASSWORD) as broker_user:
                broker_user.create(chroot)
            ran[name] = migrate_with(
                tool, opts, "--zookeeper.connect", sasl_zk.connect + chroot, *more
            )
            assert ran[name].returncode == code, (name, more, ran[name].stderr)
        assert ran["ours"].stdout == ran["theirs"].stdout, more
    assert ran["ours"].stderr.startswith(USAGE + "\n")
    assert ran["theirs"].stderr.startswith(USAGE + "\n")


@pytest.mark.timeout(60)
def test_refusals_as_kafkas(sasl_zk: ZooKeeperServer, tmp_path: Path) -> None:
    """Without a login, or a JAAS file without the Client section: nothing done, exit 1; with
    --enable.path.check and the root paths missing (a wrong chroot): exit 1; without it, the
    chroot missing: exit 1, saying so."""
    connect = sasl_zk.connect + "/never-written"
    for acl in ("secure", "unsecure"):
        done = migrate(TOOL, connect, acl, None)
        assert done.returncode == 1
        assert NO_LOGIN in done.stderr
    other = tmp_path / "other.jaas"
    other.write_text(
        "KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="a" password="b";\n};\n'
    )
    done = migrate(TOOL, connect, "secure", f"-Djava.security.auth.login.config={other}")
    assert done.returncode == 1
    assert (
        f"ERROR: Security isn't enabled, most likely the file isn't set properly: {other}"
        in done.stdout
    )
    opts = client_jaas(tmp_path)
    done = migrate(TOOL, connect, "bogus", opts)
    assert done.returncode == 1
    assert "ZooKeeper Migration Tool Help" in done.stderr
    done = migrate(TOOL, connect, "secure", opts, "--enable.path.check")
    assert done.returncode == 1, done.stderr
    assert done.stdout.endswith("Exit the command.\n"), done.stdout
    done = migrate(TOOL, connect, "secure", opts)  # Kafka's fails making /admin there
    assert done.returncode == 1, done.stderr
    assert "the chroot /never-written does not exist in ZooKeeper" in done.stderr
    with kazoo(sasl_zk.connect, "kafka", PASSWORD) as broker_user:
        assert broker_user.exists("/never-written") is None
