"""RollWork: the disk work of a log's rolls, done in a worker thread (a chore).

A roll (:mod:`storage.partition_log`) happens on the log's thread, inside the append that
crosses ``segment.bytes`` (or ``segment.ms``, or fills an index): that append must land in the
new segment, so the roll cannot wait. Its disk work was the largest left on the event loop
(docs/perf-notes.md): creating the new segment's ``.log``, ``.index`` and ``.timeindex`` and
sizing them (the indexes to ``segment.index.bytes``, the log to ``segment.bytes`` with
``preallocate``), and writing the producer snapshot at the new base offset. This chore does
both off the loop:

* the next segment, ahead: each roll asks for the segment after the new one (so it has the
  whole time the new one fills), and a log that has not rolled since it was opened asks once
  its active segment is half way to its roll (:meth:`LogSegment.half_way_to_roll`);
  :meth:`RollWork.prepare` makes the three files, empty and sized, as ``next.log.prepared``, ``next.index.prepared``
  and ``next.timeindex.prepared`` in the partition directory; the roll then only renames them
  to the new base offset's names (:meth:`LogSegment.adopt`). Kafka creates them in the roll,
  on its request thread. The prepared files hold no offset in their names and never hold data
  (a file gets data only once renamed to a segment's name), so recovery deletes any it finds
  (a crash, or a shutdown with a next segment ready) and a new preparation overwrites them. A
  preparation that fails (a full disk, the partition deleted meanwhile) is logged and dropped:
  the roll creates the files itself, as before, and fails its append cleanly if it cannot; the
  log asks again after its next roll. Files made for other sizes than the config's at the roll
  (a changed ``segment.index.bytes``, ``segment.bytes`` or ``preallocate``) are not adopted;
* the producer snapshot, behind: the roll encodes it (its bytes, on the log's thread), this
  chore writes them to ``<offset>.snapshot.tmp`` and :meth:`RollWork.commit` renames that into
  place on the log's thread -- unless the log was truncated since, which voids it (the
  temporary file is then unlinked with the deleted segments' files). Kafka writes it, unsynced,
  in the roll and fsyncs it in the background; here a crash before the rename loses it, which
  costs the next open a longer scan (as a missing snapshot always does), never a wrong state.

* the cut of the rolled segment's files to their data (its indexes from
  ``segment.index.bytes`` to their entries, its ``.log`` with ``preallocate``): the roll writes
  the last index entries and leaves the cuts (:class:`~storage.chore.SegmentTrims`), made here
  unless the log's thread needed them first (:meth:`LogSegment.finish_trims`).

The broker runs what every log asked for meanwhile in one worker-thread call
(:class:`~storage.chore.Chores`): under load a thread hop costs more than this work.
:meth:`prepare` touches files only; :meth:`commit` hands the results to the log. A log whose
``on_roll_work`` is unset (storage used without the broker) does both in the roll, as before.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from storage.chore import SegmentTrims
from storage.file_handles import create_file
from storage.layout import prepared_file
from storage.producer_state import write_snapshot_tmp
from storage.segment import MADE_SUFFIXES

if TYPE_CHECKING:
    from storage.partition_log import PartitionLog

__all__ = ["PendingSnapshot", "RollWork"]

#: A roll's producer snapshot to write: (offset, path, bytes, the log's truncation count when
#: it was taken: a truncation since voids it).
PendingSnapshot = tuple[int, Path, bytearray, int]

log = logging.getLogger(__name__)


class RollWork:
    """The disk work of `log`'s rolls (a :class:`~storage.chore.Chore`; see the module doc),
    made by :meth:`PartitionLog.begin_roll_work`: its next segment's files to make with
    `sizes` (None: not wanted now), and the producer snapshots taken at its rolls since the
    last roll work, to write."""

    __slots__ = ("log", "directory", "sizes", "snapshots", "trims", "error", "written")

    def __init__(
        self,
        log: PartitionLog,
        directory: Path,
        sizes: tuple[int, int, int] | None,
        snapshots: list[PendingSnapshot],
        trims: list[SegmentTrims],
    ) -> None:
        self.log = log
        self.directory = directory
        self.sizes = sizes
        self.snapshots = snapshots
        #: The rolled segments' files to cut to their data.
        self.trims = trims
        #: Why the next segment's files could not be made (None: they were, or not wanted).
        self.error: OSError | None = None
        #: The snapshots whose temporary files are written.
        self.written: list[PendingSnapshot] = []

    def prepare(self) -> None:
        for trims in self.trims:
            trims.run()
        for snapshot in self.snapshots:
            path = snapshot[1]
            try:
                write_snapshot_tmp(path, snapshot[2])
                self.written.append(snapshot)
            except OSError as e:  # a lost snapshot only costs a longer scan at the next open
                log.warning("%s: cannot write the producer snapshot: %s", path, e)
        if self.sizes is not None:
            try:
                for suffix, size in zip(MADE_SUFFIXES, self.sizes, strict=True):
                    create_file(prepared_file(self.directory, suffix), size)
            except OSError as e:
                self.error = e

    def abort(self) -> None:
        pass  # a few small files: let them be made

    def commit(self) -> None:
        for trims in self.trims:  # only zeros after the data are left: readers skip them
            for path, error in trims.failed:
                log.warning("%s: cannot cut it to its data: %s", path, error)
        if self.error is not None:
            log.warning(
                "%s: cannot prepare the next segment (the roll will create it): %s",
                self.directory.name,
                self.error,
            )
        self.log._roll_work_done(self)
