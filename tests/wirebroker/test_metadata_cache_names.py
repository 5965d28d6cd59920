"""The metadata cache names a topic by its id (Metadata by topic id, Fetch v13+, DeleteTopics
by id) from a map kept beside the ids, not by scanning every topic: in a cluster, as
UpdateMetadata requests (here encoded and decoded as on the wire) delete a topic and create it
again with a new id, or merge a new id over the old one, the old id names nothing and the new
one the topic. The embedded broker's side (served and deleted partitions):
test_metadata_follows."""

from __future__ import annotations

import uuid

from protocol.messages.update_metadata import UpdateMetadataRequest
from tests.wirebroker.test_replication_unit import roundtrip
from wirebroker.metadata_cache import LEADER_DURING_DELETE, MetadataCache

VERSION = 8  # Kafka 3.9's newest UpdateMetadata: topic ids from v7


def update(topic: str, topic_id: uuid.UUID, leader: int = 1) -> UpdateMetadataRequest:
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
    return roundtrip(request, VERSION)  # type: ignore[no-any-return]


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
