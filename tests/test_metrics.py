"""The process metrics: the event-loop lag watcher sees a blocked trio thread."""

from __future__ import annotations

import time

import trio

from kraftpy.metrics import EVENT_LOOP_LAG, REGISTRY, watch_event_loop_lag


class Samples:
    def __init__(self) -> None:
        self.values: list[float] = []
        self.arrived = trio.Event()

    def observe(self, value: float) -> None:
        if not self.arrived.is_set():
            self.values.append(value)
            self.arrived.set()

    async def next(self) -> float:
        """The first sample taken after this call."""
        self.arrived = trio.Event()
        await self.arrived.wait()
        return self.values[-1]


async def test_a_blocked_event_loop_shows_as_lag():
    samples = Samples()
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: watch_event_loop_lag(0.01, histogram=samples,
                                                                     task_status=task_status))
        await samples.next()
        time.sleep(0.2)  # the stimulus: blocking work on the trio thread (what the metric must reveal)
        assert await samples.next() >= 0.15
        nursery.cancel_scope.cancel()


def test_the_lag_histogram_is_exported():
    EVENT_LOOP_LAG.observe(0.004)
    names = {sample.name for metric in REGISTRY.collect() for sample in metric.samples}
    assert "kraftpy_event_loop_lag_seconds_bucket" in names
    buckets = {s.labels["le"]: s.value for m in REGISTRY.collect() for s in m.samples
               if s.name == "kraftpy_event_loop_lag_seconds_bucket"}
    assert buckets["0.005"] >= 1 and "0.003" in buckets


def test_made_up_api_keys_share_one_requests_label():
    """Frames naming any of 65,536 api keys must not make as many metric series."""
    from kraftpy.rpc.kafka_server import _api_label

    assert _api_label(b"\x00\x00rest") == "0"  # Produce
    assert _api_label(b"\x00\x12rest") == "18"  # ApiVersions
    assert {_api_label(key.to_bytes(2, "big", signed=True)) for key in (-1, 999, 32767, -32768)} == {"unknown"}
