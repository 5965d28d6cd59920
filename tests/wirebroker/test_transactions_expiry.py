"""Transactions nobody finishes: the coordinator aborts one past its ``transaction.timeout.ms``
and fences its producer; a hanging one (data on a partition that no coordinator knows of) is
found and aborted with Kafka's ``kafka-transactions`` tool (``find-hanging``, ``abort``).

The broker checks for timed-out transactions every 500 ms
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``) and has KIP-890's partition
verification off (``transaction.partition.verification.enable=false``), the only way a client
can leave a hanging transaction behind on Kafka 3.9. With ``WIREBROKER_CLUSTER_TARGET=kafka``
the same tests run against Apache Kafka 3.9 (how they were checked).
"""

from __future__ import annotations

import pytest

from compat import transactions
from compat.clients import java
from compat.raw import create_topic
from compat.transactions import log_layout, wait_stable
from compat.transactions_raw import txn_produce
from compat.txn_clients import CLIENTS, TxnClient, error_of, open_client
from tests.wirebroker.helpers import RawClient
from wirebroker.zookeeper_server import jars_available

pytestmark = pytest.mark.integration

BROKER_PROPERTIES = {
    **transactions.BROKER_PROPERTIES,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "transaction.partition.verification.enable": "false",
}
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"
TIMEOUT_MS = 2000

#: What each client's commit of a transaction the coordinator aborted (timed out) gets, as on
#: Kafka 3.9: the abort bumped the producer's epoch, so the producer is fenced.
FENCED_AFTER_TIMEOUT = {
    "confluent-kafka": "_FENCED",
    "java": "ProducerFencedException",
    "kafka-python": "ProducerFencedError",
    "aiokafka": "ProducerFenced",
}


@pytest.fixture(scope="module")
def bootstrap(target_bootstrap: str) -> str:
    if not jars_available():
        pytest.skip("no Kafka jars for the Java client and kafka-transactions: run `make jars`")
    return target_bootstrap


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", CLIENTS)
def test_timed_out_transaction_is_aborted_and_its_producer_fenced(
    bootstrap: str, client: str
) -> None:
    topic = f"timed-out-{client}"
    create_topic(bootstrap, topic)
    c: TxnClient = open_client(client, bootstrap, f"{topic}-txn", TIMEOUT_MS)
    try:
        c.init()
        c.begin()
        c.send(topic, 0, "k", "never-committed")
        assert c.flush() == [0]
        wait_stable(bootstrap, topic)  # the coordinator's abort marker, once the timeout passed
        assert log_layout(bootstrap, topic) == [
            (0, "txn", "never-committed"),
            (1, "ABORT", "coordinator epoch 0"),
        ]
        assert error_of(c.commit) == FENCED_AFTER_TIMEOUT[client]
        assert c.read(topic, 0, "read_committed", 2) == []
    finally:
        c.close()


def _hanging(bootstrap: str) -> list[list[str]]:
    """``find-hanging`` on broker 0, every open transaction older than 0 minutes: its rows."""
    out = java(
        TRANSACTIONS_COMMAND,
        "--bootstrap-server",
        bootstrap,
        "find-hanging",
        "--broker-id",
        "0",
        "--max-transaction-timeout",
        "0",
    )
    rows = [line.split() for line in out.strip().splitlines()]
    assert rows and rows[0][:3] == ["Topic", "Partition", "ProducerId"], out
    return rows[1:]


@pytest.mark.timeout(180)
def test_hanging_transaction_is_found_and_aborted_with_the_tool(bootstrap: str) -> None:
    topic = "hanging"
    create_topic(bootstrap, topic)
    with RawClient(bootstrap) as raw:
        # A transactional batch from a producer no coordinator knows: nothing will end it.
        request = txn_produce("nobody-knows-me", topic, 4747, 3, 0, "stuck")
        (t,) = raw.request(request, 9).responses
        assert t.partition_responses[0].error_code == 0
    rows = _hanging(bootstrap)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [(topic, "0", "4747", "3")], rows
    java(
        TRANSACTIONS_COMMAND,
        "--bootstrap-server",
        bootstrap,
        "abort",
        "--topic",
        topic,
        "--partition",
        "0",
        "--start-offset",
        "0",
    )
    wait_stable(bootstrap, topic)
    assert log_layout(bootstrap, topic) == [
        (0, "txn", "stuck"),
        (1, "ABORT", "coordinator epoch 0"),
    ]
    assert _hanging(bootstrap) == []
