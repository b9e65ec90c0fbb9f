"""The configuration schema: every key kraftpy reads, with its type, default and one line of doc.

A key's value goes through its type's parser (text → Python value), then its validator; both raise
`ValueError` with a short reason, which the loader turns into a `ConfigError` naming the key, the
value and where it came from.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

import attrs

REQUIRED = object()
"""Default of a key that has no default: it must be given."""


@attrs.frozen
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@attrs.frozen
class Voter:
    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}"


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("not an integer") from None


def parse_double(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError("not a number") from None


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t == "true":
        return True
    if t == "false":
        return False
    raise ValueError("expected true or false")


def parse_string(text: str) -> str:
    return text.strip()


def parse_list(text: str) -> list[str]:
    t = text.strip()
    if not t:
        return []
    return [item.strip() for item in t.split(",")]


def _port(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"port {text!r} is not a number")
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 0-65535")
    return port


def _host_port(text: str) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:port
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"{text!r} is not [host]:port")
        return host, _port(rest[1:])
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError(f"{text!r} is not host:port")
    return host, _port(port)


_LISTENER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def parse_listeners(text: str) -> list[Listener]:
    out = []
    for item in parse_list(text):
        name, sep, rest = item.partition("://")
        if not sep or not _LISTENER_NAME.match(name):
            raise ValueError(f"{item!r} is not NAME://host:port")
        host, port = _host_port(rest)
        out.append(Listener(name.upper(), host, port))
    names = [listener.name for listener in out]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"listener name {name} appears more than once")
    return out


def parse_voters(text: str) -> list[Voter]:
    out = []
    for item in parse_list(text):
        node, sep, rest = item.partition("@")
        if not sep or not node.strip().lstrip("-").isdigit():
            raise ValueError(f"{item!r} is not id@host:port")
        node_id = int(node)
        if node_id < 0:
            raise ValueError(f"voter id {node_id} is negative")
        host, port = _host_port(rest)
        if port == 0:
            raise ValueError(f"voter {item!r} needs a real port, not 0")
        out.append(Voter(node_id, host, port))
    ids = [v.node_id for v in out]
    for i in ids:
        if ids.count(i) > 1:
            raise ValueError(f"voter id {i} appears more than once")
    return out


def parse_addresses(text: str) -> list[tuple[str, int]]:
    """host:port[,host:port...] (controller.quorum.bootstrap.servers)."""
    out = []
    for item in parse_list(text):
        host, port = _host_port(item)
        if not host or port == 0:
            raise ValueError(f"{item!r} needs a host and a real port")
        out.append((host, port))
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    out = {}
    for item in parse_list(text):
        name, sep, proto = item.partition(":")
        if not sep or not name or not proto:
            raise ValueError(f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        out[name.strip().upper()] = proto.strip().upper()
    return out


def at_least(low: int | float) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if v < low:
            raise ValueError(f"must be at least {low}")

    check.describe = f">= {low}"  # type: ignore[attr-defined]
    return check


def between(low: int | float, high: int | float) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        if not low <= v <= high:
            raise ValueError(f"must be between {low} and {high}")

    check.describe = f"[{low}, {high}]"  # type: ignore[attr-defined]
    return check


def one_of(*choices: str) -> Callable[[Any], None]:
    def check(v: Any) -> None:
        values = v if isinstance(v, list) else [v]
        for item in values:
            if item not in choices:
                raise ValueError(f"{item!r} is not one of {', '.join(choices)}")

    check.describe = ", ".join(choices)  # type: ignore[attr-defined]
    return check


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def host_address() -> Callable[[Any], None]:
    """An IPv4 or IPv6 address (without brackets) or a host name (RFC 1123 labels)."""

    def check(v: Any) -> None:
        try:
            ipaddress.ip_address(v)
            return
        except ValueError:
            pass
        name = v.removesuffix(".")
        if not name or len(name) > 253 or not all(_HOST_LABEL.match(label) for label in name.split(".")):
            raise ValueError("not an IP address or host name")

    check.describe = "an IP address or host name"  # type: ignore[attr-defined]
    return check


TYPES: dict[str, Callable[[str], Any]] = {
    "int": parse_int,
    "long": parse_int,
    "double": parse_double,
    "boolean": parse_bool,
    "string": parse_string,
    "list": parse_list,
    "listeners": parse_listeners,
    "voters": parse_voters,
    "addresses": parse_addresses,
    "protocol map": parse_protocol_map,
}

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@attrs.frozen
class ConfigKey:
    name: str
    type: str
    default: Any
    doc: str
    validator: Callable[[Any], None] | None = None
    #: Which process roles read the key: "broker", "controller" or both.
    roles: tuple[str, ...] = ("broker", "controller")
    #: Text shown for the default in the docs when the value is computed.
    default_doc: str | None = None
    nullable: bool = False

    def parse(self, text: str) -> Any:
        if self.nullable and text.strip() == "":
            return None
        value = TYPES[self.type](text)
        if self.type in ("int",) and not -(2**31) <= value <= INT32_MAX:
            raise ValueError("out of the 32-bit integer range")
        if self.type in ("long",) and not -(2**63) <= value <= INT64_MAX:
            raise ValueError("out of the 64-bit integer range")
        if self.validator is not None and value is not None:
            self.validator(value)
        return value

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe_valid(self) -> str:
        return getattr(self.validator, "describe", "") if self.validator else ""
