"""Kafka's quota measures: a rate over sampled windows, and a token bucket.

`SampledRate` is Kafka's `Rate` over a `WindowedSum` (`SampledStat`): values are summed into
`samples` windows of `window_ms` each (one current, the others complete), a window with no
value for `samples * window_ms` is forgotten, and the rate is the sum over the time since the
oldest window began, counted as at least `samples - 1` whole windows (so a client's first
bytes are not measured over a few milliseconds). With `simple`, Kafka's `SimpleRate`
(replication quotas): at least one window instead. `TokenBucket` is Kafka's: it fills at the
quota's rate up to a burst of `samples * window` seconds' worth, and records take tokens out
(controller mutation quotas).

`check(bound, now_ms)` is Kafka's `Sensor.checkQuotas` for one metric: it returns the
:class:`Violation` (measured value, bound, window) when the quota is exceeded, and the throttle
times are Kafka's (`QuotaUtils.throttleTime`, `ControllerMutationQuotaManager.throttleTimeMs`).
Pure: every reading of the time is passed in.
"""

from __future__ import annotations

import math


class Violation:
    """A measured value past its quota's bound; `window_ms` is the rate's window then."""

    # Not a dataclass: start-up time (docs/perf-notes.md, branch `startup`).
    __slots__ = ("value", "bound", "window_ms")

    def __init__(self, value: float, bound: float, window_ms: int) -> None:
        self.value = value
        self.bound = bound
        self.window_ms = window_ms

    def throttle_time_ms(self) -> int:
        """Kafka's QuotaUtils.throttleTime: the delay that brings the rate back to the bound,
        (value - bound) / bound * window."""
        return java_round((self.value - self.bound) / self.bound * self.window_ms)


class _Sample:
    __slots__ = ("start_ms", "last_ms", "value", "events")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_ms = now_ms
        self.value = 0.0
        self.events = 0


class SampledRate:
    """Kafka's Rate (per second) over `samples` windows of `window_ms` (and their Avg)."""

    __slots__ = ("samples", "window_ms", "simple", "_windows", "_current")

    def __init__(self, samples: int, window_ms: int, *, simple: bool = False) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.simple = simple
        self._windows: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        windows = self._windows
        if not windows:
            windows.append(_Sample(now_ms))
        sample = windows[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            # One window more than `samples`: the oldest may still overlap the measured time.
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(windows):
                sample = _Sample(now_ms)
                windows.append(sample)
            else:
                sample = windows[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_ms = now_ms

    def average(self, now_ms: int) -> float:
        """The mean of the values recorded in the windows (Kafka's Avg); NaN without any."""
        self._purge(now_ms)
        events = sum(s.events for s in self._windows)
        return sum(s.value for s in self._windows) / events if events else math.nan

    def measure(self, now_ms: int) -> float:
        """The rate per second now."""
        window_ms = self.window_size_ms(now_ms)
        return sum(s.value for s in self._windows) / (window_ms / 1000)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is measured over (Kafka's Rate.windowSize / SimpleRate's)."""
        self._purge(now_ms)
        if not self._windows:
            self._windows.append(_Sample(now_ms))
        elapsed = now_ms - min(s.start_ms for s in self._windows)
        if self.simple:
            return max(elapsed, self.window_ms)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def check(self, bound: float, now_ms: int) -> Violation | None:
        value = self.measure(now_ms)
        if value <= bound:
            return None
        return Violation(value, bound, self.window_size_ms(now_ms))

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._windows:
            if now_ms - sample.last_ms >= expire_ms:
                sample.reset(now_ms)


class TokenBucket:
    """Kafka's TokenBucket: `bound` tokens a second, at most `samples * window` seconds' worth."""

    __slots__ = ("samples", "window_ms", "tokens", "_last_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.tokens = 0.0
        self._last_ms = 0

    def record(self, value: float, bound: float, now_ms: int) -> None:
        self._refill(bound, now_ms)
        self.tokens = min(self._burst(bound), self.tokens - value)

    def check(self, bound: float, now_ms: int) -> Violation | None:
        self._refill(bound, now_ms)
        if self.tokens >= 0:
            return None
        return Violation(self.tokens, bound, self.window_ms)

    def _refill(self, bound: float, now_ms: int) -> None:
        self.tokens = min(self._burst(bound), self.tokens + bound * (now_ms - self._last_ms) / 1000)
        self._last_ms = now_ms

    def _burst(self, bound: float) -> float:
        return self.samples * self.window_ms / 1000 * bound


def token_throttle_time_ms(violation: Violation) -> int:
    """Kafka's ControllerMutationQuotaManager.throttleTimeMs: the time to refill the bucket to
    zero, -tokens / rate."""
    return java_round(-violation.value / violation.bound * 1000)


def java_round(value: float) -> int:
    """Java's Math.round: halves round up (Python's round() rounds them to even)."""
    return math.floor(value + 0.5)
