"""Small text checkpoint files, written atomically, in Kafka's checkpoint form.

Layout (UTF-8 text, ``\\n`` line ends), the form Kafka uses for its offset and
leader-epoch checkpoints::

    <version>              a decimal integer, 0 for every file written here
    <count>                how many entry lines follow
    <field> <field> ...    one entry per line, fields separated by one space

Files in this form:

* the offset checkpoints of a log directory (:mod:`kraftpy.storage.log_manager`), one file per
  kind of offset for every partition in the directory, entries ``<topic> <partition> <offset>``
  (:func:`encode_offsets` / :func:`decode_offsets`): ``recovery-point-offset-checkpoint``,
  ``replication-offset-checkpoint`` (high watermarks) and ``log-start-offset-checkpoint``;
* ``leader-epoch-checkpoint`` in each partition directory (:mod:`kraftpy.storage.leader_epoch`):
  entries ``<epoch> <start_offset>``.

A write goes ``<file>.tmp`` → fsync → rename over ``<file>`` → fsync of the directory, so a
reader sees either the old file or the new one, never a mix. A leftover ``.tmp`` is garbage
from an interrupted write and is ignored.

Before offsets were kept per log directory, every partition directory held its own
``offsets-checkpoint`` (``log-start-offset``, ``recovery-point`` and ``high-watermark`` entries);
:func:`read_legacy_offsets` still reads one so that a log directory written then opens with its
offsets.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

CHECKPOINT_VERSION = 0
TMP_SUFFIX = ".tmp"  # what kraftpy.storage.fsutil.write_atomic writes first
LEGACY_OFFSETS_FILE = "offsets-checkpoint"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be parsed."""


@attrs.frozen
class LogOffsets:
    """The offsets of one log that its owner keeps across restarts (the log itself writes none).

    Invariant: ``log_start_offset <= high_watermark``; every batch below ``recovery_point`` was
    fsynced. A log opened with offsets beyond its end clamps them to what it holds.
    """

    log_start_offset: int = 0
    recovery_point: int = 0
    high_watermark: int = 0


def encode_checkpoint(entries: Iterable[Sequence[object]], version: int = CHECKPOINT_VERSION) -> bytes:
    lines = [" ".join(str(field) for field in entry) for entry in entries]
    return "\n".join([str(version), str(len(lines)), *lines, ""]).encode()


def decode_checkpoint(data: bytes, fields: int, expected_version: int = CHECKPOINT_VERSION) -> list[list[str]]:
    """Parse a checkpoint; every entry must have exactly ``fields`` fields."""
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise CheckpointError("checkpoint is not UTF-8 text") from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointError("checkpoint is missing its version or count line")
    try:
        version = int(lines[0])
        count = int(lines[1])
    except ValueError as exc:
        raise CheckpointError(f"bad checkpoint header {lines[:2]!r}") from exc
    if version != expected_version:
        raise CheckpointError(f"unsupported checkpoint version {version}")
    entries = [line.split(" ") for line in lines[2:]]
    if len(entries) != count:
        raise CheckpointError(f"checkpoint announces {count} entries but holds {len(entries)}")
    for entry in entries:
        if len(entry) != fields:
            raise CheckpointError(f"bad checkpoint entry {' '.join(entry)!r}")
    return entries


def read_checkpoint(path: str | os.PathLike[str], fields: int) -> list[list[str]] | None:
    """The entries of the checkpoint at ``path``, or None when there is no such file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    return decode_checkpoint(data, fields)


# -- offsets of every partition in a log directory -------------------------------------------------


def encode_offsets(offsets: Mapping[tuple[str, int], int]) -> bytes:
    """Kafka's ``OffsetCheckpointFile``: one ``<topic> <partition> <offset>`` line per partition."""
    return encode_checkpoint((topic, partition, offset) for (topic, partition), offset in sorted(offsets.items()))


def decode_offsets(data: bytes) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for topic, partition, offset in decode_checkpoint(data, 3):
        try:
            out[(topic, int(partition))] = int(offset)
        except ValueError as exc:
            raise CheckpointError(f"bad offset checkpoint entry {topic} {partition} {offset}") from exc
    return out


def read_offsets(path: str | os.PathLike[str]) -> dict[tuple[str, int], int] | None:
    """The offsets in the checkpoint at ``path``, or None when there is no such file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    return decode_offsets(data)


# -- the per-partition file of earlier versions ----------------------------------------------------

_LEGACY_NAMES = {"log-start-offset": "log_start_offset", "recovery-point": "recovery_point",
                 "high-watermark": "high_watermark"}


def read_legacy_offsets(directory: str | os.PathLike[str]) -> LogOffsets | None:
    """The offsets of a partition directory's ``offsets-checkpoint``, if it has a readable one."""
    try:
        data = (Path(directory) / LEGACY_OFFSETS_FILE).read_bytes()
    except FileNotFoundError:
        return None
    values: dict[str, int] = {}
    for name, value in decode_checkpoint(data, 2):
        if name not in _LEGACY_NAMES:
            raise CheckpointError(f"unknown offsets checkpoint entry {name!r}")
        try:
            values[_LEGACY_NAMES[name]] = int(value)
        except ValueError as exc:
            raise CheckpointError(f"bad offset {value!r} for {name}") from exc
    return LogOffsets(**values)
