"""The metadata cache names a topic by its id (Metadata by topic id, Fetch v13+, DeleteTopics
by id) from a map kept beside the ids, not by scanning every topic: in a cluster, as
UpdateMetadata requests (here encoded and decoded as on the wire) delete a topic and create it
again with a new id, or merge a new id over the old one, the old id names nothing and the new
one the topic. The embedded broker's side (served and deleted partitions):
test_metadata_follows. A topic sent with the zero id loses its id, as on Kafka."""

from __future__ import annotations

import uuid

from protocol.messages.update_metadata import UpdateMetadataRequest
from protocol.primitives import ZERO_UUID
from tests.wirebroker.test_replication_unit import roundtrip
from wirebroker.metadata_cache import LEADER_DURING_DELETE, MetadataCache

VERSION = 8  # Kafka 3.9's newest UpdateMetadata: topic ids from v7


def update(
    topic: str, topic_id: uuid.UUID, leader: int = 1, version: int = VERSION
) -> UpdateMetadataRequest:
    state = UpdateMetadataRequest.UpdateMetadataPartitionState(
        partition_index=0, leader=leader, isr=[1], replicas=[1]
    )
    request = UpdateMetadataRequest(
        controller_id=1,
        live_brokers=[UpdateMetadataRequest.UpdateMetadataBroker(id=1, endpoints=[])],
        topic_states=[
            UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=topic, topic_id=topic_id, partition_states=[state]
            )
        ],
    )
    return roundtrip(request, version)  # type: ignore[no-any-return]


def test_a_deleted_and_recreated_topic_is_named_by_its_new_id_only() -> None:
    cache = MetadataCache()
    first, second, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    cache.update(update("t", first), VERSION)
    cache.update(update("u", other), VERSION)
    assert cache.topic_name(first) == "t"
    cache.update(update("t", first, leader=LEADER_DURING_DELETE), VERSION)
    assert cache.topic_name(first) is None and not cache.has_topic("t")
    cache.update(update("t", second), VERSION)
    assert (cache.topic_name(second), cache.topic_name(first)) == ("t", None)
    assert cache.topic_name(other) == "u"


def test_a_new_id_merged_over_the_old_one_replaces_it() -> None:
    """Deleted and re-created between two UpdateMetadata this broker saw (no -2 in between)."""
    cache = MetadataCache()
    first, second = uuid.uuid4(), uuid.uuid4()
    cache.update(update("t", first), VERSION)
    cache.update(update("t", second), VERSION)
    assert (cache.topic_name(second), cache.topic_name(first)) == ("t", None)
    assert cache.topic_id("t") == second


def test_an_id_given_to_two_topics_names_the_last_given_it() -> None:
    # Found by the cluster-member fuzz: the second topic took the id over, and when either
    # then got another id (or was deleted) the other's entry for it was deleted too, and the
    # next change of the other raised KeyError in the UpdateMetadata handler.
    cache = MetadataCache()
    shared, first, second = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    cache.update(update("t", shared), VERSION)
    cache.update(update("u", shared), VERSION)
    assert cache.topic_name(shared) == "u"
    cache.update(update("t", first), VERSION)  # t leaves the id u holds
    assert (cache.topic_name(shared), cache.topic_name(first)) == ("u", "t")
    cache.update(update("u", second), VERSION)
    assert (cache.topic_name(shared), cache.topic_name(second)) == (None, "u")
    cache.update(update("t", shared), VERSION)
    cache.update(update("u", shared), VERSION)
    cache.update(update("u", shared, leader=LEADER_DURING_DELETE), VERSION)
    assert cache.topic_id("t") == shared
    cache.update(update("t", first), VERSION)
    assert cache.topic_name(first) == "t"


def test_a_topic_sent_without_an_id_loses_the_one_it_had() -> None:
    # As Kafka's ZkMetadataCache: a zero id (every topic of UpdateMetadata v5 and v6, which
    # carry none) removes the topic's id; the cache kept the old one, which named it still.
    cache = MetadataCache()
    first, other = uuid.uuid4(), uuid.uuid4()
    cache.update(update("t", first), VERSION)
    cache.update(update("u", other), VERSION)
    cache.update(update("t", first, version=6), 6)
    assert (cache.topic_id("t"), cache.topic_name(first)) == (ZERO_UUID, None)
    assert cache.has_topic("t") and cache.topic_name(other) == "u"
    cache.update(update("u", ZERO_UUID), VERSION)
    assert cache.topic_name(other) is None


def test_a_partition_deleted_and_given_again_in_one_request_is_not_reported_deleted() -> None:
    cache = MetadataCache()
    topic_id = uuid.uuid4()
    cache.update(update("t", topic_id), VERSION)
    request = update("t", topic_id, leader=LEADER_DURING_DELETE)
    again = UpdateMetadataRequest.UpdateMetadataPartitionState(
        partition_index=0, leader=2, isr=[2], replicas=[2]
    )
    request.topic_states[0].partition_states.append(again)
    assert cache.update(request, VERSION) == []
    assert cache.partition("t", 0).leader == 2  # type: ignore[union-attr]
