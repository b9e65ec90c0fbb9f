"""Kafka's authorization rules for the group APIs the group coordinator answers.

``authorized_call(authz, api_key, header, request, conn, call)`` applies the rule of ``api_key``
(kraftpy.broker.authorization.API_RULES) around ``call`` (the coordinator's handler): a request whose
group is refused is answered with GROUP_AUTHORIZATION_FAILED without reaching the coordinator; topics
and groups refused among several are taken out of the request, answered with their error, and the
rest goes to the coordinator; lists (ListGroups, OffsetFetch of all topics) leave out what the caller
may not describe. With authorization off, ``call`` is awaited as it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kraftpy.broker.authorization import (
    DELETE,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    BrokerAuthorizer,
)
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    RESPONSES,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    TxnOffsetCommitResponse,
)

GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED

Call = Callable[[Any], Awaitable[Any]]


async def authorized_call(authz: BrokerAuthorizer, api_key: int, header: Any, request: Any, conn: Any,
                          call: Call) -> Any:
    if not authz.enabled:
        return await call(request)
    rule = _RULES.get(api_key)
    if rule is None:
        return await call(request)
    return await rule(authz, header, request, conn, call)


async def _one_group(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, call: Call) -> Any:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group."""
    if not authz.allows(conn, READ, GROUP, request.group_id):
        return RESPONSES[header.request_api_key](error_code=GROUP_DENIED)
    return await call(request)


def _partition_errors(topics: Any, error: ErrorCode, topic_cls: Any, partition_cls: Any) -> list:
    return [topic_cls(name=t.name, partitions=[partition_cls(partition_index=p.partition_index, error_code=error)
                                               for p in t.partitions]) for t in topics]


async def _commit_like(authz: BrokerAuthorizer, request: Any, conn: Any, call: Call, response_cls: Any,
                       topic_cls: Any, partition_cls: Any, first_check: tuple[Any, ...] = ()) -> Any:
    """OffsetCommit and TxnOffsetCommit: the checks in ``first_check`` (operation, resource type, name,
    error) refuse every partition; then READ on each topic."""
    for operation, resource_type, name, error in first_check:
        if not authz.allows(conn, operation, resource_type, name):
            return response_cls(topics=_partition_errors(request.topics, error, topic_cls, partition_cls))
    denied = authz.denied(conn, READ, TOPIC, (t.name for t in request.topics))
    if not denied:
        return await call(request)
    refused = [t for t in request.topics if t.name in denied]
    request.topics = [t for t in request.topics if t.name not in denied]
    response = await call(request) if request.topics else response_cls(topics=[])
    response.topics = list(response.topics) + _partition_errors(refused, TOPIC_DENIED, topic_cls, partition_cls)
    return response


async def _offset_commit(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, call: Call) -> Any:
    return await _commit_like(authz, request, conn, call, OffsetCommitResponse,
                              OffsetCommitResponse.OffsetCommitResponseTopic,
                              OffsetCommitResponse.OffsetCommitResponsePartition,
                              ((READ, GROUP, request.group_id, GROUP_DENIED),))


async def _txn_offset_commit(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, call: Call) -> Any:
    return await _commit_like(authz, request, conn, call, TxnOffsetCommitResponse,
                              TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic,
                              TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition,
                              ((WRITE, TRANSACTIONAL_ID, request.transactional_id,
                                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                               (READ, GROUP, request.group_id, GROUP_DENIED)))


def _fetch_partition_errors(topics: Any, topic_cls: Any, partition_cls: Any, error: ErrorCode) -> list:
    return [topic_cls(name=t.name, partitions=[
        partition_cls(partition_index=p, committed_offset=-1, metadata="", error_code=error)
        for p in t.partition_indexes]) for t in topics]


async def _offset_fetch(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, call: Call) -> Any:
    """DESCRIBE on the group; DESCRIBE on each topic: refused when named, left out when all are asked for."""
    version = header.request_api_version
    if version >= 8:
        return await _offset_fetch_groups(authz, request, conn, call)
    Topic, Partition = OffsetFetchResponse.OffsetFetchResponseTopic, OffsetFetchResponse.OffsetFetchResponsePartition
    if not authz.allows(conn, DESCRIBE, GROUP, request.group_id):
        if version >= 2:
            return OffsetFetchResponse(error_code=GROUP_DENIED, topics=[])
        return OffsetFetchResponse(topics=_fetch_partition_errors(request.topics or (), Topic, Partition,
                                                                  GROUP_DENIED))
    if request.topics is None:
        response = await call(request)
        response.topics = [t for t in response.topics
                           if authz.allows(conn, DESCRIBE, TOPIC, t.name, log_denied=False)]
        return response
    denied = authz.denied(conn, DESCRIBE, TOPIC, (t.name for t in request.topics))
    if not denied:
        return await call(request)
    refused = [t for t in request.topics if t.name in denied]
    request.topics = [t for t in request.topics if t.name not in denied]
    response = await call(request)
    response.topics = list(response.topics) + _fetch_partition_errors(refused, Topic, Partition, TOPIC_DENIED)
    return response


async def _offset_fetch_groups(authz: BrokerAuthorizer, request: Any, conn: Any, call: Call) -> Any:
    Group = OffsetFetchResponse.OffsetFetchResponseGroup
    Topic, Partition = OffsetFetchResponse.OffsetFetchResponseTopics, OffsetFetchResponse.OffsetFetchResponsePartitions
    refused_groups = [g.group_id for g in request.groups if not authz.allows(conn, DESCRIBE, GROUP, g.group_id)]
    refused_topics: dict[str, list] = {}
    asked_all: set[str] = set()
    kept = []
    for g in request.groups:
        if g.group_id in refused_groups:
            continue
        if g.topics is None:
            asked_all.add(g.group_id)
        else:
            denied = authz.denied(conn, DESCRIBE, TOPIC, (t.name for t in g.topics))
            if denied:
                refused_topics[g.group_id] = [t for t in g.topics if t.name in denied]
                g.topics = [t for t in g.topics if t.name not in denied]
        kept.append(g)
    request.groups = kept
    response = await call(request) if kept else OffsetFetchResponse(groups=[])
    for group in response.groups:
        if group.group_id in asked_all:
            group.topics = [t for t in group.topics if authz.allows(conn, DESCRIBE, TOPIC, t.name, log_denied=False)]
        elif group.group_id in refused_topics:
            group.topics = list(group.topics) + _fetch_partition_errors(
                refused_topics[group.group_id], Topic, Partition, TOPIC_DENIED)
    response.groups = list(response.groups) + [Group(group_id=g, error_code=GROUP_DENIED, topics=[])
                                               for g in refused_groups]
    return response


async def _offset_delete(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, call: Call) -> Any:
    """DELETE on the group, READ on each topic."""
    if not authz.allows(conn, DELETE, GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=GROUP_DENIED, topics=[])
    return await _commit_like(authz, request, conn, call, OffsetDeleteResponse,
                              OffsetDeleteResponse.OffsetDeleteResponseTopic,
                              OffsetDeleteResponse.OffsetDeleteResponsePartition)


async def _list_groups(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, call: Call) -> Any:
    """Every group with DESCRIBE on the cluster; otherwise only the groups the caller may describe."""
    response = await call(request)
    if not authz.allows_cluster(conn, DESCRIBE, log_denied=False):
        response.groups = [g for g in response.groups
                           if authz.allows(conn, DESCRIBE, GROUP, g.group_id, log_denied=False)]
    return response


async def _describe_groups(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, call: Call) -> Any:
    denied = authz.denied(conn, DESCRIBE, GROUP, request.groups)
    if not denied:
        return _with_group_operations(authz, header, request, conn, await call(request))
    asked = list(request.groups)
    request.groups = [g for g in asked if g not in denied]
    response = await call(request) if request.groups else DescribeGroupsResponse(groups=[])
    response.groups = list(response.groups) + [
        DescribeGroupsResponse.DescribedGroup(error_code=GROUP_DENIED, group_id=g, group_state="",
                                              protocol_type="", protocol_data="", members=[])
        for g in asked if g in denied]
    return _with_group_operations(authz, header, request, conn, response)


def _with_group_operations(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, response: Any) -> Any:
    """From v3, when asked: each group described without error carries what the caller may do on it."""
    if header.request_api_version >= 3 and request.include_authorized_operations:
        for group in response.groups:
            if group.error_code == ErrorCode.NONE:
                group.authorized_operations = authz.authorized_operations(conn, GROUP, group.group_id)
    return response


async def _delete_groups(authz: BrokerAuthorizer, header: Any, request: Any, conn: Any, call: Call) -> Any:
    denied = authz.denied(conn, DELETE, GROUP, request.groups_names)
    if not denied:
        return await call(request)
    asked = list(request.groups_names)
    request.groups_names = [g for g in asked if g not in denied]
    response = await call(request) if request.groups_names else DeleteGroupsResponse(results=[])
    response.results = list(response.results) + [
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=GROUP_DENIED) for g in asked if g in denied]
    return response


_RULES: dict[int, Callable[..., Awaitable[Any]]] = {
    ApiKey.JOIN_GROUP: _one_group,
    ApiKey.SYNC_GROUP: _one_group,
    ApiKey.HEARTBEAT: _one_group,
    ApiKey.LEAVE_GROUP: _one_group,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.DELETE_GROUPS: _delete_groups,
}
