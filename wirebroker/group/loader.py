"""Replaying one `__consumer_offsets` partition into groups (Kafka's GroupMetadataManager
loading): `GroupLoad` is the record and marker sink `CoordinatorStore.replay` feeds in a
worker thread.

It touches nothing but itself, so it is safe off the loop: it decodes each record and folds it
into the groups it builds. The coordinator installs the result on the loop once the replay is
done, or drops it if leadership moved meanwhile. A later record of a key replaces an earlier
one; a tombstone removes an offset, or the whole group. Offsets from a transactional batch are
held per producer until the producer's marker: a COMMIT makes them the group's offsets (unless
a commit written after them is already there, as Kafka compares record positions), an ABORT
drops them; those whose transaction is still open at the end stay pending (`pending`).
"""

from __future__ import annotations

from wirebroker.coordinator_store import NO_PRODUCER_ID, Origin
from wirebroker.group import records
from wirebroker.group.records import GroupRecord, OffsetRecord
from wirebroker.group.state import CommittedOffset, Group
from wirebroker.group.txn_offsets import PendingTxnOffsets


class GroupLoad:
    """The groups (with their offsets) of one partition, as its records replay."""

    def __init__(self, initial_delay_ms: int) -> None:
        self.initial_delay_ms = initial_delay_ms
        self.groups: dict[str, Group] = {}
        #: Per group, the log position of the record each offset came from.
        self.positions: dict[str, dict[tuple[str, int], int]] = {}
        #: Offsets of transactions not ended in this partition.
        self.pending = PendingTxnOffsets()
        #: The groups whose metadata record stands (the others are known by offsets only).
        self._described: set[str] = set()

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, self.initial_delay_ms)
        return group

    def replay(self, key: bytes, value: bytes | None, origin: Origin) -> None:
        rec = records.decode(key, value)
        if isinstance(rec, OffsetRecord):
            tp = (rec.topic, rec.partition)
            if origin.producer_id != NO_PRODUCER_ID:
                if rec.value is None:
                    self.pending.forget(rec.group, origin.producer_id, [tp])
                else:
                    offsets = {tp: _committed(rec)}
                    self.pending.add(rec.group, origin.producer_id, offsets)
                    self.pending.written(rec.group, origin.producer_id, offsets, origin.offset)
                return
            group = self._group(rec.group)
            if rec.value is None:
                group.offsets.pop(tp, None)
                self.positions.get(rec.group, {}).pop(tp, None)
            else:
                group.offsets[tp] = _committed(rec)
                self.positions.setdefault(rec.group, {})[tp] = origin.offset
        elif isinstance(rec, GroupRecord):
            if rec.value is None:
                self.groups.pop(rec.group, None)
                self.positions.pop(rec.group, None)
                self._described.discard(rec.group)
                return
            self._described.add(rec.group)
            old = self.groups.get(rec.group)
            group = records.restore_group(rec.group, rec.value, self.initial_delay_ms)
            if old is not None:
                group.offsets = old.offsets
            self.groups[rec.group] = group

    def marker(self, producer_id: int, commit: bool, _offset: int) -> None:
        """The producer's transaction ended here: its offsets become the groups' (commit)."""
        for group_id, offsets in self.pending.take(producer_id, lambda _: True):
            if not commit:
                continue
            group = self._group(group_id)
            positions = self.positions.setdefault(group_id, {})
            for tp, pending in offsets.items():
                if positions.get(tp, -1) < pending.position:
                    group.offsets[tp] = pending.offset
                    positions[tp] = pending.position

    def finish(self) -> None:
        """A group without a metadata record exists by its offsets (Kafka's loading makes
        groups of metadata records and of offsets): gone if every one was tombstoned (a group
        that only stored offsets gets no metadata tombstone), Empty if its open transactions'
        offsets are all it has."""
        for group_id, group in list(self.groups.items()):
            if not group.offsets and group_id not in self._described:
                del self.groups[group_id]
                self.positions.pop(group_id, None)
        for group_id in self.pending.groups():
            self._group(group_id)


def _committed(rec: OffsetRecord) -> CommittedOffset:
    v = rec.value
    assert v is not None
    return CommittedOffset(
        v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
    )
