"""Client quotas: AlterClientQuotas (the controller's, as ClientQuotaRecords) and DescribeClientQuotas
(a read of any image, which brokers answer from their own).

An entity is a set of (entity type, name) parts, ``user`` and/or ``client-id``, a None name standing
for that type's default: ``/users/alice``, ``/users/<default>/clients/app``, ``/clients/<default>``.
Kafka's ClientQuotaControlManager rules: an entity is refused whole (INVALID_REQUEST, nothing of it
written) when it is empty, names a type twice or an unknown type, has an empty name, or one of its
operations names a key that is not a client quota or gives an integral key (the byte rates) a value
that is not an integer; entities are decided one by one. Keys and types:

==========================  ==========  ===============================================
key                         type        meaning
==========================  ==========  ===============================================
producer_byte_rate          long        bytes/s of Produce requests
consumer_byte_rate          long        bytes/s of Fetch responses
request_percentage          double      percent of one request-handler thread's time
controller_mutation_rate    double      partitions created/deleted per second
==========================  ==========  ===============================================

Kafka's third entity type, ``ip`` (connection_creation_rate), is refused with INVALID_REQUEST: kraftpy
bounds connection creation with the broker's ``max.connection.creation.rate`` instead.

DescribeClientQuotas keeps Kafka's filter semantics (ClientQuotasImage.describe): each component names
an entity type and matches an exact name (0), the default (1) or any name (2, the type present); an
entity matches when every component does, and with ``strict`` when it has no other part.
"""

from __future__ import annotations

import math

import attrs

from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import MetadataImage, QuotaEntity, quota_entity
from kraftpy.metadata.records import ClientQuotaEntityData, ClientQuotaRecord
from kraftpy.metadata.result import ControllerResult
from kraftpy.rpc.wire_schema import Int16

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

#: Quota key → whether its values are integral (Kafka's LONG) rather than DOUBLE.
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2

_LONG_MAX = 2**63 - 1


# -- the controller's messages ------------------------------------------------------------------------


def _tuple(value: object) -> tuple:
    return tuple(value)  # type: ignore[arg-type]


@attrs.frozen
class ClientQuotaOp:
    key: str
    value: float = 0.0
    remove: bool = False


@attrs.frozen
class ClientQuotaAlteration:
    entity: tuple[ClientQuotaEntityData, ...] = attrs.field(converter=_tuple)
    ops: tuple[ClientQuotaOp, ...] = attrs.field(factory=tuple, converter=_tuple)


@attrs.frozen
class AlterClientQuotasRequest:
    entries: tuple[ClientQuotaAlteration, ...] = attrs.field(factory=tuple, converter=_tuple)
    validate_only: bool = False


@attrs.frozen
class ClientQuotaAlterationResult:
    error_code: Int16
    error_message: str | None
    entity: tuple[ClientQuotaEntityData, ...] = attrs.field(converter=_tuple)


@attrs.frozen
class AlterClientQuotasResponse:
    entries: tuple[ClientQuotaAlterationResult, ...] = attrs.field(factory=tuple, converter=_tuple)


class QuotaRequestError(ValueError):
    """A request refused as a whole or for one entity: ``code`` is Kafka's error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- AlterClientQuotas --------------------------------------------------------------------------------


def validate_entity(entity: tuple[ClientQuotaEntityData, ...]) -> QuotaEntity:
    """The canonical entity, or QuotaRequestError(INVALID_REQUEST) with Kafka's reason."""
    if not entity:
        raise QuotaRequestError(Errors.INVALID_REQUEST, "Invalid empty client quota entity")
    seen: set[str] = set()
    for part in entity:
        if part.entity_type in seen:
            raise QuotaRequestError(Errors.INVALID_REQUEST,
                                    f"Invalid empty client quota entity, duplicate entity entry {part.entity_type}")
        seen.add(part.entity_type)
        if part.entity_type == IP:
            raise QuotaRequestError(Errors.INVALID_REQUEST,
                                    "ip quotas are not supported: use max.connection.creation.rate")
        if part.entity_type not in (USER, CLIENT_ID):
            raise QuotaRequestError(Errors.INVALID_REQUEST,
                                    f"Unhandled client quota entity type: {part.entity_type}")
        if part.entity_name is not None and part.entity_name == "":
            raise QuotaRequestError(Errors.INVALID_REQUEST, f"Empty {part.entity_type} not supported")
    return quota_entity((part.entity_type, part.entity_name) for part in entity)


def validate_op(op: ClientQuotaOp) -> None:
    integral = QUOTA_KEYS.get(op.key)
    if integral is None:
        raise QuotaRequestError(Errors.INVALID_REQUEST, f"Invalid configuration key {op.key}")
    if op.remove:
        return
    value = op.value
    if math.isnan(value) or math.isinf(value):
        raise QuotaRequestError(Errors.INVALID_REQUEST, f"Proposed value for {op.key} is not a number.")
    if integral:
        if value > _LONG_MAX:
            raise QuotaRequestError(Errors.INVALID_REQUEST, f"Proposed value for {op.key} is too large for a LONG.")
        if value - math.floor(value) > 1e-16:
            raise QuotaRequestError(Errors.INVALID_REQUEST, f"Proposed value for {op.key} is not an integer.")


def alter_client_quotas(image: MetadataImage,
                        request: AlterClientQuotasRequest) -> ControllerResult[AlterClientQuotasResponse]:
    records: list[ClientQuotaRecord] = []
    results: list[ClientQuotaAlterationResult] = []
    for entry in request.entries:
        try:
            entity = validate_entity(entry.entity)
            for op in entry.ops:
                validate_op(op)
        except QuotaRequestError as exc:
            results.append(ClientQuotaAlterationResult(exc.code, str(exc), entry.entity))
            continue
        parts = tuple(ClientQuotaEntityData(t, n) for t, n in entity)
        current = image.client_quotas.quotas(entity)
        for op in entry.ops:
            if op.remove:
                if op.key in current:
                    records.append(ClientQuotaRecord(parts, op.key, 0.0, remove=True))
            elif current.get(op.key) != op.value:
                records.append(ClientQuotaRecord(parts, op.key, op.value))
        results.append(ClientQuotaAlterationResult(Errors.NONE, None, entry.entity))
    return ControllerResult([] if request.validate_only else records, AlterClientQuotasResponse(tuple(results)))


# -- DescribeClientQuotas -----------------------------------------------------------------------------


@attrs.frozen
class QuotaFilterComponent:
    entity_type: str
    match_type: int
    match: str | None = None


def describe_client_quotas(image: MetadataImage, components: list[QuotaFilterComponent] | tuple,
                           strict: bool) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities matching the filter with their quotas; QuotaRequestError for a malformed filter
    (INVALID_REQUEST, or UNSUPPORTED_VERSION for an unknown entity or match type, as Kafka answers)."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        if c.entity_type == "":
            raise QuotaRequestError(Errors.INVALID_REQUEST, "Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in specified:
            raise QuotaRequestError(Errors.INVALID_REQUEST,
                                    f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise QuotaRequestError(Errors.UNSUPPORTED_VERSION, f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise QuotaRequestError(Errors.INVALID_REQUEST,
                                        "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise QuotaRequestError(Errors.INVALID_REQUEST,
                                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise QuotaRequestError(Errors.INVALID_REQUEST,
                                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(c.entity_type)
        else:
            raise QuotaRequestError(Errors.UNSUPPORTED_VERSION, f"Unknown match type {c.match_type}")
    if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & ({*exact} | specified)):
        raise QuotaRequestError(Errors.INVALID_REQUEST,
                                "Invalid entity filter component combination. IP filter component should not be "
                                "used with user or clientId filter component.")
    found = []
    for entity, quotas in image.client_quotas.entities.items():
        parts = dict(entity)
        if strict and len(parts) != len(exact) + len(specified):
            continue
        if any(t not in parts or parts[t] != name for t, name in exact.items()):
            continue
        if any(t not in parts for t in specified):
            continue
        found.append((entity, dict(quotas)))
    found.sort(key=lambda item: [(t, "" if n is None else "\0" + n) for t, n in item[0]])
    return found
