"""Transactions on the wire with raw requests: transactional Produce, WriteTxnMarkers (its
answers and Kafka's error codes, nothing written when refused), and what read_committed and
read_uncommitted Fetch and ListOffsets then see.

A client may write ABORT markers (as `kafka-transactions abort` does) but not COMMIT markers,
which only a transaction coordinator writes (docs/security.md): the transactions these tests
commit are committed by the embedded broker's coordinator (`Coordinated`)."""

from __future__ import annotations

import time
from typing import Any

from protocol.errors import ErrorCode
from protocol.messages.describe_producers import DescribeProducersRequest
from protocol.messages.end_txn import EndTxnRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.record_batch import RecordBatchView, SimpleRecord
from protocol.record_builder import decode_end_txn_marker
from protocol.records import iter_batches, iter_records
from tests.broker_process import BrokerProcess

from .helpers import (
    RawClient,
    add_partitions_request,
    create_topic,
    end_offset,
    fetch_raw,
    fetch_request,
    find_coordinator,
    produce_request,
    txn_markers_request,
    wait_until,
)
from .test_txn_coordinator_wire import wait_state

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
#: These tests write transactions without a coordinator (raw batches, then WriteTxnMarkers):
#: the KIP-890 check with the coordinator would refuse their batches.
BROKER_PROPERTIES = {"transaction.partition.verification.enable": "false"}
#: Transactional records carry a transactional id (Kafka refuses them without one).
RAW_TRANSACTIONAL_ID = "raw-transactions"


def txn_produce(
    c: RawClient,
    topic: str,
    pid: int,
    seq: int,
    values: list[bytes],
    *,
    epoch: int = 0,
    partition: int = 0,
    transactional: bool = True,
    transactional_id: str = RAW_TRANSACTIONAL_ID,
    timestamp: int | None = None,
    **batch_args: Any,
) -> Any:
    now = int(time.time() * 1000) if timestamp is None else timestamp
    records = [SimpleRecord(b"k", v, (), now) for v in values]
    request = produce_request(
        topic,
        partition,
        records,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
        **batch_args,
    )
    if transactional:
        request.transactional_id = transactional_id
    return c.request(request, 9).responses[0].partition_responses[0]


class Coordinated:
    """A transactional producer whose transactions the broker's coordinator ends (its COMMIT
    markers can come from nowhere else): InitProducerId, AddPartitionsToTxn before the first
    batch of each partition, EndTxn, and a wait until the markers are written."""

    def __init__(self, c: RawClient, transactional_id: str) -> None:
        self.c = c
        self.transactional_id = transactional_id
        find_coordinator(c, FindCoordinatorRequest(key=transactional_id, key_type=1), 3)
        answer = c.request(
            InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000),
            4,
        )
        assert answer.error_code == 0, answer
        self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
        self.sequences: dict[tuple[str, int], int] = {}
        self.added: set[tuple[str, int]] = set()

    def produce(self, topic: str, values: list[bytes], partition: int = 0, **kw: Any) -> Any:
        if (topic, partition) not in self.added:
            request = add_partitions_request(
                self.transactional_id, self.producer_id, self.epoch, {topic: [partition]}
            )
            wait_until(
                lambda: (
                    self.c.request(request, 3)
                    .results_by_topic_v3_and_below[0]
                    .results_by_partition[0]
                    .partition_error_code
                    == 0
                ),
                what="AddPartitionsToTxn",
            )  # CONCURRENT_TRANSACTIONS while the previous transaction's markers are written
            self.added.add((topic, partition))
        seq = self.sequences.get((topic, partition), 0)
        answer = txn_produce(
            self.c,
            topic,
            self.producer_id,
            seq,
            values,
            epoch=self.epoch,
            partition=partition,
            transactional_id=self.transactional_id,
            **kw,
        )
        if answer.error_code == 0:
            self.sequences[(topic, partition)] = seq + len(values)
        return answer

    def end(self, commit: bool) -> None:
        """EndTxn, then wait until every marker is written."""
        request = EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            committed=commit,
        )
        assert self.c.request(request, 3).error_code == 0
        self.added.clear()
        wait_state(self.c, self.transactional_id, "CompleteCommit" if commit else "CompleteAbort")


def write_markers(
    c: RawClient,
    markers: list[tuple[int, int, int, bool, dict[str, list[int]]]],
    version: int = 1,
) -> dict[tuple[int, str, int], int]:
    """WriteTxnMarkers of (producer id, producer epoch, coordinator epoch, commit, partitions);
    the error code of each (producer id, topic, partition) answered."""
    response = c.request(txn_markers_request(markers), version)
    return {
        (m.producer_id, t.name, p.partition_index): p.error_code
        for m in response.markers
        for t in m.topics
        for p in t.partitions
    }


def log_end(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The log end offset (the high watermark of a one-broker partition)."""
    return end_offset(bootstrap, topic, partition)


def test_markers_end_transactions_and_are_stored_as_control_batches(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    with RawClient(broker.bootstrap) as c:
        assert txn_produce(c, topic, 500, 0, [b"a", b"b"]).error_code == 0
        assert txn_produce(c, topic, 501, 0, [b"x"], partition=1).error_code == 0
        answers = write_markers(
            c,
            [
                (500, 0, 3, False, {topic: [0]}),
                (501, 0, 3, False, {topic: [1]}),
                (500, 0, 3, False, {"no-such-topic": [0]}),
            ],
        )
        assert answers == {
            (500, topic, 0): ErrorCode.NONE,
            (501, topic, 1): ErrorCode.NONE,
            (500, "no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        request = DescribeProducersRequest(
            topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
        )
        (state,) = c.request(request, 0).topics[0].partitions[0].active_producers
        assert (state.producer_id, state.coordinator_epoch, state.current_txn_start_offset) == (
            500,
            3,
            -1,
        )
        committer = Coordinated(c, f"{topic}-committer")
        assert committer.produce(topic, [b"c"]).base_offset == 3
        committer.end(commit=True)
    batches = list(iter_batches(bytes(fetch_raw(broker.bootstrap, topic, 0).records)))
    assert [b.is_control for b in batches] == [False, True, False, True]
    abort, commit = batches[1], batches[3]
    assert isinstance(abort, RecordBatchView) and abort.is_transactional
    assert (abort.base_offset, abort.producer_id, abort.producer_epoch) == (2, 500, 0)
    (record,) = iter_records(abort)
    assert bytes(record.key or b"") == b"\x00\x00\x00\x00"  # version 0, ABORT
    assert decode_end_txn_marker(record.value) == (0, 3)
    assert isinstance(commit, RecordBatchView) and commit.is_transactional
    assert (commit.base_offset, commit.producer_id) == (4, committer.producer_id)
    (record,) = iter_records(commit)
    assert bytes(record.key or b"") == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert decode_end_txn_marker(record.value) == (0, 0)  # the embedded coordinator's epoch


def test_commit_markers_come_only_from_a_coordinator(broker: BrokerProcess, topic: str) -> None:
    """A client's COMMIT marker is refused (CLUSTER_AUTHORIZATION_FAILED on every partition of
    the request, its ABORT markers too) and writes nothing."""
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        assert txn_produce(c, topic, 550, 0, [b"a"]).error_code == 0
        end = log_end(broker.bootstrap, topic)
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        for version in (0, 1):
            assert write_markers(
                c,
                [(550, 0, 0, True, {topic: [0]}), (551, 0, 0, False, {topic: [0]})],
                version=version,
            ) == {(550, topic, 0): refused, (551, topic, 0): refused}
        assert log_end(broker.bootstrap, topic) == end
        assert write_markers(c, [(550, 0, 0, False, {topic: [0]})]) == {(550, topic, 0): 0}
        assert log_end(broker.bootstrap, topic) == end + 1


def test_refused_markers_write_nothing(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        assert txn_produce(c, topic, 600, 0, [b"a"], epoch=2).error_code == 0
        assert write_markers(c, [(600, 2, 5, False, {topic: [0]})]) == {(600, topic, 0): 0}
        assert txn_produce(c, topic, 600, 1, [b"b"], epoch=2).error_code == 0
        end = log_end(broker.bootstrap, topic)
        assert write_markers(c, [(600, 1, 5, False, {topic: [0]})], version=0) == {
            (600, topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH
        }
        assert write_markers(c, [(600, 2, 4, False, {topic: [0]})]) == {
            (600, topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED
        }
        assert log_end(broker.bootstrap, topic) == end
        # a non-transactional batch while the transaction is ongoing
        response = txn_produce(c, topic, 600, 2, [b"c"], epoch=2, transactional=False)
        assert response.error_code == ErrorCode.INVALID_TXN_STATE
        assert log_end(broker.bootstrap, topic) == end
        assert write_markers(c, [(600, 2, 5, False, {topic: [0]})]) == {(600, topic, 0): 0}
        assert log_end(broker.bootstrap, topic) == end + 1


def test_markers_on_consumer_offsets_partitions(broker: BrokerProcess) -> None:
    """A marker for a `__consumer_offsets` partition is written and the group coordinator told
    (its transactional offsets are the coordinator's business)."""
    offsets = {"__consumer_offsets": [0, 1]}
    with RawClient(broker.bootstrap) as c:
        c.request(FindCoordinatorRequest(key="g"), 1)  # creates __consumer_offsets
        answer = wait_until(
            lambda: (
                (a := write_markers(c, [(700, 0, 0, False, offsets)]))
                and set(a.values()) == {ErrorCode.NONE}
                and a
            ),
            what="markers on __consumer_offsets",
        )
    assert answer == {(700, "__consumer_offsets", 0): 0, (700, "__consumer_offsets", 1): 0}


def interleaved(c: RawClient, topic: str) -> tuple[Coordinated, Coordinated]:
    """0 p0 | 1-2 A | 3 B | 4 COMMIT A | 5 A | 6 ABORT B | 7 ABORT A | 8 C (open) | 9 p1;
    A and C are the coordinator's transactional producers, B (902) a raw one."""
    a, c_ = Coordinated(c, f"{topic}-a"), Coordinated(c, f"{topic}-c")
    assert txn_produce(c, topic, 911, 0, [b"p0"], transactional=False).base_offset == 0
    assert a.produce(topic, [b"a1", b"a2"]).base_offset == 1
    assert txn_produce(c, topic, 902, 0, [b"b1"]).base_offset == 3
    a.end(commit=True)
    assert a.produce(topic, [b"a3"]).base_offset == 5
    assert write_markers(c, [(902, 0, 0, False, {topic: [0]})]) == {(902, topic, 0): 0}
    a.end(commit=False)
    assert c_.produce(topic, [b"c1"]).base_offset == 8
    assert txn_produce(c, topic, 911, 1, [b"p1"], transactional=False).base_offset == 9
    return a, c_


def data_values(records: Any) -> list[tuple[int, bytes]]:
    out = []
    for batch in iter_batches(bytes(records or b"")):
        if isinstance(batch, RecordBatchView) and batch.is_control:
            continue
        out += [(r.offset, bytes(r.value or b"")) for r in iter_records(batch)]
    return out


def test_read_committed_fetch_and_list_offsets(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        a, c_ = interleaved(c, topic)
        committed = fetch_raw(broker.bootstrap, topic, isolation_level=READ_COMMITTED)
        assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [
            (902, 3),
            (a.producer_id, 5),
        ]
        assert [o for o, _ in data_values(committed.records)] == [0, 1, 2, 3, 5]
        uncommitted = fetch_raw(broker.bootstrap, topic, isolation_level=READ_UNCOMMITTED)
        assert uncommitted.last_stable_offset == 8 and uncommitted.aborted_transactions is None
        assert [o for o, _ in data_values(uncommitted.records)] == [0, 1, 2, 3, 5, 8, 9]
        assert end_offset(broker.bootstrap, topic, isolation_level=READ_COMMITTED) == 8
        assert end_offset(broker.bootstrap, topic, isolation_level=READ_UNCOMMITTED) == 10
        # a read from past the aborted transactions does not list them
        later = fetch_raw(broker.bootstrap, topic, offset=8, isolation_level=READ_COMMITTED)
        assert later.aborted_transactions == [] and data_values(later.records) == []
        c_.end(commit=True)
        assert end_offset(broker.bootstrap, topic, isolation_level=READ_COMMITTED) == 11
        later = fetch_raw(broker.bootstrap, topic, offset=8, isolation_level=READ_COMMITTED)
        assert later.last_stable_offset == 11
        assert data_values(later.records) == [(8, b"c1"), (9, b"p1")]
        # Fetch v4 carries the LSO too
        assert (
            fetch_raw(
                broker.bootstrap, topic, isolation_level=READ_COMMITTED, version=4
            ).last_stable_offset
            == 11
        )


def test_read_committed_long_poll_wakes_when_the_lso_moves(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as c:
        producer = Coordinated(c, f"{topic}-p")
        assert producer.produce(topic, [b"x"]).error_code == 0
        request = fetch_request(
            topic, isolation_level=READ_COMMITTED, max_wait_ms=20_000, min_bytes=1
        )
        with RawClient(broker.bootstrap) as waiting:
            correlation_id = waiting.send(request, 12)
            # the open transaction's data does not answer the poll...
            assert producer.produce(topic, [b"y"]).error_code == 0
            started = time.monotonic()
            # ...its COMMIT does, at once
            producer.end(commit=True)
            response = waiting.receive(FetchRequest, 12, correlation_id)
            assert time.monotonic() - started < 10
    (p,) = response.responses[0].partitions
    assert p.last_stable_offset == 3
    assert data_values(p.records) == [(0, b"x"), (1, b"y")]
