"""Static configuration of one Raft node, with Kafka's key names and defaults."""

from __future__ import annotations

import attrs


@attrs.frozen
class RaftConfig:
    """What a `RaftCore` needs to know that never changes while it runs.

    Times are in milliseconds, as in Kafka's configuration; the core converts them to the seconds of
    the clock it is given (`now` is a float in seconds, e.g. ``trio.current_time()``).
    """

    node_id: int
    #: controller.quorum.voters, by id. A node whose id is not in it is an observer (a broker).
    voters: frozenset[int] = attrs.field(converter=frozenset)
    cluster_id: str = ""
    #: controller.quorum.election.timeout.ms: timeouts are drawn from [T, 2T).
    election_timeout_ms: int = 1000
    #: controller.quorum.fetch.timeout.ms: follower without a leader response, or leader without a
    #: majority of fetches, for this long gives up on the epoch.
    fetch_timeout_ms: int = 2000
    #: controller.quorum.election.backoff.max.ms: after EndQuorumEpoch, a voter at position p of the
    #: preferred successors waits about p times a share of this before starting a pre-vote.
    election_backoff_max_ms: int = 1000
    #: controller.quorum.request.timeout.ms: an unanswered request is sent again after this long.
    request_timeout_ms: int = 2000
    #: controller.quorum.retry.backoff.ms: pause before retrying a request that got an error back.
    retry_backoff_ms: int = 20
    #: How long the leader holds a Fetch that has nothing new (Kafka's long poll).
    fetch_max_wait_ms: int = 500
    #: The most a Fetch answer carries (at least one batch); also the most one call hands to the
    #: state machine in Commit effects.
    fetch_max_bytes: int = 1 << 20
    snapshot_chunk_bytes: int = 1 << 20
    #: controller.quorum.append.linger.ms: how long the leader gathers proposals into one batch
    #: before it appends it (0: each proposal is appended at once as its own batch).
    append_linger_ms: int = 0
    #: The largest batch the leader builds; a proposal larger than this is refused. Kafka's
    #: KafkaRaftClient.MAX_BATCH_SIZE_BYTES (8 MiB): the largest CreateTopics a controller accepts
    #: (10,000 partitions) needs 2.5 MB at replication factor 10.
    max_batch_bytes: int = 8 << 20
    #: The most records the leader gathers from several proposals into one batch (None: no limit but
    #: the bytes). One proposal is one batch whatever its count: a state machine splits what it may
    #: write in parts (the metadata log: kraftpy.metadata.result.NON_ATOMIC_BATCH_RECORDS).
    max_batch_records: int | None = None

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1
