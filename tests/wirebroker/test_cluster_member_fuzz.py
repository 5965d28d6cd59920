"""Fuzz a live cluster member with the requests other cluster nodes send it: structurally valid,
semantically arbitrary, each answered or refused, never a bug.

`test_request_fuzz.py` sends them to a standalone broker, which refuses them at the door. Here
the broker is a cluster member (`broker.id=1`, `wirebroker.external.controller=true`, on its own
thread as there) and the fuzz plays its controller (id 100, controller epoch 1) and its peers, so
they go past the door: LeaderAndIsr, UpdateMetadata, StopReplica, ControlledShutdown and
AlterPartition (the controller's), WriteTxnMarkers and AddPartitionsToTxn's verification (a
transaction coordinator's and a leader's), Fetch, OffsetForLeaderEpoch and ListOffsets (a
follower's). The broker leads `cm-lead`'s partitions (with records)
and follows broker 2 on `cm-follow`'s; a `FakeController` (`cluster_harness`) answers the
AlterPartition requests its ISR changes send. The values (`tests.wirebroker.fuzz_values`,
biased here further) name those topics and a new one, this broker or another as leader and in
the replicas, leader epochs newer than any sent before, and never a controller epoch newer than
1, so that the fuzz stays the controller. Every address in them is a port of this module's:
the broker's, the fake controller's, or one bound with nobody listening (broker 2's): the
broker's fetchers and peers never reach anything else on the machine.

The checks are `test_request_fuzz.py`'s (`tests.wirebroker.fuzz_harness`); after each
controller's request the module's partitions are put back (UpdateMetadata and LeaderAndIsr
with a newer epoch, answered without an error), so the next one meets them again. Each bug it
found has a deterministic regression test (`test_replication_unit.py` for a LeaderAndIsr whose
partition no log directory can be named for).
"""

from __future__ import annotations

import itertools
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import strategies as st

from protocol.errors import ErrorCode
from protocol.messages import APIS
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from protocol.messages.alter_partition import AlterPartitionRequest
from protocol.messages.controlled_shutdown import ControlledShutdownRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from protocol.record_batch import SimpleRecord
from protocol.schema import Field, Message, Struct
from tests.protocol.strategies import Scalars
from tests.wirebroker.cluster_harness import (
    CONTROLLER_ID,
    FakeController,
    PartitionState,
    leader_and_isr_request,
    update_metadata_broker,
    update_metadata_request,
)
from tests.wirebroker.fuzz_harness import (
    ANSWER_TIMEOUT,
    Fuzzed,
    Records,
    fuzz_versions,
    recording,
)
from tests.wirebroker.fuzz_values import Known, scalars
from tests.wirebroker.helpers import RawClient, produce_request
from wirebroker.embed import run_broker

pytestmark = pytest.mark.integration

NODE_ID, PEER_ID, CONTROLLER_EPOCH = 1, 2, 1
#: Topic -> partitions: `cm-lead` led here, `cm-follow` led by the peer, `cm-new` made only by
#: the fuzz.
TOPICS = {"cm-lead": 2, "cm-follow": 1, "cm-new": 2}
#: Examples per API key: about 20 s for the module's 10 keys on a two-core machine; more for a
#: longer campaign (WIREBROKER_FUZZ_EXAMPLES=5000).
EXAMPLES = int(os.environ.get("WIREBROKER_FUZZ_EXAMPLES", "300"))
API_KEYS = [
    r.API_KEY
    for r in (
        LeaderAndIsrRequest,
        UpdateMetadataRequest,
        StopReplicaRequest,
        ControlledShutdownRequest,
        AlterPartitionRequest,
        WriteTxnMarkersRequest,
        AddPartitionsToTxnRequest,
        FetchRequest,
        OffsetForLeaderEpochRequest,
        ListOffsetsRequest,
    )
]
#: What a controller sends: the module's partitions are put back after each.
_CONTROLLERS = {
    LeaderAndIsrRequest.API_KEY,
    UpdateMetadataRequest.API_KEY,
    StopReplicaRequest.API_KEY,
}


#: What the broker logs at ERROR, as Kafka's ReplicaManager, when a controller's request
#: contradicts what it has: not bugs.
EXPECTED_ERRORS = [r"topic id \S+ in LeaderAndIsr, \S+ (here|on disk)$"]


def _cluster_scalars(known: Known, ports: list[int], epochs: Iterator[int]) -> Scalars:
    """`fuzz_values.scalars` with the cluster's: addresses only of `ports` on this host, the
    controller's epoch never newer than `CONTROLLER_EPOCH` (one newer would stand for the rest
    of the module: every request after it stale), leader epochs mostly newer than any before
    (`epochs`), the controller's id mostly the fake controller's."""
    base = scalars(known)
    hosts = st.sampled_from(["127.0.0.1", "localhost", "::1"])
    controller_epochs = st.sampled_from([CONTROLLER_EPOCH] * 4 + [0, -1])
    leader_epochs = st.sampled_from([None] * 4 + [-1, 0]).map(
        lambda e: next(epochs) if e is None else e
    )

    def scalar(owner: type[Struct], f: Field, type_: str) -> st.SearchStrategy[Any]:
        name = f.name
        if type_ == "string" and "host" in name:
            return hosts
        if type_ == "int32" and name.endswith("port"):
            return st.sampled_from(ports)
        if name == "controller_epoch":
            return controller_epochs
        if name == "leader_epoch" and owner.__name__.endswith("PartitionState"):
            return leader_epochs
        if name == "broker_epoch":  # this broker's is -1: any older is stale
            return st.sampled_from([-1] * 3) | base(owner, f, type_)
        if name == "controller_id":
            return st.sampled_from([CONTROLLER_ID] * 3) | base(owner, f, type_)
        return base(owner, f, type_)

    return scalar


class ClusterMember(Fuzzed):
    """The module's broker, its fake controller, and the partitions it leads and follows."""

    def __init__(
        self,
        bootstrap: str,
        records: Records,
        controller: FakeController,
        peer_port: int,
        log_dir: str,
    ) -> None:
        self.controller = controller
        self.port = int(bootstrap.rsplit(":", 1)[1])
        self.peer_port = peer_port
        self.epochs = itertools.count(1)
        ids = {t: uuid.uuid4() for t in TOPICS}
        self.states = [
            PartitionState(
                "cm-lead", ids["cm-lead"], p, NODE_ID, 0, [NODE_ID, PEER_ID], [NODE_ID, PEER_ID]
            )
            for p in range(TOPICS["cm-lead"])
        ] + [
            PartitionState(
                "cm-follow", ids["cm-follow"], 0, PEER_ID, 0, [PEER_ID, NODE_ID], [PEER_ID, NODE_ID]
            )
        ]
        known = Known(
            topics=dict(TOPICS),
            topic_ids=list(ids.values()),
            groups=["cm-group"],
            transactional_ids=["cm-txn"],
            producers=[],
            node_id=NODE_ID,
            log_dir=log_dir,
            members=[],
            generations=[0],
        )
        ports = [self.port, controller.port, peer_port]
        super().__init__(
            bootstrap, records, _cluster_scalars(known, ports, self.epochs), list(TOPICS)
        )

    def start(self) -> None:
        """Lead and follow the module's partitions; records in those led here."""
        self.lead_and_follow()
        records = [SimpleRecord(b"k", b"v", (), 1_700_000_000_000)] * 3
        with RawClient(self.bootstrap) as c:
            for p in range(TOPICS["cm-lead"]):
                answer = c.request(produce_request("cm-lead", p, records, acks=1), 9)
                assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE

    def check_health(self) -> MetadataResponse:
        """Metadata of every topic answered too (a fuzzed UpdateMetadata's among them), at
        the first version that can ask for all and at the newest."""
        with RawClient(self.bootstrap, timeout=ANSWER_TIMEOUT) as c:
            for version in (1, 12):
                c.request(MetadataRequest(topics=None), version)
        return super().check_health()

    def restore(self, body: Message, metadata: MetadataResponse) -> None:
        if body.API_KEY in _CONTROLLERS:
            self.lead_and_follow()

    def lead_and_follow(self) -> None:
        """The module's partitions, each at a leader epoch newer than any the fuzz sent: told
        to the broker (UpdateMetadata, then LeaderAndIsr) and to the fake controller; the
        broker must take every one. One the fuzz made again under another topic id is
        deleted first (INCONSISTENT_TOPIC_ID)."""
        with self.controller.cond:
            for s in self.states:
                s.leader_epoch = s.partition_epoch = next(self.epochs)
                s.isr = list(s.replicas)
                self.controller.partitions[(s.topic_id, s.partition)] = s
        brokers = [
            update_metadata_broker(NODE_ID, "127.0.0.1", self.port),
            update_metadata_broker(PEER_ID, "127.0.0.1", self.peer_port),
            update_metadata_broker(CONTROLLER_ID, "127.0.0.1", self.controller.port),
        ]
        with RawClient(self.bootstrap) as c:
            um = update_metadata_request(self.states, CONTROLLER_ID, CONTROLLER_EPOCH, brokers)
            assert c.request(um, 8).error_code == ErrorCode.NONE
            led = self._lead(c)
            inconsistent = [(t, p) for t, p, code in led if code == ErrorCode.INCONSISTENT_TOPIC_ID]
            if inconsistent:
                stop = StopReplicaRequest(
                    controller_id=CONTROLLER_ID,
                    controller_epoch=CONTROLLER_EPOCH,
                    topic_states=[
                        StopReplicaRequest.StopReplicaTopicState(
                            topic_name=t,
                            partition_states=[
                                StopReplicaRequest.StopReplicaPartitionState(
                                    partition_index=p, leader_epoch=-2, delete_partition=True
                                )
                            ],
                        )
                        for t, p in inconsistent
                    ],
                )
                assert c.request(stop, 4).error_code == ErrorCode.NONE
                led = self._lead(c)
        assert all(code == ErrorCode.NONE for _, _, code in led), led

    def _lead(self, c: RawClient) -> list[tuple[str, int, int]]:
        request = leader_and_isr_request(
            self.states, CONTROLLER_ID, CONTROLLER_EPOCH, {PEER_ID: self.peer_port}
        )
        answer: LeaderAndIsrResponse = c.request(request, 7)
        assert answer.error_code == ErrorCode.NONE
        names = {s.topic_id: s.topic for s in self.states}
        return [
            (names[t.topic_id], p.partition_index, p.error_code)
            for t in answer.topics
            for p in t.partition_errors
        ]


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterMember]:
    log_dir = tmp_path_factory.mktemp("member")
    controller = FakeController()
    # The peer's port: bound, nobody listening (its fetches are refused at once).
    with socket.socket() as peer:
        peer.bind(("127.0.0.1", 0))
        properties = {
            "broker.id": str(NODE_ID),
            "wirebroker.external.controller": "true",
            "log.dirs": str(log_dir),
            # the leader drops the peer from the ISR within the fuzz (AlterPartition)
            "replica.lag.time.max.ms": "1000",
            # a marker waits for an ISR the fake controller never shrinks (a partition the fuzz
            # made) this long, then is answered REQUEST_TIMED_OUT
            "request.timeout.ms": "2000",
        }
        try:
            with recording(EXPECTED_ERRORS) as records, run_broker(properties) as bootstrap:
                member = ClusterMember(
                    bootstrap, records, controller, peer.getsockname()[1], str(log_dir)
                )
                member.start()
                yield member
        finally:
            controller.close()
    assert not controller.errors, controller.errors


@pytest.mark.timeout(120)  # shrinking a failure takes longer than the examples
@pytest.mark.parametrize("api_key", API_KEYS, ids=lambda k: APIS[k].name)
def test_every_request_of_a_cluster_node_is_answered_or_refused(
    member: ClusterMember, api_key: int
) -> None:
    fuzz_versions(member, api_key, EXAMPLES)
