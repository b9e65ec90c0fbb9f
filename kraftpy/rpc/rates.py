"""`Rate`: a sampled rate, as Kafka's metrics measure client quotas and connection creation.

The rate is the sum of ``samples`` windows of ``window_s`` seconds each, divided by the time they span
(since the oldest live window began, at least one window). A window starts at the first value recorded
after the previous one ended; windows older than ``samples * window_s`` are forgotten. Time is the
caller's (seconds, any monotonic origin).
"""

from __future__ import annotations


class Rate:
    """Kafka's SampledStat ``Rate``: a sum over ``samples`` windows of ``window_s`` seconds, per second.

    Invariant: ``_starts[i]`` is the start of the window ``_values[i]`` sums; windows older than
    ``samples * window_s`` are forgotten before every read or write."""

    def __init__(self, samples: int, window_s: float) -> None:
        self.samples = samples
        self.window_s = window_s
        self._starts: list[float] = []
        self._values: list[float] = []

    def _purge(self, now: float) -> None:
        horizon = now - self.samples * self.window_s
        while self._starts and self._starts[0] <= horizon:
            del self._starts[0]
            del self._values[0]

    def record(self, value: float, now: float) -> None:
        self._purge(now)
        if not self._starts or now >= self._starts[-1] + self.window_s:
            self._starts.append(now)
            self._values.append(0.0)
        self._values[-1] += value

    def unrecord(self, value: float, now: float) -> None:
        if self._values:
            self._values[-1] -= value

    def window_size(self, now: float) -> float:
        """Seconds the rate is measured over: since the oldest live sample began, at least one window."""
        self._purge(now)
        elapsed = now - self._starts[0] if self._starts else 0.0
        return max(elapsed, self.window_s)

    def total(self, now: float) -> float:
        """The sum of the live windows."""
        self._purge(now)
        return sum(self._values)

    def measure(self, now: float) -> float:
        size = self.window_size(now)
        return sum(self._values) / size
