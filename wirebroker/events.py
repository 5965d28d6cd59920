"""Waiting on several `trio.Event`s at once (a produce waiting on its replicas, a fetch on its
partitions' appends). It owns no events and must not set any: callers decide what to wait on."""

from __future__ import annotations

import trio


async def wait_any(events: list[trio.Event]) -> None:
    """Return once any of `events` is set (at once if there are none)."""
    if len(events) == 1:
        await events[0].wait()
        return
    async with trio.open_nursery() as nursery:

        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)
