"""The ZooKeeper session of a command-line tool (`wirebroker configs --zookeeper`, `wirebroker
zookeeper-security-migration`), set up as Kafka's tools set up theirs.

`tool_tls` reads the tool's ZooKeeper TLS, as Kafka's ZkSecurityMigrator.createZkClientConfig
(which kafka-configs.sh uses too): ZooKeeper's client system properties first
(`-Dzookeeper.client.secure`, `-Dzookeeper.ssl.keyStore.location`, ...: a ZKClientConfig starts
from them; `wirebroker.system_properties` reads them from KAFKA_OPTS), each overridden by
`--zk-tls-config-file`'s Kafka key (`zookeeper.ssl.*`; any other key ignored, ZooKeeper's
`passwordPath` ones too, as Kafka's: they are read as system properties only); a wrong value is
reported under the name it was set by, key or system property. `tool_session` opens the
session with the JAAS login and that TLS, waits for it, and turns ZooKeeper's failures (no
answer, a refused login) into one `ZkToolError` naming the ensemble and the reason, never a
secret; it closes the session however the tool ends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from wirebroker.config import BrokerConfig, ConfigError, parse_properties

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from wirebroker.zk.sasl_login import ZkLogin
    from wirebroker.zk.tls import ZkTls


class ZkToolError(Exception):
    """ZooKeeper failed the tool (unreachable, the TLS or SASL login refused); the message says
    which ensemble and why."""


def tool_tls(path: Path | None) -> tuple[ZkTls | None, bool]:
    """The tool's ZooKeeper TLS (None when it is off) and whether it shows ZooKeeper a client
    certificate: the system properties' (`wirebroker.zk.tls.ZkSslSettings`), overridden key
    by key by the `--zk-tls-config-file` `path`. ConfigError for a file that
    cannot be read or a wrong key."""
    from wirebroker.zk.tls import ZK_TLS_KEYS, client_auth_configured, client_tls

    keys: dict[str, str] = {}
    if path is not None:
        try:
            properties = parse_properties(path.read_text())
        except OSError as e:
            raise ConfigError(f"--zk-tls-config-file {path}: {e.strerror}") from None
        keys.update((k, v) for k, v in properties.items() if k in ZK_TLS_KEYS)
    config = BrokerConfig(keys)
    return client_tls(config, tool=True), client_auth_configured(config, tool=True)


@contextmanager
def tool_session(
    connect: str,
    login: ZkLogin | None,
    tls: ZkTls | None,
    *,
    session_timeout_s: float = 10.0,
    connection_timeout_s: float,
    create_chroot: bool | None = None,
) -> Iterator[KazooClient]:
    """A started session on ZooKeeper `connect` (its chroot as "/"), logged in with `login`
    over `tls`, waited for at most `connection_timeout_s`; stopped and closed on the way out.
    `create_chroot` not None: the chroot is made first if missing, with the secure ACLs when
    True (kafka-configs.sh's KafkaZkClient does so). ZkToolError when ZooKeeper does not
    answer or refuses the login, here or in the body."""
    from kazoo.exceptions import AuthFailedError
    from kazoo.handlers.threading import KazooTimeoutError

    from wirebroker.zk.acls import ensure_chroot
    from wirebroker.zk.client import split_connect
    from wirebroker.zk.sasl_login import kazoo_client, start_session
    from wirebroker.zk.tls import failure, kazoo_options

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries; we say it once
    zk = kazoo_client(connect, login, timeout=session_timeout_s, **kazoo_options(tls))
    hosts, chroot = split_connect(connect)
    try:
        if chroot and create_chroot is not None:
            options = kazoo_options(tls)
            ensure_chroot(hosts, chroot, login, create_chroot, connection_timeout_s, **options)
        start_session(zk, login, connection_timeout_s)
        yield zk
    except KazooTimeoutError:
        zk.stop()  # the attempt under way (a slow first TLS handshake) ends: its failure is known
        raise ZkToolError(f"ZooKeeper {connect}: {failure(tls) or 'unreachable'}") from None
    except AuthFailedError:
        assert login is not None
        raise ZkToolError(
            f"ZooKeeper {connect} refused the SASL login of {login.describe()}: AUTH_FAILED"
        ) from None
    finally:
        zk.stop()
        zk.close()
