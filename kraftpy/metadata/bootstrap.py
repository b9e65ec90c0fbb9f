"""Bootstrap metadata: records `kraftpy storage format` puts in the metadata log directory, which the
first active controller writes into a new cluster's log (after its metadata.version), as Kafka's
``bootstrap.checkpoint``. `kraftpy storage format --add-scram` uses it so that the first admin's SCRAM
credential exists before the cluster starts.

File layout (``bootstrap.checkpoint`` in metadata.log.dir)::

    offset  size  field
    0       4     magic b"KPBS"
    4       4     CRC-32C of the body (big-endian)
    8       ...   body: msgpack [version=1, [record value, ...]]   (values as in the metadata log)

Written tmp -> fsync -> rename -> fsync the directory; a file that does not check out stops the
controller with one line naming it.

``--add-scram`` takes Kafka's syntax: ``MECHANISM=[name=NAME,password=PASSWORD]`` or
``MECHANISM=[name=NAME,salt=BASE64,saltedpassword=BASE64]``, with ``iterations=N`` (default 4096) and
values optionally in double quotes.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from pathlib import Path

import crc32c
import msgpack

from kraftpy.metadata.records import MetadataRecord, UserScramCredentialRecord, decode_record, encode_record
from kraftpy.security.scram import MECHANISM_CODES, MIN_ITERATIONS, ScramCredential, ScramError

BOOTSTRAP_FILE = "bootstrap.checkpoint"
_MAGIC = b"KPBS"
_HEADER = struct.Struct(">4sI")
assert _HEADER.size == 8


class BootstrapError(ValueError):
    """A bootstrap file or an --add-scram argument that cannot be used; one line, never a password."""


def write_bootstrap(directory: Path, records: list[MetadataRecord]) -> Path:
    body = msgpack.packb([1, [encode_record(r) for r in records]], use_bin_type=True)
    path = directory / BOOTSTRAP_FILE
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(_HEADER.pack(_MAGIC, crc32c.crc32c(body)) + body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def read_bootstrap(directory: Path) -> tuple[MetadataRecord, ...]:
    """The records of ``directory``'s bootstrap file; () when there is none."""
    path = directory / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ()
    if len(data) < _HEADER.size:
        raise BootstrapError(f"{path}: too short for a bootstrap file")
    magic, crc = _HEADER.unpack_from(data)
    body = data[_HEADER.size:]
    if magic != _MAGIC or crc32c.crc32c(body) != crc:
        raise BootstrapError(f"{path}: not a bootstrap file, or damaged (bad magic or CRC)")
    try:
        version, values = msgpack.unpackb(body, raw=False)
        if version != 1:
            raise BootstrapError(f"{path}: bootstrap file version {version} is not known")
        return tuple(decode_record(v) for v in values)
    except (ValueError, TypeError) as exc:
        raise BootstrapError(f"{path}: {exc}") from None


def _split_options(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            raise BootstrapError(f"expected key=value in {text!r}")
        key = text[i:eq].strip()
        i = eq + 1
        if i < n and text[i] == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise BootstrapError(f"unterminated quoted value for {key}")
            value, i = text[i + 1:end], end + 1
        else:
            end = text.find(",", i)
            end = n if end < 0 else end
            value, i = text[i:end], end
        if i < n and text[i] == ",":
            i += 1
        out[key.lower()] = value
    return out


def parse_add_scram(text: str) -> UserScramCredentialRecord:
    """One --add-scram argument (Kafka's ScramParser syntax) as the record it bootstraps."""
    mechanism, sep, rest = text.partition("=")
    mechanism = mechanism.strip()
    if not sep or mechanism not in MECHANISM_CODES:
        raise BootstrapError(f"--add-scram must start with SCRAM-SHA-256= or SCRAM-SHA-512=, got {mechanism!r}")
    rest = rest.strip()
    if not (rest.startswith("[") and rest.endswith("]")):
        raise BootstrapError("--add-scram expects MECHANISM=[name=...,password=...]")
    options = _split_options(rest[1:-1])
    name = options.get("name")
    if not name:
        raise BootstrapError("--add-scram needs name=")
    try:
        iterations = int(options.get("iterations", MIN_ITERATIONS))
    except ValueError:
        raise BootstrapError(f"--add-scram iterations for {name} is not a number") from None
    try:
        salt = base64.b64decode(options["salt"], validate=True) if "salt" in options else None
        if "password" in options:
            credential = ScramCredential.from_password(mechanism, options["password"], salt, iterations)
        elif "saltedpassword" in options and salt is not None:
            credential = ScramCredential.from_salted_password(
                mechanism, salt, base64.b64decode(options["saltedpassword"], validate=True), iterations)
        else:
            raise BootstrapError(f"--add-scram for {name} needs password=, or salt= and saltedpassword=")
    except binascii.Error:
        raise BootstrapError(f"--add-scram salt or saltedpassword for {name} is not base64") from None
    except ScramError as exc:
        raise BootstrapError(f"--add-scram for {name}: {exc}") from None
    return UserScramCredentialRecord(name=name, mechanism=MECHANISM_CODES[mechanism], salt=credential.salt,
                                     stored_key=credential.stored_key, server_key=credential.server_key,
                                     iterations=iterations)
