"""``meta.properties``: the identity of a formatted log directory.

The file is a Java properties file, as Kafka writes it (version 1)::

    #
    #<comment>
    cluster.id=<22-character id>
    directory.id=<22-character id>
    node.id=<int>
    version=1

A process refuses to start on a directory that is not formatted, or formatted for another
cluster or node, so that data of two clusters never mixes.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from kraftpy.config.properties import PropertiesSyntaxError, format_properties, load_properties
from kraftpy.ids import uuid_from_str
from kraftpy.storage.fsutil import write_atomic

FILE_NAME = "meta.properties"
VERSION = 1
#: Node ids are Kafka int32s.
MAX_NODE_ID = (1 << 31) - 1


class MetaPropertiesError(ValueError):
    pass


@attrs.frozen
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str
    version: int = VERSION

    def to_text(self) -> str:
        return format_properties(
            [("cluster.id", self.cluster_id), ("directory.id", self.directory_id),
             ("node.id", str(self.node_id)), ("version", str(self.version))],
            header="\nWritten by kraftpy storage format",
        )


def parse_meta_properties(path: Path) -> MetaProperties:
    try:
        entries = load_properties(path)
    except PropertiesSyntaxError as exc:
        raise MetaPropertiesError(str(exc)) from None
    values = {e.key: e.value.strip() for e in entries}
    version = values.get("version")
    if version != str(VERSION):
        raise MetaPropertiesError(f"{path}: version={version}: only version 1 is supported")
    missing = [k for k in ("cluster.id", "node.id", "directory.id") if not values.get(k)]
    if missing:
        raise MetaPropertiesError(f"{path}: {', '.join(missing)} missing")
    text = values["node.id"]
    if not text.isascii() or not text.isdigit():
        raise MetaPropertiesError(f"{path}: node.id={text}: not a non-negative integer")
    node_id = int(text)
    if node_id > MAX_NODE_ID:
        raise MetaPropertiesError(f"{path}: node.id={text}: out of range (at most {MAX_NODE_ID})")
    for key in ("cluster.id", "directory.id"):
        try:
            uuid_from_str(values[key])
        except ValueError as exc:
            raise MetaPropertiesError(f"{path}: {key}={values[key]}: {exc}") from None
    return MetaProperties(values["cluster.id"], node_id, values["directory.id"], VERSION)


def read_meta_properties(directory: Path) -> MetaProperties | None:
    """The directory's identity, or None when it holds no meta.properties."""
    path = Path(directory) / FILE_NAME
    if not path.exists():
        return None
    return parse_meta_properties(path)


def write_meta_properties(directory: Path, meta: MetaProperties) -> None:
    write_atomic(Path(directory) / FILE_NAME, meta.to_text().encode("utf-8"))
