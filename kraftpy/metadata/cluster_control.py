"""Broker registration, heartbeats, sessions, fencing and controlled shutdown.

Theory of operation (KIP-631's broker lifecycle as the controller sees it)::

    register ──> FENCED ──(heartbeat with metadata offset >= registration offset)──> ACTIVE
                   ^  │                                                              │  │
                   │  └──(want_shut_down: should_shut_down at once)                  │  │
                   └──────────(session expired, or want_fence)───────────────────────┘  │
                                                                                        │ want_shut_down
    FENCED <──(nothing left to hand over: should_shut_down)── CONTROLLED_SHUTDOWN <─────┘

* A registration gets broker epoch = the offset its RegisterBrokerRecord will have (the caller passes
  the next offset of the metadata log), and starts fenced. A broker is caught up, and may be unfenced,
  once the metadata offset it reports reaches that offset: it has then seen its own registration.
* Sessions are in memory only (``BrokerHeartbeatManager``): the active controller notes when each broker
  was last heard from; a broker silent for broker.session.timeout.ms is fenced. Sessions are not in the
  log, so a newly active controller starts every registered broker's session afresh (``activate``).
* Fencing writes FenceBrokerRecord and the PartitionChangeRecords that take the broker out of ISRs and
  leaderships. Controlled shutdown writes BrokerRegistrationChangeRecord(in_controlled_shutdown) and moves
  leaderships away; each later heartbeat moves what has become movable, and the broker is told to shut
  down (and is fenced) in the first heartbeat that finds nothing left to move.
* A heartbeat lists the broker's offline replicas (their logs failed on it): each heartbeat takes the
  broker out of those partitions' ISR and leadership where it still is (``offline_replica_changes``),
  as Kafka's controller does with the replicas of a failed log directory.
* A second incarnation of a broker id is refused while the first one's session is alive
  (DUPLICATE_BROKER_REGISTRATION); the same incarnation registering again with the same details gets
  its existing epoch back and no record is written.
"""

from __future__ import annotations

from collections.abc import Iterable

from kraftpy.metadata import directory_control, replication_control
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.delta import replay_records
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import BrokerRegistration, MetadataImage
from kraftpy.metadata.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from kraftpy.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    InControlledShutdownChange,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraftpy.metadata.result import ControllerResult


class BrokerHeartbeatManager:
    """When each broker was last heard from, in the controller's clock (seconds). In memory only.

    Invariant: a broker id is here only while it is registered in the image the controller works on."""

    def __init__(self, session_timeout: float) -> None:
        self.session_timeout = session_timeout
        self._last_contact: dict[int, float] = {}

    def touch(self, broker_id: int, now: float) -> None:
        self._last_contact[broker_id] = now

    def remove(self, broker_id: int) -> None:
        self._last_contact.pop(broker_id, None)

    def has_valid_session(self, broker_id: int, now: float) -> bool:
        last = self._last_contact.get(broker_id)
        return last is not None and now < last + self.session_timeout

    def expired(self, now: float) -> list[int]:
        """Brokers whose session has run out, in id order: at ``next_expiry`` itself, computed the same
        way, so that a timer woken at that deadline finds the session expired (were it still valid at
        its own deadline, the timer would wake again at once, and spin until the clock moved on)."""
        return sorted(b for b, last in self._last_contact.items() if now >= last + self.session_timeout)

    def next_expiry(self) -> float | None:
        """The earliest time at which some session runs out, or None with no sessions."""
        if not self._last_contact:
            return None
        return min(self._last_contact.values()) + self.session_timeout


# -- registration ---------------------------------------------------------------------------------


def _same_details(reg: BrokerRegistration, request: BrokerRegistrationRequest) -> bool:
    return (
        reg.incarnation_id == request.incarnation_id
        and reg.listeners == tuple(request.listeners)
        and reg.features == tuple(request.features)
        and reg.rack == request.rack
        and reg.directories == tuple(request.log_dirs)
    )


def _registration_error(
    image: MetadataImage, request: BrokerRegistrationRequest, config: ControllerConfig, session_alive: bool
) -> tuple[Errors, str] | None:
    if request.cluster_id != config.cluster_id:
        return Errors.INCONSISTENT_CLUSTER_ID, (
            f"Expected cluster ID {config.cluster_id}, but got cluster ID {request.cluster_id}"
        )
    for name, level in image.features.levels.items():
        supported = next((f for f in request.features if f.name == name), None)
        if supported is None or not supported.min_supported_version <= level <= supported.max_supported_version:
            return Errors.UNSUPPORTED_VERSION, (
                f"Unable to register because the broker does not support finalized version {level} of {name}."
            )
    existing = image.cluster.broker(request.broker_id)
    if existing is not None and session_alive and existing.incarnation_id != request.incarnation_id:
        return Errors.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id."
    problem = directory_control.registration_directories_error(request)
    if problem is not None:
        return Errors.INVALID_REGISTRATION, problem
    return None


def register_broker(
    image: MetadataImage,
    request: BrokerRegistrationRequest,
    config: ControllerConfig,
    *,
    next_offset: int,
    session_alive: bool,
) -> ControllerResult[BrokerRegistrationResponse]:
    """Register a broker; its epoch is ``next_offset``, the offset the RegisterBrokerRecord will take.

    ``session_alive`` says whether the broker id's current registration still has a live session."""
    error = _registration_error(image, request, config, session_alive)
    if error is not None:
        return ControllerResult([], BrokerRegistrationResponse(error[0], -1, error[1]))
    existing = image.cluster.broker(request.broker_id)
    if existing is not None and _same_details(existing, request):
        return ControllerResult([], BrokerRegistrationResponse(Errors.NONE, existing.epoch))
    record = RegisterBrokerRecord(
        broker_id=request.broker_id,
        incarnation_id=request.incarnation_id,
        broker_epoch=next_offset,
        end_points=request.listeners,
        features=request.features,
        rack=request.rack,
        fenced=True,
        in_controlled_shutdown=False,
        log_dirs=request.log_dirs,
    )
    records: list[MetadataRecord] = [record]
    # The previous incarnation may still lead partitions or sit in ISRs; the new one starts fenced.
    records += replication_control.fence_brokers_changes(
        replay_records(image, records), frozenset({request.broker_id}), config
    )
    return ControllerResult(records, BrokerRegistrationResponse(Errors.NONE, next_offset))


def unregister_broker(
    image: MetadataImage, request: UnregisterBrokerRequest, config: ControllerConfig
) -> ControllerResult[UnregisterBrokerResponse]:
    """Forget a broker (decommissioning): UnregisterBrokerRecord, after taking it out of ISRs and leaderships.

    Only a fenced broker — stopped (a controlled shutdown ends fenced), or dead long enough for its
    session to run out — is unregistered. Kafka also unregisters a running broker, which then has its
    heartbeats refused with no way back and its partitions leaderless; here any client could do that to a
    healthy cluster with one request, so a running broker is refused (INVALID_REQUEST) instead."""
    reg = image.cluster.broker(request.broker_id)
    if reg is None:
        return ControllerResult([], UnregisterBrokerResponse(Errors.BROKER_ID_NOT_REGISTERED,
                                                             f"Broker ID {request.broker_id} is not registered."))
    if not reg.fenced:
        return ControllerResult([], UnregisterBrokerResponse(
            Errors.INVALID_REQUEST, f"Broker {reg.id} is running (unfenced): stop it first; a broker that died is "
            f"fenced once its session (broker.session.timeout.ms) runs out."))
    records: list[MetadataRecord] = []
    records += replication_control.fence_brokers_changes(image, frozenset({reg.id}), config)
    records.append(UnregisterBrokerRecord(reg.id, reg.epoch))
    return ControllerResult(records, UnregisterBrokerResponse(Errors.NONE))


# -- heartbeats -----------------------------------------------------------------------------------


def fence_brokers(
    image: MetadataImage, broker_ids: Iterable[int], config: ControllerConfig
) -> list[MetadataRecord]:
    """The partition changes that take the registered, unfenced ``broker_ids`` all out of ISRs and
    leaderships at once (decided on an image where they are fenced, so that none of them is elected on
    the way), then their FenceBrokerRecords. Last, as Kafka's ``handleBrokerFenced`` writes them: the
    changes may be written as several batches, and if only some commit the broker is still unfenced,
    so the next fencing of it finishes the work."""
    fenced = [image.cluster.brokers[b] for b in sorted(set(broker_ids))
              if b in image.cluster.brokers and not image.cluster.brokers[b].fenced]
    if not fenced:
        return []
    fences: list[MetadataRecord] = [FenceBrokerRecord(reg.id, reg.epoch) for reg in fenced]
    changes = replication_control.fence_brokers_changes(
        replay_records(image, fences), frozenset(reg.id for reg in fenced), config)
    return [*changes, *fences]


def process_heartbeat(
    image: MetadataImage, request: BrokerHeartbeatRequest, config: ControllerConfig
) -> ControllerResult[BrokerHeartbeatResponse]:
    """Answer a heartbeat and write the state transition it calls for (see the module docstring), then
    move leaderships and ISR places off the replicas the broker reports offline."""
    reg = image.cluster.broker(request.broker_id)
    if reg is None:
        return ControllerResult([], BrokerHeartbeatResponse(Errors.BROKER_ID_NOT_REGISTERED))
    if reg.epoch != request.broker_epoch:
        return ControllerResult([], BrokerHeartbeatResponse(Errors.STALE_BROKER_EPOCH))
    result = _state_transition(image, reg, request, config)
    if not request.offline_replicas and not request.offline_log_dirs:
        return result
    after = replay_records(image, result.records) if result.records else image
    # The replicas it names, and those recorded in a directory it reports offline (KIP-858).
    reported = [*request.offline_replicas,
                *directory_control.replicas_in_directories(after, reg.id, request.offline_log_dirs)]
    offline = replication_control.offline_replica_changes(after, reg.id, reported, config)
    return ControllerResult([*result.records, *offline], result.response, atomic=False)


def _state_transition(
    image: MetadataImage, reg: BrokerRegistration, request: BrokerHeartbeatRequest, config: ControllerConfig
) -> ControllerResult[BrokerHeartbeatResponse]:
    caught_up = request.current_metadata_offset >= reg.epoch
    records: list[MetadataRecord] = []

    def reply(fenced: bool, shut_down: bool = False) -> ControllerResult[BrokerHeartbeatResponse]:
        # Not atomic: a prefix of an unfencing's elections is finished by the next active controller's
        # elections (QuorumController.activate), of a controlled shutdown or a fencing by the next heartbeat.
        return ControllerResult(records, BrokerHeartbeatResponse(Errors.NONE, caught_up, fenced, shut_down),
                                atomic=False)

    if reg.fenced:
        if request.want_shut_down:
            return reply(fenced=True, shut_down=True)
        if request.want_fence or not caught_up:
            return reply(fenced=True)
        records.append(UnfenceBrokerRecord(reg.id, reg.epoch))
        records += replication_control.elect_leaderless_partitions(replay_records(image, records), config)
        return reply(fenced=False)

    if reg.in_controlled_shutdown:
        records += replication_control.controlled_shutdown_changes(image, reg.id, config)
        if records:
            return reply(fenced=False)
        records += fence_brokers(image, [reg.id], config)
        return reply(fenced=True, shut_down=True)

    if request.want_fence:
        records += fence_brokers(image, [reg.id], config)
        return reply(fenced=True)
    if request.want_shut_down:
        records.append(
            BrokerRegistrationChangeRecord(
                reg.id, reg.epoch, in_controlled_shutdown=InControlledShutdownChange.IN_CONTROLLED_SHUTDOWN
            )
        )
        records += replication_control.controlled_shutdown_changes(replay_records(image, records), reg.id, config)
        return reply(fenced=False)
    return reply(fenced=False)
