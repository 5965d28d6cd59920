"""`wirebroker cluster`'s settings for every broker, without starting anything."""

from __future__ import annotations

import argparse

import pytest

from wirebroker import cluster_cli
from wirebroker.config import ConfigError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cluster_cli.add_parser(parser.add_subparsers())
    return parser.parse_args(["cluster", *argv])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), []),  # 3 brokers: Kafka's default RF 3 stands
        (("--brokers", "5"), []),
        (("--brokers", "1"), ["offsets.topic.replication.factor=1"]),
        (("--brokers", "2"), ["offsets.topic.replication.factor=2"]),
        (("--brokers", "2", "--override", "offsets.topic.replication.factor=3"), []),
    ],
)
def test_a_small_cluster_gets_an_offsets_topic_it_can_create(
    argv: tuple[str, ...], expected: list[str]
) -> None:
    assert cluster_cli._internal_topic_overrides(parse(*argv)) == expected


@pytest.mark.parametrize(
    ("argv", "broker_2"),
    [
        ((), "PLAINTEXT://127.0.0.1:9093"),
        (("--host", "0.0.0.0", "--base-port", "19092"), "PLAINTEXT://0.0.0.0:19093"),
        (("--base-port", "0"), "PLAINTEXT://127.0.0.1:0"),
        (
            ("--listeners", "PLAINTEXT://127.0.0.1:9092,SSL://localhost:9192,SASL_SSL://:0"),
            "PLAINTEXT://127.0.0.1:9093,SSL://localhost:9193,SASL_SSL://:0",
        ),
    ],
)
def test_broker_n_gets_each_port_of_broker_1_plus_n_minus_1(
    argv: tuple[str, ...], broker_2: str
) -> None:
    listeners = cluster_cli.broker_listeners(parse(*argv), 2)
    assert ",".join(map(str, listeners)) == broker_2


@pytest.mark.parametrize("other", [("--host", "0.0.0.0"), ("--base-port", "0")])
def test_listeners_are_not_given_with_a_host_or_base_port(other: tuple[str, ...]) -> None:
    args = parse("--listeners", "PLAINTEXT://127.0.0.1:0", *other)
    with pytest.raises(ConfigError, match="not with --host, --base-port"):
        cluster_cli.broker_listeners(args, 1)
    assert cluster_cli.run(args) == 2
