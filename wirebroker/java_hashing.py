"""Java's String.hashCode and the order Java's hash tables iterate in, where wirebroker must
place things as Kafka does (a group's coordinator partition, a replica fetcher) or list them in
the order Java would (a JKS store's aliases, a certificate's alternative names, the credentials
a JAAS login leaves in its Subject).

- `string_hash`: String.hashCode over UTF-16 code units, a signed 32-bit int.
- `hashtable_order`: java.util.Hashtable's enumeration (JavaKeyStore, JceKeyStore).
- `hash_set_order`: java.util.HashSet's (a HashMap's keys): by bucket of the spread hash, each
  bucket in the order its items were added (a table that grows keeps that order).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

#: java.util.Hashtable's defaults: the capacity of a new table and its load factor.
_HASHTABLE_CAPACITY, _LOAD_FACTOR = 11, 0.75


def string_hash(text: str) -> int:
    """Java's String.hashCode of `text`: a signed 32-bit int."""
    units = text.encode("utf-16-be", "surrogatepass")
    value = 0
    for i in range(0, len(units), 2):
        value = (31 * value + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


def hashtable_order(keys: Sequence[str]) -> list[str]:
    """The order a java.util.Hashtable made with its defaults enumerates `keys` put in this
    order (distinct): its buckets from the last to the first, each from its newest key, a key's
    bucket its String.hashCode (sign bit cleared) modulo the capacity, which grows to 2n+1 when
    the table holds three quarters of it (its keys moved bucket by bucket from the last)."""

    def index(key: str, size: int) -> int:
        return (string_hash(key) & 0x7FFFFFFF) % size

    buckets: list[list[str]] = [[] for _ in range(_HASHTABLE_CAPACITY)]
    for count, key in enumerate(keys):
        if count >= int(len(buckets) * _LOAD_FACTOR):
            old, buckets = buckets, [[] for _ in range(2 * len(buckets) + 1)]
            for bucket in reversed(old):
                for moved in bucket:
                    buckets[index(moved, len(buckets))].insert(0, moved)
        buckets[index(key, len(buckets))].insert(0, key)
    return [key for bucket in reversed(buckets) for key in bucket]


def hash_set_order(
    items: Iterable[T], hash_code: Callable[[T], int], *, initial_capacity: int = 16
) -> list[T]:
    """The order a java.util.HashSet made with `initial_capacity` (rounded up to a power of
    two) iterates `items` added in this order, equal ones once: by bucket, the hash folded as
    HashMap.hash does and masked by the capacity, which doubles when the set holds more than
    three quarters of it; within a bucket, in the order added."""
    distinct = list(dict.fromkeys(items))
    capacity = 1
    while capacity < initial_capacity:
        capacity *= 2
    while len(distinct) > capacity * 3 // 4:
        capacity *= 2

    def bucket(item: T) -> int:
        value = hash_code(item) & 0xFFFFFFFF
        return (value ^ (value >> 16)) & (capacity - 1)

    buckets = [bucket(item) for item in distinct]
    return [distinct[i] for i in sorted(range(len(distinct)), key=buckets.__getitem__)]
