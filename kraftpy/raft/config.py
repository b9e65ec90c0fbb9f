"""Static configuration of one Raft node, with Kafka's key names and defaults."""

from __future__ import annotations

import attrs

from kraftpy.ids import Uuid
from kraftpy.raft.voters import SUPPORTED_KRAFT_VERSIONS, Endpoint, ReplicaKey, VoterNode, VoterSet


@attrs.frozen
class RaftConfig:
    """What a `RaftCore` needs to know that never changes while it runs.

    Times are in milliseconds, as in Kafka's configuration; the core converts them to the seconds of
    the clock it is given (`now` is a float in seconds, e.g. ``trio.current_time()``).
    """

    node_id: int
    #: controller.quorum.voters, by id. A node whose id is not in it is an observer (a broker). Empty
    #: in a dynamic quorum (KIP-853), whose voters are in the log (kraftpy.raft.voter_history).
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
    #: The directory id of this node's metadata log (meta.properties' directory.id): with the node id,
    #: the replica's key (KIP-853). None only where no directory was formatted (tests).
    directory_id: Uuid | None = None
    #: Where this node listens for the quorum (the controller listener), as the voter set records it.
    endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())
    #: The name of the listener other nodes reach a voter on (controller.listener.names' first).
    listener_name: str = "CONTROLLER"
    #: The endpoints of the static voters (controller.quorum.voters), by id.
    voter_endpoints: tuple[tuple[int, Endpoint], ...] = attrs.field(converter=tuple, default=())
    #: controller.quorum.bootstrap.servers: where a node that knows no voter (or no live one) looks
    #: for the leader. The core names them -2, -3, ... (Kafka's ids for them).
    bootstrap_servers: tuple[tuple[str, int], ...] = attrs.field(converter=tuple, default=())
    #: How long an operator's voter change may wait for its record to be committed.
    voter_change_timeout_ms: int = 30_000

    @property
    def key(self) -> ReplicaKey:
        return ReplicaKey(self.node_id, self.directory_id)

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def static_voters(self) -> VoterSet | None:
        """controller.quorum.voters as a voter set (None: a dynamic quorum)."""
        if not self.voters:
            return None
        endpoints = dict(self.voter_endpoints)
        return VoterSet.of_ids(self.voters, {i: [endpoints[i]] for i in endpoints})

    @property
    def local_node(self) -> VoterNode:
        """This replica as a voter set would record it."""
        return VoterNode(self.key, self.endpoints, SUPPORTED_KRAFT_VERSIONS)

    @property
    def bootstrap_ids(self) -> tuple[int, ...]:
        return tuple(bootstrap_id(i) for i in range(len(self.bootstrap_servers)))


def bootstrap_id(index: int) -> int:
    """The id the core gives the bootstrap server at `index` (Kafka's -2 - index)."""
    return -2 - index
