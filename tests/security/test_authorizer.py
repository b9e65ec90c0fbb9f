"""The authorizer's decisions (Kafka's StandardAuthorizer semantics), ACL validation and filters."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.security.authorizer import (
    ANY_FILTER,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    AuthorizationResult,
    InvalidAclError,
    PatternType,
    ResourceType,
    binding_from_codes,
    parse_super_users,
)

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LITERAL = PatternType.LITERAL
PREFIXED = PatternType.PREFIXED
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
Op = AclOperation


def acl(
    name: str = "orders",
    *,
    principal: str = "User:alice",
    op: AclOperation = Op.READ,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = LITERAL,
    host: str = "*",
    resource_type: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, op, permission)


def index_of(*bindings: AclBinding, **kwargs) -> AclIndex:
    index = AclIndex(**kwargs)
    for binding in bindings:
        index.add(uuid.uuid4(), binding)
    return index


def can(index: AclIndex, op=Op.READ, name="orders", *, principal="User:alice", host="10.0.0.1", rtype=TOPIC):
    return index.authorize(principal, host, op, rtype, name)


# -- wire codes and validation -------------------------------------------------------------------


def test_enums_carry_kafkas_wire_codes():
    assert [(o.name, int(o)) for o in AclOperation] == [
        ("UNKNOWN", 0), ("ANY", 1), ("ALL", 2), ("READ", 3), ("WRITE", 4), ("CREATE", 5), ("DELETE", 6),
        ("ALTER", 7), ("DESCRIBE", 8), ("CLUSTER_ACTION", 9), ("DESCRIBE_CONFIGS", 10), ("ALTER_CONFIGS", 11),
        ("IDEMPOTENT_WRITE", 12), ("CREATE_TOKENS", 13), ("DESCRIBE_TOKENS", 14), ("TWO_PHASE_COMMIT", 15),
    ]  # fmt: skip
    assert [(r.name, int(r)) for r in ResourceType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4), ("TRANSACTIONAL_ID", 5),
        ("DELEGATION_TOKEN", 6), ("USER", 7),
    ]  # fmt: skip
    assert [(p.name, int(p)) for p in PatternType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("MATCH", 2), ("LITERAL", 3), ("PREFIXED", 4),
    ]  # fmt: skip
    assert [(p.name, int(p)) for p in AclPermissionType] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("DENY", 2),
        ("ALLOW", 3),
    ]


def test_binding_from_codes_maps_unknown_codes_to_unknown():
    binding = binding_from_codes(2, "orders", 3, "User:alice", "*", 3, 3)
    assert binding == acl()
    odd = binding_from_codes(99, "orders", 99, "User:alice", "*", 99, 99)
    assert (odd.resource_type, odd.pattern_type, odd.operation, odd.permission) == (
        ResourceType.UNKNOWN,
        PatternType.UNKNOWN,
        AclOperation.UNKNOWN,
        AclPermissionType.UNKNOWN,
    )


def test_a_valid_binding_passes_validation():
    acl().validate()
    acl("kafka-cluster", resource_type=ResourceType.CLUSTER, op=Op.CLUSTER_ACTION).validate()
    acl("app-", pattern=PREFIXED, permission=DENY, host="10.0.0.1").validate()
    acl("*", principal="User:*", op=Op.ALL).validate()


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (acl(resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
        (acl(resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (acl(pattern=PatternType.MATCH), "Invalid patternType MATCH"),
        (acl(pattern=PatternType.ANY), "Invalid patternType ANY"),
        (acl(pattern=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
        (acl(op=Op.ANY), "Invalid operation ANY"),
        (acl(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
        (acl(permission=AclPermissionType.ANY), "Invalid permissionType ANY"),
        (acl(permission=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
        (acl(""), "Resource name should not be empty"),
        (acl("my-cluster", resource_type=ResourceType.CLUSTER), "only valid name for the CLUSTER resource"),
        (acl(principal="alice"), "no colon is present"),
    ],
)
def test_create_acls_refuses_invalid_bindings(binding, message):
    with pytest.raises(InvalidAclError, match=message) as caught:
        binding.validate()
    assert caught.value.error_code.name == "INVALID_REQUEST"


# -- authorize -----------------------------------------------------------------------------------


def test_no_acls_denies_by_default_and_allows_with_allow_everyone_if_no_acl_found():
    assert can(AclIndex()) is DENIED
    assert can(AclIndex(allow_everyone_if_no_acl_found=True)) is ALLOWED


def test_allow_everyone_applies_only_to_resources_without_any_acl():
    index = index_of(acl("orders", principal="User:bob"), allow_everyone_if_no_acl_found=True)
    # orders has an ACL (for bob, not alice): alice is denied even though the default would allow
    assert can(index, name="orders") is DENIED
    assert can(index, name="orders", principal="User:bob") is ALLOWED
    # payments has no ACL at all: the default applies
    assert can(index, name="payments") is ALLOWED
    # an ACL on a group does not make topic orders' lookups different
    assert can(index, name="orders", rtype=GROUP) is ALLOWED


def test_super_users_are_allowed_despite_deny():
    index = index_of(acl(principal="User:admin", op=Op.ALL, permission=DENY), super_users={"User:admin"})
    assert can(index, Op.DELETE, principal="User:admin") is ALLOWED
    assert can(index, Op.ALTER_CONFIGS, name="anything", principal="User:admin") is ALLOWED
    assert parse_super_users(" User:admin; User:ops ;") == {"User:admin", "User:ops"}


def test_deny_wins_over_allow():
    index = index_of(acl(op=Op.READ), acl(op=Op.READ, permission=DENY))
    assert can(index) is DENIED
    # the DENY is on a prefix, the ALLOW literal: still denied
    index = index_of(acl(op=Op.READ), acl("ord", op=Op.READ, permission=DENY, pattern=PREFIXED))
    assert can(index) is DENIED
    # a wildcard DENY for everyone beats a literal ALLOW for alice
    index = index_of(acl(op=Op.WRITE), acl("*", principal="User:*", op=Op.WRITE, permission=DENY))
    assert can(index, Op.WRITE) is DENIED


def test_an_allow_for_another_operation_denies_when_the_resource_has_acls():
    index = index_of(acl(op=Op.WRITE), allow_everyone_if_no_acl_found=True)
    assert can(index, Op.WRITE) is ALLOWED
    assert can(index, Op.READ) is DENIED


def test_literal_acls_match_only_their_exact_name():
    index = index_of(acl("orders"))
    assert can(index, name="orders") is ALLOWED
    assert can(index, name="orders-eu") is DENIED
    assert can(index, name="order") is DENIED
    assert can(index, name="orders", rtype=GROUP) is DENIED


def test_prefixed_acls_match_names_starting_with_them():
    index = index_of(acl("app-", pattern=PREFIXED))
    assert can(index, name="app-") is ALLOWED
    assert can(index, name="app-orders") is ALLOWED
    assert can(index, name="app") is DENIED
    assert can(index, name="xapp-orders") is DENIED


def test_literal_wildcard_matches_every_name_but_prefixed_star_is_just_a_prefix():
    index = index_of(acl("*"))
    assert can(index, name="orders") is ALLOWED
    assert can(index, name="*") is ALLOWED
    index = index_of(acl("*", pattern=PREFIXED))
    assert can(index, name="orders") is DENIED
    assert can(index, name="*-orders") is ALLOWED


def test_prefix_walk_finds_every_prefix_among_neighbours():
    # Kafka's findAclRule example: authorizing topic "foobar" must see 2, 3-no (literal foob), 4 and 7.
    index = index_of(
        acl("gar", pattern=PREFIXED, principal="User:x"),
        acl("foobar", pattern=PREFIXED, op=Op.READ),
        acl("foob", pattern=LITERAL, op=Op.ALL, permission=DENY),
        acl("foo", pattern=PREFIXED, op=Op.WRITE),
        acl("fb", pattern=PREFIXED, op=Op.ALL, permission=DENY),
        acl("fa", pattern=PREFIXED, op=Op.ALL, permission=DENY),
        acl("f", pattern=PREFIXED, op=Op.DELETE),
        acl("eeee", pattern=LITERAL, op=Op.ALL, permission=DENY),
    )
    assert can(index, Op.READ, name="foobar") is ALLOWED  # foobar*
    assert can(index, Op.WRITE, name="foobar") is ALLOWED  # foo*
    assert can(index, Op.DELETE, name="foobar") is ALLOWED  # f*, past fb and fa
    assert can(index, Op.ALTER, name="foobar") is DENIED
    assert can(index, Op.READ, name="foob") is DENIED  # the literal DENY ALL on foob
    assert can(index, Op.DELETE, name="fbz") is DENIED  # fb* DENY
    # add a DENY on the shortest prefix: it must be found past every neighbour
    index.add("deny-f", acl("f", pattern=PREFIXED, op=Op.READ, permission=DENY))
    assert can(index, Op.READ, name="foobar") is DENIED


def test_read_write_delete_alter_imply_describe_only_in_allow_acls():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE):
        assert can(index_of(acl(op=op)), Op.DESCRIBE) is ALLOWED, op
    for op in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.CLUSTER_ACTION, Op.IDEMPOTENT_WRITE):
        assert can(index_of(acl(op=op)), Op.DESCRIBE) is DENIED, op
    # DENY READ does not deny DESCRIBE
    index = index_of(acl(op=Op.DESCRIBE), acl(op=Op.READ, permission=DENY))
    assert can(index, Op.DESCRIBE) is ALLOWED
    assert can(index, Op.READ) is DENIED
    # and DESCRIBE does not imply READ
    assert can(index_of(acl(op=Op.DESCRIBE)), Op.READ) is DENIED


def test_alter_configs_implies_describe_configs_only_in_allow_acls():
    assert can(index_of(acl(op=Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS) is ALLOWED
    assert can(index_of(acl(op=Op.ALTER)), Op.DESCRIBE_CONFIGS) is DENIED
    assert can(index_of(acl(op=Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS) is DENIED
    index = index_of(acl(op=Op.DESCRIBE_CONFIGS), acl(op=Op.ALTER_CONFIGS, permission=DENY))
    assert can(index, Op.DESCRIBE_CONFIGS) is ALLOWED


def test_all_allows_and_denies_every_operation():
    allow_all = index_of(acl(op=Op.ALL))
    deny_all = index_of(acl(op=Op.READ), acl(op=Op.ALL, permission=DENY))
    for op in AclOperation:
        if op in (Op.ANY, Op.UNKNOWN):
            continue
        assert can(allow_all, op) is ALLOWED, op
        assert can(deny_all, op) is DENIED, op


def test_wildcard_principal_applies_to_every_user_and_only_user_star_is_a_wildcard():
    index = index_of(acl(principal="User:*"))
    assert can(index, principal="User:bob") is ALLOWED
    assert can(index, principal="Group:devs") is ALLOWED  # Kafka matches User:* for any principal
    index = index_of(acl(principal="Group:*"))
    assert can(index, principal="Group:devs") is DENIED


def test_host_must_match_exactly_or_be_the_wildcard():
    index = index_of(acl(host="10.0.0.1"))
    assert can(index, host="10.0.0.1") is ALLOWED
    assert can(index, host="10.0.0.2") is DENIED
    index = index_of(acl(host="*"), acl(host="10.0.0.9", permission=DENY))
    assert can(index, host="10.0.0.1") is ALLOWED
    assert can(index, host="10.0.0.9") is DENIED


def test_kafka_documented_example_bob_and_wildcard_deny_from_one_host():
    # "Principals User:Bob and User:Alice are allowed to perform Read and Write on Topic Test-Topic
    #  from IP 198.51.100.0 and 198.51.100.1"; "all users except BadBob may read, from any host".
    index = index_of(
        *(
            acl("Test-Topic", principal=p, op=op, host=h)
            for p in ("User:Bob", "User:Alice")
            for op in (Op.READ, Op.WRITE)
            for h in ("198.51.100.0", "198.51.100.1")
        ),
        acl("Other", principal="User:*", op=Op.READ),
        acl("Other", principal="User:BadBob", op=Op.READ, permission=DENY, host="198.51.100.3"),
    )
    assert can(index, Op.WRITE, "Test-Topic", principal="User:Bob", host="198.51.100.1") is ALLOWED
    assert can(index, Op.WRITE, "Test-Topic", principal="User:Bob", host="198.51.100.2") is DENIED
    assert can(index, Op.DESCRIBE, "Test-Topic", principal="User:Alice", host="198.51.100.0") is ALLOWED
    assert can(index, Op.READ, "Test-Topic", principal="User:Carol", host="198.51.100.0") is DENIED
    assert can(index, Op.READ, "Other", principal="User:Carol") is ALLOWED
    assert can(index, Op.READ, "Other", principal="User:BadBob", host="198.51.100.3") is DENIED
    assert can(index, Op.READ, "Other", principal="User:BadBob", host="198.51.100.4") is ALLOWED


def test_decide_names_the_rule_that_decided():
    deny = acl(op=Op.WRITE, permission=DENY)
    allow = acl(op=Op.READ)
    index = index_of(deny, allow, super_users={"User:root"}, allow_everyone_if_no_acl_found=True)
    assert str(index.decide("User:root", "h", Op.WRITE, TOPIC, "orders")) == "SuperUser"
    decision = index.decide("User:alice", "h", Op.WRITE, TOPIC, "orders")
    assert (decision.result, decision.acl) == (DENIED, deny)
    assert str(decision).startswith("MatchingAcl(acl=AclBinding(")
    decision = index.decide("User:alice", "h", Op.DESCRIBE, TOPIC, "orders")
    assert (decision.result, decision.acl) == (ALLOWED, allow)
    assert str(index.decide("User:alice", "h", Op.CREATE, TOPIC, "orders")) == "DefaultDeny"
    assert str(index.decide("User:alice", "h", Op.CREATE, TOPIC, "payments")) == "DefaultAllow"


def test_remove_by_id_undoes_add_and_unknown_ids_raise():
    index = AclIndex()
    deny = acl(permission=DENY)
    index.add("allow", acl())
    index.add("deny", deny)
    assert can(index) is DENIED
    assert index.remove("deny") == deny
    assert can(index) is ALLOWED
    index.remove("allow")
    assert len(index) == 0 and can(index) is DENIED
    with pytest.raises(KeyError):
        index.remove("allow")


def test_the_same_binding_under_two_ids_stays_until_both_are_removed():
    index = AclIndex()
    index.add(1, acl("app-", pattern=PREFIXED))
    index.add(2, acl("app-", pattern=PREFIXED))
    index.remove(1)
    assert can(index, name="app-x") is ALLOWED
    index.remove(2)
    assert can(index, name="app-x") is DENIED


def test_re_adding_an_id_replaces_its_binding():
    index = AclIndex()
    index.add(1, acl("orders"))
    index.add(1, acl("payments"))
    assert len(index) == 1
    assert can(index, name="orders") is DENIED
    assert can(index, name="payments") is ALLOWED


def test_filter_only_operations_and_resource_types_are_not_actions():
    with pytest.raises(ValueError):
        can(AclIndex(), Op.ANY)
    with pytest.raises(ValueError):
        can(AclIndex(), rtype=ResourceType.ANY)


# -- authorize_by_resource_type (Kafka's Authorizer.authorizeByResourceType) ------------------------


def by_type(index, op=Op.WRITE, *, principal="User:alice", host="10.0.0.1", rtype=TOPIC):
    return index.authorize_by_resource_type(principal, host, op, rtype)


def test_by_type_allowed_when_any_resource_of_the_type_is_allowed():
    index = index_of(acl("orders", op=Op.WRITE))
    assert by_type(index) is ALLOWED
    assert by_type(index, Op.READ) is DENIED
    assert by_type(index, rtype=ResourceType.TRANSACTIONAL_ID) is DENIED
    assert by_type(index, principal="User:bob") is DENIED


def test_by_type_deny_of_the_same_literal_or_a_covering_prefix_dominates():
    assert (
        by_type(index_of(acl("orders", op=Op.WRITE), acl("orders", op=Op.WRITE, permission=DENY))) is DENIED
    )
    assert (
        by_type(
            index_of(acl("orders", op=Op.WRITE), acl("ord", op=Op.WRITE, permission=DENY, pattern=PREFIXED))
        )
        is DENIED
    )
    prefixed = acl("app-", op=Op.WRITE, pattern=PREFIXED)
    assert by_type(index_of(prefixed, acl("app", op=Op.WRITE, permission=DENY, pattern=PREFIXED))) is DENIED
    # a literal DENY on the prefix's own name does not dominate the prefix (app-x is still writable)
    assert by_type(index_of(prefixed, acl("app-", op=Op.WRITE, permission=DENY))) is ALLOWED
    # an unrelated DENY does not dominate
    assert (
        by_type(
            index_of(acl("orders", op=Op.WRITE), acl("pay", op=Op.WRITE, permission=DENY, pattern=PREFIXED))
        )
        is ALLOWED
    )


def test_by_type_wildcards_all_operation_host_and_principal():
    assert by_type(index_of(acl("*", op=Op.WRITE))) is ALLOWED
    assert by_type(index_of(acl("orders", op=Op.WRITE), acl("*", op=Op.WRITE, permission=DENY))) is DENIED
    assert by_type(index_of(acl("orders", op=Op.ALL))) is ALLOWED
    assert by_type(index_of(acl("orders", op=Op.WRITE, principal="User:*"))) is ALLOWED
    assert by_type(index_of(acl("orders", op=Op.WRITE, host="10.0.0.1"))) is ALLOWED
    assert by_type(index_of(acl("orders", op=Op.WRITE, host="10.0.0.2"))) is DENIED
    # implied operations do not count here (Kafka compares the operation exactly)
    assert by_type(index_of(acl("orders", op=Op.WRITE)), Op.DESCRIBE) is DENIED


def test_by_type_wildcard_deny_beats_wildcard_allow_whatever_the_order():
    for principals in (("User:alice", "User:*"), ("User:*", "User:alice")):
        allow_for, deny_for = principals
        index = index_of(
            acl("*", op=Op.WRITE, principal=allow_for),
            acl("*", op=Op.WRITE, principal=deny_for, permission=DENY),
            acl("orders", op=Op.WRITE),
        )
        assert by_type(index) is DENIED, principals


def test_by_type_super_users_and_allow_everyone():
    deny_all = acl("*", op=Op.ALL, permission=DENY, principal="User:*")
    assert by_type(index_of(deny_all, super_users={"User:alice"})) is ALLOWED
    assert by_type(AclIndex(allow_everyone_if_no_acl_found=True)) is ALLOWED
    assert by_type(AclIndex()) is DENIED
    # IdempotentWrite as InitProducerId checks it: on the cluster
    cluster = acl("kafka-cluster", op=Op.IDEMPOTENT_WRITE, resource_type=ResourceType.CLUSTER)
    assert by_type(index_of(cluster), Op.IDEMPOTENT_WRITE, rtype=ResourceType.CLUSTER) is ALLOWED


# -- DescribeAcls / DeleteAcls filters -----------------------------------------------------------


FILTER_ACLS = {
    "lit": acl("orders"),
    "lit-other": acl("payments"),
    "wild": acl("*"),
    "pre": acl("ord", pattern=PREFIXED),
    "pre-other": acl("pay", pattern=PREFIXED),
    "grp": acl("orders", resource_type=GROUP, principal="User:bob", op=Op.DESCRIBE, permission=DENY),
}


def filter_index() -> AclIndex:
    index = AclIndex()
    for acl_id, binding in FILTER_ACLS.items():
        index.add(acl_id, binding)
    return index


def ids(index: AclIndex, acl_filter: AclBindingFilter) -> set[str]:
    [matched] = index.to_delete([acl_filter])
    assert {FILTER_ACLS[i] for i, _ in matched} == set(index.describe(acl_filter))
    return {i for i, _ in matched}


@pytest.mark.parametrize(
    ("acl_filter", "expected"),
    [
        (ANY_FILTER, set(FILTER_ACLS)),
        (AclBindingFilter(resource_type=TOPIC), {"lit", "lit-other", "wild", "pre", "pre-other"}),
        (AclBindingFilter(resource_name="orders"), {"lit", "grp"}),
        (AclBindingFilter(resource_name="ord"), {"pre"}),
        (AclBindingFilter(resource_name="orders", pattern_type=PREFIXED), set()),
        (AclBindingFilter(resource_name="ord", pattern_type=PREFIXED), {"pre"}),
        (AclBindingFilter(pattern_type=LITERAL), {"lit", "lit-other", "wild", "grp"}),
        (AclBindingFilter(resource_type=TOPIC, resource_name="orders", pattern_type=PatternType.MATCH),
         {"lit", "wild", "pre"}),
        (AclBindingFilter(resource_name="*", pattern_type=PatternType.MATCH), {"wild"}),
        (AclBindingFilter(principal="User:bob"), {"grp"}),
        (AclBindingFilter(permission=DENY), {"grp"}),
        (AclBindingFilter(operation=Op.DESCRIBE), {"grp"}),
        (AclBindingFilter(host="10.0.0.1"), set()),
    ],
)  # fmt: skip
def test_filters_match_as_kafkas_acl_binding_filter(acl_filter, expected):
    assert ids(filter_index(), acl_filter) == expected


def test_to_delete_lists_per_filter_and_leaves_the_index_unchanged():
    index = filter_index()
    matched = index.to_delete(
        [AclBindingFilter(resource_name="orders"), AclBindingFilter(principal="User:bob")]
    )
    assert [{i for i, _ in m} for m in matched] == [{"lit", "grp"}, {"grp"}]
    assert len(index) == len(FILTER_ACLS)


@pytest.mark.parametrize(
    "acl_filter",
    [
        AclBindingFilter(resource_type=ResourceType.UNKNOWN),
        AclBindingFilter(pattern_type=PatternType.UNKNOWN),
        AclBindingFilter(operation=Op.UNKNOWN),
        AclBindingFilter(permission=AclPermissionType.UNKNOWN),
    ],
)
def test_delete_refuses_filters_with_unknown_fields(acl_filter):
    with pytest.raises(InvalidAclError):
        filter_index().to_delete([acl_filter])


# -- property: the index decides exactly as a scan of every ACL ----------------------------------


def reference_authorize(bindings, super_users, default_allow, principal, host, op, rtype, name):
    """Kafka's rules written as plainly as possible: scan every ACL."""
    if principal in super_users:
        return ALLOWED

    def pattern_matches(b):
        if b.resource_type is not rtype:
            return False
        if b.pattern_type is LITERAL:
            return b.resource_name == name or b.resource_name == "*"
        return name.startswith(b.resource_name)

    def applies(b):
        if b.principal not in (principal, "User:*") or b.host not in ("*", host):
            return False
        if b.operation in (Op.ALL, op):
            return True
        if b.permission is ALLOW and op is Op.DESCRIBE:
            return b.operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
        if b.permission is ALLOW and op is Op.DESCRIBE_CONFIGS:
            return b.operation is Op.ALTER_CONFIGS
        return False

    on_resource = [b for b in bindings if pattern_matches(b)]
    applying = [b for b in on_resource if applies(b)]
    if any(b.permission is DENY for b in applying):
        return DENIED
    if applying:
        return ALLOWED
    if on_resource:
        return DENIED
    return ALLOWED if default_allow else DENIED


# Small alphabets and few operations so that random ACLs overlap: nested prefixes, shared names, the
# wildcard, implied operations and ALL all meet in most examples.
names = st.text(alphabet="ab*", min_size=1, max_size=3)
principals = st.sampled_from(["User:alice", "User:bob", "User:*", "Group:alice"])
hosts = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
operations = st.sampled_from(
    [Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]
)
resource_types = st.sampled_from([TOPIC, GROUP])
bindings = st.builds(
    AclBinding,
    resource_type=resource_types,
    resource_name=names,
    pattern_type=st.sampled_from([LITERAL, PREFIXED]),
    principal=principals,
    host=hosts,
    operation=operations,
    permission=st.sampled_from([ALLOW, DENY]),
)


@settings(max_examples=400, deadline=None)
@given(
    acls=st.lists(bindings, max_size=40),
    removed=st.sets(st.integers(min_value=0, max_value=39)),
    default_allow=st.booleans(),
    super_user=st.booleans(),
    queries=st.lists(
        st.tuples(st.sampled_from(["User:alice", "User:bob"]), hosts.filter(lambda h: h != "*"),
                  operations, resource_types, names),
        min_size=1,
        max_size=40,
    ),
)  # fmt: skip
def test_index_agrees_with_a_scan_of_every_acl(acls, removed, default_allow, super_user, queries):
    super_users = {"User:bob"} if super_user else set()
    index = AclIndex(super_users=super_users, allow_everyone_if_no_acl_found=default_allow)
    for i, binding in enumerate(acls):
        index.add(i, binding)
    for i in removed:
        if i < len(acls):
            index.remove(i)
    live = [b for i, b in enumerate(acls) if i not in removed]
    for principal, host, op, rtype, name in queries:
        expected = reference_authorize(live, super_users, default_allow, principal, host, op, rtype, name)
        assert index.authorize(principal, host, op, rtype, name) is expected, (
            principal,
            host,
            op,
            rtype,
            name,
        )
        decision = index.decide(principal, host, op, rtype, name)
        if decision.acl is not None:  # the ACL named in the audit log is a live one that applies
            assert decision.acl in live
            assert decision.acl.principal in (principal, "User:*") and decision.acl.host in ("*", host)
            assert (decision.acl.permission is ALLOW) == (decision.result is ALLOWED)
    assert sorted(map(repr, index.describe(ANY_FILTER))) == sorted(map(repr, live))


def reference_by_resource_type(bindings, super_users, default_allow, principal, host, op, rtype):
    """Kafka's Authorizer.authorizeByResourceType over a plain list of every ACL."""
    if (
        reference_authorize(bindings, super_users, default_allow, principal, host, op, rtype, "hardcode")
        is ALLOWED
    ):
        return ALLOWED
    mine = [
        b
        for b in bindings
        if b.resource_type is rtype
        and b.principal in (principal, "User:*")
        and b.host in ("*", host)
        and b.operation in (op, Op.ALL)
    ]
    if any(b.permission is DENY and b.pattern_type is LITERAL and b.resource_name == "*" for b in mine):
        return DENIED
    if any(b.permission is ALLOW and b.pattern_type is LITERAL and b.resource_name == "*" for b in mine):
        return ALLOWED
    denies = [b for b in mine if b.permission is DENY]
    for allow in (b for b in mine if b.permission is ALLOW):
        dominated = any(
            (d.pattern_type is PREFIXED and allow.resource_name.startswith(d.resource_name))
            or (
                d.pattern_type is LITERAL
                and allow.pattern_type is LITERAL
                and d.resource_name == allow.resource_name
            )
            for d in denies
        )
        if not dominated:
            return ALLOWED
    return DENIED


# Fewer principals, hosts and operations than above, so that ALLOWs and the DENYs that may dominate
# them are for the same caller and operation in most examples.
by_type_bindings = st.builds(
    AclBinding,
    resource_type=resource_types,
    resource_name=names,
    pattern_type=st.sampled_from([LITERAL, PREFIXED]),
    principal=st.sampled_from(["User:alice", "User:*", "User:bob"]),
    host=st.sampled_from(["*", "10.0.0.1"]),
    operation=st.sampled_from([Op.ALL, Op.READ, Op.WRITE]),
    permission=st.sampled_from([ALLOW, DENY]),
)


@settings(max_examples=400, deadline=None)
@given(
    acls=st.lists(by_type_bindings, max_size=30),
    default_allow=st.booleans(),
    queries=st.lists(
        st.tuples(st.sampled_from(["User:alice", "User:bob"]), st.sampled_from(["10.0.0.1", "10.0.0.2"]),
                  st.sampled_from([Op.READ, Op.WRITE]), resource_types),
        min_size=1,
        max_size=20,
    ),
)  # fmt: skip
def test_by_resource_type_agrees_with_kafkas_rule_over_a_plain_list(acls, default_allow, queries):
    index = AclIndex(allow_everyone_if_no_acl_found=default_allow)
    for i, binding in enumerate(acls):
        index.add(i, binding)
    for principal, host, op, rtype in queries:
        expected = reference_by_resource_type(acls, set(), default_allow, principal, host, op, rtype)
        assert index.authorize_by_resource_type(principal, host, op, rtype) is expected, (
            principal,
            host,
            op,
            rtype,
        )
