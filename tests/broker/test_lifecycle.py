"""BrokerLifecycle on the virtual clock, against a scripted controller: a refused registration (the
previous incarnation's session still alive after kill -9) is sent again soon enough that the broker
registers as soon as the controller accepts it; heartbeats carry the offline replicas, and a replica
going offline sends one at once."""

from __future__ import annotations

from pathlib import Path

import trio

from kraftpy.broker.lifecycle import REGISTRATION_RETRY_S, BrokerLifecycle
from kraftpy.cli.dev import dev_properties
from kraftpy.config import load_config
from kraftpy.config.properties import format_properties
from kraftpy.ids import Uuid
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    OfflineReplicaTopic,
)

SESSION_ENDS = 9.0
HEARTBEAT_S = 2.0
TOPIC = Uuid(bytes(range(16)))


class ScriptedController:
    """Refuses registrations until ``accept_at`` (virtual time), then accepts; answers heartbeats."""

    def __init__(self, accept_at: float) -> None:
        self.accept_at = accept_at
        self.registrations: list[float] = []
        self.heartbeats: list[tuple[float, BrokerHeartbeatRequest]] = []
        self.heartbeat_arrived = trio.Event()

    async def call(self, request, timeout: float = 30.0):
        now = trio.current_time()
        if isinstance(request, BrokerRegistrationRequest):
            self.registrations.append(now)
            if now < self.accept_at:
                return BrokerRegistrationResponse(Errors.DUPLICATE_BROKER_REGISTRATION, -1,
                                                  "Another broker is registered with that broker id.")
            return BrokerRegistrationResponse(Errors.NONE, 5)
        assert isinstance(request, BrokerHeartbeatRequest)
        self.heartbeats.append((now, request))
        self.heartbeat_arrived.set()
        self.heartbeat_arrived = trio.Event()
        return BrokerHeartbeatResponse(Errors.NONE, is_caught_up=False, is_fenced=True)


class StandInServer:
    """What the lifecycle uses of a BrokerServer."""

    port = 9092

    def __init__(self) -> None:
        self.epoch: int | None = None
        self.offline: tuple[OfflineReplicaTopic, ...] = ()
        self.on_offline_replicas = None
        #: This broker's registration in the published image.
        self.registration = None
        self.running = False

    def registered(self, broker_epoch: int) -> None:
        self.epoch = broker_epoch

    def set_running(self, running: bool) -> None:
        self.running = running

    def published_registration(self):
        return self.registration

    def offline_replicas(self) -> tuple[OfflineReplicaTopic, ...]:
        return self.offline

    def offline_log_dirs(self) -> tuple:
        return ()

    def log_dir_ids(self) -> tuple:
        return ()


def lifecycle(tmp_path: Path, controller: ScriptedController, server: StandInServer) -> BrokerLifecycle:
    properties = dev_properties(tmp_path, 9092, 9093) | {"broker.heartbeat.interval.ms": str(int(HEARTBEAT_S * 1000))}
    config = load_config(text=format_properties(properties))
    return BrokerLifecycle(config, "cluster", server, controller, metadata_offset=lambda: 0)  # type: ignore[arg-type]


async def test_a_refused_registration_is_retried_soon_enough_to_register_when_the_old_session_ends(
        tmp_path, autojump_clock):
    controller = ScriptedController(accept_at=SESSION_ENDS)
    server = StandInServer()
    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle(tmp_path, controller, server).run)
        registered_at = trio.current_time()
        nursery.cancel_scope.cancel()
    assert server.epoch == 5
    # Asked again every REGISTRATION_RETRY_S, not every heartbeat interval: registered right after
    # the controller started accepting.
    assert SESSION_ENDS <= registered_at <= SESSION_ENDS + REGISTRATION_RETRY_S + 0.01
    assert REGISTRATION_RETRY_S < HEARTBEAT_S


async def test_heartbeats_carry_the_offline_replicas_and_a_new_one_is_reported_at_once(tmp_path, autojump_clock):
    controller = ScriptedController(accept_at=0.0)
    server = StandInServer()
    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle(tmp_path, controller, server).run)
        await controller.heartbeat_arrived.wait()
        first_at, first = controller.heartbeats[-1]
        assert first.offline_replicas == ()

        await trio.sleep(HEARTBEAT_S / 4)
        server.offline = (OfflineReplicaTopic(TOPIC, (3,)),)
        went_offline_at = trio.current_time()
        server.on_offline_replicas()
        await controller.heartbeat_arrived.wait()
        at, request = controller.heartbeats[-1]
        assert at == went_offline_at < first_at + HEARTBEAT_S  # not at the next period
        assert request.offline_replicas == (OfflineReplicaTopic(TOPIC, (3,)),)

        await controller.heartbeat_arrived.wait()  # and in every heartbeat after
        assert controller.heartbeats[-1][1].offline_replicas == (OfflineReplicaTopic(TOPIC, (3,)),)
        nursery.cancel_scope.cancel()


async def test_a_broker_runs_as_soon_as_the_published_image_shows_its_registration_unfenced(
        tmp_path, autojump_clock):
    """The controller answers the heartbeat that unfenced a broker only once everything written with it
    (the elections of all its partitions) is committed and replayed; the broker does not wait for that
    answer when its own metadata already shows this incarnation unfenced. An unfenced registration of
    another epoch (the previous incarnation's), or one in controlled shutdown, does not count."""
    from kraftpy.metadata.image import BrokerRegistration

    controller = ScriptedController(accept_at=0.0)  # answers every heartbeat: fenced
    server = StandInServer()
    life = lifecycle(tmp_path, controller, server)

    def registration(epoch: int, *, fenced: bool = False, shutting_down: bool = False) -> BrokerRegistration:
        return BrokerRegistration(id=life.node_id, epoch=epoch, incarnation_id=life.incarnation_id, listeners=(),
                                  features=(), rack=None, fenced=fenced, in_controlled_shutdown=shutting_down)

    async with trio.open_nursery() as nursery:
        await nursery.start(life.run)
        await controller.heartbeat_arrived.wait()
        assert life.state.value == "fenced"
        for stale in (registration(4), registration(5, fenced=True), registration(5, shutting_down=True)):
            server.registration = stale
            life.metadata_advanced()
            assert life.state.value == "fenced" and not life.unfenced.is_set()
        server.registration = registration(5)
        life.metadata_advanced()
        assert life.state.value == "running" and life.unfenced.is_set() and server.running
        nursery.cancel_scope.cancel()
