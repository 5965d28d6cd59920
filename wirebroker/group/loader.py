"""Replaying one `__consumer_offsets` partition into groups (Kafka's GroupMetadataManager
loading): `GroupLoad` is the record sink `CoordinatorStore.replay` feeds in a worker thread.

It touches nothing but itself, so it is safe off the loop: it decodes each record and folds it
into the groups it builds. The coordinator installs the result on the loop once the replay is
done, or drops it if leadership moved meanwhile. A later record of a key replaces an earlier
one; a tombstone removes an offset, or the whole group.
"""

from __future__ import annotations

from wirebroker.group import records
from wirebroker.group.records import GroupRecord, OffsetRecord
from wirebroker.group.state import CommittedOffset, Group


class GroupLoad:
    """The groups (with their offsets) of one partition, as its records replay."""

    def __init__(self, initial_delay_ms: int) -> None:
        self.initial_delay_ms = initial_delay_ms
        self.groups: dict[str, Group] = {}

    def replay(self, key: bytes, value: bytes | None) -> None:
        rec = records.decode(key, value)
        if isinstance(rec, OffsetRecord):
            group = self.groups.get(rec.group)
            if group is None:
                group = self.groups[rec.group] = Group(rec.group, self.initial_delay_ms)
            tp = (rec.topic, rec.partition)
            if rec.value is None:
                group.offsets.pop(tp, None)
            else:
                v = rec.value
                group.offsets[tp] = CommittedOffset(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
                )
        elif isinstance(rec, GroupRecord):
            if rec.value is None:
                self.groups.pop(rec.group, None)
                return
            old = self.groups.get(rec.group)
            group = records.restore_group(rec.group, rec.value, self.initial_delay_ms)
            if old is not None:
                group.offsets = old.offsets
            self.groups[rec.group] = group
