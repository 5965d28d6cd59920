"""Client quotas: kafka-configs on clients and users, AlterClientQuotas and DescribeClientQuotas
rules, and what throttling answers (throttle times compared as present or not: their exact
values follow each broker's clock).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from compat.clients import CONFIG_COMMAND, java
from compat.raw import create_topic
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from protocol.messages.produce import ProduceResponse
from protocol.record_batch import SimpleRecord
from tests.wirebroker.helpers import RawClient, produce_request

A = AlterClientQuotasRequest
D = DescribeClientQuotasRequest


def _entry(entity: list[tuple[str, str | None]], **ops: float | None) -> A.EntryData:
    return A.EntryData(
        entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        ops=[A.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in sorted(ops.items())],
    )


def _described(answer: Any) -> Any:
    if answer.entries is None:
        return answer.error_code, answer.error_message, None
    return (
        answer.error_code,
        answer.error_message,
        sorted(
            (
                sorted((e.entity_type, e.entity_name or "<null>") for e in entry.entity),
                sorted((v.key, v.value) for v in entry.values),
            )
            for entry in answer.entries
        ),
    )


def _altered(answer: Any) -> list[Any]:
    """Each entity's answer (Kafka's come from a map: one per entity, in no set order)."""
    return sorted(
        (
            sorted((e.entity_type, e.entity_name or "<null>") for e in entry.entity),
            entry.error_code,
            entry.error_message,
        )
        for entry in answer.entries
    )


def _lines(text: str) -> list[str]:
    text = re.sub(r"\s+at .*", "", text)  # Java stack frames
    return sorted(line.strip() for line in text.splitlines() if line.strip())


@pytest.mark.parametrize("client", ["java"])
def test_quota_tools(client: str, observe: Any) -> None:
    """kafka-configs --alter/--describe of clients, users, users' clients and defaults."""

    def run(t: Any) -> Any:
        bs = ["--bootstrap-server", t.bootstrap]
        out = []
        for entity, config in [
            (["--entity-type", "clients", "--entity-name", "tool app"], "producer_byte_rate=1024"),
            (["--entity-type", "clients", "--entity-default"], "consumer_byte_rate=2048"),
            (["--entity-type", "users", "--entity-name", "tool-user"], "request_percentage=50"),
            (
                ["--entity-type", "users", "--entity-default", "--entity-type", "clients"]
                + ["--entity-name", "tool app"],
                "controller_mutation_rate=10,producer_byte_rate=4096",
            ),
        ]:
            out.append(
                _lines(java(CONFIG_COMMAND, *bs, "--alter", *entity, "--add-config", config))
            )
        out.append(_lines(java(CONFIG_COMMAND, *bs, "--describe", "--entity-type", "clients")))
        out.append(_lines(java(CONFIG_COMMAND, *bs, "--describe", "--entity-type", "users")))
        out.append(
            _lines(
                java(
                    CONFIG_COMMAND,
                    *bs,
                    "--describe",
                    *("--entity-type", "users", "--entity-default", "--entity-type", "clients"),
                )
            )
        )
        entity = ["--entity-type", "clients", "--entity-name", "tool app"]
        bad = java(
            CONFIG_COMMAND,
            *bs,
            "--alter",
            *entity,
            "--add-config",
            "producer_byte_rate=1.5",
            check=False,
        )
        out.append([line for line in _lines(bad) if "LONG" in line])
        java(CONFIG_COMMAND, *bs, "--alter", *entity, "--delete-config", "producer_byte_rate")
        out.append(_lines(java(CONFIG_COMMAND, *bs, "--describe", *entity)))
        # the default would throttle every consumer of the scenarios that follow: a throttled
        # Fetch is answered empty, on Kafka as here
        default = ["--entity-type", "clients", "--entity-default"]
        java(CONFIG_COMMAND, *bs, "--alter", *default, "--delete-config", "consumer_byte_rate")
        return out

    observe(run)


@pytest.mark.parametrize("client", ["raw"])
def test_quota_requests(client: str, observe: Any) -> None:
    """AlterClientQuotas' answers per entry, DescribeClientQuotas' filters and errors."""

    def run(t: Any) -> Any:
        with RawClient(t.bootstrap) as raw:
            setup = A(
                entries=[
                    _entry([("user", "req-u")], producer_byte_rate=100.0),
                    _entry([("user", "req-u"), ("client-id", "req-c")], consumer_byte_rate=200.0),
                    _entry([("user", "req-u"), ("client-id", None)], request_percentage=12.5),
                    _entry([("client-id", "req-c")], controller_mutation_rate=3.0),
                ]
            )
            altered = raw.request(setup, 1)
            checks = A(
                entries=[
                    _entry([("client-id", "req-c")], producer_byte_rate=10.5),
                    _entry([("user", "")], producer_byte_rate=1.0),
                    _entry([], producer_byte_rate=1.0),
                    _entry([("group", "g")], producer_byte_rate=1.0),
                    _entry([("client-id", "req-c")], no_such_key=1.0),
                    _entry([("ip", "127.0.0.1"), ("user", "u")], producer_byte_rate=1.0),
                    _entry([("ip", "localhost")], connection_creation_rate=5.0),  # resolves
                    _entry([("ip", "no-such-host.invalid")], connection_creation_rate=5.0),
                    _entry([("client-id", "req-c")], producer_byte_rate=None, other=None),
                ],
                validate_only=True,
            )
            checked = raw.request(checks, 1)
            filters = [
                ([D.ComponentData(entity_type="user", match_type=0, match="req-u")], True),
                ([D.ComponentData(entity_type="user", match_type=0, match="req-u")], False),
                ([D.ComponentData(entity_type="client-id", match_type=1, match=None)], False),
                ([D.ComponentData(entity_type="client-id", match_type=2, match=None)], True),
                (
                    [
                        D.ComponentData(entity_type="user", match_type=2, match=None),
                        D.ComponentData(entity_type="client-id", match_type=0, match="req-c"),
                    ],
                    True,
                ),
                ([D.ComponentData(entity_type="user", match_type=0, match="nobody")], False),
                ([D.ComponentData(entity_type="group", match_type=2, match=None)], False),
                ([D.ComponentData(entity_type="", match_type=2, match=None)], False),
                (
                    [
                        D.ComponentData(entity_type="user", match_type=2, match=None),
                        D.ComponentData(entity_type="user", match_type=2, match=None),
                    ],
                    False,
                ),
            ]
            described = [
                _described(raw.request(D(components=c, strict=strict), 1)) for c, strict in filters
            ]
        return _altered(altered), _altered(checked), described

    observe(run)


@pytest.mark.parametrize("client", ["raw"])
def test_throttled_answers(client: str, observe: Any) -> None:
    """A producer over its byte rate is answered at once with a throttle time, and its next
    request waits it out; controller mutations are refused once the bucket is empty (strict
    versions) and only throttled before."""

    def run(t: Any) -> Any:
        topic = "quota-throttled"
        create_topic(t.bootstrap, topic)
        with RawClient(t.bootstrap) as raw:
            answer = raw.request(
                A(
                    entries=[
                        _entry([("client-id", "slow-producer")], producer_byte_rate=1000.0),
                        _entry([("client-id", "slow-admin")], controller_mutation_rate=1.0),
                    ]
                ),
                1,
            )
        assert [e.error_code for e in answer.entries] == [0, 0]
        # Kafka applies a change when its ZooKeeper notification arrives, which no request
        # can await: give it a moment.
        time.sleep(1)
        body = produce_request(topic, 0, [SimpleRecord(None, b"p" * 15_000)])
        with RawClient(t.bootstrap, client_id="slow-producer") as raw:
            first = raw.send(body, 9)
            second = raw.send(body, 9)
            sent = time.monotonic()
            a = raw.receive(ProduceResponse, 9, first)
            b = raw.receive(ProduceResponse, 9, second)
            waited = time.monotonic() - sent
        produced = (
            a.throttle_time_ms > 0,
            b.throttle_time_ms > 0,
            waited >= a.throttle_time_ms / 1000 * 0.9,
        )

        def create(name: str, partitions: int, version: int) -> tuple[int, bool]:
            topics = [
                CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=partitions, replication_factor=1
                )
            ]
            with RawClient(t.bootstrap, client_id="slow-admin") as raw:
                got = raw.request(CreateTopicsRequest(topics=topics, timeout_ms=10_000), version)
            return got.topics[0].error_code, got.throttle_time_ms > 0

        mutations = [
            create("quota-m1", 15, 7),  # the bucket (11 tokens) was not empty: allowed
            create("quota-m2", 1, 7),  # strict: refused, throttled
            create("quota-m3", 1, 5),  # permissive: created, throttled
        ]
        return produced, mutations

    observe(run)
