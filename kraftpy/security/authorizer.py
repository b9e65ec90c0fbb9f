"""ACL bindings and the decisions of an authorizer with Kafka's StandardAuthorizer semantics. Pure.

Theory of operation
-------------------
An ACL binding says: *principal* from *host* is ALLOWed (or DENYed) *operation* on the resources of
*resource type* whose name is *resource name* (LITERAL pattern; the literal name ``*`` is the wildcard
that matches every name) or starts with it (PREFIXED pattern). The metadata log carries each binding as
an AccessControlEntryRecord with an id; a RemoveAccessControlEntryRecord removes it by that id.
``AclIndex.add`` / ``AclIndex.remove`` are what replaying those records calls; nothing else mutates it.

``AclIndex.authorize(principal, host, operation, resource_type, name)`` decides, in this order:

1. a principal listed in ``super.users`` is ALLOWED, whatever the ACLs say;
2. the ACLs *of the resource* are those of its type whose pattern matches its name: the literal ACLs of
   that exact name, the literal wildcard ``*`` ACLs, and the prefixed ACLs whose name is a prefix of it;
3. among them, an ACL *applies* when its principal is the caller's or ``User:*``, its host is the
   caller's address or ``*``, and its operation is the requested one or ALL; an ALLOW ACL also applies
   to DESCRIBE when its operation is READ, WRITE, DELETE or ALTER, and to DESCRIBE_CONFIGS when it is
   ALTER_CONFIGS (a DENY ACL for READ does *not* deny DESCRIBE);
4. any applying DENY wins: DENIED; otherwise any applying ALLOW: ALLOWED;
5. no applying ACL: DENIED if the resource has any ACL at all (for anybody, any operation), else the
   default, ALLOWED only with ``allow.everyone.if.no.acl.found=true``.

Lookup cost: per resource type, literal ACLs sit in a dict by name and prefixed ACLs in a list of their
distinct names kept sorted, each name holding its ACLs by principal. A decision touches the literal name,
the wildcard, and the prefixes of the name found by a bisect walk over the sorted names (Kafka's
``StandardAuthorizerData.findAclRule`` walk), then only the caller's and ``User:*``'s ACLs there: its cost
does not grow with the number of ACLs on other resources or for other principals. A second index by
(resource type, principal) serves ``authorize_by_resource_type``, which reads only the caller's and
``User:*``'s ACLs of that type.

``decide`` is the same decision with the rule behind it (SuperUser, MatchingAcl with the ACL,
DefaultAllow, DefaultDeny), for an audit log line as Kafka writes one.

``authorize_by_resource_type`` is Kafka's ``Authorizer.authorizeByResourceType`` (used for
IdempotentWrite and similar "on any resource of this type" checks). ``describe(filter)`` answers a
DescribeAcls filter and ``to_delete(filters)`` lists, per DeleteAcls filter, the ids and bindings a
delete would remove: the controller turns those ids into RemoveAccessControlEntryRecords and the replay
removes them, so the index itself is only changed by replay.

The numeric codes of every enum are Kafka's wire codes (AclOperation, ResourceType, PatternType,
AclPermissionType).
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Hashable, Iterable, Mapping

import attrs

from kraftpy.protocol.errors import ErrorCode

#: The resource name (LITERAL) and host that match any name or host.
WILDCARD = "*"
#: The principal that matches every user.
WILDCARD_PRINCIPAL = "User:*"
#: The only name a CLUSTER resource has.
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: every pattern that would match the filter's name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


class AuthorizationResult(enum.Enum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"


@attrs.frozen
class Decision:
    """A result and the rule behind it: ``SuperUser``, ``MatchingAcl`` (with the ACL), ``DefaultAllow`` or
    ``DefaultDeny`` (no ACL applied: the resource had none and the default says so, or it had some)."""

    result: AuthorizationResult
    rule: str
    acl: AclBinding | None = None

    def __str__(self) -> str:
        return f"MatchingAcl(acl={self.acl})" if self.acl is not None else self.rule


SUPER_USER = Decision(AuthorizationResult.ALLOWED, "SuperUser")
DEFAULT_ALLOW = Decision(AuthorizationResult.ALLOWED, "DefaultAllow")
DEFAULT_DENY = Decision(AuthorizationResult.DENIED, "DefaultDeny")


#: An ALLOW ACL for one of these operations also allows DESCRIBE.
IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
#: An ALLOW ACL for one of these operations also allows DESCRIBE_CONFIGS.
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


class InvalidAclError(Exception):
    """A binding or filter a CreateAcls / DeleteAcls request may not carry; answered INVALID_REQUEST."""

    error_code = ErrorCode.INVALID_REQUEST


@attrs.frozen
class AclBinding:
    """One ACL: who may (or may not) do what on which resources."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def validate(self) -> None:
        """Raise InvalidAclError for what Kafka's CreateAcls refuses (the broker's and the controller's checks)."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAclError(f"Invalid resourceType {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"Invalid patternType {self.pattern_type.name}")
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidAclError(f"Invalid operation {self.operation.name}")
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"Invalid permissionType {self.permission.name}")
        if not self.resource_name:
            raise InvalidAclError("Resource name should not be empty")
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if ":" not in self.principal:
            raise InvalidAclError(
                f"Could not parse principal from `{self.principal}` "
                "(no colon is present separating the principal type from the principal name)"
            )


def binding_from_codes(
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding:
    """A binding from wire codes; a code Kafka does not define becomes UNKNOWN (refused by validate())."""
    return AclBinding(
        resource_type=_enum_or_unknown(ResourceType, resource_type),
        resource_name=resource_name,
        pattern_type=_enum_or_unknown(PatternType, pattern_type),
        principal=principal,
        host=host,
        operation=_enum_or_unknown(AclOperation, operation),
        permission=_enum_or_unknown(AclPermissionType, permission),
    )


def _enum_or_unknown(kind, code: int):
    try:
        return kind(code)
    except ValueError:
        return kind.UNKNOWN


@attrs.frozen
class AclBindingFilter:
    """Kafka's AclBindingFilter: None / ANY fields match everything (DescribeAcls, DeleteAcls).

    ``pattern_type`` ANY compares names exactly across both pattern types; MATCH selects every binding that
    would apply to a resource named ``resource_name`` (the literal of that name, the literal wildcard and
    the prefixes of it); LITERAL / PREFIXED select that pattern type only, names compared exactly.
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        """Raise InvalidAclError for a filter with an unknown field (what DeleteAcls refuses)."""
        if self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN:
            raise InvalidAclError("Unknown patternFilter.")
        if self.operation is AclOperation.UNKNOWN or self.permission is AclPermissionType.UNKNOWN:
            raise InvalidAclError("Unknown entryFilter.")

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding) and self._matches_entry(binding)

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not binding.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, binding.pattern_type):
            return self.resource_name == binding.resource_name
        # MATCH: does the binding's pattern match a resource of this name?
        if binding.pattern_type is PatternType.LITERAL:
            return binding.resource_name in (self.resource_name, WILDCARD)
        if binding.pattern_type is PatternType.PREFIXED:
            return self.resource_name.startswith(binding.resource_name)
        return False

    def _matches_entry(self, binding: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == binding.principal)
            and (self.host is None or self.host == binding.host)
            and (self.operation is AclOperation.ANY or self.operation is binding.operation)
            and (self.permission is AclPermissionType.ANY or self.permission is binding.permission)
        )


#: A filter matching every binding.
ANY_FILTER = AclBindingFilter()


def acl_applies(binding: AclBinding, principals: Iterable[str], host: str, operation: AclOperation) -> bool:
    """Whether ``binding`` (whose resource pattern is known to match) applies to this caller and operation."""
    if binding.principal not in principals:
        return False
    if binding.host != WILDCARD and binding.host != host:
        return False
    if binding.operation is AclOperation.ALL or binding.operation is operation:
        return True
    if binding.permission is AclPermissionType.ALLOW:
        if operation is AclOperation.DESCRIBE:
            return binding.operation in IMPLIES_DESCRIBE
        if operation is AclOperation.DESCRIBE_CONFIGS:
            return binding.operation in IMPLIES_DESCRIBE_CONFIGS
    return False


class _ByPrincipal:
    """The ACLs of one (resource type, pattern type, name): by principal, each as {acl id: binding}."""

    __slots__ = ("by_principal", "count")

    def __init__(self) -> None:
        self.by_principal: dict[str, dict[Hashable, AclBinding]] = {}
        self.count = 0


class _TypeSection:
    """The ACLs of one resource type.

    Invariant: ``prefix_names`` is sorted and holds exactly the keys of ``prefixed``; no bucket is empty.
    """

    __slots__ = ("literal", "prefixed", "prefix_names")

    def __init__(self) -> None:
        self.literal: dict[str, _ByPrincipal] = {}
        self.prefixed: dict[str, _ByPrincipal] = {}
        self.prefix_names: list[str] = []

    def prefixes_of(self, name: str) -> Iterable[_ByPrincipal]:
        """The buckets of the prefixed names that are prefixes of ``name``, longest first.

        Walk (as Kafka's findAclRule): the largest stored name <= key is either a prefix of ``name`` (a
        match; continue with the shorter prefixes) or shares only ``m`` leading characters with it, in
        which case no stored name between it and ``name`` is a prefix longer than ``m`` and the search
        continues below it with key ``name[:m]``. Each step shortens the key.
        """
        names = self.prefix_names
        key = name
        hi = len(names)
        while key and hi > 0:
            i = bisect.bisect_right(names, key, 0, hi) - 1
            if i < 0:
                return
            candidate = names[i]
            common = _common_prefix_length(candidate, name)
            if common == len(candidate):
                yield self.prefixed[candidate]
                key = name[: common - 1]
            else:
                key = name[:common]
            hi = i


def _common_prefix_length(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class AclIndex:
    """The current ACLs, indexed for decisions; changed only by replaying ACL records (add / remove)."""

    def __init__(
        self,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._by_id: dict[Hashable, AclBinding] = {}
        self._sections: dict[ResourceType, _TypeSection] = {}
        # For authorize_by_resource_type, which looks at every ACL of one type for the caller.
        self._by_type_principal: dict[tuple[ResourceType, str], dict[Hashable, AclBinding]] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, acl_id: Hashable) -> AclBinding | None:
        return self._by_id.get(acl_id)

    def items(self) -> list[tuple[Hashable, AclBinding]]:
        return list(self._by_id.items())

    # -- replay -----------------------------------------------------------------------------------

    def add(self, acl_id: Hashable, binding: AclBinding) -> None:
        """Replay of an AccessControlEntryRecord. Re-adding an id replaces its binding."""
        if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"ACL {acl_id}: pattern type {binding.pattern_type.name} cannot be stored")
        if not binding.resource_name:
            raise ValueError(f"ACL {acl_id}: empty resource name")
        if acl_id in self._by_id:
            self.remove(acl_id)
        self._by_id[acl_id] = binding
        section = self._sections.get(binding.resource_type)
        if section is None:
            section = self._sections[binding.resource_type] = _TypeSection()
        if binding.pattern_type is PatternType.LITERAL:
            bucket = section.literal.get(binding.resource_name)
            if bucket is None:
                bucket = section.literal[binding.resource_name] = _ByPrincipal()
        else:
            bucket = section.prefixed.get(binding.resource_name)
            if bucket is None:
                bucket = section.prefixed[binding.resource_name] = _ByPrincipal()
                bisect.insort(section.prefix_names, binding.resource_name)
        bucket.by_principal.setdefault(binding.principal, {})[acl_id] = binding
        bucket.count += 1
        self._by_type_principal.setdefault((binding.resource_type, binding.principal), {})[acl_id] = binding

    def remove(self, acl_id: Hashable) -> AclBinding:
        """Replay of a RemoveAccessControlEntryRecord; KeyError if no ACL has that id."""
        binding = self._by_id.pop(acl_id)
        section = self._sections[binding.resource_type]
        table = section.literal if binding.pattern_type is PatternType.LITERAL else section.prefixed
        bucket = table[binding.resource_name]
        entries = bucket.by_principal[binding.principal]
        del entries[acl_id]
        if not entries:
            del bucket.by_principal[binding.principal]
        bucket.count -= 1
        if bucket.count == 0:
            del table[binding.resource_name]
            if binding.pattern_type is PatternType.PREFIXED:
                names = section.prefix_names
                del names[bisect.bisect_left(names, binding.resource_name)]
        if not section.literal and not section.prefixed:
            del self._sections[binding.resource_type]
        same_caller = self._by_type_principal[(binding.resource_type, binding.principal)]
        del same_caller[acl_id]
        if not same_caller:
            del self._by_type_principal[(binding.resource_type, binding.principal)]
        return binding

    def apply_changes(self, changed: Mapping[Hashable, AclBinding | None]) -> None:
        """Replay of a delta's ACL changes (``MetadataDelta.changed_acls``): None removes the id."""
        for acl_id, binding in changed.items():
            if binding is None:
                if acl_id in self._by_id:
                    self.remove(acl_id)
            else:
                self.add(acl_id, binding)

    # -- decisions --------------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> AuthorizationResult:
        """May ``principal`` connected from ``host`` do ``operation`` on the resource ``resource_type:name``?"""
        return self.decide(principal, host, operation, resource_type, name).result

    def decide(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> Decision:
        """``authorize`` with the rule that decided, for the audit log (Kafka's "based on rule ...")."""
        _check_action(operation, resource_type)
        if principal in self.super_users:
            return SUPER_USER
        section = self._sections.get(resource_type)
        if section is None:
            return self._no_acl_decision()
        principals = _matching_principals(principal)
        has_resource_acls = False
        allowed_by: AclBinding | None = None
        for bucket in self._buckets_for(section, name):
            has_resource_acls = True
            for who in principals:
                for binding in bucket.by_principal.get(who, {}).values():
                    if acl_applies(binding, principals, host, operation):
                        if binding.permission is AclPermissionType.DENY:
                            return Decision(AuthorizationResult.DENIED, "MatchingAcl", binding)
                        allowed_by = binding
        if allowed_by is not None:
            return Decision(AuthorizationResult.ALLOWED, "MatchingAcl", allowed_by)
        if has_resource_acls:
            return DEFAULT_DENY
        return self._no_acl_decision()

    def authorize_by_resource_type(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> AuthorizationResult:
        """May ``principal`` do ``operation`` on at least one resource of ``resource_type``? (Kafka's rule.)

        ALLOWED when a resource of an unused name would be (super user, a wildcard ALLOW, or
        ``allow.everyone.if.no.acl.found`` with no ACL on it); otherwise when some literal or prefixed
        ALLOW of exactly this operation (or ALL) for the caller is not dominated by a DENY: a literal
        DENY of the same name, a prefixed DENY on a prefix of its name, or a literal wildcard DENY.
        Implied operations do not count here, as in Kafka.
        """
        _check_action(operation, resource_type)
        if (
            self.authorize(principal, host, operation, resource_type, "hardcode")
            is AuthorizationResult.ALLOWED
        ):
            return AuthorizationResult.ALLOWED
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        wildcard_allow = False
        for who in _matching_principals(principal):
            for binding in self._by_type_principal.get((resource_type, who), {}).values():
                if binding.host != WILDCARD and binding.host != host:
                    continue
                if binding.operation is not operation and binding.operation is not AclOperation.ALL:
                    continue
                name = binding.resource_name
                literal = binding.pattern_type is PatternType.LITERAL
                if binding.permission is AclPermissionType.DENY:
                    if literal and name == WILDCARD:
                        return AuthorizationResult.DENIED
                    (deny_literal if literal else deny_prefixed).add(name)
                elif literal and name == WILDCARD:
                    wildcard_allow = True
                else:
                    allow.append((binding.pattern_type, name))
        if wildcard_allow:
            return AuthorizationResult.ALLOWED
        for pattern_type, name in allow:
            if pattern_type is PatternType.LITERAL and name in deny_literal:
                continue
            if any(name[:k] in deny_prefixed for k in range(1, len(name) + 1)):
                continue
            return AuthorizationResult.ALLOWED
        return AuthorizationResult.DENIED

    def _buckets_for(self, section: _TypeSection, name: str) -> Iterable[_ByPrincipal]:
        literal = section.literal.get(name)
        if literal is not None:
            yield literal
        if name != WILDCARD:
            wildcard = section.literal.get(WILDCARD)
            if wildcard is not None:
                yield wildcard
        yield from section.prefixes_of(name)

    def _no_acl_decision(self) -> Decision:
        return DEFAULT_ALLOW if self.allow_everyone_if_no_acl_found else DEFAULT_DENY

    # -- DescribeAcls / DeleteAcls ----------------------------------------------------------------

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings a DescribeAcls with this filter returns."""
        return [binding for _, binding in self._matching(acl_filter)]

    def to_delete(self, filters: Iterable[AclBindingFilter]) -> list[list[tuple[Hashable, AclBinding]]]:
        """Per DeleteAcls filter, the (id, binding) pairs it removes; the index is not changed here.

        A binding matched by several filters is listed under each, as Kafka's response does; its id is
        removed once. Raises InvalidAclError for an unknown filter field (the caller answers that filter
        alone with the error).
        """
        result = []
        for acl_filter in filters:
            acl_filter.validate()
            result.append(self._matching(acl_filter))
        return result

    def _matching(self, acl_filter: AclBindingFilter) -> list[tuple[Hashable, AclBinding]]:
        return [(acl_id, binding) for acl_id, binding in self._by_id.items() if acl_filter.matches(binding)]


def _matching_principals(principal: str) -> tuple[str, ...]:
    return (principal,) if principal == WILDCARD_PRINCIPAL else (principal, WILDCARD_PRINCIPAL)


def _check_action(operation: AclOperation, resource_type: ResourceType) -> None:
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ValueError(f"an action needs a concrete operation, not {operation.name}")
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ValueError(f"an action needs a concrete resource type, not {resource_type.name}")


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons, e.g. ``User:admin;User:ops``."""
    return frozenset(part.strip() for part in value.split(";") if part.strip())
