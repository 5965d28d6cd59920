"""Offsets committed inside transactions and not yet committed or aborted (Kafka's
GroupMetadata.pendingTransactionalOffsetCommits and GroupMetadataManager.openGroupsForProducer).

Pure bookkeeping, no I/O: per group, per producer id, per partition the offset a TxnOffsetCommit
wrote (`PendingOffset`, with the log position of its record once it is written, Kafka's
appendedBatchOffset), and per producer id the groups it has pending offsets in. The group
coordinator records a commit (`add`), its write (`written`) or its failure (`forget`), and when
the transaction's marker reaches a `__consumer_offsets` partition takes the producer's offsets
of that partition's groups out (`take`) to make them visible (commit) or drop them (abort). The
loader fills it the same way while replaying a partition whose transaction is still open.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wirebroker.group.state import CommittedOffset

TP = tuple[str, int]


@dataclass(slots=True)
class PendingOffset:
    offset: CommittedOffset
    #: An offset of the batch that holds it in the log (positions order commits); -1 until
    #: it is written.
    position: int = -1


class PendingTxnOffsets:
    """The transactional offsets waiting for their transaction's end (see the module doc)."""

    def __init__(self) -> None:
        self._by_group: dict[str, dict[int, dict[TP, PendingOffset]]] = {}
        self._groups_of: dict[int, set[str]] = {}

    def add(self, group: str, producer_id: int, offsets: dict[TP, CommittedOffset]) -> None:
        """A TxnOffsetCommit is being written."""
        pending = self._by_group.setdefault(group, {}).setdefault(producer_id, {})
        for tp, offset in offsets.items():
            pending[tp] = PendingOffset(offset)
        self._groups_of.setdefault(producer_id, set()).add(group)

    def written(
        self, group: str, producer_id: int, offsets: dict[TP, CommittedOffset], position: int
    ) -> None:
        """Its record is durable at `position` (unless a later commit replaced an offset)."""
        pending = self._by_group.get(group, {}).get(producer_id, {})
        for tp, offset in offsets.items():
            entry = pending.get(tp)
            if entry is not None and entry.offset == offset:
                entry.position = position

    def forget(self, group: str, producer_id: int, tps: list[TP]) -> None:
        """The commit's write failed: its offsets are not pending any more."""
        pending = self._by_group.get(group, {}).get(producer_id)
        if pending is None:
            return
        for tp in tps:
            pending.pop(tp, None)
        if not pending:
            self._remove(group, producer_id)

    def take(
        self, producer_id: int, belongs: Callable[[str], bool]
    ) -> list[tuple[str, dict[TP, PendingOffset]]]:
        """Remove and return the producer's pending offsets in the groups `belongs` selects
        (the groups of the partitions its marker reached)."""
        taken = []
        for group in sorted(g for g in self._groups_of.get(producer_id, ()) if belongs(g)):
            offsets = self._by_group.get(group, {}).get(producer_id, {})
            taken.append((group, offsets))
            self._remove(group, producer_id)
        return taken

    def _remove(self, group: str, producer_id: int) -> None:
        producers = self._by_group.get(group)
        if producers is not None:
            producers.pop(producer_id, None)
            if not producers:
                del self._by_group[group]
        groups = self._groups_of.get(producer_id)
        if groups is not None:
            groups.discard(group)
            if not groups:
                del self._groups_of[producer_id]

    def has_pending(self, group: str, tp: TP) -> bool:
        """Whether an open transaction holds an offset of `tp` for `group` (OffsetFetch's
        require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        return any(tp in offsets for offsets in self._by_group.get(group, {}).values())

    def has_group(self, group: str) -> bool:
        return group in self._by_group

    def groups(self) -> list[str]:
        return list(self._by_group)

    def drop_group(self, group: str) -> None:
        """The group is unloaded or removed: its pending offsets go with it."""
        for producer_id in list(self._by_group.get(group, {})):
            self._remove(group, producer_id)

    def drop_partitions(self, group: str, tps: list[TP]) -> None:
        """Offsets of `tps` were deleted: pending transactional ones go too (Kafka's
        removeOffsets)."""
        for producer_id in list(self._by_group.get(group, {})):
            self.forget(group, producer_id, tps)

    def merge(self, other: PendingTxnOffsets) -> None:
        """Add what a load found (its transactions still open)."""
        for group, producers in other._by_group.items():
            for producer_id, offsets in producers.items():
                self._by_group.setdefault(group, {}).setdefault(producer_id, {}).update(offsets)
                self._groups_of.setdefault(producer_id, set()).add(group)

    def producers(self) -> int:
        return len(self._groups_of)
