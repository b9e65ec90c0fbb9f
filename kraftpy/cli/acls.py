"""`kraftpy acls add|list|remove`, in the shape of Kafka's kafka-acls.sh.

Resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and ``--cluster``, with
``--resource-pattern-type`` (literal or prefixed for ``add``; also any and match for ``list`` and
``remove``). Entries: ``--allow-principal`` / ``--deny-principal`` (repeatable, ``User:NAME``, ``User:*``
for everybody), ``--allow-host`` / ``--deny-host`` (default ``*``) and ``--operation`` (repeatable: Read,
Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite,
All). ``add`` creates one ACL per resource, principal, host and operation; ``list`` prints the ACLs
matching the resources and ``--principal``; ``remove`` deletes the ACLs matching the resources and the
entries given (all of a resource's ACLs when no principal is given), and asks first unless ``--force``.

The requests are CreateAcls, DescribeAcls and DeleteAcls to ``--bootstrap-server``; the broker needs an
authorizer (``authorizer.class.name``) and the caller ALTER (DESCRIBE to list) on the cluster. Exit 1
with one line per refused item and Kafka's error name; 2 for a wrong command line.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kraftpy.admin.client import AdminClient, KafkaError
from kraftpy.cli.admin_common import (
    EXIT_FAILED,
    EXIT_USAGE,
    BootstrapServerOption,
    CommandConfigOption,
    JsonOption,
    die,
    emit_json,
    emit_table,
    is_terminal,
    run_admin,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.security.authorizer import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourceType,
)

app = typer.Typer(help="Add, list and remove ACLs (kafka-acls.sh).", no_args_is_help=True)

TopicsOption = Annotated[list[str] | None, typer.Option(
    "--topic", help="A topic (repeatable; '*' for every topic).", show_default=False)]
GroupsOption = Annotated[list[str] | None, typer.Option(
    "--group", help="A consumer group (repeatable; '*' for every group).", show_default=False)]
TransactionalIdsOption = Annotated[list[str] | None, typer.Option(
    "--transactional-id", help="A transactional id (repeatable; '*' for every one).", show_default=False)]
ClusterOption = Annotated[bool, typer.Option("--cluster", help="The cluster resource.")]
PatternTypeOption = Annotated[str | None, typer.Option(
    "--resource-pattern-type", show_default=False,
    help="literal or prefixed (add); also any or match (list, remove). Default: literal, or any for a "
         "list or remove naming no resource.")]
AllowPrincipalOption = Annotated[list[str] | None, typer.Option(
    "--allow-principal", help="A principal to allow, as User:NAME (repeatable).", show_default=False)]
DenyPrincipalOption = Annotated[list[str] | None, typer.Option(
    "--deny-principal", help="A principal to deny, as User:NAME (repeatable).", show_default=False)]
AllowHostOption = Annotated[list[str] | None, typer.Option(
    "--allow-host", help="A host the allowed principals connect from (repeatable).", show_default="*")]
DenyHostOption = Annotated[list[str] | None, typer.Option(
    "--deny-host", help="A host the denied principals connect from (repeatable).", show_default="*")]
OperationOption = Annotated[list[str] | None, typer.Option(
    "--operation", help="An operation (repeatable): Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "DescribeConfigs, AlterConfigs, IdempotentWrite, All.", show_default=False)]

_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}


def _operation(text: str) -> AclOperation:
    op = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        die(f"--operation {text}: not one of Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
            "DescribeConfigs, AlterConfigs, IdempotentWrite, All", EXIT_USAGE)
    return op


def _pattern(text: str | None, default: PatternType, allowed: tuple[PatternType, ...]) -> PatternType:
    if text is None:
        return default
    try:
        pattern = PatternType[text.upper()]
    except KeyError:
        pattern = PatternType.UNKNOWN
    if pattern not in allowed:
        die(f"--resource-pattern-type {text}: not one of {', '.join(p.name.lower() for p in allowed)}", EXIT_USAGE)
    return pattern


def _resources(topics: list[str] | None, groups: list[str] | None, transactional_ids: list[str] | None,
               cluster: bool) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in topics or ()]
    out += [(ResourceType.GROUP, g) for g in groups or ()]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids or ()]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _principal(text: str, flag: str) -> str:
    if ":" not in text:
        die(f"{flag} {text}: a principal is TYPE:NAME, such as User:alice", EXIT_USAGE)
    return text


def _entries(allow_principal: list[str] | None, deny_principal: list[str] | None, allow_host: list[str] | None,
             deny_host: list[str] | None) -> list[tuple[str, str, AclPermissionType]]:
    """(principal, host, permission) for every principal and host given."""
    out = []
    for principals, hosts, permission, flag in (
        (allow_principal, allow_host, AclPermissionType.ALLOW, "--allow-principal"),
        (deny_principal, deny_host, AclPermissionType.DENY, "--deny-principal"),
    ):
        for principal in principals or ():
            for host in hosts or [WILDCARD]:
                out.append((_principal(principal, flag), host, permission))
    return out


def binding_json(b: AclBinding) -> dict[str, str]:
    return {"resource_type": b.resource_type.name, "resource_name": b.resource_name,
            "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
            "operation": b.operation.name, "permission": b.permission.name}


def _binding_row(b: AclBinding) -> list[str]:
    return [b.resource_type.name, b.resource_name, b.pattern_type.name, b.principal, b.host, b.operation.name,
            b.permission.name]


_COLUMNS = ["ResourceType", "Name", "PatternType", "Principal", "Host", "Operation", "Permission"]


def _describe(b: AclBinding) -> str:
    return (f"{b.permission.name} {b.principal} from {b.host} {b.operation.name} on "
            f"{b.resource_type.name}:{b.resource_name} ({b.pattern_type.name})")


# -- add ---------------------------------------------------------------------------------------------


@app.command("add")
def add(
    topic: TopicsOption = None,
    group: GroupsOption = None,
    transactional_id: TransactionalIdsOption = None,
    cluster: ClusterOption = False,
    resource_pattern_type: PatternTypeOption = None,
    allow_principal: AllowPrincipalOption = None,
    deny_principal: DenyPrincipalOption = None,
    allow_host: AllowHostOption = None,
    deny_host: DenyHostOption = None,
    operation: OperationOption = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add ACLs: every principal, host and operation given, on every resource given."""
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        die("name a resource: --topic, --group, --transactional-id or --cluster", EXIT_USAGE)
    entries = _entries(allow_principal, deny_principal, allow_host, deny_host)
    if not entries:
        die("name a principal: --allow-principal or --deny-principal", EXIT_USAGE)
    if not operation:
        die("name an operation: --operation", EXIT_USAGE)
    operations = [_operation(o) for o in operation]
    pattern = _pattern(resource_pattern_type, PatternType.LITERAL, (PatternType.LITERAL, PatternType.PREFIXED))
    bindings = [AclBinding(rtype, name, pattern, principal, host, op, permission)
                for rtype, name in resources for principal, host, permission in entries for op in operations]
    for b in bindings:
        try:
            b.validate()
        except InvalidAclError as exc:
            die(f"{_describe(b)}: {exc}", EXIT_USAGE)

    async def body(admin: AdminClient) -> list[tuple[int, str | None]]:
        return await admin.create_acls(bindings)

    results = run_admin(bootstrap_server, command_config, body)
    failed = False
    outcome = []
    for b, (code, message) in zip(bindings, results, strict=True):
        entry: dict[str, Any] = binding_json(b)
        if code != ErrorCode.NONE:
            failed = True
            entry.update(error=ErrorCode.for_code(code).name, message=message)
            typer.echo(f"kraftpy: {KafkaError(code, message, subject=_describe(b))}", err=True)
        elif not as_json:
            typer.echo(f"Added ACL: {_describe(b)}")
        outcome.append(entry)
    if as_json:
        emit_json(outcome)
    if failed:
        raise typer.Exit(EXIT_FAILED)


# -- list --------------------------------------------------------------------------------------------


def _filters(resources: list[tuple[ResourceType, str]], pattern: PatternType, principal: str | None = None,
             entries: list[tuple[str, str, AclPermissionType]] | None = None,
             operations: list[AclOperation] | None = None) -> list[AclBindingFilter]:
    patterns = [(rtype, name, pattern) for rtype, name in resources] or [(ResourceType.ANY, None, pattern)]
    who: list[tuple[str | None, str | None, AclPermissionType]] = [
        (p, h, perm) for p, h, perm in entries or ()] or [(principal, None, AclPermissionType.ANY)]
    ops: list[AclOperation] = list(operations or ()) or [AclOperation.ANY]
    return [AclBindingFilter(rtype, name, ptype, p, h, op, perm)
            for rtype, name, ptype in patterns for p, h, perm in who for op in ops]


_FILTER_PATTERNS = (PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY, PatternType.MATCH)


@app.command("list")
def list_acls(
    topic: TopicsOption = None,
    group: GroupsOption = None,
    transactional_id: TransactionalIdsOption = None,
    cluster: ClusterOption = False,
    resource_pattern_type: PatternTypeOption = None,
    principal: Annotated[str | None, typer.Option(
        "--principal", help="Only the ACLs of this principal (User:NAME).", show_default=False)] = None,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the ACLs of the resources given (all ACLs when none is), optionally of one principal."""
    resources = _resources(topic, group, transactional_id, cluster)
    pattern = _pattern(resource_pattern_type, PatternType.LITERAL if resources else PatternType.ANY,
                       _FILTER_PATTERNS)
    if principal is not None:
        _principal(principal, "--principal")
    filters = _filters(resources, pattern, principal)

    async def body(admin: AdminClient) -> list[AclBinding]:
        found: dict[AclBinding, None] = {}
        for f in filters:
            for b in await admin.describe_acls(f):
                found[b] = None
        return list(found)

    bindings = sorted(run_admin(bootstrap_server, command_config, body),
                      key=lambda b: (b.resource_type, b.resource_name, b.pattern_type, b.principal, b.host,
                                     b.operation, b.permission))
    if as_json:
        emit_json([binding_json(b) for b in bindings])
    else:
        emit_table(_COLUMNS, [_binding_row(b) for b in bindings])


# -- remove ------------------------------------------------------------------------------------------


@app.command("remove")
def remove(
    topic: TopicsOption = None,
    group: GroupsOption = None,
    transactional_id: TransactionalIdsOption = None,
    cluster: ClusterOption = False,
    resource_pattern_type: PatternTypeOption = None,
    allow_principal: AllowPrincipalOption = None,
    deny_principal: DenyPrincipalOption = None,
    allow_host: AllowHostOption = None,
    deny_host: DenyHostOption = None,
    operation: OperationOption = None,
    force: Annotated[bool, typer.Option("--force", help="Do not ask for confirmation.")] = False,
    bootstrap_server: BootstrapServerOption = None,
    command_config: CommandConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove the ACLs matching the resources and entries given."""
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        die("name a resource: --topic, --group, --transactional-id or --cluster", EXIT_USAGE)
    pattern = _pattern(resource_pattern_type, PatternType.LITERAL, _FILTER_PATTERNS)
    # A principal without a host removes its ACLs from every host.
    hosts_given = bool(allow_host or deny_host)
    entries: list[Any] = [(p, h if hosts_given else None, perm)
                          for p, h, perm in _entries(allow_principal, deny_principal, allow_host, deny_host)]
    operations = [_operation(o) for o in operation or ()]
    filters = _filters(resources, pattern, None, entries, operations)
    if not force:
        if not is_terminal():
            die("remove deletes ACLs: confirm with --force", EXIT_USAGE)
        names = ", ".join(f"{rtype.name}:{name}" for rtype, name in resources)
        if not typer.confirm(f"Remove the matching ACLs of {names}?"):
            raise typer.Exit(EXIT_FAILED)

    async def body(admin: AdminClient) -> list[tuple[int, str | None, list[AclBinding]]]:
        return await admin.delete_acls(filters)

    results = run_admin(bootstrap_server, command_config, body)
    failed = False
    removed: dict[AclBinding, None] = {}
    errors = []
    for code, message, bindings in results:
        if code != ErrorCode.NONE:
            failed = True
            errors.append({"error": ErrorCode.for_code(code).name, "message": message})
            typer.echo(f"kraftpy: {KafkaError(code, message, subject='ACL filter')}", err=True)
            continue
        for b in bindings:
            removed[b] = None
    if as_json:
        emit_json({"removed": [binding_json(b) for b in removed], "errors": errors})
    else:
        for b in removed:
            typer.echo(f"Removed ACL: {_describe(b)}")
    if failed:
        raise typer.Exit(EXIT_FAILED)
