"""A broker's own part in a ZooKeeper cluster: registration, the controller candidacy, topic admin.

`ClusterMember` owns the broker's ZooKeeper session (`ZkClient`) and is the one task that reads
its event channel. It registers the broker (`/brokers/ids/<id>`, ephemeral; the znode's czxid is
the broker epoch) and registers it again when the session expired; it keeps the topic config
overrides (`/config/topics/*`, followed through `/config/changes`) and applies changes to the
broker's local logs and replication throttles, and the users' and clients' configs (SCRAM
credentials and client quotas: `/config/users/*`, `/config/clients/*`, likewise); it watches
`/brokers/ids` so the broker knows the live brokers; it hands the ACL change notifications to
the broker's authorizer (`wirebroker.authorizer`); and it forwards every other watch to this
broker's `Controller`. When one of the broker's log directories goes offline, it writes a
`/log_dir_event_notification/log_dir_event_<seq>` znode, as Kafka's ReplicaManager does, so the
controller moves that directory's leaders elsewhere.

The admin operations of cluster mode live here too, written as Kafka's AdminZkClient writes
them: CreateTopics writes `/config/topics/<t>` then `/brokers/topics/<t>` (the controller does
the rest), DeleteTopics creates `/admin/delete_topics/<t>`, config changes write
`/config/topics/<t>` and a `/config/changes/config_change_<seq>` notification. Dynamic broker
configs likewise live in `/config/brokers/<id>` and `/config/brokers/<default>`; this broker
follows its own and the default's notifications (`wirebroker.dynamic_config` applies them).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.controlled_shutdown import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from protocol.primitives import ZERO_UUID
from wirebroker import host_names
from wirebroker.config import BrokerConfig, ConfigError
from wirebroker.controller import decisions
from wirebroker.controller.controller import Controller, NotController
from wirebroker.dynamic_config import DEFAULT_ENTITY, Reconfigurable
from wirebroker.meta_properties import new_cluster_id, read_meta_cluster_id
from wirebroker.metadata_cache import NO_LEADER
from wirebroker.peer import PeerError, request_once
from wirebroker.quotas.entities import DEFAULT, QuotaEntity
from wirebroker.sasl.credentials import with_scram_credentials
from wirebroker.sasl.scram import ScramCredential
from wirebroker.topic_configs import log_config_for
from wirebroker.topics import validate_topic_name
from wirebroker.zk import entity_configs, znodes
from wirebroker.zk import tls as zk_tls
from wirebroker.zk.change_notifications import purge_obsolete
from wirebroker.zk.client import BadVersionError, NodeExistsError, ZkClient, ZkEvent, ZookeeperError
from wirebroker.zk.delegation_tokens import TOKEN_CHANGES, ZkDelegationTokens
from wirebroker.zk.entity_configs import read_entity_config
from wirebroker.zk.sanitizer import desanitize, sanitize
from wirebroker.zk.sasl_login import secure_acls, zk_login
from wirebroker.zk.znodes import (
    BrokerRegistration,
    Endpoint,
    EntityConfig,
    TopicAssignment,
)

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_VERSION = 3


async def connect(config: BrokerConfig) -> ZkClient:
    """Open the broker's ZooKeeper session (`zookeeper.*` settings, and the SASL login the
    system properties name: `sasl_login`)."""
    connect = config.get("zookeeper.connect")
    assert connect
    login = await trio.to_thread.run_sync(zk_login)  # reads the JAAS file
    zk = ZkClient(
        connect,
        session_timeout_ms=config.get_int("zookeeper.session.timeout.ms"),
        connection_timeout_ms=(
            config.get_int("zookeeper.connection.timeout.ms")
            if config.get("zookeeper.connection.timeout.ms")
            else None
        ),
        tls=zk_tls.client_tls(config),
        login=login,
        secure_acls=secure_acls(config, login),
    )
    await zk.start()
    return zk


async def ensure_cluster_id(zk: ZkClient, config: BrokerConfig) -> str:
    """`/cluster/id`, created if absent; a mismatch with meta.properties stops the broker, as in Kafka."""
    for path in znodes.PERSISTENT_PATHS:
        await zk.ensure_path(path)
    local = read_meta_cluster_id(config.log_dirs()) or config.get("cluster.id")
    got = await zk.get(znodes.CLUSTER_ID)
    if got is None:
        with contextlib.suppress(NodeExistsError):
            await zk.create(
                znodes.CLUSTER_ID,
                znodes.ClusterIdZNode(local or new_cluster_id()).encode(),
                makepath=True,
            )
        got = await zk.get(znodes.CLUSTER_ID)
        assert got is not None
    cluster_id = znodes.ClusterIdZNode.decode(got[0]).id
    if local is not None and local != cluster_id:
        raise ConfigError(
            f"the cluster id in ZooKeeper ({cluster_id}) does not match the one in meta.properties "
            f"({local}): these log dirs belong to another cluster (Kafka's InconsistentClusterIdException)"
        )
    return cluster_id


@dataclass(frozen=True)
class TopicCreated:
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int
    configs: dict[str, str]


class ClusterMember:
    """The broker's ZooKeeper side. `run` is its owner task (a child of the broker's nursery)."""

    def __init__(self, broker: Broker, zk: ZkClient) -> None:
        self.broker = broker
        self.zk = zk
        self.config = broker.config
        self.controller = Controller(zk, broker.node_id, broker.config, broker.peer_security)
        self.controller.on_controller_change = self._controller_changed
        self.controller.topic_config = lambda topic: self.topic_configs.get(topic, {})
        self.broker_epoch = -1
        self.registrations: dict[int, BrokerRegistration] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self._last_change = -1
        self._registered = trio.Event()
        #: The session this broker last registered in (Kafka's currentZKSessionId).
        self._registered_session: int | None = None
        self._stale = False
        self._failed_dirs, self._failed_dirs_received = trio.open_memory_channel[Path](math.inf)
        broker.log_manager.on_dir_offline = self._failed_dirs.send_nowait
        broker.dynamic_config.add_reconfigurable(
            Reconfigurable({"unclean.leader.election.enable"}, self._unclean_changed)
        )

    # the owner task ------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            # Configs first: once registered, peers connect, and a SASL/SCRAM login needs the
            # users' credentials (Kafka serves no request before its config manager started).
            await self._load_topic_configs()
            await self._follow_delegation_tokens()
            await self._register()
            await self._refresh_brokers()
            async with trio.open_nursery() as nursery:
                await nursery.start(self.controller.run)
                nursery.start_soon(self._propagate_log_dir_failures)
                task_status.started()
                async for event in self.zk.events:
                    try:
                        await self._on_event(event)
                    except ZookeeperError as e:
                        # A dropped connection mid-way; the next CONNECTED redoes the work.
                        log.warning("broker %d: ZooKeeper failed (%r)", self.broker.node_id, e)
                        self._stale = True
        finally:
            await self.zk.close()

    async def _on_event(self, ev: ZkEvent) -> None:
        if ev.kind == "session":
            if ev.state == "LOST":
                log.warning("broker %d: ZooKeeper session expired", self.broker.node_id)
            elif ev.state == "SUSPENDED":
                log.warning("broker %d: ZooKeeper connection lost; retrying", self.broker.node_id)
            elif ev.state == "CONNECTED" and (ev.new_session or self._stale):
                self._stale = False
                log.info("broker %d: new ZooKeeper session; registering again", self.broker.node_id)
                await self._load_topic_configs()
                await self._follow_delegation_tokens()  # its watch went with the session
                await self._register()
                await self._refresh_brokers()
                if self.broker.authorizer is not None:
                    await self.broker.authorizer.reload()  # its watches went with the session
            self.controller.submit_zk_event(ev)
            return
        if ev.path in znodes.ACL_CHANGES.values():
            if self.broker.authorizer is not None:
                await self.broker.authorizer.process_changes(ev.path)
            return
        if ev.path == TOKEN_CHANGES:
            tokens = self.broker.delegation_tokens
            if tokens is not None and tokens.zk is not None:
                await tokens.zk.process_changes()
            return
        if ev.path == znodes.CONFIG_CHANGES:
            await self._process_config_changes()
            return
        if ev.path == znodes.CONFIG_TOPICS:
            await self._on_config_topics()
            return
        if ev.path == znodes.BROKER_IDS:
            await self._refresh_brokers()
        self.controller.submit_zk_event(ev)

    async def _follow_delegation_tokens(self) -> None:
        """Load the delegation tokens and follow their changes (Kafka's
        DelegationTokenManagerZk.startup), when they are enabled."""
        tokens = self.broker.delegation_tokens
        if tokens is not None:
            tokens.zk = tokens.zk or ZkDelegationTokens(self.zk, tokens)
            await tokens.zk.start()

    async def _propagate_log_dir_failures(self) -> None:
        """Tell the controller of each log directory that went offline (Kafka's
        propagateLogDirEvent), retrying while ZooKeeper cannot be reached."""
        async for log_dir in self._failed_dirs_received:
            notification = znodes.LogDirEventNotification(self.broker.node_id).encode()
            while True:
                try:
                    await self.zk.create(
                        f"{znodes.LOG_DIR_EVENT_NOTIFICATION}/{znodes.LOG_DIR_EVENT_PREFIX}",
                        notification,
                        sequence=True,
                        makepath=True,
                    )
                    break
                except ZookeeperError as e:
                    log.warning("cannot report the failure of %s yet (%r)", log_dir, e)
                    await trio.sleep(1.0)
            log.info("broker %d: reported the failure of %s", self.broker.node_id, log_dir)

    def _unclean_changed(self, changed: frozenset[str]) -> None:
        if self.config.get_bool("unclean.leader.election.enable"):
            self.controller.unclean_election_enabled()

    def _controller_changed(self, controller_id: int) -> None:
        self.broker.controller_id = controller_id
        log.info("broker %d: the controller is now %d", self.broker.node_id, controller_id)

    # registration --------------------------------------------------------------------------
    def registration(self) -> BrokerRegistration:
        return BrokerRegistration(
            self.broker.node_id,
            tuple(
                Endpoint(a.name, a.host, a.port, self.config.security_protocol(a.name))
                for a in self.broker.advertised
            ),
            self.config.get("broker.rack") or None,
            int(time.time() * 1000),
        )

    async def _register(self) -> None:
        path = znodes.broker_path(self.broker.node_id)
        data = self.registration().encode()
        try:
            await self.zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            got = await self.zk.get(path)
            owner = got[1].ephemeralOwner if got is not None else None
            if owner is not None and owner == self._registered_session != self.zk.session_id:
                # Kafka's KAFKA-7165 workaround: our previous session's registration, left
                # behind (a session given up after AUTH_FAILED ends only when it expires).
                log.info(
                    "broker %d: %s is our previous session's (0x%x); registering it again",
                    self.broker.node_id,
                    path,
                    owner,
                )
                await self.zk.delete(path)
                await self.zk.create(path, data, ephemeral=True, makepath=True)
            elif owner != self.zk.session_id:
                raise ConfigError(
                    f"broker id {self.broker.node_id} is already registered in ZooKeeper "
                    f"({path}): another broker runs with broker.id={self.broker.node_id}"
                ) from None
        self._registered_session = self.zk.session_id
        stat = await self.zk.exists(path)
        assert stat is not None
        self.broker_epoch = stat.czxid
        self.broker.broker_epoch = stat.czxid
        self._registered.set()
        log.info(
            "broker %d registered at %s (broker epoch %d)", self.broker.node_id, path, stat.czxid
        )

    async def register_again(self) -> None:
        """Write this broker's registration anew with its advertised listeners of now (they
        changed at run time), as Kafka's updateBrokerInfo: the znode stays, and so the broker
        epoch; the controller follows with UpdateMetadata to every broker."""
        path = znodes.broker_path(self.broker.node_id)
        try:
            await self.zk.set(path, self.registration().encode())
        except ZookeeperError as e:
            # The next session's registration carries them (registration() reads them then).
            log.warning(
                "broker %d: cannot register the new listeners yet (%r)", self.broker.node_id, e
            )
            self._stale = True
            return
        log.info("broker %d registered again at %s", self.broker.node_id, path)

    async def _read_brokers(self, *, watch: bool) -> dict[int, BrokerRegistration]:
        ids = await self.zk.get_children(znodes.BROKER_IDS, watch=watch) or []
        found: dict[int, BrokerRegistration] = {}
        for name in ids:
            got = await self.zk.get(znodes.broker_path(int(name)))
            if got is not None:
                found[int(name)] = BrokerRegistration.decode(int(name), got[0])
        return dict(sorted(found.items()))

    async def _refresh_brokers(self) -> None:
        self.registrations = await self._read_brokers(watch=True)

    async def live_brokers(self) -> dict[int, str | None]:
        """The registered brokers and their racks, read from ZooKeeper now (for admin requests;
        the owner task's `registrations` is left alone)."""
        return {b: r.rack for b, r in (await self._read_brokers(watch=False)).items()}

    # topic configs --------------------------------------------------------------------------
    async def _load_topic_configs(self) -> None:
        changes = await self.zk.get_children(znodes.CONFIG_CHANGES, watch=True) or []
        self._last_change = max((znodes.sequence_number(c) for c in changes), default=-1)
        await purge_obsolete(self.zk, znodes.CONFIG_CHANGES, changes)  # as Kafka's start-up
        configs: dict[str, dict[str, str]] = {}
        for topic in await self.zk.get_children(znodes.CONFIG_TOPICS, watch=True) or []:
            got = await self.zk.get(znodes.topic_config_path(topic))
            if got is not None:
                configs[topic] = EntityConfig.decode(got[0]).config
        # (Again after a new session: what went meanwhile is forgotten, the rest applied.)
        for topic in self.broker.replication_quotas.topics() - set(configs):
            self._topic_configured(topic, {})
        self.topic_configs = configs
        for topic, overrides in configs.items():
            self._topic_configured(topic, overrides)
            if overrides:
                self.broker.apply_topic_config(topic, overrides)
        entities = await entity_configs.read_quota_entities(self.zk)
        for entity in self.broker.quotas.entities() - set(entities):
            await self._entity_configured(entity, {})
        for entity, config in entities.items():
            await self._entity_configured(entity, config)
        for broker in (DEFAULT_ENTITY, str(self.broker.node_id)):
            await self._load_broker_config(broker)

    def _topic_configured(self, topic: str, overrides: dict[str, str]) -> None:
        self.broker.replication_quotas.topic_configured(topic, overrides)

    # dynamic broker configs -------------------------------------------------------------------
    async def broker_config(self, entity: str) -> dict[str, str]:
        """The stored dynamic configs of `/config/brokers/<entity>` (passwords encrypted)."""
        return await read_entity_config(self.zk, znodes.broker_config_path(entity))

    async def set_broker_config(self, entity: str, config: dict[str, str]) -> None:
        """Replace `/config/brokers/<entity>` and notify every broker, as Kafka's
        AdminZkClient.changeBrokerConfig."""
        await entity_configs.change_entity_config(self.zk, f"brokers/{entity}", config)

    async def _load_broker_config(self, entity: str) -> None:
        stored = await self.broker_config(entity)
        dynamic = self.broker.dynamic_config
        await trio.to_thread.run_sync(dynamic.prepare, entity, stored)  # (stores are read)
        dynamic.apply(entity, stored)

    # user, client and ip configs (SCRAM credentials, client and connection quotas) ---------
    async def _entity_configured(self, entity: QuotaEntity, config: dict[str, str]) -> None:
        """A user's, client's or ip's config, as ZooKeeper has it now: its quotas (an ip's
        host name resolved again, as Kafka's IpConfigHandler), and a user's SCRAM
        credentials."""
        address = await host_names.ip_entity_address(entity)
        self.broker.quotas.update(entity, config, address)
        if entity.client_id is None and entity.user not in (None, DEFAULT):
            self.broker.scram_credentials.cache_user_config(desanitize(entity.user), config)

    async def client_quota_configs(self) -> dict[QuotaEntity, dict[str, str]]:
        """Every user, client and ip entity's config, read from ZooKeeper now."""
        return await entity_configs.read_quota_entities(self.zk)

    async def client_quota_config(self, entity: QuotaEntity) -> dict[str, str]:
        return await entity_configs.read_user_or_client_config(self.zk, entity)

    async def set_client_quota_config(self, entity: QuotaEntity, config: dict[str, str]) -> None:
        """Replace an entity's config and notify every broker (this one included)."""
        await entity_configs.change_user_or_client_config(self.zk, entity, config)

    async def set_user_scram_credentials(
        self, user: str, credentials: dict[str, ScramCredential]
    ) -> None:
        """Replace the user's SCRAM credentials in `/config/users/<user>` (keeping its other
        keys, quotas) and notify every broker, as Kafka's AdminZkClient does."""
        entity = QuotaEntity(sanitize(user), None)
        config = await entity_configs.read_user_or_client_config(self.zk, entity)
        await entity_configs.change_user_or_client_config(
            self.zk, entity, with_scram_credentials(config, credentials)
        )

    async def _on_config_topics(self) -> None:
        """A topic was created (its config znode comes first) or deleted: keep the cache whole."""
        names = set(await self.zk.get_children(znodes.CONFIG_TOPICS, watch=True) or [])
        for gone in set(self.topic_configs) - names:
            del self.topic_configs[gone]
            self._topic_configured(gone, {})
        for topic in sorted(names - set(self.topic_configs)):
            got = await self.zk.get(znodes.topic_config_path(topic))
            if got is not None:
                self.topic_configs[topic] = EntityConfig.decode(got[0]).config
                self._topic_configured(topic, self.topic_configs[topic])

    async def _process_config_changes(self) -> None:
        """Apply each `/config/changes` notification not seen yet (watching for the next), then
        delete the ones older than 15 minutes."""
        changes = sorted(
            await self.zk.get_children(znodes.CONFIG_CHANGES, watch=True) or [],
            key=znodes.sequence_number,
        )
        await self._apply_config_changes(changes)
        await purge_obsolete(self.zk, znodes.CONFIG_CHANGES, changes)

    async def _apply_config_changes(self, changes: list[str]) -> None:
        for child in changes:
            seq = znodes.sequence_number(child)
            if seq <= self._last_change:
                continue
            self._last_change = seq
            got = await self.zk.get(f"{znodes.CONFIG_CHANGES}/{child}")
            if got is None:
                continue
            entity_path = znodes.ConfigChangeNotification.decode(got[0]).entity_path
            entity = QuotaEntity.from_path(entity_path)
            if entity is not None:
                await self._entity_configured(
                    entity, await entity_configs.read_user_or_client_config(self.zk, entity)
                )
                continue
            kind, _, name = entity_path.partition("/")
            if kind == "brokers":
                if name in (DEFAULT_ENTITY, str(self.broker.node_id)):
                    await self._load_broker_config(name)
                continue
            if kind != "topics":
                log.info("ignoring a config change of %s", entity_path)
                continue
            overrides = await read_entity_config(self.zk, znodes.topic_config_path(name))
            self.topic_configs[name] = overrides
            log.info("topic %s: config overrides now %s", name, overrides)
            self._topic_configured(name, overrides)
            self.broker.apply_topic_config(name, overrides)

    # controlled shutdown --------------------------------------------------------------------
    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move leadership off this broker; True once it has none left.

        Tries `controlled.shutdown.max.retries` times, `controlled.shutdown.retry.backoff.ms`
        apart, as Kafka does; the caller bounds the whole with its own timeout.
        """
        retries = self.config.get_int("controlled.shutdown.max.retries")
        backoff = self.config.get_int("controlled.shutdown.retry.backoff.ms") / 1000
        for attempt in range(1, retries + 1):
            try:
                remaining = await self._controlled_shutdown_once()
            except (
                OSError,
                trio.TooSlowError,
                EOFError,
                PeerError,
                KafkaError,
                NotController,
                ZookeeperError,
            ) as e:
                log.info("controlled shutdown attempt %d failed: %s", attempt, e)
            else:
                if not remaining:
                    log.info("controlled shutdown of broker %d succeeded", self.broker.node_id)
                    return True
                log.info(
                    "controlled shutdown attempt %d: still leading %d partitions",
                    attempt,
                    len(remaining),
                )
            if attempt < retries:
                await trio.sleep(backoff)
        log.warning(
            "controlled shutdown of broker %d did not finish; stopping anyway", self.broker.node_id
        )
        return False

    async def _controlled_shutdown_once(self) -> list[tuple[str, int]]:
        node = self.broker.node_id
        if self.controller.active:
            return await self.controller.call(
                lambda: self.controller.controlled_shutdown(node, self.broker_epoch)
            )
        got = await self.zk.get(znodes.CONTROLLER)
        if got is None:
            raise KafkaError("no controller", error_code=ErrorCode.NOT_CONTROLLER)
        controller_id = znodes.ControllerZNode.decode(got[0]).broker_id
        reg = await self.zk.get(znodes.broker_path(controller_id))
        if reg is None:
            raise KafkaError(
                "the controller is not registered", error_code=ErrorCode.NOT_CONTROLLER
            )
        ep = BrokerRegistration.decode(controller_id, reg[0]).endpoint(
            self.config.inter_broker_listener()
        )
        response = await request_once(
            ep.host,
            ep.port,
            ControlledShutdownRequest(broker_id=node, broker_epoch=self.broker_epoch),
            CONTROLLED_SHUTDOWN_VERSION,
            client_id=f"broker-{node}",
            security=self.broker.peer_security,
        )
        assert isinstance(response, ControlledShutdownResponse)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(
                f"the controller answered {ErrorCode(response.error_code).name}",
                error_code=ErrorCode(response.error_code),
            )
        return [(p.topic_name, p.partition_index) for p in response.remaining_partitions]

    async def allocate_producer_id_block(self) -> tuple[int, int]:
        """(first, last) of a fresh block of 1000 producer ids for this broker (cluster mode)."""
        return await allocate_producer_id_block(self.zk, self.broker.node_id)

    # topic admin (cluster mode) ---------------------------------------------------------------
    async def topic_assignment(self, name: str) -> TopicAssignment | None:
        got = await self.zk.get(znodes.topic_path(name))
        return TopicAssignment.decode(got[0]) if got is not None else None

    async def topic_names(self) -> list[str]:
        return sorted(await self.zk.get_children(znodes.BROKER_TOPICS) or [])

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignment: dict[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicCreated:
        validate_topic_name(name)
        existing = await self.topic_names()
        if name in existing:
            raise KafkaError(
                f"Topic '{name}' already exists.", error_code=ErrorCode.TOPIC_ALREADY_EXISTS
            )
        if await self.zk.exists(znodes.delete_topic_path(name)) is not None:
            raise KafkaError(
                f"Topic '{name}' is marked for deletion.", error_code=ErrorCode.TOPIC_ALREADY_EXISTS
            )
        canonical = name.replace(".", "_")
        clash = [t for t in existing if t.replace(".", "_") == canonical]
        if clash:
            raise KafkaError(
                f"Topic '{name}' collides with existing topic: {clash[0]}",
                error_code=ErrorCode.INVALID_TOPIC_EXCEPTION,
            )
        live = await self.live_brokers()
        if assignment is not None:
            decisions.validate_assignment(assignment, live)
        else:
            assignment = decisions.assign_replicas(live, partitions, replication_factor)
        log_config_for(self.config, configs)  # validates
        topic_id = uuid.uuid4()
        created = TopicCreated(
            topic_id, len(assignment), len(next(iter(assignment.values()))), dict(configs)
        )
        if validate_only:
            return created
        config_path = znodes.topic_config_path(name)
        data = EntityConfig(dict(configs)).encode()
        try:
            await self.zk.create(config_path, data, makepath=True)
        except NodeExistsError:
            await self.zk.set(config_path, data)
        try:
            await self.zk.create(
                znodes.topic_path(name),
                TopicAssignment(assignment, topic_id).encode(),
                makepath=True,
            )
        except NodeExistsError:
            raise KafkaError(
                f"Topic '{name}' already exists.", error_code=ErrorCode.TOPIC_ALREADY_EXISTS
            ) from None
        log.info("created topic %s: %s", name, assignment)
        return created

    async def wait_topic_ready(self, name: str, partitions: int, timeout_s: float) -> bool:
        """True once this broker's metadata cache (what the controller told it) has a leader for
        each of topic ``name``'s first ``partitions`` partitions, within the timeout: what
        Kafka's CreateTopics and CreatePartitions answer after (its DelayedCreatePartitions),
        so that a Metadata request that follows finds them on any broker told at the same time."""
        cache = self.broker.metadata_cache
        with trio.move_on_after(timeout_s):
            while True:
                led = (cache.partition(name, p) for p in range(partitions))
                if all(info is not None and info.leader != NO_LEADER for info in led):
                    return True
                await trio.sleep(0.05)  # the cache has no event to await
        return False

    async def delete_topic(self, name: str) -> uuid.UUID:
        assignment = await self.topic_assignment(name)
        if assignment is None:
            raise KafkaError(
                f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        with contextlib.suppress(NodeExistsError):
            await self.zk.create(znodes.delete_topic_path(name), makepath=True)
        log.info("topic %s marked for deletion", name)
        return assignment.topic_id or ZERO_UUID

    async def wait_topic_deleted(self, name: str, timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            while await self.zk.exists(znodes.topic_path(name)) is not None:
                await trio.sleep(0.05)
            return True
        return False

    async def add_partitions(
        self,
        name: str,
        count: int,
        assignment: list[list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> None:
        got = await self.zk.get(znodes.topic_path(name))
        if got is None or await self.zk.exists(znodes.delete_topic_path(name)) is not None:
            raise KafkaError(
                f"unknown topic {name!r}", error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        current = TopicAssignment.decode(got[0])
        existing = len(current.partitions)
        if count <= existing:
            raise KafkaError(
                f"Topic currently has {existing} partitions, {count} would not be an increase.",
                error_code=ErrorCode.INVALID_PARTITIONS,
            )
        live = await self.live_brokers()
        first = current.partitions.get(0, [])
        rf = len(first)
        if assignment is not None:
            if len(assignment) != count - existing:
                raise KafkaError(
                    f"Increasing the number of partitions by {count - existing} but "
                    f"{len(assignment)} assignments provided.",
                    error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                )
            new = {existing + i: list(r) for i, r in enumerate(assignment)}
            decisions.validate_assignment(new, live, first_partition=existing)
        else:
            ordered = sorted(live)
            start = ordered.index(first[0]) if first and first[0] in ordered else -1
            new = decisions.assign_replicas(
                live, count - existing, rf, start_index=start, start_partition=existing
            )
        if validate_only:
            return
        current.partitions.update(new)
        await self.zk.set(znodes.topic_path(name), current.encode(), version=got[1].version)
        log.info("topic %s: %d partitions now (new: %s)", name, count, new)

    async def topic_config(self, name: str) -> dict[str, str] | None:
        """The topic's overrides, or None when the topic does not exist."""
        if await self.zk.exists(znodes.topic_path(name)) is None:
            return None
        return await read_entity_config(self.zk, znodes.topic_config_path(name))

    async def set_topic_config(
        self, name: str, overrides: dict[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace the topic's overrides and notify every broker (`/config/changes`)."""
        log_config_for(self.config, overrides)  # validates
        if validate_only:
            return
        await entity_configs.change_entity_config(self.zk, f"topics/{name}", overrides)


async def read_broker_configs(zk: ZkClient, broker_id: int) -> dict[str, dict[str, str]]:
    """This broker's and the default's stored dynamic configs, by entity (read at start-up)."""
    return {
        entity: await read_entity_config(zk, znodes.broker_config_path(entity))
        for entity in (DEFAULT_ENTITY, str(broker_id))
    }


PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


async def allocate_producer_id_block(zk: ZkClient, broker_id: int) -> tuple[int, int]:
    """The next block of producer ids for this broker, as (first, last), from
    `/latest_producer_id_block`, written with a version check (retried when another broker won),
    as Kafka's ZkProducerIdManager does."""
    path = znodes.LATEST_PRODUCER_ID_BLOCK
    while True:
        got = await zk.get(path)
        if got is None:
            with contextlib.suppress(NodeExistsError):
                await zk.create(path, b"", makepath=True)
            continue
        data, stat = got
        first = znodes.ProducerIdBlock.decode(data).block_end + 1 if data else 0
        block = znodes.ProducerIdBlock(broker_id, first, first + PRODUCER_ID_BLOCK_SIZE - 1)
        try:
            await zk.set(path, block.encode(), version=stat.version)
        except BadVersionError:
            continue
        return block.block_start, block.block_end
