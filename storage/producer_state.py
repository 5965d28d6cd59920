"""Idempotent and transactional producer state of one partition (Kafka's ProducerStateManager).

This module owns, per producer id, the epoch, the metadata of the last five batches the
partition accepted (first/last sequence, first/last offset, max timestamp), the coordinator
epoch of its last transaction marker and the first offset of its ongoing transaction; and, per
partition, the ongoing transactions (by first offset) and the completed ones whose marker the
high watermark has not passed yet -- together they give the *first unstable offset*, from
which the log computes its last stable offset. The rules a leader append must pass are Kafka
3.9's (``ProducerAppendInfo``):

- a batch whose epoch and sequence range equal a retained batch is a *duplicate*: it is not
  written, and the append answers with the original offsets and no error (client appends);
- an epoch older than the producer's current one: INVALID_PRODUCER_EPOCH (data and markers);
- a new (higher) epoch must start at sequence 0, unless the producer is unknown here;
- within an epoch the first sequence must follow the last one (``last + 1``, or 0 after
  ``Int32.MAX``): otherwise OUT_OF_ORDER_SEQUENCE_NUMBER (client appends only);
- a producer the partition has no state for (new, or its state expired or was lost) may start
  at any sequence: Kafka 3.9 no longer answers UNKNOWN_PRODUCER_ID to Produce;
- a non-transactional batch from a producer with an ongoing transaction: INVALID_TXN_STATE;
  a transactional batch from a producer without one starts one (at its first offset);
- a COMMIT/ABORT marker (a control batch: key version + type, value version + coordinator
  epoch) with a coordinator epoch older than the producer's last one:
  TRANSACTION_COORDINATOR_FENCED. A marker ends the producer's ongoing transaction (a marker
  without one completes nothing) and takes its epoch and coordinator epoch.

KIP-890's verification state (Kafka's VerificationStateEntry and VerificationGuard): before
a producer's first transactional batch of a transaction is verified with the coordinator, the
caller takes a guard (`start_verification`); the append must bring that same guard, and any
transactional batch or marker of the producer appended meanwhile (a marker of a transaction
that ended while the coordinator was asked) removes it, so the late batch is refused
(INVALID_TXN_STATE, "Record was not part of an ongoing transaction") instead of opening a
transaction no marker will close. While the entry exists a client batch with a sequence
above the lowest one being verified is OUT_OF_ORDER_SEQUENCE_NUMBER. Entries expire with
the producers.

Replicated and recovered batches are applied without checks, as Kafka applies them.

Snapshots are Kafka's ``<offset, 20 digits>.snapshot`` files (version 1: int16 version, uint32
CRC-32C of everything after it, then an int32-counted array of entries -- producer id, epoch,
last sequence, last offset, offset delta, timestamp, coordinator epoch, current transaction
first offset), holding the state of every batch below ``offset``. Kafka writes one entry per
producer (its last batch), so a restart forgets the other four and answers their retries
OUT_OF_ORDER_SEQUENCE_NUMBER; we write one entry per retained batch, oldest first, so all five
survive -- Kafka reads such a file too (later entries of a producer replace earlier ones). :class:`PartitionLog` takes one at each roll (encoded on
its thread, written in a worker thread and renamed back on its thread: see
:mod:`storage.roll_work`) and at close, and at open rebuilds the state from the latest readable snapshot plus the batches after it. A
producer with an ongoing transaction never expires.

Pure apart from the snapshot files: it never reads segments (the log hands it batches).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from protocol.checksum import crc32c
from protocol.record_batch import RecordBatchView
from protocol.record_builder import (
    ControlRecordType,
    decode_control_record_key,
    decode_end_txn_marker,
)
from protocol.records import iter_records
from storage.checkpoints import fsync_dir
from storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.layout import SNAPSHOT_SUFFIX, offset_from_file_name, segment_file

__all__ = [
    "SENTINEL",
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "ProducerEntry",
    "ProducerStateManager",
    "TxnMarker",
    "VerificationGuard",
    "batch_update",
    "producer_batches",
    "read_snapshot",
    "encode_snapshot",
    "snapshot_tmp",
    "write_snapshot",
    "write_snapshot_tmp",
]

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_VERSION = 1
#: A snapshot being written (renamed to its ``.snapshot`` name when whole).
SNAPSHOT_TMP_SUFFIX = ".tmp"
NO_PRODUCER_ID = -1
NO_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 0x7FFFFFFF
#: Kafka's ``producer.id.expiration.ms`` default: a producer whose last batch's timestamp is
#: older than this is forgotten (at load, and at each retention pass of the log).
PRODUCER_ID_EXPIRATION_MS = 86_400_000

#: The v2 batch header up to the base sequence: base offset, length, leader epoch, magic, crc,
#: attributes, last offset delta, base timestamp, max timestamp, producer id, epoch, sequence.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhi")
BATCH_HEADER_SIZE = BATCH_HEADER.size
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_SNAPSHOT_HEADER = struct.Struct(">hIi")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


class VerificationGuard:
    """Identifies one verification of a producer's transaction on a partition; equal only to
    itself (Kafka's VerificationGuard)."""

    __slots__ = ()

    def verify(self, brought: VerificationGuard | None) -> bool:
        return brought is self and self is not SENTINEL


#: The guard of an append that needed no verification (the producer's transaction is ongoing
#: here): it verifies nothing.
SENTINEL = VerificationGuard()


class VerificationState:
    """A verification in progress for a producer (Kafka's VerificationStateEntry)."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = ("epoch", "guard", "lowest_sequence", "timestamp")

    def __init__(
        self, timestamp: int, guard: VerificationGuard, lowest_sequence: int, epoch: int
    ) -> None:
        self.timestamp = timestamp
        self.guard = guard
        self.lowest_sequence = lowest_sequence
        self.epoch = epoch

    def update(self, sequence: int, epoch: int) -> None:
        """Keep the lowest sequence seen of the newest epoch (Kafka's
        maybeUpdateLowestSequenceAndEpoch)."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence


class CorruptSnapshotError(Exception):
    """A snapshot file is unreadable (short, wrong version, bad CRC). Raised by
    :func:`read_snapshot`; the manager deletes the file and falls back to an older one."""


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class TxnMarker(NamedTuple):
    """The COMMIT or ABORT record of a transactional control batch."""

    commit: bool
    coordinator_epoch: int


class BatchUpdate(NamedTuple):
    """One producer batch of an append, read from its header (offsets already assigned)."""

    producer_id: int
    epoch: int
    batch: BatchMetadata
    is_control: bool
    is_transactional: bool = False
    #: A control batch's transaction marker (None for data batches, and for a control batch
    #: that holds none: compaction may leave an empty one).
    marker: TxnMarker | None = None


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its first offset, the marker's offset, whether it was
    aborted, and the last stable offset once it completed (Kafka's CompletedTxn and the LSO
    its transaction index entry records)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


class ProducerEntry:
    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup2`).
    __slots__ = (
        "batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "epoch",
        "last_timestamp",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        epoch: int = NO_EPOCH,
        *,
        last_timestamp: int = -1,
        coordinator_epoch: int = -1,
    ) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        #: The last batches, oldest first: a list, not a bounded deque (760 bytes each, and a
        #: broker keeps an entry per producer for `producer.id.expiration.ms`, a day).
        self.batches: list[BatchMetadata] = []
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def add_batch(self, batch: BatchMetadata) -> None:
        """Remember `batch`, forgetting the oldest beyond the last five."""
        batches = self.batches
        batches.append(batch)
        if len(batches) > NUM_BATCHES_TO_RETAIN:
            del batches[0]

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def _check_sequence(entry: ProducerEntry, update: BatchUpdate) -> None:
    b = update.batch
    if update.epoch != entry.epoch:
        if b.first_seq != 0 and entry.epoch != NO_EPOCH:
            raise OutOfOrderSequenceError(
                f"invalid sequence {b.first_seq} for the new epoch {update.epoch} of "
                f"producer {update.producer_id} (current epoch {entry.epoch}): expected 0"
            )
    elif not in_sequence(entry.last_seq, b.first_seq):
        raise OutOfOrderSequenceError(
            f"out of order sequence for producer {update.producer_id} at epoch "
            f"{update.epoch}: first sequence {b.first_seq}, last appended {entry.last_seq}"
        )


def last_sequence(first_seq: int, delta: int) -> int:
    """The sequence of a batch's last record (sequences wrap from Int32.MAX to 0)."""
    return (first_seq + delta) & INT32_MAX


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def batch_update(data: bytes | memoryview, pos: int = 0) -> BatchUpdate | None:
    """The producer facts of the v2 batch at ``data[pos:]``; None without a producer id.

    `data` holds the whole batch when it is a control batch (its marker is read from its
    record); for data batches the 61-byte header suffices."""
    (
        base,
        length,
        _ple,
        _magic,
        _crc,
        attributes,
        lod,
        _base_ts,
        max_ts,
        pid,
        epoch,
        seq,
    ) = BATCH_HEADER.unpack_from(data, pos)
    if pid < 0:
        return None
    meta = BatchMetadata(seq, last_sequence(seq, lod), base, base + lod, max_ts)
    transactional = bool(attributes & _TRANSACTIONAL)
    if not attributes & _CONTROL:
        return BatchUpdate(pid, epoch, meta, False, transactional)
    view = memoryview(data)[pos : pos + length + 12]
    return BatchUpdate(pid, epoch, meta, True, transactional, read_marker(view))


def read_marker(batch: memoryview) -> TxnMarker | None:
    """The COMMIT/ABORT marker of a control batch; None when it holds no record (compaction
    emptied it) or another control type. Raises :class:`CorruptRecordError`."""
    for record in iter_records(RecordBatchView(batch)):
        _version, control_type = decode_control_record_key(record.key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return None
        _version, coordinator_epoch = decode_end_txn_marker(record.value)
        return TxnMarker(control_type == ControlRecordType.COMMIT, coordinator_epoch)
    return None


def producer_batches(data: memoryview) -> list[BatchUpdate]:
    """The producer batches among the (validated, offset-assigned) v2 batches of `data`."""
    out = []
    pos = 0
    n = len(data)
    while n - pos >= BATCH_HEADER_SIZE:
        if data[pos + 16] == 2:
            update = batch_update(data, pos)
            if update is not None:
                out.append(update)
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
    return out


# ---- snapshot files --------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytearray:
    """A version 1 snapshot file's bytes holding `entries`."""
    parts = []
    for e in entries:
        rows = [(b.last_seq, b.last_offset, b.last_offset - b.first_offset) for b in e.batches]
        for last_seq, last_offset, delta in rows or [(NO_SEQUENCE, -1, 0)]:
            parts.append(
                _SNAPSHOT_ENTRY.pack(
                    e.producer_id,
                    e.epoch,
                    last_seq,
                    last_offset,
                    delta,
                    e.last_timestamp,
                    e.coordinator_epoch,
                    e.current_txn_first_offset,
                )
            )
    body = bytearray(_SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, 0, len(parts)))
    body += b"".join(parts)
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[6:]))
    return body


def snapshot_tmp(path: Path) -> Path:
    """Where a snapshot is written before its rename to `path` (a load deletes leftovers)."""
    return path.with_name(path.name + SNAPSHOT_TMP_SUFFIX)


def write_snapshot_tmp(path: Path, data: bytes | bytearray, *, fsync: bool = False) -> None:
    """Write `data` to :func:`snapshot_tmp` of `path` (removed again if that fails)."""
    tmp = snapshot_tmp(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def write_snapshot(path: Path, entries: Iterable[ProducerEntry], *, fsync: bool = False) -> None:
    """Atomically write a version 1 snapshot of `entries` to `path`."""
    write_snapshot_tmp(path, encode_snapshot(entries), fsync=fsync)
    os.replace(snapshot_tmp(path), path)
    if fsync:
        fsync_dir(path.parent)


def read_snapshot(path: Path) -> list[ProducerEntry]:
    """The entries of a snapshot file; raises :class:`CorruptSnapshotError`."""
    data = path.read_bytes()
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"{path}: {len(data)} bytes is too short")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{path}: unknown snapshot version {version}")
    if crc32c(data[6:]) != crc:
        raise CorruptSnapshotError(f"{path}: CRC mismatch")
    if count < 0 or len(data) != _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"{path}: {count} entries do not fit {len(data)} bytes")
    entries: dict[int, ProducerEntry] = {}
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn in _SNAPSHOT_ENTRY.iter_unpack(
        data[_SNAPSHOT_HEADER.size :]
    ):
        entry = entries.get(pid)
        if entry is None or entry.epoch != epoch:
            entry = entries[pid] = ProducerEntry(pid, epoch, coordinator_epoch=coord)
        entry.last_timestamp = ts
        entry.current_txn_first_offset = txn
        if last_offset >= 0:
            first_seq = max(0, last_seq - delta)
            entry.add_batch(
                BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts)
            )
    return list(entries.values())


def snapshot_offsets(directory: Path) -> list[int]:
    """Offsets of the snapshot files in `directory`, ascending."""
    found = []
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX):
            off = offset_from_file_name(name)
            if off is not None and name == f"{off:020d}{SNAPSHOT_SUFFIX}":
                found.append(off)
    return sorted(found)


# ---- the manager -----------------------------------------------------------------------------


class ProducerStateManager:
    """The producers of one partition directory; see the module doc."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.producers: dict[int, ProducerEntry] = {}
        #: Offset of the latest snapshot on disk (-1: none).
        self.last_snapshot_offset = -1
        #: Ongoing transactions: first offset -> producer id, in offset order (a transaction
        #: starts at the log end, so insertion order is offset order; loads insert sorted).
        self.ongoing: dict[int, int] = {}
        #: Completed transactions whose marker is at or above the high watermark: first
        #: offset -> marker offset. They stay unstable until the marker is replicated.
        self.unreplicated: dict[int, int] = {}
        #: Producers whose transaction is being verified here, by producer id (not persisted).
        self.verifications: dict[int, VerificationState] = {}

    # -- transactions --

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        """Whether `producer_id` has a transaction in progress on this partition (KIP-890's
        verification asks before accepting a producer's first transactional batch)."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def start_verification(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int
    ) -> VerificationGuard:
        """The guard a transactional append of `producer_id` must bring: SENTINEL if its
        transaction is ongoing here (nothing to verify), else the guard of its verification
        state, created now or kept from an earlier attempt (Kafka's
        maybeStartTransactionVerification)."""
        if self.has_ongoing_transaction(producer_id):
            return SENTINEL
        state = self.verifications.get(producer_id)
        if state is None:
            state = self.verifications[producer_id] = VerificationState(
                now_ms, VerificationGuard(), sequence, epoch
            )
        else:
            state.update(sequence, epoch)
        return state.guard

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is ongoing, or completed with its
        marker not yet below the high watermark; None when there is none."""
        first = next(iter(self.ongoing), None)
        if self.unreplicated:
            done = min(self.unreplicated)
            if first is None or done < first:
                return done
        return first

    def on_high_watermark(self, offset: int) -> None:
        """The high watermark (or the log start offset) moved: transactions whose marker is
        below it are stable."""
        if self.unreplicated:
            self.unreplicated = {
                first: last for first, last in self.unreplicated.items() if last >= offset
            }

    def _last_stable_offset(self, producer_id: int, marker_offset: int) -> int:
        """Kafka's lastStableOffset(completedTxn): the first offset of the oldest other
        ongoing transaction, else the offset after the marker."""
        for first, pid in self.ongoing.items():
            if pid != producer_id:
                return first
        return marker_offset + 1

    # -- appends --

    def check(
        self,
        update: BatchUpdate,
        *,
        client: bool = True,
        guard: VerificationGuard | None = None,
    ) -> BatchMetadata | None:
        """Apply a leader append's rules to one batch: the original batch if it is a
        duplicate, None if it may be appended. `client`: a producer's batch (duplicates and
        sequences are checked), else a coordinator's (markers, transactional offset
        commits). `guard`: with KIP-890 verification on, the guard the append brings
        (SENTINEL if it needed none); None when verification is off. Raises
        :class:`InvalidProducerEpochError`, :class:`OutOfOrderSequenceError`,
        :class:`InvalidTxnStateError`, :class:`TransactionCoordinatorFencedError`."""
        pid = update.producer_id
        entry = self.producers.get(pid)
        b = update.batch
        if client and not update.is_control and entry is not None:
            dup = entry.find_duplicate(update.epoch, b.first_seq, b.last_seq)
            if dup is not None:
                return dup
        verifying = self.verifications.get(pid)
        if (
            guard is not None
            and update.is_transactional
            and not update.is_control
            and not self.has_ongoing_transaction(pid)
            and not (verifying is not None and verifying.guard.verify(guard))
        ):
            raise InvalidTxnStateError(
                f"Record was not part of an ongoing transaction (producer {pid}: its "
                "verification with the transaction coordinator is no longer current)"
            )
        if client and verifying is not None and b.first_seq > verifying.lowest_sequence:
            raise OutOfOrderSequenceError(
                f"out of order sequence for producer {pid}: {b.first_seq} (incoming), "
                f"{verifying.lowest_sequence} (earliest seen while verifying)"
            )
        if entry is None:
            return None
        if update.epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"epoch {update.epoch} of producer {update.producer_id} at offset "
                f"{b.first_offset} is older than its current epoch {entry.epoch}"
            )
        if update.is_control:
            marker = update.marker
            if marker is not None and entry.coordinator_epoch > marker.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"coordinator epoch {marker.coordinator_epoch} of the marker for producer "
                    f"{update.producer_id} is older than its last one, "
                    f"{entry.coordinator_epoch} (a zombie coordinator)"
                )
            return None
        if client:
            _check_sequence(entry, update)
        if entry.current_txn_first_offset >= 0 and not update.is_transactional:
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {update.producer_id}: its "
                f"transaction started at offset {entry.current_txn_first_offset} is ongoing"
            )
        return None

    def update(self, update: BatchUpdate) -> CompletedTxn | None:
        """Record an appended batch (no checks: recovery, follower appends, after
        :meth:`check`); the transaction its marker completed, if any."""
        if update.is_control and update.marker is None:
            return None  # an emptied control batch: its transaction was compacted away
        pid = update.producer_id
        if update.is_transactional:  # a first offset or a marker: the verification is over
            self.verifications.pop(pid, None)
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid)
        if update.epoch != entry.epoch:
            entry.epoch = update.epoch
            entry.batches.clear()
        b = update.batch
        entry.last_timestamp = b.timestamp
        if update.marker is not None:
            return self._end_transaction(entry, update.marker, b.first_offset)
        entry.add_batch(b)
        if update.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = b.first_offset
            self.ongoing[b.first_offset] = pid
        return None

    def _end_transaction(
        self, entry: ProducerEntry, marker: TxnMarker, offset: int
    ) -> CompletedTxn | None:
        first = entry.current_txn_first_offset
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.current_txn_first_offset = -1
        if first < 0:
            return None  # a marker for a transaction with no data here
        pid = entry.producer_id
        completed = CompletedTxn(
            pid, first, offset, not marker.commit, self._last_stable_offset(pid, offset)
        )
        self.ongoing.pop(first, None)
        self.unreplicated[first] = offset
        return completed

    # -- snapshots --

    def load(self, log_start_offset: int, log_end_offset: int, at_most: int | None = None) -> int:
        """Load the latest readable snapshot at or below `at_most` (default: the log end
        offset), deleting those above `log_end_offset`, below `log_start_offset`, and
        unreadable ones; return its offset, or -1 when there is none (the caller then
        rebuilds from the log)."""
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.last_snapshot_offset = -1
        for name in os.listdir(self.dir):
            if name.endswith(SNAPSHOT_SUFFIX + SNAPSHOT_TMP_SUFFIX):  # cut short by a crash
                (self.dir / name).unlink(missing_ok=True)
        offsets = snapshot_offsets(self.dir)
        for off in offsets:
            if off > log_end_offset or off < log_start_offset:
                self._delete_snapshot(off)
        limit = log_end_offset if at_most is None else min(at_most, log_end_offset)
        for off in reversed([o for o in offsets if log_start_offset <= o <= limit]):
            path = segment_file(self.dir, off, SNAPSHOT_SUFFIX)
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as e:
                log.warning("deleting unreadable producer snapshot: %s", e)
                self._delete_snapshot(off)
                continue
            self.producers = {e.producer_id: e for e in entries}
            started = sorted(
                (e.current_txn_first_offset, e.producer_id)
                for e in entries
                if e.current_txn_first_offset >= 0
            )
            self.ongoing = dict(started)
            self.last_snapshot_offset = off
            return off
        return -1

    def take_snapshot(self, offset: int, *, fsync: bool = False) -> None:
        """Write the state of everything below `offset` (the log end offset) to disk."""
        if offset == self.last_snapshot_offset and not fsync:
            return
        write_snapshot(
            segment_file(self.dir, offset, SNAPSHOT_SUFFIX), self.producers.values(), fsync=fsync
        )
        self.last_snapshot_offset = offset

    def encode_snapshot(self, offset: int) -> tuple[Path, bytearray]:
        """The snapshot file at `offset` (the log end offset) and its bytes, for the caller
        to write (:func:`write_snapshot_tmp`, in a worker thread) and then to rename and
        declare (:meth:`snapshot_written`)."""
        return segment_file(self.dir, offset, SNAPSHOT_SUFFIX), encode_snapshot(
            self.producers.values()
        )

    def snapshot_written(self, offset: int) -> None:
        self.last_snapshot_offset = offset

    def snapshots_before(self, offset: int) -> list[Path]:
        """The snapshot files below `offset` (the new log start offset) but the latest: never
        read again (a load takes none below the log start offset and deletes any a crash
        left), for the caller to unlink off the log's thread. A file not yet unlinked is
        listed again by the next call."""
        return [
            segment_file(self.dir, off, SNAPSHOT_SUFFIX)
            for off in snapshot_offsets(self.dir)
            if off < offset and off != self.last_snapshot_offset
        ]

    def _delete_snapshot(self, offset: int) -> None:
        segment_file(self.dir, offset, SNAPSHOT_SUFFIX).unlink(missing_ok=True)

    def remove_expired(self, now_ms: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget producers idle for `expiration_ms` (by their last batch's timestamp, as
        Kafka judges it); return how many."""
        expired = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        self.verifications = {
            pid: v for pid, v in self.verifications.items() if now_ms - v.timestamp < expiration_ms
        }
        return len(expired)

    def statistics(self) -> dict[str, int]:
        return {
            "producers": len(self.producers),
            "ongoing_transactions": len(self.ongoing),
            "last_snapshot_offset": self.last_snapshot_offset,
        }
