"""High watermarks of partitions other brokers lead, for consumer lag at scrape time.

A group's coordinator holds the group's committed offsets, but in a cluster the partitions the
group consumes may be led by other brokers, and only a partition's leader knows its high
watermark. kafka-exporter asks each partition's leader for its newest offset (ListOffsets) and
subtracts the committed offset the coordinator gave it; `RemoteHighWatermarks.fetch` does the
same from the coordinator, once per scrape: one ListOffsets (latest, read_uncommitted: the high
watermark) to each leader of a partition with committed offsets here that this broker does not
lead, over the inter-broker listener (`ReplicaManager.peer_client`, so TLS and SASL as the
other inter-broker connections), every leader at once and all within `TIMEOUT_S`. A partition
whose leader is unknown, fails or is slow has no lag in that scrape (kafka-exporter too leaves
out a partition whose offset it cannot get); the embedded broker leads all its partitions and
asks nobody.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode
from protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from wirebroker.peer import PeerClient, PeerError

if TYPE_CHECKING:
    from wirebroker.broker import Broker

log = logging.getLogger(__name__)

#: How long a scrape waits for the leaders' answers (Prometheus' scrape timeout is 10 s).
TIMEOUT_S = 3.0
LIST_OFFSETS_VERSION = 7
LATEST_TIMESTAMP = -1
READ_UNCOMMITTED = 0

Partitions = dict[tuple[str, int], int]


class RemoteHighWatermarks:
    """Asks other brokers for the high watermarks consumer lag needs; `aclose` at the end."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._clients: dict[int, PeerClient] = {}

    def wanted(self) -> dict[int, set[tuple[str, int]]]:
        """The partitions with committed offsets here that another broker leads, by leader."""
        broker = self.broker
        if not broker.cluster_mode:
            return {}
        by_leader: dict[int, set[tuple[str, int]]] = {}
        for group in broker.groups.list_groups():
            for topic, index in group.offsets:
                local = broker.partition(topic, index)
                if local is not None and local.is_local_leader:
                    continue
                info = broker.metadata_cache.partition(topic, index)
                if info is None or info.leader < 0 or info.leader == broker.node_id:
                    continue
                by_leader.setdefault(info.leader, set()).add((topic, index))
        return by_leader

    async def fetch(self) -> Partitions:
        """(topic, partition) -> high watermark, for what the leaders answered in time."""
        wanted = self.wanted()
        found: Partitions = {}
        if not wanted:
            return found
        with trio.move_on_after(TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for leader, partitions in wanted.items():
                    nursery.start_soon(self._ask, leader, partitions, found)
        return found

    async def _ask(self, leader: int, partitions: set[tuple[str, int]], found: Partitions) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(partitions):
            by_topic.setdefault(topic, []).append(index)
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=READ_UNCOMMITTED,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=index, timestamp=LATEST_TIMESTAMP
                        )
                        for index in indexes
                    ],
                )
                for topic, indexes in by_topic.items()
            ],
        )
        try:
            response: ListOffsetsResponse = await self._client(leader).request(
                request, LIST_OFFSETS_VERSION
            )
        except PeerError as e:
            log.info("consumer lag: no high watermarks from broker %d: %s", leader, e)
            return
        for answer in response.topics:
            for p in answer.partitions:
                if p.error_code == ErrorCode.NONE:
                    found[(answer.name, p.partition_index)] = p.offset

    def _client(self, leader: int) -> PeerClient:
        client = self._clients.get(leader)
        if client is None:
            client = self._clients[leader] = self.broker.replica_manager.peer_client(
                leader, "metrics", timeout_s=TIMEOUT_S, backoff_s=TIMEOUT_S
            )
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
