"""One ``--command-config`` file for every command: Kafka's client keys, read by kraftpy's admin client
and turned into librdkafka's for the commands that run on it (``kraftpy console``, ``kraftpy perf``).

The file is first checked as the admin commands check it (`ClientConfig.from_properties`: the same one
line naming the key for a bad value, a JKS store, a SASL login without its password). Then Kafka's keys
that librdkafka names differently are translated:

================================================  ===============================================
Kafka (Java client)                               librdkafka
================================================  ===============================================
``sasl.jaas.config`` (Plain/ScramLoginModule)      ``sasl.username``, ``sasl.password``
``ssl.truststore.location`` (PEM)                 ``ssl.ca.location``
``ssl.truststore.certificates``                   ``ssl.ca.pem``
``ssl.keystore.location`` (PEM: key and chain)    ``ssl.certificate.location``, ``ssl.key.location``
``ssl.keystore.key``                              ``ssl.key.pem``
``ssl.keystore.certificate.chain``                ``ssl.certificate.pem``
``ssl.endpoint.identification.algorithm=``        ``ssl.endpoint.identification.algorithm=none``
================================================  ===============================================

``ssl.truststore.type``/``ssl.keystore.type`` (PEM, checked above), the stores' passwords and
``default.api.timeout.ms`` (an admin client's) are dropped; every other key goes to librdkafka as it is
(``security.protocol``, ``sasl.mechanism``, ``client.id``, ``request.timeout.ms``, librdkafka's own), and
librdkafka names any it does not know in its one-line refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kraftpy.admin.client import ClientConfig
from kraftpy.cli.admin_common import EXIT_USAGE, die, read_properties_or_exit

#: Kafka's client keys with a librdkafka name of their own (one key may become two).
RENAMED: dict[str, tuple[str, ...]] = {
    "ssl.truststore.location": ("ssl.ca.location",),
    "ssl.truststore.certificates": ("ssl.ca.pem",),
    "ssl.keystore.location": ("ssl.certificate.location", "ssl.key.location"),
    "ssl.keystore.key": ("ssl.key.pem",),
    "ssl.keystore.certificate.chain": ("ssl.certificate.pem",),
}
#: Kafka's client keys librdkafka has no use for (the store types are PEM, checked first).
DROPPED = frozenset({"ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password",
                     "ssl.keystore.password", "default.api.timeout.ms", "sasl.jaas.config"})


def librdkafka_settings(props: Mapping[str, str]) -> dict[str, str]:
    """librdkafka's settings for a ``--command-config`` file of Kafka's client keys; ValueError names the
    key (never a password) of a setting the admin client would refuse too."""
    config = ClientConfig.from_properties(props)
    out: dict[str, str] = {}
    for key, value in props.items():
        if key in DROPPED:
            continue
        if key == "ssl.endpoint.identification.algorithm":
            out[key] = value.strip() or "none"
        elif key in RENAMED:
            for name in RENAMED[key]:
                out[name] = value
        else:
            out[key] = value
    if config.sasl is not None:
        out.update({"sasl.mechanism": config.sasl.mechanism, "sasl.username": config.sasl.username,
                    "sasl.password": config.sasl.password})
    return out


def librdkafka_settings_or_exit(path: Path) -> dict[str, str]:
    """`librdkafka_settings` of a ``--command-config`` file; a file the admin client would refuse is one
    line and exit 2, as there."""
    props = read_properties_or_exit(path, "--command-config")
    try:
        return librdkafka_settings(props)
    except ValueError as exc:
        die(f"--command-config={path}: {exc}", EXIT_USAGE)
