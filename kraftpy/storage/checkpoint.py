"""Small text checkpoint files, written atomically, in Kafka's checkpoint form.

Layout (UTF-8 text, ``\\n`` line ends), the form Kafka uses for its offset and
leader-epoch checkpoints::

    <version>              a decimal integer, 0 for every file written here
    <count>                how many entry lines follow
    <field> <field> ...    one entry per line, fields separated by one space

Two kinds of file use it:

* ``offsets-checkpoint`` (this module, :class:`OffsetsCheckpoint`), one per log directory:
  entries ``<name> <offset>`` for ``log-start-offset``, ``recovery-point`` and ``high-watermark``.
* ``leader-epoch-checkpoint`` (:mod:`kraftpy.storage.leader_epoch`): entries ``<epoch> <start_offset>``.

A write goes ``<file>.tmp`` → fsync → rename over ``<file>`` → fsync of the directory, so a
reader sees either the old file or the new one, never a mix. A leftover ``.tmp`` is garbage
from an interrupted write and is ignored (and removed when the log opens).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from kraftpy.storage.fsutil import write_atomic

CHECKPOINT_VERSION = 0
TMP_SUFFIX = ".tmp"  # what kraftpy.storage.fsutil.write_atomic writes first
OFFSETS_CHECKPOINT_FILE = "offsets-checkpoint"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be parsed."""


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


@attrs.frozen
class OffsetsCheckpoint:
    """The offsets of one log that must survive a restart.

    Invariant: ``log_start_offset <= high_watermark`` and ``recovery_point`` is an offset below
    which every batch was fsynced; it never exceeds the log end offset of the log it belongs to.
    """

    log_start_offset: int = 0
    recovery_point: int = 0
    high_watermark: int = 0

    _NAMES = ("log-start-offset", "recovery-point", "high-watermark")

    def encode(self) -> bytes:
        return encode_checkpoint(
            [
                ("log-start-offset", self.log_start_offset),
                ("recovery-point", self.recovery_point),
                ("high-watermark", self.high_watermark),
            ]
        )

    @classmethod
    def decode(cls, data: bytes) -> OffsetsCheckpoint:
        values: dict[str, int] = {}
        for name, value in decode_checkpoint(data, 2):
            if name not in cls._NAMES:
                raise CheckpointError(f"unknown offsets checkpoint entry {name!r}")
            try:
                values[name.replace("-", "_")] = int(value)
            except ValueError as exc:
                raise CheckpointError(f"bad offset {value!r} for {name}") from exc
        return cls(**values)

    def write(self, directory: str | os.PathLike[str]) -> None:
        write_atomic(Path(directory) / OFFSETS_CHECKPOINT_FILE, self.encode())

    @classmethod
    def read(cls, directory: str | os.PathLike[str]) -> OffsetsCheckpoint | None:
        try:
            data = (Path(directory) / OFFSETS_CHECKPOINT_FILE).read_bytes()
        except FileNotFoundError:
            return None
        return cls.decode(data)
