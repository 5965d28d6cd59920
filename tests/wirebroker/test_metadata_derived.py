"""What readers keep in the metadata cache (`MetadataCache.derived`: the Metadata handler's
told topics) goes exactly when what it was derived from changes: a topic's entry when an
UpdateMetadata (here encoded and decoded as on the wire) changes or deletes one of its
partitions or gives it a new id, or the embedded broker serves or forgets one; every entry
when the live brokers change; nothing when the same brokers are told again. The answers
themselves, over TCP: test_metadata_follows, tests/cluster/test_metadata_cluster."""

from __future__ import annotations

import uuid

from tests.wirebroker.test_metadata_cache_names import VERSION, update
from wirebroker.metadata_cache import (
    LEADER_DURING_DELETE,
    BrokerInfo,
    Endpoint,
    MetadataCache,
    PartitionInfo,
)


def _kept(cache: MetadataCache, *topics: str) -> set[str]:
    for topic in topics:
        cache.derived.setdefault(topic, {})["reader"] = topic
    return set(cache.derived)


def test_an_update_drops_what_was_derived_from_its_topics_only() -> None:
    cache = MetadataCache()
    t_id, u_id = uuid.uuid4(), uuid.uuid4()
    cache.update(update("t", t_id), VERSION)
    cache.update(update("u", u_id), VERSION)
    assert _kept(cache, "t", "u") == {"t", "u"}
    cache.update(update("t", t_id, leader=2), VERSION)  # a new leader for t; same brokers
    assert set(cache.derived) == {"u"}
    _kept(cache, "t")
    cache.update(update("t", t_id, leader=LEADER_DURING_DELETE), VERSION)
    assert set(cache.derived) == {"u"}


def test_a_new_topic_id_drops_what_was_derived() -> None:
    cache = MetadataCache()
    cache.update(update("t", uuid.uuid4()), VERSION)
    _kept(cache, "t")
    cache._set_topic_id("t", uuid.uuid4())  # merged without a partition change
    assert cache.derived == {}


def test_the_brokers_changing_drops_everything_and_the_same_brokers_nothing() -> None:
    cache = MetadataCache()
    me = BrokerInfo(0, (Endpoint("PLAINTEXT", "localhost", 9092),))
    cache.set_local_broker(me)
    cache.put_partition(uuid.uuid4(), PartitionInfo("t", 0, 0, 0, [0], [0]))
    cache.put_partition(uuid.uuid4(), PartitionInfo("u", 0, 0, 0, [0], [0]))
    _kept(cache, "t", "u")
    cache.set_local_broker(BrokerInfo(0, (Endpoint("PLAINTEXT", "localhost", 9092),)))
    assert set(cache.derived) == {"t", "u"}  # told again before every answer: kept
    cache.set_local_broker(BrokerInfo(0, (Endpoint("PLAINTEXT", "localhost", 9093),)))
    assert cache.derived == {}  # an advertised listener changed (KIP-226)


def test_serving_or_forgetting_a_partition_drops_its_topic() -> None:
    cache = MetadataCache()
    t_id = uuid.uuid4()
    cache.put_partition(t_id, PartitionInfo("t", 0, 0, 0, [0], [0]))
    cache.put_partition(uuid.uuid4(), PartitionInfo("u", 0, 0, 0, [0], [0]))
    _kept(cache, "t", "u")
    cache.put_partition(t_id, PartitionInfo("t", 1, 0, 0, [0], [0]))  # CreatePartitions
    assert set(cache.derived) == {"u"}
    _kept(cache, "t")
    assert cache.remove_partition("t", 1)
    assert set(cache.derived) == {"u"}
