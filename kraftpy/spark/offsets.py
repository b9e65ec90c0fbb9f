"""Offset ranges of a read: which partitions, from where, to where, in how many Spark tasks.

The planning functions are pure: they take the offsets the brokers reported through an
``OffsetLookup`` and return ranges, so they are tested without a broker or Spark.
``ClientOffsetLookup`` is the lookup the connector uses: confluent-kafka's ``AdminClient``
(``list_topics`` and ``list_offsets`` for earliest, latest and by-timestamp offsets, one
request per kind for all partitions at once).

Streaming offsets travel through Spark's checkpoint as ``{topic: {"partition": offset}}``,
the JSON shape of Spark's own Kafka source; ``to_json_offsets``/``from_json_offsets`` convert.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kraftpy.spark.options import (
    EARLIEST,
    LATEST,
    Assign,
    Earliest,
    Latest,
    OffsetSpec,
    OptionError,
    SpecificOffsets,
    Subscribe,
    SubscribePattern,
    Subscription,
    Timestamp,
    TimestampsByPartition,
    TopicPartition,
)

log = logging.getLogger("kraftpy.spark")

#: Topics a pattern never matches (Kafka's ``exclude.internal.topics``).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})

DATA_LOSS_HINT = ("Some data may have been lost because they are not available in the brokers any more; "
                  "either the data was aged out by retention or deleted (DeleteRecords), or the topic was "
                  "deleted before all of it was read. If you don't want your query to fail in such "
                  "cases, set the source option 'failOnDataLoss' to 'false'.")


class DataLossError(RuntimeError):
    """Offsets the query should read are gone, and ``failOnDataLoss`` is true."""


class OffsetRangeError(ValueError):
    """The requested offsets don't make a range: a start after the end, an end past the data."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The records ``start <= offset < end`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


class OffsetLookup(Protocol):
    def topics(self) -> dict[str, int]:
        """Topic name to partition count, for every topic the cluster has."""

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition."""

    def for_timestamps(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The first offset with a timestamp at or after the given one (ms); -1 where there is none."""


def report_data_loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(f"{message}. {DATA_LOSS_HINT}")
    log.warning("%s; failOnDataLoss is false, so the query goes on without it", message)


# -- which partitions ---------------------------------------------------------------------------------


def subscribed_partitions(subscription: Subscription, topics: Mapping[str, int]) -> list[TopicPartition]:
    """The partitions a subscription names, given the cluster's topics, sorted."""
    if isinstance(subscription, Assign):
        for topic, partition in subscription.partitions:
            count = topics.get(topic)
            if count is None:
                raise OffsetRangeError(f"option 'assign': topic {topic!r} does not exist")
            if partition >= count:
                raise OffsetRangeError(f"option 'assign': partition {partition} of topic {topic!r} does not "
                                       f"exist (it has {count} partitions)")
        return sorted(subscription.partitions)
    if isinstance(subscription, Subscribe):
        names = [t for t in subscription.topics if t in topics]
    else:
        assert isinstance(subscription, SubscribePattern)
        names = [t for t in topics if t not in INTERNAL_TOPICS and subscription.matches(t)]
    return sorted((t, p) for t in names for p in range(topics[t]))


# -- where to start and end ---------------------------------------------------------------------------


def _fmt(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "none"


def _require_all(option: str, given: Iterable[TopicPartition], tps: list[TopicPartition]) -> None:
    given_set, wanted = set(given), set(tps)
    if given_set != wanted:
        raise OptionError(
            f"option '{option}' must name every partition the query reads, and only those "
            f"(use -2 for earliest and -1 for latest); missing: {_fmt(wanted - given_set)}; "
            f"not read: {_fmt(given_set - wanted)}")


def resolve_offsets(spec: OffsetSpec, tps: list[TopicPartition], lookup: OffsetLookup, role: str,
                    strategy: str = "error") -> dict[TopicPartition, int]:
    """Concrete offsets for ``spec`` in each of ``tps``; ``role`` is "starting" or "ending"."""
    if not tps:
        return {}
    if isinstance(spec, Earliest):
        return lookup.earliest(tps)
    if isinstance(spec, Latest):
        return lookup.latest(tps)
    if isinstance(spec, SpecificOffsets):
        _require_all(f"{role}Offsets", spec.offsets, tps)
        out = {tp: spec.offsets[tp] for tp in tps}
        earliest = [tp for tp, o in out.items() if o == EARLIEST]
        latest = [tp for tp, o in out.items() if o == LATEST]
        out.update(lookup.earliest(earliest) if earliest else {})
        out.update(lookup.latest(latest) if latest else {})
        return out
    if isinstance(spec, Timestamp):
        stamps = dict.fromkeys(tps, spec.timestamp)
        option = f"{role}Timestamp"
    else:
        assert isinstance(spec, TimestampsByPartition)
        option = f"{role}OffsetsByTimestamp"
        _require_all(option, spec.timestamps, tps)
        stamps = {tp: spec.timestamps[tp] for tp in tps}
    found = lookup.for_timestamps(stamps)
    missing = [tp for tp in tps if found.get(tp, -1) < 0]
    if missing and role == "starting" and strategy == "error":
        raise OffsetRangeError(
            f"option '{option}': no record at or after the timestamp in {_fmt(missing)}; set "
            "'startingOffsetsByTimestampStrategy' to 'latest' to start those at the latest offset")
    out = {tp: found[tp] for tp in tps if tp not in missing}
    out.update(lookup.latest(missing) if missing else {})
    return out


# -- batch plans --------------------------------------------------------------------------------------


def batch_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                 earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
                 fail_on_data_loss: bool) -> list[OffsetRange]:
    """The non-empty ranges of a batch read, checked against what the partitions hold."""
    ranges = []
    for tp in sorted(start):
        topic, partition = tp
        first, last = start[tp], end[tp]
        if last > latest[tp]:
            raise OffsetRangeError(f"endingOffsets of {topic}-{partition} is {last}, but the partition "
                                   f"ends at {latest[tp]}")
        if first > last:
            raise OffsetRangeError(f"the starting offset {first} of {topic}-{partition} is after its "
                                   f"ending offset {last}")
        if first < earliest[tp]:
            report_data_loss(fail_on_data_loss, f"the starting offset {first} of {topic}-{partition} is "
                                                f"before its earliest offset {earliest[tp]}")
            first = min(earliest[tp], last)
        if last > first:
            ranges.append(OffsetRange(topic, partition, first, last))
    return ranges


def _divide(parts: int, r: OffsetRange) -> list[OffsetRange]:
    out = []
    remaining, start = r.size, r.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.end)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


def _share(sizes: list[int], parts: int) -> list[int]:
    """Split ``parts`` tasks over ranges of ``sizes``, in proportion, each range at least one task
    and at most one per offset; the largest remainders get the odd ones."""
    total = sum(sizes)
    shares = [size / total * parts for size in sizes]
    counts = [min(size, max(1, math.floor(share))) for size, share in zip(sizes, shares, strict=True)]
    while sum(counts) > parts:
        i = max(range(len(counts)), key=lambda j: counts[j])
        counts[i] -= 1
    order = sorted(range(len(sizes)), key=lambda j: (-(shares[j] - math.floor(shares[j])), j))
    while sum(counts) < parts:
        grown = False
        for i in order:
            if sum(counts) < parts and counts[i] < sizes[i]:
                counts[i] += 1
                grown = True
        if not grown:
            break
    return counts


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """One task per range, unless ``maxRecordsPerPartition`` caps a range's size, or
    ``minPartitions`` asks for more tasks than there are ranges: then the ranges are split in
    proportion to their size into exactly ``minPartitions`` tasks (fewer only when there are fewer
    offsets). Spark's own Kafka calculator rounds each range's share and may plan fewer tasks than
    asked for; this one doesn't."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        ranges = [piece for r in ranges
                  for piece in _divide(math.ceil(r.size / max_records_per_partition), r)]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    counts = _share([r.size for r in ranges], min_partitions)
    return [piece for r, parts in zip(ranges, counts, strict=True) for piece in _divide(parts, r)]


# -- streaming ----------------------------------------------------------------------------------------


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json_offsets(offsets: Mapping[str, Any] | None) -> dict[TopicPartition, int]:
    out = {}
    for topic, partitions in (offsets or {}).items():
        for partition, offset in partitions.items():
            out[(topic, int(partition))] = int(offset)
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               limit: int) -> dict[TopicPartition, int]:
    """End offsets that read at most ``limit`` offsets in all, shared in proportion to each
    partition's backlog (largest remainders get the odd ones; a partition with a backlog gets at
    least one while the limit allows). ``start`` holds every partition of ``latest``."""
    backlog = {tp: latest[tp] - start[tp] for tp in latest if latest[tp] > start[tp]}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * size / total for tp, size in backlog.items()}
    given = {tp: int(share) for tp, share in shares.items()}
    left = limit - sum(given.values())
    # First those that got nothing, then the largest remainders.
    order = sorted(backlog, key=lambda tp: (given[tp] > 0, -(shares[tp] - given[tp]), tp))
    for tp in order:
        if left <= 0:
            break
        if given[tp] < backlog[tp]:
            given[tp] += 1
            left -= 1
    out = dict(latest)
    for tp, amount in given.items():
        out[tp] = start[tp] + amount
    return out


def backlog_size(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    return sum(max(0, end[tp] - start.get(tp, end[tp])) for tp in end)


def should_wait_for_more(available: int, min_offsets: int | None, last_batch_ms: float | None, now_ms: float,
                         max_delay_ms: int) -> bool:
    """``minOffsetsPerTrigger``: hold a batch back while fewer offsets are waiting, unless the last
    batch was ``maxTriggerDelay`` ago."""
    if min_offsets is None or available >= min_offsets:
        return False
    return last_batch_ms is not None and now_ms - last_batch_ms < max_delay_ms


def stream_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                  new_partition_starts: Mapping[TopicPartition, int], fail_on_data_loss: bool) -> list[OffsetRange]:
    """The ranges of a micro-batch from ``start`` to ``end``.

    Partitions in ``end`` but not in ``start`` are new: they are read from
    ``new_partition_starts`` (their earliest offset, which should be 0). A partition in
    ``start`` but not in ``end`` was deleted, and a partition whose end is before its start was
    truncated or recreated: both lose data.
    """
    for tp in sorted(set(start) - set(end)):
        report_data_loss(fail_on_data_loss, f"partition {tp[0]}-{tp[1]} is gone (topic deleted?)")
    ranges = []
    for tp in sorted(end):
        topic, partition = tp
        if tp in start:
            first = start[tp]
        else:
            first = new_partition_starts[tp]
            if first != 0:
                report_data_loss(fail_on_data_loss, f"the new partition {topic}-{partition} starts at "
                                                    f"offset {first}, not 0")
        if end[tp] < first:
            report_data_loss(fail_on_data_loss, f"the offset of {topic}-{partition} went back from {first} "
                                                f"to {end[tp]}")
            continue
        if end[tp] > first:
            ranges.append(OffsetRange(topic, partition, first, end[tp]))
    return ranges


# -- the client-backed lookup -------------------------------------------------------------------------


class ClientOffsetLookup:
    """``OffsetLookup`` through confluent-kafka's ``AdminClient``, retried like Spark's
    ``fetchOffset.numRetries``/``fetchOffset.retryIntervalMs``."""

    def __init__(self, config: Mapping[str, Any], retries: int = 3, retry_interval_ms: int = 10,
                 timeout_s: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient

        try:
            self._admin = AdminClient(dict(config))
        except Exception as exc:  # confluent_kafka.KafkaException for a bad kafka.* option
            raise OptionError(f"the kafka.* options are not accepted by the client: {exc}") from exc
        self._retries = retries
        self._interval_s = retry_interval_ms / 1000
        self._timeout_s = timeout_s

    def _retry(self, what: str, fn):
        from confluent_kafka import KafkaException

        for attempt in range(self._retries + 1):
            try:
                return fn()
            except KafkaException as exc:
                if attempt == self._retries:
                    raise RuntimeError(f"{what} failed after {self._retries + 1} attempts: {exc}") from exc
                log.info("%s failed (%s); retrying", what, exc)
                time.sleep(self._interval_s)
        raise AssertionError("unreachable")

    def topics(self) -> dict[str, int]:
        metadata = self._retry("listing topics", lambda: self._admin.list_topics(timeout=self._timeout_s))
        return {name: len(t.partitions) for name, t in metadata.topics.items() if t.partitions}

    def _list(self, specs: Mapping[TopicPartition, Any], what: str) -> dict[TopicPartition, int]:
        from confluent_kafka import TopicPartition as CKTopicPartition

        if not specs:
            return {}

        def run() -> dict[TopicPartition, int]:
            futures = self._admin.list_offsets({CKTopicPartition(t, p): spec for (t, p), spec in specs.items()},
                                               request_timeout=self._timeout_s)
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}

        return self._retry(f"ListOffsets ({what}) of {_fmt(specs)}", run)

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec as CKOffsetSpec

        return self._list(dict.fromkeys(tps, CKOffsetSpec.earliest()), "earliest")

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec as CKOffsetSpec

        return self._list(dict.fromkeys(tps, CKOffsetSpec.latest()), "latest")

    def for_timestamps(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        from confluent_kafka.admin import OffsetSpec as CKOffsetSpec

        return self._list({tp: CKOffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()}, "by timestamp")
