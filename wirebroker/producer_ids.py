"""Producer ids and epochs handed out by InitProducerId, kept across restarts.

This module owns allocating producer ids and remembering which transactional id holds which
producer id and epoch. Ids come from blocks of :data:`BLOCK_SIZE` reserved in a small JSON file
in the first log directory (``wirebroker-producer-ids.json``, replaced atomically and fsynced
before any id of a new block is handed out), so an id is never handed out twice, even after a
crash -- a restart skips the rest of the block, as Kafka's broker-side id blocks do. A
non-transactional InitProducerId always gets a fresh id with epoch 0 (as Kafka answers it); a
transactional id keeps its id and gets its epoch bumped at each InitProducerId (a fresh id once
the epoch is exhausted), and the mapping is written before the answer is sent. Synchronous;
the broker's trio thread calls it. It must not speak the wire protocol.

In a ZooKeeper cluster the blocks come from `/latest_producer_id_block` instead (shared by every
broker, so no two brokers hand out the same id): the caller fetches one whenever
:attr:`ProducerIdManager.needs_block` and hands it over with :meth:`ProducerIdManager.add_block`;
the local file then only keeps the transactional ids.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from protocol.errors import ErrorCode, KafkaError
from storage.checkpoints import fsync_dir

__all__ = ["BLOCK_SIZE", "FILE_NAME", "ProducerIdManager"]

FILE_NAME = "wirebroker-producer-ids.json"
BLOCK_SIZE = 1000
#: Kafka bumps to a new producer id when the epoch would reach Short.MAX_VALUE.
MAX_EPOCH = 32767 - 1


@dataclass(slots=True)
class TransactionalProducer:
    producer_id: int
    epoch: int


class ProducerIdManager:
    """Allocates producer ids; see the module doc. Open with :meth:`open`."""

    def __init__(self, path: Path, block_end: int, txn: dict[str, TransactionalProducer]):
        self.path = path
        self._next = block_end
        self._block_end = block_end
        self.transactional: dict[str, TransactionalProducer] = txn
        #: Blocks are handed over by `add_block` (a cluster), never reserved in the local file.
        self.external_blocks = False

    @classmethod
    def open(cls, log_dir: Path) -> ProducerIdManager:
        path = log_dir / FILE_NAME
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            state = {}
        txn = {
            tid: TransactionalProducer(int(pid), int(epoch))
            for tid, (pid, epoch) in state.get("transactional_ids", {}).items()
        }
        return cls(path, int(state.get("block_end", 0)), txn)

    def _save(self) -> None:
        state = {
            "version": 1,
            "block_end": self._block_end,
            "transactional_ids": {
                tid: [p.producer_id, p.epoch] for tid, p in sorted(self.transactional.items())
            },
        }
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

    def init_transactional(
        self, transactional_id: str, expected_id: int = -1, expected_epoch: int = -1
    ) -> tuple[int, int]:
        """Id and bumped epoch for `transactional_id`. With an expected id and epoch (v3+)
        that no longer match, raise PRODUCER_FENCED."""
        current = self.transactional.get(transactional_id)
        if current is None:
            current = TransactionalProducer(self.next_producer_id(), 0)
        else:
            if expected_id >= 0 and (
                expected_id != current.producer_id or expected_epoch != current.epoch
            ):
                raise KafkaError(
                    f"producer {expected_id} epoch {expected_epoch} of transactional id "
                    f"{transactional_id!r} was fenced by epoch {current.epoch} of "
                    f"{current.producer_id}",
                    error_code=ErrorCode.PRODUCER_FENCED,
                )
            if current.epoch >= MAX_EPOCH - 1:
                current = TransactionalProducer(self.next_producer_id(), 0)
            else:
                current = TransactionalProducer(current.producer_id, current.epoch + 1)
        self.transactional[transactional_id] = current
        self._save()
        return current.producer_id, current.epoch

    def statistics(self) -> dict[str, int]:
        return {
            "next_producer_id": self._next,
            "block_end": self._block_end,
            "transactional_ids": len(self.transactional),
        }
