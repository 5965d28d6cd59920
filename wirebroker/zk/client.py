"""kazoo, wrapped for trio: blocking calls in worker threads, watches and session changes in one channel.

kazoo runs its connection in threads of its own. `ZkClient` keeps that away from the broker:
every call (get, create, set, delete, multi) runs in `trio.to_thread.run_sync`, and every watch
notification and session-state change is sent, from kazoo's threads, into one trio memory
channel (`events`) with the run's token (`run_sync_soon`: kazoo's threads never wait for trio,
as kazoo requires of its listeners). The task that reads that channel is then the only owner of
whatever state the events change (the broker's registration, the controller), so nothing needs
a lock.

A call waits for its answer at most the session timeout (then ConnectionLoss: its fate is
unknown, as ZooKeeper says of a request cut off by a lost connection), so no worker thread is
stuck for good while kazoo reconnects. A read is also abandoned as soon as its caller is
cancelled (it changes nothing), so a handler's `move_on_after` bounds it; a write is not (the
caller waits to learn its outcome, within that bound).

Watches are one-shot, as in ZooKeeper: ask again with `watch=True` when the event arrives.
The owner re-reads the znode rather than trusting the event, as Kafka's handlers do.

With a `login` (`sasl_login`), every connection logs in to ZooKeeper first; `start` waits for
ZooKeeper's answer to it (kazoo reports CONNECTED before its SASL exchange) and a refusal ends
it with ZooKeeperAuthFailed. A login refused later, on a reconnect, ends the session (LOST) and
a new one is tried a second later, and so on, as Kafka's ZooKeeperClient reinitializes after
AUTH_FAILED. Every znode created here (`create`, `ensure_path`, the parents
`makepath` creates, a multi's creates, the chroot) gets the ACLs of its own path (`acls`):
Kafka's secure ones with `secure_acls` (`zookeeper.set.acl`), open ones without.

Session states: CONNECTED (first connection, or reconnected: `new_session` says whether a
session replaced an expired one, i.e. ephemerals and watches are gone), SUSPENDED (connection lost, session may
still live), LOST (the session expired or the client closed: ephemerals are gone).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
    ZookeeperError,
)
from kazoo.protocol.states import KeeperState, WatchedEvent, ZnodeStat

from wirebroker.zk import tls as zk_tls
from wirebroker.zk.acls import ensure_chroot, ensure_path, parent_path, znode_acls
from wirebroker.zk.errors import ZooKeeperAuthFailed, ZooKeeperUnreachable
from wirebroker.zk.sasl_login import ZkLogin, kazoo_client, start_session

__all__ = [
    "BadVersionError",
    "ConnectionLoss",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "RolledBackError",
    "SessionExpiredError",
    "ZkClient",
    "ZkEvent",
    "ZooKeeperUnreachable",
    "ZnodeStat",
    "ZookeeperError",
]

log = logging.getLogger(__name__)

#: How long after a refused login a new session is tried (Kafka's ZooKeeperClient.RetryBackoffMs).
AUTH_RETRY_BACKOFF_S = 1.0


@dataclass(frozen=True, slots=True)
class ZkEvent:
    """A session-state change (`kind` "session") or a watch firing (`kind` "data"/"children")."""

    kind: str
    path: str = ""
    state: str = ""  # session: CONNECTED, SUSPENDED, LOST
    type: str = ""  # watch: CREATED, DELETED, CHANGED, CHILD, NONE
    new_session: bool = False


def split_connect(connect: str) -> tuple[str, str]:
    """`host:port,host:port/chroot` -> (hosts, chroot or "")."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/")


class ZkClient:
    """One ZooKeeper session for the broker. Create it inside a trio run, then `await start()`."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int | None = None,
        tls: zk_tls.ZkTls | None = None,
        login: ZkLogin | None = None,
        secure_acls: bool = False,
    ) -> None:
        self.connect = connect
        self.tls = tls
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.login = login
        self.secure_acls = secure_acls
        self._token = trio.lowlevel.current_trio_token()
        self._send, self.events = trio.open_memory_channel[ZkEvent](math.inf)
        # Reconnect forever (the default gives up after a while, leaving a dead client).
        self._kazoo = kazoo_client(
            connect,
            login,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 2.0},
            **zk_tls.kazoo_options(tls),
        )
        self._closed = False
        self._started = False
        # Held while the client is restarted after a refused login, or stopped for good.
        self._restarting = threading.Lock()
        self._session_id: int | None = None
        self._expired = False

    # lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (waiting at most `zookeeper.connection.timeout.ms`) and create the chroot."""
        hosts, chroot = split_connect(self.connect)
        self._kazoo.add_listener(self._on_state)
        timeout = self.connection_timeout_ms / 1000
        try:
            if chroot:
                await trio.to_thread.run_sync(
                    lambda: ensure_chroot(
                        hosts,
                        chroot,
                        self.login,
                        self.secure_acls,
                        timeout,
                        **zk_tls.kazoo_options(self.tls),
                    )
                )
            await trio.to_thread.run_sync(start_session, self._kazoo, self.login, timeout)
            self._started = True
        except AuthFailedError:
            await self.close()
            assert self.login is not None
            raise ZooKeeperAuthFailed(
                f"ZooKeeper at {self.connect} refused the SASL login of "
                f"{self.login.describe()}: {self.login.refusal()}"
            ) from None
        except Exception as e:
            await self.close()
            raise ZooKeeperUnreachable(
                f"cannot reach ZooKeeper at {self.connect} within "
                f"{self.connection_timeout_ms} ms (zookeeper.connection.timeout.ms): "
                f"{zk_tls.failure(self.tls) or e}"
            ) from e

    async def close(self) -> None:
        """End the session (its ephemerals disappear at once). Safe to call twice, even cancelled."""
        if self._closed:
            return
        self._closed = True
        self._kazoo.remove_listener(self._on_state)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._stop_kazoo)
        self._send.close()

    def _stop_kazoo(self) -> None:
        with self._restarting:
            try:
                self._kazoo.stop()
                self._kazoo.close()
            except Exception:
                log.debug("closing the ZooKeeper client failed", exc_info=True)

    def _new_session_after_auth_failure(self) -> None:
        """In a timer thread: start kazoo again (its connection thread ended at AUTH_FAILED,
        its requests failed and its session was forgotten)."""
        with self._restarting:
            if not self._closed:
                self._kazoo.start_async()  # reconnects until it is answered

    @property
    def session_id(self) -> int | None:
        cid = self._kazoo.client_id
        return int(cid[0]) if cid else None

    @property
    def session_credentials(self) -> tuple[int, bytes] | None:
        """(session id, password): what a test needs to expire this session from outside."""
        cid = self._kazoo.client_id
        return (int(cid[0]), bytes(cid[1])) if cid else None

    @property
    def connected(self) -> bool:
        return bool(self._kazoo.connected)

    # from kazoo's threads -------------------------------------------------------------
    def _deliver(self, event: ZkEvent) -> None:
        if self._closed:
            return
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            self._send.send_nowait(event)

    def _deliver_from_thread(self, event: ZkEvent) -> None:
        """Hand `event` to trio without waiting for it (callbacks run in order)."""
        if self._closed:
            return
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._deliver, event)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            # Called on kazoo's connection thread before requests flow; the session id is set.
            sid = self.session_id
            new = self._expired or (self._session_id is not None and sid != self._session_id)
            self._session_id = sid
            self._expired = False
            self._deliver_from_thread(ZkEvent("session", state="CONNECTED", new_session=new))
        elif state == KazooState.SUSPENDED:
            self._deliver_from_thread(ZkEvent("session", state="SUSPENDED"))
        else:
            self._expired = True
            self._deliver_from_thread(ZkEvent("session", state="LOST"))
            if self._started and self._kazoo.client_state == KeeperState.AUTH_FAILED:
                assert self.login is not None
                log.error(
                    "ZooKeeper at %s refused the SASL login of %s: %s; a new session in %s s",
                    self.connect,
                    self.login.describe(),
                    self.login.refusal(),
                    AUTH_RETRY_BACKOFF_S,
                )
                retry = threading.Timer(AUTH_RETRY_BACKOFF_S, self._new_session_after_auth_failure)
                retry.daemon = True
                retry.start()

    def _on_data(self, event: WatchedEvent) -> None:
        if event.path is None:  # session news reaches watchers too; the listener reports it
            return
        self._deliver_from_thread(ZkEvent("data", path=event.path, type=str(event.type)))

    def _on_children(self, event: WatchedEvent) -> None:
        if event.path is None:
            return
        self._deliver_from_thread(ZkEvent("children", path=event.path, type=str(event.type)))

    # calls ----------------------------------------------------------------------------
    def _wait(self, pending: Any) -> Any:
        """The result of a kazoo `*_async` call, in a worker thread; ConnectionLoss when no
        answer came within the session timeout."""
        try:
            return pending.get(timeout=self.session_timeout_ms / 1000)
        except self._kazoo.handler.timeout_exception as e:
            raise ConnectionLoss(
                f"no answer from ZooKeeper within {self.session_timeout_ms} ms"
            ) from e

    async def _read(self, call: Callable[[], Any]) -> Any:
        """Run a read in a worker thread; a cancelled caller leaves it behind."""
        return await trio.to_thread.run_sync(call, abandon_on_cancel=True)

    async def _write(self, call: Callable[[], Any]) -> Any:
        """Run a write in a worker thread; the caller waits for it (within `_wait`'s bound)."""
        return await trio.to_thread.run_sync(call)

    async def get(self, path: str, *, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        """(data, stat), or None when the znode does not exist (a watch then waits for it)."""
        kazoo = self._kazoo

        def call() -> tuple[bytes, ZnodeStat] | None:
            try:
                data, stat = self._wait(
                    kazoo.get_async(path, watch=self._on_data if watch else None)
                )
                return bytes(data or b""), stat
            except NoNodeError:
                if watch:
                    self._wait(kazoo.exists_async(path, watch=self._on_data))
                return None

        return await self._read(call)

    async def exists(self, path: str, *, watch: bool = False) -> ZnodeStat | None:
        watcher = self._on_data if watch else None
        return await self._read(lambda: self._wait(self._kazoo.exists_async(path, watch=watcher)))

    async def get_children(self, path: str, *, watch: bool = False) -> list[str] | None:
        """The children's names, or None when the znode does not exist."""
        watcher = self._on_children if watch else None
        try:
            children = await self._read(
                lambda: self._wait(self._kazoo.get_children_async(path, watch=watcher))
            )
        except NoNodeError:
            return None
        return list(children)

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create the znode; NodeExistsError if it exists. Returns the path (with a sequence)."""
        kazoo = self._kazoo

        def create() -> str:
            pending = kazoo.create_async(
                path,
                data,
                acl=znode_acls(path, self.secure_acls),
                ephemeral=ephemeral,
                sequence=sequence,
            )
            return str(self._wait(pending))

        def call() -> str:
            try:
                return create()
            except NoNodeError:
                if not makepath:
                    raise
            self._ensure_path(kazoo, parent_path(path))
            return create()

        return str(await self._write(call))

    async def set(self, path: str, data: bytes, *, version: int = -1) -> ZnodeStat:
        """Replace the data; BadVersionError unless its version is `version` (-1: any)."""
        return await self._write(
            lambda: self._wait(self._kazoo.set_async(path, data, version=version))
        )

    async def delete(self, path: str, *, version: int = -1, recursive: bool = False) -> None:
        """Delete the znode (and, `recursive`, its subtree: kazoo's several calls, each bounded
        by the connection alone); nothing when it does not exist."""
        kazoo = self._kazoo

        def call() -> None:
            if recursive:
                kazoo.delete(path, recursive=True)
            else:
                self._wait(kazoo.delete_async(path, version=version))

        with contextlib.suppress(NoNodeError):
            await self._write(call)

    async def ensure_path(self, path: str) -> None:
        """Create `path` and its missing parents; nothing for those that exist."""
        await self._write(lambda: self._ensure_path(self._kazoo, path))

    def _ensure_path(self, kazoo: KazooClient, path: str) -> None:
        """`ensure_path` in a worker thread, each create bounded as `_wait` says."""
        ensure_path(
            lambda p, acl: self._wait(kazoo.create_async(p, b"", acl=acl)), path, self.secure_acls
        )

    async def multi(self, ops: list[tuple[Any, ...]]) -> list[Any]:
        """A ZooKeeper multi: ("check", path, version), ("create", path, data[, ephemeral]),
        ("set", path, data, version), ("delete", path, version). All or nothing: when one fails,
        the first real error is raised (BadVersionError, NodeExistsError, NoNodeError, ...)."""
        kazoo = self._kazoo

        def call() -> list[Any]:
            t = kazoo.transaction()
            for op in ops:
                kind = op[0]
                if kind == "check":
                    t.check(op[1], op[2])
                elif kind == "create":
                    t.create(
                        op[1],
                        op[2],
                        acl=znode_acls(op[1], self.secure_acls),
                        ephemeral=len(op) > 3 and bool(op[3]),
                    )
                elif kind == "set":
                    t.set_data(op[1], op[2], version=op[3])
                elif kind == "delete":
                    t.delete(op[1], version=op[2])
                else:
                    raise ValueError(f"unknown multi op {kind!r}")
            results = self._wait(t.commit_async())
            failures = [r for r in results if isinstance(r, Exception)]
            real = [r for r in failures if not isinstance(r, RolledBackError)]
            if real:
                raise real[0]
            if failures:
                raise failures[0]
            return list(results)

        return await self._write(call)
