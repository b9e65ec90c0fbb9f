"""The broker's settings, with Kafka's key names: built from a `KraftConfig` or given directly (tests)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from kraftpy.coordinator.txn_state import TxnConfig
from kraftpy.metadata.configs import static_broker_configs
from kraftpy.rpc.connection_limits import ConnectionLimits


def _frozen(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


def _paths(value: object) -> tuple[Path, ...]:
    return tuple(Path(p) for p in value)  # type: ignore[union-attr]


@attrs.frozen
class ListenerSettings:
    """One listener the broker serves the Kafka protocol on."""

    name: str
    host: str
    port: int
    #: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (listener.security.protocol.map).
    security_protocol: str = "PLAINTEXT"
    #: The listener's `kraftpy.security.tls.ServerTls` when its protocol runs over TLS.
    tls: Any = attrs.field(default=None, eq=False)


@attrs.frozen
class BrokerSettings:
    node_id: int
    cluster_id: str
    #: log.dirs
    log_dirs: tuple[Path, ...] = attrs.field(converter=_paths)
    #: listeners: where the Kafka protocol is served (host, port); port 0 picks one.
    host: str = "127.0.0.1"
    port: int = 0
    listener_name: str = "PLAINTEXT"
    #: inter.broker.listener.name: the listener followers connect to on their leaders.
    inter_broker_listener_name: str = "PLAINTEXT"
    #: Every listener served (listeners, without the controller's); empty: the one above (host, port,
    #: listener_name), PLAINTEXT.
    listeners: tuple[ListenerSettings, ...] = ()
    #: The `kraftpy.security.tls.ClientTls` of connections to other brokers' inter-broker listener,
    #: when that listener runs over TLS.
    inter_broker_tls: Any = attrs.field(default=None, eq=False)
    #: SASL on SASL_PLAINTEXT / SASL_SSL listeners (a `kraftpy.broker.apis.sasl.SaslSettings`; None: defaults).
    sasl: Any = attrs.field(default=None, eq=False)
    #: The `kraftpy.broker.client.SaslLogin` of connections to other brokers when the inter-broker listener
    #: is SASL_PLAINTEXT or SASL_SSL (sasl.mechanism.inter.broker.protocol, the listener's JAAS username).
    inter_broker_sasl: Any = attrs.field(default=None, eq=False)
    #: ssl.reload.check.interval.ms
    ssl_reload_check_interval_ms: int = 30000
    #: How a listener that cannot be bound names the setting that chose it (``listeners=...``).
    listeners_setting: str | None = None
    #: socket.request.max.bytes
    socket_request_max_bytes: int = 104857600
    #: max.request.partition.size.limit: most partitions in one DescribeTopicPartitions response.
    max_request_partition_size_limit: int = 2000
    #: queued.max.request.bytes (-1: no bound) and connections.max.idle.ms (-1: never)
    queued_max_request_bytes: int = -1
    connections_max_idle_ms: int = -1
    #: sasl.server.max.receive.size: the largest frame before a SASL connection has authenticated.
    sasl_server_max_receive_size: int = 524288
    #: quota.window.num and quota.window.size.seconds: the samples of client quota rates.
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    #: The connection limits of this broker's listeners (kraftpy.rpc.connection_limits); None: none.
    connection_limits: Any = attrs.field(default=None, eq=False)
    #: replica.lag.time.max.ms
    replica_lag_time_max_ms: int = 30000
    #: replica.fetch.max.bytes
    replica_fetch_max_bytes: int = 1048576
    #: replica.fetch.response.max.bytes
    replica_fetch_response_max_bytes: int = 10485760
    #: replica.fetch.wait.max.ms
    replica_fetch_wait_max_ms: int = 500
    #: replica.fetch.min.bytes
    replica_fetch_min_bytes: int = 1
    #: replica.fetch.backoff.ms
    replica_fetch_backoff_ms: int = 1000
    #: replica.high.watermark.checkpoint.interval.ms
    high_watermark_checkpoint_interval_ms: int = 5000
    #: max.incremental.fetch.session.cache.slots (KIP-227 fetch sessions this broker keeps)
    max_incremental_fetch_session_cache_slots: int = 1000
    #: log.retention.check.interval.ms
    log_retention_check_interval_ms: int = 300000
    #: auto.create.topics.enable
    auto_create_topics_enable: bool = True
    #: num.partitions and default.replication.factor: what topics this broker auto-creates get (-1: the
    #: controller's defaults).
    num_partitions: int = -1
    default_replication_factor: int = -1
    #: producer.id.expiration.ms
    producer_id_expiration_ms: int = 86400000
    #: num.recovery.threads.per.data.dir: worker threads opening (and recovering) logs, per log directory.
    recovery_threads_per_data_dir: int = 1
    #: log.open.segments.max: the most segment files held open at once (0: half the open-file limit).
    log_open_segments_max: int = 0
    #: log.writeback.interval.bytes: appended bytes of a segment after which the kernel is asked to
    #: start writing them to disk (0: its own write-back alone; kraftpy.storage.writeback).
    log_writeback_interval_bytes: int = 1048576
    #: The group coordinator and __consumer_offsets (Kafka's key names: offsets.topic.num.partitions, ...).
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offsets_commit_timeout_ms: int = 5000
    offsets_load_buffer_size: int = 5242880
    offset_metadata_max_bytes: int = 4096
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int = 2**31 - 1
    #: KIP-848 consumer groups: group.coordinator.rebalance.protocols and the group.consumer.* keys.
    group_coordinator_rebalance_protocols: tuple[str, ...] = ("classic",)
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_migration_policy: str = "disabled"
    #: The transaction coordinator and __transaction_state (transaction.* keys).
    transaction: TxnConfig = TxnConfig()
    #: transaction.partition.verification.enable: a partition leader asks the coordinator whether a
    #: producer's first transactional batch belongs to a transaction that added the partition (KIP-890).
    transaction_partition_verification_enable: bool = True
    #: The log cleaner (compacted topics): log.cleaner.enable, log.cleaner.threads,
    #: log.cleaner.io.max.bytes.per.second, log.cleaner.dedupe.buffer.size, log.cleaner.io.buffer.size,
    #: log.cleaner.io.buffer.load.factor, log.cleaner.backoff.ms.
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308
    log_cleaner_dedupe_buffer_size: int = 134217728
    log_cleaner_io_buffer_size: int = 524288
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_backoff_ms: int = 15000
    #: authorizer.class.name (empty: no authorization), super.users, allow.everyone.if.no.acl.found.
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    #: Broker-level values of topic configs from the properties file (log.retention.ms, min.insync.replicas,
    #: message.max.bytes, ...): what topics inherit when neither they nor the cluster override a key.
    static_broker_configs: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen)

    def served_listeners(self) -> tuple[ListenerSettings, ...]:
        return self.listeners or (ListenerSettings(self.listener_name, self.host, self.port),)

    @classmethod
    def from_config(cls, config, *, cluster_id: str, **overrides) -> BrokerSettings:
        """The broker settings of a validated ``KraftConfig``; ``host``/``port`` are the inter-broker
        listener's."""
        from kraftpy.broker.apis.sasl import SaslSettings, inter_broker_login
        from kraftpy.security.tls import connecting_tls, listener_tls

        inter = config.inter_broker_listener_name
        listener = None
        for candidate in config.broker_listeners:
            if candidate.name == inter or listener is None:
                listener = candidate
        listeners = tuple(ListenerSettings(item.name, item.host, item.port, config.security_protocol(item.name),
                                           listener_tls(config, item.name))
                          for item in config.broker_listeners)
        values = dict(
            node_id=config.node_id,
            cluster_id=cluster_id,
            log_dirs=config.log_dirs,
            host=listener.host if listener else "",
            port=listener.port if listener else 9092,
            listener_name=listener.name if listener else "PLAINTEXT",
            inter_broker_listener_name=inter,
            listeners=listeners,
            inter_broker_tls=connecting_tls(config, inter),
            ssl_reload_check_interval_ms=config["ssl.reload.check.interval.ms"],
            listeners_setting="listeners=" + ",".join(str(item) for item in config.listeners),
            sasl=SaslSettings.from_config(config),
            inter_broker_sasl=inter_broker_login(config),
            socket_request_max_bytes=config["socket.request.max.bytes"],
            max_request_partition_size_limit=config["max.request.partition.size.limit"],
            queued_max_request_bytes=config["queued.max.request.bytes"],
            connections_max_idle_ms=config["connections.max.idle.ms"],
            sasl_server_max_receive_size=config["sasl.server.max.receive.size"],
            quota_window_num=config["quota.window.num"],
            quota_window_size_seconds=config["quota.window.size.seconds"],
            connection_limits=ConnectionLimits.from_config(config),
            replica_lag_time_max_ms=config["replica.lag.time.max.ms"],
            replica_fetch_max_bytes=config["replica.fetch.max.bytes"],
            replica_fetch_response_max_bytes=config["replica.fetch.response.max.bytes"],
            replica_fetch_wait_max_ms=config["replica.fetch.wait.max.ms"],
            replica_fetch_min_bytes=config["replica.fetch.min.bytes"],
            replica_fetch_backoff_ms=config["replica.fetch.backoff.ms"],
            high_watermark_checkpoint_interval_ms=config["replica.high.watermark.checkpoint.interval.ms"],
            log_retention_check_interval_ms=config["log.retention.check.interval.ms"],
            auto_create_topics_enable=config["auto.create.topics.enable"],
            max_incremental_fetch_session_cache_slots=config["max.incremental.fetch.session.cache.slots"],
            num_partitions=config["num.partitions"],
            default_replication_factor=config["default.replication.factor"],
            producer_id_expiration_ms=config["producer.id.expiration.ms"],
            recovery_threads_per_data_dir=config["num.recovery.threads.per.data.dir"],
            log_open_segments_max=config["log.open.segments.max"],
            log_writeback_interval_bytes=config["log.writeback.interval.bytes"],
            offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=config["offsets.topic.replication.factor"],
            offsets_topic_segment_bytes=config["offsets.topic.segment.bytes"],
            offsets_retention_minutes=config["offsets.retention.minutes"],
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            offsets_commit_timeout_ms=config["offsets.commit.timeout.ms"],
            offsets_load_buffer_size=config["offsets.load.buffer.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            group_initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            group_min_session_timeout_ms=config["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=config["group.max.session.timeout.ms"],
            group_max_size=config["group.max.size"],
            group_coordinator_rebalance_protocols=tuple(config["group.coordinator.rebalance.protocols"]),
            group_consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
            group_consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            group_consumer_max_size=config["group.consumer.max.size"],
            group_consumer_assignors=tuple(config["group.consumer.assignors"]),
            group_consumer_migration_policy=config["group.consumer.migration.policy"],
            transaction=TxnConfig.from_config(config),
            transaction_partition_verification_enable=config["transaction.partition.verification.enable"],
            log_cleaner_enable=config["log.cleaner.enable"],
            log_cleaner_threads=config["log.cleaner.threads"],
            log_cleaner_io_max_bytes_per_second=config["log.cleaner.io.max.bytes.per.second"],
            log_cleaner_dedupe_buffer_size=config["log.cleaner.dedupe.buffer.size"],
            log_cleaner_io_buffer_size=config["log.cleaner.io.buffer.size"],
            log_cleaner_io_buffer_load_factor=config["log.cleaner.io.buffer.load.factor"],
            log_cleaner_backoff_ms=config["log.cleaner.backoff.ms"],
            static_broker_configs=static_broker_configs(config),
            authorizer_class_name=config["authorizer.class.name"],
            super_users=config["super.users"],
            allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"],
        )
        values.update(overrides)
        return cls(**values)
