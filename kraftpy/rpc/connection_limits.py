"""Connection limits of a broker's listeners: Kafka's ``max.connections``, ``max.connections.per.ip``
(with ``max.connections.per.ip.overrides``) and ``max.connection.creation.rate``.

`ConnectionLimits.admit` is asked by the acceptor (kraftpy.rpc.listeners) for every accepted
connection, before any byte is read or a TLS handshake starts; a connection over a limit is closed at
once, counted in ``kraftpy_connections_refused{listener, limit}``, and logged — one line per listener
and limit every `LOG_INTERVAL_S`, with the number refused since the last line. `release` is called when
an admitted connection ends.

The limits, as in Kafka's ConnectionQuotas:

* ``max.connections``: connections of the whole broker; the inter-broker listener's connections count
  but are never refused for it (replication must not be locked out by clients);
* ``listener.name.<listener>.max.connections``: connections of one listener;
* ``max.connections.per.ip``: connections from one address, across listeners; an address listed in
  ``max.connections.per.ip.overrides`` (``address:count,...``) has its own limit;
* ``max.connection.creation.rate`` (per listener, or ``listener.name.<listener>.…``): new connections per
  second, measured as a `Rate` over ``quota.window.num`` windows of ``quota.window.size.seconds``. A
  refused connection is not counted in the rate, so a storm of attempts does not lock everyone out.

Kafka waits (blocks accepting) when max.connections or the creation rate is reached, and closes only
over the per-address limit; kraftpy closes in every case, so that a client learns at once and the
kernel's backlog does not fill with connections nobody will read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from kraftpy.metrics import CONNECTIONS_REFUSED, LISTENER_CONNECTIONS
from kraftpy.rpc.rates import Rate

#: At most one refusal line per listener and limit in this many seconds.
LOG_INTERVAL_S = 10.0
UNLIMITED = 2**31 - 1


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``address:count`` pairs; ValueError naming the bad one."""
    out: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{item!r} is not address:count")
        out[host.strip().strip("[]")] = int(count)
    return out


@attrs.frozen
class ListenerLimits:
    """One listener's own limits (``UNLIMITED`` when not set)."""

    max_connections: int = UNLIMITED
    max_connection_creation_rate: int = UNLIMITED


class ConnectionLimits:
    def __init__(self, *, max_connections: int = UNLIMITED, max_connections_per_ip: int = UNLIMITED,
                 per_ip_overrides: Mapping[str, int] | None = None,
                 listeners: Mapping[str, ListenerLimits] | None = None, inter_broker_listener: str | None = None,
                 window_num: int = 11, window_size_s: float = 1.0, log: Any = None,
                 clock: Callable[[], float] | None = None) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = dict(per_ip_overrides or {})
        self.listeners = dict(listeners or {})
        self.inter_broker_listener = inter_broker_listener
        self.window_num = window_num
        self.window_size_s = window_size_s
        self.log = log
        self._clock = clock or trio.current_time
        #: Open admitted connections: in total, by listener, by address.
        self.total = 0
        self.by_listener: dict[str, int] = {}
        self.by_ip: dict[str, int] = {}
        self._rates: dict[str, Rate] = {}
        #: Refused connections by (listener, limit), since the start.
        self.refused: dict[tuple[str, str], int] = {}
        self._unlogged: dict[tuple[str, str], int] = {}
        self._last_log: dict[tuple[str, str], float] = {}
        self._released: trio.Event | None = None

    @classmethod
    def from_config(cls, config: Any) -> ConnectionLimits | None:
        """The limits a validated broker config sets (None when it sets none); a malformed
        max.connections.per.ip.overrides stops the process with the key and its value."""
        try:
            overrides = parse_ip_overrides(config["max.connections.per.ip.overrides"])
        except ValueError as exc:
            raise config.fail("max.connections.per.ip.overrides", str(exc)) from None
        listeners = {}
        for listener in config.broker_listeners:
            own = config.listener_key(listener.name, "max.connections") != "max.connections"
            listeners[listener.name] = ListenerLimits(
                max_connections=config.listener_value(listener.name, "max.connections") if own else UNLIMITED,
                max_connection_creation_rate=config.listener_value(listener.name, "max.connection.creation.rate"))
        limits = cls(max_connections=config["max.connections"],
                     max_connections_per_ip=config["max.connections.per.ip"], per_ip_overrides=overrides,
                     listeners=listeners, inter_broker_listener=config.inter_broker_listener_name,
                     window_num=config["quota.window.num"], window_size_s=float(config["quota.window.size.seconds"]))
        return limits if limits.is_limited() else None

    def is_limited(self) -> bool:
        return (self.max_connections < UNLIMITED or self.max_connections_per_ip < UNLIMITED
                or bool(self.per_ip_overrides)
                or any(limits != ListenerLimits() for limits in self.listeners.values()))

    def _limit_broken(self, listener: str, host: str, now: float) -> str | None:
        own = self.listeners.get(listener, ListenerLimits())
        ip_limit = self.per_ip_overrides.get(host, self.max_connections_per_ip)
        if self.by_ip.get(host, 0) >= ip_limit:
            return "max.connections.per.ip"
        if self.by_listener.get(listener, 0) >= own.max_connections:
            return f"listener.name.{listener.lower()}.max.connections"
        if listener != self.inter_broker_listener and self.total >= self.max_connections:
            return "max.connections"
        if own.max_connection_creation_rate < UNLIMITED:
            rate = self._rates.get(listener)
            if rate is None:
                rate = self._rates[listener] = Rate(self.window_num, self.window_size_s)
            # Would this connection take the rate over the limit? (Refused ones are not counted.)
            if (rate.total(now) + 1) / rate.window_size(now) > own.max_connection_creation_rate:
                return "max.connection.creation.rate"
            rate.record(1.0, now)
        return None

    def admit(self, listener: str, host: str) -> bool:
        """Count a new connection from ``host`` on ``listener`` in, or refuse it (False: close it)."""
        now = self._clock()
        broken = self._limit_broken(listener, host, now)
        if broken is not None:
            self._refuse(listener, host, broken, now)
            return False
        self.total += 1
        self.by_listener[listener] = self.by_listener.get(listener, 0) + 1
        self.by_ip[host] = self.by_ip.get(host, 0) + 1
        LISTENER_CONNECTIONS.labels(listener).inc()
        return True

    def release(self, listener: str, host: str) -> None:
        """An admitted connection ended."""
        self.total -= 1
        self.by_listener[listener] -= 1
        left = self.by_ip[host] - 1
        if left:
            self.by_ip[host] = left
        else:
            del self.by_ip[host]
        LISTENER_CONNECTIONS.labels(listener).dec()
        if self._released is not None:
            self._released.set()
            self._released = None

    async def wait_released(self) -> None:
        """Wait until an admitted connection next ends."""
        if self._released is None:
            self._released = trio.Event()
        await self._released.wait()

    def _refuse(self, listener: str, host: str, limit: str, now: float) -> None:
        key = (listener, limit)
        self.refused[key] = self.refused.get(key, 0) + 1
        self._unlogged[key] = self._unlogged.get(key, 0) + 1
        CONNECTIONS_REFUSED.labels(listener, limit).inc()
        if self.log is not None and now - self._last_log.get(key, -math.inf) >= LOG_INTERVAL_S:
            self.log.warning("connection refused: over a connection limit", listener=listener, peer_host=host,
                             limit=limit, refused_since_last_line=self._unlogged[key])
            self._last_log[key] = now
            self._unlogged[key] = 0
