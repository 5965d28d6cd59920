"""The ACL matrix: the same ACLs and the same requests on real Kafka 3.9 (AclAuthorizer) and on
wirebroker, and the same error codes back.

Both brokers get a SASL_PLAINTEXT listener with PLAIN users (`admin`, a super user, `alice`,
`bob`) and the ACL authorizer. For every probe -- a request that needs one operation on one
resource (Fetch: READ on a topic, Produce: WRITE, OffsetCommit: READ on a group, InitProducerId:
IDEMPOTENT_WRITE on the cluster or WRITE on a transactional id, ...) -- the admin creates a set
of ACLs, alice sends the probe, and the admin deletes the ACLs again. The sets vary the principal
(alice, `User:*`, bob), the pattern (the literal name, the `*` wildcard, a matching and a
non-matching prefix), the ACL's operation (the probe's, ALL, one that implies it, another one),
ALLOW or DENY (a DENY on top of an ALLOW of everything) and, for some, the host. The answers of
both brokers are compared case by case. Further tests compare what Metadata lists, the
authorized-operations bit fields, auto-creation, DescribeAcls/DeleteAcls filters and
CreateAcls's validation.

`admin` and `User:ANONYMOUS` (Kafka's own brokers talk over PLAINTEXT) are super users.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from compat.kafka_process import kafka_cluster
from compat.test_differential import (
    delete_records,
    fetch,
    metadata,
    offset_commit,
    produce,
    update_features,
)
from protocol.errors import ErrorCode
from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from protocol.messages.create_acls import CreateAclsRequest
from protocol.messages.create_partitions import CreatePartitionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_acls import DeleteAclsRequest
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_acls import DescribeAclsRequest
from protocol.messages.describe_cluster import DescribeClusterRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from protocol.messages.describe_transactions import DescribeTransactionsRequest
from protocol.messages.elect_leaders import ElectLeadersRequest
from protocol.messages.end_txn import EndTxnRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.list_transactions import ListTransactionsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.schema import Message
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import (
    RawClient,
    add_partitions_request,
    txn_markers_request,
    txn_offset_commit_request,
)
from tests.wirebroker.secured import (
    ALL,
    ALLOW,
    ALTER,
    ALTER_CONFIGS,
    AUTHORIZER,
    CLUSTER,
    CLUSTER_ACTION,
    CREATE,
    DELETE,
    DENY,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    IDEMPOTENT_WRITE,
    LITERAL,
    PASSWORDS,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    acl,
    create_acls,
    delete_acls,
    login,
    secured_properties,
)
from tests.wirebroker.secured import (
    TRANSACTIONAL_ID as TXN,
)

pytestmark = pytest.mark.timeout(1800)

ANY_ = 1
MATCH = 2  # a filter's pattern type: every ACL whose pattern matches the name
AUTHORIZATION_ERRORS = {29, 30, 31, 53}
SUPER_USERS = "User:admin;User:ANONYMOUS"
#: Resources of the probes: an existing topic, a topic to create, groups, a transactional id.
T, NEW_T, G, DEL_G, TX = "mx", "mnew", "mg", "mdel", "mtx"
PUBLIC = "mpub"  # a topic everyone may READ: OffsetCommit's probes of a group need one
#: What everyone may use, for the transaction probes of one resource among several: a topic
#: to WRITE, a transactional id to WRITE, a group to READ.
WRITABLE, TXP, GP = "mwpub", "mtxp", "mgpub"
PUBLIC_ACLS = [
    acl(TOPIC, PUBLIC, "User:*", READ),
    acl(TOPIC, WRITABLE, "User:*", WRITE),
    acl(TXN, TXP, "User:*", WRITE),
    acl(GROUP, GP, "User:*", READ),
]
#: A producer id no transactional id has: an allowed request reaches the coordinator, which
#: answers INVALID_PRODUCER_ID_MAPPING on both brokers.
NO_PID = 999_999


@dataclass(frozen=True)
class Secured:
    name: str
    bootstrap: str  # the SASL_PLAINTEXT listener


@pytest.fixture(scope="module")
def secured_kafka() -> Iterator[Secured]:
    overrides = {"authorizer.class.name": AUTHORIZER, "super.users": SUPER_USERS}
    with kafka_cluster(sasl_users=PASSWORDS, overrides=overrides) as cluster:
        target = Secured("kafka", f"127.0.0.1:{cluster.broker.sasl_port}")
        prepare(target)
        yield target


@pytest.fixture(scope="module")
def secured_wirebroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **secured_properties(),
        "super.users": SUPER_USERS,
        "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    with serving(BrokerProcess(tmp_path_factory.mktemp("acl-matrix"), properties)) as process:
        target = Secured("wirebroker", f"127.0.0.1:{process.ports['SASL_PLAINTEXT']}")
        prepare(target)
        yield target


@dataclass(frozen=True)
class Both:
    """The two secured brokers: a scenario runs on each and their answers must be the same."""

    kafka: Secured
    wirebroker: Secured

    def same(self, scenario: Callable[[Secured], Any]) -> None:
        expected = scenario(self.kafka)
        got = scenario(self.wirebroker)
        assert got == expected, f"wirebroker {got!r}\n!= kafka {expected!r}"

    def same_for_bob(
        self, bindings: list[CreateAclsRequest.AclCreation], run: Callable[[RawClient], Any]
    ) -> None:
        """`run` on a connection of bob's while `bindings` exist, on each broker."""
        self.same(lambda target: with_acls(target, bindings, "bob", run))


@pytest.fixture(scope="module")
def both(secured_kafka: Secured, secured_wirebroker: Secured) -> Both:
    return Both(secured_kafka, secured_wirebroker)


def prepare(target: Secured) -> None:
    """Topics, a group with a commit, `PUBLIC` readable by all, coordinators ready."""
    with RawClient(target.bootstrap, plain=login("admin")) as admin:
        topics = [
            CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
            for n in (T, PUBLIC, WRITABLE)
        ]
        created = admin.request(CreateTopicsRequest(topics=topics, timeout_ms=30_000), 5)
        assert [t.error_code for t in created.topics] == [0, 0, 0], created
        create_acls(admin, PUBLIC_ACLS)
        for key_type, key in ((0, G), (1, TX)):  # Kafka creates the internal topic on demand
            until_ok(
                lambda kt=key_type, k=key: admin.request(
                    FindCoordinatorRequest(key_type=kt, key=k), 3
                )
            )
        until_ok(lambda: admin.request(offset_commit(G, PUBLIC, 0), 8).topics[0].partitions[0])
        until_ok(
            lambda: admin.request(
                InitProducerIdRequest(transactional_id=TX, transaction_timeout_ms=60_000), 4
            )
        )


def until_ok(call: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = call()
        if got.error_code == 0:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"still {ErrorCode(got.error_code).name}: {got}")
        time.sleep(0.2)


# --------------------------------------------------------------------------- probes


@dataclass(frozen=True)
class Probe:
    """A request needing `operation` on `name` of `resource_type`, and how to read its codes.
    `exact` off compares only whether it was refused (and with which code), for requests whose
    allowed answer depends on more than the ACLs (a transaction coordinator's state, dynamic
    broker configs)."""

    label: str
    resource_type: int
    name: str
    operation: int
    request: Callable[[], tuple[Message, int]]
    codes: Callable[[Any], Any]
    exact: bool = True
    #: What the DENY cases' base grants alice on the name (ALL, unless ALL would also grant
    #: an operation the probe's request takes besides `operation`).
    base_operation: int = ALL


def _first_partition(
    topics_field: str, partitions_field: str = "partitions"
) -> Callable[[Any], Any]:
    return lambda r: getattr(getattr(r, topics_field)[0], partitions_field)[0].error_code


def _create_new_topic() -> tuple[Message, int]:
    topic = CreateTopicsRequest.CreatableTopic(name=NEW_T, num_partitions=1, replication_factor=1)
    return CreateTopicsRequest(topics=[topic], validate_only=True, timeout_ms=10_000), 5


PROBES = [
    Probe("Fetch", TOPIC, T, READ, lambda: (fetch(T, 0), 12), _first_partition("responses")),
    Probe(
        "Produce",
        TOPIC,
        T,
        WRITE,
        lambda: (produce(T, 0, 1), 9),
        lambda r: r.responses[0].partition_responses[0].error_code,
    ),
    Probe(
        "Metadata", TOPIC, T, DESCRIBE, lambda: (metadata(T), 12), lambda r: r.topics[0].error_code
    ),
    Probe(
        "ListOffsets",
        TOPIC,
        T,
        DESCRIBE,
        lambda: (
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=T,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)
                        ],
                    )
                ],
            ),
            7,
        ),
        _first_partition("topics"),
    ),
    Probe(
        "CreateTopics",
        TOPIC,
        NEW_T,
        CREATE,
        _create_new_topic,
        lambda r: (r.topics[0].error_code, r.topics[0].topic_config_error_code),
    ),
    Probe(
        "DeleteRecords",
        TOPIC,
        T,
        DELETE,
        lambda: (delete_records(T, 0), 1),
        _first_partition("topics"),
    ),
    Probe(
        "CreatePartitions",
        TOPIC,
        T,
        ALTER,
        lambda: (
            CreatePartitionsRequest(
                topics=[
                    CreatePartitionsRequest.CreatePartitionsTopic(name=T, count=2, assignments=None)
                ],
                timeout_ms=10_000,
                validate_only=True,
            ),
            1,
        ),
        lambda r: r.results[0].error_code,
    ),
    Probe(
        "DescribeConfigs(topic)",
        TOPIC,
        T,
        DESCRIBE_CONFIGS,
        lambda: (
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name=T, configuration_keys=["retention.ms"]
                    )
                ]
            ),
            1,
        ),
        lambda r: r.results[0].error_code,
    ),
    Probe(
        "IncrementalAlterConfigs(topic)",
        TOPIC,
        T,
        ALTER_CONFIGS,
        lambda: (_alter_configs(2, T, [("retention.ms", "86400000")]), 0),
        lambda r: r.responses[0].error_code,
    ),
    Probe(
        "OffsetCommit",
        GROUP,
        G,
        READ,
        lambda: (offset_commit(G, PUBLIC, 0), 8),
        _first_partition("topics"),
    ),
    Probe(
        "OffsetFetch",
        GROUP,
        G,
        DESCRIBE,
        lambda: (
            OffsetFetchRequest(
                groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=G, topics=None)]
            ),
            8,
        ),
        lambda r: r.groups[0].error_code,
    ),
    Probe(
        "DescribeGroups",
        GROUP,
        G,
        DESCRIBE,
        lambda: (DescribeGroupsRequest(groups=[G]), 5),
        lambda r: r.groups[0].error_code,
    ),
    Probe(
        "FindCoordinator(group)",
        GROUP,
        G,
        DESCRIBE,
        lambda: (FindCoordinatorRequest(key_type=0, key=G), 3),
        lambda r: r.error_code,
    ),
    Probe(
        "DeleteGroups",
        GROUP,
        DEL_G,
        DELETE,
        lambda: (DeleteGroupsRequest(groups_names=[DEL_G]), 2),
        lambda r: r.results[0].error_code,
    ),
    Probe(
        "CreateTopics(cluster)",
        CLUSTER,
        "kafka-cluster",
        CREATE,
        _create_new_topic,
        lambda r: (r.topics[0].error_code, r.topics[0].topic_config_error_code),
    ),
    Probe(
        "DescribeAcls",
        CLUSTER,
        "kafka-cluster",
        DESCRIBE,
        lambda: (
            DescribeAclsRequest(
                resource_type_filter=TXN,
                pattern_type_filter=ANY_,
                operation=ANY_,
                permission_type=ANY_,
            ),
            3,
        ),
        lambda r: r.error_code,
    ),
    Probe(
        "DescribeLogDirs",
        CLUSTER,
        "kafka-cluster",
        DESCRIBE,
        lambda: (DescribeLogDirsRequest(topics=[]), 4),
        lambda r: r.error_code,
    ),
    Probe(
        "DescribeCluster",
        CLUSTER,
        "kafka-cluster",
        DESCRIBE,
        lambda: (DescribeClusterRequest(include_cluster_authorized_operations=True), 0),
        lambda r: r.cluster_authorized_operations,
    ),
    Probe(
        "ElectLeaders",
        CLUSTER,
        "kafka-cluster",
        ALTER,
        lambda: (
            ElectLeadersRequest(
                election_type=0,
                topic_partitions=[ElectLeadersRequest.TopicPartitions(topic=T, partitions=[0])],
                timeout_ms=10_000,
            ),
            1,
        ),
        lambda r: (r.error_code, r.replica_election_results[0].partition_result[0].error_code),
    ),
    Probe(
        "UpdateFeatures",
        CLUSTER,
        "kafka-cluster",
        ALTER,
        lambda: (update_features(("group.version", 1, 1)), 1),
        lambda r: (r.error_code, [x.error_code for x in r.results]),
    ),
    Probe(
        "AlterUserScramCredentials",
        CLUSTER,
        "kafka-cluster",
        ALTER,
        lambda: (
            AlterUserScramCredentialsRequest(
                upsertions=[
                    AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                        name="carol",
                        mechanism=2,
                        iterations=4096,
                        salt=b"salt",
                        salted_password=b"x" * 64,
                    )
                ]
            ),
            0,
        ),
        lambda r: r.results[0].error_code,
    ),
    Probe(
        "DescribeConfigs(broker)",
        CLUSTER,
        "kafka-cluster",
        DESCRIBE_CONFIGS,
        lambda: (
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=4,
                        resource_name="0",
                        configuration_keys=["log.retention.hours"],
                    )
                ]
            ),
            1,
        ),
        lambda r: r.results[0].error_code,
    ),
    Probe(
        "IncrementalAlterConfigs(broker)",
        CLUSTER,
        "kafka-cluster",
        ALTER_CONFIGS,
        lambda: (_alter_configs(4, "0", []), 0),
        lambda r: r.responses[0].error_code,
        exact=False,  # wirebroker's broker configs are static
    ),
    Probe(
        "InitProducerId(idempotent)",
        CLUSTER,
        "kafka-cluster",
        IDEMPOTENT_WRITE,
        lambda: (InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4),
        lambda r: r.error_code,
    ),
    Probe(
        "InitProducerId(transactional)",
        TXN,
        TX,
        WRITE,
        lambda: (InitProducerIdRequest(transactional_id=TX, transaction_timeout_ms=60_000), 4),
        lambda r: r.error_code,
        exact=False,  # a fenced or concurrent transaction is the coordinator's business
    ),
    Probe(
        "FindCoordinator(transaction)",
        TXN,
        TX,
        DESCRIBE,
        lambda: (FindCoordinatorRequest(key_type=1, key=TX), 3),
        lambda r: r.error_code,
    ),
]


def _add_partitions(tid: str, topic: str) -> tuple[Message, int]:
    return add_partitions_request(tid, NO_PID, 0, {topic: [0]}), 3


def _add_offsets(tid: str, group: str) -> tuple[Message, int]:
    return (
        AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=NO_PID, producer_epoch=0, group_id=group
        ),
        3,
    )


def txn_offset_commit(tid: str, group: str, topics: dict[str, list[int]]) -> Message:
    offsets = {(name, i): 1 for name, indexes in topics.items() for i in indexes}
    return txn_offset_commit_request(tid, group, NO_PID, 0, offsets)


def abort_marker(producer_id: int, commit: bool = False) -> Message:
    """A marker for `T`-0 (ABORT, as `kafka-transactions abort` sends; or COMMIT)."""
    return txn_markers_request([(producer_id, 0, 0, commit, {T: [0]})])


def _partition_codes(response: Any) -> Any:
    return sorted(
        (t.name, p.partition_index, p.partition_error_code)
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    )


TXN_PROBES = [
    Probe(
        "EndTxn",
        TXN,
        TX,
        WRITE,
        lambda: (
            EndTxnRequest(
                transactional_id=TX, producer_id=NO_PID, producer_epoch=0, committed=False
            ),
            3,
        ),
        lambda r: r.error_code,
    ),
    Probe(
        "AddPartitionsToTxn(transaction)",
        TXN,
        TX,
        WRITE,
        lambda: _add_partitions(TX, WRITABLE),
        _partition_codes,
    ),  # fmt: skip
    Probe(
        "AddPartitionsToTxn(topic)",
        TOPIC,
        T,
        WRITE,
        lambda: _add_partitions(TXP, T),
        _partition_codes,
    ),  # fmt: skip
    Probe(
        "AddOffsetsToTxn(transaction)",
        TXN,
        TX,
        WRITE,
        lambda: _add_offsets(TX, GP),
        lambda r: r.error_code,
    ),  # fmt: skip
    Probe(
        "AddOffsetsToTxn(group)",
        GROUP,
        G,
        READ,
        lambda: _add_offsets(TXP, G),
        lambda r: r.error_code,
    ),  # fmt: skip
    Probe(
        "TxnOffsetCommit(transaction)",
        TXN,
        TX,
        WRITE,
        lambda: (txn_offset_commit(TX, GP, {PUBLIC: [0]}), 3),
        _first_partition("topics"),
        exact=False,  # what the group coordinator answers an unknown producer differs
    ),
    Probe(
        "TxnOffsetCommit(group)",
        GROUP,
        G,
        READ,
        lambda: (txn_offset_commit(TXP, G, {PUBLIC: [0]}), 3),
        _first_partition("topics"),
        exact=False,
    ),
    Probe(
        "TxnOffsetCommit(topic)",
        TOPIC,
        T,
        READ,
        lambda: (txn_offset_commit(TXP, GP, {T: [0]}), 3),
        _first_partition("topics"),
        exact=False,
    ),
    Probe(
        "DescribeTransactions",
        TXN,
        TX,
        DESCRIBE,
        lambda: (DescribeTransactionsRequest(transactional_ids=[TX]), 0),
        lambda r: (r.transaction_states[0].error_code, r.transaction_states[0].transaction_state),
    ),
    Probe(
        "ListTransactions",
        TXN,
        TX,
        DESCRIBE,
        lambda: (ListTransactionsRequest(), 1),
        lambda r: (r.error_code, TX in [s.transactional_id for s in r.transaction_states]),
    ),
    Probe(
        "WriteTxnMarkers(abort)",
        CLUSTER,
        "kafka-cluster",
        ALTER,
        lambda: (abort_marker(4343), 1),
        lambda r: r.markers[0].topics[0].partitions[0].error_code,
        # ALL grants CLUSTER_ACTION too, which Kafka takes from a client and wirebroker only
        # from a broker (test_markers_from_clients)
        base_operation=ALTER,
    ),
]
PROBES += TXN_PROBES


def _alter_configs(resource_type: int, name: str, configs: list[tuple[str, str]]) -> Message:
    return IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name=k, config_operation=0, value=v
                    )
                    for k, v in configs
                ],
            )
        ],
        validate_only=True,
    )


# --------------------------------------------------------------------------- cases

Case = tuple[str, Probe, list[CreateAclsRequest.AclCreation]]
OTHER = {READ: WRITE, WRITE: READ, DESCRIBE: CREATE, CREATE: DESCRIBE, DELETE: ALTER_CONFIGS,
         ALTER: DELETE, DESCRIBE_CONFIGS: READ, ALTER_CONFIGS: ALTER, IDEMPOTENT_WRITE: CREATE}  # fmt: skip
IMPLYING = {DESCRIBE: [READ, WRITE, DELETE, ALTER], DESCRIBE_CONFIGS: [ALTER_CONFIGS]}


def patterns(probe: Probe) -> list[tuple[str, int, str]]:
    if probe.resource_type == CLUSTER:  # its one name, literally or as a prefix of itself
        return [("literal", LITERAL, probe.name), ("prefixed", PREFIXED, probe.name)]
    return [
        ("literal", LITERAL, probe.name),
        ("wildcard", LITERAL, "*"),
        ("prefix", PREFIXED, probe.name[:1]),
        ("other-prefix", PREFIXED, "z"),
        ("other-name", LITERAL, probe.name + "z"),
    ]


def cases() -> list[Case]:
    out: list[Case] = [(f"{p.label} no-acl", p, []) for p in PROBES]
    for p in PROBES:
        operations = [("op", p.operation), ("ALL", ALL), ("other", OTHER[p.operation])]
        operations += [(f"implied-by-{op}", op) for op in IMPLYING.get(p.operation, [])]
        for who in ("User:alice", "User:*", "User:bob"):
            for pattern_label, pattern, name in patterns(p):
                for op_label, op in operations:
                    allow = acl(p.resource_type, name, who, op, ALLOW, pattern)
                    out.append((f"{p.label} ALLOW {who} {pattern_label} {op_label}", p, [allow]))
                    # a DENY on top of alice being allowed everything on the exact name
                    base = acl(p.resource_type, p.name, "User:alice", p.base_operation)
                    deny = acl(p.resource_type, name, who, op, DENY, pattern)
                    out.append(
                        (f"{p.label} DENY {who} {pattern_label} {op_label}", p, [base, deny])
                    )
        for host in ("127.0.0.1", "10.9.8.7"):
            allow = acl(p.resource_type, p.name, "User:alice", p.operation, ALLOW, LITERAL, host)
            out.append((f"{p.label} ALLOW host {host}", p, [allow]))
            base = acl(p.resource_type, p.name, "User:alice", p.base_operation)
            deny = acl(p.resource_type, p.name, "User:alice", p.operation, DENY, LITERAL, host)
            out.append((f"{p.label} DENY host {host}", p, [base, deny]))
    return out


def outcome(probe: Probe, response: Any) -> Any:
    codes = probe.codes(response)
    if probe.exact:
        return codes
    flat = codes if isinstance(codes, tuple) else (codes,)
    return tuple(c if c in AUTHORIZATION_ERRORS else "allowed" for c in flat)


def run_matrix(target: Secured) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    with (
        RawClient(target.bootstrap, plain=login("admin")) as admin,
        RawClient(target.bootstrap, plain=login("alice")) as alice,
    ):
        for label, probe, bindings in cases():
            if bindings:
                create_acls(admin, bindings)
            body, version = probe.request()
            answers[label] = outcome(probe, alice.request(body, version))
            if bindings:
                delete_acls(admin, bindings)
    return answers


def test_acl_matrix(both: Both) -> None:
    # The two brokers are separate processes: each side's round trips wait on its own
    # ZooKeeper writes, so the sides run at once (about half the time on two cores).
    with ThreadPoolExecutor(2) as pool:
        on_kafka = pool.submit(run_matrix, both.kafka)
        got = run_matrix(both.wirebroker)
        expected = on_kafka.result()
    differ = [
        f"{k}: wirebroker {got[k]!r} != kafka {expected[k]!r}"
        for k in expected
        if got[k] != expected[k]
    ]
    assert not differ, f"{len(differ)} of {len(expected)} cases differ:\n" + "\n".join(differ)
    # the matrix means something: both allowed and refused answers, of every kind
    refused = {v for v in expected.values() if isinstance(v, int) and v in AUTHORIZATION_ERRORS}
    assert refused >= {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED}
    assert any(v == 0 for v in expected.values())


# --------------------------------------------------------------------------- scenarios


def with_acls(
    target: Secured,
    bindings: list[CreateAclsRequest.AclCreation],
    user: str,
    run: Callable[[RawClient], Any],
) -> Any:
    with RawClient(target.bootstrap, plain=login("admin")) as admin:
        create_acls(admin, bindings)
        try:
            with RawClient(target.bootstrap, plain=login(user)) as client:
                return run(client)
        finally:
            delete_acls(admin, bindings)


def test_metadata_lists_only_what_may_be_described(both: Both) -> None:
    bindings = [
        acl(TOPIC, T, "User:bob", WRITE),  # implies DESCRIBE
        acl(TOPIC, "m", "User:bob", DESCRIBE, pattern=PREFIXED),
        acl(TOPIC, PUBLIC, "User:bob", DESCRIBE, DENY),
    ]

    def run(bob: RawClient) -> Any:
        every = bob.request(MetadataRequest(topics=None), 12)
        named = bob.request(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in (T, PUBLIC, "nope")],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=True,
            ),
            10,
        )
        return (
            sorted(t.name for t in every.topics),
            sorted((t.name, t.error_code, t.topic_authorized_operations) for t in named.topics),
        )

    both.same_for_bob(bindings, run)


def test_auto_creation_needs_create(both: Both) -> None:
    tag = uuid.uuid4().hex[:6]
    bindings = [
        acl(TOPIC, "auto-", "User:bob", DESCRIBE, pattern=PREFIXED),
        acl(TOPIC, f"auto-yes-{tag}", "User:bob", CREATE),
    ]

    def run(bob: RawClient) -> Any:
        names = (f"auto-yes-{tag}", f"auto-no-{tag}")
        answer = bob.request(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names]),
            4,
        )
        # created: LEADER_NOT_AVAILABLE on Kafka, ready at once on wirebroker (a known difference)
        return sorted(
            (t.name.split("-")[1], t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for t in answer.topics
        )

    both.same_for_bob(bindings, run)


def test_authorized_operations_bit_fields(both: Both) -> None:
    bindings = [
        acl(TOPIC, T, "User:bob", READ),
        acl(TOPIC, "*", "User:bob", ALTER_CONFIGS),
        acl(TOPIC, T, "User:bob", DESCRIBE_CONFIGS, DENY),
        acl(GROUP, G, "User:bob", DELETE),
        acl(CLUSTER, "kafka-cluster", "User:bob", DESCRIBE),
        acl(CLUSTER, "kafka-cluster", "User:bob", IDEMPOTENT_WRITE),
        acl(CLUSTER, "kafka-cluster", "User:bob", ALTER_CONFIGS),
    ]

    def run(bob: RawClient) -> Any:
        meta = bob.request(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=T)],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=True,
                include_topic_authorized_operations=True,
            ),
            10,
        )
        cluster = bob.request(DescribeClusterRequest(include_cluster_authorized_operations=True), 0)
        groups = bob.request(
            DescribeGroupsRequest(groups=[G], include_authorized_operations=True), 5
        )
        return (
            meta.cluster_authorized_operations,
            meta.topics[0].topic_authorized_operations,
            cluster.cluster_authorized_operations,
            [(g.error_code, g.authorized_operations) for g in groups.groups],
        )

    both.same_for_bob(bindings, run)


def test_describe_and_delete_acls_filters(both: Both) -> None:
    fixed = [
        acl(TOPIC, "fa", "User:bob", READ),
        acl(TOPIC, "fa", "User:carol", WRITE, DENY, host="10.0.0.1"),
        acl(TOPIC, "f", "User:bob", READ, pattern=PREFIXED),
        acl(TOPIC, "*", "User:bob", DESCRIBE),
        acl(GROUP, "fa", "User:bob", READ),
        acl(TXN, "fa-tx", "User:bob", WRITE, pattern=PREFIXED),
    ]
    filters = [
        (ANY_, None, ANY_, None, None, ANY_, ANY_),
        (TOPIC, "fa", LITERAL, None, None, ANY_, ANY_),
        (TOPIC, "fa", MATCH, None, None, ANY_, ANY_),
        (TOPIC, "fa", ANY_, None, None, ANY_, ANY_),
        (TOPIC, None, PREFIXED, None, None, ANY_, ANY_),
        (ANY_, "fa", MATCH, "User:bob", None, READ, ALLOW),
        (ANY_, None, ANY_, None, "10.0.0.1", ANY_, DENY),
        (TXN, "fa-tx-1", MATCH, None, None, ANY_, ANY_),
    ]

    def described(client: RawClient, f: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        answer = client.request(
            DescribeAclsRequest(
                resource_type_filter=f[0],
                resource_name_filter=f[1],
                pattern_type_filter=f[2],
                principal_filter=f[3],
                host_filter=f[4],
                operation=f[5],
                permission_type=f[6],
            ),  # fmt: skip
            3,
        )
        assert answer.error_code == 0
        return sorted(
            (
                r.resource_type,
                r.resource_name,
                r.pattern_type,
                a.principal,
                a.host,
                a.operation,
                a.permission_type,
            )
            for r in answer.resources
            for a in r.acls
            if (r.resource_type, r.resource_name) not in PUBLIC_RESOURCES
        )

    def scenario(target: Secured) -> Any:
        with RawClient(target.bootstrap, plain=login("admin")) as admin:
            create_acls(admin, fixed)
            seen = [described(admin, f) for f in filters]
            deleted = admin.request(
                DeleteAclsRequest(
                    filters=[
                        DeleteAclsRequest.DeleteAclsFilter(
                            resource_type_filter=f[0],
                            resource_name_filter=f[1],
                            pattern_type_filter=f[2],
                            principal_filter=f[3],
                            host_filter=f[4],
                            operation=f[5],
                            permission_type=f[6],
                        )  # fmt: skip
                        for f in (filters[5], filters[6], filters[4])
                    ]
                ),
                3,
            )
            removed = [
                sorted(
                    (m.resource_name, m.pattern_type, m.principal, m.error_code)
                    for m in r.matching_acls
                )
                for r in deleted.filter_results
            ]
            left = described(admin, filters[0])
            delete_acls(admin, fixed)
            return seen, removed, left

    both.same(scenario)


PUBLIC_RESOURCES = {(a.resource_type, a.resource_name) for a in PUBLIC_ACLS}


def test_create_acls_validation(both: Both) -> None:
    creations = [
        acl(CLUSTER, "not-the-cluster", "User:bob", ALTER),
        acl(TOPIC, "", "User:bob", READ),
        acl(TOPIC, "a/b", "User:bob", READ),
        acl(TOPIC, "fine", "User:bob", READ),
        acl(GROUP, "g", "no-colon", READ),
        acl(TOPIC, "odd-op", "User:bob", 99),
    ]

    def scenario(target: Secured) -> Any:
        with RawClient(target.bootstrap, plain=login("admin")) as admin:
            answer = admin.request(CreateAclsRequest(creations=creations), 3)
            codes = [r.error_code for r in answer.results]
            delete_acls(admin, [creations[3]])
            return codes

    both.same(scenario)


# --------------------------------------------------------------------------- transactions


def test_add_partitions_to_txn_checks_every_partition(both: Both) -> None:
    """Refused, internal and unknown topics and partitions in one AddPartitionsToTxn."""
    bindings = [
        acl(TXN, "bx", "User:bob", WRITE, pattern=PREFIXED),
        acl(TOPIC, T, "User:bob", WRITE),
        acl(TOPIC, "mnope", "User:bob", WRITE),
        acl(TOPIC, "__", "User:bob", ALL, pattern=PREFIXED),  # internal topics stay refused
    ]

    def run(bob: RawClient) -> Any:
        def add(tid: str, topics: dict[str, list[int]]) -> Any:
            request = add_partitions_request(tid, NO_PID, 0, topics)
            return _partition_codes(bob.request(request, 3))

        return [
            add("bx-1", {T: [0]}),  # allowed: the coordinator's answer
            add("bx-1", {T: [0], PUBLIC: [0]}),  # one refused topic
            add("bx-1", {T: [0, 5]}),  # a partition that does not exist
            add("bx-1", {T: [0], "mnope": [0]}),  # a topic that does not exist
            add("bx-1", {T: [0], "__consumer_offsets": [0]}),  # internal
            add("other", {T: [0], PUBLIC: [0]}),  # the transactional id refused
        ]

    both.same_for_bob(bindings, run)


def test_txn_offset_commit_checks_the_id_group_and_topics(both: Both) -> None:
    bindings = [
        acl(TXN, "bx", "User:bob", WRITE, pattern=PREFIXED),
        acl(GROUP, "bg", "User:bob", READ),
        acl(TOPIC, "mnope", "User:bob", READ),
    ]
    topics = {T: [0], PUBLIC: [0, 7], "mnope": [0]}

    def run(bob: RawClient) -> Any:
        def commit(tid: str, group: str) -> Any:
            answer = bob.request(txn_offset_commit(tid, group, topics), 3)
            return sorted(
                (t.name, p.partition_index, p.error_code)
                for t in answer.topics
                for p in t.partitions
                if (t.name, p.partition_index) != (PUBLIC, 0)  # the coordinator's answer
            )

        return [commit("bx-1", "bg"), commit("bx-1", "other"), commit("other", "bg")]

    both.same_for_bob(bindings, run)


def test_transactions_are_described_and_listed_as_the_acls_say(both: Both) -> None:
    """An ongoing transaction on `T` and `PUBLIC`: bob sees it only with DESCRIBE on its id,
    and only the topics he may DESCRIBE."""
    tid = f"mtd-{uuid.uuid4().hex[:6]}"
    bindings = [acl(TXN, tid, "User:bob", DESCRIBE), acl(TOPIC, T, "User:bob", DESCRIBE)]

    def scenario(target: Secured) -> Any:
        with RawClient(target.bootstrap, plain=login("admin")) as admin:
            init = until_ok(
                lambda: admin.request(
                    InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000), 4
                )
            )
            request = add_partitions_request(
                tid, init.producer_id, init.producer_epoch, {T: [0], PUBLIC: [0]}
            )
            assert {c for *_, c in _partition_codes(admin.request(request, 3))} == {0}

            def run(bob: RawClient) -> Any:
                described = bob.request(
                    DescribeTransactionsRequest(transactional_ids=[tid, TX, "mtd-none"]), 0
                )
                listed = bob.request(ListTransactionsRequest(), 1)
                return (
                    [
                        (
                            s.transactional_id,
                            s.error_code,
                            s.transaction_state,
                            [(t.topic, t.partitions) for t in s.topics],
                        )
                        for s in described.transaction_states
                    ],
                    sorted(s.transactional_id for s in listed.transaction_states),
                )

            try:
                return with_acls(target, bindings, "bob", run)
            finally:
                admin.request(
                    EndTxnRequest(
                        transactional_id=tid,
                        producer_id=init.producer_id,
                        producer_epoch=init.producer_epoch,
                        committed=False,
                    ),
                    3,
                )

    both.same(scenario)


def test_markers_from_clients(both: Both) -> None:
    """WriteTxnMarkers from a client: ALTER on the cluster allows ABORT markers on both. The
    two known differences (docs/security.md): CLUSTER_ACTION, which Kafka takes from anyone
    allowed it, and COMMIT markers are taken here only from brokers (inter-broker listener of
    a cluster member; never on the embedded broker)."""
    cluster = "kafka-cluster"
    grants = {
        "ALTER": [acl(CLUSTER, cluster, "User:bob", ALTER)],
        "CLUSTER_ACTION": [acl(CLUSTER, cluster, "User:bob", CLUSTER_ACTION)],
        "nothing": [],
    }

    def scenario(target: Secured) -> dict[tuple[str, str], int]:
        out = {}
        for label, bindings in grants.items():

            def run(bob: RawClient) -> dict[tuple[str, str], int]:
                answers = {}
                for kind, commit in (("ABORT", False), ("COMMIT", True)):
                    response = bob.request(abort_marker(4444, commit), 1)
                    answers[kind] = response.markers[0].topics[0].partitions[0].error_code
                return answers

            answers = with_acls(target, bindings, "bob", run)
            out.update({(label, kind): code for kind, code in answers.items()})
        return out

    expected = scenario(both.kafka)
    got = scenario(both.wirebroker)
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert expected == {
        ("ALTER", "ABORT"): 0,
        ("ALTER", "COMMIT"): 0,
        ("CLUSTER_ACTION", "ABORT"): 0,
        ("CLUSTER_ACTION", "COMMIT"): 0,
        ("nothing", "ABORT"): refused,
        ("nothing", "COMMIT"): refused,
    }, expected
    assert got == {**expected, ("ALTER", "COMMIT"): refused, ("CLUSTER_ACTION", "ABORT"): refused,
                   ("CLUSTER_ACTION", "COMMIT"): refused}, got  # fmt: skip
