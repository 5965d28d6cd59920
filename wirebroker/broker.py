"""The broker's state and its single owner: topics, partitions, logs, cluster identity.

`Broker` owns everything a handler may read or change: the topic registry, the partitions (each
with its log), the node id and cluster id, the addresses clients are told, and its dynamic
configs (whose changes it applies to its logs, cleaner and SASL listeners). All of it lives
in one trio thread, so handlers need no locks. Handlers call its methods; it calls `storage`.

A new partition exists (is served, and listed in Metadata) only once its log does: the logs of
a CreateTopics, CreatePartitions, auto-creation (internal topics' first use included) or
LeaderAndIsr are made in one worker-thread call (`make_logs`, one creation at a time), so the
loop never waits on their files; a new partition of an internal topic is then loaded by its
coordinator (`partition_moved`). Only start-up makes logs on the loop (`_attach`). At
start-up the embedded broker moves stray logs aside (`-stray`, as Kafka): those of no topic in
the registry, beyond its partition count, or with another topic id. The embedded broker's
metadata cache (what Metadata tells) follows its partitions: one is added when served and
removed when deleted, never rebuilt per request.
It must not speak the wire protocol (handlers do) or accept connections (`server` does).

The group and transaction coordinators are built, and started in the nursery of
`serve_coordinators`, on first use: a request that needs one, or their internal topic's
partition led here (in a cluster, the replica manager's `partition_moved`); the embedded broker
builds those whose topic exists at start, which load it then, as Kafka loads them. A broker no
group or transaction uses never imports them (start-up time, bench row 7).
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode, KafkaError
from storage.chore import run_chore
from storage.clock import Clock, wall_clock_ms
from storage.config import LogConfig, max_map_keys
from storage.log_manager import CreateLogs, LogManager
from storage.partition_log import PartitionLog
from wirebroker import connection_limits, gc_freeze, host_names
from wirebroker.config import BrokerConfig, ConfigError, Listener
from wirebroker.connection_limits import ConnectionLimits
from wirebroker.dynamic_config import DynamicBrokerConfig, Reconfigurable, thread_count_check
from wirebroker.fetch_sessions import FetchSessionCache
from wirebroker.meta_properties import load_or_create_meta
from wirebroker.metadata_cache import BrokerInfo, Endpoint, MetadataCache, PartitionInfo
from wirebroker.metrics import BrokerStats
from wirebroker.partition import Partition, TopicPartition
from wirebroker.peer import PLAINTEXT, PeerSecurity
from wirebroker.producer_ids import ProducerIdManager
from wirebroker.quotas.client import ClientQuotas
from wirebroker.quotas.replication import ReplicationQuotas
from wirebroker.quotas.store import FILE_NAME as CLIENT_QUOTAS_FILE
from wirebroker.quotas.store import ClientQuotaStore
from wirebroker.replication.partition_metadata import (
    read_topic_id,
    sync_new_topic_ids,
    write_new_topic_id,
)
from wirebroker.sasl.credentials import FILE_NAME as SCRAM_CREDENTIALS_FILE
from wirebroker.sasl.credentials import ScramCredentialStore
from wirebroker.sasl.settings import (
    ListenerSasl,
    listener_sasl,
    loaded_login_modules,
    share_key_sets,
)
from wirebroker.topic_configs import LOG_KEYS, log_config_for, min_insync_replicas
from wirebroker.topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    TXN_TOPIC,
    TopicRecord,
    TopicRegistry,
    validate_topic_name,
)

if TYPE_CHECKING:
    from wirebroker.authorizer.acl_authorizer import AclAuthorizer
    from wirebroker.group.coordinator import GroupCoordinator
    from wirebroker.replication.manager import ReplicaManager
    from wirebroker.sasl.delegation_tokens import DelegationTokens
    from wirebroker.sasl.jwks import KeySet
    from wirebroker.txn.coordinator import TransactionCoordinator
    from wirebroker.zk.member import ClusterMember

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Broker:
    """One broker: its config, identity, topics and partitions."""

    config: BrokerConfig
    node_id: int
    cluster_id: str
    log_manager: LogManager
    topics: TopicRegistry
    #: The configs changed at run time (IncrementalAlterConfigs on BROKER resources).
    dynamic_config: DynamicBrokerConfig
    partitions: dict[TopicPartition, Partition] = field(default_factory=dict)
    advertised: list[Listener] = field(default_factory=list)
    #: The request and connection counters of the metrics (`wirebroker.metrics`).
    stats: BrokerStats = field(init=False)
    producer_ids: ProducerIdManager = field(init=False)
    # The cluster (replica side): what UpdateMetadata said, LeaderAndIsr/StopReplica's effects.
    metadata_cache: MetadataCache = field(default_factory=MetadataCache)
    #: How this broker's connections to its peers are secured (the inter-broker listener's;
    #: the embedded broker has no peers).
    peer_security: PeerSecurity = field(init=False)
    fetch_sessions: FetchSessionCache = field(init=False)
    #: The SASL settings of each SASL listener, by listener name.
    sasl_listeners: dict[str, ListenerSasl] = field(init=False)
    #: The JWKS of each endpoint secured OAUTHBEARER tokens are verified with.
    key_sets: list[KeySet] = field(init=False)
    #: SCRAM credentials: a file in the embedded broker, a cache of ZooKeeper's in a cluster.
    scram_credentials: ScramCredentialStore = field(init=False)
    #: Delegation tokens (None: disabled, no `delegation.token.secret.key`): a file in the
    #: embedded broker, a cache of ZooKeeper's in a cluster.
    delegation_tokens: DelegationTokens | None = field(init=False)
    #: Client quotas: what measures and throttles clients (`wirebroker.quotas.client`).
    quotas: ClientQuotas = field(init=False)
    #: The embedded broker's quota configs (None in a cluster: they live in ZooKeeper).
    quota_store: ClientQuotaStore | None = field(init=False)
    #: Replication throttles of the partitions this broker leads or follows.
    replication_quotas: ReplicationQuotas = field(init=False)
    #: The connections open now against `max.connections*`.
    connection_limits: ConnectionLimits = field(init=False)
    #: `replica.selector.class` is set (the only one known: RackAwareReplicaSelector, KIP-392).
    replica_selector: bool = field(init=False)
    #: The controller's broker id: this broker when embedded; in a cluster, whoever holds
    #: `/controller` (-1 while there is none), kept current by `cluster` and by UpdateMetadata.
    controller_id: int = -1
    #: This broker's part of a ZooKeeper cluster (None when embedded, without zookeeper.connect).
    cluster: ClusterMember | None = None
    #: The czxid of this broker's `/brokers/ids/<id>` registration; -1 when embedded.
    broker_epoch: int = -1
    #: The ACL authorizer (`authorizer.class.name`); None: no authorization (as Kafka).
    authorizer: AclAuthorizer | None = None
    #: Every reading of the time (Kafka's `Time`); a test may run the broker on another.
    clock: Clock = wall_clock_ms
    #: Freeze what each creation of partitions made once it settled (`partitions_made`);
    #: `wirebroker serve` turns it on after its start-up freeze (`wirebroker.gc_freeze`).
    freeze_created: bool = False
    #: The replica manager, once built (`replica_manager`).
    _replica_manager: ReplicaManager | None = field(default=None, init=False, repr=False)
    #: The coordinators once built (`groups`, `transactions`), and where they run.
    _groups: GroupCoordinator | None = field(default=None, init=False, repr=False)
    _transactions: TransactionCoordinator | None = field(default=None, init=False, repr=False)
    _coordinators_nursery: trio.Nursery | None = field(default=None, init=False, repr=False)
    #: Where the OAUTHBEARER key sets and access token are kept fresh (`serve_oauthbearer`).
    _oauthbearer_nursery: trio.Nursery | None = field(default=None, init=False, repr=False)
    #: Set as each JWKS endpoint of a listener added at run time is fetched.
    _key_sets_fetching: list[trio.Event] = field(default_factory=list, init=False, repr=False)
    #: The cancel scope of each key set's `KeySet.run` (`_run_key_set`).
    _key_set_scopes: dict[KeySet, trio.CancelScope] = field(
        default_factory=dict, init=False, repr=False
    )
    #: Held while the offset checkpoint files are written (`server.write_checkpoints`): two
    #: writes at once would share their temporary files.
    checkpoint_lock: trio.Lock = field(default_factory=trio.Lock, init=False, repr=False)
    #: Held while logs are made off the loop (`create_logs`): one creation at a time, in order.
    _log_creation: trio.Lock = field(default_factory=trio.Lock, init=False, repr=False)
    #: The internal topics whose making on first use runs in the background
    #: (`auto_topics.internal_partition_served`).
    making_internal: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.controller_id == -1 and not self.config.cluster_mode:
            self.controller_id = self.node_id
        self.stats = BrokerStats(
            on=self.config.metrics_listener() is not None,
            rate_samples=self.config.get_int("metrics.num.samples"),
            rate_window_ms=self.config.get_int("metrics.sample.window.ms"),
        )
        self.producer_ids = ProducerIdManager.open(self.config.log_dirs()[0])
        self.peer_security = (
            PeerSecurity.inter_broker(self.config) if self.config.cluster_mode else PLAINTEXT
        )
        #: The inter-broker security a validation made, with the config it was made for.
        self._peer_security_made: tuple[Mapping[str, str], PeerSecurity] | None = None
        slots = self.config.get_int("max.incremental.fetch.session.cache.slots")
        self.fetch_sessions = FetchSessionCache(slots)
        self.sasl_listeners = _sasl_listeners(self.config)
        #: The login modules Kafka's JVM would have loaded for these listeners, which register
        #: their mechanisms' SASL servers (`settings.has_sasl_server`).
        self.login_modules = loaded_login_modules(self.sasl_listeners.values())
        self.key_sets = share_key_sets(self.sasl_listeners.values(), [])
        self.scram_credentials = ScramCredentialStore(
            None
            if self.config.get("zookeeper.connect")
            else self.config.log_dirs()[0] / SCRAM_CREDENTIALS_FILE
        )
        self.delegation_tokens = _delegation_tokens(self.config)
        self.quotas = ClientQuotas(self.config)
        self.quota_store = None
        if not self.config.get("zookeeper.connect"):
            self.quota_store = ClientQuotaStore(self.config.log_dirs()[0] / CLIENT_QUOTAS_FILE)
        self.replication_quotas = ReplicationQuotas(lambda: self.config, self.node_id)
        self.connection_limits = ConnectionLimits(self.config, self.quotas, self.now_ms)
        self.replica_selector = bool((self.config.get("replica.selector.class") or "").strip())
        dynamic = self.dynamic_config
        dynamic.add_reconfigurable(
            thread_count_check(self.config, "num.replica.fetchers", self._fetcher_count_changed)
        )
        if self.config.cluster_mode:
            listener = self.replica_manager.inter_broker_listener.lower()
            dynamic.add_reconfigurable(
                Reconfigurable(
                    lambda name: name.startswith(f"listener.name.{listener}."),
                    self._peer_security_changed,
                    self._check_peer_security,
                )
            )
        dynamic.add_reconfigurable(
            Reconfigurable(
                connection_limits.follows,
                self.connection_limits.reconfigure,
                connection_limits.validate,
            )
        )
        dynamic.add_reconfigurable(
            Reconfigurable(LOG_KEYS, self._log_configs_changed, self._check_log_configs)
        )
        dynamic.add_reconfigurable(
            Reconfigurable(CLEANER_KEYS, self._cleaner_changed, self._check_cleaner)
        )
        for name in ("num.io.threads", "num.network.threads", "background.threads"):
            dynamic.add_reconfigurable(thread_count_check(self.config, name))
        dynamic.add_reconfigurable(
            thread_count_check(self.config, "num.recovery.threads.per.data.dir")
        )
        dynamic.add_reconfigurable(
            Reconfigurable(_is_sasl_key, self._sasl_changed, self._check_sasl)
        )

    @property
    def replica_manager(self) -> ReplicaManager:
        """The replica manager: a cluster member's from the start (`server` runs it), the
        embedded broker's (which has no followers) built on first use."""
        if self._replica_manager is None:
            from wirebroker.replication.manager import ReplicaManager

            self._replica_manager = ReplicaManager(self)
        return self._replica_manager

    def _fetcher_count_changed(self, changed: frozenset[str]) -> None:
        if self._replica_manager is not None:
            self._replica_manager.fetcher_count_changed(changed)

    @property
    def groups(self) -> GroupCoordinator:
        """The group coordinator (built and started on first use)."""
        if self._groups is None:
            from wirebroker.group.coordinator import GroupCoordinator

            self._groups = GroupCoordinator(self)
            if self._coordinators_nursery is not None:
                self._groups.start(self._coordinators_nursery)
        return self._groups

    def on_partitions_deleted(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions of a deleted topic are gone from this broker's metadata: the groups
        coordinated here forget their offsets (Kafka's onPartitionsDeleted, which its
        UpdateMetadata handler calls in a cluster)."""
        if self._groups is not None:  # no coordinator made: no group has offsets here
            self._groups.group_manager.on_partitions_deleted(partitions)

    @property
    def transactions(self) -> TransactionCoordinator:
        """The transaction coordinator (built and started on first use)."""
        if self._transactions is None:
            from wirebroker.txn.coordinator import TransactionCoordinator

            self._transactions = TransactionCoordinator(self)
            if self._coordinators_nursery is not None:
                self._transactions.start(self._coordinators_nursery)
        return self._transactions

    def start_soon(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run `job` beside the requests, in the coordinators' nursery, until the broker stops."""
        assert self._coordinators_nursery is not None, "the broker is not serving"
        self._coordinators_nursery.start_soon(job)

    async def serve_coordinators(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the coordinators, those built already and those built later, until cancelled.
        Embedded, those whose internal topic exists are built now and load it."""
        async with trio.open_nursery() as nursery:
            self._coordinators_nursery = nursery
            for built in (self._groups, self._transactions):
                if built is not None:
                    built.start(nursery)
            if not self.cluster_mode:
                if OFFSETS_TOPIC in self.topics.topics:
                    _ = self.groups  # built now, it loads the topic
                if TXN_TOPIC in self.topics.topics:
                    _ = self.transactions
            task_status.started()
            await trio.sleep_forever()

    @property
    def cluster_mode(self) -> bool:
        """Partitions and metadata come from a controller (not the embedded single broker)."""
        return self.config.cluster_mode

    def now_ms(self) -> int:
        return self.clock()

    def metadata(self) -> MetadataCache:
        """The cluster as clients are told it. In a cluster, what the controller said; embedded,
        the partitions served here (the cache follows them as they are served and forgotten,
        `_serve_created` and `delete_topic`) and this broker with its advertised listeners."""
        if not self.cluster_mode:
            self.metadata_cache.set_local_broker(
                BrokerInfo(
                    self.node_id, tuple(Endpoint(a.name, a.host, a.port) for a in self.advertised)
                )
            )
        return self.metadata_cache

    @classmethod
    def open(
        cls,
        config: BrokerConfig,
        clock: Clock = wall_clock_ms,
        dynamic: DynamicBrokerConfig | None = None,
    ) -> Broker:
        """Open the log dirs (recovering what needs it) and load the topic registry, with the
        dynamic broker configs in force from the start (`dynamic`, else the embedded
        broker's stored ones)."""
        dynamic = dynamic or DynamicBrokerConfig.open(config)
        dirs = config.log_dirs()
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        cluster_id = load_or_create_meta(dirs, config.broker_id, config.get("cluster.id"))
        manager = LogManager(
            dirs,
            log_config_for(config, {}),
            now_ms=clock,
            max_map_keys=_max_map_keys(config),
        )
        manager.open()
        broker = cls(
            config,
            config.broker_id,
            cluster_id,
            manager,
            TopicRegistry(dirs[0] / "topics.json"),
            dynamic,
            clock=clock,
        )
        if not config.cluster_mode:
            # In a cluster, partitions appear when the controller's LeaderAndIsr names them.
            broker._move_stray_logs()
            for record in broker.topics.topics.values():
                broker._attach(record)
        log.info(
            "opened %d topics, %d partitions from %s",
            len(broker.topics.topics),
            len(broker.partitions),
            ", ".join(map(str, dirs)),
        )
        return broker

    def _move_stray_logs(self) -> None:
        """Embedded start-up: a log of no topic in the registry, of a partition beyond its
        count, or whose `partition.metadata` names another topic id (left by a crash between
        a creation and its registry write, or a deletion not finished) is moved aside as
        stray, as Kafka's LogManager does (a `-stray` directory, kept), so a topic created
        with its name starts empty."""
        for topic, index in self.log_manager.partitions():
            record = self.topics.get(topic)
            plog = self.log_manager.get(topic, index)
            stored = read_topic_id(plog.dir) if plog is not None else None
            if (
                record is None
                or index >= record.partitions
                or stored not in (None, record.topic_id)
            ):
                self.log_manager.mark_stray(topic, index)

    def close(self) -> None:
        self.topics.close()
        self.log_manager.close()

    # topics -------------------------------------------------------------------------------
    def topic_log_config(self, record: TopicRecord) -> LogConfig:
        return log_config_for(self.config, record.configs)

    def _attach(self, record: TopicRecord) -> None:
        """Make the missing logs of `record`'s partitions on this thread and serve them (at
        start-up, before serving); KafkaError KAFKA_STORAGE_ERROR if one cannot be made (the
        others are served)."""
        if self.cluster_mode:
            return
        creation = self.log_manager.begin_create(*self._missing_logs([record]))
        run_chore(creation)
        failed = self._serve_created([record], creation)
        if failed:
            raise failed[record.name]

    async def create_logs(self, records: list[TopicRecord]) -> dict[str, KafkaError]:
        """Make the missing logs of `records`' partitions off the loop (`make_logs`) and
        serve them: a partition exists here, in Metadata too, only once its log does. Returns
        the topics whose logs could not all be made, with why. A topic deleted (or re-created)
        while its logs were made gets none of them (they are deleted). The new partitions of an
        internal topic are loaded by its coordinator."""
        if self.cluster_mode:
            return {}
        # Shielded: a closed connection must not leave logs made but not served.
        with trio.CancelScope(shield=True):
            creation = await self.make_logs(*self._missing_logs(records))
            failed = self._serve_created(records, creation)
        for topic, index in creation.created:
            if topic in INTERNAL_TOPICS and self.partition(topic, index) is not None:
                # Led here from now on: its coordinator loads it (Kafka's onElection).
                self.partition_moved(TopicPartition(topic, index), leader=True)
        if creation.created:
            self.partitions_made()
        return failed

    def partitions_made(self) -> None:
        """A creation of partitions settled (their logs made, the partitions served): with
        `freeze_created`, what it made is frozen out of the collector's passes, once for the
        whole creation (`wirebroker.gc_freeze`)."""
        if self.freeze_created:
            gc_freeze.freeze("new partitions' state", collect=True)

    async def create_when_written(self, records: list[TopicRecord]) -> dict[str, KafkaError]:
        """Once the registry's file holds `records` (new topics or partition counts), make
        their missing logs and serve them (`create_logs`), as Kafka makes a topic's partitions
        once ZooKeeper holds it. KafkaError UNKNOWN_SERVER_ERROR if the write failed (it was
        undone: nothing is made). Shielded: a closed connection must not leave a written topic
        without its logs."""
        with trio.CancelScope(shield=True):
            await self.topics.written()
            failed = await self.create_logs(records)
        return failed

    async def make_logs(
        self,
        partitions: Mapping[tuple[str, int], LogConfig],
        init: Callable[[tuple[str, int], Path], None],
    ) -> CreateLogs:
        """Make new, empty logs (`LogManager.begin_create`) in a worker thread, one call for
        all, and commit them here: the loop never waits on their creation. Creations run one
        at a time, in order (a later one finds the logs an earlier one made), and a started
        one is finished even by a shutdown (a few directories). The topic ids `init` wrote
        (`write_new_topic_id`) are made durable after, in the background while serving, as
        Kafka flushes them (`_sync_topic_ids`)."""
        async with self._log_creation:
            creation = self.log_manager.begin_create(partitions, init)
            with trio.CancelScope(shield=True):
                try:
                    await trio.to_thread.run_sync(creation.prepare)
                finally:
                    creation.commit()
        if creation.created:
            sync = partial(self._sync_topic_ids, dict(creation.created))
            if self._coordinators_nursery is None:  # not serving (a test's direct call)
                await sync()
            else:
                self._coordinators_nursery.start_soon(sync)
        return creation

    async def _sync_topic_ids(self, logs: Mapping[tuple[str, int], PartitionLog]) -> None:
        """Fsync the new logs' `partition.metadata` files in a worker thread (Kafka's
        flush-metadata-file task); a failure is logged and, unless the disk is full, takes the
        log's directory offline, as Kafka's."""
        directories = {plog.dir: tp for tp, plog in logs.items()}
        failed = await trio.to_thread.run_sync(sync_new_topic_ids, list(directories))
        for directory, error in failed.items():
            log.error("%s: cannot make its topic id durable: %s", directory, error)
            self.log_manager.handle_log_error(*directories[directory], error)

    def _missing_logs(
        self, records: list[TopicRecord]
    ) -> tuple[dict[tuple[str, int], LogConfig], Callable[[tuple[str, int], Path], None]]:
        """The partitions of `records` not served yet with their log configs, and what
        writes each new log's topic id (`partition.metadata`, as Kafka writes it; a failure
        is only logged: a log without one is judged by the registry)."""
        wanted: dict[tuple[str, int], LogConfig] = {}
        ids = {}
        for record in records:
            ids[record.name] = record.topic_id
            config = self.topic_log_config(record)
            for index in range(record.partitions):
                if TopicPartition(record.name, index) not in self.partitions:
                    wanted[(record.name, index)] = config

        def init(tp: tuple[str, int], directory: Path) -> None:
            try:
                write_new_topic_id(directory, ids[tp[0]])
            except OSError as e:  # a full disk: the log is judged by the registry alone
                log.warning("%s: cannot write its topic id: %s", directory, e)

        return wanted, init

    def _serve_created(
        self, records: list[TopicRecord], creation: CreateLogs
    ) -> dict[str, KafkaError]:
        """Serve the partitions of `records` whose logs exist now; the topics with a
        partition whose log could not be made, with why."""
        failed: dict[str, KafkaError] = {}
        for (topic, index), error in creation.failed.items():
            cause = error.__cause__
            reason = cause.strerror if isinstance(cause, OSError) else None  # no paths told
            failed.setdefault(
                topic,
                KafkaError(
                    f"cannot create the log of {topic}-{index}: {reason or error}",
                    error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                ),
            )
        for record in records:
            if self.topics.get(record.name) is not record or (
                record.name in INTERNAL_TOPICS and record.name in failed
            ):
                # Deleted or re-created meanwhile, or an internal topic not made whole (its
                # coordinator would serve some keys and not others): none of it is served;
                # its next use makes it again.
                for name, index in creation.created:
                    if name == record.name:
                        self.log_manager.delete_partition(name, index)
                continue
            config = self.topic_log_config(record)
            for index in range(record.partitions):
                tp = TopicPartition(record.name, index)
                plog = self.log_manager.get(record.name, index)
                if tp in self.partitions or plog is None:
                    continue
                if plog.config != config:  # a log found at start-up: opened with the defaults
                    plog.update_config(config)
                p = self.partitions[tp] = Partition(
                    record.name,
                    index,
                    record.topic_id,
                    plog,
                    leader=self.node_id,
                    leader_epoch=0,
                    replicas=[self.node_id],
                    isr=[self.node_id],
                    min_isr_source=partial(self.min_insync_replicas, record.name),
                    clock=self.clock,
                )
                # Listed in Metadata from now on. Embedded, a partition's leader, epoch and ISR
                # never change (no controller): this is what it is told as until deleted.
                self.metadata_cache.put_partition(
                    record.topic_id,
                    PartitionInfo(
                        record.name, index, p.leader, p.leader_epoch, [*p.isr], [*p.replicas]
                    ),
                )
        return failed

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        validate_only: bool = False,
    ) -> TopicRecord:
        """`register_topic`, then its logs made on this thread (see `_attach`)."""
        record = self.register_topic(
            name, partitions, replication_factor, configs, validate_only=validate_only
        )
        if not validate_only:
            self._attach(record)
        return record

    def register_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        validate_only: bool = False,
    ) -> TopicRecord:
        """Validate the topic and add it to the registry; its partitions are served once
        `create_logs` made their logs."""
        validate_topic_name(name)
        if name in self.topics.topics:
            raise KafkaError(
                f"topic {name!r} already exists", error_code=ErrorCode.TOPIC_ALREADY_EXISTS
            )
        if partitions <= 0:
            raise KafkaError(
                "number of partitions must be larger than 0",
                error_code=ErrorCode.INVALID_PARTITIONS,
            )
        if replication_factor != 1:
            raise KafkaError(
                f"replication factor {replication_factor} is larger than the 1 available broker",
                error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
            )
        record = TopicRecord(name, uuid.uuid4(), partitions, replication_factor, dict(configs))
        log_config_for(self.config, record.configs)  # validates the configs
        if validate_only:
            return record
        self.topics.add(record)
        log.info("created topic %s with %d partitions", name, partitions)
        return record

    def delete_topic(self, name: str) -> TopicRecord:
        record = self.topics.get(name)
        if record is None:
            raise KafkaError(
                f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        self.topics.remove(name, then=partial(self._drop_partitions, record))
        return record

    def _drop_partitions(self, record: TopicRecord) -> None:
        """A deleted topic is out of the registry's file: stop serving its partitions and
        delete their logs."""
        served = [index for index, _partition in self._served(record)]
        for index in served:
            del self.partitions[TopicPartition(record.name, index)]
            self.metadata_cache.remove_partition(record.name, index)
            self.log_manager.delete_partition(record.name, index)
        self.on_partitions_deleted([(record.name, index) for index in served])
        log.info("deleted topic %s", record.name)

    def _served(self, record: TopicRecord) -> list[tuple[int, Partition]]:
        """The partitions of `record` served here (not those of a topic of its name with
        another id)."""
        served = []
        for index in range(record.partitions):
            partition = self.partition(record.name, index)
            if partition is not None and partition.topic_id == record.topic_id:
                served.append((index, partition))
        return served

    def add_partitions(
        self, name: str, count: int, *, validate_only: bool = False
    ) -> TopicRecord | None:
        """Raise the topic's partition count in the registry (validated; None when
        `validate_only`); the new partitions are served once `create_logs` made their logs."""
        record = self.topics.get(name)
        if record is None:
            raise KafkaError(
                f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        if count <= record.partitions:
            raise KafkaError(
                f"topic {name} has {record.partitions} partitions; the new count must be larger, not {count}",
                error_code=ErrorCode.INVALID_PARTITIONS,
            )
        if validate_only:
            return None
        before = record.partitions
        record.partitions = count
        self.topics.changed(partial(setattr, record, "partitions", before))
        return record

    def partition_moved(self, tp: TopicPartition, *, leader: bool) -> None:
        """The replica manager made `tp` leader or follower here, or stopped it: the
        coordinators load or unload what they keep in it (a coordinator not built yet has
        nothing to unload; it is built to load)."""
        if tp.topic == OFFSETS_TOPIC and (leader or self._groups is not None):
            self.groups.group_manager.partition_moved(tp, leader=leader)
        elif tp.topic == TXN_TOPIC and (leader or self._transactions is not None):
            self.transactions.partition_moved(tp, leader=leader)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get(TopicPartition(topic, index))

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """The topic's config overrides: from ZooKeeper in a cluster, else from the registry."""
        if self.cluster is not None:
            return self.cluster.topic_configs.get(topic, {})
        record = self.topics.get(topic)
        return record.configs if record is not None else {}

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's `min.insync.replicas`: its override, else the broker's setting."""
        return min_insync_replicas(self.config, self.topic_overrides(topic))

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, from the registry or (in a cluster) the
        metadata cache, else the partitions we host (a LeaderAndIsr can come before the
        UpdateMetadata naming its topic): a scan only for an id the cache does not know."""
        record = self.topics.by_id.get(topic_id)
        if record is not None:
            return record.name
        if not self.cluster_mode:
            return None
        name = self.metadata_cache.topic_name(topic_id)
        if name is not None:
            return name
        for tp, p in self.partitions.items():
            if p.topic_id == topic_id:
                return tp.topic
        return None

    def topic_id_b64(self, record: TopicRecord) -> str:
        return base64.urlsafe_b64encode(record.topic_id.bytes).decode().rstrip("=")

    def apply_topic_config(self, name: str, overrides: dict[str, str]) -> None:
        """A topic's overrides changed elsewhere (cluster mode: `/config/changes`): apply them
        to the registry record, if any, and to whatever local logs the topic has here."""
        try:
            config = log_config_for(self.config, overrides)
        except Exception as e:
            log.error("topic %s: cannot apply config overrides %s: %s", name, overrides, e)
            return
        record = self.topics.get(name)
        if record is not None and record.configs != overrides:
            before, record.configs = record.configs, dict(overrides)
            self.topics.changed(partial(setattr, record, "configs", before))
        for tp, partition in self.partitions.items():
            if tp.topic == name:
                partition.log.update_config(config)

    # dynamic broker configs -------------------------------------------------------------------
    def _check_log_configs(self, candidate: BrokerConfig) -> None:
        try:
            log_config_for(candidate, {})
        except KafkaError as e:
            raise ConfigError(str(e)) from e

    def _log_configs_changed(self, changed: frozenset[str]) -> None:
        """New broker defaults of topic configs: every log without its own override follows
        at once, as in Kafka (DynamicLogConfig)."""
        self.log_manager.default_config = log_config_for(self.config, {})
        for tp, partition in self.partitions.items():
            try:
                config = log_config_for(self.config, self.topic_overrides(tp.topic))
            except KafkaError as e:
                log.error(
                    "%s-%d: cannot apply the new broker defaults: %s", tp.topic, tp.partition, e
                )
                continue
            partition.log.update_config(config)

    def _check_cleaner(self, candidate: BrokerConfig) -> None:
        """Kafka's LogCleaner bounds on a new thread count."""
        threads, current = (c.get_int("log.cleaner.threads") for c in (candidate, self.config))
        if threads < 1:
            raise ConfigError("Log cleaner threads should be at least 1")
        if threads < current / 2:
            raise ConfigError(
                f"Log cleaner threads cannot be reduced to less than half the current value {current}"
            )
        if threads > current * 2:
            raise ConfigError(
                "Log cleaner threads cannot be increased to more than double the current value "
                f"{current}"
            )

    def _cleaner_changed(self, changed: frozenset[str]) -> None:
        self.log_manager.max_map_keys = _max_map_keys(self.config)

    def _check_peer_security(self, candidate: BrokerConfig) -> None:
        """ConfigError when the inter-broker security cannot be made; made, it is kept for
        `_peer_security_changed` (called in a worker thread: the stores are read)."""
        self._peer_security_made = (candidate.current(), PeerSecurity.inter_broker(candidate))

    def _peer_security_changed(self, changed: frozenset[str]) -> None:
        """The inter-broker listener's stores or login changed at run time: the next
        connections to the other brokers (replica fetchers, AlterPartition, the controller's
        channel) use them (open ones keep theirs). The OAUTHBEARER
        access token login carries on, fetching at once if its endpoint or credentials
        changed (`SaslLogin.adopt`); a new one fetches in the background, logins waiting."""
        made, self._peer_security_made = self._peer_security_made, None
        if made is not None and made[0] == self.config.current():
            security = made[1]
        else:  # a change no validation read the stores for: read here
            security = PeerSecurity.inter_broker(self.config)
        login = security.sasl
        start = login.adopt(self.peer_security.sasl) if login is not None else None
        if start is not None:
            assert self._oauthbearer_nursery is not None
            self._oauthbearer_nursery.start_soon(partial(start.run, at_start=False))
        self.peer_security = security
        self.replica_manager.use_peer_security(security)
        if self.cluster is not None:
            self.cluster.controller.use_peer_security(security)

    def _check_sasl(self, candidate: BrokerConfig) -> None:
        for listener in candidate.listeners():
            if candidate.security_protocol(listener.name).startswith("SASL_"):
                listener_sasl(candidate, listener.name)

    def _sasl_changed(self, changed: frozenset[str]) -> None:
        """A SASL listener's mechanisms or JAAS config changed, or SASL listeners were added or
        removed (`wirebroker.listeners`): new connections use them. A removed listener's
        stay until its connections are closed: none of them goes unauthenticated."""
        named = {listener.name for listener in self.config.listeners()}
        removed = {n: s for n, s in self.sasl_listeners.items() if n not in named}
        current = _sasl_listeners(self.config)
        self.sasl_listeners = {**removed, **current}
        # as a JVM's classes, once loaded they stay: their SASL servers too
        self.login_modules |= loaded_login_modules(current.values())
        held = self.key_sets
        self.key_sets = share_key_sets(current.values(), held)
        # a JWKS endpoint no listener uses any more (its listeners removed) is no longer
        # refreshed, as Kafka closes a removed listener's callback handler
        for key_set in held:
            if key_set not in self.key_sets:
                log.info("JWKS of %s: no listener uses it, not refreshed", key_set.endpoint.shown)
                scope = self._key_set_scopes.pop(key_set, None)  # (a file's: done already)
                if scope is not None:
                    scope.cancel()
        # a listener added with a JWKS endpoint of its own: its keys fetched now, before it
        # opens (`key_sets_fetched`)
        for key_set in self.key_sets:
            if key_set not in held:
                assert self._oauthbearer_nursery is not None, "the broker is not serving"
                fetched = trio.Event()
                self._key_sets_fetching.append(fetched)
                self._oauthbearer_nursery.start_soon(self._keep_key_set, key_set, fetched)

    @contextmanager
    def _refreshing(self, key_set: KeySet) -> Iterator[None]:
        """Where a key set's `KeySet.run` runs: until no listener uses it (`_sasl_changed`
        cancels it)."""
        self._key_set_scopes[key_set] = scope = trio.CancelScope()
        try:
            with scope:
                yield
        finally:
            if self._key_set_scopes.get(key_set) is scope:
                del self._key_set_scopes[key_set]

    async def _run_key_set(
        self, key_set: KeySet, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with self._refreshing(key_set):
            await key_set.run(task_status=task_status)

    async def _keep_key_set(self, key_set: KeySet, fetched: trio.Event) -> None:
        """A JWKS endpoint of a listener added at run time, fetched (`fetched` set then) and
        kept fresh as one of the start; one that cannot be fetched is logged and dropped, and
        its listener is not started (`key_set_failure`), as Kafka fails to start a listener
        whose callback handler cannot be configured: the broker goes on."""
        try:
            with self._refreshing(key_set):  # (outside the start: a cancel may come first)
                async with trio.open_nursery() as nursery:
                    try:  # (here: out of the nursery, it would be an ExceptionGroup)
                        await nursery.start(key_set.run)
                    except ConfigError as e:
                        log.error("%s", e)
                        if key_set in self.key_sets:
                            self.key_sets.remove(key_set)
                        return
                    fetched.set()
        finally:
            fetched.set()

    def key_set_failure(self, listener_name: str) -> str | None:
        """Why the listener's JWKS could not be fetched when it was added (None: it was, or it
        has none of its own to fetch)."""
        settings = self.sasl_listeners.get(listener_name)
        validator = settings.oauthbearer if settings is not None else None
        keys = getattr(validator, "keys", None)
        return keys.failure if keys is not None else None

    async def key_sets_fetched(self) -> None:
        """Once the JWKS endpoints of the listeners added are fetched (or given up: logged),
        as Kafka's new listener fetches its keys before its acceptor starts."""
        while self._key_sets_fetching:
            await self._key_sets_fetching[0].wait()
            self._key_sets_fetching.pop(0)

    async def apply_stored_quotas(self) -> None:
        """An embedded broker's client quotas (`client-quotas.json`), an ip entity's host name
        resolved (off the loop), before a listener opens."""
        if self.quota_store is None:
            return
        for entity, config in self.quota_store.entities.items():
            self.quotas.update(entity, config, await host_names.ip_entity_address(entity))

    async def serve_oauthbearer(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Fetch the JWKS of secured OAUTHBEARER tokens and this broker's own access token for
        its peers (ConfigError when one cannot be had), report started, then keep them fresh
        (wirebroker.sasl.jwks, .access_token), and fetch the token of a login changed later."""
        async with trio.open_nursery() as nursery:
            for key_set in self.key_sets:
                await nursery.start(self._run_key_set, key_set)
            login = self.peer_security.sasl
            if login is not None and login.access_token is not None:
                await nursery.start(login.access_token.run)
            self._oauthbearer_nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def set_topic_configs(
        self, name: str, overrides: dict[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace a topic's config overrides (validated), and apply them to its partitions."""
        record = self.topics.get(name)
        if record is None:
            raise KafkaError(
                f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        config = log_config_for(self.config, overrides)
        if validate_only:
            return
        before, record.configs = record.configs, dict(overrides)
        # Applied to the logs once written: a retention the write undoes deletes nothing.
        self.topics.changed(
            partial(setattr, record, "configs", before),
            then=partial(self._apply_log_config, record, config),
        )

    def _apply_log_config(self, record: TopicRecord, config: LogConfig) -> None:
        for _index, partition in self._served(record):
            partition.log.update_config(config)


#: The cleaner's settings (Kafka's LogCleaner.ReconfigurableConfigs).
CLEANER_KEYS = frozenset(
    {"log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor", "log.cleaner.threads"}
)


def _max_map_keys(config: BrokerConfig) -> int:
    """Keys one compaction pass dedupes: `log.cleaner.dedupe.buffer.size` is shared by the
    cleaner threads, as in Kafka."""
    threads = max(config.get_int("log.cleaner.threads"), 1)
    return max_map_keys(
        config.get_int("log.cleaner.dedupe.buffer.size") // threads,
        config.get_float("log.cleaner.io.buffer.load.factor"),
    )


def _is_sasl_key(name: str) -> bool:
    """A key a SASL listener's settings are made of (plain or `listener.name.<l>.` prefixed),
    or one that adds or removes listeners."""
    return (
        "sasl." in name
        or name.endswith("connections.max.reauth.ms")
        or name in ("listeners", "listener.security.protocol.map")
    )


def _sasl_listeners(config: BrokerConfig) -> dict[str, ListenerSasl]:
    """The SASL settings of each SASL_PLAINTEXT and SASL_SSL listener."""
    return {
        listener.name: listener_sasl(config, listener.name)
        for listener in config.listeners()
        if config.security_protocol(listener.name).startswith("SASL_")
    }


def _delegation_tokens(config: BrokerConfig) -> DelegationTokens | None:
    """The broker's delegation tokens, if enabled; their module is imported only then
    (start-up time)."""
    from wirebroker.sasl.delegation_tokens import FILE_NAME, DelegationTokens, secret_key

    key = secret_key(config)
    if key is None:
        return None
    if config.get("zookeeper.connect"):
        return DelegationTokens(key, None)  # loaded from ZooKeeper by the cluster member
    return DelegationTokens.open(key, config.log_dirs()[0] / FILE_NAME)
