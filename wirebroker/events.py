"""Waking tasks that wait on many partitions at once (a fetch on its partitions' appends, a
produce on its replicas). `Waiters` is what a partition notifies; `Wakeup` is one task's single
event, registered with every `Waiters` it watches, so that waiting on a thousand partitions
costs a thousand set insertions, not a thousand tasks. An event may also wait for an offset
(`Waiters.add_until`): a moved high watermark sets only those it reached
(`Waiters.notify_reached`), so that an acks=all Produce is not woken by every move before its
own (Kafka's DelayedProduce is checked on each move, but costs no task switch). Owns no
partition state."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable

import trio

_ORDER = itertools.count()  # breaks ties between events waiting for the same offset


class Waiters:
    """The events of the tasks waiting for this source's next notification, and those waiting
    for an offset to be reached."""

    __slots__ = ("_events", "_until")

    def __init__(self) -> None:
        self._events: set[trio.Event] = set()
        #: (offset, order, event), the lowest offset first. An entry whose task stopped
        #: waiting stays until its offset is reached or the next `notify()` (setting it then
        #: wakes nobody).
        self._until: list[tuple[int, int, trio.Event]] = []

    def add(self, event: trio.Event) -> None:
        self._events.add(event)

    def add_until(self, offset: int, event: trio.Event) -> None:
        """Register `event` to be set once `notify_reached` passes `offset`, or at `notify()`."""
        heapq.heappush(self._until, (offset, next(_ORDER), event))

    def discard(self, event: trio.Event) -> None:
        self._events.discard(event)

    def notify(self) -> int:
        """Set every registered event, and forget them: each wakes its task once. Returns how
        many tasks it woke."""
        events, until = self._events, self._until
        if not events and not until:  # nobody waits (every append asks)
            return 0
        self._events, self._until = set(), []
        for event in events:
            event.set()
        for _, _, event in until:
            event.set()
        return len(events) + len(until)

    def notify_reached(self, offset: int) -> None:
        """Set the events waiting for any notification, and those waiting for an offset up to
        `offset`; the others keep waiting."""
        events, until = self._events, self._until
        if events:
            self._events = set()
            for event in events:
                event.set()
        while until and until[0][0] <= offset:
            heapq.heappop(until)[2].set()


class Wakeup:
    """One task's wait for the next notification of any of `sources`.

    `arm()` before checking the condition (so that no notification between the check and the
    wait is lost), `wait()` if it does not hold yet; `close()` (or the `with` block's end)
    unregisters, so idle sources keep no stale events.
    """

    def __init__(self, sources: Iterable[Waiters]) -> None:
        self._sources = list(sources)
        self._event: trio.Event | None = None

    def __enter__(self) -> Wakeup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def arm(self) -> None:
        self.close()
        self._event = event = trio.Event()
        for source in self._sources:
            source.add(event)

    async def wait(self) -> None:
        """Return once a source notified since `arm()` (at once if there are no sources)."""
        if self._event is not None and self._sources:
            await self._event.wait()

    def close(self) -> None:
        if self._event is not None:
            for source in self._sources:
                source.discard(self._event)
            self._event = None
