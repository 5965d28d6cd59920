"""Fuzz a live broker: structurally valid, semantically arbitrary requests of every API and
version it handles, each answered or refused, never a bug.

One broker serves the module on its own thread (`wirebroker.embed.run_broker`), so its log
records are in this process the moment they are made. It holds topics with records, a group
with committed offsets, a group with a member, an idempotent producer and a transaction under
way (`_known`); hypothesis builds each request from the generated class's FIELDS with values
biased toward those (`tests.wirebroker.fuzz_values`), record batches valid and broken among
them, sends it with our codec over TCP on a new connection and checks:

- the broker answers it (the correlation id matches, the answer decodes at that version), or
  closes that connection with a deliberate warning (a request it refuses to parse, an acks=0
  produce that failed), never after "an unexpected error";
- it logs no traceback, nothing at ERROR, and no handler's EncodeError (a bug the dispatcher
  answers as a refusal);
- a fresh connection still gets ApiVersions and Metadata answered (the module's topics and
  group are made again if the fuzz deleted them).

Every API key and version the broker handles is fuzzed, the inter-broker ones (LeaderAndIsr,
UpdateMetadata, StopReplica, ...) too: a standalone broker must refuse them. Each bug the fuzz
found has a deterministic regression test at the end of the module.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from protocol.messages import APIS
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.produce import ProduceRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.sync_group import SyncGroupRequest
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from protocol.schema import Message
from tests.wirebroker.fuzz_harness import Fuzzed, Records, fuzz_versions, metadata_of, recording
from tests.wirebroker.fuzz_values import Known, scalars
from tests.wirebroker.helpers import (
    RawClient,
    add_partitions_request,
    create_topic,
    init_producer_id,
    make_coordinator_topics,
    offset_commit_request,
    produce_request,
    wait_until,
)
from wirebroker.dispatch import VERSIONS
from wirebroker.embed import run_broker

pytestmark = pytest.mark.integration

BROKER_PROPERTIES = {
    # a JoinGroup waits for the group's other members at most this long
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "100",
    # the ACL APIs go past SECURITY_DISABLED; what they add never denies the fuzz's requests
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS",
    # offsets past their expiry go within half a second
    "offsets.retention.check.interval.ms": "500",
}
TOPICS = {"fuzz-a": 3, "fuzz-b": 1}
GROUP = "fuzz-group"
#: A group with a member (session 30 min, rebalances of 200 ms) from the start of the fuzz.
LIVE_GROUP = "fuzz-live"
TRANSACTIONAL_ID = "fuzz-txn"
#: Examples per API key: about 50 s for the module's 58 keys on a two-core machine; more for a
#: longer campaign (WIREBROKER_FUZZ_EXAMPLES=5000).
EXAMPLES = int(os.environ.get("WIREBROKER_FUZZ_EXAMPLES", "250"))


class Standalone(Fuzzed):
    """The module's broker and what the fuzz knows of it."""

    def __init__(self, bootstrap: str, records: Records, known: Known) -> None:
        super().__init__(bootstrap, records, scalars(known), list(TOPICS))
        self.known = known

    def shape(self, cls: type[Message], requests: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return requests.map(_validated_only) if cls is AlterClientQuotasRequest else requests

    def restore(self, body: Message, metadata: MetadataResponse) -> None:
        """The module's topics made again if the fuzz deleted them, its group's offsets
        committed again if it deleted groups."""
        assert metadata.brokers
        for t in metadata.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and t.name in TOPICS:
                made = partial(_created, self.bootstrap, t.name)
                wait_until(made, what=f"{t.name} made again")
        if body.API_KEY == DeleteGroupsRequest.API_KEY:
            _commit(self.bootstrap)  # the group with offsets, again


def _validated_only(request: AlterClientQuotasRequest) -> AlterClientQuotasRequest:
    """Quotas checked, never stored: an ip's connection_creation_rate, a user's
    request_percentage would throttle the fuzz's own connections for the rest of the module
    (storing them is tests/wirebroker/test_quotas.py's)."""
    request.validate_only = True
    return request


def _created(bootstrap: str, name: str) -> bool:
    try:
        create_topic(bootstrap, name, TOPICS[name])
    except AssertionError:  # still being deleted
        return False
    return True


def _known(bootstrap: str, log_dir: Path) -> Known:
    """Make the module's topics, group and producers; what they are."""
    for name, partitions in TOPICS.items():
        create_topic(bootstrap, name, partitions)
    make_coordinator_topics(bootstrap)
    records = [SimpleRecord(b"k", b"v", (), 1_700_000_000_000)] * 3
    idempotent = init_producer_id(bootstrap)
    transactional = init_producer_id(bootstrap, transactional_id=TRANSACTIONAL_ID)
    with RawClient(bootstrap) as c:
        for partition in range(TOPICS["fuzz-a"]):
            answer = c.request(produce_request("fuzz-a", partition, records), 9)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        _commit(bootstrap)
        pid, epoch = transactional.producer_id, transactional.producer_epoch
        added = c.request(add_partitions_request(TRANSACTIONAL_ID, pid, epoch, {"fuzz-a": [1]}), 3)
        assert (
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        )
        metadata = c.request(metadata_of(list(TOPICS)), 12)
        member_id, generation = _join(c)
    return Known(
        topics=dict(TOPICS),
        topic_ids=[t.topic_id for t in metadata.topics],
        groups=[GROUP, LIVE_GROUP],
        transactional_ids=[TRANSACTIONAL_ID],
        producers=[
            (idempotent.producer_id, idempotent.producer_epoch),
            (transactional.producer_id, transactional.producer_epoch),
        ],
        node_id=metadata.brokers[0].node_id,
        log_dir=str(log_dir),
        members=[member_id],
        generations=[generation],
    )


def _commit(bootstrap: str) -> None:
    """Commit offsets of `GROUP` (which the fuzz may have deleted)."""
    with RawClient(bootstrap) as c:
        committed = c.request(offset_commit_request(GROUP, "fuzz-a", {0: 1, 1: 2}), 8)
    assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE


def _join(c: RawClient) -> tuple[str, int]:
    """Join `LIVE_GROUP` as its leader and sync; its member id and generation."""
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
    join = JoinGroupRequest(
        group_id=LIVE_GROUP,
        session_timeout_ms=1_800_000,
        rebalance_timeout_ms=200,
        member_id="",
        protocol_type="consumer",
        protocols=[protocol],
    )
    required = c.request(join, 5)
    assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED
    join.member_id = required.member_id
    joined = c.request(join, 5)
    assert joined.error_code == ErrorCode.NONE
    sync = SyncGroupRequest(
        group_id=LIVE_GROUP, generation_id=joined.generation_id, member_id=joined.member_id
    )
    assert c.request(sync, 3).error_code == ErrorCode.NONE
    return joined.member_id, joined.generation_id


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    log_dir = tmp_path_factory.mktemp("fuzzed")
    with (
        recording() as records,
        run_broker({**BROKER_PROPERTIES, "log.dirs": str(log_dir)}) as bootstrap,
    ):
        yield Standalone(bootstrap, records, _known(bootstrap, log_dir))


@pytest.mark.timeout(120)  # shrinking a failure takes longer than the examples
@pytest.mark.parametrize("api_key", sorted(VERSIONS), ids=lambda k: APIS[k].name)
def test_every_request_is_answered_or_refused(fuzzed: Standalone, api_key: int) -> None:
    fuzz_versions(fuzzed, api_key, EXAMPLES)


# Regressions: what the fuzz found, each answered as Kafka 3.9 answers it ---------------------


def _leader_and_isr_v2() -> LeaderAndIsrRequest:
    state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(partition_index=1, leader=0)
    return LeaderAndIsrRequest(
        controller_id=0,
        controller_epoch=1,
        broker_epoch=-1,
        topic_states=[
            LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name="fuzz-a", partition_states=[state]
            )
        ],
    )


@pytest.mark.timeout(30)
@pytest.mark.parametrize("version", [2, 3, 4])
def test_a_refused_leader_and_isr_before_v5_is_answered(fuzzed: Standalone, version: int) -> None:
    # The refusal was built with v5's `topics`, which v2-v4 cannot carry: the answer failed to
    # encode and the connection closed after an unexpected error. Kafka lists each partition
    # with the error (LeaderAndIsrRequest.getErrorResponse).
    with RawClient(fuzzed.bootstrap) as c:
        answer = c.request(_leader_and_isr_v2(), version)
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert answer.error_code == refused
    assert [(p.topic_name, p.partition_index, p.error_code) for p in answer.partition_errors] == [
        ("fuzz-a", 1, refused)
    ]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_refused_stop_replica_lists_its_partitions(fuzzed: Standalone, version: int) -> None:
    # Found beside the LeaderAndIsr refusal: from v1 the refusal mirrored no partition (the
    # generic error response looks for v0's list); Kafka lists each with the error.
    request = StopReplicaRequest(controller_id=0, controller_epoch=1, broker_epoch=-1)
    if version < 3:
        request.topics = [
            StopReplicaRequest.StopReplicaTopicV1(name="fuzz-a", partition_indexes=[1])
        ]
    else:
        state = StopReplicaRequest.StopReplicaPartitionState(partition_index=1)
        request.topic_states = [
            StopReplicaRequest.StopReplicaTopicState(topic_name="fuzz-a", partition_states=[state])
        ]
    with RawClient(fuzzed.bootstrap) as c:
        answer = c.request(request, version)
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert answer.error_code == refused
    assert [(p.topic_name, p.partition_index, p.error_code) for p in answer.partition_errors] == [
        ("fuzz-a", 1, refused)
    ]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("version", [10, 11])
def test_metadata_before_v12_refuses_topics_by_id(fuzzed: Standalone, version: int) -> None:
    # A topic by id (null name) was looked up, and its null name failed to encode (v10 and v11
    # cannot carry one): the connection closed after an unexpected error. Kafka refuses ids and
    # null names before v12, each topic answered INVALID_REQUEST (a null name as "").
    by_id = MetadataRequest.MetadataRequestTopic(name=None, topic_id=uuid.uuid4())
    named_with_id = MetadataRequest.MetadataRequestTopic(
        name="fuzz-a", topic_id=fuzzed.known.topic_ids[0]
    )
    with RawClient(fuzzed.bootstrap) as c:
        for topic in (by_id, named_with_id):
            answer = c.request(MetadataRequest(topics=[topic]), version)
            (told,) = answer.topics
            assert told.error_code == ErrorCode.INVALID_REQUEST
            assert (told.name, told.topic_id) == (topic.name or "", topic.topic_id)
        # v12 looks an id up
        answer = c.request(MetadataRequest(topics=[by_id]), 12)
    assert [(t.error_code, t.name) for t in answer.topics] == [(ErrorCode.UNKNOWN_TOPIC_ID, None)]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("producer_byte_rate", math.inf, ErrorCode.INVALID_REQUEST),
        ("producer_byte_rate", -math.inf, ErrorCode.INVALID_REQUEST),
        ("producer_byte_rate", 1e300, ErrorCode.INVALID_REQUEST),  # beyond a long
        ("producer_byte_rate", 2.0**63, ErrorCode.NONE),  # Long.MAX_VALUE as a double
        ("producer_byte_rate", math.nan, ErrorCode.NONE),  # Scala's NaN.toLong: 0
        ("request_percentage", math.inf, ErrorCode.NONE),  # a double quota
    ],
)
def test_a_quota_beyond_its_type_is_refused(
    fuzzed: Standalone, key: str, value: float, code: ErrorCode
) -> None:
    # An infinite long quota raised OverflowError (a NaN ValueError) in the handler, answered
    # UNKNOWN_SERVER_ERROR with a traceback; a finite one beyond a long was taken whole. Kafka's
    # ZkAdminManager converts with Scala's saturating Double.toLong and refuses what moved.
    entry = AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntityData(entity_type="user", entity_name="fuzz")],
        ops=[AlterClientQuotasRequest.OpData(key=key, value=value, remove=False)],
    )
    request = AlterClientQuotasRequest(entries=[entry], validate_only=True)
    with RawClient(fuzzed.bootstrap) as c:
        (answer,) = c.request(request, 1).entries
    assert answer.error_code == code, answer.error_message


@pytest.mark.timeout(30)
@pytest.mark.parametrize("retention_ms", [2**63 - 1, -5])
def test_a_commit_whose_expiry_is_past_is_taken(fuzzed: Standalone, retention_ms: int) -> None:
    # OffsetCommit v2-v4's retention plus now overflowed an int64: the OffsetCommitValue failed
    # to encode and the handler's EncodeError was answered as a refusal; any negative retention
    # was taken as none (-1, the broker's). Kafka's Long sum wraps and only -1 means none: either
    # expiry is in the past, and the offset goes at the next expiry check.
    group = f"fuzz-retention-{retention_ms}"
    request = offset_commit_request(group, "fuzz-a", {0: 7}, retention_time_ms=retention_ms)
    fetch = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="fuzz-a", partition_indexes=[0])],
    )
    with RawClient(fuzzed.bootstrap) as c:
        answer = c.request(request, 2)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
        wait_until(
            lambda: c.request(fetch, 1).topics[0].partitions[0].committed_offset == -1,
            what="the offset expired",
        )


def _two_producers(acks: int) -> ProduceRequest:
    """Transactional batches of two producers in one request (Kafka: INVALID_PRODUCER_ID_MAPPING
    for the whole request)."""
    return ProduceRequest(
        transactional_id=TRANSACTIONAL_ID,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="fuzz-a",
                partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=partition,
                        records=build_record_batch(
                            [SimpleRecord(b"k", b"v", (), 1_700_000_000_000)],
                            producer_id=producer_id,
                            producer_epoch=0,
                            base_sequence=0,
                            is_transactional=True,
                        ),
                    )
                    for partition, producer_id in ((0, 1000), (1, 1001))
                ],
            )
        ],
    )


@pytest.mark.timeout(30)
def test_an_acks_0_produce_refused_whole_closes_the_connection(fuzzed: Standalone) -> None:
    # It was answered with a Produce response, which an acks=0 producer does not read: it took
    # it for the answer to its next request. Kafka's ProduceRequest.getErrorResponse is null
    # for acks=0: the connection is closed, as for a partition's failure.
    with RawClient(fuzzed.bootstrap) as c:
        answer = c.request(_two_producers(acks=1), 3)
    codes = [p.error_code for t in answer.responses for p in t.partition_responses]
    assert codes == [ErrorCode.INVALID_PRODUCER_ID_MAPPING] * 2
    since = len(fuzzed.records.records)
    with RawClient(fuzzed.bootstrap) as c:
        c.send(_two_producers(acks=0), 3)
        c.send(ApiVersionsRequest(), 0)
        with pytest.raises(ConnectionError):
            c.receive_frame()
    assert fuzzed.records.closed_deliberately(since)


@pytest.mark.timeout(30)
def test_a_log_dir_path_with_a_nul_is_not_found(fuzzed: Standalone) -> None:
    # Resolving the path raised ValueError (embedded null byte) in the handler, answered
    # UNKNOWN_SERVER_ERROR with a traceback. Kafka compares it with its log dirs: not one.
    move = AlterReplicaLogDirsRequest.AlterReplicaLogDir(
        path=f"{fuzzed.known.log_dir}\0",
        topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name="fuzz-a", partitions=[0])],
    )
    with RawClient(fuzzed.bootstrap) as c:
        answer = c.request(AlterReplicaLogDirsRequest(dirs=[move]), 2)
    assert [p.error_code for t in answer.results for p in t.partitions] == [
        ErrorCode.LOG_DIR_NOT_FOUND
    ]
