"""An asynchronous Kafka admin client on trio, speaking the protocol with kraftpy's own codec.

`AdminClient` is what every `kraftpy` admin command uses (``topics``, ``configs``, ``cluster``,
``groups``, ``reassign``, ``leaders``): it connects to one of the ``--bootstrap-server`` addresses,
learns each broker's API versions (ApiVersions) and the cluster's brokers (Metadata), and sends each
request at the highest version both sides speak, to any broker, to a given broker, or to a group's
or a transactional id's coordinator. A broker forwards what the controller decides (CreateTopics, IncrementalAlterConfigs,
ElectLeaders, reassignments) to the active controller itself, so the client never needs the
controller's address for those.

Errors: a broker that cannot be reached, or does not answer within ``request.timeout.ms``, raises
`AdminConnectionError`; an error code in a response is the caller's to report (`KafkaError` carries
the code, Kafka's name for it and the broker's message).

Client settings come from ``--command-config FILE`` (a ``.properties`` file of Kafka client keys,
see `CLIENT_CONFIG_KEYS`): ``client.id``, ``request.timeout.ms`` and ``default.api.timeout.ms``, and
``security.protocol`` with the client ``ssl.*`` keys (``ssl.truststore.location``, ``ssl.keystore.*``,
``ssl.endpoint.identification.algorithm``, PEM form) to reach a TLS listener, and ``sasl.mechanism`` with
``sasl.jaas.config`` (or ``sasl.username``/``sasl.password``) to authenticate on a SASL listener.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection, SaslLogin, client_sasl_login
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode, ProtocolError
from kraftpy.protocol.messages import (
    REQUESTS,
    AlterClientQuotasRequest,
    ApiVersionsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    FindCoordinatorRequest,
    ListTransactionsRequest,
    MetadataRequest,
    WriteTxnMarkersRequest,
)
from kraftpy.security.authorizer import AclBinding, AclBindingFilter, binding_from_codes
from kraftpy.security.tls import HIDDEN_KEYS, TLS_PROTOCOLS, ClientTls, TlsConfigError, client_settings

#: The client keys ``--command-config`` accepts, with their defaults (Kafka's names and meanings).
CLIENT_CONFIG_KEYS: dict[str, str] = {
    "client.id": "kraftpy-admin",
    "request.timeout.ms": "30000",
    "default.api.timeout.ms": "60000",
    "security.protocol": "PLAINTEXT",
}


#: FindCoordinator's key types: a consumer group, a transactional id.
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
_KEY_SUBJECTS = {KEY_TYPE_GROUP: "group", KEY_TYPE_TRANSACTION: "transactional id"}


class AdminError(Exception):
    """Something an admin command reports in one line and exits non-zero for."""

    exit_code = 1


class AdminConnectionError(AdminError):
    """No broker (or no controller) could be reached or answered in time."""

    exit_code = 3


class KafkaError(AdminError):
    """An error code a broker answered with, named as Kafka names it."""

    def __init__(self, code: int, message: str | None = None, *, subject: str | None = None) -> None:
        self.code = ErrorCode.for_code(code)
        self.broker_message = message
        self.subject = subject
        text = self.code.name
        if message:
            text += f": {message}"
        if subject:
            text = f"{subject}: {text}"
        super().__init__(text)


def check(code: int, message: str | None = None, *, subject: str | None = None) -> None:
    """Raise `KafkaError` unless ``code`` is NONE."""
    if code != ErrorCode.NONE:
        raise KafkaError(code, message, subject=subject)


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (an ``id@`` prefix, as in controller.quorum.voters, is accepted)."""
    item = text.strip().split("@", 1)[-1]
    host, sep, port = item.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not host:port")
    return host.strip("[]"), int(port)


def parse_addresses(text: str) -> list[tuple[str, int]]:
    """A comma-separated list of ``host:port``; at least one."""
    out = [parse_address(item) for item in text.split(",") if item.strip()]
    if not out:
        raise ValueError("no address given")
    return out


@attrs.define
class ClientConfig:
    client_id: str = "kraftpy-admin"
    request_timeout_s: float = 30.0
    api_timeout_s: float = 60.0
    #: security.protocol: PLAINTEXT or SSL (the SASL ones are for SASL clients).
    security_protocol: str = "PLAINTEXT"
    #: The TLS side of connections when security.protocol runs over TLS.
    tls: ClientTls | None = None
    #: Who to authenticate as when security.protocol is SASL_PLAINTEXT or SASL_SSL.
    sasl: SaslLogin | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientConfig:
        """Validate the keys of a ``--command-config`` file; ValueError names the bad key and value."""
        values = dict(CLIENT_CONFIG_KEYS)
        values.update(props)
        for key in ("request.timeout.ms", "default.api.timeout.ms"):
            text = values[key]
            if not text.strip().isdigit() or int(text) <= 0:
                raise ValueError(f"{key}={text}: not a positive number of milliseconds")
        protocol = values["security.protocol"].strip().upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security.protocol={values['security.protocol']}: not PLAINTEXT, SSL, SASL_PLAINTEXT "
                             "or SASL_SSL")
        tls = None
        if protocol in TLS_PROTOCOLS:
            try:
                tls = ClientTls(client_settings(values))
            except TlsConfigError as exc:
                shown = "[hidden]" if exc.key in HIDDEN_KEYS else values.get(exc.key, "")
                raise ValueError(f"{exc.key}={shown}: {exc.reason}") from None
        return cls(client_id=values["client.id"], request_timeout_s=int(values["request.timeout.ms"]) / 1000,
                   api_timeout_s=int(values["default.api.timeout.ms"]) / 1000, security_protocol=protocol, tls=tls,
                   sasl=client_sasl_login(values))


@attrs.define
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class AdminClient:
    """One admin session: connections to brokers by node id, each used one request at a time.

    Use as ``async with AdminClient(addresses, config) as admin:``; every method may raise
    `AdminConnectionError`. Methods return decoded response bodies; the error codes inside are the
    caller's to check (`check`).
    """

    def __init__(self, bootstrap: list[tuple[str, int]], config: ClientConfig | None = None) -> None:
        self.bootstrap = bootstrap
        self.config = config or ClientConfig()
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id: int = -1
        self.cluster_id: str | None = None
        self._connections: dict[Any, KafkaConnection] = {}
        self._locks: dict[Any, trio.Lock] = {}
        self._versions: dict[Any, dict[int, tuple[int, int]]] = {}
        self._any: Any = None

    async def __aenter__(self) -> AdminClient:
        await self._connect_bootstrap()
        await self.refresh_metadata()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for conn in self._connections.values():
            await conn.aclose()
        self._connections.clear()

    # -- connections ---------------------------------------------------------------------------

    async def _open(self, key: Any, host: str, port: int) -> KafkaConnection:
        with trio.move_on_after(self.config.request_timeout_s) as scope:
            conn = await KafkaConnection.connect(host, port, client_id=self.config.client_id, tls=self.config.tls,
                                                 sasl=self.config.sasl)
        if scope.cancelled_caught:
            raise AdminConnectionError(f"cannot connect to {host}:{port}: timed out")
        try:
            versions = await self._call(conn, ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
                client_software_name="kraftpy-admin", client_software_version="1"), f"{host}:{port}")
        except BaseException:
            await conn.aclose()
            raise
        check(versions.error_code, subject=f"{host}:{port}")
        self._connections[key] = conn
        self._locks.setdefault(key, trio.Lock())
        self._versions[key] = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        return conn

    async def _connect_bootstrap(self) -> None:
        errors = []
        for host, port in self.bootstrap:
            key = ("bootstrap", host, port)
            try:
                await self._open(key, host, port)
            except (AdminConnectionError, ConnectionClosed) as exc:
                errors.append(str(exc))
                continue
            self._any = key
            return
        raise AdminConnectionError("no broker answered: " + "; ".join(errors))

    async def _call(self, conn: KafkaConnection, api_key: int, version: int, body: Any, where: str) -> Any:
        with trio.move_on_after(self.config.request_timeout_s) as scope:
            try:
                return await conn.request(api_key, version, body)
            except ConnectionClosed as exc:
                raise AdminConnectionError(f"{where}: {exc}") from exc
            except ProtocolError as exc:
                raise AdminConnectionError(f"{where}: {exc}") from exc
        assert scope.cancelled_caught
        raise AdminConnectionError(f"{where}: no answer within request.timeout.ms="
                                   f"{int(self.config.request_timeout_s * 1000)}")

    async def _connection_for(self, node_id: int | None) -> Any:
        if node_id is None:
            if self._any is None or self._any not in self._connections:
                await self._connect_bootstrap()
            return self._any
        if node_id not in self._connections:
            broker = self.brokers.get(node_id)
            if broker is None:
                await self.refresh_metadata()
                broker = self.brokers.get(node_id)
            if broker is None:
                raise AdminConnectionError(f"broker {node_id} is not in the cluster's metadata")
            await self._open(node_id, broker.host, broker.port)
        return node_id

    def version_for(self, api_key: int, node_id: int | None = None) -> int:
        """The highest version of ``api_key`` both this client and the broker speak."""
        key = self._any if node_id is None else node_id
        ours = REQUESTS[api_key].SCHEMA.versions
        theirs = self._versions.get(key, {}).get(int(api_key))
        if theirs is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"the broker does not serve {ApiKey(api_key).name}")
        lo, hi = max(ours.lo, theirs[0]), min(ours.hi, theirs[1])
        if lo > hi:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"no common version of {ApiKey(api_key).name} (broker {theirs[0]}-{theirs[1]})")
        return hi

    async def request(self, api_key: int, body: Any, *, node_id: int | None = None,
                      version: int | None = None) -> Any:
        """Send ``body`` to ``node_id`` (any broker when None) at ``version`` (the highest common one
        when None) and return the decoded response; a broken connection is dropped and opened again
        on the next call."""
        key = await self._connection_for(node_id)
        if version is None:
            version = self.version_for(api_key, node_id)
        conn = self._connections[key]
        async with self._locks[key]:
            try:
                return await self._call(conn, api_key, version, body, self._describe(key))
            except AdminConnectionError:
                self._connections.pop(key, None)
                await conn.aclose()
                raise

    def _describe(self, key: Any) -> str:
        if isinstance(key, tuple):
            return f"{key[1]}:{key[2]}"
        broker = self.brokers.get(key)
        return f"broker {key} ({broker.host}:{broker.port})" if broker else f"broker {key}"

    # -- the cluster -------------------------------------------------------------------------------

    async def metadata(self, topics: list[str] | None = None, *, node_id: int | None = None) -> Any:
        """Metadata for ``topics`` (all topics when None), without creating any."""
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        response = await self.request(ApiKey.METADATA, request, node_id=node_id)
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self.controller_id = response.controller_id
        self.cluster_id = response.cluster_id
        return response

    async def refresh_metadata(self) -> None:
        await self.metadata([])

    async def find_coordinator(self, group: str, *, key_type: int = KEY_TYPE_GROUP) -> int:
        """The node id of ``group``'s coordinator (FindCoordinator, retried while it loads); with
        ``key_type=KEY_TYPE_TRANSACTION``, ``group`` is a transactional id."""
        subject = f"{_KEY_SUBJECTS.get(key_type, 'key')} {group}"
        with trio.move_on_after(self.config.api_timeout_s):
            while True:
                version = self.version_for(ApiKey.FIND_COORDINATOR)
                if key_type != KEY_TYPE_GROUP and version < 1:
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker finds group coordinators only",
                                     subject=subject)
                if version >= 4:
                    request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[group])
                else:
                    request = FindCoordinatorRequest(key=group, key_type=key_type)
                response = await self.request(ApiKey.FIND_COORDINATOR, request, version=version)
                if version >= 4:
                    entry = response.coordinators[0]
                    code, message, node_id = entry.error_code, entry.error_message, entry.node_id
                else:
                    code, message, node_id = response.error_code, response.error_message, response.node_id
                if code == ErrorCode.NONE:
                    if node_id not in self.brokers:
                        await self.refresh_metadata()
                    return node_id
                if not ErrorCode.for_code(code).retriable:
                    raise KafkaError(code, message, subject=subject)
                await trio.sleep(0.1)
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator found within "
                         f"default.api.timeout.ms={int(self.config.api_timeout_s * 1000)}", subject=subject)

    async def coordinator_request(self, group: str, api_key: int, body: Any, *, version: int | None = None) -> Any:
        node_id = await self.find_coordinator(group)
        return await self.request(api_key, body, node_id=node_id, version=version)

    # -- transactions (KIP-664) --------------------------------------------------------------------

    async def list_transactions(self, node_id: int, *, states: list[str] | None = None,
                                producer_ids: list[int] | None = None, duration_ms: int = -1) -> Any:
        """ListTransactions to one broker: the transactional ids it coordinates, filtered by state
        names (``Ongoing``...), producer ids and (version 1) a minimum running time."""
        await self._connection_for(node_id)
        version = self.version_for(ApiKey.LIST_TRANSACTIONS, node_id)
        if duration_ms >= 0 and version < 1:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker cannot filter transactions by duration",
                             subject=f"broker {node_id}")
        request = ListTransactionsRequest(state_filters=list(states or ()), producer_id_filters=list(producer_ids or ()),
                                          duration_filter=duration_ms)
        return await self.request(ApiKey.LIST_TRANSACTIONS, request, node_id=node_id, version=version)

    async def describe_transactions(self, transactional_ids: list[str], *, node_id: int) -> Any:
        """DescribeTransactions to the coordinator ``node_id`` of the ids (`find_coordinator` with
        ``KEY_TYPE_TRANSACTION``)."""
        return await self.request(ApiKey.DESCRIBE_TRANSACTIONS,
                                  DescribeTransactionsRequest(transactional_ids=list(transactional_ids)),
                                  node_id=node_id)

    async def describe_producers(self, partitions: Mapping[str, list[int]], *, node_id: int) -> Any:
        """DescribeProducers to ``node_id`` (the partitions' leader) for ``{topic: [partition...]}``."""
        request = DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=sorted(parts))
            for topic, parts in partitions.items()])
        return await self.request(ApiKey.DESCRIBE_PRODUCERS, request, node_id=node_id)

    # -- SCRAM credentials (KIP-554) -------------------------------------------------------------

    async def describe_user_scram_credentials(self, users: list[str] | None = None
                                              ) -> list[tuple[str, int, str | None, list[tuple[str, int]]]]:
        """DescribeUserScramCredentials: for each user (every user with credentials when None), its
        (name, error code, message, [(mechanism name, iterations)])."""
        from kraftpy.protocol.messages import DescribeUserScramCredentialsRequest
        from kraftpy.security.scram import MECHANISM_NAMES

        request = DescribeUserScramCredentialsRequest(
            users=None if users is None else [DescribeUserScramCredentialsRequest.UserName(name=u) for u in users])
        response = await self.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request)
        check(response.error_code, response.error_message, subject="SCRAM credentials")
        return [(r.user, r.error_code, r.error_message,
                 [(MECHANISM_NAMES.get(c.mechanism, str(c.mechanism)), c.iterations) for c in r.credential_infos])
                for r in response.results]

    async def alter_user_scram_credentials(
        self, upsertions: list[tuple[str, str, str, int]], deletions: list[tuple[str, str]]
    ) -> list[tuple[str, int, str | None]]:
        """AlterUserScramCredentials: ``upsertions`` are (user, mechanism name, password, iterations) --
        the password is salted and hashed here, only the salt and SaltedPassword are sent --
        ``deletions`` (user, mechanism name). Returns (user, error code, message) per user."""
        import secrets

        from kraftpy.protocol.messages import AlterUserScramCredentialsRequest as Req
        from kraftpy.security.scram import MECHANISM_CODES, salted_password

        def code(mechanism: str) -> int:
            return MECHANISM_CODES.get(mechanism, 0)  # 0 (UNKNOWN): refused by the controller

        ups = []
        for user, mechanism, password, iterations in upsertions:
            salt = secrets.token_bytes(32)
            salted = salted_password(mechanism, password, salt, iterations) if mechanism in MECHANISM_CODES else b""
            ups.append(Req.ScramCredentialUpsertion(name=user, mechanism=code(mechanism), iterations=iterations,
                                                    salt=salt, salted_password=salted))
        request = Req(deletions=[Req.ScramCredentialDeletion(name=u, mechanism=code(m)) for u, m in deletions],
                      upsertions=ups)
        response = await self.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request)
        return [(r.user, r.error_code, r.error_message) for r in response.results]

    async def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, *,
                                committed: bool, partitions: Mapping[str, list[int]], node_id: int) -> Any:
        """WriteTxnMarkers to ``node_id`` (the partitions' leader): one marker of the producer's
        transaction, COMMIT when ``committed`` else ABORT, in each of ``{topic: [partition...]}``.
        What Kafka's Admin.abortTransaction sends to end a hanging transaction."""
        request = WriteTxnMarkersRequest(markers=[WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=committed,
            coordinator_epoch=coordinator_epoch, topics=[
                WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=sorted(parts))
                for topic, parts in partitions.items()])])
        return await self.request(ApiKey.WRITE_TXN_MARKERS, request, node_id=node_id)

    # -- ACLs ----------------------------------------------------------------------------------------

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The ACLs matching ``acl_filter`` (DescribeAcls); KafkaError when the broker refuses."""
        request = DescribeAclsRequest(
            resource_type_filter=int(acl_filter.resource_type), resource_name_filter=acl_filter.resource_name,
            pattern_type_filter=int(acl_filter.pattern_type), principal_filter=acl_filter.principal,
            host_filter=acl_filter.host, operation=int(acl_filter.operation),
            permission_type=int(acl_filter.permission))
        response = await self.request(ApiKey.DESCRIBE_ACLS, request)
        check(response.error_code, response.error_message, subject="ACLs")
        return [binding_from_codes(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host,
                                   a.operation, a.permission_type)
                for r in response.resources for a in r.acls]

    async def create_acls(self, bindings: list[AclBinding]) -> list[tuple[int, str | None]]:
        """CreateAcls: (error code, message) for each binding, in order."""
        Creation = CreateAclsRequest.AclCreation
        request = CreateAclsRequest(creations=[
            Creation(resource_type=int(b.resource_type), resource_name=b.resource_name,
                     resource_pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                     operation=int(b.operation), permission_type=int(b.permission)) for b in bindings])
        response = await self.request(ApiKey.CREATE_ACLS, request)
        return [(r.error_code, r.error_message) for r in response.results]

    async def delete_acls(self, filters: list[AclBindingFilter]
                          ) -> list[tuple[int, str | None, list[AclBinding]]]:
        """DeleteAcls: for each filter, (error code, message, the ACLs it removed)."""
        Filter = DeleteAclsRequest.DeleteAclsFilter
        request = DeleteAclsRequest(filters=[
            Filter(resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
                   pattern_type_filter=int(f.pattern_type), principal_filter=f.principal, host_filter=f.host,
                   operation=int(f.operation), permission_type=int(f.permission)) for f in filters])
        response = await self.request(ApiKey.DELETE_ACLS, request)
        return [(r.error_code, r.error_message,
                 [binding_from_codes(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host,
                                     a.operation, a.permission_type) for a in r.matching_acls])
                for r in response.filter_results]

    # -- client quotas -------------------------------------------------------------------------------

    async def describe_client_quotas(self, components: list[tuple[str, int, str | None]], *, strict: bool = False
                                     ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas: each matching entity ({entity type: name, None for the default}) with
        its quotas. ``components`` are (entity type, match type, match) as in Kafka's filter (match type
        0 exact name, 1 the default, 2 any name); KafkaError when the broker refuses the filter."""
        Component = DescribeClientQuotasRequest.ComponentData
        request = DescribeClientQuotasRequest(strict=strict, components=[
            Component(entity_type=t, match_type=m, match=v) for t, m, v in components])
        response = await self.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, request)
        check(response.error_code, response.error_message, subject="client quotas")
        return [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
                for entry in response.entries or ()]

    async def alter_client_quotas(self, entries: list[tuple[Mapping[str, str | None], Mapping[str, float | None]]],
                                  *, validate_only: bool = False) -> list[tuple[int, str | None]]:
        """AlterClientQuotas: for each (entity, {key: value, or None to remove}), the (error code,
        message) the controller gave, in order."""
        Entry = AlterClientQuotasRequest.EntryData
        Entity = AlterClientQuotasRequest.EntityData
        Op = AlterClientQuotasRequest.OpData
        request = AlterClientQuotasRequest(validate_only=validate_only, entries=[
            Entry(entity=[Entity(entity_type=t, entity_name=n) for t, n in entity.items()],
                  ops=[Op(key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in ops.items()])
            for entity, ops in entries])
        response = await self.request(ApiKey.ALTER_CLIENT_QUOTAS, request)
        return [(r.error_code, r.error_message) for r in response.entries]
