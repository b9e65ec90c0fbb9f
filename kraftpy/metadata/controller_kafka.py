"""Kafka-protocol requests on the controller listener: what ``kafka-metadata-quorum.sh --bootstrap-controller``
and admin clients with ``bootstrap.controllers`` (KIP-919) ask a controller.

The controller listener speaks kraftpy's control plane (msgpack frames, kraftpy.rpc.control). A connection
whose first frame is a Kafka request is handed here instead (`ControlServer`'s ``kafka`` hook): a Kafka
request starts with its api key as a big-endian int16, so its first byte is 0, while a control-plane frame
starts with a msgpack map (0x80-0x8f, 0xde or 0xdf). Over TLS the choice is made after the handshake, so the
listener's certificates and ``ssl.client.auth`` hold for both.

Served, one request at a time and answered in order, as Kafka's socket server does:

- **ApiVersions** v0-3: the APIs below (only those: nothing is advertised and then refused), the features
  this controller supports and the finalized levels of its metadata image. An unknown version is answered
  v0 with UNSUPPORTED_VERSION and the table (KIP-511).
- **DescribeQuorum** v0-2: answered by the quorum's Raft leader from its own state
  (kraftpy.metadata.quorum_describe); another voter answers NOT_LEADER_OR_FOLLOWER on the partition, as
  Kafka's KafkaRaftClient does. Admin clients send it to the active controller, which DescribeCluster names.
- **DescribeCluster** v0-1 with EndpointType 2 (controllers): the cluster id, the quorum's leader as
  ``controller_id``, and each voter with its controller-listener endpoint. EndpointType 1 (brokers, v0's
  only kind) is answered MISMATCHED_ENDPOINT_TYPE, another type UNSUPPORTED_ENDPOINT_TYPE, as Kafka does.
- **DescribeConfigs** v1-4: topics, brokers (a broker id, or ``""`` for the cluster defaults) and groups,
  from this controller's metadata image with its own properties file as the static layer, as
  ``kafka-configs.sh --bootstrap-controller --describe`` asks any controller.
- **IncrementalAlterConfigs** v0-1 and **UpdateFeatures** v0-2: written by the active controller and
  answered once committed; another controller answers NOT_CONTROLLER (per resource, or for the whole
  UpdateFeatures), and the admin client asks the one DescribeCluster names.
- **AddRaftVoter** v0 and **RemoveRaftVoter** v0 (``kafka-metadata-quorum.sh add-controller`` and
  ``remove-controller``, KIP-853): a dynamic quorum's voters changed by the quorum's leader, answered once
  the change is committed (kraftpy.metadata.quorum_membership, as `kraftpy quorum` asks it); another
  controller answers NOT_LEADER_OR_FOLLOWER, and a request of another cluster INCONSISTENT_CLUSTER_ID.
- **SaslHandshake** v1 and **SaslAuthenticate** v0-2 on a SASL_PLAINTEXT or SASL_SSL controller listener:
  the listener's mechanisms (PLAIN against its JAAS users, SCRAM against the metadata image or, before the
  controller has replayed any of it, its bootstrap checkpoint). Until the client has authenticated only
  ApiVersions, SaslHandshake and SaslAuthenticate are served; anything else closes the connection. A failed
  exchange is answered SASL_AUTHENTICATION_FAILED after ``connection.failed.authentication.delay.ms``, then
  the connection is closed with one log line (peer, mechanism, claimed principal; never a secret).

Authorization, with an authorizer configured: DescribeQuorum needs DESCRIBE on the cluster and
DescribeCluster ALTER on the cluster (Kafka's rule on controllers: a controller's endpoints are not for
everyone), UpdateFeatures, AddRaftVoter and RemoveRaftVoter ALTER on the cluster; DescribeConfigs and IncrementalAlterConfigs need
DESCRIBE_CONFIGS and ALTER_CONFIGS on the topic, the group, or the cluster for a broker; all are granted to
super users. The principal is the SASL user, or the TLS client certificate's
subject, or ``User:ANONYMOUS``. A refusal is CLUSTER_AUTHORIZATION_FAILED.

A request for any other API, or one that does not parse, closes that connection and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from kraftpy.logs import get_logger
from kraftpy.metadata import config_control
from kraftpy.metadata import messages as m
from kraftpy.metadata import quorum_membership as membership
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES
from kraftpy.metadata.feature_control import feature_upgrade_type
from kraftpy.metadata.quorum_describe import (
    describe_quorum_response,
    names_the_metadata_partition,
    partition_errors,
    unknown_partitions,
)
from kraftpy.metadata.rpc import NOT_CONTROLLER
from kraftpy.protocol.api_keys import ApiKey, VersionRange
from kraftpy.protocol.errors import ErrorCode, InvalidRequestError, UnsupportedVersionError
from kraftpy.protocol.frames import encode_response, join_frame, parse_request
from kraftpy.protocol.messages import (
    AddRaftVoterResponse,
    ApiVersionsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeQuorumResponse,
    IncrementalAlterConfigsResponse,
    RemoveRaftVoterResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
    UpdateFeaturesResponse,
)
from kraftpy.protocol.messages.api_versions import supported_feature_keys
from kraftpy.rpc.control import RpcError
from kraftpy.rpc.framing import FramedStream
from kraftpy.security.authorizer import AclIndex, AclOperation, AuthorizationResult, ResourceType
from kraftpy.security.controller_sasl import ControlSasl
from kraftpy.security.listener_sasl import mechanism_server
from kraftpy.security.sasl import Authenticated, Challenge

if TYPE_CHECKING:
    from kraftpy.metadata.controller_server import ControllerServer

CLUSTER_NAME = "kafka-cluster"
#: DescribeConfigs resources described between two checkpoints.
RESOURCES_PER_TURN = 50
#: DescribeCluster's EndpointType values (KIP-919).
BROKERS, CONTROLLERS = 1, 2
#: What a controller serves on its listener in the Kafka protocol.
SERVED: dict[ApiKey, VersionRange] = {
    ApiKey.API_VERSIONS: VersionRange(0, 4),
    ApiKey.DESCRIBE_QUORUM: VersionRange(0, 2),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 1),
    ApiKey.DESCRIBE_CONFIGS: VersionRange(1, 4),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    ApiKey.UPDATE_FEATURES: VersionRange(0, 2),
    ApiKey.ADD_RAFT_VOTER: VersionRange(0, 0),
    ApiKey.REMOVE_RAFT_VOTER: VersionRange(0, 0),
}
SASL_SERVED: dict[ApiKey, VersionRange] = {
    ApiKey.SASL_HANDSHAKE: VersionRange(1, 1),
    ApiKey.SASL_AUTHENTICATE: VersionRange(0, 2),
}
#: Served before a SASL client has authenticated.
BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: The cluster operations authorized_operations reports on (Kafka's AclEntry.supportedOperations).
CLUSTER_OPERATIONS = (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                      AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                      AclOperation.DESCRIBE)
#: A config resource type -> the ACL resource its configs are authorized on (a broker's: the cluster's).
CONFIG_ACL_RESOURCES = {2: ResourceType.TOPIC, 4: ResourceType.CLUSTER, 8: ResourceType.CLUSTER,
                        32: ResourceType.GROUP}
CONFIG_DENIED = {ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                 ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED}


class _Close(Exception):
    """This connection is to be closed (after ``answer``, when given), with ``reason`` logged."""

    def __init__(self, why: str, answer: list | None = None, **fields: Any) -> None:
        super().__init__(why)
        self.answer = answer
        self.fields = fields


class _Session:
    def __init__(self, principal: str, authenticated: bool) -> None:
        self.principal = principal
        self.authenticated = authenticated
        self.mechanism: str | None = None
        self.server: Any = None


class ControllerKafkaApis:
    """The Kafka-protocol side of one controller's listener."""

    def __init__(self, controller: ControllerServer, *, listener_name: str, sasl: ControlSasl | None = None,
                 acls: Callable[[], AclIndex | None] = lambda: None) -> None:
        self.controller = controller
        self.listener_name = listener_name
        self.sasl = sasl
        #: The controller's ACL index (None: no authorizer); a callable, as the index follows the image.
        self.acls = acls
        self.versions = dict(SERVED) | (dict(SASL_SERVED) if sasl is not None else {})
        self.log = get_logger("controller-kafka", node_id=controller.node_id)

    async def serve(self, framed: FramedStream, peer: str, principal: str) -> None:
        """Answer the connection's requests in order until the peer closes it or a request closes it."""
        session = _Session(principal, authenticated=self.sasl is None)
        while True:
            payload = await framed.receive_frame()
            if payload is None:
                return
            authenticated = session.authenticated
            try:
                answer = await self._answer(payload, session, peer)
                if session.authenticated and not authenticated:
                    framed.restore_max_frame_bytes()  # sasl.server.max.receive.size no longer applies
            except _Close as close:
                if close.answer is not None:
                    await _send(framed, close.answer)
                self.log.warning("closing connection", why=str(close), peer=peer, **close.fields)
                return
            except Exception:  # a bug here closes this connection, never the listener
                self.log.exception("request handler failed", peer=peer)
                return
            finally:
                framed.release(payload)
            await _send(framed, answer)

    async def _answer(self, payload: memoryview, session: _Session, peer: str) -> list:
        try:
            header, request = parse_request(payload, self.versions, allow_trailing_bytes=True)
        except UnsupportedVersionError as exc:
            if exc.api_key == ApiKey.API_VERSIONS and exc.correlation_id is not None:
                response = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self._api_keys())
                return encode_response(exc.correlation_id, ApiKey.API_VERSIONS, 0, response)
            raise _Close(str(exc)) from None
        except InvalidRequestError as exc:
            raise _Close(f"not a request this controller listener serves: {exc}") from None
        api_key = ApiKey(header.request_api_key)
        if not session.authenticated and api_key not in BEFORE_AUTHENTICATION:
            raise _Close("SASL authentication required", api=api_key.name)
        if api_key == ApiKey.API_VERSIONS:
            response: Any = self._api_versions(header.request_api_version)
        elif api_key == ApiKey.SASL_HANDSHAKE:
            response = self._sasl_handshake(request, session, header)
        elif api_key == ApiKey.SASL_AUTHENTICATE:
            response = await self._sasl_authenticate(request, session, header, peer)
        elif api_key == ApiKey.DESCRIBE_QUORUM:
            response = await self._describe_quorum(request, session, peer)
        elif api_key == ApiKey.DESCRIBE_CONFIGS:
            response = await self._describe_configs(request, session, peer)
        elif api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
            response = await self._incremental_alter_configs(request, session, peer)
        elif api_key == ApiKey.UPDATE_FEATURES:
            response = await self._update_features(request, header.request_api_version, session, peer)
        elif api_key in (ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER):
            response = await self._change_voters(api_key, request, session, peer)
        else:
            response = self._describe_cluster(request, header.request_api_version, session, peer)
        return encode_response(header.correlation_id, api_key, header.request_api_version, response)

    # -- ApiVersions ----------------------------------------------------------------------------------

    def _api_keys(self) -> list:
        return [ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=r.min_version, max_version=r.max_version)
                for k, r in sorted(self.versions.items())]

    def _api_versions(self, version: int) -> ApiVersionsResponse:
        response = ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=self._api_keys())
        response.supported_features = supported_feature_keys(DEFAULT_SUPPORTED_FEATURES, version)
        image = self.controller.loader.image
        levels = image.finalized_features
        if levels:
            response.finalized_features_epoch = max(image.provenance.last_offset, 0)
            response.finalized_features = [
                ApiVersionsResponse.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
                for name, level in sorted(levels.items())]
        return response

    # -- SASL -----------------------------------------------------------------------------------------

    def _sasl_handshake(self, request: Any, session: _Session, header: Any) -> SaslHandshakeResponse:
        sasl = self.sasl
        assert sasl is not None
        enabled = list(sasl.mechanisms)
        if session.authenticated or session.server is not None:
            return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=enabled)
        if request.mechanism not in sasl.mechanisms:
            answer = encode_response(header.correlation_id, ApiKey.SASL_HANDSHAKE, header.request_api_version,
                                     SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                                           mechanisms=enabled))
            raise _Close("SASL mechanism not enabled", answer, mechanism=str(request.mechanism)[:64],
                         enabled=enabled)
        session.mechanism = request.mechanism
        session.server = mechanism_server(request.mechanism, sasl.plain_users, sasl.lookup_scram)
        return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled)

    async def _sasl_authenticate(self, request: Any, session: _Session, header: Any,
                                 peer: str) -> SaslAuthenticateResponse:
        sasl = self.sasl
        assert sasl is not None
        if session.server is None or session.authenticated:
            answer = encode_response(header.correlation_id, ApiKey.SASL_AUTHENTICATE, header.request_api_version,
                                     SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                                              error_message="SaslAuthenticate before SaslHandshake",
                                                              auth_bytes=b""))
            raise _Close("SaslAuthenticate out of turn", answer)
        outcome = session.server.respond(bytes(request.auth_bytes))
        if isinstance(outcome, Challenge):
            return SaslAuthenticateResponse(error_code=ErrorCode.NONE, auth_bytes=outcome.data, session_lifetime_ms=0)
        if isinstance(outcome, Authenticated):
            session.principal = f"User:{outcome.username}"
            session.authenticated = True
            self.log.debug("SASL authenticated", peer=peer, mechanism=session.mechanism, principal=session.principal)
            return SaslAuthenticateResponse(error_code=ErrorCode.NONE, auth_bytes=outcome.data, session_lifetime_ms=0)
        await trio.sleep(sasl.failed_authentication_delay_ms / 1000)
        answer = encode_response(header.correlation_id, ApiKey.SASL_AUTHENTICATE, header.request_api_version,
                                 SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                          error_message=outcome.message, auth_bytes=b""))
        claimed = getattr(session.server, "username", None)
        raise _Close("SASL authentication failed", answer, mechanism=session.mechanism,
                     principal=f"User:{claimed}" if claimed else None, reason=outcome.reason)

    # -- authorization --------------------------------------------------------------------------------

    def _allowed(self, session: _Session, peer: str, operation: AclOperation,
                 resource_type: ResourceType = ResourceType.CLUSTER, name: str = CLUSTER_NAME) -> bool:
        acls = self.acls()
        if acls is None:
            return True
        decision = acls.decide(session.principal, peer.rpartition(":")[0], operation, resource_type, name)
        if decision.result is AuthorizationResult.ALLOWED:
            return True
        self.log.info("request denied", principal=session.principal, peer=peer, operation=operation.name,
                      resource=f"{resource_type.name}:{name}", rule=str(decision))
        return False

    def _config_denied(self, session: _Session, peer: str, operation: AclOperation, resource_type: int,
                       resource_name: str) -> ErrorCode | None:
        """The error refusing ``operation`` on a config resource's configs, or None when allowed (an unknown
        resource type is left to the answer it gets anyway)."""
        acl_type = CONFIG_ACL_RESOURCES.get(resource_type)
        if acl_type is None:
            return None
        name = CLUSTER_NAME if acl_type is ResourceType.CLUSTER else resource_name
        return None if self._allowed(session, peer, operation, acl_type, name) else CONFIG_DENIED[acl_type]

    def _cluster_operations(self, session: _Session, peer: str) -> int:
        acls = self.acls()
        field = 0
        for op in CLUSTER_OPERATIONS:
            if acls is None or acls.decide(session.principal, peer.rpartition(":")[0], op, ResourceType.CLUSTER,
                                           CLUSTER_NAME).result is AuthorizationResult.ALLOWED:
                field |= 1 << int(op)
        return field

    # -- the quorum and the controllers ---------------------------------------------------------------

    async def _describe_quorum(self, request: Any, session: _Session, peer: str) -> DescribeQuorumResponse:
        if not self._allowed(session, peer, AclOperation.DESCRIBE):
            return DescribeQuorumResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                          error_message="Cluster authorization failed.")
        if not names_the_metadata_partition(request):
            return unknown_partitions(request)
        try:
            status = await self.controller.quorum_status()
        except RpcError as exc:
            leader = f" (the leader is {exc.message})" if exc.message else ""
            return partition_errors(request, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                    f"controller {self.controller.node_id} does not lead the quorum{leader}")
        return describe_quorum_response(status, self.controller.raft.voters, self.listener_name)

    def _describe_cluster(self, request: Any, version: int, session: _Session, peer: str) -> DescribeClusterResponse:
        asked = request.endpoint_type if version >= 1 else BROKERS
        response = DescribeClusterResponse(error_code=ErrorCode.NONE, endpoint_type=CONTROLLERS,
                                           cluster_id=self.controller.cluster_id)
        if asked == BROKERS:
            response.error_code = ErrorCode.MISMATCHED_ENDPOINT_TYPE
            response.error_message = "The request was sent to an endpoint of type CONTROLLER, but we wanted " \
                                     "an endpoint of type BROKER"
            return response
        if asked != CONTROLLERS:
            response.error_code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            response.error_message = f"Unsupported endpoint type {asked}"
            return response
        if not self._allowed(session, peer, AclOperation.ALTER):
            response.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            response.error_message = "Cluster authorization failed."
            return response
        leader = self.controller.loader.leader_id
        response.controller_id = leader if leader is not None else -1
        response.brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=node_id, host=host, port=port)
                            for node_id, (host, port) in sorted(_voters(self.controller).items())]
        if request.include_cluster_authorized_operations:
            response.cluster_authorized_operations = self._cluster_operations(session, peer)
        return response


    # -- configs and features ---------------------------------------------------------------------------

    async def _describe_configs(self, request: Any, session: _Session, peer: str) -> DescribeConfigsResponse:
        Result = DescribeConfigsResponse.DescribeConfigsResult
        Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
        image = self.controller.loader.image
        results = []
        for i, r in enumerate(request.resources):
            if i and not i % RESOURCES_PER_TURN:
                await trio.lowlevel.checkpoint()
            denied = self._config_denied(session, peer, AclOperation.DESCRIBE_CONFIGS, r.resource_type,
                                         r.resource_name)
            if denied is not None:
                results.append(Result(error_code=denied, error_message="Authorization failed.",
                                      resource_type=r.resource_type, resource_name=r.resource_name, configs=[]))
                continue
            keys = r.configuration_keys
            resource = m.DescribeConfigsResource(r.resource_type, r.resource_name,
                                                 None if keys is None else tuple(dict.fromkeys(keys)))
            [answer] = config_control.describe_configs(image, m.DescribeConfigsRequest((resource,)),
                                                       self.controller.controller_config).results
            results.append(Result(
                error_code=answer.error_code, error_message=answer.error_message,
                resource_type=answer.resource_type, resource_name=answer.resource_name,
                configs=[Entry(name=c.name, value=c.value, read_only=c.read_only, config_source=int(c.config_source),
                               is_sensitive=c.is_sensitive) for c in answer.configs]))
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    async def _incremental_alter_configs(self, request: Any, session: _Session,
                                         peer: str) -> IncrementalAlterConfigsResponse:
        Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
        denied = {i: error for i, r in enumerate(request.resources)
                  if (error := self._config_denied(session, peer, AclOperation.ALTER_CONFIGS, r.resource_type,
                                                   r.resource_name)) is not None}
        kept = [r for i, r in enumerate(request.resources) if i not in denied]
        answers: Any = iter(())
        refusal: tuple[ErrorCode, str] | None = None
        if kept:
            mreq = m.IncrementalAlterConfigsRequest(tuple(
                m.AlterConfigsResource(r.resource_type, r.resource_name,
                                       tuple(m.AlterableConfig(c.name, c.config_operation, c.value) for c in r.configs))
                for r in kept), validate_only=request.validate_only)
            try:
                answers = iter((await self.controller.serve_request("IncrementalAlterConfigs", mreq)).responses)
            except RpcError as exc:
                refusal = _refusal(exc, self.controller)
        responses = []
        for i, r in enumerate(request.resources):
            if i in denied:
                responses.append(Result(error_code=denied[i], error_message="Authorization failed.",
                                        resource_type=r.resource_type, resource_name=r.resource_name))
            elif refusal is not None:
                responses.append(Result(error_code=refusal[0], error_message=refusal[1],
                                        resource_type=r.resource_type, resource_name=r.resource_name))
            else:
                a = next(answers)
                responses.append(Result(error_code=a.error_code, error_message=a.error_message,
                                        resource_type=a.resource_type, resource_name=a.resource_name))
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)

    async def _update_features(self, request: Any, version: int, session: _Session,
                               peer: str) -> UpdateFeaturesResponse:
        def whole(error: ErrorCode, message: str) -> UpdateFeaturesResponse:
            return UpdateFeaturesResponse(throttle_time_ms=0, error_code=error, error_message=message)

        if not self._allowed(session, peer, AclOperation.ALTER):
            return whole(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        updates = []
        for u in request.feature_updates:
            kind = feature_upgrade_type(u, version)
            if kind is None:
                return whole(ErrorCode.INVALID_REQUEST, f"{u.feature}: unknown upgrade type {u.upgrade_type}")
            updates.append(m.FeatureUpdateKey(u.feature, u.max_version_level, kind))
        if not updates:
            return whole(ErrorCode.INVALID_REQUEST, "No feature updates were given.")
        validate_only = version >= 1 and request.validate_only
        try:
            answer = await self.controller.serve_request("UpdateFeatures",
                                                         m.UpdateFeaturesRequest(tuple(updates), validate_only))
        except RpcError as exc:
            return whole(*_refusal(exc, self.controller))
        Result = UpdateFeaturesResponse.UpdatableFeatureResult
        return UpdateFeaturesResponse(
            throttle_time_ms=0, error_code=answer.error_code, error_message=answer.error_message,
            results=[Result(feature=r.feature, error_code=r.error_code, error_message=r.error_message)
                     for r in answer.results])


    async def _change_voters(self, api_key: ApiKey, request: Any, session: _Session, peer: str) -> Any:
        """AddRaftVoter / RemoveRaftVoter, as the control plane's requests of `kraftpy quorum`."""
        adding = api_key == ApiKey.ADD_RAFT_VOTER
        Response = AddRaftVoterResponse if adding else RemoveRaftVoterResponse

        def answer(error: ErrorCode, message: str | None = None) -> Any:
            return Response(throttle_time_ms=0, error_code=error, error_message=message)

        if not self._allowed(session, peer, AclOperation.ALTER):
            return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        if request.cluster_id is not None and request.cluster_id != self.controller.cluster_id:
            return answer(ErrorCode.INCONSISTENT_CLUSTER_ID, f"this is cluster {self.controller.cluster_id}")
        api, body = membership.from_kafka_request(request, adding)
        try:
            await self.controller.serve_membership(api, body)
        except RpcError as exc:
            if exc.code == "NOT_LEADER_OR_FOLLOWER":
                return answer(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"controller {self.controller.node_id} does not lead "
                              f"the quorum" + (f" (the leader is {exc.message})" if exc.message else ""))
            return answer(*_refusal(exc, self.controller))
        return answer(ErrorCode.NONE)


def _refusal(exc: RpcError, controller: ControllerServer) -> tuple[ErrorCode, str]:
    """A control-plane refusal as a Kafka error: NOT_CONTROLLER naming the active controller when known."""
    if exc.code == NOT_CONTROLLER:
        leader = controller.loader.leader_id
        where = f": the active controller is {leader}" if leader is not None and leader != controller.node_id else ""
        return ErrorCode.NOT_CONTROLLER, f"controller {controller.node_id} is not the active controller{where}"
    try:
        return ErrorCode[exc.code], exc.message or exc.code
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"{exc.code}: {exc.message}"


def _voters(controller: ControllerServer) -> Mapping[int, tuple[str, int]]:
    return controller.raft.voters


async def _send(framed: FramedStream, parts: list) -> None:
    frame = join_frame(parts)
    try:
        await framed.stream.send_all(frame)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
