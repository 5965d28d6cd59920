"""Differential layer: identical raw requests to Kafka and to wirebroker, responses compared.

Each case is a sequence of requests sent on one connection, built with our codec (the same
bytes to both targets). Responses are decoded and turned into plain data, then what
legitimately differs is normalised away: throttle time, cluster id, node ids, hosts and
ports, topic ids, broker-assigned timestamps, and free-text error messages (their presence
is kept). Whatever still differs is a finding (``compat/FINDINGS.md``): fixed, or marked
``xfail(strict=True)`` here with the finding's number.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from compat.raw import BROKER_CONFIGS
from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_records import DeleteRecordsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.elect_leaders import ElectLeadersRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.update_features import UpdateFeaturesRequest
from protocol.record_batch import SimpleRecord
from protocol.records import iter_batches, iter_records
from protocol.schema import Message, Struct
from tests.wirebroker.helpers import RawClient, offset_commit_request, produce_request

#: Fields whose values legitimately differ between two clusters.
VOLATILE = {
    "throttle_time_ms",
    "cluster_id",
    "controller_id",
    "node_id",
    "leader_id",
    "replica_nodes",
    "isr_nodes",
    "offline_replicas",
    "host",
    "port",
    "rack",
    "topic_id",
    "log_append_time_ms",
    "unknown_tagged_fields",
}
TS = 1_700_000_000_000
#: Topic configs compared in CreateTopics/DescribeConfigs answers; Kafka 3.9 has more
#: (tiered storage, per-codec levels, message.format.version ...): finding F2.
CORE_CONFIGS = {
    "cleanup.policy",
    "compression.type",
    "flush.messages",
    "max.message.bytes",
    "message.timestamp.type",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
}

Step = tuple[str, Message, int]


def plain(value: Any, version: int) -> Any:
    """A decoded message as dicts and lists, with volatile fields replaced by ``*``."""
    if isinstance(value, Struct):
        out = {}
        for f in type(value).FIELDS:
            if not f.present_in(version):
                continue
            v = getattr(value, f.name)
            if f.name in VOLATILE:
                out[f.name] = "*"
            elif f.name == "error_message":
                out[f.name] = None if v is None else "<text>"
            elif f.name == "records":
                out[f.name] = _records(v)
            elif (
                f.name in ("configs", "results")
                and isinstance(v, list)
                and v
                and hasattr(v[0], "is_sensitive")
            ):
                kept = [c for c in v if c.name in CORE_CONFIGS | BROKER_CONFIGS]
                out[f.name] = sorted(plain(kept, version), key=lambda c: c["name"])
            elif f.name == "brokers":
                out[f.name] = len(v)
            else:
                out[f.name] = plain(v, version)
        return out
    if isinstance(value, list):
        return [plain(v, version) for v in value]
    if isinstance(value, uuid.UUID):
        return "*"
    return value


def _records(data: Any) -> Any:
    if data is None:
        return None
    out = []
    for b in iter_batches(bytes(data)):
        out.append(
            (
                b.base_offset,
                b.compression,
                [(r.offset, bytes(r.key or b""), bytes(r.value or b"")) for r in iter_records(b)],
            )
        )
    return out


def _error_codes(value: Any) -> list[int]:
    if isinstance(value, dict):
        own = [value["error_code"]] if value.get("error_code") else []
        return own + [c for v in value.values() for c in _error_codes(v)]
    if isinstance(value, list):
        return [c for v in value for c in _error_codes(v)]
    return []


def run_steps(bootstrap: str, steps: list[Step]) -> list[Any]:
    """Send each step; a label starting with ``until ok`` is retried until it has no error."""
    results = []
    with RawClient(bootstrap, client_id="compat-diff") as client:
        for label, request, version in steps:
            deadline = time.monotonic() + 20
            while True:
                got = plain(client.request(request, version), version)
                if not label.startswith("until ok") or not _error_codes(got):
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            results.append((label, got))
    return results


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where two plain values differ (for readable failures and FINDINGS.md)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d
            for k in sorted(set(a) | set(b))
            for d in differences(a.get(k), b.get(k), f"{path}.{k}")
        ]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: wirebroker {a!r} != kafka {b!r}"]


# --------------------------------------------------------------------------- request builders


def create(name: str, partitions: int = 1, configs: dict[str, str] | None = None, **kw: Any) -> Any:
    return CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in (configs or {}).items()
                ],
            )
        ],
        timeout_ms=10_000,
        **kw,
    )


def update_features(
    *updates: tuple[str, int, int], v0: bool = False, validate_only: bool = False
) -> UpdateFeaturesRequest:
    """Feature updates: (name, level, upgrade type); v0 has only allow_downgrade (type 2)."""
    keys = []
    for name, level, upgrade_type in updates:
        key = UpdateFeaturesRequest.FeatureUpdateKey(feature=name, max_version_level=level)
        if v0:
            key.allow_downgrade = upgrade_type == 2
        else:
            key.upgrade_type = upgrade_type
        keys.append(key)
    return UpdateFeaturesRequest(feature_updates=keys, validate_only=validate_only)


def metadata(*names: str, create: bool = False) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=create,
    )


def produce(topic: str, partition: int = 0, n: int = 3) -> Any:
    recs = [SimpleRecord(f"k{i}".encode(), f"v{i}".encode(), (), TS + i) for i in range(n)]
    return produce_request(topic, partition, recs)


def fetch(topic: str, offset: int, partition: int = 0) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1_000_000,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=1_000_000
                    )
                ],
            )
        ],
    )


def list_offsets(topic: str, *timestamps: int) -> list[Step]:
    return [
        (
            f"list_offsets {ts}",
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)
                        ],
                    )
                ],
            ),
            7,
        )
        for ts in timestamps
    ]


def describe_configs(topic: str, *keys: str) -> DescribeConfigsRequest:
    return DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name=topic, configuration_keys=list(keys)
            )
        ]
    )


def describe_broker(name: str, *, synonyms: bool = True) -> DescribeConfigsRequest:
    return DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=4, resource_name=name, configuration_keys=sorted(BROKER_CONFIGS)
            )
        ],
        include_synonyms=synonyms,
    )


def delete_records(topic: str, offset: int) -> DeleteRecordsRequest:
    return DeleteRecordsRequest(
        topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(
                name=topic,
                partitions=[
                    DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=offset)
                ],
            )
        ],
        timeout_ms=10_000,
    )


def offset_commit(group: str, topic: str, offset: int) -> OffsetCommitRequest:
    return offset_commit_request(group, topic, {0: offset}, "m")


def offset_fetch(group: str, topic: str) -> OffsetFetchRequest:
    return OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 7])],
    )


# --------------------------------------------------------------------------- cases


def alter_replica_log_dirs(path: str, topic: str) -> AlterReplicaLogDirsRequest:
    request = AlterReplicaLogDirsRequest
    return request(
        dirs=[
            request.AlterReplicaLogDir(
                path=path, topics=[request.AlterReplicaLogDirTopic(name=topic, partitions=[0])]
            )
        ]
    )


CASES: dict[str, Callable[[], list[Step]]] = {
    "create_topics": lambda: [
        ("create", create("diff-create", 3, {"retention.ms": "1000"}), 7),
        ("create again", create("diff-create", 3), 7),
        ("validate only", create("diff-validate", 2, validate_only=True), 7),
        ("zero partitions", create("diff-zero", 0), 7),
        ("invalid config", create("diff-bad-config", 1, {"cleanup.policy": "bogus"}), 7),
        ("unknown config", create("diff-unknown-config", 1, {"no.such.config": "1"}), 7),
        ("invalid name", create("bad/name"), 7),
        ("metadata", metadata("diff-create", "diff-validate", "diff-missing"), 12),
    ],
    "produce_fetch": lambda: [
        # Kept forever: the records carry 2023 timestamps, and a time retention check landing
        # mid-scenario on either broker would move its log start (see compat/raw.py).
        ("create", create("diff-records", 2, {"retention.ms": "-1"}), 7),
        ("produce", produce("diff-records"), 9),
        ("produce unknown partition", produce("diff-records", partition=5), 9),
        ("produce unknown topic", produce("diff-no-topic"), 9),
        ("fetch 0", fetch("diff-records", 0), 12),
        ("fetch 1", fetch("diff-records", 1), 12),
        ("fetch at end", fetch("diff-records", 3), 12),
        ("fetch out of range", fetch("diff-records", 100), 12),
        ("fetch unknown partition", fetch("diff-records", 0, partition=5), 12),
        *list_offsets("diff-records", -2, -1, TS + 1, TS + 100),
    ],
    "configs_and_delete_records": lambda: [
        ("create", create("diff-configs", 1, {"retention.ms": "12345"}), 7),
        (
            "describe",
            describe_configs(
                "diff-configs",
                "retention.ms",
                "cleanup.policy",
                "flush.messages",
                "message.timestamp.type",
            ),
            4,
        ),
        ("describe unknown", describe_configs("diff-nope", "retention.ms"), 4),
        ("produce", produce("diff-configs", n=5), 9),
        ("delete records", delete_records("diff-configs", 2), 2),
        ("delete past end", delete_records("diff-configs", 99), 2),
        *list_offsets("diff-configs", -2, -1),
        ("fetch below start", fetch("diff-configs", 0), 12),
    ],
    # The answers that name no log dir (the two brokers' dirs differ).
    "alter_replica_log_dirs": lambda: [
        ("create", create("diff-log-dirs", 1), 7),
        *(
            (f"move to {path!r}", alter_replica_log_dirs(path, "diff-log-dirs"), 2)
            for path in ("/no/such/log/dir", "relative", "")
        ),
        ("unknown topic", alter_replica_log_dirs("/no/such/log/dir", "diff-never"), 1),
        ("a name too long", alter_replica_log_dirs("/no/such/log/dir", "n" * 249), 0),
    ],
    "offsets": lambda: [
        ("create", create("diff-offsets", 1), 7),
        (
            "until ok: find coordinator",
            FindCoordinatorRequest(key_type=0, coordinator_keys=["diff-g"]),
            4,
        ),
        ("commit", offset_commit("diff-g", "diff-offsets", 42), 8),
        ("fetch", offset_fetch("diff-g", "diff-offsets"), 7),
        ("fetch unknown group", offset_fetch("diff-nogroup", "diff-offsets"), 7),
    ],
    "config_synonyms": lambda: [
        ("create", create("diff-synonyms", 1, {"retention.ms": "1000"}), 7),
        (
            "describe with synonyms",
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2,
                        resource_name="diff-synonyms",
                        configuration_keys=["retention.ms", "segment.bytes"],
                    )
                ],
                include_synonyms=True,
            ),
            4,
        ),
    ],
    "auto_create": lambda: [
        # The creating request answers LEADER_NOT_AVAILABLE without partitions; they appear in
        # a later Metadata (Kafka's AutoTopicCreationManager).
        ("metadata creates", metadata("diff-auto", create=True), 12),
        ("until ok: metadata again", metadata("diff-auto"), 12),
        ("invalid name", metadata("bad/name", create=True), 12),
    ],
    "elect_leaders": lambda: [
        ("create", create("diff-elect", 2), 7),
        (
            "preferred, named",
            ElectLeadersRequest(
                election_type=0,
                topic_partitions=[
                    ElectLeadersRequest.TopicPartitions(topic="diff-elect", partitions=[0, 9])
                ],
                timeout_ms=10_000,
            ),
            2,
        ),
        (
            "preferred, all partitions",
            ElectLeadersRequest(election_type=0, topic_partitions=None, timeout_ms=10_000),
            2,
        ),
    ],
    "broker_configs": lambda: [
        ("describe broker", describe_broker("0"), 4),
        ("describe broker v1", describe_broker("0"), 1),
        ("describe broker v0", describe_broker("0", synonyms=False), 0),
        ("describe default", describe_broker(""), 4),
        ("describe another broker", describe_broker("7"), 4),
        ("describe not a broker id", describe_broker("zero"), 4),
    ],
    "update_features": lambda: [
        ("upgrade metadata.version", update_features(("metadata.version", 21, 1)), 1),
        ("upgrade to level 0", update_features(("transaction.version", 0, 1)), 1),
        ("safe downgrade to 0: a deletion", update_features(("group.version", 0, 2)), 1),
        ("unsafe downgrade to 1", update_features(("group.version", 1, 3)), 1),
        ("unknown upgrade type", update_features(("group.version", 1, 7)), 1),
        ("no name", update_features(("", 1, 1)), 1),
        ("validate only", update_features(("group.version", 1, 1), validate_only=True), 1),
        ("v0, allow downgrade to 0", update_features(("transaction.version", 0, 2), v0=True), 0),
        ("v0 upgrade", update_features(("transaction.version", 1, 1), v0=True), 0),
        (
            "several, listed in hash order",
            update_features(*[(f"feature.{i}", 1, 1) for i in range(8)], ("", 1, 1)),
            1,
        ),
    ],
    "delete_topics": lambda: [
        ("create", create("diff-delete", 1), 7),
        (
            "delete",
            DeleteTopicsRequest(topic_names=["diff-delete", "diff-never"], timeout_ms=10_000),
            5,
        ),
    ],
}

XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_responses(case: str, observe: Any, request: pytest.FixtureRequest) -> None:
    if case in XFAIL and "wirebroker" in request.node.name:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=XFAIL[case]))
    observe(lambda t: run_steps(t.bootstrap, CASES[case]()), differences)


#: APIs both sides have whose version ranges differ: finding F4.
VERSION_DIFFERENCES: dict[int, str] = {}


def test_api_versions(kafka_target: Any, wirebroker_target: Any) -> None:
    """Every API wirebroker offers, Kafka offers with the same version range (finding F3
    lists what only Kafka offers); the features (none) and their epoch are the same."""

    def answer(bootstrap: str) -> Any:
        with RawClient(bootstrap) as client:
            request = ApiVersionsRequest(client_software_name="compat", client_software_version="1")
            return client.request(request, 3)

    def versions(response: Any) -> dict[int, tuple[int, int]]:
        return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def features(response: Any) -> Any:
        epoch = response.finalized_features_epoch
        return response.supported_features, response.finalized_features, epoch

    kafka_answer, our_answer = answer(kafka_target.bootstrap), answer(wirebroker_target.bootstrap)
    assert features(our_answer) == features(kafka_answer)
    kafka, ours = versions(kafka_answer), versions(our_answer)
    assert set(ours) <= set(kafka), sorted(set(ours) - set(kafka))
    differing = {k: (ours[k], kafka[k]) for k in ours if ours[k] != kafka[k]}
    assert set(differing) == set(VERSION_DIFFERENCES), differing
