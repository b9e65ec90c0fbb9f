"""A KIP-848 consumer group: epochs, target assignment and each member's reconciliation (no I/O here).

Theory of operation
-------------------
The coordinator, not a group leader, assigns partitions. Three epochs say how far each step went::

    group epoch        bumped by every change the assignment depends on: a member joins or leaves, a
                       subscription changes, a subscribed topic appears, disappears or gains partitions
    assignment epoch   the group epoch the current *target assignment* was computed at; when it is
                       below the group epoch, the next heartbeat computes a new target (the assignor)
    member epoch       the assignment epoch a member has caught up with; ``previous_member_epoch`` is
                       the one before (a member whose last response was lost may still send it)

A member moves towards its target one heartbeat at a time (Kafka's CurrentAssignmentBuilder)::

                      target has partitions it still owns that are not in the target
       STABLE ──────────────────────────────────────────> UNREVOKED_PARTITIONS
         ^ ^            (epoch stays; the answer leaves them out: the          │
         │ │             client revokes them and heartbeats what it owns)      │ revoked
         │ │                                                                   v
         │ └──── every target partition is free ────── epoch := assignment epoch
         │                                                                     │ some target partitions are
         └──────────── the other members released them ── UNRELEASED_PARTITIONS <┘ still owned by another member

Revocation comes first: a member gets a partition only once no other member owns it (in its assigned
or still-to-revoke partitions), so a partition is never consumed by two members at once.

Group state (as ConsumerGroupDescribe and ListGroups show it): Empty (no members), Assigning (the
target is older than the group epoch), Reconciling (some member is not yet at the assignment epoch or
not stable), Stable.

Classic members (KIP-848's online migration): a member may speak the classic protocol (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) inside a consumer group; it then has ``classic`` metadata (its
session timeout and the protocols it joined with). It is reconciled when it joins, like a consumer
member at a heartbeat, and learns a new target by REBALANCE_IN_PROGRESS in its heartbeats; its
generation is its member epoch.

Leaving: member epoch -1 removes the member (and bumps the group epoch). A static member (with an
instance id) leaving with -2 keeps its place and its assignment until its session times out; joining
again with epoch 0 and the same instance id takes both over under a new member id.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping

import attrs

from kraftpy.coordinator.assignors import ASSIGNORS, Assignment, TopicsMetadata

#: The member epochs of a ConsumerGroupHeartbeat that are not epochs.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


def _copy(a: Mapping[uuid.UUID, frozenset[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


def _minus(a: Assignment, b: Assignment) -> Assignment:
    return _copy({t: ps - b.get(t, frozenset()) for t, ps in a.items()})


def _intersect(a: Assignment, b: Assignment) -> Assignment:
    return _copy({t: ps & b.get(t, frozenset()) for t, ps in a.items()})


def _union(a: Assignment, b: Assignment) -> Assignment:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return _copy(out)


@attrs.frozen
class ClassicMetadata:
    """What a member using the classic protocol joined with (ConsumerGroupMemberMetadataValue's
    ClassicMemberMetadata)."""

    session_timeout_ms: int
    #: (name, metadata) in the member's order of preference; never empty.
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The protocol the member is answered with (its first, as Kafka does)."""
        return self.protocols[0][0]


@attrs.define(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: frozenset[str] = frozenset()
    #: A regular expression of topic names, evaluated by the broker (ConsumerGroupHeartbeat v1).
    subscribed_topic_regex: str | None = None
    #: The topic names the regex matched when last evaluated.
    regex_matches: frozenset[str] = frozenset()
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    #: Partitions the member may consume now. Invariant: no partition is in two members' ``assigned``.
    assigned: Assignment = attrs.Factory(dict)
    #: Partitions the member still owns but must give up (not in ``assigned``).
    pending_revocation: Assignment = attrs.Factory(dict)
    #: Set when the member uses the classic protocol (JoinGroup/SyncGroup/Heartbeat).
    classic: ClassicMetadata | None = None

    def owned(self) -> Assignment:
        return _union(self.assigned, self.pending_revocation)

    def subscribed_topics(self) -> frozenset[str]:
        return self.subscribed_topic_names | self.regex_matches


@attrs.frozen
class Reconciled:
    """What one reconciliation step did: whether the member's epoch or partitions changed."""

    changed: bool


class ConsumerGroup:
    """One consumer group's members, epochs and target assignment."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        #: member id -> its target assignment at ``assignment_epoch``.
        self.target: dict[str, Assignment] = {}
        #: The subscribed topics that exist, with their ids and partition counts, as of the last
        #: heartbeat: a change bumps the group epoch.
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        #: instance id -> member id of the static members.
        self.static_members: dict[str, str] = {}
        #: The assignor of the last target assignment.
        self.assignor_name = ""
        #: The group's consumer.session.timeout.ms / consumer.heartbeat.interval.ms as of its last
        #: heartbeat (None: the broker's).
        self.session_timeout_ms: int | None = None
        self.heartbeat_interval_ms: int | None = None
        #: The members whose records may have changed since the group was last written (None: all of
        #: them, after a new target assignment).
        self.touched: set[str] | None = set()

    def touch(self, member_id: str | None = None) -> None:
        """Mark a member's records (None: every member's) for the next write."""
        if member_id is None:
            self.touched = None
        elif self.touched is not None:
            self.touched.add(member_id)

    def __repr__(self) -> str:
        return f"ConsumerGroup({self.group_id!r}, epoch={self.group_epoch}, members={len(self.members)})"

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topics()}

    def bump_group_epoch(self) -> None:
        self.group_epoch += 1

    # -- members -------------------------------------------------------------------------------

    def add_member(self, member: ConsumerMember) -> None:
        self.touch(member.member_id)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.touch(member_id)
        self.target.pop(member_id, None)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def replace_static_member(self, old: ConsumerMember, new_member_id: str) -> ConsumerMember:
        """A static member rejoining: the new member id takes the old one's epoch and partitions."""
        self.remove_member(old.member_id)
        target = self.target.get(old.member_id)
        member = attrs.evolve(old, member_id=new_member_id)
        self.add_member(member)
        if target is not None:
            self.target[new_member_id] = target
        return member

    # -- classic members --------------------------------------------------------------------------

    def classic_members(self) -> list[ConsumerMember]:
        return [m for m in self.members.values() if m.classic is not None]

    def all_classic_except(self, member_id: str) -> bool:
        """Kafka's allMembersUseClassicProtocolExcept: ``member_id`` uses the consumer protocol and
        every other member the classic one."""
        member = self.members.get(member_id)
        return (member is not None and member.classic is None
                and all(m.classic is not None for m in self.members.values() if m is not member))

    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's supportsClassicProtocols: a consumer-type protocol every classic member supports."""
        if protocol_type != "consumer":
            return False
        classic = self.classic_members()
        if not classic:
            return bool(names)
        return any(all(name in {n for n, _ in m.classic.protocols} for m in classic) for name in names)

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Kafka's waitingOnUnreleasedPartition: some target partition of ``member`` is still owned
        by another member."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        wanted = _minus(self.target.get(member.member_id, {}), member.assigned)
        return bool(_intersect(wanted, self.owned_by_others(member.member_id)))

    # -- target assignment ---------------------------------------------------------------------

    def refresh_subscription_metadata(self, topics: TopicsMetadata) -> bool:
        """Take the subscribed topics' current ids and partition counts; True (and a new group epoch)
        when they differ from what the target was computed with."""
        fresh = {name: topics[name] for name in self.subscribed_topics() if name in topics}
        if fresh == self.subscription_metadata:
            return False
        self.subscription_metadata = fresh
        self.bump_group_epoch()
        return True

    def preferred_assignor(self, assignors: list[str]) -> str:
        """The server assignor most members name (ties: the order of group.consumer.assignors); the
        first of ``assignors`` when none does (Kafka's ConsumerGroup.computePreferredServerAssignor)."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return assignors[0]
        return max(votes, key=lambda name: (votes[name], -assignors.index(name) if name in assignors else -999))

    def maybe_update_target(self, assignors: list[str]) -> bool:
        """Compute a new target assignment when the group epoch moved past it."""
        if self.assignment_epoch >= self.group_epoch:
            return False
        name = self.preferred_assignor(assignors)
        subscriptions = {m.member_id: m.subscribed_topics() for m in self.members.values()}
        self.target = ASSIGNORS[name](subscriptions, self.subscription_metadata, self.target)
        self.assignor_name = name
        self.assignment_epoch = self.group_epoch
        self.touch()
        return True

    # -- reconciliation ------------------------------------------------------------------------

    def owned_by_others(self, member_id: str) -> Assignment:
        out: Assignment = {}
        for other in self.members.values():
            if other.member_id != member_id:
                out = _union(out, other.owned())
        return out

    def reconcile(self, member: ConsumerMember, owned_by_client: Assignment | None) -> Reconciled:
        """One step of Kafka's CurrentAssignmentBuilder for ``member``; ``owned_by_client`` is what the
        heartbeat says the member owns (None: unchanged since the last one)."""
        before = (member.member_epoch, member.state, member.assigned, member.pending_revocation)
        target = self.target.get(member.member_id, {})
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned_by_client is None or _intersect(owned_by_client, member.pending_revocation):
                return Reconciled(False)  # still revoking
            member.pending_revocation = {}
            self._advance(member, target)
        elif member.member_epoch != self.assignment_epoch or member.state is MemberState.UNRELEASED_PARTITIONS:
            self._advance(member, target)
        after = (member.member_epoch, member.state, member.assigned, member.pending_revocation)
        return Reconciled(before != after)

    def _advance(self, member: ConsumerMember, target: Assignment) -> None:
        kept = _intersect(member.assigned, target)
        to_revoke = _minus(member.assigned, target)
        if to_revoke:
            member.assigned = kept
            member.pending_revocation = to_revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            return
        others = self.owned_by_others(member.member_id)
        wanted = _minus(target, kept)
        free = _minus(wanted, others)
        member.assigned = _union(kept, free)
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        member.state = MemberState.STABLE if free == wanted else MemberState.UNRELEASED_PARTITIONS

    def check_invariants(self) -> None:
        seen: set[tuple[uuid.UUID, int]] = set()
        for m in self.members.values():
            for t, ps in m.assigned.items():
                for p in ps:
                    assert (t, p) not in seen, f"partition {t}-{p} assigned twice"
                    seen.add((t, p))
            assert not _intersect(m.assigned, m.pending_revocation)
            assert m.member_epoch <= self.assignment_epoch <= self.group_epoch
