"""The records of `__consumer_offsets`, in Kafka's format: encode and decode, nothing else
(a `Group` to its metadata value and back included).

A key is an int16 version then the key struct: versions 0 and 1 are `OffsetCommitKey`
(group, topic, partition), version 2 is `GroupMetadataKey` (group). A value is an int16 version
then the value struct; a null value is a tombstone. We write offset values at version 3 (Kafka's
choice when no expire timestamp is set; version 1, as Kafka, when one is) and group metadata values
at version 3 (static members).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocol.messages.group_coordinator.group_metadata import (
    GroupMetadataKey,
    GroupMetadataValue,
)
from protocol.messages.group_coordinator.offset_commit import OffsetCommitKey, OffsetCommitValue
from wirebroker.group.state import Group, GroupState, Member

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
EXPIRING_OFFSET_VALUE_VERSION = 1
GROUP_VALUE_VERSION = 3

_version = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    """An offset commit (or, with `value` None, its deletion)."""

    group: str
    topic: str
    partition: int
    value: OffsetCommitValue | None


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group's metadata (or, with `value` None, the group's deletion)."""

    group: str
    value: GroupMetadataValue | None


def offset_key(group: str, topic: str, partition: int) -> bytes:
    key = OffsetCommitKey(group=group, topic=topic, partition=partition)
    return _version.pack(OFFSET_KEY_VERSION) + key.encode(OFFSET_KEY_VERSION)


def offset_value(value: OffsetCommitValue) -> bytes:
    """Version 3, or version 1 (the only one with the field) when it carries an expiry time."""
    version = (
        OFFSET_VALUE_VERSION if value.expire_timestamp == -1 else EXPIRING_OFFSET_VALUE_VERSION
    )
    return _version.pack(version) + value.encode(version)


def group_key(group: str) -> bytes:
    return _version.pack(GROUP_KEY_VERSION) + GroupMetadataKey(group=group).encode(
        GROUP_KEY_VERSION
    )


def group_value(value: GroupMetadataValue) -> bytes:
    return _version.pack(GROUP_VALUE_VERSION) + value.encode(GROUP_VALUE_VERSION)


def decode(key: bytes, value: bytes | None) -> OffsetRecord | GroupRecord | None:
    """One record of the topic; None for key versions we don't know (Kafka skips them too)."""
    (key_version,) = _version.unpack_from(key)
    if key_version in (0, 1):
        k = OffsetCommitKey.decode(key[2:], key_version)
        v = None if value is None else _offset_value(value)
        return OffsetRecord(k.group, k.topic, k.partition, v)
    if key_version == GROUP_KEY_VERSION:
        g = GroupMetadataKey.decode(key[2:], key_version)
        return GroupRecord(g.group, None if value is None else _group_value(value))
    return None


def _offset_value(value: bytes) -> OffsetCommitValue:
    (version,) = _version.unpack_from(value)
    return OffsetCommitValue.decode(value[2:], version)


def _group_value(value: bytes) -> GroupMetadataValue:
    (version,) = _version.unpack_from(value)
    return GroupMetadataValue.decode(value[2:], version)


def group_metadata(group: Group) -> GroupMetadataValue:
    """The metadata value of `group` as it stands."""
    members = [
        GroupMetadataValue.MemberMetadata(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata(group.protocol_name),
            assignment=m.assignment,
        )
        for m in group.members.values()
    ]
    return GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=group.protocol_name,
        leader=group.leader_id,
        current_state_timestamp=group.state_timestamp_ms,
        members=members,
    )


def restore_group(group_id: str, value: GroupMetadataValue, initial_delay_ms: int) -> Group:
    """A group from its metadata value: Stable with its members, or Empty. The members'
    session deadlines are the coordinator's to set (from when it installs the group)."""
    group = Group(
        group_id,
        initial_delay_ms,
        state=GroupState.STABLE if value.members else GroupState.EMPTY,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader,
        state_timestamp_ms=value.current_state_timestamp,
    )
    for m in value.members:
        protocols = [(value.protocol, bytes(m.subscription))] if value.protocol else []
        member = Member(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout,
            m.session_timeout,
            protocols,
            bytes(m.assignment),
        )
        group.members[m.member_id] = member
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    return group
