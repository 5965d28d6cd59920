"""The transaction coordinator on the wire, with raw requests to a broker process: the
sequences of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions, ListTransactions and FindCoordinator, each error code Kafka 3.9 gives
(by request version where it differs), nothing written to `__transaction_state` when a request
is refused; and KIP-890's verification of transactional produce."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode
from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from protocol.messages.describe_transactions import DescribeTransactionsRequest
from protocol.messages.end_txn import EndTxnRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.list_transactions import ListTransactionsRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess, broker_process
from wirebroker.coordinator_store import partition_for

from .helpers import (
    RawClient,
    add_partitions_request,
    create_topic,
    end_offset,
    find_coordinator,
    make_coordinator_topics,
    produce_request,
    txn_offset_commit_request,
    wait_until,
)

E = ErrorCode
TXN_TOPIC = "__transaction_state"
BROKER_PROPERTIES = {"transaction.max.timeout.ms": "120000"}


@pytest.fixture(autouse=True)
def _coordinator_topics(broker: BrokerProcess) -> None:
    """The raw requests below skip the coordinator lookups that create the coordinators'
    topics."""
    make_coordinator_topics(broker.bootstrap)


@pytest.fixture
def tid() -> str:
    return f"tx-{uuid.uuid4().hex[:8]}"


def init(c: RawClient, tid: str | None, version: int = 4, **fields: Any) -> Any:
    request = InitProducerIdRequest(
        transactional_id=tid,
        transaction_timeout_ms=fields.pop("timeout_ms", 60_000),
        **fields,
    )
    return c.request(request, version)


def add(
    c: RawClient, tid: str, pid: int, epoch: int, parts: dict[str, list[int]], version: int = 3
) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn v0-3: each partition's code."""
    response = c.request(add_partitions_request(tid, pid, epoch, parts), version)
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def end(c: RawClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    request = EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return int(c.request(request, version).error_code)


def describe(c: RawClient, tid: str) -> Any:
    (state,) = c.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states
    return state


def wait_state(c: RawClient, tid: str, state: str) -> Any:
    """Describe the id until it is in `state` (its markers written); its description."""
    return wait_until(
        lambda: (d := describe(c, tid)).transaction_state == state and d, what=f"{tid} {state}"
    )


def state_end(bootstrap: str, tid: str) -> int:
    """The end offset of the id's `__transaction_state` partition: what was written there."""
    return end_offset(bootstrap, TXN_TOPIC, partition_for(tid, 50))


def txn_produce(
    c: RawClient, tid: str | None, topic: str, pid: int, epoch: int, seq: int, version: int = 9
) -> Any:
    records = [SimpleRecord(b"k", b"v", (), int(time.time() * 1000))]
    request = produce_request(
        topic,
        0,
        records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    request.transactional_id = tid
    return c.request(request, version).responses[0].partition_responses[0]


def test_find_coordinator_for_transactions(tmp_path: Path, tid: str) -> None:
    with broker_process(tmp_path) as broker, RawClient(broker.bootstrap) as c:
        # the first lookup creates __transaction_state and, as on Kafka, is asked again
        first = c.request(FindCoordinatorRequest(key=tid, key_type=1), 3)
        assert (first.error_code, first.node_id) == (E.COORDINATOR_NOT_AVAILABLE, -1)
        for version in (1, 2, 3):  # v0 has no key type: groups only
            r = find_coordinator(c, FindCoordinatorRequest(key=tid, key_type=1), version)
            assert (r.error_code, r.port) == (E.NONE, broker.port), version
        for version in (4, 5):
            request = FindCoordinatorRequest(key_type=1, coordinator_keys=[tid, "other", ""])
            found = c.request(request, version).coordinators
            assert [x.error_code for x in found] == [E.NONE, E.NONE, E.INVALID_REQUEST]
            assert found[0].port == broker.port
        assert end_offset(broker.bootstrap, TXN_TOPIC, 49) == 0  # created, 50 partitions


def test_init_producer_id(broker: BrokerProcess, tid: str) -> None:
    with RawClient(broker.bootstrap) as c:
        first = init(c, tid)
        assert (first.error_code, first.producer_epoch) == (E.NONE, 0)
        pid = first.producer_id
        second = init(c, tid)  # a new instance: the same id, the next epoch (fences the first)
        assert (second.error_code, second.producer_id, second.producer_epoch) == (E.NONE, pid, 1)
        # KIP-360: the current instance recovers with its id and epoch
        kip360 = init(c, tid, producer_id=pid, producer_epoch=1)
        assert (kip360.error_code, kip360.producer_epoch) == (E.NONE, 2)
        again = init(c, tid, producer_id=pid, producer_epoch=1)  # its retry: the same epoch
        assert (again.error_code, again.producer_epoch) == (E.NONE, 2)
        before = state_end(broker.bootstrap, tid)
        assert init(c, tid, producer_id=pid, producer_epoch=0).error_code == E.PRODUCER_FENCED
        old = init(c, tid, 3, producer_id=pid, producer_epoch=0)
        assert old.error_code == E.INVALID_PRODUCER_EPOCH  # v3 knows no PRODUCER_FENCED
        assert init(c, tid, producer_id=pid + 999, producer_epoch=2).error_code == (
            E.PRODUCER_FENCED
        )
        for timeout in (0, -1, 120_001):
            bad = init(c, tid, timeout_ms=timeout)
            assert (bad.error_code, bad.producer_id) == (E.INVALID_TRANSACTION_TIMEOUT, -1)
        assert init(c, "").error_code == E.INVALID_REQUEST
        assert init(c, tid, producer_id=pid, producer_epoch=-1).error_code == E.INVALID_REQUEST
        assert state_end(broker.bootstrap, tid) == before  # no refused request wrote anything
        plain = init(c, None)
        assert (plain.error_code, plain.producer_epoch) == (E.NONE, 0) and plain.producer_id != pid


def test_add_partitions_errors_write_nothing(broker: BrokerProcess, topic: str, tid: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap) as c:
        assert add(c, "never-initialized", 1, 0, {topic: [0]}) == {
            (topic, 0): E.INVALID_PRODUCER_ID_MAPPING
        }
        r = init(c, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        init(c, tid)  # fences epoch 0
        before = state_end(broker.bootstrap, tid)
        assert add(c, tid, pid, epoch, {topic: [0]}) == {(topic, 0): E.PRODUCER_FENCED}
        assert add(c, tid, pid, epoch, {topic: [0]}, 1) == {(topic, 0): E.INVALID_PRODUCER_EPOCH}
        assert add(c, tid, pid + 1, 1, {topic: [0]}) == {(topic, 0): E.INVALID_PRODUCER_ID_MAPPING}
        missing = add(c, tid, pid, 1, {topic: [0, 1, 7], "no-such-topic": [0]})
        assert missing == {
            (topic, 0): E.OPERATION_NOT_ATTEMPTED,
            (topic, 1): E.OPERATION_NOT_ATTEMPTED,
            (topic, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert state_end(broker.bootstrap, tid) == before
        assert describe(c, tid).transaction_state == "Empty"
        assert add(c, tid, pid, 1, {topic: [0, 1]}) == {(topic, 0): E.NONE, (topic, 1): E.NONE}
        assert state_end(broker.bootstrap, tid) == before + 1
        assert add(c, tid, pid, 1, {topic: [1]}) == {(topic, 1): E.NONE}  # already in it
        assert state_end(broker.bootstrap, tid) == before + 1
        state = describe(c, tid)
        assert (state.error_code, state.transaction_state, state.producer_epoch) == (
            E.NONE,
            "Ongoing",
            1,
        )
        assert [(t.topic, t.partitions) for t in state.topics] == [(topic, [0, 1])]
        assert state.transaction_start_time_ms > 0 and state.transaction_timeout_ms == 60_000


def test_end_txn_sequences(broker: BrokerProcess, topic: str, tid: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        assert end(c, "never-initialized", 1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
        r = init(c, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        assert end(c, tid, pid, epoch, True) == E.INVALID_TXN_STATE  # nothing to end (Empty)
        assert add(c, tid, pid, epoch, {topic: [0]}) == {(topic, 0): E.NONE}
        assert end(c, tid, pid + 1, epoch, True) == E.INVALID_PRODUCER_ID_MAPPING
        assert end(c, tid, pid, epoch + 1, True) == E.PRODUCER_FENCED  # a client may not bump
        assert end(c, tid, pid, epoch, True) == E.NONE
        # until its markers are written, the transaction is PrepareCommit
        assert end(c, tid, pid, epoch, True) in (E.NONE, E.CONCURRENT_TRANSACTIONS)
        wait_state(c, tid, "CompleteCommit")
        assert end(c, tid, pid, epoch, True) == E.NONE  # a retried commit
        assert end(c, tid, pid, epoch, False) == E.INVALID_TXN_STATE  # it was committed
        assert add(c, tid, pid, epoch, {topic: [0]}) == {(topic, 0): E.NONE}
        assert end(c, tid, pid, epoch, False) == E.NONE
        wait_state(c, tid, "CompleteAbort")
        init(c, tid)
        assert end(c, tid, pid, epoch, False, version=1) == E.INVALID_PRODUCER_EPOCH
        assert end(c, tid, pid, epoch, False, version=2) == E.PRODUCER_FENCED


def test_a_new_instance_aborts_the_ongoing_transaction(
    broker: BrokerProcess, topic: str, tid: str
) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        r = init(c, tid)
        pid = r.producer_id
        assert add(c, tid, pid, 0, {topic: [0]}) == {(topic, 0): E.NONE}
        assert txn_produce(c, tid, topic, pid, 0, 0).error_code == E.NONE
        fencing = init(c, tid)
        assert fencing.error_code == E.CONCURRENT_TRANSACTIONS  # aborting first, as Kafka
        state = describe(c, tid)
        assert state.producer_epoch == 1  # the epoch of the abort
        assert state.transaction_state in ("PrepareAbort", "CompleteAbort")
        wait_state(c, tid, "CompleteAbort")
        r2 = init(c, tid)
        assert (r2.error_code, r2.producer_id, r2.producer_epoch) == (E.NONE, pid, 2)
        # the zombie is fenced everywhere
        assert txn_produce(c, tid, topic, pid, 0, 1).error_code == E.INVALID_PRODUCER_EPOCH
        assert end(c, tid, pid, 0, True) == E.PRODUCER_FENCED
        assert add(c, tid, pid, 0, {topic: [0]}) == {(topic, 0): E.PRODUCER_FENCED}


def test_transactional_produce_is_verified(broker: BrokerProcess, topic: str, tid: str) -> None:
    """KIP-890 part 1: a transactional batch for a partition not in the transaction is refused
    (INVALID_TXN_STATE; TRANSACTION_ABORTABLE from Produce v11), and nothing is written."""
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        r = init(c, tid)
        pid = r.producer_id
        refused = txn_produce(c, tid, topic, pid, 0, 0)
        assert refused.error_code == E.INVALID_TXN_STATE
        assert refused.error_message == "Partition was not added to the transaction"
        assert txn_produce(c, tid, topic, pid, 0, 0, 11).error_code == E.TRANSACTION_ABORTABLE
        assert txn_produce(c, "other", topic, pid, 0, 0).error_code == (
            E.INVALID_PRODUCER_ID_MAPPING
        )
        assert end_offset(broker.bootstrap, topic) == 0
        assert add(c, tid, pid, 0, {topic: [0]}) == {(topic, 0): E.NONE}
        assert txn_produce(c, tid, topic, pid, 0, 0).error_code == E.NONE
        assert end(c, tid, pid, 0, True) == E.NONE
        wait_state(c, tid, "CompleteCommit")
        # after the commit, a late batch of the ended transaction may not start a new one
        late = txn_produce(c, tid, topic, pid, 0, 1)
        assert late.error_code == E.INVALID_TXN_STATE
        assert end_offset(broker.bootstrap, topic) == 2  # the batch and its marker


def test_verify_only_add_partitions_come_only_from_brokers(
    broker: BrokerProcess, topic: str, tid: str
) -> None:
    """AddPartitionsToTxn v4+ (KIP-890 verification between brokers) acts as a broker: the
    embedded broker has none, so it is CLUSTER_AUTHORIZATION_FAILED as a whole and adds
    nothing (what it answers a broker: test_txn_coordinator.py, tests/cluster)."""
    create_topic(broker.bootstrap, topic, 2)
    with RawClient(broker.bootstrap) as c:
        pid = init(c, tid).producer_id
        assert add(c, tid, pid, 0, {topic: [0]}) == {(topic, 0): E.NONE}
        before = state_end(broker.bootstrap, tid)
        for verify_only in (True, False):
            request = AddPartitionsToTxnRequest(
                transactions=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                        transactional_id=tid,
                        producer_id=pid,
                        producer_epoch=0,
                        verify_only=verify_only,
                        topics=[
                            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                                name=topic, partitions=[0, 1]
                            )
                        ],
                    )
                ]
            )
            for version in (4, 5):
                response = c.request(request, version)
                assert response.error_code == E.CLUSTER_AUTHORIZATION_FAILED
                assert response.results_by_transaction == []
        assert state_end(broker.bootstrap, tid) == before
        assert [(t.topic, t.partitions) for t in describe(c, tid).topics] == [(topic, [0])]


def offset_fetch(c: RawClient, group: str, topic: str, stable: bool) -> tuple[int, int]:
    request = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])],
        require_stable=stable,
    )
    (p,) = c.request(request, 7).topics[0].partitions
    return p.error_code, p.committed_offset


def txn_offset_commit(
    c: RawClient,
    tid: str,
    group: str,
    pid: int,
    epoch: int,
    offsets: dict[tuple[str, int], int],
    version: int = 3,
    **fields: Any,
) -> dict[tuple[str, int], int]:
    request = txn_offset_commit_request(tid, group, pid, epoch, offsets, "m", **fields)
    response = c.request(request, version)
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


def add_offsets(c: RawClient, tid: str, pid: int, epoch: int, group: str, version: int = 3) -> int:
    request = AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
    )
    return int(c.request(request, version).error_code)


def test_transactional_offsets_visible_only_once_committed(
    broker: BrokerProcess, topic: str, tid: str
) -> None:
    create_topic(broker.bootstrap, topic)
    group = f"g-{tid}"
    with RawClient(broker.bootstrap) as c:
        pid = init(c, tid).producer_id
        c.request(FindCoordinatorRequest(key=group, key_type=0), 3)
        # not added to the transaction yet: verification refuses it
        assert txn_offset_commit(c, tid, group, pid, 0, {(topic, 0): 5}) == {
            (topic, 0): E.INVALID_TXN_STATE
        }
        assert txn_offset_commit(c, tid, group, pid, 0, {(topic, 0): 5}, 4) == {
            (topic, 0): E.TRANSACTION_ABORTABLE
        }
        assert add_offsets(c, "never-initialized", pid, 0, group) == E.INVALID_PRODUCER_ID_MAPPING
        assert add_offsets(c, tid, pid, 0, group) == E.NONE
        assert txn_offset_commit(c, tid, group, pid, 0, {(topic, 0): 5, ("no-such", 0): 1}) == {
            (topic, 0): E.NONE,
            ("no-such", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert offset_fetch(c, group, topic, stable=False) == (E.NONE, -1)  # not visible yet
        assert offset_fetch(c, group, topic, stable=True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
        # v3+ names the member: this group has no such member
        assert txn_offset_commit(
            c, tid, group, pid, 0, {(topic, 0): 6}, generation_id=1, member_id="m-1"
        ) == {(topic, 0): E.UNKNOWN_MEMBER_ID}
        assert end(c, tid, pid, 0, True) == E.NONE
        wait_state(c, tid, "CompleteCommit")  # the markers are written: the offsets visible
        assert offset_fetch(c, group, topic, stable=True) == (E.NONE, 5)
        # an aborted transaction's offsets are dropped
        assert add_offsets(c, tid, pid, 0, group) == E.NONE
        assert txn_offset_commit(c, tid, group, pid, 0, {(topic, 0): 9}) == {(topic, 0): E.NONE}
        assert end(c, tid, pid, 0, False) == E.NONE
        wait_state(c, tid, "CompleteAbort")
        assert offset_fetch(c, group, topic, stable=True) == (E.NONE, 5)
        # a fenced producer's commit
        init(c, tid)
        assert txn_offset_commit(c, tid, group, pid, 0, {(topic, 0): 7}) == {
            (topic, 0): E.INVALID_PRODUCER_EPOCH
        }


def test_list_transactions(broker: BrokerProcess, topic: str, tid: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        pid = init(c, tid).producer_id
        add(c, tid, pid, 0, {topic: [0]})
        other = f"{tid}-done"
        init(c, other)

        def listed(version: int = 1, **filters: Any) -> tuple[int, dict[str, str], list[str]]:
            r = c.request(ListTransactionsRequest(**filters), version)
            mine = {
                s.transactional_id: s.transaction_state
                for s in r.transaction_states
                if s.transactional_id in (tid, other)
            }
            return r.error_code, mine, list(r.unknown_state_filters)

        assert listed(0) == (E.NONE, {tid: "Ongoing", other: "Empty"}, [])
        assert listed(state_filters=["Ongoing", "Bogus"]) == (E.NONE, {tid: "Ongoing"}, ["Bogus"])
        assert listed(producer_id_filters=[pid]) == (E.NONE, {tid: "Ongoing"}, [])
        # none has run for an hour; an Empty id has no start time, so Kafka lists it
        assert listed(duration_filter=3_600_000) == (E.NONE, {other: "Empty"}, [])
        assert describe(c, "no-such-id").error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        assert describe(c, "").error_code == E.INVALID_REQUEST
