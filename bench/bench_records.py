"""Throughput check for the record-batch hot paths (not a test).

Run: .venv/bin/python bench/bench_records.py

Measures: iterating the headers of 1000 concatenated batches, verifying the CRC of a 16 KiB
batch, rewriting a batch's base offset in place, and decoding the records of a batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from protocol.records import (
    RecordBatchView,
    SimpleRecord,
    build_record_batch,
    iter_batches,
    iter_records,
)


def bench(
    name: str, fn: Callable[[], object], unit_per_call: int = 1, min_seconds: float = 0.5
) -> None:
    calls = 0
    start = time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            break
    rate = calls * unit_per_call / elapsed
    print(f"{name:<48} {rate:>14,.0f} ops/s")


def main() -> None:
    small = [SimpleRecord(b"key", b"value" * 20, (), 1_700_000_000_000 + i) for i in range(10)]
    blob = b"".join(build_record_batch(small, base_offset=i * 10) for i in range(1000))

    def iterate_headers() -> None:
        for batch in iter_batches(blob):
            assert isinstance(batch, RecordBatchView)
            _ = (batch.base_offset, batch.last_offset, batch.records_count, batch.max_timestamp)

    def iterate_header_tuples() -> None:
        for batch in iter_batches(blob):
            assert isinstance(batch, RecordBatchView)
            batch.header()

    big = bytearray(build_record_batch([SimpleRecord(b"k", bytes(1024), (), 0) for _ in range(16)]))
    assert 16 * 1024 <= len(big) < 17 * 1024
    big_view = RecordBatchView(big)
    offsets = iter(range(10**12))

    def rewrite() -> None:
        big_view.set_base_offset(next(offsets))

    records_batch = RecordBatchView(build_record_batch(small * 10))

    def decode() -> None:
        for _ in iter_records(records_batch):
            pass

    bench("iter_batches + 4 header fields (per batch)", iterate_headers, 1000)
    bench("iter_batches + header() tuple (per batch)", iterate_header_tuples, 1000)
    bench(f"verify_crc on a {len(big)}-byte batch", big_view.verify_crc)
    bench("set_base_offset in place", rewrite)
    bench("iter_records, uncompressed (per record)", decode, 100)


if __name__ == "__main__":
    main()
