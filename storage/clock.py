"""The time, as Kafka's `Time.milliseconds()`: a `Clock` is any callable returning milliseconds
since the epoch.

Code that reads the time takes a `Clock` instead of asking the system, so a test can run it on
a clock the test moves. `wall_clock_ms` is the system's. This module knows no trio: a broker
under test is given a clock that follows trio's, which a `trio.testing.MockClock` then moves.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
