"""Kafka 3.9's own ``kafka.tools.DumpLogSegments`` reads our segments and indexes.

Runs the tool from the Kafka jars (``make jars`` puts them in ``.cache/jars/kafka/``) over a
log holding every codec, several leader epochs, LogAppendTime, a converted legacy message set,
transaction markers, compaction output with a delete horizon, and several segments: deep
iteration must find every batch valid with no trailing bytes, ``--verify-index-only`` must find
no mismatch in any ``.index`` or ``.timeindex``, and ``--index-sanity-check`` must pass. It
also reads our ``.txnindex`` entries and the transactions in our producer snapshots.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from protocol.compression import CompressionType
from protocol.records import (
    SimpleRecord,
    TimestampType,
    build_end_txn_marker_batch,
    build_legacy_records,
    build_record_batch,
)
from storage.config import LogConfig
from storage.log_manager import LogManager
from storage.validation import AppendOrigin

from .helpers import T0, open_log

JARS = Path(__file__).resolve().parents[2] / ".cache" / "jars" / "kafka"
JAVA = shutil.which("java")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        JAVA is None, reason="java is not installed (needed to run DumpLogSegments)"
    ),
    pytest.mark.skipif(
        not list(JARS.glob("kafka_2.13-*.jar")),
        reason=f"the Kafka jars are missing from {JARS}: run `make jars`",
    ),
]


def _dump(*args: str) -> tuple[str, str]:
    assert JAVA is not None
    proc = subprocess.run(
        [JAVA, "-cp", f"{JARS}/*", "kafka.tools.DumpLogSegments", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    errors = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("log4j:"))
    return proc.stdout, errors


def _build_logs(root: Path) -> list[Path]:
    created = root / "created-0"
    log = open_log(created, LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512))
    expected_batches = 0
    for i in range(240):
        records = [
            SimpleRecord(
                b"key-%d" % (j % 7),
                b"value-%d-%d" % (i, j) * (i % 9),
                (("h", b"v"),),
                T0 + 10 * i + j,
            )
            for j in range(1 + i % 5)
        ]
        codec = list(CompressionType)[i % 5]
        log.append_as_leader(bytearray(build_record_batch(records, compression=codec)), i // 60, T0)
        expected_batches += 1
        if i % 50 == 25:
            marker = build_end_txn_marker_batch(
                True, producer_id=7, producer_epoch=0, coordinator_epoch=1, timestamp=T0 + 10 * i
            )
            log.append_as_leader(bytearray(marker), i // 60, T0, origin=AppendOrigin.COORDINATOR)
            expected_batches += 1
    legacy = [SimpleRecord(b"old", b"v%d" % i, (), T0 + 5000 + i) for i in range(5)]
    log.append_as_leader(build_legacy_records(legacy, magic=1), 9, T0)
    expected_batches += 1
    log.close()

    lat = root / "lat-0"
    log = open_log(
        lat,
        LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME, index_interval_bytes=100),
    )
    for i in range(50):
        log.append_as_leader(
            bytearray(build_record_batch([SimpleRecord(b"k", b"v" * 30, (), 1) for _ in range(3)])),
            0,
            T0 + i,
        )
    log.close()

    compacted = root / "compacted-0"
    config = LogConfig(cleanup_policy=("compact",), segment_bytes=2048, index_interval_bytes=200)
    log = open_log(compacted, config)
    rng = random.Random(5)
    for i in range(200):
        value = None if i % 17 == 0 else b"v%d" % i
        key = b"k%d" % rng.randrange(40)
        log.append_as_leader(
            bytearray(build_record_batch([SimpleRecord(key, value, (), T0 + i)])), 0, T0
        )
    log.update_high_watermark(log.log_end_offset)
    assert log.compact(T0 + 1000, force=True) > 0
    log.close()
    assert expected_batches == 240 + 5 + 1
    return [created, lat, compacted]


def test_dump_log_segments_reads_our_files(tmp_path: Path) -> None:
    dirs = _build_logs(tmp_path)
    logs = sorted(p for d in dirs for p in d.glob("*.log"))
    indexes = sorted(p for d in dirs for p in d.glob("*.index"))
    time_indexes = sorted(p for d in dirs for p in d.glob("*.timeindex"))
    assert len(logs) > 6

    out, err = _dump("--files", ",".join(map(str, logs)), "--deep-iteration")
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert len(batch_lines) > 300
    assert all("isvalid: true" in line for line in batch_lines), out
    assert "invalid bytes" not in out
    assert "compresscodec: zstd" in out and "compresscodec: lz4" in out
    assert "LogAppendTime:" in out and "endTxnMarker: COMMIT" in out
    assert re.search(r"deleteHorizonMs: OptionalLong\[\d+\]", out)
    # Only the compacted log may have gaps between offsets.
    gaps = [line for line in err.splitlines() if line.startswith("Non-consecutive offsets in")]
    assert gaps and all("compacted-0" in line for line in gaps), err

    out, err = _dump("--files", ",".join(map(str, indexes + time_indexes)), "--verify-index-only")
    assert "Mismatches" not in err and "Found timestamp mismatch" not in err, err
    assert "Found out of order" not in err and "not found" not in err, err
    assert err.strip() == "", err

    out, err = _dump("--files", ",".join(map(str, indexes + time_indexes)), "--index-sanity-check")
    passed = [line for line in out.splitlines() if line.endswith("passed sanity check.")]
    empty = [line for line in out.splitlines() if line.endswith("is empty.")]
    assert len(passed) + len(empty) == len(indexes) + len(time_indexes), out
    assert len(passed) > len(indexes)


def test_dump_log_segments_reads_the_active_segment_of_an_open_log(tmp_path: Path) -> None:
    """As on a running broker: the log stays open, its active segment's indexes preallocated.
    Its first index entries are in the files at once and the others once the broker's
    housekeeping writes them (every second): DumpLogSegments finds no mismatch at any time
    (the zeros after the entries end its scan, as after a running Kafka's mapped entries)."""
    manager = LogManager([tmp_path], LogConfig(index_interval_bytes=256))
    manager.open()
    log = manager.get_or_create("active", 0)
    for i in range(100):
        records = [
            SimpleRecord(b"k", b"value-%d-%d" % (i, j), (), T0 + 3 * i + j) for j in range(3)
        ]
        log.append_as_leader(bytearray(build_record_batch(records)), 0, T0)
    seg = log.active_segment
    files = f"{seg.offset_index.path},{seg.time_index.path}"
    try:
        assert seg.offset_index.entries > 10 and seg.indexes_unwritten
        _, err = _dump("--files", files, "--verify-index-only")
        assert err.strip() == "", err
        manager.write_index_entries()
        assert not seg.indexes_unwritten
        _, err = _dump("--files", files, "--verify-index-only")
        assert err.strip() == "", err
        out, _ = _dump("--files", str(seg.offset_index.path))
        listed = [line for line in out.splitlines() if line.startswith("offset:")]
        assert len(listed) == seg.offset_index.entries
        out, _ = _dump("--files", str(seg.time_index.path))
        listed = [line for line in out.splitlines() if line.startswith("timestamp:")]
        assert len(listed) == seg.time_index.entries
    finally:
        manager.close()


def test_dump_log_segments_reads_our_txn_indexes_and_snapshots(tmp_path: Path) -> None:
    """Kafka's tool reads the aborted transactions of our ``.txnindex`` files, and the ongoing
    transaction and coordinator epoch of our producer snapshots."""
    d = tmp_path / "txn-0"
    log = open_log(d, LogConfig(segment_bytes=700))
    expected: list[str] = []
    for i in range(10):
        for pid in (7, 8):
            data = build_record_batch(
                [SimpleRecord(b"k", b"v%d" % i, (), T0 + i)],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=i,
                is_transactional=True,
            )
            log.append_as_leader(bytearray(data), 0, T0)
        for pid in (7, 8):
            abort = (i + pid) % 3 == 0
            before = log.producer_state.producers[pid].current_txn_first_offset
            marker = build_end_txn_marker_batch(
                not abort, producer_id=pid, producer_epoch=0, coordinator_epoch=4, timestamp=T0
            )
            info = log.append_as_leader(bytearray(marker), 0, T0, origin=AppendOrigin.COORDINATOR)
            if abort:
                lso = next(iter(log.producer_state.ongoing), info.first_offset + 1)
                expected.append(
                    f"version: 0 producerId: {pid} firstOffset: {before} "
                    f"lastOffset: {info.first_offset} lastStableOffset: {lso}"
                )
    open_txn = log.log_end_offset
    log.append_as_leader(
        bytearray(
            build_record_batch(
                [SimpleRecord(b"k", b"open", (), T0)],
                producer_id=9,
                producer_epoch=3,
                base_sequence=0,
                is_transactional=True,
            )
        ),
        0,
        T0,
    )
    log.close()
    txn_indexes = sorted(d.glob("*.txnindex"))
    assert len(txn_indexes) > 1
    out, err = _dump("--files", ",".join(map(str, txn_indexes)))
    assert err.strip() == "", err
    assert [line for line in out.splitlines() if line.startswith("version:")] == expected

    snapshot = sorted(d.glob("*.snapshot"))[-1]
    out, err = _dump("--files", str(snapshot))
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("producerId:")}
    assert f"currentTxnFirstOffset: OptionalLong[{open_txn}]" in lines["9"], out
    assert "coordinatorEpoch: 4 currentTxnFirstOffset: OptionalLong.empty" in lines["7"], out
