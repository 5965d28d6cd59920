"""A hypothesis state machine against an in-memory model of a partition log.

Rules: append, read, roll, high watermark moves, follower truncation (at batch boundaries, as
followers truncate), DeleteRecords, retention by time and size, flush, clean close and reopen,
and crash (no flush, no index files written) and reopen. After every step the offsets obey
``log_start <= high_watermark <= log_end`` and match the model.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.records import RecordBatchView, iter_batches, iter_records
from storage.config import LogConfig
from storage.partition_log import PartitionLog

from .helpers import Clock, batch

CONFIG = LogConfig(
    segment_bytes=1200,
    index_interval_bytes=150,
    segment_index_bytes=48,  # a few entries: index-full rolls happen too
    retention_ms=60_000,
    retention_bytes=4000,
    file_delete_delay_ms=500,
)


class Batch:
    __slots__ = ("base", "last", "values", "ts")

    def __init__(self, base: int, values: list[bytes], ts: int) -> None:
        self.base = base
        self.last = base + len(values) - 1
        self.values = values
        self.ts = ts


class PartitionLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="stateful-"))
        self.dir = self.root / "t-0"
        self.clock = Clock()
        self.log = PartitionLog.open(self.dir, CONFIG, now_ms=self.clock)
        self.batches: list[Batch] = []  # the model: every batch still in the log
        self.log_start = 0
        self.hw = 0
        self.leo = 0
        self.tag = 0

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- rules -----------------------------------------------------------------------------

    @rule(n=st.integers(1, 5), size=st.integers(0, 180), age=st.integers(0, 120_000))
    def append(self, n: int, size: int, age: int) -> None:
        self.tag += 1
        ts = self.clock() - age
        buf = batch(n, ts=ts, value_size=size, tag=self.tag)
        values = [bytes([self.tag % 256]) * size] * n
        info = self.log.append_as_leader(buf, 1, self.clock())
        assert (info.first_offset, info.last_offset) == (self.leo, self.leo + n - 1)
        self.batches.append(Batch(self.leo, values, ts + n - 1))
        self.leo += n

    @precondition(lambda self: self.leo > self.log_start)
    @rule(data=st.data(), max_bytes=st.integers(1, 2000), bound=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, bound: bool) -> None:
        offset = data.draw(st.integers(self.log_start, self.leo), label="offset")
        limit = self.hw if bound else self.leo
        with self.log.read(offset, max_bytes, max_offset=limit if bound else None) as r:
            raw = r.read()
            first_batch_offset = r.first_batch_offset
        expected = [b for b in self.batches if b.last >= offset and b.last < limit]
        if offset >= limit or not expected:
            assert raw == b""
            return
        got = list(iter_batches(raw))  # whole batches only (a partial tail is dropped)
        assert got, "at least one whole batch"
        assert first_batch_offset == expected[0].base
        assert len(raw) <= max(max_bytes, got[0].size_in_bytes)
        for view, model in zip(got, expected, strict=False):
            assert isinstance(view, RecordBatchView)
            assert (view.base_offset, view.last_offset) == (model.base, model.last)
            assert [bytes(r.value or b"") for r in iter_records(view)] == model.values

    @rule()
    def roll(self) -> None:
        self.log.roll(self.clock())

    @rule(data=st.data())
    def move_high_watermark(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.leo + 3))
        self.hw = min(max(target, self.log_start), self.leo)
        assert self.log.update_high_watermark(target) == self.hw

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from([b.base for b in self.batches] + [self.leo]))
        changed = self.log.truncate_to(k)
        assert changed == (k < self.leo)
        if k < self.log_start:
            self.batches = []
            self.log_start = k
        else:
            self.batches = [b for b in self.batches if b.base < k]
        self.leo = min(self.leo, k)
        self.hw = min(max(self.hw, self.log_start), self.leo)

    @precondition(lambda self: self.hw > self.log_start)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.log_start, self.hw))
        assert self.log.delete_records_before(target) == target
        self.log_start = target
        self._drop_batches_below_first_segment()

    @rule(advance=st.integers(0, 90_000))
    def retention(self, advance: int) -> None:
        now = self.clock.advance(advance)
        before = self.log.log_start_offset
        deleted = self.log.apply_retention(now)
        after = self.log.log_start_offset
        assert after >= before and after <= self.hw
        if deleted:  # (a crash may have left deleted segments below the log start)
            assert after == max(before, self.log.segments[0].base_offset)
        self.log_start = after
        self._drop_batches_below_first_segment()

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.leo

    @rule()
    def close_and_reopen(self) -> None:
        rp, start, hw = self._checkpoint()
        self.log.close()
        self.log = PartitionLog.open(
            self.dir,
            CONFIG,
            now_ms=self.clock,
            had_clean_shutdown=True,
            recovery_point=rp,
            log_start_offset=start,
            high_watermark=hw,
        )
        assert self.log.recovery_stats["recovered_segments"] == 0
        self._check_everything()

    @rule()
    def crash_and_reopen(self) -> None:
        rp, start, hw = self._checkpoint()
        self.log.abandon()
        self.log = PartitionLog.open(
            self.dir,
            CONFIG,
            now_ms=self.clock,
            recovery_point=rp,
            log_start_offset=start,
            high_watermark=hw,
        )
        assert self.log.recovery_stats["truncated_bytes"] == 0
        self._check_everything()

    # ---- helpers ---------------------------------------------------------------------------

    def _checkpoint(self) -> tuple[int, int, int]:
        """What the log manager would have checkpointed: recovery point, start, HW."""
        return self.log.recovery_point, self.log.log_start_offset, self.log.high_watermark

    def _drop_batches_below_first_segment(self) -> None:
        first = self.log.segments[0].base_offset
        self.batches = [b for b in self.batches if b.base >= first]

    def _check_everything(self) -> None:
        seen: list[tuple[int, int, list[bytes]]] = []
        offset = self.log_start
        while offset < self.leo:
            with self.log.read(offset, 1 << 20) as r:
                raw = r.read()
            views = list(iter_batches(raw))
            assert views
            for v in views:
                assert isinstance(v, RecordBatchView)
                seen.append(
                    (v.base_offset, v.last_offset, [bytes(x.value or b"") for x in iter_records(v)])
                )
                offset = v.last_offset + 1
        expected = [(b.base, b.last, b.values) for b in self.batches if b.last >= self.log_start]
        assert seen == expected

    # ---- invariants ------------------------------------------------------------------------

    @invariant()
    def offsets_match_the_model(self) -> None:
        log = self.log
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (
            self.log_start,
            self.hw,
            self.leo,
        )
        bases = [s.base_offset for s in log.segments]
        assert bases == sorted(set(bases)) and bases[0] <= log.log_start_offset
        assert log.segments[-1].active and not any(s.active for s in log.segments[:-1])
        assert log.recovery_point <= log.log_end_offset


PartitionLogMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPartitionLog = PartitionLogMachine.TestCase
