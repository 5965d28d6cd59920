"""Storage benchmark (not a test): append, read lookup and recovery figures for docs/storage.md.

Run: .venv/bin/python bench/bench_storage.py [--dir DIR] [--quick]

Measures, on one core, into the page cache (no fsync):
* leader append throughput of 16 KiB and 1 MiB v2 batches (validation with its record walk +
  CRC check + offset assignment + os.pwrite + indexing), next to a bare ``os.pwrite`` loop of
  the same buffers, and of 16 KiB batches of 100 B records (the walk's per-record cost);
* follower append of 16 KiB batches;
* read lookup latency (read(offset, 1 MiB) + release) for logs of 10, 100 and 1000 segments
  -- it must stay flat: O(log segments) + one in-memory index probe + a bounded scan;
* recovery scan throughput (unclean open from recovery point 0: CRC of every batch, indexes
  rebuilt) for 16 KiB and 1 KiB batches.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from protocol.records import SimpleRecord, build_record_batch
from storage.config import LogConfig
from storage.partition_log import PartitionLog

MiB = 1024 * 1024


def _batch(total: int, record_size: int) -> bytearray:
    n = max(1, (total - 61) // (record_size + 18))
    recs = [
        SimpleRecord(b"key-%06d" % i, os.urandom(record_size), (), 1_700_000_000_000)
        for i in range(n)
    ]
    return bytearray(build_record_batch(recs))


def _clock() -> int:
    return 1_700_000_000_000


def _rounds(run: Callable[[int], float], rounds: int) -> tuple[float, float]:
    """(median, best) MB/s over `rounds` runs; each run writes a fresh file and deletes it,
    so later rounds reuse page-cache pages instead of first-touching VM memory."""
    rates = sorted(run(i) for i in range(rounds))
    return statistics.median(rates), rates[-1]


def bench_append(root: Path, batch: bytearray, total: int, label: str, rounds: int) -> float:
    n = max(1, total // len(batch))
    config = LogConfig(max_message_bytes=2 * MiB)

    def run(i: int) -> float:
        d = root / f"append-{len(batch)}-{i}"
        log = PartitionLog.open(d, config, now_ms=_clock)
        start = time.perf_counter()
        for _ in range(n):
            log.append_as_leader(batch, 0, 1_700_000_000_000)
        elapsed = time.perf_counter() - start
        log.close()
        shutil.rmtree(d)
        return n * len(batch) / elapsed / 1e6

    median, best = _rounds(run, rounds)
    per = len(batch) / median
    print(f"  {label:<44} {median:>7,.0f} MB/s median, {best:>7,.0f} best  ({per:,.1f} us/append)")
    return median


def bench_raw_write(root: Path, batch: bytearray, total: int, label: str, rounds: int) -> float:
    n = max(1, total // len(batch))

    def run(i: int) -> float:
        path = root / f"raw-{i}.bin"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        pos = 0
        start = time.perf_counter()
        for _ in range(n):
            pos += os.pwrite(fd, batch, pos)
        elapsed = time.perf_counter() - start
        os.close(fd)
        path.unlink()
        return n * len(batch) / elapsed / 1e6

    median, best = _rounds(run, rounds)
    print(f"  {label:<44} {median:>7,.0f} MB/s median, {best:>7,.0f} best")
    return median


def bench_follower(root: Path, batch: bytearray, total: int) -> float:
    d = root / "follower-0"
    log = PartitionLog.open(d, LogConfig(), now_ms=_clock)
    n = max(1, total // len(batch))
    count = int.from_bytes(batch[57:61], "big")
    blobs = []
    for i in range(64):
        b = bytearray(batch)
        b[0:8] = (i * count).to_bytes(8, "big")
        blobs.append(b)
    start = time.perf_counter()
    base = 0
    for i in range(n):
        b = blobs[i % 64]
        b[0:8] = base.to_bytes(8, "big")
        log.append_as_follower(b)
        base += count
    elapsed = time.perf_counter() - start
    rate = n * len(batch) / elapsed / 1e6
    print(f"  {'follower append, 16 KiB batches':<44} {rate:>9,.0f} MB/s")
    log.close()
    shutil.rmtree(d)
    return rate


def _timeit(fn: Callable[[], object], seconds: float = 0.5) -> float:
    calls = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / calls


def _random_reader(log: PartitionLog, max_bytes: int) -> Callable[[], None]:
    leo = log.log_end_offset
    rng = random.Random(1)

    def one() -> None:
        with log.read(rng.randrange(leo), max_bytes):
            pass

    return one


def bench_reads(root: Path) -> list[tuple[int, float]]:
    """Lookup cost against the segment count: read(offset, 1) returns exactly the batch
    holding a random offset, so the work is the lookup (bisect over segments, one in-memory
    index probe, a header scan of at most ~index.interval.bytes) plus building the slice."""
    out = []
    batch = _batch(1024, 100)
    for segments in (10, 100, 1000, 10_000):
        d = root / f"reads-{segments}-0"
        config = LogConfig(segment_bytes=16 * 1024)
        log = PartitionLog.open(d, config, now_ms=_clock)
        per_segment = config.segment_bytes // len(batch)
        while len(log.segments) < segments:
            for _ in range(per_segment):
                log.append_as_leader(batch, 0, 1_700_000_000_000)
        _timeit(_random_reader(log, 1), 0.5)  # warm: indexes load lazily on first use
        lookup = min(_timeit(_random_reader(log, 1), 0.3) for _ in range(5))
        wide = min(_timeit(_random_reader(log, MiB), 0.3) for _ in range(5))
        print(
            f"  {segments:>6} segments, {log.log_end_offset:>8} batches: lookup (best of 5) "
            f"{lookup * 1e6:>6.1f} us; read(offset, 1 MiB) {wide * 1e6:>6.1f} us"
        )
        out.append((segments, lookup))
        log.close()
        shutil.rmtree(d)
    return out


def bench_recovery(root: Path, batch: bytearray, total: int, label: str) -> float:
    d = root / f"recovery-{len(batch)}-0"
    log = PartitionLog.open(d, LogConfig(), now_ms=_clock)
    n = max(1, total // len(batch))
    for _ in range(n):
        log.append_as_leader(batch, 0, 1_700_000_000_000)
    size = log.size_in_bytes
    log.abandon()  # a crash: no flush, no index files written, recovery point 0
    start = time.perf_counter()
    reopened = PartitionLog.open(d, LogConfig(), now_ms=_clock, recovery_point=0)
    elapsed = time.perf_counter() - start
    assert reopened.log_end_offset == log.log_end_offset
    rate = size / elapsed / 1e6
    print(f"  {label:<44} {rate:>9,.0f} MB/s  ({size / MiB:,.0f} MiB in {elapsed:.2f} s)")
    reopened.close()
    shutil.rmtree(d)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temp dir)"
    )
    parser.add_argument("--quick", action="store_true", help="smaller volumes")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-storage-", dir=args.dir))
    scale = 4 if args.quick else 1
    try:
        print(
            f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
            f"Python {platform.python_version()}, dir {root}"
        )
        small = _batch(16 * 1024, 1000)
        big = _batch(MiB, 4096)
        print("append (one core, page cache, no fsync; rounds of fresh files):")
        # Warm-up: the first write into fresh VM memory is several times slower than into
        # recycled page-cache pages.
        bench_raw_write(root, big, 1024 * MiB // scale, "warm-up: bare os.pwrite, first touch", 1)
        bench_raw_write(
            root, small, 256 * MiB // scale, f"bare os.pwrite, {len(small)} B buffers", 5
        )
        bench_append(root, small, 256 * MiB // scale, f"leader append, {len(small)} B batches", 5)
        many = _batch(16 * 1024, 100)  # 138 records: shows the per-record cost of the walk
        bench_append(
            root, many, 64 * MiB // scale, f"leader append, {len(many)} B, 100 B records", 5
        )
        bench_raw_write(root, big, 512 * MiB // scale, f"bare os.pwrite, {len(big)} B buffers", 5)
        bench_append(root, big, 512 * MiB // scale, f"leader append, {len(big)} B batches", 5)
        bench_follower(root, small, 256 * MiB // scale)
        print("read lookup (random offsets; read + release; 16 KiB segments of 1 KiB batches):")
        bench_reads(root)
        print("recovery scan (unclean open, CRC of every batch, indexes rebuilt):")
        bench_recovery(root, small, 1024 * MiB // scale, f"recovery, {len(small)} B batches")
        tiny = _batch(1024, 100)
        bench_recovery(root, tiny, 256 * MiB // scale, f"recovery, {len(tiny)} B batches")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
