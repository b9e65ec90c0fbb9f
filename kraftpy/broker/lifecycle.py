"""The broker's life as the controller sees it: Offline → Fenced → Running → Stopping.

Theory of operation (KIP-631). A starting broker registers with the active controller, naming a
fresh incarnation id, its advertised listeners, rack and supported features; the controller
answers with a broker epoch (the offset of the registration record). The broker is *fenced* until
it has replayed the metadata log up to that offset; its heartbeats report how far it got, and the
controller unfences it once it is caught up (`BrokerServer.set_running(True)`). Heartbeats every
broker.heartbeat.interval.ms keep its session; a broker the controller fenced (a session that ran
out) steps back to fenced. A stale epoch (the controller lost the registration) registers again.

Controlled shutdown: `shut_down` sets want_shut_down in the heartbeats; the controller moves the
broker's leaderships away and answers should_shut_down once nothing is left to move.

Every heartbeat lists the broker's offline replicas (logs that failed here; `ReplicaManager`), and
a replica going offline sends one at once: the controller moves their leaderships and ISR places
to other replicas.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping

import trio

from kraftpy.broker.server import BrokerServer
from kraftpy.config import KraftConfig
from kraftpy.ids import Uuid, random_uuid
from kraftpy.logs import get_logger
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature
from kraftpy.metadata.rpc import ControllerClient, ControllerUnavailable
from kraftpy.metrics import BROKER_RUNNING

#: How soon a refused registration is sent again (at most broker.heartbeat.interval.ms): a refusal
#: costs the controller a lookup, no write.
REGISTRATION_RETRY_S = 0.1


class BrokerState(enum.Enum):
    OFFLINE = "offline"
    FENCED = "fenced"
    RUNNING = "running"
    STOPPING = "stopping"


#: Kafka's SecurityProtocol ids, as a registration carries them.
_PROTOCOL_CODES = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def advertised_endpoints(config: KraftConfig, bound_port: int | Mapping[str, int] | None
                         ) -> tuple[BrokerEndpoint, ...]:
    """The endpoints clients are told: advertised.listeners, else the listeners, with a bound port
    (the listener's, when ``bound_port`` maps names to ports) standing in for port 0 and 127.0.0.1 for
    an empty (all interfaces) host."""
    out = []
    for listener in config.advertised_listeners:
        bound = bound_port.get(listener.name) if isinstance(bound_port, Mapping) else bound_port
        port = listener.port or (bound or 0)
        host = listener.host or "127.0.0.1"
        protocol = _PROTOCOL_CODES.get(config.security_protocol(listener.name), 0)
        out.append(BrokerEndpoint(listener.name, host, port, protocol))
    return tuple(out)


class BrokerLifecycle:
    def __init__(self, config: KraftConfig, cluster_id: str, server: BrokerServer, controller: ControllerClient,
                 metadata_offset: Callable[[], int]) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.server = server
        self.controller = controller
        self.metadata_offset = metadata_offset
        self.node_id = config.node_id
        self.incarnation_id = Uuid(random_uuid())
        self.state = BrokerState.OFFLINE
        self.broker_epoch = -1
        self.heartbeat_interval = config["broker.heartbeat.interval.ms"] / 1000
        self.log = get_logger("lifecycle", node_id=self.node_id, role="broker")
        self._want_shut_down = False
        self._poke = trio.Event()
        self._may_shut_down = trio.Event()
        self.unfenced = trio.Event()
        server.on_offline_replicas = self.heartbeat_soon

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self._register()
        task_status.started()
        while True:
            sent = trio.current_time()
            await self._heartbeat()
            # The period runs from one heartbeat's start to the next: a slow answer (a controller busy
            # with a large request) does not stretch the gap the controller's session timeout sees.
            with trio.move_on_at(sent + self.heartbeat_interval):
                await self._poke.wait()
            self._poke = trio.Event()

    async def _register(self) -> None:
        features = tuple(BrokerFeature(name, low, high) for name, (low, high) in DEFAULT_SUPPORTED_FEATURES.items())
        request = BrokerRegistrationRequest(
            self.node_id, self.cluster_id, self.incarnation_id,
            listeners=advertised_endpoints(self.config, getattr(self.server, "ports", None) or self.server.port),
            features=features, rack=self.config["broker.rack"], log_dirs=self.server.log_dir_ids())
        refusals = 0
        while True:
            try:
                response = await self.controller.call(request)
            except ControllerUnavailable as exc:
                self.log.warning("registration failed, retrying", reason=str(exc))
                continue
            if response.error_code == Errors.NONE:
                self.broker_epoch = response.broker_epoch
                self.server.registered(self.broker_epoch)
                self._set_state(BrokerState.FENCED)
                self.log.info("registered", broker_epoch=self.broker_epoch,
                              incarnation_id=str(self.incarnation_id))
                return
            # e.g. DUPLICATE_BROKER_REGISTRATION while the previous incarnation's session lasts (after
            # kill -9): asked again often, the controller accepts it as soon as that session is fenced.
            log = self.log.warning if not refusals else self.log.debug
            log("registration refused, retrying", error=Errors(response.error_code).name,
                message=response.error_message)
            refusals += 1
            await trio.sleep(min(self.heartbeat_interval, REGISTRATION_RETRY_S))

    async def _heartbeat(self) -> None:
        request = BrokerHeartbeatRequest(self.node_id, self.broker_epoch, self.metadata_offset(),
                                         want_fence=False, want_shut_down=self._want_shut_down,
                                         offline_replicas=self.server.offline_replicas(),
                                         offline_log_dirs=self.server.offline_log_dirs())
        try:
            response = await self.controller.call(request, timeout=max(self.heartbeat_interval * 2, 2.0))
        except ControllerUnavailable as exc:
            self.log.warning("heartbeat failed", reason=str(exc))
            return
        if response.error_code == Errors.STALE_BROKER_EPOCH:
            self.log.warning("the controller does not know this registration, registering again")
            self._set_state(BrokerState.OFFLINE)
            await self._register()
            return
        if response.error_code != Errors.NONE:
            self.log.warning("heartbeat refused", error=Errors(response.error_code).name)
            return
        if response.should_shut_down:
            self._may_shut_down.set()
        if self.state is BrokerState.STOPPING:
            return
        if response.is_fenced:
            self._set_state(BrokerState.FENCED)
        else:
            self._set_state(BrokerState.RUNNING)

    def heartbeat_soon(self) -> None:
        """Send the next heartbeat now (something it reports changed)."""
        self._poke.set()

    def metadata_advanced(self) -> None:
        """New metadata was replayed: a fenced broker that just caught up heartbeats at once, and one
        whose own registration the handlers' image shows unfenced is running.

        The second is sooner than the heartbeat's answer: the controller answers the heartbeat that
        unfenced a broker once the elections written with it are committed and replayed, which for a
        broker of 30,000 partitions takes seconds, while the unfencing is the first of those records to
        commit. Kafka's broker waits for the answer."""
        if self.state is not BrokerState.FENCED or self.broker_epoch < 0:
            return
        registration = self.server.published_registration()
        if registration is not None and registration.epoch == self.broker_epoch and registration.is_active:
            self._set_state(BrokerState.RUNNING)
        elif self.metadata_offset() >= self.broker_epoch:
            self._poke.set()

    def _set_state(self, state: BrokerState) -> None:
        if state is self.state:
            return
        self.log.info("broker state changed", old=self.state.value, new=state.value)
        self.state = state
        self.server.set_running(state is BrokerState.RUNNING)
        BROKER_RUNNING.labels(self.node_id).set(1 if state is BrokerState.RUNNING else 0)
        if state is BrokerState.RUNNING:
            self.unfenced.set()

    async def shut_down(self, timeout: float = 30.0) -> bool:
        """Controlled shutdown: have the controller move this broker's leaderships away first.
        Returns whether the controller agreed before ``timeout``."""
        if self.state is BrokerState.OFFLINE:
            return True
        self.log.info("controlled shutdown requested")
        self._want_shut_down = True
        self._poke.set()
        with trio.move_on_after(timeout):
            await self._may_shut_down.wait()
            self._set_state(BrokerState.STOPPING)
            self.log.info("controlled shutdown complete")
            return True
        self.log.warning("controlled shutdown timed out; stopping anyway")
        return False
