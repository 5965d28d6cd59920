"""Retention policy: how many of a log's oldest segments may be deleted now.

Pure functions over the segment list, in Kafka's order and with Kafka's guards: first segments
wholly below the log start offset (DeleteRecords), then -- for ``cleanup.policy`` with
``delete`` -- segments beyond ``retention.bytes``, then segments older than ``retention.ms``
(by their largest record timestamp). Only a prefix of the log is ever deletable, a segment is
kept unless the high watermark has passed its end, and an empty last segment is never counted.
If every segment is deletable the caller rolls a new empty segment first, so the active segment
is never the one deleted.

This module decides only; :class:`~storage.partition_log.PartitionLog` deletes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from storage.config import LogConfig

__all__ = ["RetentionPlan", "SegmentLike", "plan_retention"]


class SegmentLike(Protocol):
    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    def largest_timestamp(self) -> int: ...


class RetentionPlan:
    """How many leading segments to delete, and why (per reason, in Kafka's order)."""

    __slots__ = ("count", "reasons")

    def __init__(self) -> None:
        self.count = 0
        self.reasons: list[tuple[str, int]] = []

    def __repr__(self) -> str:
        return f"RetentionPlan(count={self.count}, reasons={self.reasons})"


def _deletable_prefix(
    segments: Sequence[SegmentLike],
    start: int,
    predicate: Callable[[SegmentLike, SegmentLike | None], bool],
    high_watermark: int,
    log_end_offset: int,
) -> int:
    n = 0
    for i in range(start, len(segments)):
        seg = segments[i]
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper = nxt.base_offset if nxt is not None else log_end_offset
        if nxt is None and seg.size == 0:
            break
        if high_watermark < upper or not predicate(seg, nxt):
            break
        n += 1
    return n


def plan_retention(
    segments: Sequence[SegmentLike],
    config: LogConfig,
    *,
    now_ms: int,
    log_start_offset: int,
    high_watermark: int,
    log_end_offset: int,
) -> RetentionPlan:
    """The number of oldest segments to delete now; see the module doc."""
    plan = RetentionPlan()

    def apply(reason: str, predicate: Callable[[SegmentLike, SegmentLike | None], bool]) -> None:
        n = _deletable_prefix(segments, plan.count, predicate, high_watermark, log_end_offset)
        if n:
            plan.count += n
            plan.reasons.append((reason, n))

    apply(
        "log start offset",
        lambda _seg, nxt: nxt is not None and nxt.base_offset <= log_start_offset,
    )
    if not config.delete:
        return plan
    if config.retention_bytes >= 0:
        excess = sum(s.size for s in segments[plan.count :]) - config.retention_bytes

        def over_size(seg: SegmentLike, _nxt: SegmentLike | None) -> bool:
            nonlocal excess
            if excess - seg.size >= 0:
                excess -= seg.size
                return True
            return False

        apply("retention.bytes", over_size)
    if config.retention_ms >= 0:
        retention_ms = config.retention_ms
        apply(
            "retention.ms",
            lambda seg, _nxt: now_ms - seg.largest_timestamp() > retention_ms,
        )
    return plan
