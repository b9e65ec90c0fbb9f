"""The message-schema DSL and its compiler: declarations in, flat encode/decode functions out.

Theory of operation
-------------------
A message is declared once, for all its versions, the way Kafka's message definitions do it::

    ProduceRequest = message("ProduceRequest", api_key=0, kind="request", versions="0-9", flexible="9+", fields=[
        F("transactional_id", "string", "3+", nullable="3+", default=None),
        F("acks", "int16"),
        F("topic_data", "[]TopicProduceData", "0+", [
            F("name", "string"),
            F("partition_data", "[]PartitionProduceData", "0+", [
                F("index", "int32"),
                F("records", "records", nullable="0+"),
            ]),
        ]),
    ])

A field has a snake_case name, a type (a primitive, ``[]primitive``, ``[]StructName`` or
``StructName`` with nested fields), the versions it exists in, the versions in which it may be
null, and for tagged fields the tag and the tagged versions. Version ranges use Kafka's notation:
``"3+"``, ``"0-4"``, ``"none"``.

``message`` returns a generated class (a `Struct`: slotted, mutable, every field with a default); one
decoder and one encoder per (struct, version) are compiled as Python source the first time that
version of the message is decoded or encoded (a process uses few of the versions of few of the
messages, and compiling them all took a third of a second of every start): runs of fixed-width
fields become a single ``struct.Struct`` call, one-byte varints are read inline, and nested structs
are calls to their own flat functions. Identical functions (a struct unchanged between versions)
are compiled once.

Why classes and not dicts: a slotted class costs about what a dict costs to build, reads
faster (attribute access, no hashing), rejects a misspelt field name at once instead of silently
carrying it, and gives every field its default, so a handler builds a response naming only what it
sets. The same object encodes at every version: fields absent from a version are left out, like
Kafka's generated ``MessageData`` classes. They are built here rather than by attrs (as kraftpy's
hand-written classes are): attrs' general machinery was more than half of what declaring the three
hundred of them cost every process at import.

Decoding: ``decode(version, buf, pos) -> (obj, pos)``. ``buf`` should be a ``memoryview`` of the
frame: strings and bytes are copied out, but ``records`` fields stay ``memoryview`` slices of it.

Encoding: ``encode(version, obj, out, parts)`` appends to the bytearray ``out``; a ``records``
value that is a :class:`~kraftpy.protocol.types.FileRegion` or a large buffer is not copied but
moved to ``parts`` (the bytes before it are flushed first), so the frame is a list of parts.

A struct field may be nullable (``nullable=..., default=None``, Kafka's ``Cursor`` of
DescribeTopicPartitions): on the wire it is an int8 marker, -1 for null and 1 before the struct.

Unknown tagged fields are skipped on decode; a known tagged field is written only when its value
differs from its default, as Kafka does.
"""

from __future__ import annotations

import hashlib
import keyword
import re
import struct
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import attrs

from kraftpy import _codecache
from kraftpy.protocol.types import (
    ZERO_UUID,
    FileRegion,
    TruncatedError,
    part_length,
    read_uvarint,
    write_uvarint,
)

MAX_VERSION = 0x7FFF
#: Record buffers smaller than this are copied into the frame; larger ones become their own part.
INLINE_RECORDS_LIMIT = 4096

FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "uuid": "16s",
}
VARIABLE_TYPES = frozenset({"string", "bytes", "records"})
PRIMITIVE_TYPES = frozenset(FIXED_FORMATS) | VARIABLE_TYPES


class DecodeError(ValueError):
    """The bytes do not follow the schema."""


class EncodeError(ValueError):
    """The object cannot be written at this version (a null where none is allowed, a value out of range)."""


@attrs.frozen
class Versions:
    """An inclusive version range; empty when ``lo > hi``."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, spec: str | Versions | None) -> Versions:
        if isinstance(spec, Versions):
            return spec
        if spec is None or spec == "none":
            return NO_VERSIONS
        if spec.endswith("+"):
            return cls(int(spec[:-1]), MAX_VERSION)
        if "-" in spec:
            lo, hi = spec.split("-")
            return cls(int(lo), int(hi))
        return cls(int(spec), int(spec))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def __bool__(self) -> bool:
        return self.lo <= self.hi

    def __iter__(self):
        return iter(range(self.lo, self.hi + 1))

    def __str__(self) -> str:
        if not self:
            return "none"
        if self.hi == MAX_VERSION:
            return f"{self.lo}+"
        return f"{self.lo}-{self.hi}"


NO_VERSIONS = Versions(1, 0)
_NO_DEFAULT = object()


@attrs.frozen
class Field:
    name: str
    type: str
    versions: Versions
    nullable: Versions = NO_VERSIONS
    tag: int | None = None
    tagged: Versions = NO_VERSIONS
    default: Any = _NO_DEFAULT
    fields: tuple[Field, ...] = ()
    #: Field-level override of the message's flexible versions (only the request header's client id).
    flexible: Versions | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element_type not in PRIMITIVE_TYPES

    def is_tagged_in(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged


def F(
    name: str,
    type: str,
    versions: str = "0+",
    fields: Sequence[Field] = (),
    *,
    nullable: str | None = None,
    default: Any = _NO_DEFAULT,
    tag: int | None = None,
    tagged: str | None = None,
    flexible: str | None = None,
) -> Field:
    """Declare a field (see the module docstring)."""
    vs = Versions.parse(versions)
    tagged_vs = Versions.parse(tagged) if tagged is not None else (vs if tag is not None else NO_VERSIONS)
    field = Field(
        name=name,
        type=type,
        versions=vs,
        nullable=Versions.parse(nullable),
        tag=tag,
        tagged=tagged_vs,
        default=default,
        fields=tuple(fields),
        flexible=Versions.parse(flexible) if flexible is not None else None,
    )
    if field.is_struct != bool(fields):
        raise TypeError(f"field {name}: struct types need fields, primitive types take none")
    if field.is_struct and not field.is_array and field.nullable and field.default is not None:
        raise TypeError(f"field {name}: a nullable struct defaults to null (default=None)")
    return field


@attrs.define(eq=False)
class MessageSchema:
    """A compiled message: its declaration, generated classes and per-version codecs."""

    name: str
    api_key: int | None
    kind: str
    versions: Versions
    flexible: Versions
    fields: tuple[Field, ...]
    cls: type = attrs.field(default=None)
    #: Every generated class by struct name, the message's own class included.
    classes: dict[str, type] = attrs.Factory(dict)
    #: version -> compiled function, filled on first use (`_Codecs`).
    decoders: dict[int, Any] = attrs.Factory(dict)
    encoders: dict[int, Any] = attrs.Factory(dict)

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def decode(self, version: int, buf, pos: int = 0):
        """``(obj, new_pos)``; raises :class:`DecodeError` when the bytes do not fit the schema."""
        try:
            decoder = self.decoders[version]
        except KeyError:
            raise DecodeError(f"{self.name} has no version {version}") from None
        try:
            return decoder(buf, pos)
        except DecodeError:
            raise
        except (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError) as exc:
            raise DecodeError(f"{self.name} v{version}: {exc or type(exc).__name__}") from exc

    def encode(self, version: int, obj, out: bytearray, parts: list) -> None:
        """Append ``obj`` to ``out``, moving large record data to ``parts`` (flushing ``out`` first)."""
        try:
            encoder = self.encoders[version]
        except KeyError:
            raise EncodeError(f"{self.name} has no version {version}") from None
        try:
            encoder(obj, out, parts)
        except EncodeError:
            raise
        except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"{self.name} v{version}: {exc}") from exc

    def to_bytes(self, version: int, obj) -> bytes:
        """Encode to one bytes object (record data included; file regions are refused)."""
        out = bytearray()
        parts: list = []
        self.encode(version, obj, out, parts)
        if not parts:
            return bytes(out)
        parts.append(out)
        if any(isinstance(p, FileRegion) for p in parts):
            raise EncodeError("cannot join a file region into bytes")
        return b"".join(parts)

    def from_bytes(self, version: int, data) -> Any:
        """Decode exactly ``data``: trailing bytes are an error."""
        buf = data if isinstance(data, memoryview) else memoryview(data)
        obj, pos = self.decode(version, buf, 0)
        if pos != len(buf):
            raise DecodeError(f"{self.name} v{version}: {len(buf) - pos} trailing bytes")
        return obj


def default_value(field: Field) -> Any:
    """The value a field takes when its version does not carry it (immutable types only)."""
    if field.default is not _NO_DEFAULT:
        return field.default
    t = field.type
    if field.is_array or field.is_struct:
        raise AssertionError("arrays and structs default through a factory")
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return 0
    if t == "float64":
        return 0.0
    if t == "bool":
        return False
    if t == "string":
        return ""
    if t == "bytes":
        return b""
    if t == "uuid":
        return ZERO_UUID
    return None  # records


# --- helpers the generated code calls ---------------------------------------------------------------


def _null_error(name: str):
    return EncodeError(f"field {name} is not nullable at this version")


def _decode_null_error(name: str):
    return DecodeError(f"field {name} is null but not nullable at this version")


def _truncated(name: str):
    return TruncatedError(f"buffer ends inside field {name}")


def _write_records(value, out: bytearray, parts: list, compact: bool, nullable: bool, name: str) -> None:
    if value is None:
        if not nullable:
            raise _null_error(name)
        if compact:
            out.append(0)
        else:
            out += b"\xff\xff\xff\xff"
        return
    pieces = (value,) if isinstance(value, bytes | bytearray | memoryview | FileRegion) else value
    total = 0
    for piece in pieces:
        total += part_length(piece)
    if compact:
        write_uvarint(out, total + 1)
    else:
        out += _INT32.pack(total)
    for piece in pieces:
        if isinstance(piece, FileRegion) or part_length(piece) >= INLINE_RECORDS_LIMIT:
            if out:
                parts.append(bytearray(out))
                out.clear()
            parts.append(piece)
        else:
            out += piece


def _write_tags(out: bytearray, tags: list) -> None:
    write_uvarint(out, len(tags))
    for tag, data in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


_INT32 = struct.Struct(">i")

#: The globals of every generated function.
_NS: dict[str, Any] = {
    "_UUID": uuid.UUID,
    "ZU": ZERO_UUID,
    "_ruv": read_uvarint,
    "_wuv": write_uvarint,
    "_wrec": _write_records,
    "_wtags": _write_tags,
    "_nullerr": _null_error,
    "_dnullerr": _decode_null_error,
    "_trunc": _truncated,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_h": struct.Struct(">h"),
    "_i": _INT32,
}
_FUNCS: dict[str, str] = {}  # function body -> its name in _NS
_counter = [0]


def _const(value: Any, prefix: str = "C") -> str:
    """A name in the generated code's globals bound to ``value``."""
    _counter[0] += 1
    name = f"{prefix}{_counter[0]}"
    _NS[name] = value
    return name


_STRUCTS: dict[str, str] = {}


def _struct_ref(fmt: str) -> str:
    if fmt not in _STRUCTS:
        _STRUCTS[fmt] = _const(struct.Struct(">" + fmt), "S")
    return _STRUCTS[fmt]


class _Builder:
    """Generates the source of one message's functions."""

    def __init__(self, schema: MessageSchema) -> None:
        self.schema = schema
        self.sources: list[str] = []
        self.class_refs: dict[str, str] = {}
        self.tmp = 0

    def fresh(self, base: str) -> str:
        self.tmp += 1
        return f"{base}{self.tmp}"

    def define(self, kind: str, struct_name: str, header: str, body: list[str]) -> str:
        text = "\n".join(body)
        key = header + "\n" + text
        name = _FUNCS.get(key)
        if name is None:
            digest = hashlib.blake2b(key.encode(), digest_size=5).hexdigest()
            name = f"_{kind}_{struct_name}_{digest}"
            _FUNCS[key] = name
            self.sources.append(f"def {name}({header}):\n{text}\n")
        return name

    # -- decoding ------------------------------------------------------------------------------------

    def decoder(self, struct_name: str, fields: tuple[Field, ...], version: int) -> str:
        saved, self.tmp = self.tmp, 0  # temporaries are numbered per function, so equal functions dedupe
        try:
            return self._decoder(struct_name, fields, version)
        finally:
            self.tmp = saved

    def _decoder(self, struct_name: str, fields: tuple[Field, ...], version: int) -> str:
        flex = self.schema.is_flexible(version)
        body: list[str] = []
        values: list[str] = []
        run: list[tuple[Field, str]] = []

        def flush_run() -> None:
            if not run:
                return
            fmt = "".join(FIXED_FORMATS[f.type] for f, _ in run)
            size = struct.calcsize(">" + fmt)
            targets = "".join(f"{t}, " for _, t in run)
            body.append(f"    {targets}= {_struct_ref(fmt)}.unpack_from(buf, pos)")
            body.append(f"    pos += {size}")
            for f, t in run:
                if f.type == "uuid":
                    body.append(f"    {t} = _UUID(bytes={t})")
            run.clear()

        tagged: list[tuple[Field, str]] = []
        for i, f in enumerate(fields):
            var = f"v{i}"
            if version not in f.versions:
                values.append(self.default_expr(f))
                continue
            values.append(var)
            if flex and f.is_tagged_in(version):
                tagged.append((f, var))
                body.append(f"    {var} = {self.default_expr(f)}")
                continue
            if f.type in FIXED_FORMATS:
                run.append((f, var))
                continue
            flush_run()
            self.emit_decode(f, var, version, flex, body, 1)
        flush_run()
        if flex:
            self.emit_decode_tags(tagged, version, body)
        cls = self.class_refs[struct_name]
        body.append(f"    return {cls}({', '.join(values)}), pos")
        return self.define("d", struct_name, "buf, pos", body)

    def emit_uvarint(self, target: str, body: list[str], ind: str) -> None:
        body.append(f"{ind}{target} = buf[pos]")
        body.append(f"{ind}if {target} < 128:")
        body.append(f"{ind}    pos += 1")
        body.append(f"{ind}else:")
        body.append(f"{ind}    {target}, pos = _ruv(buf, pos)")

    def emit_length(self, f: Field, target: str, compact: bool, body: list[str], ind: str, wide: bool) -> None:
        if compact:
            self.emit_uvarint(target, body, ind)
            body.append(f"{ind}{target} -= 1")
        else:
            fmt = "_i" if wide else "_h"
            body.append(f"{ind}{target}, = {fmt}.unpack_from(buf, pos)")
            body.append(f"{ind}pos += {4 if wide else 2}")

    def emit_null(self, f: Field, target: str, version: int, body: list[str], ind: str) -> None:
        if version in f.nullable:
            body.append(f"{ind}    {target} = None")
        else:
            body.append(f"{ind}    raise _dnullerr({f.name!r})")

    def compact_for(self, f: Field, version: int, flex: bool) -> bool:
        if f.flexible is not None:
            return version in f.flexible
        return flex

    def emit_decode(self, f: Field, target: str, version: int, flex: bool, body: list[str], depth: int) -> None:
        ind = "    " * depth
        compact = self.compact_for(f, version, flex)
        t = f.type
        if t in FIXED_FORMATS:
            st = _struct_ref(FIXED_FORMATS[t])
            body.append(f"{ind}{target}, = {st}.unpack_from(buf, pos)")
            body.append(f"{ind}pos += {struct.calcsize('>' + FIXED_FORMATS[t])}")
            if t == "uuid":
                body.append(f"{ind}{target} = _UUID(bytes={target})")
            return
        if t in VARIABLE_TYPES:
            n = self.fresh("n")
            e = self.fresh("e")
            self.emit_length(f, n, compact, body, ind, wide=t != "string")
            body.append(f"{ind}if {n} < 0:")
            self.emit_null(f, target, version, body, ind)
            body.append(f"{ind}else:")
            body.append(f"{ind}    {e} = pos + {n}")
            body.append(f"{ind}    if {e} > len(buf):")
            body.append(f"{ind}        raise _trunc({f.name!r})")
            if t == "string":
                body.append(f"{ind}    {target} = str(buf[pos:{e}], 'utf-8')")
            elif t == "bytes":
                body.append(f"{ind}    {target} = bytes(buf[pos:{e}])")
            else:
                body.append(f"{ind}    {target} = buf[pos:{e}]")
            body.append(f"{ind}    pos = {e}")
            return
        if not f.is_array:
            fn = self.decoder(f.type, f.fields, version)
            if version in f.nullable:
                # Kafka's nullable struct: an int8 marker, -1 for null, then the struct when present.
                body.append(f"{ind}if buf[pos] >= 128:")
                body.append(f"{ind}    {target} = None")
                body.append(f"{ind}    pos += 1")
                body.append(f"{ind}else:")
                body.append(f"{ind}    {target}, pos = {fn}(buf, pos + 1)")
            else:
                body.append(f"{ind}{target}, pos = {fn}(buf, pos)")
            return
        c = self.fresh("c")
        self.emit_length(f, c, compact, body, ind, wide=True)
        body.append(f"{ind}if {c} < 0:")
        self.emit_null(f, target, version, body, ind)
        body.append(f"{ind}elif {c} > len(buf) - pos:")
        body.append(f"{ind}    raise _trunc({f.name!r})")
        body.append(f"{ind}else:")
        et = f.element_type
        if et in FIXED_FORMATS and et != "uuid":
            size = struct.calcsize(">" + FIXED_FORMATS[et])
            body.append(f"{ind}    {target} = list(_unpack_from('>%d{FIXED_FORMATS[et]}' % {c}, buf, pos))")
            body.append(f"{ind}    pos += {c} * {size}")
            return
        body.append(f"{ind}    {target} = []")
        x = self.fresh("x")
        body.append(f"{ind}    for _ in range({c}):")
        if et in PRIMITIVE_TYPES:
            element = Field(name=f.name, type=et, versions=f.versions, flexible=f.flexible)
            self.emit_decode(element, x, version, flex, body, depth + 2)
            body.append(f"{ind}        {target}.append({x})")
        else:
            fn = self.decoder(et, f.fields, version)
            body.append(f"{ind}        {x}, pos = {fn}(buf, pos)")
            body.append(f"{ind}        {target}.append({x})")

    def emit_decode_tags(self, tagged: list[tuple[Field, str]], version: int, body: list[str]) -> None:
        body.append("    nt = buf[pos]")
        body.append("    if nt == 0:")
        body.append("        pos += 1")
        body.append("    else:")
        body.append("        nt, pos = _ruv(buf, pos)")
        body.append("        for _ in range(nt):")
        self.emit_uvarint("tag", body, "            ")
        self.emit_uvarint("sz", body, "            ")
        body.append("            end = pos + sz")
        body.append("            if end > len(buf):")
        body.append("                raise _trunc('tagged fields')")
        for j, (f, var) in enumerate(sorted(tagged, key=lambda fv: fv[0].tag)):
            body.append(f"            {'if' if j == 0 else 'elif'} tag == {f.tag}:")
            self.emit_decode(f, var, version, True, body, 4)
        body.append("            pos = end")

    def default_expr(self, f: Field) -> str:
        if f.is_array:
            if f.default is None:
                return "None"
            return "[]"
        if f.is_struct:
            return "None" if f.default is None else f"{self.class_refs[f.type]}()"
        value = default_value(f)
        if isinstance(value, uuid.UUID):
            return "ZU" if value == ZERO_UUID else _const(value)
        return repr(value)

    # -- encoding ------------------------------------------------------------------------------------

    def encoder(self, struct_name: str, fields: tuple[Field, ...], version: int) -> str:
        saved, self.tmp = self.tmp, 0
        try:
            return self._encoder(struct_name, fields, version)
        finally:
            self.tmp = saved

    def _encoder(self, struct_name: str, fields: tuple[Field, ...], version: int) -> str:
        flex = self.schema.is_flexible(version)
        body: list[str] = []
        run: list[Field] = []

        def flush_run() -> None:
            if not run:
                return
            fmt = "".join(FIXED_FORMATS[f.type] for f in run)
            args = ", ".join(f"o.{f.name}.bytes" if f.type == "uuid" else f"o.{f.name}" for f in run)
            body.append(f"    b += {_struct_ref(fmt)}.pack({args})")
            run.clear()

        tagged: list[Field] = []
        for f in fields:
            if version not in f.versions:
                continue
            if flex and f.is_tagged_in(version):
                tagged.append(f)
                continue
            if f.type in FIXED_FORMATS:
                run.append(f)
                continue
            flush_run()
            self.emit_encode(f, f"o.{f.name}", version, flex, body, 1, "b")
        flush_run()
        if flex:
            if not tagged:
                body.append("    b.append(0)")
            else:
                body.append("    tags = []")
                for f in sorted(tagged, key=lambda f: f.tag):
                    if f.type == "records":
                        raise TypeError(f"tagged records field {f.name} is not supported")
                    var = self.fresh("t")
                    body.append(f"    {var} = o.{f.name}")
                    body.append(f"    if {self.non_default_test(f, var)}:")
                    body.append("        tb = bytearray()")
                    self.emit_encode(f, var, version, True, body, 2, "tb")
                    body.append(f"        tags.append(({f.tag}, tb))")
                body.append("    if tags:")
                body.append("        _wtags(b, tags)")
                body.append("    else:")
                body.append("        b.append(0)")
        if not body:
            body.append("    pass")
        return self.define("e", struct_name, "o, b, parts", body)

    def non_default_test(self, f: Field, var: str) -> str:
        if f.is_array:
            return f"{var} is None or len({var}) > 0" if f.default is not None else f"{var} is not None"
        if f.is_struct:
            if f.default is None:
                return f"{var} is not None"
            return f"{var} != {self.class_refs[f.type]}()"
        value = default_value(f)
        if value is None:
            return f"{var} is not None"
        if isinstance(value, uuid.UUID):
            return f"{var} != {'ZU' if value == ZERO_UUID else _const(value)}"
        return f"{var} != {value!r}"

    def emit_put_uvarint(self, expr: str, body: list[str], ind: str, out: str) -> None:
        body.append(f"{ind}if {expr} < 128:")
        body.append(f"{ind}    {out}.append({expr})")
        body.append(f"{ind}else:")
        body.append(f"{ind}    _wuv({out}, {expr})")

    def emit_encode(self, f: Field, expr: str, version: int, flex: bool, body: list[str], depth: int,
                    out: str) -> None:
        ind = "    " * depth
        compact = self.compact_for(f, version, flex)
        nullable = version in f.nullable
        t = f.type
        if t in FIXED_FORMATS:
            value = f"{expr}.bytes" if t == "uuid" else expr
            body.append(f"{ind}{out} += {_struct_ref(FIXED_FORMATS[t])}.pack({value})")
            return
        if t == "records":
            body.append(f"{ind}_wrec({expr}, {out}, parts, {compact}, {nullable}, {f.name!r})")
            return
        if f.is_struct and not f.is_array:
            fn = self.encoder(f.type, f.fields, version)
            if nullable:
                x = self.fresh("x")
                body.append(f"{ind}{x} = {expr}")
                body.append(f"{ind}if {x} is None:")
                body.append(f"{ind}    {out}.append(0xff)")
                body.append(f"{ind}else:")
                body.append(f"{ind}    {out}.append(1)")
                body.append(f"{ind}    {fn}({x}, {out}, parts)")
            else:
                body.append(f"{ind}{fn}({expr}, {out}, parts)")
            return
        x = self.fresh("x")
        body.append(f"{ind}{x} = {expr}")
        body.append(f"{ind}if {x} is None:")
        if not nullable:
            body.append(f"{ind}    raise _nullerr({f.name!r})")
        elif compact:
            body.append(f"{ind}    {out}.append(0)")
        elif t == "string":
            body.append(f"{ind}    {out} += b'\\xff\\xff'")
        else:
            body.append(f"{ind}    {out} += b'\\xff\\xff\\xff\\xff'")
        body.append(f"{ind}else:")
        ind2 = ind + "    "
        n = self.fresh("n")
        if t in ("string", "bytes"):
            if t == "string":
                body.append(f"{ind2}{x} = {x}.encode('utf-8')")
            body.append(f"{ind2}{n} = len({x})")
        else:
            body.append(f"{ind2}{n} = len({x})")
        if compact:
            body.append(f"{ind2}{n} += 1")
            self.emit_put_uvarint(n, body, ind2, out)
        elif t == "string":
            body.append(f"{ind2}{out} += _h.pack({n})")
        else:
            body.append(f"{ind2}{out} += _i.pack({n})")
        if not f.is_array:
            body.append(f"{ind2}{out} += {x}")
            return
        et = f.element_type
        if et in FIXED_FORMATS and et != "uuid":
            body.append(f"{ind2}{out} += _pack('>%d{FIXED_FORMATS[et]}' % len({x}), *{x})")
            return
        y = self.fresh("y")
        body.append(f"{ind2}for {y} in {x}:")
        if et in PRIMITIVE_TYPES:
            element = Field(name=f.name, type=et, versions=f.versions, flexible=f.flexible)
            self.emit_encode(element, y, version, flex, body, depth + 2, out)
        else:
            fn = self.encoder(et, f.fields, version)
            body.append(f"{ind2}    {fn}({y}, {out}, parts)")


def _attr_name(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name


class Struct:
    """The base of every generated message class: its ``repr`` by the class's ``FIELDS``.

    The classes are built here rather than by attrs (as the hand-written ones are): a process makes
    three hundred of them at import, and attrs' general machinery cost more than half of the time
    `message` takes. Each class has ``__slots__`` of its fields, an ``__init__`` taking them by position
    or keyword and an ``__eq__`` comparing them in order (both generated, one compilation per message,
    through kraftpy's code cache), and no hash (a message is mutable), as attrs' ``eq=True`` classes.
    """

    __slots__ = ()
    #: The field names, in declaration order (the ``__init__`` order).
    FIELDS: tuple[str, ...] = ()
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{self.__class__.__qualname__}({inner})"


#: An argument left out of a generated ``__init__``: the field's factory makes its value.
_MISSING = object()


def _make_classes(schema: MessageSchema, builder: _Builder) -> None:
    declared: dict[str, tuple[Field, ...]] = {}
    made: list[tuple[type, list[str], list[str]]] = []  # (class, signature, body) per class
    defaults: list[Any] = []
    classes: list[type] = []

    def make(struct_name: str, fields: tuple[Field, ...]) -> type:
        if struct_name in schema.classes:
            # Kafka's common structs: one struct used by several fields, declared identically at each.
            if declared.get(struct_name) == fields:
                return schema.classes[struct_name]
            raise TypeError(f"{schema.name}: struct {struct_name} declared twice")
        declared[struct_name] = fields
        signature: list[str] = []
        body: list[str] = []
        for f in fields:
            name = f.name
            factory = None
            if f.is_struct:
                child = make(f.element_type, f.fields)
                if f.is_array:
                    factory = "[]"
                elif f.default is not None:
                    classes.append(child)
                    factory = f"k{len(classes) - 1}()"
            elif f.is_array and f.default is not None:
                factory = "[]"
            if factory is not None:
                signature.append(f"{name}=_M")
                body.append(f"    self.{name} = {factory} if {name} is _M else {name}")
                continue
            if f.is_struct or f.is_array:
                value: Any = None
            else:
                value = default_value(f)
            defaults.append(value)
            signature.append(f"{name}=d{len(defaults) - 1}")
            body.append(f"    self.{name} = {name}")
        names = tuple(f.name for f in fields)
        cls = type(struct_name, (Struct,), {"__slots__": names, "FIELDS": names, "__match_args__": names,
                                            "__module__": "kraftpy.protocol.messages", "__qualname__": struct_name})
        made.append((cls, signature, body))
        schema.classes[struct_name] = cls
        builder.class_refs[struct_name] = _const(cls, "K")
        return cls

    schema.cls = make(schema.name, schema.fields)
    lines = ["def _inits(D, K, _M):"]
    lines += [f"    d{i} = D[{i}]" for i in range(len(defaults))]
    lines += [f"    k{i} = K[{i}]" for i in range(len(classes))]
    for index, (cls, signature, body) in enumerate(made):
        lines.append(f"    def __init__(self, {', '.join(signature)}):" if signature else "    def __init__(self):")
        lines += ["    " + line for line in body] or ["        pass"]
        # Equality is generated too: encoders compare a tagged struct with its default on every write.
        mine = "".join(f"self.{name}, " for name in cls.FIELDS)
        theirs = "".join(f"other.{name}, " for name in cls.FIELDS)
        lines += ["    def __eq__(self, other):",
                  "        if other.__class__ is not self.__class__:",
                  "            return NotImplemented",
                  f"        return ({mine}) == ({theirs})",
                  f"    i{index} = (__init__, __eq__)"]
    lines.append(f"    return ({''.join(f'i{index}, ' for index in range(len(made)))})")
    namespace: dict[str, Any] = {}
    exec(_codecache.cached_compile("\n".join(lines) + "\n", f"<kraftpy.protocol classes {schema.name}>", "exec"),
         namespace)
    methods = namespace["_inits"](tuple(defaults), tuple(classes), _MISSING)
    for (cls, _signature, _body), (init, eq) in zip(made, methods, strict=True):
        init.__qualname__ = f"{cls.__qualname__}.__init__"
        eq.__qualname__ = f"{cls.__qualname__}.__eq__"
        cls.__init__ = init
        cls.__eq__ = eq
    for struct_name, cls in schema.classes.items():
        if cls is not schema.cls:
            setattr(schema.cls, struct_name, cls)


#: Names the generated ``__init__`` and ``__eq__`` use for themselves (see `_make_classes`).
_GENERATED_NAMES = re.compile(r"self|other|D|K|_M|[dki][0-9]+")


def _check_fields(fields: Sequence[Field], where: str) -> None:
    seen = set()
    for f in fields:
        if f.name != _attr_name(f.name) or not f.name.isidentifier() or _GENERATED_NAMES.fullmatch(f.name):
            raise TypeError(f"{where}: field name {f.name!r} is not a usable identifier")
        if f.name in seen:
            raise TypeError(f"{where}: field {f.name} declared twice")
        seen.add(f.name)
        if f.is_struct:
            _check_fields(f.fields, f"{where}.{f.name}")


#: Compiling generated code touches the shared registries (`_FUNCS`, `_NS`): one compilation at a
#: time (large requests are decoded in worker threads).
_COMPILING = threading.Lock()


class _Codecs(dict):
    """A message's decoders or encoders by version, each compiled the first time it is asked for;
    a version the message does not have is a KeyError, as in a plain dict."""

    def __init__(self, schema: MessageSchema, builder: _Builder, kind: str) -> None:
        super().__init__()
        self._schema = schema
        self._builder = builder
        self._kind = kind

    def __missing__(self, version: int) -> Any:
        if version not in self._schema.versions:
            raise KeyError(version)
        with _COMPILING:
            if version in self:  # another thread compiled it meanwhile
                return dict.__getitem__(self, version)
            builder, schema = self._builder, self._schema
            builder.sources = []
            make = builder.decoder if self._kind == "decoder" else builder.encoder
            name = make(schema.name, schema.fields, version)
            if builder.sources:
                code = _codecache.cached_compile("\n".join(builder.sources), f"<kraftpy.protocol schema {schema.name}>",
                                                 "exec")
                exec(code, _NS)
            function = _NS[name]
            self[version] = function
            return function


def message(
    name: str,
    *,
    kind: str,
    versions: str,
    flexible: str,
    fields: Sequence[Field],
    api_key: int | None = None,
) -> type:
    """Declare a message, generate its classes and compile every version; returns the message class.

    ``kind`` is ``request``, ``response``, ``header`` or ``data`` (a struct stored rather than sent,
    such as a record of ``__consumer_offsets``).

    The class carries its schema as ``SCHEMA`` and its nested struct classes as attributes
    (``ProduceRequest.TopicProduceData``).
    """
    if kind not in ("request", "response", "header", "data"):
        raise ValueError(f"bad message kind {kind!r}")
    _check_fields(fields, name)
    schema = MessageSchema(
        name=name,
        api_key=api_key,
        kind=kind,
        versions=Versions.parse(versions),
        flexible=Versions.parse(flexible),
        fields=tuple(fields),
    )
    builder = _Builder(schema)
    _make_classes(schema, builder)
    schema.decoders = _Codecs(schema, builder, "decoder")
    schema.encoders = _Codecs(schema, builder, "encoder")
    schema.cls.SCHEMA = schema
    return schema.cls

