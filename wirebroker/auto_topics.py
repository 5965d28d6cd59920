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
topic exists at once; an internal topic is made through its coordinator (`ensure_topic`), which
serves its partitions from then on.

Differs from Kafka: the embedded broker gives its internal topics one replica whatever their
replication factor key says (it is the only broker there is).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from wirebroker.topics import OFFSETS_TOPIC, TXN_TOPIC

if TYPE_CHECKING:
    from wirebroker.broker import Broker
    from wirebroker.config import BrokerConfig


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
    the embedded broker could not write it to `topics.json` (it exists nonetheless)."""
    if broker.cluster is not None:
        topic = creatable_topic(broker.config, name)
        await broker.cluster.create_topic(
            name, topic.partitions, topic.replication_factor, topic.configs
        )
        return
    if name == OFFSETS_TOPIC:
        broker.groups.ensure_topic()
    elif name == TXN_TOPIC:
        broker.transactions.state.ensure_topic()
    else:
        topic = creatable_topic(broker.config, name)
        record = broker.register_topic(
            name, topic.partitions, topic.replication_factor, topic.configs
        )
        failed = await broker.create_logs([record])
        if failed:
            raise failed[name]
    # Answered once `topics.json` holds the topic, as Kafka answers once ZooKeeper does.
    await broker.topics.written()
