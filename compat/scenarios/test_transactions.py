"""Transactions through each client that has a transactional producer: confluent-kafka, the
Java client (``compat/java/TxnClient.java``), kafka-python (3.x) and aiokafka; kcat has none.
And bad transactional input as raw requests. Scenarios and observations are in
``compat/transactions.py`` and ``compat/transactions_raw.py`` (shared with ``tests/``); on
Kafka the observation must also be the golden one ``tests/`` holds wirebroker to.
"""

from __future__ import annotations

from typing import Any

import pytest

from compat import transactions, transactions_raw, txn_clients
from compat.test_differential import differences


@pytest.mark.timeout(180)
@pytest.mark.parametrize("client", txn_clients.CLIENTS)
@pytest.mark.parametrize("scenario", sorted(transactions.SCENARIOS))
def test_transactions(scenario: str, client: str, observe: Any) -> None:
    def run(t: Any) -> Any:
        got = transactions.observe(scenario, client, t.bootstrap)
        if t.name == "kafka":
            transactions.check_golden("transactions", (scenario, client), got)
        return got

    observe(run, differences)


@pytest.mark.parametrize("case", sorted(transactions_raw.CASES))
def test_bad_input(case: str, observe: Any, request: pytest.FixtureRequest) -> None:
    if case in transactions_raw.OPEN_FINDINGS and "wirebroker" in request.node.name:
        reason = transactions_raw.OPEN_FINDINGS[case]
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))

    def run(t: Any) -> Any:
        got = transactions_raw.observe(case, t.bootstrap)
        if t.name == "kafka":
            transactions.check_golden("transactions_raw", (case,), got)
        return got

    observe(run, differences)
