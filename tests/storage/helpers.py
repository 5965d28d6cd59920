"""Shared helpers for the storage tests: batch builders, a fake clock, log readers."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from protocol.records import (
    Record,
    RecordBatchView,
    SimpleRecord,
    build_record_batch,
    iter_batches,
    iter_records,
)
from storage.config import LogConfig
from storage.partition_log import PartitionLog

T0 = 1_700_000_000_000


class Clock:
    """A settable millisecond clock to inject as ``now_ms``."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def batch(
    n: int = 1,
    *,
    ts: int = T0,
    key: bytes | None = b"k",
    value_size: int = 20,
    compression: int = 0,
    tag: int = 0,
) -> bytearray:
    """A client v2 batch of `n` records (offsets 0..n-1), as a writable buffer."""
    records = [
        SimpleRecord(
            None if key is None else key + b"%d" % i,
            bytes([tag % 256]) * value_size,
            (),
            ts + i,
        )
        for i in range(n)
    ]
    return bytearray(build_record_batch(records, compression=compression))


def keyed(pairs: Sequence[tuple[bytes, bytes | None]], *, ts: int = T0) -> bytearray:
    return bytearray(
        build_record_batch([SimpleRecord(k, v, (), ts + i) for i, (k, v) in enumerate(pairs)])
    )


def read_all(
    log: PartitionLog, offset: int | None = None, max_offset: int | None = None
) -> list[Record]:
    """Every record from `offset` (default: log start) to the end, following reads."""
    out: list[Record] = []
    pos = log.log_start_offset if offset is None else offset
    limit = log.log_end_offset if max_offset is None else max_offset
    while pos < limit:
        with log.read(pos, 1 << 20, max_offset=max_offset) as r:
            data = r.read()
        if not data:
            break
        progressed = False
        for b in iter_batches(data):
            for rec in iter_records(b):
                if rec.offset >= pos:
                    out.append(Record(rec.offset, rec.timestamp, _b(rec.key), _b(rec.value), []))
            pos = b.next_offset if isinstance(b, RecordBatchView) else b.offset + 1
            progressed = True
        if not progressed:
            break
    return out


def base_offsets(data: bytes) -> list[int]:
    """The base offset of each whole batch in `data`."""
    return [
        b.base_offset if isinstance(b, RecordBatchView) else b.offset for b in iter_batches(data)
    ]


def _b(x: object) -> bytes | None:
    return None if x is None else bytes(x)  # type: ignore[call-overload]


def batches_of(log: PartitionLog) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch in the log, from the segments' files."""
    out = []
    for seg in log.segments:
        with open(seg.log.path, "rb") as f:
            data = f.read(seg.size)
        for b in iter_batches(data):
            if isinstance(b, RecordBatchView):
                out.append((b.base_offset, b.last_offset))
            else:
                out.append((b.offset, b.offset))
    return out


def open_log(
    directory: Path, config: LogConfig | None = None, clock: Clock | None = None, **kw: object
) -> PartitionLog:
    return PartitionLog.open(directory, config or LogConfig(), now_ms=clock or Clock(), **kw)  # type: ignore[arg-type]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))
