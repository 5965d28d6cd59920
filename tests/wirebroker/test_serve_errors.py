"""`wirebroker serve` ended by an OSError says in one line what failed: the operation (a
listener's bind, opening log.dirs), the address or file, the system's reason and where it was
raised; it asks about another broker on the port only when the address is in use. Real
processes: a port another socket holds, a data directory it may not create, an unreachable
ZooKeeper with a chroot."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NOBODY = 65534


def serve(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`wirebroker serve` until it exits (it must not start), run by `prefix` if given."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "wirebroker", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_port_in_use_names_the_listener_and_address(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = serve("--listeners", f"PLAINTEXT://127.0.0.1:{port}", "--log-dirs", str(tmp_path))
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"wirebroker: binding listener PLAINTEXT to 127.0.0.1:{port}: Address already in use ("
    ), last
    assert last.endswith("; is another broker already on that port?"), last
    assert "ZooKeeper" not in last


def test_a_data_directory_it_may_not_create_names_the_path() -> None:
    # A directory the broker may read but not write in. Root writes anywhere: as root the
    # broker runs as nobody (setpriv; subprocess's own user= cannot exec this venv's Python
    # here), who may traverse this directory, unlike pytest's tmp_path.
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: every directory is writable")
        prefix = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
    parent = Path(tempfile.mkdtemp(prefix="wirebroker-read-only-"))
    try:
        parent.chmod(0o555)
        data = parent / "data"
        done = serve(
            "--listeners", "PLAINTEXT://127.0.0.1:0", "--log-dirs", str(data), prefix=prefix
        )
    finally:
        shutil.rmtree(parent)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"wirebroker: opening log.dirs={data}: Permission denied: {data} ("), (
        last
    )
    assert "Path.mkdir in Broker.open, wirebroker/broker.py:" in last
    assert "another broker" not in last and "ZooKeeper" not in last


def test_zookeeper_with_a_chroot_unreachable_is_said_so(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        done = serve(
            *("--listeners", "PLAINTEXT://127.0.0.1:0", "--log-dirs", str(tmp_path)),
            *("--override", f"zookeeper.connect=127.0.0.1:{port}/wirebroker"),
            *("--override", "zookeeper.connection.timeout.ms=1000"),
        )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"wirebroker: cannot reach ZooKeeper at 127.0.0.1:{port}/wirebroker"), (
        last
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--override", "max.connections.per.ip=0"),
            "requirement failed: max.connections.per.ip can be set to zero only if "
            "max.connections.per.ip.overrides property is set.",
        ),
        (
            ("--override", "max.connections.per.ip.overrides=ok.example:2,a/b:1,[::1]:3"),
            "max.connections.per.ip.overrides contains invalid addresses : a/b,[::1]",
        ),
    ],
)
def test_per_ip_limits_kafka_refuses(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    """KafkaConfig's checks: a per-IP limit of 0 needs overrides, and an override's host holds
    only Utils.validHostPattern's characters; the broker does not start."""
    done = serve("--listeners", "PLAINTEXT://127.0.0.1:0", "--log-dirs", str(tmp_path), *args)
    assert done.returncode != 0, done.stderr
    assert message in done.stderr, done.stderr


def test_zookeeper_set_acl_without_a_login_does_not_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's check (KafkaZkClient.createZkClient), before ZooKeeper is reached: secure ACLs
    need a login ZooKeeper can name their creator by, a JAAS Client section or client TLS."""
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    done = serve(
        "--listeners", "PLAINTEXT://127.0.0.1:0", "--log-dirs", str(tmp_path),
        "--override", "zookeeper.connect=127.0.0.1:1", "--override", "zookeeper.set.acl=true",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert (
        "zookeeper.set.acl is true, but ZooKeeper client TLS configuration identifying at least "
        "zookeeper.ssl.client.enable and zookeeper.ssl.keystore.location was not present and the "
        "verification of the JAAS login file failed [java.security.auth.login.config=null, "
        "zookeeper.sasl.client=default:true, zookeeper.sasl.clientconfig=default:Client]"
    ) in done.stderr, done.stderr
