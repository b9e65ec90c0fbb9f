"""The broker's authorizer, and Kafka's per-API authorization rules in one table.

Theory of operation
-------------------
``BrokerAuthorizer`` holds an ``AclIndex`` (kraftpy.security.authorizer: StandardAuthorizer semantics,
``super.users``, ``allow.everyone.if.no.acl.found``) that follows the metadata log: the broker's
metadata publisher hands it every delta (``apply_delta``), whose ``changed_acls`` it adds and removes
by id before the image is published, so a request sees the ACLs of the image it is answered from. An
ACL change reaches a broker with the metadata change that carries it, as every other change does.

With ``authorizer.class.name`` empty (the default) ``enabled`` is false and every check allows: no
handler changes its answer. With ``org.apache.kafka.metadata.authorizer.StandardAuthorizer`` every
Kafka API request is checked with the caller's principal (``Connection.principal``) and address
(``Connection.client_host``).

The handlers call the small functions here with the connection; the rules, per API, are Kafka's
(``KafkaApis``), and ``API_RULES`` states them in one place (it is what docs/security.md lists):
a whole request refused answers Kafka's error for its resource type (TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED); a
request naming several topics or groups answers the refused ones with that error and serves the rest.

Denials are logged (principal, host, operation, resource, the rule that decided) at info, as Kafka's
authorizer logger does; allowed requests are not.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import structlog

from kraftpy.metadata.delta import MetadataDelta
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.security.authorizer import (
    CLUSTER_NAME,
    AclIndex,
    AclOperation,
    AuthorizationResult,
    ResourceType,
    parse_super_users,
)

_logger = structlog.get_logger("kraftpy.authorizer")

#: authorizer.class.name that turns authorization on (Kafka's KRaft authorizer).
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

READ = AclOperation.READ
WRITE = AclOperation.WRITE
CREATE = AclOperation.CREATE
DELETE = AclOperation.DELETE
ALTER = AclOperation.ALTER
DESCRIBE = AclOperation.DESCRIBE
CLUSTER_ACTION = AclOperation.CLUSTER_ACTION
DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
ALTER_CONFIGS = AclOperation.ALTER_CONFIGS
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID

#: The error a refused resource of each type is answered with.
DENIED_ERROR = {
    TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}

#: Kafka's rule for each API: what the caller must be allowed. (Documentation and the one place to
#: read them; the handlers apply them with the functions below.)
API_RULES: dict[ApiKey, str] = {
    ApiKey.PRODUCE: "WRITE on each topic; a transactional producer WRITE on its transactional id, an "
                    "idempotent one IDEMPOTENT_WRITE on the cluster (or WRITE on some topic)",
    ApiKey.FETCH: "READ on each topic (a consumer); CLUSTER_ACTION on the cluster (a follower broker)",
    ApiKey.LIST_OFFSETS: "DESCRIBE on each topic",
    ApiKey.OFFSET_FOR_LEADER_EPOCH: "DESCRIBE on each topic (a consumer); CLUSTER_ACTION on the cluster "
                                    "(a follower broker)",
    ApiKey.DELETE_RECORDS: "DELETE on each topic",
    ApiKey.METADATA: "DESCRIBE on each topic: named topics not allowed are answered TOPIC_AUTHORIZATION_FAILED, "
                     "and when all topics are asked for they are left out; auto-creation needs CREATE on the "
                     "cluster or the topic",
    ApiKey.DESCRIBE_CLUSTER: "nothing (the cluster's authorized operations are 0 without DESCRIBE on it)",
    ApiKey.DESCRIBE_LOG_DIRS: "DESCRIBE on the cluster",
    ApiKey.ALTER_REPLICA_LOG_DIRS: "ALTER on the cluster",
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: "DESCRIBE on each topic: named topics not allowed are answered "
                                      "TOPIC_AUTHORIZATION_FAILED, and when all topics are asked for they are left out",
    ApiKey.CREATE_TOPICS: "CREATE on the cluster, or else CREATE on each topic",
    ApiKey.DELETE_TOPICS: "DELETE on each topic",
    ApiKey.CREATE_PARTITIONS: "ALTER on each topic",
    ApiKey.DESCRIBE_CONFIGS: "DESCRIBE_CONFIGS on each topic, or on the cluster for broker resources",
    ApiKey.INCREMENTAL_ALTER_CONFIGS: "ALTER_CONFIGS on each topic, or on the cluster for broker resources",
    ApiKey.ALTER_CONFIGS: "ALTER_CONFIGS on each topic, or on the cluster for broker resources",
    ApiKey.FIND_COORDINATOR: "DESCRIBE on the group, or on the transactional id",
    ApiKey.JOIN_GROUP: "READ on the group",
    ApiKey.SYNC_GROUP: "READ on the group",
    ApiKey.HEARTBEAT: "READ on the group",
    ApiKey.LEAVE_GROUP: "READ on the group",
    ApiKey.OFFSET_COMMIT: "READ on the group, and READ on each topic",
    ApiKey.OFFSET_FETCH: "DESCRIBE on the group, and DESCRIBE on each topic (not allowed topics are left out)",
    ApiKey.OFFSET_DELETE: "DELETE on the group, and READ on each topic",
    ApiKey.LIST_GROUPS: "the groups the caller may DESCRIBE (all of them with DESCRIBE on the cluster)",
    ApiKey.DESCRIBE_GROUPS: "DESCRIBE on each group",
    ApiKey.DELETE_GROUPS: "DELETE on each group",
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "READ on the group, and DESCRIBE on each subscribed topic",
    ApiKey.CONSUMER_GROUP_DESCRIBE: "DESCRIBE on each group",
    ApiKey.INIT_PRODUCER_ID: "WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster "
                             "(or WRITE on some topic)",
    ApiKey.ADD_PARTITIONS_TO_TXN: "WRITE on the transactional id and on each topic (a broker verifying a "
                                  "transaction: CLUSTER_ACTION on the cluster)",
    ApiKey.ADD_OFFSETS_TO_TXN: "WRITE on the transactional id and READ on the group",
    ApiKey.END_TXN: "WRITE on the transactional id",
    ApiKey.TXN_OFFSET_COMMIT: "WRITE on the transactional id, READ on the group and on each topic",
    ApiKey.DESCRIBE_TRANSACTIONS: "DESCRIBE on each transactional id",
    ApiKey.LIST_TRANSACTIONS: "the transactional ids the caller may DESCRIBE",
    ApiKey.DESCRIBE_PRODUCERS: "READ on each topic",
    ApiKey.WRITE_TXN_MARKERS: "CLUSTER_ACTION on the cluster",
    ApiKey.DESCRIBE_ACLS: "DESCRIBE on the cluster",
    ApiKey.CREATE_ACLS: "ALTER on the cluster",
    ApiKey.DELETE_ACLS: "ALTER on the cluster",
    ApiKey.ELECT_LEADERS: "ALTER on the cluster",
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: "ALTER on the cluster",
    ApiKey.LIST_PARTITION_REASSIGNMENTS: "DESCRIBE on the cluster",
    ApiKey.UNREGISTER_BROKER: "ALTER on the cluster",
    ApiKey.UPDATE_FEATURES: "ALTER on the cluster",
    ApiKey.DESCRIBE_QUORUM: "DESCRIBE on the cluster",
    ApiKey.ADD_RAFT_VOTER: "ALTER on the cluster",
    ApiKey.REMOVE_RAFT_VOTER: "ALTER on the cluster",
    ApiKey.DESCRIBE_CLIENT_QUOTAS: "DESCRIBE_CONFIGS on the cluster",
    ApiKey.ALTER_CLIENT_QUOTAS: "ALTER_CONFIGS on the cluster",
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: "DESCRIBE on the cluster",
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: "ALTER on the cluster",
    ApiKey.API_VERSIONS: "nothing",
    ApiKey.SASL_HANDSHAKE: "nothing (authentication comes first)",
    ApiKey.SASL_AUTHENTICATE: "nothing (authentication comes first)",
}


#: The operations each resource type supports (Kafka's AclEntry.supportedOperations): what
#: ``authorized_operations`` reports on, and all of it when there is no authorizer.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    TOPIC: (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE),
    CLUSTER: (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
    TRANSACTIONAL_ID: (DESCRIBE, WRITE),
    ResourceType.DELEGATION_TOKEN: (DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

#: authorized_operations' value when the client did not ask for them (the schemas' default, Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit ``1 << code`` set for each operation."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field


class BrokerAuthorizer:
    """The ACLs of the metadata log as this broker last published them, and the decisions on them."""

    def __init__(self, class_name: str = "", *, super_users: str | Iterable[str] = "",
                 allow_everyone_if_no_acl_found: bool = False, node_id: int = -1) -> None:
        if class_name not in ("", STANDARD_AUTHORIZER):
            raise ValueError(f"authorizer.class.name={class_name}: kraftpy's authorizer is {STANDARD_AUTHORIZER}")
        self.enabled = class_name == STANDARD_AUTHORIZER
        users = parse_super_users(super_users) if isinstance(super_users, str) else frozenset(super_users)
        self.index = AclIndex(super_users=users, allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found)
        #: Moved on by every change of the ACLs: what was decided under an earlier version may no longer
        #: hold (a fetch session reading only what changed looks at every partition again).
        self.version = 0
        self._log = _logger.bind(node_id=node_id)

    @classmethod
    def from_settings(cls, settings: Any) -> BrokerAuthorizer:
        return cls(settings.authorizer_class_name, super_users=settings.super_users,
                   allow_everyone_if_no_acl_found=settings.allow_everyone_if_no_acl_found,
                   node_id=settings.node_id)

    # -- following the metadata log -------------------------------------------------------------------

    def apply_delta(self, delta: MetadataDelta) -> None:
        """The ACLs a delta added or removed (call before its image is published)."""
        changed = delta.changed_acls
        if not changed:
            return
        for acl_id, binding in changed.items():
            if binding is None:
                if self.index.get(acl_id) is not None:
                    self.index.remove(acl_id)
            else:
                self.index.add(acl_id, binding)
        self.version += 1
        self._log.info("acls changed", added=sum(b is not None for b in changed.values()),
                       removed=sum(b is None for b in changed.values()), acls=len(self.index))

    # -- decisions --------------------------------------------------------------------------------------

    def allows(self, conn: Any, operation: AclOperation, resource_type: ResourceType, name: str, *,
               log_denied: bool = True) -> bool:
        """May the caller on ``conn`` do ``operation`` on ``resource_type:name``? Always, when disabled."""
        if not self.enabled:
            return True
        decision = self.index.decide(conn.principal, conn.client_host, operation, resource_type, name)
        if decision.result is AuthorizationResult.ALLOWED:
            return True
        if log_denied:
            self._log.info("request denied", principal=conn.principal, host=conn.client_host,
                           operation=operation.name, resource=f"{resource_type.name}:{name}", rule=str(decision))
        return False

    def allows_cluster(self, conn: Any, operation: AclOperation, *, log_denied: bool = True) -> bool:
        return self.allows(conn, operation, CLUSTER, CLUSTER_NAME, log_denied=log_denied)

    def allows_any(self, conn: Any, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: may the caller do ``operation`` on some resource of this type?"""
        if not self.enabled:
            return True
        return self.index.authorize_by_resource_type(
            conn.principal, conn.client_host, operation, resource_type) is AuthorizationResult.ALLOWED

    def denied(self, conn: Any, operation: AclOperation, resource_type: ResourceType, names: Iterable[str], *,
               log_denied: bool = True) -> set[str]:
        """The names among ``names`` the caller may not ``operation`` (empty when disabled)."""
        if not self.enabled:
            return set()
        return {n for n in set(names) if not self.allows(conn, operation, resource_type, n, log_denied=log_denied)}

    def authorized_operations(self, conn: Any, resource_type: ResourceType, name: str) -> int:
        """Kafka's AuthHelper.authorizedOperations: the operations of ``resource_type`` (its supported ones,
        ``SUPPORTED_OPERATIONS``) the caller may perform on ``name``, as a bit field of AclOperation codes
        (bit ``1 << code``). Without an authorizer, all of them. Denials are not logged (a question, not
        a request)."""
        supported = SUPPORTED_OPERATIONS[resource_type]
        if self.enabled:
            supported = [op for op in supported if self.allows(conn, op, resource_type, name, log_denied=False)]
        return operations_bit_field(supported)

    def may_produce_idempotently(self, conn: Any) -> bool:
        """IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (Kafka 3.x's rule, KIP-679)."""
        return (self.allows_cluster(conn, IDEMPOTENT_WRITE, log_denied=False)
                or self.allows_any(conn, WRITE, TOPIC))


def cluster_refusal(authz: BrokerAuthorizer, conn: Any, operation: AclOperation, api_key: int) -> Any | None:
    """For an API checked on the cluster alone: None when allowed, else its response carrying
    CLUSTER_AUTHORIZATION_FAILED (Kafka's answer to the whole request)."""
    if authz.allows_cluster(conn, operation):
        return None
    from kraftpy.protocol.messages import RESPONSES

    response = RESPONSES[api_key](error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if hasattr(response, "error_message"):
        response.error_message = "Cluster authorization failed."
    return response


#: Config resource type (Kafka's ConfigResource.Type code) -> the ACL resource type it is checked on.
_CONFIG_RESOURCES = {2: TOPIC, 4: CLUSTER, 8: CLUSTER, 32: GROUP}


def config_resource_denied(authz: BrokerAuthorizer, conn: Any, resource_type: int, resource_name: str,
                           operation: AclOperation) -> ErrorCode | None:
    """DescribeConfigs (DESCRIBE_CONFIGS) / IncrementalAlterConfigs (ALTER_CONFIGS) on one config resource:
    the topic, the cluster for a broker or broker logger, the group; the error when refused, else None."""
    if not authz.enabled:
        return None
    acl_type = _CONFIG_RESOURCES.get(resource_type)
    if acl_type is None:
        return None  # an unknown type: the handler answers it as it would anyway
    name = CLUSTER_NAME if acl_type is CLUSTER else resource_name
    return None if authz.allows(conn, operation, acl_type, name) else DENIED_ERROR[acl_type]


#: The authorizer of a broker without authorization: allows everything.
NO_AUTHORIZATION = BrokerAuthorizer()
