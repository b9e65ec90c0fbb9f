"""Loading a configuration: properties file + command-line overrides → a validated `KraftConfig`.

Every problem is a `ConfigError` whose message is one line naming the key, the value and where it
came from (``file:line`` or ``--override``); the command line prints that line and exits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from kraftpy.config.keys import BY_NAME, IGNORED
from kraftpy.config.properties import Entry, PropertiesSyntaxError, load_properties, parse_properties
from kraftpy.config.schema import REQUIRED, Listener, Voter

#: Kafka's security protocols; a listener named like one of them uses it unless the map says otherwise.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: ``listener.name.<listener>.<key>``: a key set for one listener (Kafka's per-listener prefix).
LISTENER_PREFIX = "listener.name."


class ConfigError(ValueError):
    """A configuration value that kraftpy cannot run with."""

    def __init__(self, reason: str, key: str | None = None, value: str | None = None,
                 source: str | None = None, line: int | None = None) -> None:
        self.reason = reason
        self.key = key
        self.value = value
        self.source = source
        self.line = line
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line else f"{source}: "
        what = ""
        if key is not None:
            what = f"{key}={value}: " if value is not None else f"{key}: "
        super().__init__(f"{where}{what}{reason}")


@attrs.frozen
class Origin:
    source: str
    line: int | None


OVERRIDE = "--override"


@attrs.frozen
class KraftConfig:
    """A validated configuration; ``config["key"]`` gives the typed value of any schema key."""

    values: Mapping[str, Any]
    origins: Mapping[str, Origin]
    raw: Mapping[str, str]
    unknown: tuple[Entry, ...] = ()
    source: str | None = None

    def __getitem__(self, key: str) -> Any:
        if key not in BY_NAME:
            raise KeyError(f"{key} is not a kraftpy configuration key")
        return self.values[key]

    def is_set(self, key: str) -> bool:
        return key in self.origins

    # --- derived values, resolved the way Kafka resolves them

    @property
    def node_id(self) -> int:
        return self.values["node.id"]

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(self.values["process.roles"])

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def role_name(self) -> str:
        return "+".join(sorted(self.roles))

    @property
    def voters(self) -> list[Voter]:
        """controller.quorum.voters: the static quorum (empty for a dynamic one)."""
        return self.values["controller.quorum.voters"]

    @property
    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        return self.values["controller.quorum.bootstrap.servers"]

    @property
    def is_dynamic_quorum(self) -> bool:
        """The voters are in the metadata log (KIP-853), not in controller.quorum.voters."""
        return not self.voters

    @property
    def listeners(self) -> list[Listener]:
        return self.values["listeners"]

    @property
    def controller_listener_names(self) -> list[str]:
        return [n.upper() for n in self.values["controller.listener.names"]]

    @property
    def controller_listener(self) -> Listener | None:
        names = self.controller_listener_names
        for listener in self.listeners:
            if names and listener.name == names[0]:
                return listener
        return None

    @property
    def broker_listeners(self) -> list[Listener]:
        names = set(self.controller_listener_names)
        return [listener for listener in self.listeners if listener.name not in names]

    @property
    def inter_broker_listener_name(self) -> str:
        """inter.broker.listener.name, else the listener named by security.inter.broker.protocol."""
        name = self.values["inter.broker.listener.name"]
        return (name or self.values["security.inter.broker.protocol"]).upper()

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener: listener.security.protocol.map, else its own name when
        that is a protocol (as in Kafka), else PLAINTEXT."""
        name = listener_name.upper()
        protocol_map = self.values["listener.security.protocol.map"]
        if name in protocol_map:
            return protocol_map[name]
        return name if name in SECURITY_PROTOCOLS else "PLAINTEXT"

    def listener_value(self, listener_name: str, key: str) -> Any:
        """``listener.name.<listener>.<key>`` when set, else ``key`` (Kafka's per-listener override)."""
        prefixed = f"{LISTENER_PREFIX}{listener_name.lower()}.{key}"
        if prefixed in self.values:
            return self.values[prefixed]
        return self[key]

    def listener_key(self, listener_name: str, key: str) -> str:
        """The key ``listener_value`` read: the prefixed one when it is set."""
        prefixed = f"{LISTENER_PREFIX}{listener_name.lower()}.{key}"
        return prefixed if prefixed in self.values else key

    def fail(self, key: str, reason: str) -> ConfigError:
        """A `ConfigError` naming ``key``, its value and where it was set."""
        return _fail(self, key, reason)

    @property
    def advertised_listeners(self) -> list[Listener]:
        """The broker listeners clients are told of (advertised.listeners without a controller's own)."""
        advertised = self.values["advertised.listeners"]
        if advertised is None:
            return self.broker_listeners
        names = set(self.controller_listener_names)
        return [listener for listener in advertised if listener.name not in names]

    @property
    def advertised_controller_listener(self) -> Listener | None:
        """Where other nodes reach this controller: advertised.listeners' entry for the controller
        listener when it has one (a dynamic quorum records it, KIP-853), else the listener itself."""
        listener = self.controller_listener
        advertised = self.values["advertised.listeners"] or []
        for entry in advertised:
            if listener is not None and entry.name == listener.name:
                return entry
        return listener

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"]
        if not dirs:
            dirs = [self.values["log.dir"]]
        return [Path(d) for d in dirs]

    @property
    def metadata_log_dir(self) -> Path:
        d = self.values["metadata.log.dir"]
        return Path(d) if d else self.log_dirs[0]

    @property
    def all_dirs(self) -> list[Path]:
        """Every directory `storage format` writes meta.properties into, without repeats."""
        out: list[Path] = []
        for d in [*self.log_dirs, self.metadata_log_dir]:
            if d not in out:
                out.append(d)
        return out

    @property
    def log_retention_ms(self) -> int:
        if self.values["log.retention.ms"] is not None:
            return self.values["log.retention.ms"]
        if self.values["log.retention.minutes"] is not None:
            minutes = self.values["log.retention.minutes"]
            return -1 if minutes < 0 else minutes * 60_000
        hours = self.values["log.retention.hours"]
        return -1 if hours < 0 else hours * 3_600_000

    @property
    def log_roll_ms(self) -> int:
        if self.values["log.roll.ms"] is not None:
            return self.values["log.roll.ms"]
        return self.values["log.roll.hours"] * 3_600_000


def parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError("an override is written key=value", value=None, source=OVERRIDE, key=text)
    return key.strip(), value


def load_config(path: str | Path | None = None, overrides: Iterable[str] = (),
                text: str | None = None) -> KraftConfig:
    """Read ``path`` (or ``text``), apply ``--override key=value`` pairs, and validate everything."""
    entries: list[Entry] = []
    source = None
    try:
        if path is not None:
            source = str(path)
            entries = load_properties(path)
        elif text is not None:
            source = "<string>"
            entries = parse_properties(text, source)
    except PropertiesSyntaxError as exc:
        raise ConfigError(str(exc).split(": ", 1)[1], source=exc.source, line=exc.line or None) from None
    for item in overrides:
        key, value = parse_override(item)
        entries.append(Entry(key, value, OVERRIDE, 0))
    return build_config(entries, source)


def build_config(entries: Iterable[Entry], source: str | None = None) -> KraftConfig:
    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    raw: dict[str, str] = {}
    unknown: list[Entry] = []
    for entry in entries:  # a later entry wins: overrides come last
        spec = BY_NAME.get(entry.key) or _listener_key_spec(entry.key)
        if spec is None:
            if entry.key not in IGNORED:
                unknown.append(entry)
            continue
        try:
            values[entry.key] = spec.parse(entry.value)
        except ValueError as exc:
            raise ConfigError(str(exc), entry.key, entry.value, entry.source, entry.line or None) from None
        origins[entry.key] = Origin(entry.source, entry.line or None)
        raw[entry.key] = entry.value
    for name, spec in BY_NAME.items():
        if name in values:
            continue
        if spec.required:
            continue  # whether it is needed depends on the roles; checked below
        default = spec.default
        values[name] = spec.parse(default) if isinstance(default, str) else default
    config = KraftConfig(values, origins, raw, tuple(unknown), source)
    _validate(config)
    return config


def _listener_key_spec(key: str) -> Any:
    """The spec of ``listener.name.<listener>.<key>`` when ``<key>`` is a kraftpy key."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    _listener, sep, rest = key[len(LISTENER_PREFIX):].partition(".")
    mechanism, _, tail = rest.partition(".")
    if mechanism.lower() in _SASL_MECHANISM_PREFIXES and tail == "sasl.jaas.config":
        return BY_NAME[tail]  # listener.name.<listener>.<mechanism>.sasl.jaas.config, as Kafka reads it
    return BY_NAME.get(rest) if sep else None


_SASL_MECHANISM_PREFIXES = frozenset({"plain", "scram-sha-256", "scram-sha-512", "oauthbearer"})


def _fail(config: KraftConfig, key: str, reason: str) -> ConfigError:
    origin = config.origins.get(key)
    if origin is None:
        return ConfigError(reason, key, None, config.source)
    return ConfigError(reason, key, config.raw[key], origin.source, origin.line)


def _validate(c: KraftConfig) -> None:
    """Rules that involve more than one key, or depend on the process roles."""
    for name in ("process.roles", "node.id"):
        if name not in c.values:
            raise _fail(c, name, "is required")
    roles = c.values["process.roles"]
    if not roles:
        raise _fail(c, "process.roles", "must name broker, controller or both")
    if len(set(roles)) != len(roles):
        raise _fail(c, "process.roles", "names a role twice")
    if "controller.listener.names" not in c.values:
        raise _fail(c, "controller.listener.names", "is required")
    if not c.voters and not c.quorum_bootstrap_servers:
        key = "controller.quorum.voters" if c.is_set("controller.quorum.voters") else (
            "controller.quorum.bootstrap.servers" if c.is_set("controller.quorum.bootstrap.servers")
            else "controller.quorum.voters")
        reason = ("must name at least one voter" if c.is_set("controller.quorum.voters") else
                  "is required (or controller.quorum.bootstrap.servers, for a dynamic quorum)")
        raise _fail(c, key, reason)
    if not c.controller_listener_names:
        raise _fail(c, "controller.listener.names", "must name at least one listener")
    protocol_map = c.values["listener.security.protocol.map"]
    for name, proto in protocol_map.items():
        if proto not in SECURITY_PROTOCOLS:
            raise _fail(c, "listener.security.protocol.map",
                        f"listener {name} maps to {proto}, not one of {', '.join(SECURITY_PROTOCOLS)}")
    for listener in c.listeners:
        if listener.name not in protocol_map and listener.name not in SECURITY_PROTOCOLS \
                and listener.name not in c.controller_listener_names:
            raise _fail(c, "listener.security.protocol.map",
                        f"listener {listener.name} has no security protocol here")
    for key in c.values:
        if key.startswith(LISTENER_PREFIX):
            name = key[len(LISTENER_PREFIX):].partition(".")[0].upper()
            # A broker-only process connects to the controller listener without serving it.
            if name not in {listener.name for listener in c.listeners} | set(c.controller_listener_names):
                raise _fail(c, key, f"there is no listener {name} in listeners or controller.listener.names")
    if c.is_controller:
        if c.voters and c.node_id not in {v.node_id for v in c.voters}:
            raise _fail(c, "node.id", "a controller's node.id must be one of controller.quorum.voters")
        if c.controller_listener is None:
            raise _fail(c, "controller.listener.names",
                        f"the controller listener {c.controller_listener_names[0]} is not in listeners")
    else:
        names = {listener.name for listener in c.listeners}
        clash = names & set(c.controller_listener_names)
        if clash:
            raise _fail(c, "listeners", f"a broker-only process must not listen on controller listener "
                        f"{sorted(clash)[0]}")
    if c.is_broker:
        if not c.broker_listeners:
            raise _fail(c, "listeners", "a broker needs a listener besides the controller's")
        inter = c.inter_broker_listener_name
        if inter not in {listener.name for listener in c.broker_listeners}:
            key = "inter.broker.listener.name" if c.values["inter.broker.listener.name"] \
                else "security.inter.broker.protocol"
            raise _fail(c, key, f"no listener is named {inter}")
        advertised = c.values["advertised.listeners"]
        if advertised is not None:
            names = {listener.name for listener in c.broker_listeners}
            if c.is_controller and c.controller_listener is not None:
                names.add(c.controller_listener.name)
            for listener in advertised:
                if listener.name not in names:
                    raise _fail(c, "advertised.listeners", f"{listener.name} is not one of listeners")
                if listener.host in ("0.0.0.0", "::"):
                    raise _fail(c, "advertised.listeners",
                                f"{listener} advertises a wildcard address clients cannot reach")
                if listener.port == 0:
                    raise _fail(c, "advertised.listeners", f"{listener} advertises port 0")
    _validate_tls(c)
    _validate_controller_sasl(c)
    if c.values["default.replication.factor"] > 32767:
        raise _fail(c, "default.replication.factor", "must be at most 32767")
    if not c.log_dirs:
        raise _fail(c, "log.dirs", "must name at least one directory")
    if c.is_set("log.dirs"):
        for d in c.values["log.dirs"]:
            if not d:
                raise _fail(c, "log.dirs", "has an empty entry")
    session = c.values["broker.session.timeout.ms"]
    heartbeat = c.values["broker.heartbeat.interval.ms"]
    if heartbeat >= session:
        raise _fail(c, "broker.heartbeat.interval.ms",
                    f"must be smaller than broker.session.timeout.ms ({session})")
    if c.values["group.min.session.timeout.ms"] > c.values["group.max.session.timeout.ms"]:
        raise _fail(c, "group.min.session.timeout.ms", "must not exceed group.max.session.timeout.ms")


def _validate_tls(c: KraftConfig) -> None:
    """Build the TLS context of every TLS listener (server side) and of the listeners this process
    connects to (the inter-broker listener, the controller listener), so a missing or broken PEM file
    stops the process at start with its key."""
    from kraftpy.security.tls import (
        HIDDEN_KEYS,
        TlsConfigError,
        client_context,
        listener_settings,
        server_context,
    )

    checks = [(listener.name, server_context) for listener in c.listeners]
    checks.append((c.controller_listener_names[0], client_context))
    if c.is_broker:
        checks.append((c.inter_broker_listener_name, client_context))
    for name, build in checks:
        if c.security_protocol(name) not in ("SSL", "SASL_SSL"):
            continue
        try:
            build(listener_settings(c, name))
        except TlsConfigError as exc:
            hidden = any(exc.key.endswith(k) for k in HIDDEN_KEYS)
            origin = c.origins.get(exc.key)
            if origin is None:
                raise ConfigError(exc.reason, exc.key, None, c.source) from None
            value = "[hidden]" if hidden else c.raw[exc.key]
            raise ConfigError(exc.reason, exc.key, value, origin.source, origin.line) from None


def _validate_controller_sasl(c: KraftConfig) -> None:
    """SASL on the controller listener: credentials for the client side, mechanisms it can offer."""
    from kraftpy.security.controller_sasl import validate_controller_sasl

    validate_controller_sasl(c)


def defaults() -> dict[str, Any]:
    """Defaults of every key that has one (for the docs)."""
    return {k: s.default for k, s in BY_NAME.items() if s.default is not REQUIRED}
