"""RackAwareReplicaSelector's choice (`wirebroker.replica_selector`) on a real leader partition:
the candidates Kafka's findPreferredReadReplica keeps, the order it prefers them in, and the
leader kept when it shares the client's rack."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.config import LogConfig
from storage.partition_log import PartitionLog
from wirebroker.metadata_cache import BrokerInfo, Endpoint, MetadataCache
from wirebroker.partition import Partition
from wirebroker.replica_selector import NO_PREFERRED_REPLICA, preferred_read_replica

NOW = 100_000


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Partition]:
    """Broker 1 leads; 2, 3 and 4 follow, all in the ISR, all at offset 10 since time 0."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig())
    p = Partition("t", 0, uuid.uuid4(), plog, leader=-1, leader_epoch=-1, node_id=1)
    p.make_leader(
        leader_epoch=0,
        partition_epoch=0,
        controller_epoch=1,
        isr=[1, 2, 3, 4],
        replicas=[1, 2, 3, 4],
        now_ms=0,
    )
    for replica in (2, 3, 4):
        follow(p, replica, 10)
    yield p
    plog.close()


def follow(p: Partition, replica: int, leo: int, start: int = 0, caught_up_ms: int = 0) -> None:
    state = p.followers[replica]
    state.log_end_offset, state.log_start_offset = leo, start
    state.last_caught_up_ms = caught_up_ms


def brokers(racks: dict[int, str | None], listener: str = "PLAINTEXT") -> MetadataCache:
    cache = MetadataCache()
    cache.brokers = {
        i: BrokerInfo(i, (Endpoint(listener, "127.0.0.1", 9000 + i),), rack)
        for i, rack in racks.items()
    }
    return cache


def choose(p: Partition, cache: MetadataCache, rack: str = "b", offset: int = 5) -> int:
    return preferred_read_replica(p, rack, offset, cache, "PLAINTEXT", NOW)


def test_the_leader_in_the_clients_rack_keeps_it(leader: Partition) -> None:
    assert choose(leader, brokers({1: "b", 2: "b", 3: "c", 4: "c"})) == NO_PREFERRED_REPLICA


def test_no_replica_in_the_clients_rack_keeps_the_leader(leader: Partition) -> None:
    assert choose(leader, brokers({1: "a", 2: "c", 3: "c", 4: None})) == NO_PREFERRED_REPLICA


def test_the_most_caught_up_follower_of_the_rack(leader: Partition) -> None:
    cache = brokers({1: "a", 2: "b", 3: "b", 4: "c"})
    assert choose(leader, cache) == 3  # equal: the highest id
    follow(leader, 2, 10, caught_up_ms=NOW - 5)
    assert choose(leader, cache) == 2  # caught up most recently
    follow(leader, 3, 11)
    assert choose(leader, cache) == 3  # the highest log end offset first


def test_only_followers_kafka_considers(leader: Partition) -> None:
    cache = brokers({1: "a", 2: "b", 3: "c", 4: "c"})
    assert choose(leader, cache) == 2
    assert choose(leader, cache, offset=11) == NO_PREFERRED_REPLICA  # not at the offset yet
    follow(leader, 2, 10, start=6)
    assert choose(leader, cache) == NO_PREFERRED_REPLICA  # the offset is before its log start
    follow(leader, 2, 10)
    leader.isr = [1, 3, 4]
    assert choose(leader, cache) == NO_PREFERRED_REPLICA  # out of the ISR
    leader.isr = [1, 2, 3, 4]
    assert choose(leader, brokers({1: "a", 3: "c", 4: "c"})) == NO_PREFERRED_REPLICA  # dead
    other = brokers({1: "a", 2: "b", 3: "c", 4: "c"}, listener="INTERNAL")
    assert choose(leader, other) == NO_PREFERRED_REPLICA  # no endpoint on the client's listener
