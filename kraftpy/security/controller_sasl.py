"""SASL on the controller listener: what its configuration says, checked at start.

When the controller listener (the first of ``controller.listener.names``) maps to SASL_PLAINTEXT or
SASL_SSL in ``listener.security.protocol.map``:

- every process that connects to controllers (controllers to each other, brokers, the tools)
  authenticates with ``sasl.mechanism.controller.protocol`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)
  and the ``username``/``password`` of the controller listener's JAAS config for that mechanism
  (``listener.name.<controller listener>.<mechanism>.sasl.jaas.config``, as Kafka looks for it);
- a controller accepts the mechanisms of the listener's ``sasl.enabled.mechanisms``: PLAIN against the
  ``user_<name>`` options of the same JAAS config, SCRAM against the credentials of the metadata log
  (and, before it has replayed any, those of its own bootstrap checkpoint).

`validate_controller_sasl` runs when the configuration is loaded: a SASL controller listener without a
username and password for the client side, a mechanism the controller plane does not have (GSSAPI,
OAUTHBEARER) or a client mechanism the listener does not enable stops the process with one line naming
the key. The control-plane exchange itself is in kraftpy.rpc.control.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from kraftpy.security.listener_sasl import ScramLookup, fail_hidden, jaas_login, listener_plain_users
from kraftpy.security.sasl import PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, SaslLogin

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
#: What the controller plane speaks (no GSSAPI, and no OAUTHBEARER: processes have no token to offer).
CONTROLLER_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

#: ``authorize(principal, host)``: None when the principal may speak the control plane, else why not.
Authorize = Callable[[str, str], "str | None"]


def _allow_all(principal: str, host: str) -> str | None:
    return None


@attrs.frozen(repr=False)
class ControlSasl:
    """What a controller listener over SASL accepts (the server side of kraftpy.rpc.control)."""

    mechanisms: tuple[str, ...]
    #: PLAIN's {username: password}, from the listener's JAAS config.
    plain_users: Mapping[str, str] = attrs.field(factory=dict, converter=lambda v: MappingProxyType(dict(v)))
    #: ``lookup_scram(name, mechanism_code)``: a UserScramCredentialRecord or None.
    lookup_scram: ScramLookup = lambda name, code: None
    #: connection.failed.authentication.delay.ms
    failed_authentication_delay_ms: int = 100
    authorize: Authorize = _allow_all

    def __repr__(self) -> str:  # plain_users holds passwords
        return f"ControlSasl({self.mechanisms}, users={sorted(self.plain_users)})"


def controller_listener_name(config: Any) -> str:
    return config.controller_listener_names[0]


def is_sasl_controller_listener(config: Any) -> bool:
    return config.security_protocol(controller_listener_name(config)) in SASL_PROTOCOLS


def _jaas_key_for(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def controller_login(config: Any) -> SaslLogin | None:
    """What this process authenticates with on the controllers' listener when it is a SASL one; None
    otherwise. A SASL listener without a username and password for the mechanism fails naming its key."""
    if not is_sasl_controller_listener(config):
        return None
    listener = controller_listener_name(config)
    mechanism = config["sasl.mechanism.controller.protocol"]
    login = jaas_login(config, listener, mechanism)
    if login is None:
        raise fail_hidden(config, _jaas_key_for(listener, mechanism),
                          f"the controller listener {listener} is {config.security_protocol(listener)}: its JAAS config "
                          f"for {mechanism} (sasl.mechanism.controller.protocol) needs username and password for "
                          f"this {config.role_name}")
    return SaslLogin(mechanism, *login)


def controller_mechanisms(config: Any) -> tuple[str, ...]:
    """The mechanisms the controller listener enables; one it cannot offer fails naming the key."""
    listener = controller_listener_name(config)
    enabled = tuple(config.listener_value(listener, "sasl.enabled.mechanisms"))
    key = config.listener_key(listener, "sasl.enabled.mechanisms")
    for mechanism in enabled:
        if mechanism not in CONTROLLER_MECHANISMS:
            raise config.fail(key, f"{mechanism} is not available on the controller listener {listener} "
                                   f"(it offers {', '.join(CONTROLLER_MECHANISMS)}); set "
                                   f"listener.name.{listener.lower()}.sasl.enabled.mechanisms")
    if not enabled:
        raise config.fail(key, f"the controller listener {listener} is SASL but enables no mechanism")
    return enabled


def server_sasl(config: Any, *, lookup_scram: ScramLookup, authorize: Authorize = _allow_all) -> ControlSasl | None:
    """The `ControlSasl` of this controller's listener when it is a SASL one, else None."""
    if not is_sasl_controller_listener(config):
        return None
    listener = controller_listener_name(config)
    mechanisms = controller_mechanisms(config)
    users = listener_plain_users(config, listener) if PLAIN in mechanisms else {}
    return ControlSasl(mechanisms, users, lookup_scram, config["connection.failed.authentication.delay.ms"],
                       authorize)


def validate_controller_sasl(config: Any) -> None:
    """Stop a process whose controller-plane SASL settings cannot work (see the module doc)."""
    if not is_sasl_controller_listener(config):
        return
    login = controller_login(config)
    assert login is not None
    if config.is_controller:
        enabled = controller_mechanisms(config)
        if login.mechanism not in enabled:
            listener = controller_listener_name(config)
            raise config.fail("sasl.mechanism.controller.protocol",
                              f"the controller listener {listener} does not enable it "
                              f"({config.listener_key(listener, 'sasl.enabled.mechanisms')}={','.join(enabled)})")
        if PLAIN in enabled:
            listener_plain_users(config, controller_listener_name(config))
