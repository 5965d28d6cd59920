"""Transactions under ACLs on an embedded broker, with confluent-kafka's transactional producer
logging in with SASL/PLAIN, raw requests and Kafka's `kafka-transactions`.

alice may only do what her ACLs allow: no transaction without WRITE on her transactional id;
a transaction touching a topic she may not write is refused (and aborted, nothing of it
visible); offsets in a transaction need READ on the group and on the consumed topics. Other
principals see only the transactions they may DESCRIBE. `kafka-transactions abort` of a
hanging transaction works without an authorizer (as on Kafka) and, with one, needs ALTER on
the cluster; a client's COMMIT marker is refused either way (docs/security.md).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from compat.kafka_process import jars_available, run_kafka_tool
from protocol.errors import ErrorCode
from protocol.messages.describe_producers import DescribeProducersRequest
from protocol.messages.describe_transactions import DescribeTransactionsRequest
from protocol.messages.list_transactions import ListTransactionsRequest
from tests.broker_process import BrokerProcess, broker_process
from tests.wirebroker.secured import (
    ALTER,
    CLUSTER,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    acl,
    client_config,
    command_config,
    create_topics,
    embedded_properties,
    grant,
    login,
    sasl,
)

from .helpers import RawClient, create_topic, wait_until
from .test_transactions_wire import BROKER_PROPERTIES as RAW_TRANSACTIONS
from .test_transactions_wire import txn_produce, write_markers
from .test_txn_producer_clients import read_committed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TIMEOUT = 30.0
SECURED = embedded_properties()
BROKER_PROPERTIES = SECURED


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:8]


def alice_transactional(broker: BrokerProcess, tid: str) -> Producer:
    """A transactional producer logged in as alice, its transactions initialised."""
    producer = Producer({**client_config(sasl(broker), "alice"), "transactional.id": tid})
    producer.init_transactions(TIMEOUT)
    return producer


def alice_may_write(broker: BrokerProcess, tid: str, *topics: str) -> None:
    """New `topics`, and ACLs that let alice WRITE to them in transactions of `tid`."""
    create_topics(sasl(broker), *topics)
    grant(
        sasl(broker),
        acl(TRANSACTIONAL_ID, tid, "User:alice", WRITE),
        *(acl(TOPIC, topic, "User:alice", WRITE) for topic in topics),
    )


def admin_reads(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    """What a read_committed consumer logged in as the super user reads (see read_committed)."""
    return read_committed(
        sasl(broker), topic, 1, count, config=client_config(sasl(broker), "admin")
    )


def test_a_transaction_needs_write_on_its_transactional_id(broker: BrokerProcess, tag: str) -> None:
    topic, tid = f"out-{tag}", f"tx-{tag}"
    create_topics(sasl(broker), topic)
    grant(sasl(broker), acl(TOPIC, topic, "User:alice", WRITE))
    with pytest.raises(KafkaException) as raised:
        alice_transactional(broker, tid)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    grant(sasl(broker), acl(TRANSACTIONAL_ID, "tx-", "User:alice", WRITE, pattern=4))
    producer = alice_transactional(broker, tid)
    producer.begin_transaction()
    producer.produce(topic, b"allowed", partition=0)
    producer.commit_transaction(TIMEOUT)
    assert admin_reads(broker, topic, 1) == [b"allowed"]


def test_a_transaction_touching_a_topic_it_may_not_write_is_refused(
    broker: BrokerProcess, tag: str
) -> None:
    granted, secret, tid = f"out-{tag}", f"secret-{tag}", f"tx-{tag}"
    alice_may_write(broker, tid, granted)
    create_topics(sasl(broker), secret)
    grant(sasl(broker), acl(TOPIC, secret, "User:alice", DESCRIBE))  # known to her, not writable
    producer = alice_transactional(broker, tid)
    producer.begin_transaction()
    delivered: list[tuple[str, int | None]] = []

    def report(err: KafkaError | None, msg: Any) -> None:
        delivered.append((msg.topic(), err.code() if err else None))

    producer.produce(secret, b"secret", partition=0, on_delivery=report)
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(TIMEOUT)
    error = raised.value.args[0]
    assert error.txn_requires_abort() and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert [t for t, code in delivered if code is not None] == [secret]
    # nothing was added, so the coordinator has no transaction: librdkafka's abort (it sends
    # EndTxn) fails fatally with INVALID_TXN_STATE, exactly as on Kafka 3.9
    with pytest.raises(KafkaException) as raised:
        producer.abort_transaction(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.INVALID_TXN_STATE
    producer = alice_transactional(broker, tid)
    producer.begin_transaction()
    producer.produce(granted, b"alone", partition=0)
    producer.commit_transaction(TIMEOUT)
    assert admin_reads(broker, granted, 1) == [b"alone"]
    assert admin_reads(broker, secret, 0) == []


def test_offsets_in_a_transaction_need_the_group_and_its_topics(
    broker: BrokerProcess, tag: str
) -> None:
    source, out, group, tid = f"in-{tag}", f"out-{tag}", f"g-{tag}", f"tx-{tag}"
    create_topics(sasl(broker), source)
    alice_may_write(broker, tid, out)
    producer = alice_transactional(broker, tid)
    consumer = Consumer({**client_config(sasl(broker), "alice"), "group.id": group})
    try:
        offsets = [CkTopicPartition(source, 0, 5)]

        def attempt() -> int | None:
            """One consume-transform-produce; the error code its offsets got (None: committed)."""
            producer.begin_transaction()
            producer.produce(out, b"v", partition=0)
            assert producer.flush(TIMEOUT) == 0  # its partition is in the transaction
            try:
                producer.send_offsets_to_transaction(
                    offsets, consumer.consumer_group_metadata(), TIMEOUT
                )
                producer.commit_transaction(TIMEOUT)
            except KafkaException as e:
                producer.abort_transaction(TIMEOUT)
                return int(e.args[0].code())
            return None

        # AddOffsetsToTxn: READ on the group
        assert attempt() == KafkaError.GROUP_AUTHORIZATION_FAILED
        # TxnOffsetCommit: READ on the consumed topic too
        grant(sasl(broker), acl(GROUP, group, "User:alice", READ))
        assert attempt() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        grant(sasl(broker), acl(TOPIC, source, "User:alice", READ))
        assert attempt() is None
        committed = consumer.committed([CkTopicPartition(source, 0)], TIMEOUT)
        assert [tp.offset for tp in committed] == [5]
    finally:
        consumer.close()
    assert admin_reads(broker, out, 1) == [b"v"]  # the two refused attempts were aborted


def test_transactions_are_shown_only_to_who_may_describe_them(
    broker: BrokerProcess, tag: str
) -> None:
    topic, hidden, tid = f"out-{tag}", f"hidden-{tag}", f"tx-{tag}"
    alice_may_write(broker, tid, topic, hidden)
    producer = alice_transactional(broker, tid)
    producer.begin_transaction()
    producer.produce(topic, b"a", partition=0)
    producer.produce(hidden, b"b", partition=0)
    assert producer.flush(TIMEOUT) == 0

    def seen_by(user: str) -> tuple[list[str], Any]:
        with RawClient(sasl(broker), plain=login(user)) as c:
            listed = c.request(ListTransactionsRequest(), 1)
            (state,) = c.request(
                DescribeTransactionsRequest(transactional_ids=[tid]), 0
            ).transaction_states
        return [s.transactional_id for s in listed.transaction_states], state

    listed, state = seen_by("bob")
    assert tid not in listed
    assert (state.error_code, state.topics) == (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, [])
    grant(
        sasl(broker),
        acl(TRANSACTIONAL_ID, tid, "User:bob", DESCRIBE),
        acl(TOPIC, topic, "User:bob", DESCRIBE),
    )
    listed, state = seen_by("bob")
    assert tid in listed
    assert (state.error_code, state.transaction_state) == (0, "Ongoing")
    assert [(t.topic, t.partitions) for t in state.topics] == [(topic, [0])]  # not `hidden`
    _, state = seen_by("alice")  # WRITE implies DESCRIBE
    assert sorted(t.topic for t in state.topics) == sorted([topic, hidden])
    producer.commit_transaction(TIMEOUT)


# --------------------------------------------------------------------------- kafka-transactions


def hanging_transaction(bootstrap: str, topic: str, plain: tuple[str, str] | None = None) -> int:
    """A transaction no coordinator knows (a raw batch an hour old, KIP-890 verification off):
    what `kafka-transactions find-hanging` finds. Its producer id."""
    producer_id = 4242
    with RawClient(bootstrap, plain=plain) as c:
        hour_ago = int(time.time() * 1000) - 3_600_000
        answer = txn_produce(c, topic, producer_id, 0, [b"hanging"], timestamp=hour_ago)
        assert answer.error_code == 0, answer
    return producer_id


def transactions_tool(bootstrap: str, config: Path | None, *args: str) -> tuple[int, str]:
    options = ["--command-config", str(config)] if config is not None else []
    done = run_kafka_tool(
        "org.apache.kafka.tools.TransactionsCommand",
        ["--bootstrap-server", bootstrap, *options, *args],
        check=False,
    )
    return done.returncode, done.stdout.decode() + done.stderr.decode()


def ongoing_start(bootstrap: str, topic: str, plain: tuple[str, str] | None = None) -> int:
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
    )
    with RawClient(bootstrap, plain=plain) as c:
        (state,) = c.request(request, 0).topics[0].partitions[0].active_producers
    return int(state.current_txn_start_offset)


@pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")
def test_kafka_transactions_abort_without_an_authorizer(tmp_path: Path) -> None:
    with broker_process(tmp_path, RAW_TRANSACTIONS) as broker:
        topic = "stuck"
        create_topic(broker.bootstrap, topic)
        producer_id = hanging_transaction(broker.bootstrap, topic)
        code, out = transactions_tool(broker.bootstrap, None, "find-hanging", "--broker-id", "0")
        rows = [line.split()[:3] for line in out.splitlines()]
        assert code == 0 and [topic, "0", str(producer_id)] in rows, out
        code, out = transactions_tool(
            broker.bootstrap, None, "abort", "--topic", topic, "--partition", "0",
            "--start-offset", "0",
        )  # fmt: skip
        assert code == 0, out
        assert ongoing_start(broker.bootstrap, topic) == -1
        # a client's COMMIT marker is still refused, authorizer or not
        with RawClient(broker.bootstrap) as c:
            assert txn_produce(c, topic, producer_id + 1, 0, [b"x"]).error_code == 0
            assert write_markers(c, [(producer_id + 1, 0, 0, True, {topic: [0]})]) == {
                (producer_id + 1, topic, 0): ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            }


@pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")
def test_kafka_transactions_abort_needs_alter_on_the_cluster(tmp_path: Path) -> None:
    with broker_process(tmp_path, {**SECURED, **RAW_TRANSACTIONS}) as broker:
        topic = "stuck"
        create_topics(sasl(broker), topic)
        hanging_transaction(sasl(broker), topic, login("admin"))
        grant(sasl(broker), acl(TOPIC, topic, "User:alice", READ))  # DescribeProducers
        alice = command_config(tmp_path, "alice")
        abort = ("abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
        code, out = transactions_tool(sasl(broker), alice, *abort)
        assert code != 0 and "failed due to cluster authorization error" in out, out
        assert ongoing_start(sasl(broker), topic, login("admin")) == 0
        grant(sasl(broker), acl(CLUSTER, "kafka-cluster", "User:alice", ALTER))
        code, out = transactions_tool(sasl(broker), alice, *abort)
        assert code == 0, out
        wait_until(
            lambda: ongoing_start(sasl(broker), topic, login("admin")) == -1,
            what="the hanging transaction aborted",
        )
