"""Values of the request fuzz (`test_request_fuzz.py`, `test_cluster_member_fuzz.py`): each
field's scalars biased toward what takes a handler past its first checks, and Produce's record
batches.

Random strings mostly name no topic and random ints mostly no partition, so the handlers would
answer UNKNOWN_TOPIC_OR_PARTITION and stop. Each field draws from three sources instead: values
chosen for its name (topics, groups, transactional and producer ids the broker knows, Kafka's
special offsets and ids, config names and values), every such value of any field, and random
values of its type. Counts that the broker would honour by making that many things (partitions,
replicas) stay small: a huge one is a legitimate request that costs time, not a bad input; and
no config sets `listeners`, which would move the port the fuzz talks to.
"""

from __future__ import annotations

import math
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from protocol.checksum import crc32c
from protocol.compression import CompressionType
from protocol.legacy_records import build_legacy_records
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from protocol.schema import Field, Struct
from tests.protocol.strategies import Scalars, any_scalar
from wirebroker.topics import OFFSETS_TOPIC, TXN_TOPIC


@dataclass
class Known:
    """What the fuzzed broker holds when the fuzz starts (`test_request_fuzz._known`)."""

    topics: dict[str, int]  # name -> partitions
    topic_ids: list[uuid.UUID]
    groups: list[str]
    transactional_ids: list[str]
    producers: list[tuple[int, int]]  # (producer id, epoch)
    node_id: int
    log_dir: str
    members: list[str]  # member ids of the live group's members
    generations: list[int]  # and its generations


_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

#: Values every int field is tried with, besides its type's bounds.
_EDGES = [0, 1, 2, 3, -1, -2, -3, -4, -5]

#: Fields whose values the broker waits for (ms): long ones would only make the fuzz slow.
_WAITS = ("timeout_ms", "max_wait_ms", "rebalance_timeout_ms", "session_timeout_ms")

#: Fields counting what the broker would make: partitions, replicas.
_COUNTS = {"num_partitions": [-2, -1, 0, 1, 2, 4], "count": [-1, 0, 1, 2, 3, 4]}

CONFIG_NAMES = [
    "cleanup.policy",
    "retention.ms",
    "min.insync.replicas",
    "max.message.bytes",
    "message.timestamp.type",
    "message.timestamp.difference.max.ms",
    "compression.type",
    "segment.bytes",
    "unclean.leader.election.enable",
    "log.retention.ms",
    "log.cleaner.threads",
    "num.io.threads",
    "advertised.listeners",
    "ssl.keystore.location",
    "sasl.jaas.config",
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
    "connection_creation_rate",
    "metadata.version",
    "wirebroker.unknown",
]
CONFIG_VALUES = [
    "",
    "-1",
    "0",
    "1",
    "2",
    "compact",
    "delete,compact",
    "LogAppendTime",
    "zstd",
    "9223372036854775808",
    "1e3",
    "abc",
    "true",
    "PLAINTEXT://127.0.0.1:0",
]
_PRINCIPALS = ["User:ANONYMOUS", "User:*", "User:", "User", "Group:x", "*"]
_HOSTS = ["*", "127.0.0.1", "::1", "localhost", "not a host"]
_OTHER_STRINGS = [
    "",
    "*",
    ".",
    "..",
    "a" * 250,
    "bad/name",
    "bad name",
    "\u00fc\u0000",
    "consumer",
    "range",
    "PLAIN",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
    "GSSAPI",
    "OAUTHBEARER",
    "Stable",
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "kraft.version",
]


def _strings(known: Known) -> dict[str, list[str]]:
    return {
        "topic": [*known.topics, OFFSETS_TOPIC, TXN_TOPIC],
        "group": [*known.groups, *known.transactional_ids],
        "transactional": known.transactional_ids,
        "principal": _PRINCIPALS,
        "host": _HOSTS,
        "path": [known.log_dir, f"{known.log_dir}/x", "/", "relative"],
        "config": CONFIG_NAMES,
        "value": CONFIG_VALUES,
        "resource": [*known.topics, *known.groups, str(known.node_id), "", "*"],
        "member": [*known.members, ""],
        "entity": ["user", "client-id", "ip"],
        "other": [*_OTHER_STRINGS, str(known.node_id)],
    }


def _string_kind(owner: str, name: str) -> str:
    """Which pool a string field draws from, by its name and its struct's (`owner`)."""
    if "transactional_id" in name:
        return "transactional"
    if "group" in name or name == "coordinator_keys" or (owner == "FindCoordinatorRequest"):
        return "group"
    if name == "member_id":
        return "member"
    if "principal" in name:
        return "principal"
    if "host" in name:
        return "host"
    if name == "path":
        return "path"
    if name in ("value", "committed_metadata"):
        return "value"
    if "resource_name" in name:
        return "resource"
    if name == "entity_type":
        return "entity"
    if name in ("configuration_keys", "feature", "key") or "Config" in owner:
        return "config"
    if "topic" in name or (name == "name" and "Topic" in owner):
        return "topic"
    return "other"


#: int8 fields that are enums (resource and ACL types, operations, codes): their small values.
_ENUM_VALUES = [-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 16]


def scalars(known: Known) -> Scalars:
    """The scalars of `known`'s broker (`tests.protocol.strategies.Scalars`): the values that
    fit the field (drawn most), any such value of any field, any value of the type."""
    pools = _strings(known)
    every_string = st.sampled_from(sorted({s for pool in pools.values() for s in pool}))
    producer_ids = [p for p, _ in known.producers]
    epochs = [e for _, e in known.producers]
    ids = [known.node_id, known.node_id + 1, -1]
    topic_ids = st.sampled_from([*known.topic_ids, uuid.UUID(int=0)]) | st.uuids()

    def favouring(fitting: Sequence[Any], others: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        # Four draws in five from `fitting` (hypothesis's one_of would take it one in three).
        fits = st.sampled_from(fitting)
        return st.integers(0, 4).flatmap(lambda i: others if i == 4 else fits)

    def ints(type_: str, fitting: Sequence[int]) -> st.SearchStrategy[int]:
        lo, hi = _INT_RANGES[type_]
        edges = sorted({v for v in [*_EDGES, lo, hi] if lo <= v <= hi})
        others = st.sampled_from(edges) | st.integers(lo, hi)
        return favouring(fitting, others) if fitting else others

    def scalar(owner: type[Struct], f: Field, type_: str) -> st.SearchStrategy[Any]:
        name = f.name
        if type_ == "string":
            pool = pools[_string_kind(owner.__name__, name)]
            return favouring(pool, every_string | st.text(max_size=12))
        if type_ == "records":
            return record_batches(known)
        if type_ == "uuid":
            return topic_ids
        if type_ == "float64":
            specials = [0.0, -1.0, 1.0, 1e308, 5e-324, math.inf, -math.inf, math.nan]
            return st.sampled_from(specials) | st.floats()
        if type_ not in _INT_RANGES:
            return any_scalar(owner, f, type_)
        if name.endswith(_WAITS):
            return favouring([-1, 0, 100, 500], st.integers(-(2**31), 500))
        if name in _COUNTS:
            return st.sampled_from(_COUNTS[name])
        if name == "replication_factor":
            return st.sampled_from([-1, 0, 1, 2, 2**15 - 1])
        if name == "acks":
            return ints(type_, [-1, 0, 1])
        if "producer_id" in name:
            return ints(type_, producer_ids)
        if "producer_epoch" in name:
            return ints(type_, epochs)
        if "partition" in name or name == "index":
            return ints(type_, list(range(max(known.topics.values()))))
        if name.endswith(("broker_id", "broker_ids", "replica_id", "controller_id", "leader")):
            return ints(type_, ids)
        if name in ("isr", "replicas", "new_isr", "id", "adding_replicas", "removing_replicas"):
            return ints(type_, ids)
        if "generation_id" in name or name == "member_epoch":
            return ints(type_, [*known.generations, -1, 0])
        if name == "resource_type" and "Config" in owner.__name__:
            return ints(type_, [2, 4, 8, 16])  # topic, broker, broker logger, client metrics
        if type_ == "int8":
            return ints(type_, _ENUM_VALUES)
        if "offset" in name or "timestamp" in name:
            return ints(type_, [0, 1, 2, 3, -1, -2, -3])
        return ints(type_, [])

    return scalar


# Record batches -------------------------------------------------------------------------------

_COUNT_AT, _LENGTH_AT, _MAGIC_AT, _CRC_AT, _ATTRIBUTES_AT = 57, 8, 16, 17, 21
_LAST_DELTA_AT, _PRODUCER_AT, _SEQUENCE_AT = 23, 43, 53


def _with_crc(batch: bytearray) -> bytes:
    """`batch` with its v2 CRC-32C recomputed (so that edits get past the CRC check)."""
    struct.pack_into(">I", batch, _CRC_AT, crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))
    return bytes(batch)


_records = st.lists(
    st.builds(
        SimpleRecord,
        key=st.none() | st.binary(max_size=8),
        value=st.none() | st.binary(max_size=16),
        headers=st.lists(
            st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2
        ),
        timestamp=st.sampled_from([-1, 0, 1_700_000_000_000, 2**62]),  # deltas fit
    ),
    min_size=1,
    max_size=3,
)


@st.composite
def _v2_batch(draw: st.DrawFn, known: Known) -> bytearray:
    pid, epoch = draw(st.sampled_from([(-1, -1), *known.producers]))
    return bytearray(
        build_record_batch(
            draw(_records),
            base_offset=draw(st.sampled_from([0, 5, -1])),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=draw(st.sampled_from([-1, 0, 1, 2**31 - 1])),
            is_transactional=draw(st.booleans()),
            compression=draw(st.sampled_from(list(CompressionType))),
        )
    )


@st.composite
def _edited_batch(draw: st.DrawFn, known: Known) -> bytes:
    """A valid v2 batch with one header field or its payload made wrong; the CRC is mostly
    recomputed, so the edit reaches the checks after it."""
    batch = draw(_v2_batch(known))
    edit = draw(
        st.sampled_from(
            ["crc", "count", "length", "magic", "attributes", "codec", "delta", "sequence", "cut"]
        )
    )
    if edit == "crc":
        batch[_CRC_AT] ^= 0xFF
        return bytes(batch)
    if edit == "count":
        count = draw(st.sampled_from([-1, 0, 2, 1000, 2**31 - 1]))
        struct.pack_into(">i", batch, _COUNT_AT, count)
    elif edit == "length":
        length = draw(st.sampled_from([-1, 0, 10, 48, 2**20, 2**31 - 1]))
        struct.pack_into(">i", batch, _LENGTH_AT, length)
    elif edit == "magic":
        batch[_MAGIC_AT] = draw(st.sampled_from([0, 1, 3, 0xFF]))
    elif edit == "attributes":  # control, transactional, timestamp type, delete horizon, unknown
        bits = draw(st.sampled_from([0x08, 0x10, 0x20, 0x30, 0x40, 0x80, 0xFFFF]))
        struct.pack_into(">H", batch, _ATTRIBUTES_AT, bits | (batch[_ATTRIBUTES_AT + 1] & 7))
    elif edit == "codec":  # compressed, or an unknown codec, over a payload that is garbage
        garbage = draw(st.binary(min_size=0, max_size=40))
        batch[_ATTRIBUTES_AT + 1] = (batch[_ATTRIBUTES_AT + 1] & ~7) | draw(st.integers(1, 7))
        del batch[61:]
        batch += garbage
        struct.pack_into(">i", batch, _LENGTH_AT, len(batch) - 12)
    elif edit == "delta":
        delta = draw(st.sampled_from([-1, 1, 100, 2**31 - 1]))
        struct.pack_into(">i", batch, _LAST_DELTA_AT, delta)
    elif edit == "sequence":
        struct.pack_into(">i", batch, _SEQUENCE_AT, draw(st.sampled_from([-2, 5, 2**31 - 1])))
    else:
        del batch[draw(st.integers(0, len(batch) - 1)) :]
    return _with_crc(batch) if len(batch) >= 61 and draw(st.booleans()) else bytes(batch)


def _legacy(known: Known) -> st.SearchStrategy[bytes]:
    return st.builds(
        lambda records, magic, codec: build_legacy_records(
            [SimpleRecord(r.key, r.value, (), max(r.timestamp, 0)) for r in records],
            magic=magic,
            compression=codec,
        ),
        _records,
        st.sampled_from([0, 1]),
        st.sampled_from([0, 1, 2, 3]),
    )


def record_batches(known: Known) -> st.SearchStrategy[bytes | None]:
    """A Produce partition's records: none, random bytes, valid v2 batches (with the known
    producers' ids), edited ones, legacy message sets, and two of them back to back."""
    one = (
        _v2_batch(known).map(bytes) | _edited_batch(known) | _legacy(known) | st.binary(max_size=64)
    )
    return st.none() | one | st.tuples(one, one).map(b"".join)
