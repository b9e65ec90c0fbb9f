"""What a listener's configuration says of SASL, read as Kafka reads it, for both planes: the Kafka
port's SASL listeners (kraftpy.broker.apis.sasl) and the controller listener (kraftpy.rpc.control).

- `jaas_key`: where a listener's JAAS config for a mechanism is looked for:
  ``listener.name.<l>.<mechanism>.sasl.jaas.config``, then ``listener.name.<l>.sasl.jaas.config``,
  then ``sasl.jaas.config``;
- `jaas_login`: the ``username``/``password`` options there (what this process authenticates with);
- `listener_plain_users`: PLAIN's ``user_<name>="<password>"`` options (the users it accepts);
- `mechanism_server`: a fresh sans-IO PLAIN or SCRAM server for one exchange.

``config`` is a `kraftpy.config.KraftConfig` (anything with ``values``, ``fail`` and ``listener_value``).
A JAAS config that does not parse fails with one line naming its key, never its value (`fail_hidden`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.security.jaas import JaasConfigError, parse_listener_jaas_config, plain_users
from kraftpy.security.plain import PlainServer
from kraftpy.security.sasl import PLAIN
from kraftpy.security.scram import MECHANISM_CODES, ScramCredential, ScramServer

#: ``lookup_scram(username, mechanism_code)``: the UserScramCredentialRecord (anything with salt,
#: iterations, stored_key, server_key) of a user, or None.
ScramLookup = Callable[[str, int], Any]


def jaas_key(config: Any, listener: str, mechanism: str) -> str | None:
    """The key holding a listener's JAAS config for ``mechanism``, as Kafka looks for it:
    listener.name.<l>.<mechanism>.sasl.jaas.config, listener.name.<l>.sasl.jaas.config, sasl.jaas.config."""
    prefix = f"listener.name.{listener.lower()}."
    for key in (f"{prefix}{mechanism.lower()}.sasl.jaas.config", f"{prefix}sasl.jaas.config", "sasl.jaas.config"):
        if config.values.get(key) is not None:
            return key
    return None


def fail_hidden(config: Any, key: str, reason: str) -> Exception:
    """``config.fail(key, reason)`` without the value: a JAAS config holds passwords."""
    error = config.fail(key, reason)
    if getattr(error, "value", None) is None:
        return error
    return type(error)(error.reason, key, "[hidden]", error.source, error.line)


def listener_plain_users(config: Any, listener: str) -> dict[str, str]:
    """PLAIN's {username: password} of a listener (the ``user_<name>`` options of its JAAS config)."""
    key = jaas_key(config, listener, PLAIN)
    if key is None:
        return {}
    try:
        return plain_users(config.values[key])
    except JaasConfigError as exc:
        raise fail_hidden(config, key, str(exc)) from None


def jaas_login(config: Any, listener: str, mechanism: str) -> tuple[str, str] | None:
    """The ``username``/``password`` options of a listener's JAAS config for ``mechanism`` (what this
    process authenticates with to its peers on that listener), or None."""
    key = jaas_key(config, listener, mechanism)
    if key is None:
        return None
    try:
        options = parse_listener_jaas_config(config.values[key]).options
    except JaasConfigError as exc:
        raise fail_hidden(config, key, str(exc)) from None
    if "username" not in options or "password" not in options:
        return None
    return options["username"], options["password"]


def mechanism_server(mechanism: str, plain: Mapping[str, str], lookup_scram: ScramLookup, *,
                     reauthentication: bool = False) -> PlainServer | ScramServer:
    """The server side of one PLAIN (against ``plain`` users) or SCRAM-SHA-256/512 exchange (against
    ``lookup_scram``)."""
    if mechanism == PLAIN:
        return PlainServer(plain, reauthentication=reauthentication)
    code = MECHANISM_CODES[mechanism]

    def lookup(name: str) -> ScramCredential | None:
        record = lookup_scram(name, code)
        if record is None:
            return None
        return ScramCredential(mechanism, record.salt, record.iterations, record.stored_key, record.server_key)

    return ScramServer(mechanism, lookup, reauthentication=reauthentication)
