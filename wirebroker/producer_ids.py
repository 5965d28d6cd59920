"""Producer ids handed out by InitProducerId, never twice, across restarts (Kafka's
ProducerIdManager).

This module owns allocating producer ids. Ids come from blocks of :data:`BLOCK_SIZE` reserved
in a small JSON file in the first log directory (``wirebroker-producer-ids.json``, replaced
atomically and fsynced before any id of a new block is handed out), so an id is never handed
out twice, even after a crash -- a restart skips the rest of the block, as Kafka's broker-side
id blocks do. Which transactional id holds which id and epoch is the transaction coordinator's
(`__transaction_state`, :mod:`wirebroker.txn`), not this file's: a ``transactional_ids`` map
left in the file by an older wirebroker is ignored. Synchronous; the broker's trio thread calls
it. It must not speak the wire protocol.

In a ZooKeeper cluster the blocks come from `/latest_producer_id_block` instead (shared by every
broker, so no two brokers hand out the same id): the caller fetches one whenever
:attr:`ProducerIdManager.needs_block` and hands it over with :meth:`ProducerIdManager.add_block`;
the local file is not used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from protocol.errors import ErrorCode, KafkaError
from storage.checkpoints import fsync_dir

__all__ = ["BLOCK_SIZE", "FILE_NAME", "ProducerIdManager"]

FILE_NAME = "wirebroker-producer-ids.json"
BLOCK_SIZE = 1000


class ProducerIdManager:
    """Allocates producer ids; see the module doc. Open with :meth:`open`."""

    def __init__(self, path: Path, block_end: int):
        self.path = path
        self._next = block_end
        self._block_end = block_end
        #: Blocks are handed over by `add_block` (a cluster), never reserved in the local file.
        self.external_blocks = False

    @classmethod
    def open(cls, log_dir: Path) -> ProducerIdManager:
        path = log_dir / FILE_NAME
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            state = {}
        return cls(path, int(state.get("block_end", 0)))

    def _save(self) -> None:
        state = {"version": 1, "block_end": self._block_end}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    @property
    def needs_block(self) -> bool:
        """Whether the current block is used up (a cluster must fetch the next one)."""
        return self._next >= self._block_end

    def add_block(self, first: int, last: int) -> None:
        """Use the block `first`..`last` (inclusive), allocated to this broker elsewhere."""
        self.external_blocks = True
        self._next, self._block_end = first, last + 1

    def next_producer_id(self) -> int:
        """A producer id never handed out before (reserving a new block when needed)."""
        if self.needs_block:
            if self.external_blocks:
                raise KafkaError(
                    "no producer id block: fetch one first",
                    error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                )
            self._block_end = self._next + BLOCK_SIZE
            self._save()
        pid = self._next
        self._next += 1
        return pid

    def statistics(self) -> dict[str, int]:
        return {
            "next_producer_id": self._next,
            "block_end": self._block_end,
        }
