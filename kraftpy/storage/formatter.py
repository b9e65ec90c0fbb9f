"""`kraftpy storage format` and `kraftpy storage info`: give log directories their identity.

Formatting checks every directory first and writes nothing unless all of them can be written:
an already formatted directory is an error unless ``ignore_formatted``, and a directory formatted
for another cluster or node is refused even then.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from kraftpy.ids import random_uuid_str, uuid_from_str
from kraftpy.storage.fsutil import fsync_dir
from kraftpy.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    read_meta_properties,
    write_meta_properties,
)


class FormatError(Exception):
    pass


@attrs.frozen
class FormatResult:
    formatted: tuple[Path, ...]
    skipped: tuple[Path, ...]


def check_cluster_id(cluster_id: str) -> None:
    try:
        uuid_from_str(cluster_id)
    except ValueError as exc:
        raise FormatError(f"cluster id {cluster_id!r} is not valid: {exc}; "
                          "make one with `kraftpy storage random-uuid`") from None


def format_dirs(dirs: list[Path], cluster_id: str, node_id: int,
                ignore_formatted: bool = False, directory_ids: dict[Path, str] | None = None) -> FormatResult:
    """Write meta.properties into every directory not formatted yet (see the module doc), each with a
    new directory id, or the one `directory_ids` gives it (a controller's metadata log directory named
    in --initial-controllers)."""
    check_cluster_id(cluster_id)
    directory_ids = directory_ids or {}
    to_write: list[Path] = []
    skipped: list[Path] = []
    for d in dirs:
        try:
            existing = read_meta_properties(d)
        except MetaPropertiesError as exc:
            raise FormatError(f"{d} holds an unreadable meta.properties: {exc}") from None
        except PermissionError:
            raise FormatError(f"{d}: permission denied") from None
        if existing is None:
            if d.exists() and not d.is_dir():
                raise FormatError(f"{d} exists and is not a directory")
            to_write.append(d)
            continue
        if existing.cluster_id != cluster_id:
            raise FormatError(f"{d} is formatted for cluster {existing.cluster_id}, not {cluster_id}; "
                              "refusing to mix the data of two clusters")
        if existing.node_id != node_id:
            raise FormatError(f"{d} is formatted for node {existing.node_id}, not node {node_id}")
        if not ignore_formatted:
            raise FormatError(f"{d} is already formatted; use --ignore-formatted to skip "
                              "formatted directories")
        skipped.append(d)
    for d in to_write:
        d.mkdir(parents=True, exist_ok=True)
        write_meta_properties(d, MetaProperties(cluster_id, node_id, directory_ids.get(d) or random_uuid_str()))
        if d.parent != d:
            fsync_dir(d.parent)
    return FormatResult(tuple(to_write), tuple(skipped))


@attrs.frozen
class DirInfo:
    path: Path
    state: str  # "formatted", "unformatted", "missing", "unreadable"
    meta: MetaProperties | None
    problems: tuple[str, ...]


def inspect_dirs(dirs: list[Path], node_id: int | None) -> list[DirInfo]:
    """Each directory's state and ids, with what is wrong with it (alone or beside the others)."""
    infos: list[DirInfo] = []
    for d in dirs:
        problems: list[str] = []
        meta = None
        if not d.exists():
            state = "missing"
            problems.append("the directory does not exist; run `kraftpy storage format`")
        elif not os.access(d, os.R_OK | os.X_OK):
            state = "unreadable"
            problems.append("permission denied")
        else:
            try:
                meta = read_meta_properties(d)
            except MetaPropertiesError as exc:
                state = "unreadable"
                problems.append(str(exc))
            else:
                if meta is None:
                    state = "unformatted"
                    problems.append("no meta.properties; run `kraftpy storage format`")
                else:
                    state = "formatted"
                    if node_id is not None and meta.node_id != node_id:
                        problems.append(f"formatted for node {meta.node_id}, but the configuration "
                                        f"says node.id={node_id}")
        infos.append(DirInfo(d, state, meta, tuple(problems)))
    formatted = [i for i in infos if i.meta is not None]
    clusters = {i.meta.cluster_id for i in formatted}
    dir_ids = [i.meta.directory_id for i in formatted]
    out = []
    for info in infos:
        extra: list[str] = []
        if info.meta is not None:
            if len(clusters) > 1:
                others = sorted(clusters - {info.meta.cluster_id})
                extra.append(f"cluster id {info.meta.cluster_id} differs from {', '.join(others)} "
                             "in the other directories")
            if dir_ids.count(info.meta.directory_id) > 1:
                extra.append(f"directory id {info.meta.directory_id} is used by another directory "
                             "(copied?)")
        out.append(attrs.evolve(info, problems=info.problems + tuple(extra)) if extra else info)
    return out


def ensure_formatted(dirs: list[Path], node_id: int) -> str:
    """The cluster id of formatted directories that agree with each other and with ``node_id``;
    a FormatError saying what to do otherwise. Every process checks this before it starts."""
    problems = []
    cluster_ids = set()
    for info in inspect_dirs(dirs, node_id):
        if info.problems:
            problems.append(f"{info.path}: {'; '.join(info.problems)}")
        if info.meta is not None:
            cluster_ids.add(info.meta.cluster_id)
    if problems:
        raise FormatError("log directories are not ready: " + " | ".join(problems))
    (cluster_id,) = cluster_ids
    return cluster_id
