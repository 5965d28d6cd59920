"""Admin operations: topics, configs, offsets and DeleteRecords, with each admin client.

The Java side runs kafka-topics, kafka-configs, kafka-get-offsets and kafka-delete-records
by main class; their text is normalised (topic ids and node ids replaced) and compared.
"""

from __future__ import annotations

import json
import re
import tempfile
from typing import Any

import pytest

from compat.clients import (
    CONFIG_COMMAND,
    DELETE_RECORDS,
    GET_OFFSETS,
    TOPIC_COMMAND,
    Rec,
    java,
    produce,
)
from compat.raw import create_topic

CONFIGS = {"retention.ms": "123456789", "cleanup.policy": "compact"}


def _norm(text: str) -> list[str]:
    text = re.sub(r"TopicId: \S+", "TopicId: *", text)
    text = re.sub(r"(Leader|Replicas|Isr): \d+", r"\1: N", text)
    return [line.strip() for line in text.splitlines() if line.strip()]


def _value(entry: Any) -> Any:
    """A config's value from kafka-python's describe_configs (a dict per key, or a value)."""
    if isinstance(entry, dict):
        return next((entry[k] for k in ("value", "config_value") if k in entry), entry)
    return entry


def _admin_python(client: str, bootstrap: str, topic: str) -> Any:
    """Create (3 partitions, configs), describe configs, alter one, add partitions, delete."""
    if client == "kafka-python":
        from kafka.admin import (
            ConfigResource,
            ConfigResourceType,
            KafkaAdminClient,
            NewPartitions,
            NewTopic,
        )

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(topic, 3, 1, topic_configs=CONFIGS)])
            res = ConfigResource(ConfigResourceType.TOPIC, topic)

            def configs() -> dict[str, str]:
                found = admin.describe_configs([res], config_filter="all")
                entries = next(iter(found.values()))[topic]
                keep = {*CONFIGS, "segment.bytes"}
                return {k: _value(v) for k, v in entries.items() if k in keep}

            before = configs()
            admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "1000"})]
            )
            after = configs()
            admin.create_partitions({topic: NewPartitions(4)})
            parts = len(admin.describe_topics([topic])[0]["partitions"])
            admin.delete_topics([topic])
            return before, after, parts
        finally:
            admin.close()
    if client == "confluent-kafka":
        from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 3, 1, config=CONFIGS)])[topic].result(15)
        res = ConfigResource("topic", topic)

        def configs() -> dict[str, str]:
            entries = admin.describe_configs([res])[res].result(15)
            return {k: v.value for k, v in entries.items() if k in CONFIGS or k == "segment.bytes"}

        before = configs()
        res2 = ConfigResource("topic", topic, set_config={"retention.ms": "1000"})
        admin.alter_configs([res2])[res2].result(15)
        after = configs()
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(15)
        meta = admin.list_topics(topic, timeout=10)
        parts = len(meta.topics[topic].partitions)
        admin.delete_topics([topic])[topic].result(15)
        return before, after, parts
    raise ValueError(client)


# The legacy AlterConfigs request is what this compares (IncrementalAlterConfigs has its own
# scenarios), so confluent-kafka's deprecation of `alter_configs` is expected.
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_topics_and_configs(client: str, observe: Any) -> None:
    observe(lambda t: _admin_python(client, t.bootstrap, f"admin-{client}"))


@pytest.mark.parametrize("client", ["java"])
def test_topics_and_configs_tools(client: str, observe: Any) -> None:
    """kafka-topics --create/--describe, kafka-configs --alter/--describe."""

    def run(t: Any) -> Any:
        topic = "admin-java"
        bs = ["--bootstrap-server", t.bootstrap]
        created = java(
            TOPIC_COMMAND,
            *bs,
            "--create",
            "--topic",
            topic,
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=123456789",
        )
        described = java(TOPIC_COMMAND, *bs, "--describe", "--topic", topic)
        alter = ["--entity-type", "topics", "--entity-name", topic]
        altered = java(CONFIG_COMMAND, *bs, *alter, "--alter", "--add-config", "retention.ms=1000")
        configs = java(CONFIG_COMMAND, *bs, *alter, "--describe")
        return _norm(created), _norm(described), _norm(altered), _norm(configs)

    observe(run)


@pytest.mark.parametrize("client", ["java"])
def test_get_offsets_and_delete_records(client: str, observe: Any) -> None:
    """kafka-delete-records up to offset 3, then kafka-get-offsets earliest/latest."""

    def run(t: Any) -> Any:
        topic = "delete-records-java"
        create_topic(t.bootstrap, topic)
        recs = [
            Rec(b"k", f"v{i}".encode(), (("h", b"x"),), 1_700_000_000_000 + i) for i in range(6)
        ]
        produce("kafka-python", t.bootstrap, topic, recs)
        spec = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 3}]}
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(spec, f)
            f.flush()
            deleted = java(
                DELETE_RECORDS, "--bootstrap-server", t.bootstrap, "--offset-json-file", f.name
            )
        offsets = java(
            GET_OFFSETS,
            "--bootstrap-server",
            t.bootstrap,
            "--topic-partitions",
            f"{topic}:0",
            "--time",
            "-2",
        ) + java(GET_OFFSETS, "--bootstrap-server", t.bootstrap, "--topic", topic, "--time", "-1")
        return _norm(deleted), _norm(offsets)

    observe(run)
