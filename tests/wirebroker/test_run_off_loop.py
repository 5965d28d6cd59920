"""The broker runs a storage chore's slow part in a worker thread and commits it on the loop."""

from __future__ import annotations

import threading

import trio

from wirebroker.server import run_off_loop


class _Chore:
    """Records the calls; its prepare runs until aborted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []  # (what, on the loop's thread?)
        self.loop_thread = threading.get_ident()
        self.started = threading.Event()
        self.stop = threading.Event()

    def _call(self, what: str) -> None:
        self.calls.append((what, threading.get_ident() == self.loop_thread))

    def prepare(self) -> None:
        self._call("prepare")
        self.started.set()
        assert self.stop.wait(10)

    def abort(self) -> None:
        self._call("abort")
        self.stop.set()

    def commit(self) -> None:
        self._call("commit")


def test_prepare_off_the_loop_then_commit_on_it() -> None:
    chore = _Chore()
    chore.stop.set()
    trio.run(run_off_loop, chore)
    assert chore.calls == [("prepare", False), ("commit", True)]


def test_a_cancellation_aborts_prepare_and_still_commits() -> None:
    async def main() -> _Chore:
        chore = _Chore()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_off_loop, chore)
            await trio.to_thread.run_sync(chore.started.wait, 10)
            nursery.cancel_scope.cancel()  # the broker shutting down
        return chore

    chore = trio.run(main)
    assert chore.calls == [("prepare", False), ("abort", True), ("commit", True)]


def test_a_cancellation_before_the_worker_started_still_prepares_before_the_commit() -> None:
    """A shutdown already under way when the chore is run: its slow part still runs (told to
    abort), so the commit never applies work that was not done."""

    async def main() -> _Chore:
        chore = _Chore()
        with trio.CancelScope() as scope:
            scope.cancel()
            await run_off_loop(chore)
        return chore

    chore = trio.run(main)
    assert ("prepare", False) in chore.calls and ("abort", True) in chore.calls
    assert chore.calls[-1] == ("commit", True)


class _FullDisk(_Chore):
    def prepare(self) -> None:
        self._call("prepare")
        raise OSError(28, "No space left on device")


def test_what_prepare_raises_reaches_the_caller_as_itself() -> None:
    """A full disk in a flush's worker is an OSError its caller handles (the log manager's
    `chore_failed`), not an exception group that ends the broker."""

    async def main() -> _Chore:
        chore = _FullDisk()
        try:
            await run_off_loop(chore)
        except OSError as e:
            assert e.errno == 28
        else:
            raise AssertionError("the chore's error was lost")
        return chore

    chore = trio.run(main)
    assert chore.calls == [("prepare", False), ("abort", True), ("commit", True)]
