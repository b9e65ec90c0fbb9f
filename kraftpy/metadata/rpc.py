"""The controller's control-plane API for brokers: names, the object codec, and the client.

Each request travels as ``{"request": <wire-encoded request>}`` under one of `CONTROLLER_APIS`
(Kafka's API names) and is answered with ``{"response": <wire-encoded response>}``. A controller
that is not active answers with the error ``NOT_CONTROLLER`` and, in the message, the id of the
active controller when it knows it; `ControllerClient` follows that hint, else tries the voters in
turn, so callers only ever see an answer or `ControllerUnavailable`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from kraftpy.ids import Uuid
from kraftpy.logs import get_logger
from kraftpy.metadata import messages, quota_control, records
from kraftpy.metadata.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from kraftpy.metadata.validation import request_problem
from kraftpy.protocol.errors import ErrorCode
from kraftpy.rpc.control import ControlClient, RpcError
from kraftpy.rpc.wire import WireCodec, WireError, wire_types
from kraftpy.rpc.wire_schema import WireSchema

WIRE = WireCodec([Uuid, ErrorCode, *wire_types(records), *wire_types(messages), *wire_types(quota_control)])
SCHEMA = WireSchema()

#: API name → (request type, response type).
CONTROLLER_APIS: dict[str, tuple[type, type]] = {
    "BrokerRegistration": (BrokerRegistrationRequest, BrokerRegistrationResponse),
    "BrokerHeartbeat": (BrokerHeartbeatRequest, BrokerHeartbeatResponse),
    "UnregisterBroker": (UnregisterBrokerRequest, UnregisterBrokerResponse),
    "AlterPartition": (AlterPartitionRequest, AlterPartitionResponse),
    "AssignReplicasToDirs": (AssignReplicasToDirsRequest, AssignReplicasToDirsResponse),
    "CreateTopics": (CreateTopicsRequest, CreateTopicsResponse),
    "DeleteTopics": (DeleteTopicsRequest, DeleteTopicsResponse),
    "CreatePartitions": (CreatePartitionsRequest, CreatePartitionsResponse),
    "DescribeConfigs": (DescribeConfigsRequest, DescribeConfigsResponse),
    "IncrementalAlterConfigs": (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    "AllocateProducerIds": (AllocateProducerIdsRequest, AllocateProducerIdsResponse),
    "ElectLeaders": (ElectLeadersRequest, ElectLeadersResponse),
    "UpdateFeatures": (UpdateFeaturesRequest, UpdateFeaturesResponse),
    "AlterPartitionReassignments": (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse),
    "ListPartitionReassignments": (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse),
    "CreateAcls": (CreateAclsRequest, CreateAclsResponse),
    "DeleteAcls": (DeleteAclsRequest, DeleteAclsResponse),
    "AlterUserScramCredentials": (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
    "AlterClientQuotas": (quota_control.AlterClientQuotasRequest, quota_control.AlterClientQuotasResponse),
}
API_OF: dict[type, str] = {req: name for name, (req, _) in CONTROLLER_APIS.items()}

NOT_CONTROLLER = "NOT_CONTROLLER"
#: The quorum's state as `kraftpy quorum status` prints it, answered by the Raft leader.
QUORUM_STATUS_API = "QuorumStatus"
#: The cluster as the active controller's image shows it (kraftpy.metadata.cluster_describe).
CLUSTER_DESCRIBE_API = "DescribeClusterState"


class ControllerUnavailable(Exception):
    """No controller answered as the active one within the time allowed (none elected, unreachable,
    or the request timed out). Brokers answer clients with REQUEST_TIMED_OUT (admin requests) or
    retry later (ISR changes, producer-id blocks)."""


def decode_request(api: str, body: dict[str, Any]) -> Any:
    """The request of controller API `api` in `body`; RpcError INVALID_REQUEST with one line naming
    the field for anything else: a value of another type than its field's, an integer out of its
    Kafka type's range, a missing field (kraftpy.rpc.wire_schema), or what the types cannot say
    (kraftpy.metadata.validation)."""
    request_type, _ = CONTROLLER_APIS[api]
    if "request" not in body:
        raise RpcError("INVALID_REQUEST", f"{api}: no request")
    try:
        SCHEMA.check(body["request"], request_type)
        request = WIRE.decode_as(body["request"], request_type)
    except WireError as exc:
        raise RpcError("INVALID_REQUEST", f"{api}: {exc}") from None
    problem = request_problem(request)
    if problem is not None:
        raise RpcError("INVALID_REQUEST", f"{api}: {problem}")
    return request


#: Errors a request is sent again on (to the next voter): no active controller there, no connection,
#: and a refused SASL login (a controller that has not replayed the credentials yet; logged by the client).
RETRIED = frozenset({NOT_CONTROLLER, "NETWORK_EXCEPTION", "REQUEST_TIMED_OUT", "SASL_AUTHENTICATION_FAILED",
                     "ILLEGAL_SASL_STATE", "UNSUPPORTED_SASL_MECHANISM", "CLUSTER_AUTHORIZATION_FAILED"})


def not_controller(leader_id: int | None) -> RpcError:
    return RpcError(NOT_CONTROLLER, "" if leader_id is None else str(leader_id))


class ControllerClient:
    """Sends controller requests to whichever voter is active, retrying until ``deadline`` seconds.

    ``voters`` is the voters' addresses by id, or a function giving them as they are now (a dynamic
    quorum's voters come from the metadata log, KIP-853); ``bootstrap`` (controller.quorum.bootstrap.servers)
    is asked after them, under ids -2, -3, ..., when no voter answers as the active controller."""

    def __init__(self, nursery: trio.Nursery,
                 voters: dict[int, tuple[str, int]] | Callable[[], dict[int, tuple[str, int]]], *,
                 request_timeout: float = 5.0, retry_backoff: float = 0.05, node_id: int | None = None,
                 tls: Any = None, sasl: Any = None, listener_name: str = "CONTROLLER",
                 bootstrap: Sequence[tuple[str, int]] = ()) -> None:
        """``tls``: the `kraftpy.security.tls.ClientTls` of the controller listener over TLS; ``sasl``: the
        `kraftpy.security.sasl.SaslLogin` of the controller listener over SASL; ``listener_name``: the
        controller listener's name (controller.listener.names), as DescribeQuorum names the voters' endpoints."""
        if callable(voters):
            self._voters_now: Callable[[], dict[int, tuple[str, int]]] = voters
        else:
            fixed = dict(voters)
            self._voters_now = lambda: fixed
        self._bootstrap = {-2 - i: tuple(address) for i, address in enumerate(bootstrap)}
        self.listener_name = listener_name
        self.request_timeout = request_timeout
        self.retry_backoff = retry_backoff
        self._nursery = nursery
        self._tls = tls
        self._sasl = sasl
        self._clients: dict[tuple[str, int], ControlClient] = {}
        self._guess: int | None = None
        self.log = get_logger("controller-client", node_id=node_id)

    @property
    def voters(self) -> dict[int, tuple[str, int]]:
        return self._voters_now()

    @property
    def _targets(self) -> dict[int, tuple[str, int]]:
        """The voters now, then the bootstrap servers."""
        return {**self._voters_now(), **self._bootstrap}

    @property
    def _order(self) -> list[int]:
        return sorted(self._voters_now()) + list(self._bootstrap)

    def _client(self, target: int) -> ControlClient:
        address = self._targets[target]
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = ControlClient(
                self._nursery, address[0], address[1], request_timeout=self.request_timeout,
                connect_timeout=self.request_timeout, max_backoff=0.5, tls=self._tls, sasl=self._sasl)
        return client

    @property
    def active_controller(self) -> int | None:
        return self._guess

    async def call(self, request: Any, timeout: float = 30.0) -> Any:
        api = API_OF[type(request)]
        _, response_type = CONTROLLER_APIS[api]
        body = {"request": WIRE.encode(request)}
        attempt = 0
        last_error = "no controller tried"
        with trio.move_on_after(timeout):
            while True:
                order = self._order
                if not order:
                    last_error = "no controller known"
                    await trio.sleep(self.retry_backoff)
                    continue
                if self._guess is not None and self._guess not in self._targets:
                    self._guess = None
                target = self._guess if self._guess is not None else order[attempt % len(order)]
                attempt += 1
                try:
                    answer = await self._client(target).request(api, body)
                    SCHEMA.check(answer["response"], response_type)
                    return WIRE.decode_as(answer["response"], response_type)
                except RpcError as exc:
                    last_error = f"{target}: {exc}"
                    if exc.code == NOT_CONTROLLER and exc.message.isdigit() and int(exc.message) in self._targets:
                        hinted = int(exc.message)
                        self._guess = hinted if hinted != target else None
                    else:
                        self._guess = None
                    if exc.code not in RETRIED:
                        raise
                except (KeyError, TypeError, WireError) as exc:
                    last_error = f"{target}: malformed answer: {exc}"
                    self._guess = None
                if self._guess is None and attempt % len(order) == 0:
                    await trio.sleep(self.retry_backoff)
        raise ControllerUnavailable(f"{api}: no active controller answered within {timeout}s ({last_error})")

    # The broker's ControllerChannel.
    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        return await self.call(request)

    async def delete_topics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        return await self.call(request)

    async def create_partitions(self, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
        return await self.call(request)

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        return await self.call(request)

    async def describe_configs(self, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
        return await self.call(request)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        return await self.call(request)

    async def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
        return await self.call(request)

    async def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsResponse:
        return await self.call(request)

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        return await self.call(request)

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        return await self.call(request)

    async def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        return await self.call(request)

    async def unregister_broker(self, request: UnregisterBrokerRequest) -> UnregisterBrokerResponse:
        return await self.call(request)

    async def update_features(self, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
        return await self.call(request)

    async def quorum_status(self, timeout: float = 10.0) -> dict[str, Any]:
        """The quorum as its Raft leader describes it (`QUORUM_STATUS_API`, what `kraftpy quorum status`
        prints), asking the voters in turn and following a voter's pointer to the leader."""
        return await self._ask_quorum_leader(QUORUM_STATUS_API, {}, timeout)

    async def change_voters(self, api: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """AddRaftVoter or RemoveRaftVoter of kraftpy.metadata.quorum_membership, sent to the quorum's Raft
        leader as `quorum_status` finds it (a broker forwards Kafka's requests of the same names). The
        leader's refusal (DUPLICATE_VOTER, VOTER_NOT_FOUND, REQUEST_TIMED_OUT, ...) is raised as its
        RpcError: a change is never sent twice."""
        return await self._ask_quorum_leader(api, body, timeout, refusals_end=True)

    async def _ask_quorum_leader(self, api: str, body: dict[str, Any], timeout: float, *,
                                 refusals_end: bool = False) -> dict[str, Any]:
        """``api`` answered by the Raft leader: each voter is asked in turn, and a voter's pointer to the
        leader (NOT_LEADER_OR_FOLLOWER ``id@host:port``) followed. With ``refusals_end``, any other
        refusal than that or a lost connection is raised at once."""
        last_error = "no voter tried"

        def passed_on(exc: RpcError) -> bool:
            return not refusals_end or exc.code in ("NOT_LEADER_OR_FOLLOWER", "NETWORK_EXCEPTION")

        with trio.move_on_after(timeout):
            while True:
                targets = self._targets
                order = ([self._guess] if self._guess in targets else []) + self._order
                for target in order:
                    try:
                        return await self._client(target).request(api, body)
                    except RpcError as exc:
                        if not passed_on(exc):
                            raise
                        last_error = f"{target}: {exc}"
                        leader = exc.message.split("@", 1)[0]
                        if exc.code == "NOT_LEADER_OR_FOLLOWER" and leader.isdigit() and int(leader) in targets:
                            try:
                                return await self._client(int(leader)).request(api, body)
                            except RpcError as again:
                                if not passed_on(again):
                                    raise
                                last_error = f"{leader}: {again}"
                await trio.sleep(self.retry_backoff)
        raise ControllerUnavailable(f"{api}: no quorum leader answered within {timeout}s ({last_error})")

    async def create_acls(self, request: CreateAclsRequest) -> CreateAclsResponse:
        return await self.call(request)

    async def delete_acls(self, request: DeleteAclsRequest) -> DeleteAclsResponse:
        return await self.call(request)

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        return await self.call(request)

    async def alter_client_quotas(
        self, request: quota_control.AlterClientQuotasRequest
    ) -> quota_control.AlterClientQuotasResponse:
        return await self.call(request)
