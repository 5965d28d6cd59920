"""Bad transactional input as raw requests (our codec): Kafka's answers, and nothing written.

Shared by ``compat/`` (Kafka then wirebroker, compared) and ``tests/`` (wirebroker against
``compat/golden/transactions_raw.json``, Kafka 3.9's answers). Each case sends its requests on
one connection and observes every response (as ``compat.test_differential.plain`` data, with
producer ids renamed ``pid0``, ``pid1``... in order of appearance, record bytes in hex, and
partition results in partition order)
and, at the end, what the topic holds:

- ``end_txn_unknown_id``: EndTxn (v0 and v3) for a transactional id nobody initialised.
- ``stale_epoch``: a second InitProducerId bumps the epoch; AddPartitionsToTxn, a transactional
  Produce and EndTxn with the first epoch; a Produce to a partition not in the transaction.
- ``add_partitions_unknown_topic``: AddPartitionsToTxn naming a topic that does not exist (and
  a partition that does not), beside one that does; the topic is not created.
- ``write_txn_markers_from_a_client``: WriteTxnMarkers sent by a client connection, an ABORT
  marker as ``kafka-transactions abort`` sends, for a producer with no transaction and for an
  unknown partition. (A client's COMMIT marker is refused by wirebroker on purpose, where Kafka
  writes it: ``compat/test_acl_matrix.py::test_markers_from_clients``.)
- ``coordinator_state_machine``: one transaction through the coordinator's states, and what
  each state refuses (EndTxn with nothing ongoing, an abort after a commit...).
- ``init_producer_id_inputs``: transaction timeouts out of range, an empty transactional id, a
  KIP-360 producer id and epoch nobody was given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from compat.raw import create_topic
from compat.test_differential import plain
from compat.transactions import log_layout, wait_stable
from compat.txn_clients import deadline_loop
from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from protocol.messages.describe_transactions import DescribeTransactionsRequest
from protocol.messages.end_txn import EndTxnRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.list_transactions import ListTransactionsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.record_batch import SimpleRecord
from protocol.schema import Message
from tests.wirebroker.helpers import (
    RawClient,
    add_partitions_request,
    produce_request,
    txn_markers_request,
    txn_offset_commit_request,
)

TS = 1_700_000_000_000
COMMIT, ABORT = True, False


class Session:
    """One connection; every answer kept as plain data under its label."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.client = RawClient(bootstrap, client_id="compat-txn")
        self.seen: list[tuple[str, Any]] = []

    def ask(
        self,
        label: str,
        request: Message,
        version: int,
        until: Callable[[Any], bool] | None = None,
    ) -> Any:
        """Send ``request``; with ``until``, again (for up to 30 s) until it holds."""
        deadline = time.monotonic() + 30
        while True:
            response = self.client.request(request, version)
            if until is None or until(response) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.seen.append((label, plain(response, version)))
        return response

    def coordinator(self, transactional_id: str) -> None:
        self.ask(
            "find coordinator (until ok)",
            FindCoordinatorRequest(key_type=1, coordinator_keys=[transactional_id]),
            4,
            until=lambda r: r.coordinators[0].error_code == 0,
        )

    def init(self, transactional_id: str) -> tuple[int, int]:
        r = self.ask(
            "init producer id (until ok: the coordinator may still be loading)",
            InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000),
            4,
            until=lambda r: r.error_code == 0,
        )
        return r.producer_id, r.producer_epoch

    def topic(self, topic: str, ended: str | None = None) -> None:
        """What the topic holds, once no transaction is open on it and, with ``ended`` (a
        transactional id), once that transaction's markers are written: a transaction that
        added the partition and wrote nothing to it leaves the last stable offset at the high
        watermark while its marker is still on the way."""
        if ended is not None:
            check = deadline_loop(f"{ended}: its markers to be written")
            while True:
                (state,) = self.client.request(
                    DescribeTransactionsRequest(transactional_ids=[ended]), 0
                ).transaction_states
                if state.transaction_state in ("CompleteCommit", "CompleteAbort"):
                    break
                check()
                time.sleep(0.05)
        wait_stable(self.bootstrap, topic)
        self.seen.append(("topic", log_layout(self.bootstrap, topic)))

    def observation(self) -> list[Any]:
        pids: dict[int, str] = {}

        def rename(v: Any, key: str = "") -> Any:
            if isinstance(v, dict):
                if v.get("error_code"):  # an error's producer id is a placeholder (0 or -1)
                    return {k: x if k == "producer_id" else rename(x, k) for k, x in v.items()}
                return {k: rename(x, k) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                items = [rename(x) for x in v]
                if items and all(isinstance(x, dict) and "partition_index" in x for x in items):
                    # Kafka lists a response's failed partitions first; order carries nothing.
                    items.sort(key=lambda x: x["partition_index"])
                return items
            if key == "producer_id" and isinstance(v, int) and v >= 0:
                return pids.setdefault(v, f"pid{len(pids)}")
            if key == "transaction_start_time_ms" and isinstance(v, int) and v >= 0:
                return "*"  # the coordinator's clock
            if isinstance(v, bytes):  # record keys and values (a marker's are binary)
                return v.hex()
            return v

        self.client.close()
        return [[label, rename(r)] for label, r in self.seen]


def end_txn(transactional_id: str, pid: int, epoch: int, committed: bool) -> EndTxnRequest:
    return EndTxnRequest(
        transactional_id=transactional_id,
        producer_id=pid,
        producer_epoch=epoch,
        committed=committed,
    )


def txn_produce(
    transactional_id: str, topic: str, pid: int, epoch: int, sequence: int, value: str
) -> Message:
    """A transactional batch of one record to partition 0."""
    record = SimpleRecord(b"k", value.encode(), (), TS)
    request = produce_request(
        topic,
        0,
        [record],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )
    request.transactional_id = transactional_id
    return request


def end_txn_unknown_id(bootstrap: str, stem: str) -> list[Any]:
    s = Session(bootstrap)
    txn = f"{stem}-never-initialised"
    s.coordinator(txn)
    s.ask("end txn v0", end_txn(txn, 4242, 0, COMMIT), 0)
    s.ask("end txn v3", end_txn(txn, 4242, 0, COMMIT), 3)
    s.ask("end txn v3, abort", end_txn(txn, 4242, 0, ABORT), 3)
    return s.observation()


def stale_epoch(bootstrap: str, stem: str) -> list[Any]:
    topic, txn = f"{stem}-topic", f"{stem}-txn"
    create_topic(bootstrap, topic)
    s = Session(bootstrap)
    s.coordinator(txn)
    pid, old = s.init(txn)
    _, new = s.init(txn)
    s.ask("produce, partition not in the transaction", txn_produce(txn, topic, pid, new, 0, "x"), 9)
    s.ask("add partitions, old epoch", add_partitions_request(txn, pid, old, {topic: [0]}), 3)
    s.ask("add partitions, new epoch", add_partitions_request(txn, pid, new, {topic: [0]}), 3)
    s.ask("produce, old epoch", txn_produce(txn, topic, pid, old, 0, "old"), 9)
    s.ask("produce, new epoch", txn_produce(txn, topic, pid, new, 0, "new"), 9)
    s.ask("end txn v3, old epoch", end_txn(txn, pid, old, COMMIT), 3)
    s.ask("end txn v0, old epoch", end_txn(txn, pid, old, COMMIT), 0)
    s.ask("end txn v3, another producer id", end_txn(txn, pid + 1, new, COMMIT), 3)
    s.ask("end txn v3, new epoch", end_txn(txn, pid, new, COMMIT), 3)
    s.topic(topic)
    return s.observation()


def add_partitions_unknown_topic(bootstrap: str, stem: str) -> list[Any]:
    topic, txn, missing = f"{stem}-topic", f"{stem}-txn", f"{stem}-no-such-topic"
    create_topic(bootstrap, topic)
    s = Session(bootstrap)
    s.coordinator(txn)
    pid, epoch = s.init(txn)
    s.ask(
        "add an unknown topic beside a known one",
        add_partitions_request(txn, pid, epoch, {topic: [0, 7], missing: [0]}),
        3,
    )
    s.ask("add the known partition alone", add_partitions_request(txn, pid, epoch, {topic: [0]}), 3)
    s.ask("end txn, abort", end_txn(txn, pid, epoch, ABORT), 3)
    s.ask(
        "the unknown topic was not created",
        MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=missing)],
            allow_auto_topic_creation=False,
        ),
        12,
    )
    s.topic(topic, ended=txn)
    return s.observation()


def write_txn_markers_from_a_client(bootstrap: str, stem: str) -> list[Any]:
    topic = f"{stem}-topic"
    create_topic(bootstrap, topic)
    s = Session(bootstrap)
    s.ask(
        "write markers",
        txn_markers_request([(4343, 0, 0, ABORT, {topic: [0, 5], f"{stem}-no-such-topic": [0]})]),
        1,
    )
    s.topic(topic)
    return s.observation()


def coordinator_state_machine(bootstrap: str, stem: str) -> list[Any]:
    """One transaction through the coordinator's states, with the calls each state refuses:
    before InitProducerId, EndTxn with nothing ongoing, a repeated commit (a retry), an abort
    after the commit; DescribeTransactions and ListTransactions along the way; the offsets it
    committed for a group; what the topic holds."""
    topic, txn, group = f"{stem}-topic", f"{stem}-txn", f"{stem}-group"
    create_topic(bootstrap, topic)
    s = Session(bootstrap)
    s.coordinator(txn)
    s.ask(
        "find the group's coordinator (until ok)",
        FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
        4,
        until=lambda r: r.coordinators[0].error_code == 0,
    )
    s.ask("add partitions before init", add_partitions_request(txn, 5555, 0, {topic: [0]}), 3)
    s.ask("describe before init", DescribeTransactionsRequest(transactional_ids=[txn]), 0)
    pid, epoch = s.init(txn)
    s.ask("end txn, nothing ongoing", end_txn(txn, pid, epoch, COMMIT), 3)
    s.ask("add partitions", add_partitions_request(txn, pid, epoch, {topic: [0]}), 3)
    s.ask("describe ongoing", DescribeTransactionsRequest(transactional_ids=[txn]), 0)
    s.ask(
        "list by producer id",
        ListTransactionsRequest(state_filters=[], producer_id_filters=[pid]),
        0,
    )
    s.ask(
        "add offsets",
        AddOffsetsToTxnRequest(
            transactional_id=txn, producer_id=pid, producer_epoch=epoch, group_id=group
        ),
        3,
    )
    s.ask(
        "txn offset commit",
        txn_offset_commit_request(txn, group, pid, epoch, {(topic, 0): 7}, "m"),
        3,
    )
    s.ask("produce", txn_produce(txn, topic, pid, epoch, 0, "in"), 9)
    s.ask("end txn, commit", end_txn(txn, pid, epoch, COMMIT), 3)
    s.ask(
        "describe (until CompleteCommit: the markers are written)",
        DescribeTransactionsRequest(transactional_ids=[txn]),
        0,
        until=lambda r: r.transaction_states[0].transaction_state == "CompleteCommit",
    )
    s.ask("end txn, commit again (a retry)", end_txn(txn, pid, epoch, COMMIT), 3)
    s.ask("end txn, abort after the commit", end_txn(txn, pid, epoch, ABORT), 3)
    s.ask(
        "the group's offset (until stable)",
        OffsetFetchRequest(
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group,
                    topics=[
                        OffsetFetchRequest.OffsetFetchRequestTopics(
                            name=topic, partition_indexes=[0]
                        )
                    ],
                )
            ],
            require_stable=True,
        ),
        8,
        until=lambda r: (
            not r.groups[0].error_code and r.groups[0].topics[0].partitions[0].error_code == 0
        ),
    )
    s.topic(topic)
    return s.observation()


def init_producer_id_inputs(bootstrap: str, stem: str) -> list[Any]:
    """InitProducerId with what a coordinator must refuse: a timeout above
    ``transaction.max.timeout.ms`` or not positive, an empty transactional id, a KIP-360
    producer id and epoch for an id never initialised."""
    txn = f"{stem}-txn"
    s = Session(bootstrap)
    s.coordinator(txn)
    for label, timeout in (("above the maximum", 900_001), ("zero", 0), ("negative", -1)):
        s.ask(
            f"timeout {label}",
            InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=timeout),
            4,
        )
    s.ask(
        "empty transactional id",
        InitProducerIdRequest(transactional_id="", transaction_timeout_ms=60_000),
        4,
    )
    s.ask(
        "a producer id and epoch nobody was given",
        InitProducerIdRequest(
            transactional_id=txn,
            transaction_timeout_ms=60_000,
            producer_id=987654,
            producer_epoch=3,
        ),
        4,
    )
    return s.observation()


#: Cases where wirebroker still differs: the finding in compat/FINDINGS.md.
OPEN_FINDINGS: dict[str, str] = {}

CASES: dict[str, Callable[[str, str], list[Any]]] = {
    "end_txn_unknown_id": end_txn_unknown_id,
    "stale_epoch": stale_epoch,
    "add_partitions_unknown_topic": add_partitions_unknown_topic,
    "write_txn_markers_from_a_client": write_txn_markers_from_a_client,
    "coordinator_state_machine": coordinator_state_machine,
    "init_producer_id_inputs": init_producer_id_inputs,
}


def observe(case: str, bootstrap: str) -> list[Any]:
    return CASES[case](bootstrap, f"raw-{case.replace('_', '-')}")
