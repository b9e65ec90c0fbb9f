"""ConsumerGroupHeartbeat and ConsumerGroupDescribe for the consumer groups of one ``__consumer_offsets``
partition (KIP-848), beside the classic groups of the same :class:`~kraftpy.coordinator.group_shard.GroupShard`.

Theory of operation
-------------------
A heartbeat (Kafka's GroupMetadataManager.consumerGroupHeartbeat) runs, synchronously:

1. checks the request (INVALID_REQUEST), the assignor it names (UNSUPPORTED_ASSIGNOR) and that the
   group id is not a classic group with members, unless group.consumer.migration.policy lets a joining
   member upgrade it (:mod:`kraftpy.coordinator.consumer_group_migration`; else GROUP_ID_NOT_FOUND;
   an empty classic group, offsets only, becomes a consumer group whatever the policy, as in Kafka);
2. finds the member: epoch 0 joins (a new member id, or a static member's place taken over), -1
   leaves, -2 leaves a static member's place open, any other epoch must be the member's current one,
   or its previous one when the client still owns no more than it was given (a lost response);
   otherwise FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID;
3. applies what changed (subscriptions, assignor) and refreshes the subscribed topics' metadata from
   the broker's image: any change bumps the group epoch;
4. computes a new target assignment if the group epoch moved past it;
5. reconciles the member one step (:meth:`ConsumerGroup.reconcile`) and answers its epoch, the
   heartbeat interval and, when it changed (or the member just joined, or owns something else), its
   assignment.

Timers (shard timers, keyed like the classic ones): ``("cg-session", group, member)`` removes a
member that did not heartbeat within group.consumer.session.timeout.ms; ``("cg-revoke", group,
member)`` removes a member that did not revoke within its rebalance timeout.

Durability: after a heartbeat (or a timeout) changed a group, the records that differ from what was
last written for it (:mod:`kraftpy.coordinator.consumer_group_records`: group epoch, subscribed topics,
each member's metadata, target and current assignment, tombstones for members gone) go to the
partition as one write, and the heartbeat is answered once that write, and every earlier one of the
group, is committed: a member never learns an epoch or partitions a failover could forget. (Memory
changes first, as in Kafka's coordinator; a concurrent heartbeat of the same group waits for the same
write.) Loading replays the records, the last of each key winning, and gives every member a fresh
session timeout. Committed offsets are the classic groups' records.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from kraftpy.coordinator import consumer_group_records as cgr
from kraftpy.coordinator import records
from kraftpy.coordinator.assignors import ASSIGNORS, Assignment
from kraftpy.coordinator.consumer_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from kraftpy.coordinator.consumer_group_migration import ClassicMembers
from kraftpy.coordinator.runtime import Waiter
from kraftpy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kraftpy.coordinator.group_shard import GroupShard

#: Looks a topic up in the broker's metadata: name -> (topic id, partition count), or None.
TopicLookup = Callable[[str], tuple[uuid.UUID, int] | None]
#: The names of the broker's topics a regular expression matches (whole names; raises re.error).
RegexMatcher = Callable[[str], frozenset[str]]


def match_topics(pattern: str, names) -> frozenset[str]:
    """The names ``pattern`` matches as a whole (Kafka matches RE2J regular expressions the same way;
    the syntax both share is Python's too). Internal topics are never matched."""
    compiled = re.compile(pattern)
    return frozenset(n for n in names if not n.startswith("__") and compiled.fullmatch(n))


@attrs.frozen
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: What the member owns: None when unchanged since its last heartbeat.
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    #: The group's own consumer.session.timeout.ms and consumer.heartbeat.interval.ms (GROUP configs);
    #: None: the broker's group.consumer.* settings.
    session_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None


@attrs.frozen
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    #: The partitions the member may consume now, when the answer carries them.
    assignment: Assignment | None = None


def _error(code: ErrorCode, message: str | None = None) -> HeartbeatResult:
    return HeartbeatResult(code, message)


def _is_subset(a: Assignment, b: Assignment) -> bool:
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())


class ConsumerGroupProtocol:
    """The consumer groups of one shard."""

    def __init__(self, shard: GroupShard) -> None:
        self.shard = shard
        self.groups: dict[str, ConsumerGroup] = {}
        #: group id -> its records as last written (key bytes -> value bytes): what the next write diffs.
        self._written: dict[str, dict[bytes, bytes]] = {}
        #: group id -> the waiter of its last write, (offset, error) once committed or failed.
        self._last_write: dict[str, Waiter] = {}
        #: Loading: group id -> key bytes -> (key version, value bytes); the last record of a key wins.
        self._loaded: dict[str, dict[bytes, tuple[int, bytes]]] = {}
        #: group id -> records to write first in the group's next write (a converted group's tombstones).
        self._before_write: dict[str, list[tuple[bytes, bytes | None]]] = {}
        #: The classic members of the consumer groups, and the conversions between group types.
        self.classic = ClassicMembers(self)

    @property
    def config(self):
        return self.shard.config

    # -- heartbeat -----------------------------------------------------------------------------

    def _validate(self, r: HeartbeatRequest) -> str | None:
        if not r.group_id:
            return "GroupId can't be empty."
        if r.instance_id is not None and not r.instance_id:
            return "InstanceId can't be empty."
        if r.rack_id is not None and not r.rack_id:
            return "RackId can't be empty."
        if r.member_epoch == JOIN_EPOCH:
            if r.rebalance_timeout_ms == -1:
                return "RebalanceTimeoutMs must be provided in first request."
            if r.owned:
                return "TopicPartitions must be empty when (re-)joining."
            if r.subscribed_topic_names is None and r.subscribed_topic_regex is None:
                return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        elif r.member_epoch == LEAVE_STATIC_EPOCH:
            if r.instance_id is None:
                return "InstanceId can't be null."
        elif r.member_epoch < LEAVE_STATIC_EPOCH:
            return f"MemberEpoch {r.member_epoch} is invalid."
        if r.member_epoch != JOIN_EPOCH and not r.member_id:
            return "MemberId can't be empty."
        return None

    def heartbeat(self, r: HeartbeatRequest, lookup: TopicLookup, match: RegexMatcher | None = None
                  ) -> HeartbeatResult:
        message = self._validate(r)
        if message is not None:
            return _error(ErrorCode.INVALID_REQUEST, message)
        if r.subscribed_topic_regex:
            try:
                re.compile(r.subscribed_topic_regex)
            except re.error as exc:
                return _error(ErrorCode.INVALID_REGULAR_EXPRESSION,
                              f"SubscribedTopicRegex `{r.subscribed_topic_regex}` is not a valid regular expression: "
                              f"{exc}.")
        if r.server_assignor is not None and r.server_assignor not in self.config.group_consumer_assignors:
            return _error(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {r.server_assignor} is not supported. "
                          f"Supported assignors: {', '.join(self.config.group_consumer_assignors)}.")
        classic = self.shard.groups.get(r.group_id)
        if classic is not None and classic.size() > 0:
            refused = self.classic.validate_online_upgrade(classic) if r.member_epoch == JOIN_EPOCH else ""
            if refused is None and classic.size() >= self.config.group_consumer_max_size:
                # The joining member would not fit: refused before anything is converted.
                return _error(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum "
                              f"capacity of {self.config.group_consumer_max_size} members.")
            if refused is not None:
                if refused:
                    self.shard.log.info("classic group not upgraded to a consumer group", group=r.group_id,
                                        reason=refused)
                return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {r.group_id} is not a consumer group.")
            self.classic.upgrade(classic, lookup)
        group = self.groups.get(r.group_id)
        if group is None:
            if r.member_epoch != JOIN_EPOCH:
                return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {r.group_id} not found.")
            group = self.groups[r.group_id] = ConsumerGroup(r.group_id)
            self.shard.log.info("consumer group created", group=r.group_id)
            if classic is not None and classic.protocol_type is not None:
                # An empty classic group becomes a consumer group: its metadata goes (a tombstone, as
                # Kafka writes), its offsets stay, expiring as a consumer group's do (after the commit).
                classic.protocol_type = classic.protocol_name = classic.leader_id = None
                classic.generation_id = 0
                self.shard.shard.write([(records.group_metadata_key(r.group_id), None)], _ignore)
        group.session_timeout_ms = r.session_timeout_ms
        group.heartbeat_interval_ms = r.heartbeat_interval_ms
        if r.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
            return self._leave(group, r)
        epoch_before = group.group_epoch
        if r.member_epoch == JOIN_EPOCH:
            joined = self._join(group, r)
            if isinstance(joined, HeartbeatResult):
                return joined
            member, full = joined, True
        else:
            member = group.members.get(r.member_id)
            if member is None:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {r.member_id} is not a member of group "
                              f"{r.group_id}.")
            error = self._check_epoch(member, r)
            if error is not None:
                return error
            full = False
        before = (member.member_epoch, member.assigned)
        member.classic = None  # a ConsumerGroupHeartbeat speaks the consumer protocol (as Kafka resets it)
        self._update_member(group, member, r, match)
        self.refresh_and_assign(group, lookup, epoch_before)
        self._reconcile(group, member, r.owned)
        group.touch(member.member_id)
        self.schedule_session(group, member)
        changed = before != (member.member_epoch, member.assigned)
        send = full or changed or (r.owned is not None and r.owned != member.assigned)
        return HeartbeatResult(ErrorCode.NONE, member_id=member.member_id, member_epoch=member.member_epoch,
                               heartbeat_interval_ms=self._heartbeat_interval_ms(group),
                               assignment=dict(member.assigned) if send else None)

    def refresh_and_assign(self, group: ConsumerGroup, lookup: TopicLookup | None, epoch_before: int) -> None:
        """Refresh the subscribed topics' metadata, then compute a new target if the group epoch moved.
        However many changes one request brought (a member and its topics), they make one new epoch."""
        if lookup is not None:
            group.refresh_subscription_metadata(_TopicsView(group, lookup))
        group.group_epoch = min(group.group_epoch, epoch_before + 1)
        if group.maybe_update_target(self.config.group_consumer_assignors):
            self.shard.log.info("consumer group target assignment", group=group.group_id,
                                epoch=group.assignment_epoch, assignor=group.assignor_name,
                                members=len(group.members))

    def update_member_subscription(self, group: ConsumerGroup, member: ConsumerMember, topics: tuple[str, ...],
                                   rack_id: str | None, rebalance_timeout_ms: int) -> None:
        """A classic member's JoinGroup: its subscription's topics and rack, its rebalance timeout."""
        self._update_member(group, member, HeartbeatRequest(
            group_id=group.group_id, member_id=member.member_id, member_epoch=member.member_epoch,
            rack_id=rack_id, rebalance_timeout_ms=rebalance_timeout_ms, subscribed_topic_names=topics), None)

    def _join(self, group: ConsumerGroup, r: HeartbeatRequest) -> ConsumerMember | HeartbeatResult:
        if r.instance_id is not None and r.instance_id in group.static_members:
            old = group.members[group.static_members[r.instance_id]]
            if old.member_epoch != LEAVE_STATIC_EPOCH:
                return _error(ErrorCode.UNRELEASED_INSTANCE_ID, f"Static member {old.member_id} with instance id "
                              f"{r.instance_id} is not released yet.")
            self.cancel_timers(group, old.member_id)
            member = group.replace_static_member(old, str(uuid.uuid4()))
            member.member_epoch, member.previous_member_epoch = old.previous_member_epoch, old.previous_member_epoch
            self.shard.log.info("static member rejoined", group=group.group_id, member=member.member_id,
                                instance_id=r.instance_id)
            return member
        if len(group.members) >= self.config.group_consumer_max_size:
            return _error(ErrorCode.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity of "
                          f"{self.config.group_consumer_max_size} members.")
        member = ConsumerMember(member_id=r.member_id or str(uuid.uuid4()), instance_id=r.instance_id,
                                rack_id=r.rack_id, client_id=r.client_id, client_host=r.client_host,
                                rebalance_timeout_ms=r.rebalance_timeout_ms)
        if member.member_id in group.members:
            # A member id the client chose itself and already in use (a retried join): the same member.
            return group.members[member.member_id]
        group.add_member(member)
        group.bump_group_epoch()
        self.shard.log.info("member joined the consumer group", group=group.group_id, member=member.member_id,
                            instance_id=member.instance_id, group_epoch=group.group_epoch)
        return member

    def _check_epoch(self, member: ConsumerMember, r: HeartbeatRequest) -> HeartbeatResult | None:
        """Kafka's throwIfMemberEpochIsInvalid."""
        if r.member_epoch > member.member_epoch:
            return _error(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                          f"({r.member_epoch}) than the one known by the group coordinator ({member.member_epoch}).")
        if r.member_epoch < member.member_epoch:
            # The member may not have received the answer that gave it its epoch: accepted when it is
            # the previous epoch and the member owns nothing it was not given.
            if r.member_epoch != member.previous_member_epoch or r.owned is None \
                    or not _is_subset(r.owned, member.assigned):
                return _error(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member "
                              f"epoch ({r.member_epoch}) than the one known by the group coordinator "
                              f"({member.member_epoch}).")
        return None

    def _update_member(self, group: ConsumerGroup, member: ConsumerMember, r: HeartbeatRequest,
                       match: RegexMatcher | None) -> None:
        changed = False
        if r.subscribed_topic_names is not None:
            names = frozenset(r.subscribed_topic_names)
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                changed = True
        if r.subscribed_topic_regex is not None:
            regex = r.subscribed_topic_regex or None  # an empty regex clears it
            if regex != member.subscribed_topic_regex:
                member.subscribed_topic_regex = regex
                changed = True
        if member.subscribed_topic_regex is not None and match is not None:
            # Evaluated again on every heartbeat: topics created or deleted since change what it matches.
            matches = match(member.subscribed_topic_regex)
            if matches != member.regex_matches:
                member.regex_matches = matches
                changed = True
        elif member.regex_matches:
            member.regex_matches = frozenset()
            changed = True
        if r.server_assignor is not None and r.server_assignor != member.server_assignor:
            member.server_assignor = r.server_assignor
            changed = True
        if r.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = r.rebalance_timeout_ms
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if changed and group.group_epoch == group.assignment_epoch:  # else a new target is due anyway
            group.bump_group_epoch()

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None) -> None:
        was_revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        group.reconcile(member, owned)
        key = ("cg-revoke", group.group_id, member.member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS and not was_revoking:
            member_id = member.member_id
            self.shard.timers.schedule(key, member.rebalance_timeout_ms / 1000,
                                       lambda: self.fence(group, member_id, "did not revoke its partitions within "
                                                                             "its rebalance timeout"))
        elif member.state is not MemberState.UNREVOKED_PARTITIONS:
            self.shard.timers.cancel(key)

    def _leave(self, group: ConsumerGroup, r: HeartbeatRequest) -> HeartbeatResult:
        member_id = r.member_id
        if r.member_epoch == LEAVE_STATIC_EPOCH and r.instance_id in group.static_members:
            member_id = group.static_members[r.instance_id]
        member = group.members.get(member_id)
        if member is None:
            return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {r.member_id} is not a member of group "
                          f"{r.group_id}.")
        if r.member_epoch == LEAVE_STATIC_EPOCH:
            # Its place and partitions wait for it until its session times out.
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_STATIC_EPOCH
            group.touch(member_id)
            self.schedule_session(group, member)
            self.shard.log.info("static member left temporarily", group=group.group_id, member=member_id,
                                instance_id=r.instance_id)
            return HeartbeatResult(ErrorCode.NONE, member_id=member_id, member_epoch=LEAVE_STATIC_EPOCH)
        if self.classic.validate_online_downgrade(group, member_id):
            self.classic.downgrade(group, member_id)
        else:
            self._remove(group, member_id, "left the group")
        return HeartbeatResult(ErrorCode.NONE, member_id=member_id, member_epoch=LEAVE_EPOCH)

    def _remove(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        self.cancel_timers(group, member_id)
        if group.remove_member(member_id) is None:
            return
        group.bump_group_epoch()
        self.shard.log.info(f"consumer group member {why}", group=group.group_id, member=member_id,
                            group_epoch=group.group_epoch)

    def fence(self, group: ConsumerGroup, member_id: str, why: str) -> None:
        """A timer removes a member (Kafka's consumerGroupFenceMember: the last consumer-protocol member
        fenced may leave a classic group behind)."""
        if self.groups.get(group.group_id) is not group or not self.shard.shard.active:
            return
        if self.classic.validate_online_downgrade(group, member_id):
            self.shard.log.info(f"consumer group member {why}", group=group.group_id, member=member_id)
            self.classic.downgrade(group, member_id)
            return
        self._remove(group, member_id, why)
        self.write(group.group_id)

    def cancel_timers(self, group: ConsumerGroup, member_id: str) -> None:
        for kind in ("cg-session", "cg-revoke", "cg-join", "cg-sync"):
            self.shard.timers.cancel((kind, group.group_id, member_id))

    def _heartbeat_interval_ms(self, group: ConsumerGroup) -> int:
        return group.heartbeat_interval_ms or self.config.group_consumer_heartbeat_interval_ms

    def schedule_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """(Re)start the member's session: a classic member's own session timeout, else the group's."""
        member_id = member.member_id
        if member.classic is not None:
            timeout_ms = member.classic.session_timeout_ms
        else:
            timeout_ms = group.session_timeout_ms or self.config.group_consumer_session_timeout_ms
        self.shard.timers.schedule(("cg-session", group.group_id, member_id), timeout_ms / 1000,
                                   lambda: self.fence(group, member_id, "session timed out"))

    # -- offsets, listing, deletion --------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int, api_version: int
                               ) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit; None when the commit may go on."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return None  # an admin client, or a consumer without group management
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is not None:
            # A classic member commits with its generation, the member epoch, at any version.
            return ErrorCode.ILLEGAL_GENERATION if member_epoch != member.member_epoch else None
        if api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetFetch: an admin (no member, epoch -1) may always read; a
        member must be known and at its epoch."""
        group = self.groups.get(group_id)
        if group is None or (member_epoch < 0 and not member_id):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return None

    def delete_group(self, group_id: str) -> ErrorCode | None:
        """None when ``group_id`` is no consumer group; else NON_EMPTY_GROUP or NONE (then removed)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        self.write(group_id)
        return ErrorCode.NONE

    def remove_empty_groups(self, has_offsets: Callable[[str], bool]) -> int:
        """The retention pass: consumer groups with no members and no offsets are deleted (Kafka's
        cleanupGroupMetadata); returns how many."""
        gone = [gid for gid, g in self.groups.items() if not g.members and not has_offsets(gid)]
        for group_id in gone:
            del self.groups[group_id]
            self.write(group_id)
            self.shard.log.info("empty consumer group removed", group=group_id)
        return len(gone)

    def drop_empty(self, group_id: str) -> bool:
        """A classic member joining: an empty consumer group becomes a classic one (True); a
        consumer group with members refuses it (False)."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members:
            return False
        del self.groups[group_id]
        self.write(group_id)
        return True

    def clear(self) -> None:
        self.groups.clear()
        self._written.clear()
        self._before_write.clear()
        for waiter in self._last_write.values():
            if not waiter.is_set():
                waiter.set((-1, None))
        self._last_write.clear()

    # -- durability --------------------------------------------------------------------------------

    def write(self, group_id: str) -> Waiter | None:
        """Write the records of ``group_id`` that changed since its last write (tombstones for what is
        gone, all of them when the group is); returns the waiter of the group's latest write, None when
        it has none pending."""
        group = self.groups.get(group_id)
        before = self._written.get(group_id, {})
        first = self._before_write.pop(group_id, [])
        if group is None:
            batch: list[tuple[bytes, bytes | None]] = [(k, None) for k in before]
            self._written.pop(group_id, None)
        else:
            # Only the members touched since the last write are encoded (all after a new target).
            touched, group.touched = group.touched, set()
            now = _group_records(group, None if touched is None else touched & group.members.keys())
            batch = [(k, v) for k, v in now.items() if before.get(k) != v]
            if touched is None:
                gone = [k for k in before if k not in now]
            else:
                gone = [k for mid in touched - group.members.keys() for kind in _MEMBER_KINDS
                        if (k := cgr.key(kind, group_id, mid)) in before]
            batch += [(k, None) for k in gone]
            written = self._written.setdefault(group_id, {})
            for k, v in batch:
                if v is None:
                    written.pop(k, None)
                else:
                    written[k] = v
        return self.write_batch(group_id, [*first, *batch])

    def before_next_write(self, group_id: str, batch: list[tuple[bytes, bytes | None]]) -> None:
        """Records the group's next write starts with (in the same batch)."""
        self._before_write.setdefault(group_id, []).extend(batch)

    def forget(self, group_id: str) -> list[tuple[bytes, None]]:
        """The group leaves this shard (it became a classic group): the tombstones of its records."""
        self.groups.pop(group_id, None)
        self._before_write.pop(group_id, None)
        return [(k, None) for k in self._written.pop(group_id, {})]

    def write_batch(self, group_id: str, batch: list[tuple[bytes, bytes | None]]) -> Waiter | None:
        """Write ``batch`` as the group's latest write; its waiter (None when nothing is pending)."""
        if batch:
            waiter: Waiter = Waiter()
            self._last_write[group_id] = waiter

            def done(offset: int, error: BaseException | None) -> None:
                waiter.set((offset, error))
                if error is not None:
                    self.shard.log.warning("consumer group records not written", group=group_id,
                                           error=f"{type(error).__name__}: {error}")
                if self._last_write.get(group_id) is waiter:
                    del self._last_write[group_id]

            self.shard.shard.write(batch, done)
        return self._last_write.get(group_id)

    def pending_write(self, group_id: str) -> Waiter | None:
        """The waiter of the group's last write while it is not yet committed."""
        return self._last_write.get(group_id)

    def replay(self, key_version: int, key: bytes, value: bytes | None) -> None:
        group_id, _ = cgr.decode_key(key_version, key)
        records = self._loaded.setdefault(group_id, {})
        if value is None:
            records.pop(bytes(key), None)
        else:
            records[bytes(key)] = (key_version, bytes(value))

    def on_loaded(self) -> None:
        """Rebuild the groups from the replayed records; every member gets a fresh session."""
        for group_id, loaded in self._loaded.items():
            group = _group_from_records(group_id, loaded, self.config.group_consumer_assignors)
            if group is None:
                continue
            group.touched = set()
            self.groups[group_id] = group
            self._written[group_id] = {k: v for k, (_, v) in loaded.items()}
            for member in group.members.values():
                self.schedule_session(group, member)
        self._loaded.clear()


class _TopicsView(Mapping[str, tuple[uuid.UUID, int]]):
    """The broker's topics, looked up only for the names the group subscribes to."""

    def __init__(self, group: ConsumerGroup, lookup: TopicLookup) -> None:
        self._found = {name: found for name in group.subscribed_topics()
                       if (found := lookup(name)) is not None}

    def __getitem__(self, name: str) -> tuple[uuid.UUID, int]:
        return self._found[name]

    def __iter__(self):
        return iter(self._found)

    def __len__(self) -> int:
        return len(self._found)


__all__ = ["ASSIGNORS", "ConsumerGroupProtocol", "HeartbeatRequest", "HeartbeatResult"]


def _ignore(_offset: int, _error: BaseException | None) -> None:
    """A write whose failure changes nothing: the tombstone of a classic group turned consumer group
    (a reload without it sees an empty classic group beside the consumer group, served the same)."""


#: MemberState <-> Kafka's int8 codes (its MemberState enum).
_STATE_CODES = {MemberState.STABLE: 1, MemberState.UNREVOKED_PARTITIONS: 2, MemberState.UNRELEASED_PARTITIONS: 3}
_STATES = {code: state for state, code in _STATE_CODES.items()}


_MEMBER_KINDS = (cgr.MEMBER_METADATA, cgr.TARGET_MEMBER, cgr.CURRENT_ASSIGNMENT)


def _group_records(group: ConsumerGroup, member_ids=None) -> dict[bytes, bytes]:
    """The records that describe ``group`` now, key bytes -> value bytes: the group's own and those of
    the members in ``member_ids`` (None: every member)."""
    gid = group.group_id
    out = {
        cgr.key(cgr.METADATA, gid): cgr.value(cgr.METADATA, cgr.ConsumerGroupMetadataValue(epoch=group.group_epoch)),
        cgr.key(cgr.TARGET_METADATA, gid): cgr.value(cgr.TARGET_METADATA, cgr.ConsumerGroupTargetAssignmentMetadataValue(
            assignment_epoch=group.assignment_epoch)),
    }
    meta = cgr.ConsumerGroupPartitionMetadataValue
    out[cgr.key(cgr.PARTITION_METADATA, gid)] = cgr.value(cgr.PARTITION_METADATA, meta(topics=[
        meta.TopicMetadata(topic_id=topic_id, topic_name=name, num_partitions=count)
        for name, (topic_id, count) in sorted(group.subscription_metadata.items())]))
    current = cgr.ConsumerGroupCurrentMemberAssignmentValue
    target = cgr.ConsumerGroupTargetAssignmentMemberValue
    members = group.members.values() if member_ids is None else [group.members[i] for i in member_ids]
    for m in members:
        out[cgr.key(cgr.MEMBER_METADATA, gid, m.member_id)] = cgr.value(
            cgr.MEMBER_METADATA, cgr.ConsumerGroupMemberMetadataValue(
                instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
                rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
                classic_member_metadata=_classic_record(m)))
        out[cgr.key(cgr.TARGET_MEMBER, gid, m.member_id)] = cgr.value(cgr.TARGET_MEMBER, target(
            topic_partitions=cgr.topic_partitions(target.TopicPartition, group.target.get(m.member_id, {}))))
        out[cgr.key(cgr.CURRENT_ASSIGNMENT, gid, m.member_id)] = cgr.value(cgr.CURRENT_ASSIGNMENT, current(
            member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=_STATE_CODES[m.state],
            assigned_partitions=cgr.topic_partitions(current.TopicPartitions, m.assigned),
            partitions_pending_revocation=cgr.topic_partitions(current.TopicPartitions, m.pending_revocation)))
    return out


def _group_from_records(group_id: str, loaded: dict[bytes, tuple[int, bytes]], assignors) -> ConsumerGroup | None:
    """The group the replayed records describe; None without its metadata record (deleted)."""
    by_kind: dict[int, list[tuple[str | None, object]]] = {}
    for k, (version, v) in loaded.items():
        _, member_id = cgr.decode_key(version, k)
        by_kind.setdefault(version, []).append((member_id, cgr.decode_value(version, v)))
    if cgr.METADATA not in by_kind:
        return None
    group = ConsumerGroup(group_id)
    group.group_epoch = by_kind[cgr.METADATA][0][1].epoch
    if cgr.TARGET_METADATA in by_kind:
        group.assignment_epoch = by_kind[cgr.TARGET_METADATA][0][1].assignment_epoch
    if cgr.PARTITION_METADATA in by_kind:
        group.subscription_metadata = {t.topic_name: (t.topic_id, t.num_partitions)
                                       for t in by_kind[cgr.PARTITION_METADATA][0][1].topics}
    for member_id, v in by_kind.get(cgr.MEMBER_METADATA, []):
        group.add_member(ConsumerMember(
            member_id=member_id, instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id,
            client_host=v.client_host, rebalance_timeout_ms=v.rebalance_timeout_ms,
            subscribed_topic_names=frozenset(v.subscribed_topic_names),
            subscribed_topic_regex=v.subscribed_topic_regex, server_assignor=v.server_assignor,
            classic=_classic_of(v.classic_member_metadata)))
    for member_id, v in by_kind.get(cgr.TARGET_MEMBER, []):
        if member_id in group.members:
            group.target[member_id] = cgr.assignment_of(v.topic_partitions)
    for member_id, v in by_kind.get(cgr.CURRENT_ASSIGNMENT, []):
        member = group.members.get(member_id)
        if member is not None:
            member.member_epoch, member.previous_member_epoch = v.member_epoch, v.previous_member_epoch
            member.state = _STATES.get(v.state, MemberState.STABLE)
            member.assigned = cgr.assignment_of(v.assigned_partitions)
            member.pending_revocation = cgr.assignment_of(v.partitions_pending_revocation)
    for member in group.members.values():
        if member.subscribed_topic_regex is not None:  # as matched when last written; evaluated again next heartbeat
            member.regex_matches = match_topics(member.subscribed_topic_regex, group.subscription_metadata)
    group.assignor_name = group.preferred_assignor(list(assignors))
    return group


def _classic_record(member: ConsumerMember):
    """A classic member's ClassicMemberMetadata (None for a consumer-protocol member)."""
    if member.classic is None:
        return None
    cls = cgr.ConsumerGroupMemberMetadataValue.ClassicMemberMetadata
    return cls(session_timeout_ms=member.classic.session_timeout_ms, supported_protocols=[
        cgr.ConsumerGroupMemberMetadataValue.ClassicProtocol(name=n, metadata=d) for n, d in member.classic.protocols])


def _classic_of(value) -> ClassicMetadata | None:
    if value is None or not value.supported_protocols:
        return None
    return ClassicMetadata(value.session_timeout_ms, tuple((p.name, bytes(p.metadata))
                                                           for p in value.supported_protocols))
