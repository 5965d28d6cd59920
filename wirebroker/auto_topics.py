"""Topics created on first use: what each is made of, and creating it (Kafka's
AutoTopicCreationManager: `creatableTopic` and the ZooKeeper half of `createTopics`).

Metadata's auto-creation and FindCoordinator both create through here, so an internal topic is
the same whoever creates it first. A topic gets `num.partitions` partitions and
`default.replication.factor` replicas and no configs; the coordinators' topics get their own, as
Kafka's coordinators give them:

- `__consumer_offsets`: `offsets.topic.num.partitions`, `offsets.topic.replication.factor`,
  `cleanup.policy=compact`, `segment.bytes` from `offsets.topic.segment.bytes`,
  `compression.type=producer`;
- `__transaction_state`: `transaction.state.log.num.partitions`,
  `transaction.state.log.replication.factor`, `cleanup.policy=compact`,
  `compression.type=uncompressed`, `unclean.leader.election.enable=false`,
  `min.insync.replicas` from `transaction.state.log.min.isr`, `segment.bytes` from
  `transaction.state.log.segment.bytes`.

In a cluster the topic is written to ZooKeeper (with Kafka's checks: fewer live brokers than the
replication factor is INVALID_REPLICATION_FACTOR); the controller elects its leaders and a
coordinator loads a partition of its topic when this broker becomes its leader. Embedded, the
topic is registered, and once `topics.json` holds it its partitions exist when their logs are
made off the loop (`Broker.create_logs`); a Metadata request that creates it is answered then.
FindCoordinator does not wait: it starts the making of an internal topic in the background
(`internal_partition_served`) and answers COORDINATOR_NOT_AVAILABLE until the key's partition
exists, as Kafka's; the coordinator loads each partition once its log exists. A making that
fails (a full disk) is logged and tried again at the next use, and leaves the whole topic or
nothing: a failed registry write leaves no topic; an internal topic whose logs were not all made
has none of them served (those made are deleted) and stays registered, so the next use makes
them all.

Differs from Kafka: the embedded broker gives its internal topics one replica whatever their
replication factor key says (it is the only broker there is).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from protocol.errors import KafkaError
from wirebroker.topics import INTERNAL_TOPICS, OFFSETS_TOPIC, TXN_TOPIC

if TYPE_CHECKING:
    from wirebroker.broker import Broker
    from wirebroker.config import BrokerConfig

log = logging.getLogger(__name__)


class CreatableTopic(NamedTuple):
    """A topic as first use creates it (a NamedTuple: a dataclass costs ≈1 ms to create at
    import, on row 7's path through the first Metadata)."""

    partitions: int
    replication_factor: int
    configs: dict[str, str]


def creatable_topic(config: BrokerConfig, name: str) -> CreatableTopic:
    """What topic `name` is made of when first use creates it (Kafka's creatableTopic)."""
    if name == OFFSETS_TOPIC:
        return CreatableTopic(
            config.get_int("offsets.topic.num.partitions"),
            _internal_factor(config, "offsets.topic.replication.factor"),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.get_int("offsets.topic.segment.bytes")),
                "compression.type": "producer",
            },
        )
    if name == TXN_TOPIC:
        return CreatableTopic(
            config.get_int("transaction.state.log.num.partitions"),
            _internal_factor(config, "transaction.state.log.replication.factor"),
            {
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "unclean.leader.election.enable": "false",
                "min.insync.replicas": str(config.get_int("transaction.state.log.min.isr")),
                "segment.bytes": str(config.get_int("transaction.state.log.segment.bytes")),
            },
        )
    return CreatableTopic(
        config.get_int("num.partitions"), config.get_int("default.replication.factor"), {}
    )


def _internal_factor(config: BrokerConfig, key: str) -> int:
    return config.get_int(key) if config.cluster_mode else 1


async def create(broker: Broker, name: str) -> None:
    """Create topic `name` as first use creates it (see the module doc). Raises KafkaError: why
    it cannot be, TOPIC_ALREADY_EXISTS when a cluster has it already, UNKNOWN_SERVER_ERROR when
    the embedded broker could not write it to `topics.json` (there is no topic)."""
    if broker.cluster is not None:
        topic = creatable_topic(broker.config, name)
        await broker.cluster.create_topic(
            name, topic.partitions, topic.replication_factor, topic.configs
        )
        return
    await _make(broker, name)


async def _make(broker: Broker, name: str) -> None:
    """Embedded: register topic `name` (an internal one unless it is) and, once `topics.json`
    holds it (as Kafka makes a topic once ZooKeeper holds it), make the logs its partitions
    miss (off the loop, `Broker.create_logs`; an internal topic's coordinator then loads them).
    KafkaError UNKNOWN_SERVER_ERROR if the registry's write failed (there is no topic),
    KAFKA_STORAGE_ERROR if a log cannot be made (the others are served, but none of an internal
    topic: its next use tries again)."""
    record = broker.topics.get(name) if name in INTERNAL_TOPICS else None
    if record is None:
        topic = creatable_topic(broker.config, name)
        record = broker.register_topic(
            name, topic.partitions, topic.replication_factor, topic.configs
        )
        failed = await broker.create_when_written([record])
    else:
        failed = await broker.create_logs([record])
    if failed:
        raise failed[name]


def internal_partition_served(broker: Broker, name: str, index: int) -> bool:
    """Embedded: whether partition `index` of internal topic `name` is served (its log exists;
    its coordinator loads it) and the topic saved in `topics.json`. If not, the topic's making
    on first use starts in the background (unless it runs): FindCoordinator answers
    COORDINATOR_NOT_AVAILABLE meanwhile, as Kafka's does until the partition has a leader, and
    the clients ask again. A making that fails (a full disk) is logged; the next use tries
    again."""
    if name in broker.making_internal:
        return False
    if broker.partition(name, index) is not None:
        return True
    broker.making_internal.add(name)
    broker.start_soon(partial(_make_in_background, broker, name))
    return False


async def _make_in_background(broker: Broker, name: str) -> None:
    try:
        await _make(broker, name)
    except KafkaError as e:
        log.error("cannot create %s on its first use (its next use tries again): %s", name, e)
    finally:
        broker.making_internal.discard(name)
