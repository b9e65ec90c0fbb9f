"""DescribeConfigs and IncrementalAlterConfigs for topics, brokers and consumer groups.

Overrides live in ConfigRecords. IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT
(the last two only to list-typed keys, starting from the key's current effective value), validates
every resulting value, and writes one ConfigRecord per key that actually changes. A resource with any
refused operation changes nothing; other resources in the request are unaffected. A BROKER resource is
named by broker id, or ``""`` for the default of every broker. A GROUP resource (type 32, KIP-848) is
named by group id and need not exist yet; its values are validated together, against the
``group.consumer.min/max.*`` bounds of the controller's properties file.
"""

from __future__ import annotations

from collections import Counter

from kraftpy.config.keys import BY_NAME as STATIC_BROKER_KEYS
from kraftpy.metadata import configs as config_defs
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.errors import ControllerError, Errors
from kraftpy.metadata.image import ConfigResource, MetadataImage
from kraftpy.metadata.messages import (
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    ConfigSource,
    DescribeConfigsRequest,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kraftpy.metadata.records import ConfigRecord, ConfigResourceType, MetadataRecord
from kraftpy.metadata.result import ControllerResult


def _resource(image: MetadataImage, resource_type: int, name: str) -> tuple[ConfigResource, dict]:
    """The resource and its schema; raises for unknown types, bad broker names and missing topics."""
    if resource_type == ConfigResourceType.TOPIC:
        if image.topics.get_by_name(name) is None:
            raise ControllerError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
        return ConfigResource.topic(name), dict(config_defs.TOPIC_CONFIGS)
    if resource_type == ConfigResourceType.BROKER:
        if name != "" and not (name.isdigit() and name.isascii()):
            raise ControllerError(Errors.INVALID_REQUEST, f"Illegal broker name {name!r}: not a broker id.")
        return ConfigResource.broker(name), dict(config_defs.BROKER_CONFIGS)
    if resource_type == ConfigResourceType.GROUP:
        if not name:
            raise ControllerError(Errors.INVALID_REQUEST, "Group name must not be empty.")
        return ConfigResource(ConfigResourceType.GROUP, name), dict(config_defs.GROUP_CONFIGS)
    raise ControllerError(Errors.INVALID_REQUEST, f"Unsupported resource type {resource_type}.")


def _effective(
    image: MetadataImage, config: ControllerConfig, resource: ConfigResource, key: str, broker: int | None = None
) -> tuple[str, ConfigSource]:
    if resource.type is ConfigResourceType.TOPIC:
        return config_defs.effective_topic_config(image, config.static_broker_configs, resource.name, key, broker)
    if resource.type is ConfigResourceType.GROUP:
        return config_defs.effective_group_config(image, config.static_broker_configs, resource.name, key)
    return config_defs.effective_broker_config(image, config.static_broker_configs, resource.name, key)


def _alter_resource(
    image: MetadataImage, entry: AlterConfigsResource, config: ControllerConfig
) -> list[MetadataRecord]:
    resource, schema = _resource(image, entry.resource_type, entry.resource_name)
    duplicates = [name for name, n in Counter(c.name for c in entry.configs).items() if n > 1]
    if duplicates:
        raise ControllerError(Errors.INVALID_REQUEST, f"Error due to duplicate config keys: {', '.join(duplicates)}")
    current = image.configs.config(resource)
    records: list[MetadataRecord] = []
    #: The resource's values once this request applies (None: back to the default).
    altered: dict[str, str | None] = {}
    for op in entry.configs:
        key = schema.get(op.name)
        if key is None and resource.type is ConfigResourceType.BROKER and op.name in STATIC_BROKER_KEYS:
            # A broker key that only the properties file sets (log.dirs, listeners): Kafka's words for it.
            raise ControllerError(Errors.INVALID_CONFIG, f"Cannot update these configs dynamically: {op.name}")
        if key is None:
            raise ControllerError(Errors.INVALID_CONFIG, f"Unknown {resource.type.name.lower()} config name: {op.name}")
        try:
            operation = AlterConfigOp(op.config_operation)
        except ValueError:
            raise ControllerError(Errors.INVALID_REQUEST, f"Unknown config operation {op.config_operation}.") from None
        new_value: str | None
        if operation is AlterConfigOp.DELETE:
            new_value = None
        elif op.value is None:
            raise ControllerError(Errors.INVALID_CONFIG, f"Null value not supported for {operation.name}: {op.name}")
        elif operation is AlterConfigOp.SET:
            new_value = op.value
        else:
            if not key.is_list:
                raise ControllerError(
                    Errors.INVALID_CONFIG, f"Can't {operation.name} to key {op.name} because its type is not LIST."
                )
            items = config_defs.parse(key, _effective(image, config, resource, op.name)[0])
            assert isinstance(items, list)
            changes = config_defs.parse(key, op.value)
            assert isinstance(changes, list)
            if operation is AlterConfigOp.APPEND:
                items += [v for v in changes if v not in items]
            else:
                items = [v for v in items if v not in changes]
            new_value = ",".join(items)
        if new_value is not None:
            reason = config_defs.validate(key, new_value)
            if reason is not None:
                raise ControllerError(Errors.INVALID_CONFIG, reason)
        altered[op.name] = new_value
        if current.get(op.name) != new_value:
            records.append(ConfigRecord(resource.type, resource.name, op.name, new_value))
    if resource.type is ConfigResourceType.GROUP and records:
        values = {}
        for name, key in schema.items():
            value = altered[name] if name in altered else current.get(name)
            values[name] = config.static_broker_configs.get(key.broker_synonym, key.default) if value is None else value
        reason = config_defs.group_config_problem(values, config.static_broker_configs)
        if reason is not None:
            raise ControllerError(Errors.INVALID_CONFIG, reason)
    return records


def incremental_alter_configs(
    image: MetadataImage, request: IncrementalAlterConfigsRequest, config: ControllerConfig
) -> ControllerResult[IncrementalAlterConfigsResponse]:
    records: list[MetadataRecord] = []
    responses = []
    for entry in request.resources:
        try:
            resource_records = _alter_resource(image, entry, config)
        except ControllerError as exc:
            err = exc.api_error
            responses.append(AlterConfigsResourceResponse(err.code, err.message, entry.resource_type, entry.resource_name))
            continue
        records += resource_records
        responses.append(AlterConfigsResourceResponse(Errors.NONE, None, entry.resource_type, entry.resource_name))
    return ControllerResult(
        [] if request.validate_only else records, IncrementalAlterConfigsResponse(tuple(responses))
    )


def describe_configs(
    image: MetadataImage, request: DescribeConfigsRequest, config: ControllerConfig, broker: int | None = None
) -> DescribeConfigsResponse:
    """Effective values and their sources; a topic's as broker ``broker`` runs it, when given. The
    cluster-default broker resource (``""``) lists only the keys set on it, as Kafka does."""
    results = []
    for entry in request.resources:
        try:
            resource, schema = _resource(image, entry.resource_type, entry.resource_name)
        except ControllerError as exc:
            err = exc.api_error
            results.append(DescribeConfigsResult(err.code, err.message, entry.resource_type, entry.resource_name))
            continue
        if resource == config_defs.CLUSTER_DEFAULT:
            names = sorted(image.configs.config(resource))
        else:
            names = sorted(schema)
        if entry.configuration_keys is not None:
            wanted = set(entry.configuration_keys)
            names = [n for n in names if n in wanted]
        entries = []
        for name in names:
            value, source = _effective(image, config, resource, name, broker)
            entries.append(DescribeConfigsResourceResult(name, value, read_only=False, config_source=source))
        results.append(DescribeConfigsResult(Errors.NONE, None, entry.resource_type, entry.resource_name, tuple(entries)))
    return DescribeConfigsResponse(tuple(results))
