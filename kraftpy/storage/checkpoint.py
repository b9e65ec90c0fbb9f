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

A checkpoint is read as untrusted input: numbers are plain decimal digits (no sign where none can
be, no spaces, no ``_``), partitions within int32 and offsets within int64 and never negative,
topic names in Kafka's alphabet, no partition twice. Anything else raises `CheckpointError`, one
line naming the file (when read from one), the line and the field, e.g. ``.../replication-offset-
checkpoint: line 4: offset -7 of orders-0 is negative``; its owner then recovers from the logs
themselves instead of trusting the file.

Before offsets were kept per log directory, every partition directory held its own
``offsets-checkpoint`` (``log-start-offset``, ``recovery-point`` and ``high-watermark`` entries);
:func:`read_legacy_offsets` still reads one so that a log directory written then opens with its
offsets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

CHECKPOINT_VERSION = 0
TMP_SUFFIX = ".tmp"  # what kraftpy.storage.fsutil.write_atomic writes first
LEGACY_OFFSETS_FILE = "offsets-checkpoint"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be parsed, or holds a value it cannot hold."""


_DIGITS = re.compile(r"-?[0-9]+")
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


def parse_number(text: str, what: str, high: int = INT64_MAX, low: int = 0) -> int:
    """`text` as a decimal integer in [low, high]; CheckpointError naming `what` otherwise."""
    if not _DIGITS.fullmatch(text):
        raise CheckpointError(f"{what} {text[:40]!r} is not a number")
    value = int(text)
    if text.startswith("-") and low >= 0:
        raise CheckpointError(f"{what} {text} is negative")
    if value < low:
        raise CheckpointError(f"{what} {value} is negative" if low == 0 else f"{what} {value} is below {low}")
    if value > high:
        raise CheckpointError(f"{what} {value} is out of range (at most {high})")
    return value


def _naming(path: str | os.PathLike[str], exc: CheckpointError) -> CheckpointError:
    return CheckpointError(f"{os.fspath(path)}: {exc}")


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
    version = parse_number(lines[0], "line 1: version", INT32_MAX)
    count = parse_number(lines[1], "line 2: entry count", INT32_MAX)
    if version != expected_version:
        raise CheckpointError(f"line 1: unsupported checkpoint version {version}")
    entries = [line.split(" ") for line in lines[2:]]
    if len(entries) != count:
        raise CheckpointError(f"line 2: checkpoint announces {count} entries but holds {len(entries)}")
    for number, entry in enumerate(entries, start=3):
        if len(entry) != fields:
            raise CheckpointError(f"line {number}: {' '.join(entry)[:80]!r} does not have {fields} fields")
    return entries


def read_checkpoint(path: str | os.PathLike[str], fields: int) -> list[list[str]] | None:
    """The entries of the checkpoint at ``path``, or None when there is no such file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode_checkpoint(data, fields)
    except CheckpointError as exc:
        raise _naming(path, exc) from None


# -- offsets of every partition in a log directory -------------------------------------------------


def encode_offsets(offsets: Mapping[tuple[str, int], int]) -> bytes:
    """Kafka's ``OffsetCheckpointFile``: one ``<topic> <partition> <offset>`` line per partition."""
    return encode_checkpoint((topic, partition, offset) for (topic, partition), offset in sorted(offsets.items()))


def decode_offsets(data: bytes) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for number, (topic, partition_text, offset_text) in enumerate(decode_checkpoint(data, 3), start=3):
        if not _TOPIC.fullmatch(topic):
            raise CheckpointError(f"line {number}: {topic[:60]!r} is not a topic name")
        partition = parse_number(partition_text, f"line {number}: partition of {topic}", INT32_MAX)
        offset = parse_number(offset_text, f"line {number}: offset of {topic}-{partition}")
        if (topic, partition) in out:
            raise CheckpointError(f"line {number}: {topic}-{partition} appears twice")
        out[(topic, partition)] = offset
    return out


def read_offsets(path: str | os.PathLike[str]) -> dict[tuple[str, int], int] | None:
    """The offsets in the checkpoint at ``path``, or None when there is no such file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode_offsets(data)
    except CheckpointError as exc:
        raise _naming(path, exc) from None


# -- the per-partition file of earlier versions ----------------------------------------------------

_LEGACY_NAMES = {"log-start-offset": "log_start_offset", "recovery-point": "recovery_point",
                 "high-watermark": "high_watermark"}


def read_legacy_offsets(directory: str | os.PathLike[str]) -> LogOffsets | None:
    """The offsets of a partition directory's ``offsets-checkpoint``, if it has a readable one."""
    path = Path(directory) / LEGACY_OFFSETS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    values: dict[str, int] = {}
    try:
        for number, (name, value) in enumerate(decode_checkpoint(data, 2), start=3):
            if name not in _LEGACY_NAMES:
                raise CheckpointError(f"line {number}: unknown entry {name[:60]!r}")
            values[_LEGACY_NAMES[name]] = parse_number(value, f"line {number}: {name}")
    except CheckpointError as exc:
        raise _naming(path, exc) from None
    return LogOffsets(**values)
