"""Replication throttles: the byte rate of moving replicas held to a bound (Kafka's ReplicationQuotaManager).

Theory of operation. A reassignment copies a partition's whole log to its new replicas; unthrottled, that
copy competes with producers and consumers for the disks and the network. An operator bounds it with two
dynamic broker configs, ``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``
(bytes per second; Long.MAX, the default, is no bound), and names the throttled replicas with two topic
configs, ``leader.replication.throttled.replicas`` and ``follower.replication.throttled.replicas``
(``partition:broker,...`` or ``*``). A broker throttles a partition as a leader when the leader list names
it (or says ``*``), as a follower when the follower list does.

Each side keeps one `ReplicationQuota`: a rate over a sliding window of one-second samples
(``replication.quota.window.num`` = 11, as Kafka), fed with the bytes of throttled partitions only:

* the leader, answering a follower's fetch, leaves a throttled partition the follower is not in the ISR
  of out of the answer (no records: the follower asks again) while its quota is exceeded, and counts
  the bytes it does send for such partitions;
* the follower leaves its throttled, out-of-sync partitions out of its fetch requests while its quota
  is exceeded, and counts the bytes it receives for them.

Replicas in the ISR are never throttled: the bound is for catching up, not for keeping up. The values are
read from the metadata image whenever a delta changes configs, so a new rate applies without a restart.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping

from kraftpy.metadata import configs as config_defs
from kraftpy.metadata.image import ConfigResource, MetadataImage

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
UNBOUNDED = config_defs.LONG_MAX
#: Kafka's replication.quota.window.num and replication.quota.window.size.seconds.
WINDOW_SAMPLES = 11
SAMPLE_SECONDS = 1.0

#: The partitions of a topic a broker throttles: ``ALL`` (``*``) or a set of partition ids.
ALL = "*"
Throttled = frozenset[int] | str


class ReplicationQuota:
    """Bytes per second over the last `WINDOW_SAMPLES` one-second samples, against ``bound``."""

    def __init__(self, clock: Callable[[], float], bound: int = UNBOUNDED) -> None:
        self.clock = clock
        self.bound = bound
        #: (sample start, bytes) of the samples in the window, oldest first.
        self._samples: deque[list[float]] = deque()
        #: Fetches (leader) or partitions (follower) held back because the quota was exceeded.
        self.held_back = 0

    def _expire(self, now: float) -> None:
        while self._samples and self._samples[0][0] <= now - WINDOW_SAMPLES * SAMPLE_SECONDS:
            self._samples.popleft()

    def record(self, size: int) -> None:
        if self.bound >= UNBOUNDED or size <= 0:
            return
        now = self.clock()
        self._expire(now)
        if self._samples and now < self._samples[-1][0] + SAMPLE_SECONDS:
            self._samples[-1][1] += size
        else:
            self._samples.append([now, float(size)])

    def rate(self) -> float:
        """Bytes per second over the window; the window is as long as the samples span, at least
        ``WINDOW_SAMPLES - 1`` seconds (Kafka's Rate, so a first burst is not read as a huge rate)."""
        now = self.clock()
        self._expire(now)
        if not self._samples:
            return 0.0
        span = max(now - self._samples[0][0], (WINDOW_SAMPLES - 1) * SAMPLE_SECONDS)
        return sum(size for _, size in self._samples) / span

    def is_exceeded(self) -> bool:
        return self.bound < UNBOUNDED and self.rate() > self.bound


def throttled_partitions(value: str, broker_id: int) -> Throttled:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on ``broker_id``."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if items == [ALL]:
        return ALL
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if partition.strip().isdigit() and broker.strip().isdigit() and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


def broker_rate(image: MetadataImage, static: Mapping[str, str], broker_id: int, name: str) -> int:
    """The broker's current value of a rate config (its own dynamic value, the cluster default, the file)."""
    value, _ = config_defs.effective_broker_config(image, static, str(broker_id), name)
    try:
        return int(value.strip())
    except ValueError:
        return UNBOUNDED


class ReplicationThrottles:
    """What one broker throttles, as a leader and as a follower, kept in step with the metadata."""

    def __init__(self, broker_id: int, clock: Callable[[], float]) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuota(clock)
        self.follower = ReplicationQuota(clock)
        #: topic -> its throttled partitions on this broker, for topics that throttle any.
        self._leader: dict[str, Throttled] = {}
        self._follower: dict[str, Throttled] = {}

    def update(self, image: MetadataImage, static: Mapping[str, str], topics: set[str] | None) -> None:
        """Read the rates again, and the throttled replicas of ``topics`` (every topic when None)."""
        self.leader.bound = broker_rate(image, static, self.broker_id, LEADER_RATE)
        self.follower.bound = broker_rate(image, static, self.broker_id, FOLLOWER_RATE)
        names = [t.name for t in image.topics.by_id.values()] if topics is None else topics
        for name in names:
            configs = image.configs.config(ConfigResource.topic(name))
            for key, table in ((LEADER_REPLICAS, self._leader), (FOLLOWER_REPLICAS, self._follower)):
                throttled = throttled_partitions(configs.get(key) or "", self.broker_id)
                if throttled:
                    table[name] = throttled
                else:
                    table.pop(name, None)
        if topics is None:
            live = set(names)
            for table in (self._leader, self._follower):
                for gone in [t for t in table if t not in live]:
                    del table[gone]

    @staticmethod
    def _is_throttled(table: dict[str, Throttled], topic: str, partition: int) -> bool:
        throttled = table.get(topic)
        return throttled is not None and (throttled == ALL or partition in throttled)

    def leader_throttles(self, topic: str, partition: int) -> bool:
        return self.leader.bound < UNBOUNDED and self._is_throttled(self._leader, topic, partition)

    def follower_throttles(self, topic: str, partition: int) -> bool:
        return self.follower.bound < UNBOUNDED and self._is_throttled(self._follower, topic, partition)
