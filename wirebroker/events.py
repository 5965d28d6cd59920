"""Waking tasks that wait on many partitions at once (a fetch on its partitions' appends, a
produce on its replicas). `Waiters` is what a partition notifies; `Wakeup` is one task's single
event, registered with every `Waiters` it watches, so that waiting on a thousand partitions
costs a thousand set insertions, not a thousand tasks. Owns no partition state."""

from __future__ import annotations

from collections.abc import Iterable

import trio


class Waiters:
    """The events of the tasks waiting for this source's next notification."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: set[trio.Event] = set()

    def add(self, event: trio.Event) -> None:
        self._events.add(event)

    def discard(self, event: trio.Event) -> None:
        self._events.discard(event)

    def notify(self) -> int:
        """Set every registered event, and forget them: each wakes its task once. Returns how
        many tasks it woke."""
        events = self._events
        if not events:  # nobody waits (every append asks)
            return 0
        self._events = set()
        for event in events:
            event.set()
        return len(events)


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
