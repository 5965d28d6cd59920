"""Topic deletion by the controller (Kafka's TopicDeletionManager, ZooKeeper mode).

DeleteTopics (any broker) writes `/admin/delete_topics/<t>`; the controller, watching that
znode's children, marks the topic as being deleted (UpdateMetadata then gives its partitions
leader -2, so clients stop using them), sends every replica StopReplica with
`delete_partition`, and removes `/brokers/topics/<t>`, `/config/topics/<t>` and the request
znode, then forgets the topic. A request for an unknown topic, or any while
`delete.topic.enable` is false, is just removed.

As in Kafka, a deletion whose replicas are not all on live brokers waits: it resumes when a
broker starts (`resume`), and a new controller starts over from the request znodes. Unlike
Kafka, the controller does not wait for the StopReplica answers (Kafka's
ReplicaDeletionSuccessful) before removing the znodes: the channel delivers each broker's
requests in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from wirebroker.controller.context import ControllerContext
from wirebroker.controller.request_batch import RequestBatch
from wirebroker.controller.zk_state import ControllerZk
from wirebroker.zk import znodes

log = logging.getLogger(__name__)


class TopicDeletionManager:
    """Deletes the topics requested under `/admin/delete_topics` for one election."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk_state: ControllerZk,
        requests: RequestBatch,
        enabled: Callable[[], bool],
    ) -> None:
        self.ctx = ctx
        self.zk_state = zk_state
        self.zk = zk_state.zk
        self.requests = requests
        self.enabled = enabled  # `delete.topic.enable`

    async def on_delete_topics(self) -> None:
        """The children of `/admin/delete_topics` changed (or we were elected): delete them."""
        ctx = self.ctx
        names = await self.zk.get_children(znodes.DELETE_TOPICS, watch=True) or []
        for topic in sorted(names):
            if topic not in ctx.topics:
                await self.zk.delete(znodes.delete_topic_path(topic))
                continue
            if not self.enabled():
                log.info("not deleting topic %s: delete.topic.enable is false", topic)
                await self.zk.delete(znodes.delete_topic_path(topic))
                continue
            await self.delete_topic(topic)

    async def resume(self) -> None:
        """A broker started: the deletions that waited for a replica's broker go on."""
        for topic in sorted(self.ctx.deleting & set(self.ctx.topics)):
            await self.delete_topic(topic)

    async def delete_topic(self, topic: str) -> None:
        ctx = self.ctx
        tps = [(topic, p) for p in sorted(ctx.topics[topic].partitions)]
        if topic not in ctx.deleting:
            log.info("deleting topic %s", topic)
        ctx.deleting.add(topic)
        self.requests.update_metadata(ctx.live, tps)
        replicas = {b for tp in tps for b in ctx.assignment(tp).replicas}
        down = sorted(b for b in replicas if b not in ctx.live)
        if down:
            # As Kafka: the deletion waits until every replica can be told to delete its log.
            log.warning("deleting topic %s waits for brokers %s, which hold replicas", topic, down)
            return
        for b in sorted(replicas):
            self.requests.stop_replica(
                b, [tp for tp in tps if b in ctx.assignment(tp).replicas], delete=True
            )
        await self.zk_state.fenced([])  # still the controller?
        await self.zk.delete(znodes.topic_path(topic), recursive=True)
        await self.zk.delete(znodes.topic_config_path(topic))
        await self.zk.delete(znodes.delete_topic_path(topic))
        ctx.forget_topic(topic)
