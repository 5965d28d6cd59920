"""`wirebroker cluster`'s settings for every broker, without starting anything."""

from __future__ import annotations

import argparse

import pytest

from wirebroker import cluster_cli


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
