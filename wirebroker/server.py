"""The broker process as a trio nursery tree: listeners, connections, housekeeping.

`serve_broker(config, task_status=...)` opens the logs, binds every listener, reports a
`RunningBroker` (with the real bound ports) through `task_status.started`, and runs until
cancelled; on the way out it writes checkpoints and the clean-shutdown marker. Nothing here is
fire-and-forget: connections and periodic jobs are children of its nursery. Every part of the
broker reads the time from its `clock` (Kafka's `Time`, `storage.clock`): the wall clock, or in
a test one that follows trio's `MockClock`.

The dynamic broker configs (`wirebroker.dynamic_config`) are read before anything is opened
(ZooKeeper's `/config/brokers/...` in a cluster, the embedded broker's own file), so listeners'
TLS and the logs start with them; each listener's TLS context is taken per connection from
`tls.ListenerContexts`, which a dynamic keystore change replaces. The listeners and their
acceptors are `wirebroker.listeners`' (bound at start, added and removed by a dynamic
`listeners` change).

With `zookeeper.connect` the broker joins a cluster: its ZooKeeper session opens first (the
cluster id comes from `/cluster/id`), and once the listeners are bound its `ClusterMember`
(registration, config changes, the controller candidacy) runs as a child of the same nursery.
`RunningBroker.stop()` is the clean stop: a controlled shutdown first (when
`controlled.shutdown.enable`), then cancellation; the session is closed on the way out.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from storage.chore import Chore
from storage.clock import Clock, wall_clock_ms
from storage.errors import StorageError
from storage.log_manager import LogManager
from storage.partition_log import PartitionLog, PendingFlush
from wirebroker import compiled
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig, Listener
from wirebroker.connection import ConnectionWatch
from wirebroker.dynamic_config import DynamicBrokerConfig
from wirebroker.listeners import BrokerListeners, tls_contexts
from wirebroker.read_ahead import read_ahead

if TYPE_CHECKING:
    from storage.cleaner import Compaction
    from wirebroker.zk.client import ZkClient

log = logging.getLogger(__name__)

FLUSH_CHECK_INTERVAL_S = 1.0
CONTROLLED_SHUTDOWN_LIMIT_S = 30.0


class RunningBroker:
    """What a started broker reports: itself and the addresses it listened on at start
    (listeners added or removed since: `wirebroker.listeners`)."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("broker", "listeners", "scope", "metrics_url")

    def __init__(
        self,
        broker: Broker,
        listeners: list[Listener],
        scope: trio.CancelScope | None = None,
        metrics_url: str | None = None,
    ) -> None:
        self.broker = broker
        self.listeners = listeners
        self.scope = scope
        #: Its Prometheus endpoint (`wirebroker.metrics.listener`), None when off.
        self.metrics_url = metrics_url

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{lst.host}:{lst.port}" for lst in self.listeners)

    async def stop(self) -> None:
        """Stop cleanly: in a cluster, move leadership away first (controlled shutdown)."""
        cluster = self.broker.cluster
        if cluster is not None and self.broker.config.get_bool("controlled.shutdown.enable"):
            with trio.move_on_after(CONTROLLED_SHUTDOWN_LIMIT_S):
                await cluster.controlled_shutdown()
        if self.scope is not None:
            self.scope.cancel()


async def serve_broker(
    config: BrokerConfig,
    *,
    clock: Clock = wall_clock_ms,
    task_status: trio.TaskStatus[RunningBroker] = trio.TASK_STATUS_IGNORED,
) -> None:
    started = time.monotonic()
    zk: ZkClient | None = None
    if config.get("zookeeper.connect"):
        # Imported here: an embedded broker never loads kazoo and the controller (start-up time).
        from wirebroker.zk import entity_configs
        from wirebroker.zk import member as zk_member

        zk = await zk_member.connect(config)
        try:
            cluster_id = await zk_member.ensure_cluster_id(zk, config)
            config = BrokerConfig({**config.values, "cluster.id": cluster_id})
            stored = await zk_member.read_broker_configs(zk, config.broker_id)
            dynamic = DynamicBrokerConfig.open(config, stored)
            own = str(config.broker_id)
            again = dynamic.reencoded(stored[own])
            if again is not None:  # stored under password.encoder.old.secret
                await entity_configs.change_entity_config(zk, f"brokers/{own}", again)
            # A bad keystore or truststore fails here, before any file or socket is opened.
            tls = tls_contexts(config)
            broker = _open_broker(config, clock, dynamic)
        except BaseException:
            await zk.close()
            raise
    else:
        dynamic = DynamicBrokerConfig.open(config)
        tls = tls_contexts(config)
        broker = _open_broker(config, clock, dynamic)
    try:
        if config.authorizer_enabled:
            # The ACLs are loaded before any listener opens: no request is decided without them.
            from wirebroker.authorizer.acl_authorizer import AclAuthorizer

            broker.authorizer = await AclAuthorizer.open(config, zk)
        async with trio.open_nursery() as nursery:
            # before anything appends: a resumed move's copy and a follower's fetches roll logs
            await nursery.start(_prepare_rolls, broker)
            # secured OAUTHBEARER tokens' keys are held before a listener opens, this broker's
            # own access token before it connects to a peer
            await nursery.start(broker.serve_oauthbearer)
            await nursery.start(broker.topics.keep_written)
            await nursery.start(broker.serve_coordinators)
            if broker.cluster_mode:
                await nursery.start(broker.replica_manager.run)
            from wirebroker.log_dir_moves import resume_moves  # it runs chores as this module

            resume_moves(broker)
            # the stored ip quotas and the overrides of max.connections.per.ip, their host names
            # resolved, apply before a listener opens
            await broker.apply_stored_quotas()
            await nursery.start(broker.connection_limits.run)
            watch = ConnectionWatch(broker)
            nursery.start_soon(watch.run)
            listeners = BrokerListeners(broker, tls, watch)
            bound = await nursery.start(listeners.run)
            dynamic.add_reconfigurable(listeners.reconfigurable())
            if zk is not None:
                from wirebroker.zk.member import ClusterMember

                broker.cluster = ClusterMember(broker, zk)
                await nursery.start(broker.cluster.run)
            nursery.start_soon(_housekeeping, broker)
            if broker.delegation_tokens is not None:
                nursery.start_soon(
                    broker.delegation_tokens.run,
                    config.get_int("delegation.token.expiry.check.interval.ms"),
                    broker.now_ms,
                )
            metrics_url = None
            if config.metrics_listener() is not None:
                # Imported here: prometheus_client only when the endpoint is on (start-up time).
                from wirebroker.metrics_http import serve_metrics

                metrics_url = await nursery.start(serve_metrics, broker)
            log.info("record path and codec primitives: %s", compiled.describe())
            log.info(
                "wirebroker %d ready in %.0f ms on %s (cluster %s)",
                broker.node_id,
                (time.monotonic() - started) * 1000,
                ", ".join(map(str, bound)),
                broker.cluster_id,
            )
            task_status.started(RunningBroker(broker, bound, nursery.cancel_scope, metrics_url))
    finally:
        if zk is not None:
            await zk.close()
        log.info("shutting down: writing checkpoints")
        broker.close()


def _open_broker(config: BrokerConfig, clock: Clock, dynamic: DynamicBrokerConfig) -> Broker:
    """`Broker.open`; an OSError says it happened opening log.dirs (`wirebroker serve` tells
    what failed from such notes)."""
    try:
        return Broker.open(config, clock, dynamic)
    except OSError as e:
        e.add_note(f"opening log.dirs={','.join(map(str, config.log_dirs()))}")
        raise


async def _housekeeping(broker: Broker) -> None:
    """Flushes, retention, compaction, checkpoints and removal of deleted segments' and
    partitions' files, each on its own schedule.

    Storage logs have one owner, the broker's trio thread; the slow part of each chore
    (:mod:`storage.chore`: fsyncs, cleaned segments, checkpoint files, unlinks, ``rmtree``)
    runs in a worker thread, so requests are served meanwhile. Retention and compaction only
    rename deleted segments to ``.deleted`` on the loop; the flush job's removal chore unlinks
    them once ``file.delete.delay.ms`` passed.
    """

    def interval(job: str) -> float:
        """Seconds between runs of a job, read at every run (dynamic changes apply)."""
        config = broker.config
        return {
            "flush": FLUSH_CHECK_INTERVAL_S,
            "retention": config.get_int("log.retention.check.interval.ms") / 1000,
            "cleaner": config.get_int("log.cleaner.backoff.ms") / 1000,
            "checkpoint": config.get_int("log.flush.offset.checkpoint.interval.ms") / 1000,
        }[job]

    jobs = ("flush", "retention", "cleaner", "checkpoint")
    due = {job: trio.current_time() + interval(job) for job in jobs}
    while True:
        job = min(due, key=due.__getitem__)
        await trio.sleep_until(due[job])
        manager = broker.log_manager
        if job == "flush":
            manager.write_index_entries()
            for pending in manager.flushes(broker.now_ms()):
                await _run_log_chore(manager, "flush", pending)
            await _remove_deleted(manager, broker.now_ms())
        elif job == "retention":
            now = broker.now_ms()
            if reads := manager.retention_reads(now):
                await read_ahead(reads)  # old segments' largest timestamps, off the loop
            deleted = manager.run_retention(now)
            if deleted:
                log.info("retention deleted %d segments", deleted)
                await _remove_deleted(manager, broker.now_ms())  # their renames, at once
        elif job == "cleaner":
            freed = await run_compactions(broker)
            if freed:
                log.info("compaction freed %d bytes", freed)
        else:
            await write_checkpoints(broker)
        due[job] = trio.current_time() + interval(job)


async def write_checkpoints(broker: Broker) -> None:
    """Write the log dirs' offset checkpoint files off the loop, one write at a time."""
    async with broker.checkpoint_lock:
        await run_off_loop(broker.log_manager.begin_checkpoint())


async def _remove_deleted(manager: LogManager, now_ms: int) -> None:
    """Rename and unlink what deletions left (the log manager's removal chore), off the loop."""
    removal = manager.removal_chore(now_ms)
    if removal is not None:
        await run_off_loop(removal)


async def _prepare_rolls(broker: Broker, *, task_status: trio.TaskStatus[None]) -> None:
    """Do the roll work the logs ask for (:mod:`storage.roll_work`: next segments made ahead,
    producer snapshots written) as soon as they ask, all that is asked in one worker-thread
    call, so that their rolls on the loop only rename files; started once it listens, and
    beginning with what was asked before (kept by the log manager)."""
    manager = broker.log_manager
    wanted = trio.Event()
    wanted.set()

    def wake() -> None:
        wanted.set()

    manager.on_roll_work = wake
    task_status.started()
    try:
        while True:
            await wanted.wait()
            wanted = trio.Event()
            work = manager.begin_roll_work()
            if work is not None:
                await run_off_loop(work)
    finally:
        manager.on_roll_work = None


async def run_compactions(broker: Broker) -> int:
    """Compact the logs that are due, `log.cleaner.threads` of them at once (0: none), each
    pass's slow part in a worker thread; the bytes freed."""
    manager = broker.log_manager
    threads = broker.config.get_int("log.cleaner.threads")
    if threads <= 0:
        return 0
    limiter = trio.CapacityLimiter(threads)
    freed = 0

    async def compact(lg: PartitionLog) -> None:
        nonlocal freed
        async with limiter:
            now = broker.now_ms()
            if not (lg.offline or lg.writing) and (reads := lg.compaction_reads(now)):
                await read_ahead([reads])  # min.compaction.lag.ms's timestamps, off the loop
            for compaction in manager.log_compactions(lg, now):
                await _run_log_chore(manager, "compaction", compaction)
                freed += compaction.removed

    async with trio.open_nursery() as nursery:
        for _tp, lg in manager.logs():
            if lg.config.compact:
                nursery.start_soon(compact, lg)
    return freed


async def _run_log_chore(manager: LogManager, what: str, chore: PendingFlush | Compaction) -> None:
    """Run one log's chore off the loop; a failure is the manager's to handle (logged,
    retried at the next run, or the log directory taken offline), never the broker's end."""
    try:
        await run_off_loop(chore)
    except (OSError, StorageError) as e:
        manager.chore_failed(what, chore.log, e)


async def run_off_loop(chore: Chore) -> None:
    """Run `chore`'s slow part in a worker thread, then commit it here on the loop (also when
    the slow part raised). A cancellation (shutdown) aborts the slow part and waits for the
    worker to stop; one delivered before the worker started still runs it (aborted), since a
    commit after no prepare at all would apply what was never done (a roll's next segment
    taken for made). What the slow part raised is raised as itself, not in trio's exception
    group, so that callers catch `OSError` (a full disk) and storage errors."""
    finished = False

    async def abort_when_cancelled() -> None:
        try:
            await trio.sleep_forever()
        finally:
            if not finished:
                chore.abort()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(abort_when_cancelled)
            with trio.CancelScope(shield=True):  # the worker is never abandoned anyway
                await trio.to_thread.run_sync(chore.prepare)
            finished = True
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        failed = [e for e in group.exceptions if not isinstance(e, trio.Cancelled)]
        if len(failed) == 1 and len(group.exceptions) == 1:  # the slow part's own error
            raise failed[0] from None
        raise
    finally:
        chore.commit()
