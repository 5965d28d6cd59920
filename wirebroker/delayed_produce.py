"""Waiting for acks=all appends to be replicated (Kafka's DelayedProduce).

An acks=all append is acknowledged once the partition's high watermark passed it, i.e. every
in-sync replica has it: :func:`replicated` asks without waiting, :func:`await_replication`
waits for a list of appends within a timeout, woken by the partitions' state changes (the
ISR, the leadership) and by a high watermark that reached its append (`Waiters.add_until`),
never by polling. Used by Produce, the transaction
markers and the coordinators' stores. Owns no partition state.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from protocol.errors import ErrorCode
from wirebroker.partition import Partition

#: An append to wait for: the partition and the offset its high watermark must reach.
Appended = tuple[Partition, int]


def replicated(appended: Appended) -> ErrorCode | None:
    """The append's answer if it is decided (NONE, NOT_LEADER_OR_FOLLOWER,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND), None while it waits."""
    partition, required = appended
    done, error = partition.check_enough_replicas_reach_offset(required)
    return error if done else None


async def await_replication(appends: Sequence[Appended], timeout_s: float) -> list[ErrorCode]:
    """Each append's answer once decided; REQUEST_TIMED_OUT for those still waiting after
    `timeout_s`."""
    answers: list[ErrorCode | None] = [None] * len(appends)
    with trio.move_on_after(max(timeout_s, 0)):
        while True:
            # Checked and registered with no await between: no state change is missed.
            woken = trio.Event()
            for i, appended in enumerate(appends):
                if answers[i] is None:
                    answers[i] = replicated(appended)
                    if answers[i] is None:
                        partition, required = appended
                        partition.state_waiters.add_until(required, woken)
            if None not in answers:
                break
            await woken.wait()
    return [ErrorCode.REQUEST_TIMED_OUT if a is None else a for a in answers]
