"""The configuration of a test cluster: one controller and N brokers on 127.0.0.1.

The controller is node 3000 (Kafka's own test kit numbers its controllers from 3000), the brokers
are nodes 1..N. Every node reaches the others through the supervisor's proxy (`kraftpy.testing.proxy`),
so that a broker can be cut off from them; clients reach the brokers directly:

- controller: ``listeners=CONTROLLER://127.0.0.1:<real>``; the voters name the proxy's port for it.
- broker *i*: ``listeners=PLAINTEXT://127.0.0.1:<client>,INTERNAL://127.0.0.1:<real>``, advertised
  as ``PLAINTEXT://127.0.0.1:<client>,INTERNAL://127.0.0.1:<proxy>``; followers fetch from INTERNAL.

`defaults` make a small cluster quick to start, quick to create a topic and quick to notice a fault
(a broker is fenced 3 s after its last heartbeat; a group's first rebalance does not wait); each of
them, and any other key of docs/configuration.md, can be overridden. The keys that place the nodes (`RESERVED`) cannot.

Overrides come as keyword arguments: ``log_retention_ms=1000`` is ``log.retention.ms=1000`` (Kafka's
keys have no underscores), and dotted keys can be passed as ``**{"log.retention.ms": 1000}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONTROLLER_ID = 3000
INTERNAL = "INTERNAL"

#: Keys the cluster sets itself: where the nodes listen, who they are, where their data goes.
RESERVED = frozenset({
    "process.roles", "node.id", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "controller.listener.names", "listeners", "advertised.listeners", "listener.security.protocol.map",
    "inter.broker.listener.name", "security.inter.broker.protocol", "log.dirs", "log.dir", "metadata.log.dir",
})


def defaults(brokers: int) -> dict[str, str]:
    """What a test cluster of ``brokers`` brokers runs with unless overridden."""
    replicas = min(brokers, 3)
    return {
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min(2, replicas)),
        "transaction.state.log.num.partitions": "5",
        # A test's consumer group forms at once, as testcontainers' Kafka sets it.
        "group.initial.rebalance.delay.ms": "0",
        "broker.heartbeat.interval.ms": "250",
        "broker.session.timeout.ms": "3000",
        "replica.lag.time.max.ms": "3000",
        # A follower adds a new partition to its fetches when its current long poll returns, and one that
        # learnt of it before its leader did is refused and tries again after the back-off: a test's first
        # acks=all write to a new topic waits for those, up to 50 ms each here (500 ms and 1 s in Kafka).
        "replica.fetch.wait.max.ms": "50",
        "replica.fetch.backoff.ms": "50",
        "controller.quorum.election.timeout.ms": "300",
        # A broker started beside its controller fetches before the controller listens: it tries again
        # after 5 ms, not Kafka's 20.
        "controller.quorum.retry.backoff.ms": "5",
        # Each metadata change its own append, at once: a topic a test creates is there in a few ms
        # (Kafka's 25 ms gathers the changes of a busy cluster into fewer batches).
        "controller.quorum.append.linger.ms": "0",
    }


def _value_text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, list | tuple):
        return ",".join(_value_text(key, v) for v in value)
    raise ValueError(f"{key}={value!r}: a configuration value is a string, a number, a boolean or a list of them")


def normalize_overrides(overrides: Mapping[str, Any]) -> dict[str, str]:
    """``{"log_retention_ms": 1000}`` -> ``{"log.retention.ms": "1000"}``; a reserved key is refused
    with a ValueError naming it and its value."""
    out: dict[str, str] = {}
    for name, value in overrides.items():
        key = name.replace("_", ".")
        text = _value_text(key, value)
        if key in RESERVED:
            raise ValueError(f"{key}={text}: set by kraftpy.testing itself (the nodes' ids, roles, addresses and "
                             "directories), not an override")
        out[key] = text
    return out


def validate(brokers: int, overrides: Mapping[str, str]) -> None:
    """Refuse overrides that no node could start with, before anything is started: a ValueError that
    names the key and the value (an unknown key, or a value kraftpy refuses)."""
    from kraftpy.config import ConfigError, load_config
    from kraftpy.config.keys import BY_NAME, IGNORED

    for key, value in overrides.items():
        if key not in BY_NAME and key not in IGNORED and not key.startswith("listener.name."):
            raise ValueError(f"{key}={value}: not a kraftpy configuration key (docs/configuration.md lists them)")
    placeholder = Path("/nonexistent")
    texts = [controller_properties(placeholder, 1, 2, brokers, {}),
             broker_properties(placeholder, 1, 3, 4, 5, 2, brokers, {})]
    for text in texts:
        try:
            load_config(text=text, overrides=[f"{k}={v}" for k, v in overrides.items()])
        except ConfigError as exc:
            key = f"{exc.key}={exc.value}: " if exc.key is not None and exc.value is not None else (
                f"{exc.key}: " if exc.key else "")
            raise ValueError(f"{key}{exc.reason}") from None


def _lines(props: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


def controller_properties(root: Path, port: int, proxy_port: int, brokers: int,
                          overrides: Mapping[str, str]) -> str:
    return _lines({
        "process.roles": "controller",
        "node.id": str(CONTROLLER_ID),
        "controller.quorum.voters": f"{CONTROLLER_ID}@127.0.0.1:{proxy_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "log.dirs": str(root / "controller"),
        **defaults(brokers),
        **overrides,
    })


def broker_properties(root: Path, node_id: int, client_port: int, internal_port: int, internal_proxy_port: int,
                      controller_proxy_port: int, brokers: int, overrides: Mapping[str, str]) -> str:
    return _lines({
        "process.roles": "broker",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{CONTROLLER_ID}@127.0.0.1:{controller_proxy_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{client_port},{INTERNAL}://127.0.0.1:{internal_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client_port},{INTERNAL}://127.0.0.1:{internal_proxy_port}",
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,{INTERNAL}:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": INTERNAL,
        "log.dirs": str(root / f"broker-{node_id}"),
        **defaults(brokers),
        **overrides,
    })
