"""Admin APIs through three clients: topics, partitions, configs, records, the cluster.

kafka-python's KafkaAdminClient, confluent-kafka's AdminClient and aiokafka's
AIOKafkaAdminClient create and delete topics, add partitions, describe and alter configs (with
Kafka's config sources), delete records and describe the cluster and log dirs; each failure
comes back with Kafka's error code. The broker sets two topic-config synonyms, so config
sources can be told apart: `log.retention.ms` (STATIC_BROKER_CONFIG for retention.ms; Kafka
reports a `log.retention.hours` as no source of it) and `num.partitions` (the size of topics
created without one).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import kafka.errors
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AIONewPartitions
from aiokafka.admin import NewTopic as AIONewTopic
from aiokafka.admin.config_resource import ConfigResource as AIOConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AIOConfigResourceType
from aiokafka.admin.records_to_delete import RecordsToDelete
from aiokafka.structs import TopicPartition as AIOTopicPartition
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType as KConfigResourceType
from kafka.admin import NewPartitions as KNewPartitions
from kafka.admin import NewTopic as KNewTopic

from protocol.errors import ErrorCode
from protocol.messages.metadata import MetadataRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    BASE_TS,
    RawClient,
    end_offset,
    list_offset,
    produce_request,
)

pytestmark = pytest.mark.integration

BROKER_PROPERTIES = {"log.retention.ms": str(100 * 3_600_000), "num.partitions": "2"}
BROKER_RETENTION_MS = str(100 * 3_600_000)
TIMEOUT = 15.0


def topics_in_metadata(broker: BrokerProcess) -> dict[str, int]:
    """Every topic with its partition count, from a raw Metadata request."""
    with RawClient(broker.bootstrap) as client:
        response = client.request(MetadataRequest(topics=None), 12)
    return {t.name: len(t.partitions) for t in response.topics}


def produce(broker: BrokerProcess, topic: str, partition: int, count: int) -> int:
    """Append `count` records; returns the first offset."""
    records = [SimpleRecord(b"k%d" % i, b"v%d" % i, timestamp=BASE_TS + i) for i in range(count)]
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request(topic, partition, records), 9)
    (p,) = response.responses[0].partition_responses
    assert p.error_code == ErrorCode.NONE
    return int(p.base_offset)


# kafka-python ----------------------------------------------------------------------------------


def test_kafka_python_admin(broker: BrokerProcess, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        created = admin.create_topics(
            [KNewTopic(topic, 3, 1, topic_configs={"retention.ms": "60000"})]
        )
        (result,) = created["topics"]
        assert (result["name"], result["error_code"], result["num_partitions"]) == (topic, 0, 3)
        assert result["configs"]["retention.ms"]["value"] == "60000"
        assert topic in admin.list_topics()
        (described,) = admin.describe_topics([topic])
        assert [
            (p["partition_index"], p["leader_id"], p["replica_nodes"])
            for p in described["partitions"]
        ] == [
            (0, 0, [0]),
            (1, 0, [0]),
            (2, 0, [0]),
        ]

        failures = {
            KNewTopic(topic, 3, 1): kafka.errors.TopicAlreadyExistsError,
            KNewTopic(topic + "-zero", 0, 1): kafka.errors.InvalidPartitionsError,
            KNewTopic(topic + "-rf", 1, 3): kafka.errors.InvalidReplicationFactorError,
            KNewTopic("bad name", 1, 1): kafka.errors.InvalidTopicError,
            KNewTopic(
                topic + "-cfg", 1, 1, topic_configs={"no.such": "1"}
            ): kafka.errors.InvalidConfigurationError,
        }
        for new_topic, error in failures.items():
            with pytest.raises(error):
                admin.create_topics([new_topic])
        admin.create_topics([KNewTopic(topic + "-validate", 1, 1)], validate_only=True)
        tried = {t.name for t in failures} | {topic + "-validate"}
        assert set(topics_in_metadata(broker)) & tried == {topic}

        # Partitions: only more of them.
        admin.create_partitions({topic: KNewPartitions(5)})
        assert topics_in_metadata(broker)[topic] == 5
        assert produce(broker, topic, 4, 3) == 0
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            admin.create_partitions({topic: KNewPartitions(4)})

        # Configs: the default filter keeps what was set on the topic (Kafka's sources).
        resource = KConfigResource(KConfigResourceType.TOPIC, topic)
        configs = admin.describe_configs([resource])["topic"][topic]
        assert {k: (v["value"], v["config_source"]) for k, v in configs.items()} == {
            "retention.ms": ("60000", "DYNAMIC_TOPIC_CONFIG")
        }
        everything = admin.describe_configs([resource], config_filter="all")["topic"][topic]
        assert everything["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert everything["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
        # kafka-python keeps the other overrides when it alters (it sends them along)...
        altered = admin.alter_configs(
            [
                KConfigResource(
                    KConfigResourceType.TOPIC, topic, configs={"cleanup.policy": "compact"}
                )
            ],
            incremental=False,
        )
        assert altered == {"topic": {topic: "OK"}}
        everything = admin.describe_configs([resource], config_filter="all")["topic"][topic]
        assert (
            everything["cleanup.policy"]["value"],
            everything["cleanup.policy"]["config_source"],
        ) == (
            "compact",
            "DYNAMIC_TOPIC_CONFIG",
        )
        assert everything["retention.ms"]["value"] == "60000"
        # ...and a reset (IncrementalAlterConfigs DELETE) falls back to the broker's setting.
        admin.reset_configs(
            [KConfigResource(KConfigResourceType.TOPIC, topic, configs={"retention.ms": None})]
        )
        everything = admin.describe_configs([resource], config_filter="all")["topic"][topic]
        assert (
            everything["retention.ms"]["value"],
            everything["retention.ms"]["config_source"],
        ) == (
            BROKER_RETENTION_MS,
            "STATIC_BROKER_CONFIG",
        )

        # Records and log dirs.
        deleted = admin.delete_records({KTopicPartition(topic, 4): 2})
        assert deleted[KTopicPartition(topic, 4)]["low_watermark"] == 2
        assert list_offset(broker.bootstrap, topic, 4, -2) == (ErrorCode.NONE, 2)
        (dirs,) = admin.describe_log_dirs()
        (log_dir,) = dirs["log_dirs"]
        assert log_dir["log_dir"] == str(broker.data_dir.resolve())
        sizes = {
            p["partition_index"]: p["partition_size"]
            for t in log_dir["topics"]
            if t["name"] == topic
            for p in t["partitions"]
        }
        assert sorted(sizes) == [0, 1, 2, 3, 4]
        assert sizes[4] > 0 and sizes[0] == 0

        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 0
        assert cluster["brokers"] == [
            {"broker_id": 0, "host": "127.0.0.1", "port": broker.port, "rack": None}
        ]

        # Deleting removes the data: the same name starts again at offset 0.
        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
        with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
            admin.delete_topics([topic])
        admin.create_topics([KNewTopic(topic, 5, 1)])
        assert end_offset(broker.bootstrap, topic, 4) == 0
        admin.delete_topics([topic])
    finally:
        admin.close()


# confluent-kafka -------------------------------------------------------------------------------


def outcomes(futures: dict[Any, concurrent.futures.Future[Any]]) -> dict[Any, Any]:
    """Each future's result, or the KafkaError code it failed with."""
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(TIMEOUT)
        except KafkaException as e:
            out[key] = e.args[0].code()
    return out


def test_confluent_admin(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = outcomes(
        admin.create_topics(
            [
                NewTopic(topic, 3, 1, config={"retention.ms": "60000"}),
                NewTopic(topic + "-zero", 0, 1),
                NewTopic(topic + "-rf", 1, 3),
                NewTopic("bad name", 1, 1),
                NewTopic(topic + "-cfg", 1, 1, config={"retention.ms": "soon"}),
            ]
        )
    )
    assert created == {
        topic: None,
        topic + "-zero": KafkaError.INVALID_PARTITIONS,
        topic + "-rf": KafkaError.INVALID_REPLICATION_FACTOR,
        "bad name": KafkaError.TOPIC_EXCEPTION,
        topic + "-cfg": KafkaError.INVALID_CONFIG,
    }
    again = outcomes(
        admin.create_topics(
            [NewTopic(topic, 3, 1), NewTopic(topic + "-v", 2, 1)], validate_only=True
        )
    )
    assert again == {topic: KafkaError.TOPIC_ALREADY_EXISTS, topic + "-v": None}
    assert sorted(admin.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions) == [0, 1, 2]
    assert topic + "-v" not in topics_in_metadata(broker)

    more = outcomes(
        admin.create_partitions([NewPartitions(topic, 4), NewPartitions(topic + "-missing", 2)])
    )
    assert more == {topic: None, topic + "-missing": KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert outcomes(admin.create_partitions([NewPartitions(topic, 3)])) == {
        topic: KafkaError.INVALID_PARTITIONS
    }
    assert topics_in_metadata(broker)[topic] == 4

    # Config sources: the topic's override, the broker's synonym, Kafka's default.
    resource = ConfigResource(ResourceType.TOPIC, topic)

    def describe() -> dict[str, tuple[str | None, int]]:
        (future,) = admin.describe_configs([resource]).values()
        return {k: (v.value, v.source) for k, v in future.result(TIMEOUT).items()}

    configs = describe()
    assert configs["retention.ms"] == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG.value)
    assert configs["max.message.bytes"] == ("1048588", ConfigSource.DEFAULT_CONFIG.value)

    incremental = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry(
                "max.message.bytes", "2000000", incremental_operation=AlterConfigOpType.SET
            ),
        ],
    )
    assert outcomes(admin.incremental_alter_configs([incremental])) == {incremental: None}
    configs = describe()
    assert configs["cleanup.policy"] == ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["retention.ms"] == (BROKER_RETENTION_MS, ConfigSource.STATIC_BROKER_CONFIG.value)
    assert configs["max.message.bytes"] == ("2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    subtract = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            )
        ],
    )
    assert outcomes(admin.incremental_alter_configs([subtract])) == {subtract: None}
    assert describe()["cleanup.policy"] == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    assert outcomes(admin.incremental_alter_configs([bad])) == {bad: KafkaError.INVALID_CONFIG}

    # Broker configs: listed with their sources.
    (broker_future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    broker_configs = broker_future.result(TIMEOUT)
    assert (broker_configs["num.partitions"].value, broker_configs["num.partitions"].source) == (
        "2",
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    assert broker_configs["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    # Offsets and records.
    assert produce(broker, topic, 0, 5) == 0
    offsets = outcomes(
        admin.list_offsets(
            {
                TopicPartition(topic, 0): OffsetSpec.earliest(),
                TopicPartition(topic, 1): OffsetSpec.latest(),
                TopicPartition(topic, 2): OffsetSpec.for_timestamp(BASE_TS),
            }
        )
    )
    assert {tp.partition: info.offset for tp, info in offsets.items()} == {0: 0, 1: 0, 2: -1}
    (latest,) = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.max_timestamp()}).values()
    assert (latest.result(TIMEOUT).offset, latest.result(TIMEOUT).timestamp) == (4, BASE_TS + 4)
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 3)]).values()
    assert deleted.result(TIMEOUT).low_watermark == 3

    cluster = admin.describe_cluster().result(TIMEOUT)
    assert cluster.controller.id == 0
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1", broker.port)]
    assert cluster.cluster_id

    assert outcomes(admin.delete_topics([topic, topic + "-missing"])) == {
        topic: None,
        topic + "-missing": KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    assert topic not in topics_in_metadata(broker)


def test_confluent_list_all_topics(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert outcomes(admin.create_topics([NewTopic(topic, 1, 1)])) == {topic: None}
    assert topic in admin.list_topics(timeout=5).topics


# aiokafka ------------------------------------------------------------------------------------------


def test_aiokafka_admin(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            response = await admin.create_topics(
                [AIONewTopic(topic, 2, 1, topic_configs={"segment.bytes": "1048576"})]
            )
            assert [(t[0], t[1]) for t in response.topic_errors] == [(topic, 0)]
            response = await admin.create_topics([AIONewTopic(topic, 2, 1)])
            assert [(t[0], t[1]) for t in response.topic_errors] == [
                (topic, ErrorCode.TOPIC_ALREADY_EXISTS)
            ]
            assert topic in await admin.list_topics()

            response = await admin.create_partitions({topic: AIONewPartitions(3)})
            assert [(t[0], t[1]) for t in response.topic_errors] == [(topic, 0)]
            (described,) = await admin.describe_topics([topic])
            assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]

            (configs,) = await admin.describe_configs(
                [AIOConfigResource(AIOConfigResourceType.TOPIC, topic)]
            )
            (resource,) = configs.resources
            entries = {entry[0]: entry for entry in resource[4]}
            assert entries["segment.bytes"][1] == "1048576"
            (altered,) = await admin.alter_configs(
                [
                    AIOConfigResource(
                        AIOConfigResourceType.TOPIC, topic, configs={"retention.ms": "5000"}
                    )
                ]
            )
            assert [r[0] for r in altered.resources] == [0]
            (configs,) = await admin.describe_configs(
                [AIOConfigResource(AIOConfigResourceType.TOPIC, topic)]
            )
            entries = {entry[0]: entry for entry in configs.resources[0][4]}
            assert entries["retention.ms"][1] == "5000"
            assert entries["segment.bytes"][1] == "1073741824"  # replaced: back to the default

            assert produce(broker, topic, 1, 4) == 0
            deleted = await admin.delete_records({AIOTopicPartition(topic, 1): RecordsToDelete(3)})
            assert deleted == {AIOTopicPartition(topic, 1): 3}

            cluster = await admin.describe_cluster()
            assert cluster["controller_id"] == 0
            assert [(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
                (0, "127.0.0.1", broker.port)
            ]

            response = await admin.delete_topics([topic])
            assert [(t[0], t[1]) for t in response.topic_error_codes] == [(topic, 0)]
            assert topic not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(main())
