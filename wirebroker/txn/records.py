"""The records of `__transaction_state`, in Kafka's format: encode and decode, nothing else.

A key is an int16 version (0) then `TransactionLogKey` (the transactional id). A value is an
int16 version then `TransactionLogValue`; a null value is a tombstone (an expired id). We write
version 0, as Kafka 3.9 does until `transaction.version` 1 is finalized (never, in ZooKeeper
mode), and read versions 0 and 1. An Empty transaction's partition list is null; the others'
are grouped by topic (sorted here; Kafka's order is its hash map's). The previous producer id
and epoch are not stored (as in Kafka): a loaded id has none, so a KIP-360 retry that spans a
coordinator change is fenced, as Kafka's is.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from protocol.messages.transaction_coordinator.transaction_log import (
    TransactionLogKey,
    TransactionLogValue,
)
from wirebroker.partition import TopicPartition
from wirebroker.txn.state import TransactionMetadata, TxnState, TxnTransit

KEY_VERSION = 0
VALUE_VERSION = 0

_version = struct.Struct(">h")


def key(transactional_id: str) -> bytes:
    return _version.pack(KEY_VERSION) + TransactionLogKey(transactional_id=transactional_id).encode(
        KEY_VERSION
    )


def value(transit: TxnTransit) -> bytes:
    """The value a transition writes."""
    if transit.state == TxnState.EMPTY:
        partitions: list[TransactionLogValue.PartitionsSchema] | None = None
    else:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in transit.partitions:
            by_topic[tp.topic].append(tp.partition)
        partitions = [
            TransactionLogValue.PartitionsSchema(topic=topic, partition_ids=sorted(ids))
            for topic, ids in sorted(by_topic.items())
        ]
    body = TransactionLogValue(
        producer_id=transit.producer_id,
        producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.timeout_ms,
        transaction_status=transit.state.id,
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.update_ms,
        transaction_start_timestamp_ms=transit.start_ms,
    )
    return _version.pack(VALUE_VERSION) + body.encode(VALUE_VERSION)


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version we do not know (Kafka skips
    those with a warning)."""
    (version,) = _version.unpack_from(data)
    if version != KEY_VERSION:
        return None
    return TransactionLogKey.decode(data[2:], version).transactional_id


def decode_value(transactional_id: str, data: bytes | None) -> TransactionMetadata | None:
    """The metadata a value holds; None for a tombstone. An unknown version raises
    ValueError (Kafka fails the load too)."""
    if data is None:
        return None
    (version,) = _version.unpack_from(data)
    if version not in (0, 1):
        raise ValueError(f"unknown __transaction_state value version {version}")
    v = TransactionLogValue.decode(data[2:], version)
    state = TxnState.from_id(v.transaction_status)
    metadata = TransactionMetadata(
        transactional_id,
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        timeout_ms=v.transaction_timeout_ms,
        state=state,
        update_ms=v.transaction_last_update_timestamp_ms,
        start_ms=v.transaction_start_timestamp_ms,
    )
    if state != TxnState.EMPTY:
        for p in v.transaction_partitions or []:
            metadata.partitions.update(TopicPartition(p.topic, i) for i in p.partition_ids)
    return metadata
