"""``PartitionChangeBuilder``: the one place that decides a partition's next ISR and leader.

Every change the controller makes to a partition (fencing, controlled shutdown, unfencing, AlterPartition,
elections) sets a target ISR and an election kind here, and ``build()`` returns the PartitionChangeRecord
that gets there, or None when nothing would change. The rules (Kafka's ``PartitionChangeBuilder``):

* A leader is kept while it is in the target ISR and active (unfenced, not shutting down). A leader in
  controlled shutdown is also kept while no other ISR member could take over: it still serves until it
  stops, which keeps the partition online.
* Otherwise the new leader is the first active ISR member in replica order.
* With no such member, and unclean election allowed (topic config or an UNCLEAN election request), the
  first active replica leads, the ISR becomes just that replica, and the leader recovery state becomes
  RECOVERING. Without it, the partition has no leader (-1) and keeps its ISR, so that the last ISR member
  can lead again when it returns (KIP-841: the ISR never becomes empty).
* A PREFERRED election makes the first replica the leader when it is an active ISR member.

Reassignments (KIP-455, Kafka's ``PartitionReassignmentReplicas``): a builder may also set target replicas
and the adding and removing sets. While a partition has adding or removing replicas, every ``build()``
tries to complete the move first: once every adding replica is in the target ISR (and some member of
the ISR stays), the replicas become the target (the current ones minus the removing ones), the removing
replicas leave the ISR, both sets are cleared, and the leader is elected again among what is left — so
a leader being removed hands over to a target replica in the same record.
"""

from __future__ import annotations

import enum

from kraftpy.ids import Uuid
from kraftpy.metadata.image import ClusterImage, PartitionRegistration
from kraftpy.metadata.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    NO_LEADER_RECOVERY_STATE_CHANGE,
    LeaderRecoveryState,
    PartitionChangeRecord,
)


class Election(enum.Enum):
    #: Elect only when the current leader cannot stay.
    ONLY_IF_NEEDED = "only-if-needed"
    #: Move leadership to the preferred replica when it can lead.
    PREFERRED = "preferred"
    #: Like ONLY_IF_NEEDED, and fall back to an out-of-sync replica (the operator asked for it).
    UNCLEAN = "unclean"


class PartitionChangeBuilder:
    def __init__(
        self,
        topic_id: Uuid,
        partition_id: int,
        partition: PartitionRegistration,
        cluster: ClusterImage,
        *,
        unclean_allowed: bool = False,
    ) -> None:
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.partition = partition
        self.cluster = cluster
        self.unclean_allowed = unclean_allowed
        self.target_isr: tuple[int, ...] = partition.isr
        self.target_replicas: tuple[int, ...] = partition.replicas
        self.target_adding: tuple[int, ...] = partition.adding_replicas
        self.target_removing: tuple[int, ...] = partition.removing_replicas
        self.target_leader_recovery_state = partition.leader_recovery_state
        self.election = Election.ONLY_IF_NEEDED

    def set_target_isr(self, isr: tuple[int, ...]) -> PartitionChangeBuilder:
        if not isr:
            raise ValueError("the ISR of a partition is never empty")
        self.target_isr = tuple(isr)
        return self

    def set_target_replicas(self, replicas: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_replicas = tuple(replicas)
        return self

    def set_target_adding(self, adding: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_adding = tuple(adding)
        return self

    def set_target_removing(self, removing: tuple[int, ...]) -> PartitionChangeBuilder:
        self.target_removing = tuple(removing)
        return self

    def set_target_leader_recovery_state(self, state: LeaderRecoveryState) -> PartitionChangeBuilder:
        self.target_leader_recovery_state = state
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def _can_keep_leading(self, broker_id: int) -> bool:
        reg = self.cluster.broker(broker_id)
        return reg is not None and not reg.fenced

    def _maybe_complete_reassignment(self) -> None:
        """Finish a move whose adding replicas are all in the target ISR (see the module doc)."""
        if not self.target_adding and not self.target_removing:
            return
        if not set(self.target_adding) <= set(self.target_isr):
            return
        removing = set(self.target_removing)
        isr = tuple(r for r in self.target_isr if r not in removing)
        if not isr:
            return
        self.target_replicas = tuple(r for r in self.target_replicas if r not in removing)
        self.target_isr = isr
        self.target_adding = ()
        self.target_removing = ()

    def _elect(self) -> tuple[int, tuple[int, ...], LeaderRecoveryState]:
        part, isr, active = self.partition, self.target_isr, self.cluster.is_active
        replicas = self.target_replicas
        current = part.leader if part.leader in replicas else NO_LEADER
        if self.election is Election.PREFERRED:
            preferred = replicas[0]
            if preferred != current and preferred in isr and active(preferred):
                return preferred, isr, self.target_leader_recovery_state
        if current != NO_LEADER and current in isr and active(current):
            return current, isr, self.target_leader_recovery_state
        for replica in replicas:
            if replica in isr and active(replica):
                return replica, isr, self.target_leader_recovery_state
        if current != NO_LEADER and current in isr and self._can_keep_leading(current):
            return current, isr, self.target_leader_recovery_state
        if self.unclean_allowed or self.election is Election.UNCLEAN:
            for replica in replicas:
                if active(replica):
                    return replica, (replica,), LeaderRecoveryState.RECOVERING
        return NO_LEADER, isr, self.target_leader_recovery_state

    def build(self) -> PartitionChangeRecord | None:
        """The record that takes the partition to its target, or None when it is already there."""
        part = self.partition
        self._maybe_complete_reassignment()
        leader, isr, recovery = self._elect()
        replicas, adding, removing = self.target_replicas, self.target_adding, self.target_removing
        if (leader == part.leader and isr == part.isr and recovery == part.leader_recovery_state
                and replicas == part.replicas and adding == part.adding_replicas
                and removing == part.removing_replicas):
            return None
        return PartitionChangeRecord(
            partition_id=self.partition_id,
            topic_id=self.topic_id,
            isr=None if isr == part.isr else isr,
            leader=leader if leader != part.leader else NO_LEADER_CHANGE,
            replicas=None if replicas == part.replicas else replicas,
            removing_replicas=None if removing == part.removing_replicas else removing,
            adding_replicas=None if adding == part.adding_replicas else adding,
            leader_recovery_state=(
                int(recovery) if recovery != part.leader_recovery_state else NO_LEADER_RECOVERY_STATE_CHANGE
            ),
        )


def isr_without(isr: tuple[int, ...], removed: set[int] | frozenset[int], leader: int) -> tuple[int, ...]:
    """``isr`` minus ``removed``; when nobody would remain, the one member kept is the leader if it is
    in the ISR, else the first member (the ISR is never empty)."""
    remaining = tuple(r for r in isr if r not in removed)
    if remaining:
        return remaining
    return (leader,) if leader in isr else isr[:1]
