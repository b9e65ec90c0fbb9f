"""kraftpy.metrics.LoopHistogram: the request histograms' cheaper implementation exposes what
prometheus_client's Histogram would for the same observations."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from kraftpy.metrics import LoopHistogram

BUCKETS = (0.0001, 0.0005, 0.001, 0.01, 0.5, 1.0, 30.0)
#: On a bound (an le bucket holds it), between bounds, below the first, past the last, zero.
AMOUNTS = (0.0, 0.00005, 0.0001, 0.0003, 0.0005, 0.001, 0.002, 0.01, 0.25, 0.5, 0.9999, 1.0, 29.0, 30.0, 31.0,
           1e9, 0.001, 0.001)


def both() -> tuple[CollectorRegistry, LoopHistogram, CollectorRegistry, Histogram]:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    loop = LoopHistogram("t_seconds", "A test histogram.", ["request", "phase"], buckets=BUCKETS, registry=ours)
    reference = Histogram("t_seconds", "A test histogram.", ["request", "phase"], buckets=BUCKETS, registry=theirs)
    return ours, loop, theirs, reference


def test_every_bucket_count_and_sum_is_what_prometheus_client_exposes():
    ours, loop, theirs, reference = both()
    for i, amount in enumerate(AMOUNTS):
        labels = ("Produce", "local") if i % 3 else ("FetchFollower", "remote")
        loop.labels(*labels).observe(amount)
        reference.labels(*labels).observe(amount)
    for request, phase in (("Produce", "local"), ("FetchFollower", "remote")):
        labels = {"request": request, "phase": phase}
        for le in [*(str(b) for b in BUCKETS), "+Inf"]:
            want = theirs.get_sample_value("t_seconds_bucket", {**labels, "le": le})
            assert ours.get_sample_value("t_seconds_bucket", {**labels, "le": le}) == want, (labels, le)
        assert ours.get_sample_value("t_seconds_count", labels) == theirs.get_sample_value("t_seconds_count", labels)
        assert ours.get_sample_value("t_seconds_sum", labels) == pytest.approx(
            theirs.get_sample_value("t_seconds_sum", labels))


def test_the_text_is_prometheus_clients_without_the_created_series():
    ours, loop, theirs, reference = both()
    for amount in AMOUNTS:
        loop.labels("Metadata", "local").observe(amount)
        reference.labels("Metadata", "local").observe(amount)
    want = [line for line in generate_latest(theirs).decode().splitlines() if "_created" not in line]
    assert generate_latest(ours).decode().splitlines() == want


def test_a_family_nothing_observed_is_its_help_and_type_alone():
    ours, _, theirs, _ = both()
    assert generate_latest(ours) == generate_latest(theirs)


def test_labels_are_checked_and_a_series_is_made_once():
    _, loop, _, _ = both()
    with pytest.raises(ValueError, match="takes labels"):
        loop.labels("Produce")
    assert loop.labels("Produce", "local") is loop.labels("Produce", "local")
