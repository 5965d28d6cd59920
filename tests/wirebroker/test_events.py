"""Wakeup and Waiters: one task woken by any of many sources, and nothing left behind."""

from __future__ import annotations

import trio
import trio.testing

from wirebroker.events import Waiters, Wakeup


def test_any_source_wakes_the_task_and_closing_unregisters() -> None:
    async def main() -> None:
        sources = [Waiters() for _ in range(3)]
        woken = 0
        with Wakeup(sources) as wakeup:

            async def waiter() -> None:
                nonlocal woken
                wakeup.arm()
                await wakeup.wait()
                woken += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await trio.testing.wait_all_tasks_blocked()
                assert woken == 0 and all(len(s._events) == 1 for s in sources)
                sources[2].notify()
            assert woken == 1
            assert [len(s._events) for s in sources] == [1, 1, 0]
        # Idle sources keep no stale events once the task is done.
        assert all(len(s._events) == 0 for s in sources)

    trio.run(main)


def test_a_notification_between_arm_and_wait_is_not_lost() -> None:
    async def main() -> None:
        source = Waiters()
        with Wakeup([source]) as wakeup:
            wakeup.arm()
            source.notify()  # as if an append landed while the fetch read its partitions
            with trio.fail_after(1):
                await wakeup.wait()
            wakeup.arm()  # re-arming takes a fresh event: the next wait blocks again
            with trio.move_on_after(1) as scope:
                await wakeup.wait()
            assert scope.cancelled_caught

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))  # virtual time


def test_no_sources_never_blocks() -> None:
    async def main() -> None:
        with Wakeup([]) as wakeup, trio.fail_after(1):
            wakeup.arm()
            await wakeup.wait()

    trio.run(main)


def test_an_offset_waiter_wakes_only_once_its_offset_is_reached() -> None:
    """An acks=all Produce waits for its offset: a high watermark short of it wakes the
    fetches waiting on the source but not the produce; `notify()` (the ISR, the leadership)
    wakes everyone."""
    source = Waiters()
    fetch, produce_10, produce_20 = trio.Event(), trio.Event(), trio.Event()
    source.add(fetch)
    source.add_until(10, produce_10)
    source.add_until(20, produce_20)
    source.notify_reached(9)
    assert fetch.is_set() and not produce_10.is_set() and not produce_20.is_set()
    source.notify_reached(15)
    assert produce_10.is_set() and not produce_20.is_set()
    assert source.notify() == 1  # the ISR changed: the one still waiting wakes
    assert produce_20.is_set()
    assert source.notify() == 0
