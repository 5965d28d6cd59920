"""The ZooKeeper ACLs of the znodes a broker creates, as Kafka 3.9's `ZkData.defaultAcls`.

With `zookeeper.set.acl=false` (Kafka's default) every znode is open to all (world:anyone,
all permissions). With true, a znode gets ALL for its creator (ZooKeeper's `auth` scheme: the
identities the creating session logged in with, `sasl:<user>` for a SASL login) and READ for
everyone, except under Kafka's sensitive paths (the user and broker config entities, which hold
SCRAM credentials and encoded passwords, and the delegation tokens), which only their creator
may read. `/consumers` itself stays open, as Kafka keeps it for the old consumers writing under
it. Paths are inside the chroot, except the chroot's own, which is given as it is.

A znode's missing parents are created each with the ACLs of its own path (`ensure_path`, as
Kafka's createRecursive), not with the child's as kazoo's `makepath` would; the chroot is
created, if missing, by a session without it (`ensure_chroot`), as Kafka's
createChrootIfNecessary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from wirebroker.zk.sasl_login import ZkLogin, kazoo_client, start_session
from wirebroker.zk.znodes import CONFIG_BROKERS, CONFIG_USERS, DELEGATION_TOKENS

#: Kafka's ZkData.SensitiveRootPaths: any path starting with one of these is sensitive.
SENSITIVE_ROOT_PATHS = (CONFIG_USERS, CONFIG_BROKERS, DELEGATION_TOKENS)
OLD_CONSUMERS = "/consumers"

_SECURE = [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]


def sensitive_path(path: str) -> bool:
    return path.startswith(SENSITIVE_ROOT_PATHS)


def znode_acls(path: str, secure: bool) -> list[ACL]:
    """The ACLs a new znode at `path` gets (`secure`: `zookeeper.set.acl`)."""
    if not secure or path == OLD_CONSUMERS:
        return list(OPEN_ACL_UNSAFE)
    return list(CREATOR_ALL_ACL) if sensitive_path(path) else list(_SECURE)


def parent_path(path: str) -> str:
    return path.rpartition("/")[0]


def ensure_path(create: Callable[[str, list[ACL]], object], path: str, secure: bool) -> None:
    """Create `path` and its missing parents, as Kafka's createRecursive: `path` first, its
    parents only when it has none. `create(path, acls)` makes one empty znode (raising kazoo's
    NodeExistsError or NoNodeError); a znode that exists is left as it is."""
    if not path.strip("/"):
        return
    acls = znode_acls(path, secure)
    try:
        create(path, acls)
        return
    except NodeExistsError:
        return
    except NoNodeError:
        ensure_path(create, parent_path(path), secure)
    with contextlib.suppress(NodeExistsError):
        create(path, acls)


def ensure_chroot(
    hosts: str,
    chroot: str,
    login: ZkLogin | None,
    secure: bool,
    timeout: float,
    **options: Any,
) -> None:
    """Create `chroot` (and its parents) on ZooKeeper `hosts` if missing, logged in with `login`
    (and KazooClient's `options`: its TLS); waits at most `timeout` seconds for the session
    (blocking: a worker thread's or a tool's)."""
    bare = kazoo_client(hosts, login, timeout=timeout, **options)
    try:
        start_session(bare, login, timeout)
        ensure_path(lambda p, acl: bare.create(p, b"", acl=acl), chroot, secure)
    finally:
        bare.stop()
        bare.close()
