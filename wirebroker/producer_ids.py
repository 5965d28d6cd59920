"""Producer ids handed out by InitProducerId, never twice, across restarts (Kafka's
ProducerIdManager).

This module owns allocating producer ids. Ids come from blocks of :data:`BLOCK_SIZE` reserved
in a small JSON file in the first log directory (``wirebroker-producer-ids.json``, replaced
atomically and fsynced in a worker thread before any id of the new block is handed out), so an
id is never handed out twice, even after a crash -- a restart skips the rest of the block, as
Kafka's broker-side id blocks do. One block is reserved at a time: the requests that need an id
meanwhile wait for it. A reservation whose write fails (a full disk) is KafkaError
UNKNOWN_SERVER_ERROR, as Kafka's ZkProducerIdManager answers a failed ZooKeeper write, and no id
of that block is handed out; the next request tries again. Which transactional id holds which
id and epoch is the transaction coordinator's (`__transaction_state`, :mod:`wirebroker.txn`),
not this file's: a ``transactional_ids`` map left in the file by an older wirebroker is
ignored. It runs on the broker's trio thread and must not speak the wire protocol.

In a ZooKeeper cluster the blocks come from `/latest_producer_id_block` instead (shared by every
broker, so no two brokers hand out the same id): the caller gives
:meth:`ProducerIdManager.next_producer_id` the function that fetches one; the local file is not
used.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from protocol.errors import ErrorCode, KafkaError
from wirebroker.json_file import write_json_in_thread

__all__ = ["BLOCK_SIZE", "FILE_NAME", "ProducerIdManager"]

log = logging.getLogger(__name__)

FILE_NAME = "wirebroker-producer-ids.json"
BLOCK_SIZE = 1000

#: Fetches the next block of a cluster, as (first, last): a ZooKeeper allocation.
FetchBlock = Callable[[], Awaitable[tuple[int, int]]]


class ProducerIdManager:
    """Allocates producer ids; see the module doc. Open with :meth:`open`."""

    def __init__(self, path: Path, block_end: int):
        self.path = path
        self._next = block_end
        self._block_end = block_end
        self._reserving = trio.Lock()  # one block reserved at a time

    @classmethod
    def open(cls, log_dir: Path) -> ProducerIdManager:
        path = log_dir / FILE_NAME
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            state = {}
        return cls(path, int(state.get("block_end", 0)))

    @property
    def needs_block(self) -> bool:
        """Whether the current block is used up (the next id needs a new one)."""
        return self._next >= self._block_end

    async def next_producer_id(self, fetch_block: FetchBlock | None = None) -> int:
        """A producer id never handed out before. When the block is used up, the next one first:
        from `fetch_block` in a cluster, else reserved in the local file (KafkaError
        UNKNOWN_SERVER_ERROR if it cannot be written)."""
        while self.needs_block:
            async with self._reserving:
                if not self.needs_block:
                    break  # reserved while this request waited
                if fetch_block is not None:
                    first, last = await fetch_block()
                    self._next, self._block_end = first, last + 1
                else:
                    await self._reserve()
        pid = self._next
        self._next += 1
        return pid

    async def _reserve(self) -> None:
        end = self._next + BLOCK_SIZE
        try:
            await write_json_in_thread(self.path, {"version": 1, "block_end": end})
        except OSError as e:
            log.error("cannot reserve producer ids up to %d in %s: %s", end, self.path, e)
            raise KafkaError(
                "no producer id block: the reservation could not be written",
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
            ) from e
        self._block_end = end
