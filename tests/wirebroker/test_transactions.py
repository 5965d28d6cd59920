"""Transactions through real clients against a wirebroker process: the scenarios of
``compat/transactions.py`` (commit/abort interleaved with one left open, consume-transform-
produce with the offsets in the transaction, zombie fencing) with confluent-kafka, the Java
client, kafka-python and aiokafka. Each observation must be the one Kafka 3.9 gives
(``compat/golden/transactions.json``, checked against a live Kafka by the compat suite):
read_committed consumers get exactly the committed records, read_uncommitted ones every data
record, no client hands a control record to the application, and a fenced instance gets the
error it gets from Kafka. And bad input as raw requests (``compat/transactions_raw.py``):
Kafka's error codes, and nothing written that Kafka does not write.
"""

from __future__ import annotations

import pytest

from compat import transactions, transactions_raw, txn_clients
from compat.test_differential import differences
from tests.broker_process import BrokerProcess
from wirebroker.zookeeper_server import jars_available

pytestmark = pytest.mark.integration

BROKER_PROPERTIES = transactions.BROKER_PROPERTIES


@pytest.mark.timeout(180)
@pytest.mark.parametrize("client", txn_clients.CLIENTS)
@pytest.mark.parametrize("scenario", sorted(transactions.SCENARIOS))
def test_scenario_as_on_kafka(broker: BrokerProcess, scenario: str, client: str) -> None:
    if client == "java" and not jars_available():
        pytest.skip("no Kafka jars for the Java client: run `make jars`")
    got = transactions.observe(scenario, client, broker.bootstrap)
    want = transactions.golden("transactions", scenario, client)
    assert got == want, "differs from Kafka 3.9:\n" + "\n".join(differences(got, want))


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=why))
        if (why := transactions_raw.OPEN_FINDINGS.get(c))
        else c
        for c in sorted(transactions_raw.CASES)
    ],
)
def test_bad_input_as_on_kafka(broker: BrokerProcess, case: str) -> None:
    got = transactions_raw.observe(case, broker.bootstrap)
    want = transactions.golden("transactions_raw", case)
    assert got == want, "differs from Kafka 3.9:\n" + "\n".join(differences(got, want))
