"""Online migration between classic and consumer groups (KIP-848), and the classic members of a
consumer group.

Theory of operation
-------------------
``group.consumer.migration.policy`` says which way a group with members may change protocol, as in
Kafka 3.9's GroupMetadataManager::

    upgrade     (policy upgrade or bidirectional) a ConsumerGroupHeartbeat joining (epoch 0) a classic
                group with members that uses the consumer protocol type, whose members' subscriptions
                and assignments parse and that is not larger than group.consumer.max.size: the group
                becomes a consumer group at epoch = its generation; each classic member keeps its id,
                its assignment (now its target and its current assignment, epoch = the generation,
                Stable) and stays a *classic member*; parked JoinGroups and SyncGroups are answered
                REBALANCE_IN_PROGRESS. Otherwise the heartbeat is refused GROUP_ID_NOT_FOUND.
    downgrade   (policy downgrade or bidirectional) the last member using the consumer protocol leaves
                (epoch -1) or is fenced (session or rebalance timeout) while classic members remain,
                no more than group.max.size of them: the group becomes a classic group, Stable at
                generation = the group epoch, each member assigned its target assignment, and a
                rebalance starts at once so that the members rejoin as a classic group.

Empty groups change protocol whatever the policy (as in Kafka): the first member decides.

What is written (one batch each, so a coordinator loading the partition finds either group, never
both): the upgrade writes the GroupMetadata tombstone and every ConsumerGroup* record of the new
group; the downgrade writes tombstones for the consumer group's records and the classic group's
GroupMetadata. Offsets are the group's throughout (they are keyed by group id).

A classic member of a consumer group (Kafka's classicGroup*ToConsumerGroup):

* JoinGroup updates the member from its subscription (topics, owned partitions, rack), computes the
  target if the group epoch moved and reconciles the member one step with the partitions its
  subscription says it owns; the answer's generation is the member epoch, the leader is nobody (the
  coordinator assigns), and it is sent once the group's records are written;
* SyncGroup answers the member's current assignment in the consumer protocol (the subscription's
  version), unless the group epoch moved past the member's (REBALANCE_IN_PROGRESS: rejoin);
* Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch is past its
  epoch, it has partitions to revoke, or partitions it waited for were released;
* LeaveGroup removes it (one new group epoch for the request).

Timers: ``("cg-session", ...)`` with the member's own session timeout, ``("cg-join", group, member)``
from the first REBALANCE_IN_PROGRESS until it rejoins (its rebalance timeout), ``("cg-sync", group,
member)`` from its JoinGroup answer until its SyncGroup (its rebalance timeout); each fences it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kraftpy.coordinator import records
from kraftpy.coordinator.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from kraftpy.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    EMPTY,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    JoinResult,
    Member,
    SyncResult,
)
from kraftpy.protocol.consumer_protocol import (
    ASSIGNMENT_VERSION,
    AssignmentError,
    SubscriptionError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from kraftpy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kraftpy.coordinator.assignors import Assignment
    from kraftpy.coordinator.consumer_protocol import ConsumerGroupProtocol, TopicLookup

UPGRADE_POLICIES = frozenset({"upgrade", "bidirectional"})
DOWNGRADE_POLICIES = frozenset({"downgrade", "bidirectional"})


def _ids(partitions: dict[str, list[int]] | list, lookup: TopicLookup | None) -> Assignment:
    """Topic names -> topic ids through ``lookup`` (topics it does not know are left out, as Kafka's
    toTopicPartitionMap does)."""
    items = partitions.items() if isinstance(partitions, dict) else [(e.topic, e.partitions) for e in partitions]
    out: dict[uuid.UUID, frozenset[int]] = {}
    for name, ps in items:
        found = lookup(name) if lookup is not None else None
        if found is not None and ps:
            out[found[0]] = out.get(found[0], frozenset()) | frozenset(ps)
    return out


def encode_member_assignment(group: ConsumerGroup, assignment: Assignment, metadata: bytes) -> bytes:
    """``assignment`` in the consumer protocol, in the version of the member's subscription ``metadata``
    (Kafka's prepareAssignment); topic names from the group's subscribed topics."""
    names = {topic_id: name for name, (topic_id, _) in group.subscription_metadata.items()}
    try:
        version = min(subscription_version(metadata), ASSIGNMENT_VERSION)
    except SubscriptionError:
        version = 0
    return encode_assignment({names[t]: sorted(ps) for t, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))
                              if t in names}, version=version)


class ClassicMembers:
    """The migration and the classic members of the consumer groups of one shard."""

    def __init__(self, protocol: ConsumerGroupProtocol) -> None:
        self.protocol = protocol

    @property
    def shard(self):
        return self.protocol.shard

    @property
    def config(self):
        return self.protocol.config

    # -- upgrade --------------------------------------------------------------------------------

    def validate_online_upgrade(self, classic: ClassicGroup) -> str | None:
        """Why ``classic`` may not become a consumer group now (None: it may). Kafka's
        validateOnlineUpgrade, and the subscriptions must parse (fromClassicGroup)."""
        if self.config.group_consumer_migration_policy not in UPGRADE_POLICIES:
            return "the online upgrade is disabled (group.consumer.migration.policy)"
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return "the group does not use the consumer embedded protocol"
        if classic.size() > self.config.group_consumer_max_size:
            return "the group size exceeds the consumer group maximum size"
        if classic.protocol_name is None:
            return "the group has no protocol yet"
        for member in classic.members.values():
            try:
                decode_subscription(member.metadata(classic.protocol_name))
                decode_assignment(member.assignment)
            except (SubscriptionError, AssignmentError, KeyError):
                return "the embedded consumer protocol is malformed"
        return None

    def upgrade(self, classic: ClassicGroup, lookup: TopicLookup) -> ConsumerGroup:
        """Kafka's convertToConsumerGroup: the classic group's members become classic members of a
        new consumer group; the classic group keeps only its offsets."""
        shard, group_id = self.shard, classic.group_id
        for member in list(classic.members.values()):
            # Whoever waits in a rebalance rejoins, now into the consumer group.
            classic.maybe_invoke_join(member, JoinResult(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
            classic.maybe_invoke_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        shard.cancel_classic_timers(classic)
        group = ConsumerGroup(group_id)
        group.group_epoch = group.assignment_epoch = classic.generation_id
        for m in classic.members.values():
            subscription = decode_subscription(m.metadata(classic.protocol_name))
            assigned = _ids(decode_assignment(m.assignment), lookup)
            group.add_member(ConsumerMember(
                member_id=m.member_id, instance_id=m.group_instance_id, rack_id=subscription.rack_id,
                client_id=m.client_id, client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                subscribed_topic_names=frozenset(subscription.topics), member_epoch=classic.generation_id,
                previous_member_epoch=classic.generation_id, state=MemberState.STABLE, assigned=assigned,
                classic=ClassicMetadata(m.session_timeout_ms, tuple((n, bytes(d)) for n, d in m.protocols))))
            group.target[m.member_id] = dict(assigned)
        # The subscribed topics as the broker knows them now (the joining member's heartbeat
        # compares with them: only what it changes makes a new epoch).
        group.subscription_metadata = {name: found for name in sorted(group.subscribed_topics())
                                       if (found := lookup(name)) is not None}
        generation, members = classic.generation_id, classic.size()
        classic.clear_membership(shard.clock())
        self.protocol.groups[group_id] = group
        group.touch()
        # Written with the group's records, first: the classic group's metadata goes.
        self.protocol.before_next_write(group_id, [(records.group_metadata_key(group_id), None)])
        for member in group.members.values():
            self.protocol.schedule_session(group, member)
        shard.log.info("classic group upgraded to a consumer group", group=group_id, generation=generation,
                       members=members)
        return group

    # -- downgrade ------------------------------------------------------------------------------

    def validate_online_downgrade(self, group: ConsumerGroup, member_id: str) -> bool:
        """Kafka's validateOnlineDowngrade: ``member_id`` (leaving) is the last consumer-protocol member,
        classic members remain, the policy allows it and they fit in group.max.size."""
        if not group.all_classic_except(member_id) or len(group.members) <= 1:
            return False
        if self.config.group_consumer_migration_policy not in DOWNGRADE_POLICIES:
            self.shard.log.info("consumer group not downgraded to a classic group: the online downgrade is "
                                "disabled (group.consumer.migration.policy)", group=group.group_id)
            return False
        if len(group.members) - 1 > self.shard.config.group_max_size:
            self.shard.log.info("consumer group not downgraded to a classic group: more members than "
                                "group.max.size", group=group.group_id)
            return False
        holder = self.shard.groups.get(group.group_id)
        return holder is None or holder.is_offsets_only()

    def downgrade(self, group: ConsumerGroup, leaving_member_id: str) -> None:
        """Kafka's convertToClassicGroup: the consumer group goes (tombstones), its classic members make
        a Stable classic group at generation = the group epoch, and a rebalance starts."""
        shard, group_id = self.shard, group.group_id
        for member_id in list(group.members):
            self.protocol.cancel_timers(group, member_id)
        members = []
        for m in group.members.values():
            if m.member_id == leaving_member_id or m.classic is None:
                continue
            members.append(Member(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.classic.session_timeout_ms, protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=list(m.classic.protocols),
                assignment=encode_member_assignment(group, group.target.get(m.member_id, {}),
                                                    m.classic.protocols[0][1])))
        classic = shard.groups.get(group_id)
        if classic is None:
            classic = shard.groups[group_id] = ClassicGroup(group_id, EMPTY, shard.clock())
        classic.adopt_members(group.group_epoch, members, shard.clock())
        assignment = {m.member_id: m.assignment for m in classic.members.values()}
        tombstones = self.protocol.forget(group_id)
        self.protocol.write_batch(group_id, [*tombstones, shard.group_metadata_record(classic, assignment)])
        shard.log.info("consumer group downgraded to a classic group", group=group_id,
                       generation=classic.generation_id, members=classic.size(), leaving=leaving_member_id)
        shard.start_downgraded_group(classic, f"Downgrade group {group_id} from consumer to classic.")

    # -- classic members' requests ----------------------------------------------------------------

    def _member(self, group: ConsumerGroup, member_id: str, instance_id: str | None
                ) -> ConsumerMember | ErrorCode:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
        else:
            static_id = group.static_members.get(instance_id)
            if static_id is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if static_id != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            member = group.members[static_id]
        if member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return member

    def join(self, group: ConsumerGroup, member_id: str, instance_id: str | None, require_known_member_id: bool,
             client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
             protocol_type: str, protocols: list[tuple[str, bytes]], lookup: TopicLookup | None) -> JoinResult:
        """Kafka's classicGroupJoinToConsumerGroup; the caller answers once the group's write is done."""
        unknown = member_id == UNKNOWN_MEMBER_ID
        if unknown:
            member_id = str(uuid.uuid4())
        replacing = instance_id is not None and instance_id in group.static_members
        if member_id not in group.members and not replacing and len(group.members) >= self.config.group_consumer_max_size:
            return JoinResult(member_id, ErrorCode.GROUP_MAX_SIZE_REACHED)
        if not group.supports_classic_protocols(protocol_type, {name for name, _ in protocols}):
            return JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if require_known_member_id and unknown:
            return JoinResult(member_id, ErrorCode.MEMBER_ID_REQUIRED)
        try:
            subscription = decode_subscription(protocols[0][1])
        except SubscriptionError:
            return JoinResult(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        epoch_before = group.group_epoch
        member = self._join_member(group, member_id, instance_id, unknown, client_id, client_host,
                                   rebalance_timeout_ms)
        if isinstance(member, ErrorCode):
            return JoinResult(member_id, member)
        member.client_id, member.client_host = client_id, client_host
        member.classic = ClassicMetadata(session_timeout_ms, tuple((n, bytes(d)) for n, d in protocols))
        self.protocol.update_member_subscription(group, member, tuple(subscription.topics), subscription.rack_id,
                                                 rebalance_timeout_ms)
        self.protocol.refresh_and_assign(group, lookup, epoch_before)
        owned = _ids(subscription.owned_partitions, lookup)
        group.reconcile(member, owned)
        group.touch(member.member_id)
        timers, key = self.shard.timers, (group.group_id, member.member_id)
        timers.cancel(("cg-join", *key))
        timers.cancel(("cg-revoke", *key))
        self.protocol.schedule_session(group, member)
        mid = member.member_id
        timers.schedule(("cg-sync", *key), member.rebalance_timeout_ms / 1000,
                        lambda: self.protocol.fence(group, mid, "did not sync within its rebalance timeout"))
        self.shard.log.info("classic member joined the consumer group", group=group.group_id, member=mid,
                            member_epoch=member.member_epoch, state=member.state.value)
        return JoinResult(member_id=mid, error=ErrorCode.NONE, generation_id=member.member_epoch,
                          protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=member.classic.protocol_name,
                          leader_id="")

    def _join_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None, unknown: bool,
                     client_id: str, client_host: str, rebalance_timeout_ms: int) -> ConsumerMember | ErrorCode:
        if instance_id is not None and instance_id in group.static_members:
            old = group.members[group.static_members[instance_id]]
            if unknown:
                # A static member restarted: it takes its old place and partitions under a new id.
                self.protocol.cancel_timers(group, old.member_id)
                return group.replace_static_member(old, member_id)
            if old.member_id != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            return old if old.classic is not None else ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is not None:
            return member if member.classic is not None else ErrorCode.UNKNOWN_MEMBER_ID
        member = ConsumerMember(member_id=member_id, instance_id=instance_id, rack_id=None, client_id=client_id,
                                client_host=client_host, rebalance_timeout_ms=rebalance_timeout_ms)
        group.add_member(member)
        group.bump_group_epoch()
        return member

    def sync(self, group: ConsumerGroup, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        """Kafka's classicGroupSyncToConsumerGroup; the caller answers once the group's writes are done."""
        member = self._member(group, member_id, instance_id)
        if isinstance(member, ErrorCode):
            return SyncResult(member)
        if generation_id != member.member_epoch:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        assert member.classic is not None
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
                protocol_name is not None and protocol_name != member.classic.protocol_name):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if self._must_rejoin_before_sync(group, member):
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        self.shard.timers.cancel(("cg-sync", group.group_id, member.member_id))
        self.protocol.schedule_session(group, member)
        return SyncResult(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE, member.classic.protocol_name,
                          encode_member_assignment(group, member.assigned, member.classic.protocols[0][1]))

    def _must_rejoin_before_sync(self, group: ConsumerGroup, member: ConsumerMember) -> bool:
        """Kafka's throwIfRebalanceInProgress: a new epoch, unless the member is still revoking."""
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._schedule_join_timeout(group, member)
            return True
        return False

    def _schedule_join_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        key = ("cg-join", group.group_id, member.member_id)
        if key not in self.shard.timers:
            mid = member.member_id
            self.shard.timers.schedule(key, member.rebalance_timeout_ms / 1000, lambda: self.protocol.fence(
                group, mid, "the classic member did not rejoin within its rebalance timeout"))

    def heartbeat(self, group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
                  ) -> ErrorCode:
        """Kafka's classicGroupHeartbeatToConsumerGroup."""
        member = self._member(group, member_id, instance_id)
        if isinstance(member, ErrorCode):
            return member
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self.protocol.schedule_session(group, member)
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member))):
            self._schedule_join_timeout(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group: ConsumerGroup, leaving: list[tuple[str, str | None, str | None]]
              ) -> list[tuple[str, str | None, ErrorCode]]:
        """Kafka's classicGroupLeaveToConsumerGroup: (member id, instance id, error) per leaving member."""
        results = []
        removed = 0
        for member_id, instance_id, reason in leaving:
            if instance_id is not None and member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal of a static member by its instance id.
                static_id = group.static_members.get(instance_id)
                found = group.members[static_id] if static_id is not None else ErrorCode.UNKNOWN_MEMBER_ID
                if isinstance(found, ConsumerMember) and found.classic is None:
                    found = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                found = self._member(group, member_id, instance_id)
            if isinstance(found, ErrorCode):
                results.append((member_id, instance_id, found))
                continue
            self.protocol.cancel_timers(group, found.member_id)
            group.remove_member(found.member_id)
            removed += 1
            self.shard.log.info("classic member left the consumer group", group=group.group_id,
                                member=found.member_id, instance_id=instance_id,
                                reason=reason if reason is not None else "not provided")
            results.append((found.member_id, instance_id, ErrorCode.NONE))
        if removed:
            group.bump_group_epoch()
        return results

