"""Every configuration key kraftpy reads, with Kafka's names and defaults.

``docs/configuration.md`` is generated from this table (``kraftpy config docs``); a test fails
when the page is stale.
"""

from __future__ import annotations

from kraftpy.config.schema import (
    INT64_MAX,
    REQUIRED,
    ConfigKey,
    at_least,
    between,
    host_address,
    one_of,
)

B = ("broker",)


def _pem_only(value: str) -> None:
    if value != "PEM":
        raise ValueError(f"{value} stores are not supported; kraftpy reads PEM (convert with openssl or keytool)")


_pem_only.describe = "PEM"  # type: ignore[attr-defined]
def _authorizer_class(value: str) -> None:
    if value not in ("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        raise ValueError("kraftpy's authorizer is org.apache.kafka.metadata.authorizer.StandardAuthorizer "
                         "(empty: no authorization)")


_authorizer_class.describe = "empty, org.apache.kafka.metadata.authorizer.StandardAuthorizer"  # type: ignore[attr-defined]


def _controller_mechanism(value: str) -> None:
    if value == "GSSAPI":
        raise ValueError("GSSAPI (Kerberos) is not available in kraftpy; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    if value not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise ValueError(f"{value!r} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (the controller plane's "
                         "mechanisms)")


_controller_mechanism.describe = "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"  # type: ignore[attr-defined]
C = ("controller",)
BC = ("broker", "controller")

KEYS: list[ConfigKey] = [
    # --- the process
    ConfigKey("process.roles", "list", REQUIRED,
              "The roles of this process: broker, controller, or both (combined mode).",
              one_of("broker", "controller")),
    ConfigKey("node.id", "int", REQUIRED,
              "The id of this node, unique in the cluster; with controller.quorum.voters, a controller's id "
              "must be one of the voters.",
              at_least(0)),
    ConfigKey("broker.rack", "string", None,
              "The rack of this broker, used to spread replicas across racks.", roles=B, nullable=True),
    # --- the quorum
    ConfigKey("controller.quorum.voters", "voters", [],
              "A static controller quorum (kraft.version 0) as a comma-separated list of id@host:port. Give "
              "this or controller.quorum.bootstrap.servers.", default_doc="(none)"),
    ConfigKey("controller.quorum.bootstrap.servers", "addresses", [],
              "Where a node of a dynamic quorum (KIP-853: the voters are in the metadata log, changed with "
              "kraftpy quorum add-controller and remove-controller) first looks for the quorum's leader, as "
              "host:port[,host:port...] of some controllers. Used when controller.quorum.voters is not set.",
              default_doc="(none)"),
    ConfigKey("controller.quorum.election.timeout.ms", "int", 1000,
              "Time without a leader before a voter starts an election; each timeout is drawn from [T, 2T).",
              at_least(1)),
    ConfigKey("controller.quorum.election.backoff.max.ms", "int", 1000,
              "Largest back-off before a voter whose election failed tries again.", at_least(0)),
    ConfigKey("controller.quorum.fetch.timeout.ms", "int", 2000,
              "Time without a successful fetch before a follower looks for a new leader; a leader resigns "
              "after 1.5 times this without fetches from a majority of the voters (Kafka's check quorum).",
              at_least(1)),
    ConfigKey("controller.quorum.request.timeout.ms", "int", 2000,
              "How long a quorum request waits for its response.", at_least(1)),
    ConfigKey("controller.quorum.retry.backoff.ms", "int", 20,
              "Back-off before a failed quorum request is retried.", at_least(0)),
    ConfigKey("controller.quorum.append.linger.ms", "int", 25,
              "How long the quorum leader waits to batch proposals into one append.", at_least(0)),
    ConfigKey("controller.listener.names", "list", REQUIRED,
              "Names of the listeners the controllers use; the first is the one brokers connect to."),
    # --- listeners
    ConfigKey("listeners", "listeners", "PLAINTEXT://:9092",
              "Listeners as NAME://host:port; an empty host binds all interfaces, port 0 an ephemeral port."),
    ConfigKey("advertised.listeners", "listeners", None,
              "Addresses clients are told to use, as NAME://host:port; defaults to listeners.",
              roles=B, nullable=True),
    ConfigKey("listener.security.protocol.map", "protocol map",
              "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
              "Security protocol of each listener name, as NAME:PROTOCOL pairs."),
    ConfigKey("inter.broker.listener.name", "string", None,
              "The listener brokers use to replicate from each other (and to send each other transaction "
              "markers); when unset, the listener named by security.inter.broker.protocol.", roles=B,
              default_doc="the security.inter.broker.protocol listener", nullable=True),
    ConfigKey("security.inter.broker.protocol", "string", "PLAINTEXT",
              "The security protocol brokers use between themselves; only read when "
              "inter.broker.listener.name is not set, and then names the listener of that name.",
              one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), roles=B),
    ConfigKey("socket.request.max.bytes", "int", 104857600,
              "Largest request frame accepted; a larger one closes that connection.", at_least(1)),
    ConfigKey("max.request.partition.size.limit", "int", 2000,
              "Most partitions one DescribeTopicPartitions response carries (the request's own limit may be "
              "lower); the rest are asked for with the cursor the response gives.", at_least(1), roles=B),
    ConfigKey("queued.max.request.bytes", "long", 209715200,
              "Bytes of requests a listener holds in memory across all its connections, from the first byte "
              "read until the request is answered; a connection that would go over it is not read until "
              "others are done. The last MiB is kept for requests of up to 64 KiB, and a larger request "
              "that cannot fit in the rest closes its connection. -1 for no bound (Kafka's default, bounded "
              "only by its queued.max.requests); kraftpy's default is twice socket.request.max.bytes.",
              at_least(-1)),
    ConfigKey("connections.max.idle.ms", "long", 600000,
              "A connection on which nothing arrives for this long, while none of its requests is being "
              "handled, is closed; -1 never closes one.", at_least(-1)),
    # --- connection limits and client quotas (each max.connection* key may also be set for one listener
    # as listener.name.<listener>.<key>)
    ConfigKey("max.connections", "int", 2147483647,
              "Connections the broker keeps open at once, over all its listeners; one more is closed at accept. "
              "Set as listener.name.<listener>.max.connections it bounds that listener alone. Connections of "
              "the inter-broker listener count but are never refused for the broker-wide limit.",
              at_least(0), roles=B),
    ConfigKey("max.connections.per.ip", "int", 2147483647,
              "Connections one client address may keep open at once, over all listeners; one more is closed "
              "at accept.", at_least(0), roles=B),
    ConfigKey("max.connections.per.ip.overrides", "string", "",
              "Per-address exceptions to max.connections.per.ip, as address:count pairs separated by commas "
              "(IP addresses as the broker sees them; IPv6 may be bracketed).", roles=B),
    ConfigKey("max.connection.creation.rate", "int", 2147483647,
              "New connections per second a listener accepts, measured over quota.window.num windows of "
              "quota.window.size.seconds; a connection past the rate is closed at accept (and not counted).",
              at_least(0), roles=B),
    ConfigKey("quota.window.num", "int", 11,
              "Samples kept to measure client quota rates and connection creation rates.", at_least(1), roles=B),
    ConfigKey("quota.window.size.seconds", "int", 1,
              "Length of each sample of a client quota or connection creation rate.", at_least(1), roles=B),
    # --- TLS (ssl.*; each may be set for one listener as listener.name.<listener>.ssl.*)
    ConfigKey("ssl.keystore.type", "string", "PEM",
              "Format of the key store; kraftpy reads PEM only (JKS and PKCS12 are refused).", _pem_only),
    ConfigKey("ssl.keystore.location", "string", None,
              "PEM file holding the private key and the certificate chain of this server (or client).",
              nullable=True),
    ConfigKey("ssl.keystore.certificate.chain", "string", None,
              "The certificate chain in PEM form, inline (instead of ssl.keystore.location).", nullable=True),
    ConfigKey("ssl.keystore.key", "string", None,
              "The private key in PEM form, inline (with ssl.keystore.certificate.chain).", nullable=True),
    ConfigKey("ssl.key.password", "string", None,
              "Password of an encrypted private key.", nullable=True, default_doc="(unset)"),
    ConfigKey("ssl.truststore.type", "string", "PEM",
              "Format of the trust store; kraftpy reads PEM only (JKS and PKCS12 are refused).", _pem_only),
    ConfigKey("ssl.truststore.location", "string", None,
              "PEM file of the CA certificates trusted to sign peers' certificates.", nullable=True),
    ConfigKey("ssl.truststore.certificates", "string", None,
              "The trusted CA certificates in PEM form, inline (instead of ssl.truststore.location).",
              nullable=True),
    ConfigKey("ssl.client.auth", "string", "none",
              "Whether a TLS listener asks clients for a certificate: none, requested (verified when "
              "given) or required (a client without one signed by the trust store is refused).",
              one_of("none", "requested", "required")),
    ConfigKey("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3",
              "TLS versions accepted.", one_of("TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.protocol", "string", "TLSv1.3",
              "The TLS version asked for first; with ssl.enabled.protocols it bounds the versions used.",
              one_of("TLS", "TLSv1.2", "TLSv1.3")),
    ConfigKey("ssl.cipher.suites", "list", "",
              "Cipher suites allowed for TLSv1.2, by OpenSSL or IANA name; empty for the defaults "
              "(TLSv1.3 suites are always OpenSSL's)."),
    ConfigKey("ssl.endpoint.identification.algorithm", "string", "https",
              "https: a client checks that the server's certificate names the host it connected to; "
              "empty: it does not."),
    ConfigKey("ssl.reload.check.interval.ms", "long", 30000,
              "kraftpy: how often a TLS listener looks at its key store and trust store files; when they "
              "changed, new connections use the new certificates (a broken new file is logged and the "
              "old certificates stay).", at_least(1)),
    # --- SASL (each may be set for one listener as listener.name.<listener>.<key>)
    ConfigKey("sasl.enabled.mechanisms", "list", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
              "The SASL mechanisms a SASL_PLAINTEXT or SASL_SSL listener offers; a client asking for another "
              "is refused with UNSUPPORTED_SASL_MECHANISM. Kafka's default is GSSAPI, which kraftpy does not "
              "have.", one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"), roles=BC),
    ConfigKey("sasl.server.max.receive.size", "int", 524288,
              "The largest request a SASL_PLAINTEXT or SASL_SSL connection may send before it has "
              "authenticated (and while it does): a larger size prefix closes the connection before any of "
              "the frame is read, so an unauthenticated client cannot make the server hold "
              "socket.request.max.bytes. Authenticated, socket.request.max.bytes applies.", at_least(1),
              roles=BC),
    ConfigKey("sasl.jaas.config", "string", None,
              "JAAS login module config, Kafka's syntax. On a broker, set per listener and mechanism as "
              "listener.name.<listener>.plain.sasl.jaas.config: PlainLoginModule's user_<name>=\"<password>\" "
              "options are the PLAIN users, and username/password are what this broker authenticates "
              "with on a SASL inter-broker listener.", nullable=True, default_doc="(unset)", roles=BC),
    ConfigKey("sasl.mechanism.inter.broker.protocol", "string", "PLAIN",
              "The SASL mechanism brokers authenticate with to each other when the inter-broker listener "
              "is SASL_PLAINTEXT or SASL_SSL (Kafka's default is GSSAPI, which kraftpy does not have).",
              one_of("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), roles=B),
    ConfigKey("sasl.mechanism.controller.protocol", "string", "PLAIN",
              "The SASL mechanism controllers, brokers and tools authenticate with to the controllers when the "
              "controller listener is SASL_PLAINTEXT or SASL_SSL; the username and password come from "
              "listener.name.<controller listener>.<mechanism>.sasl.jaas.config. Kafka's default is GSSAPI, "
              "which kraftpy does not have.", _controller_mechanism, roles=BC),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.url", "string", None,
              "OAUTHBEARER: the JSON Web Key Set whose keys sign valid tokens, as a file: URL (read at "
              "start, then every sasl.oauthbearer.jwks.endpoint.refresh.ms and when a token names an unknown "
              "kid). Unset: tokens are validated as Kafka's unsecured validator does (unsigned, for "
              "development only).", nullable=True, roles=B),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3_600_000,
              "OAUTHBEARER with a JWKS: how long the broker waits between reads of the key set (a token "
              "naming a kid the broker does not hold makes it read the set at once).", at_least(1), roles=B),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", 100,
              "OAUTHBEARER with a JWKS: the first wait before reading the key set again after a read failed "
              "(the keys held stay in use); it doubles on each failure up to "
              "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms.", at_least(0), roles=B),
    ConfigKey("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "long", 10_000,
              "OAUTHBEARER with a JWKS: the longest wait between reads of a key set that cannot be read.",
              at_least(0), roles=B),
    ConfigKey("sasl.oauthbearer.expected.audience", "list", "",
              "OAUTHBEARER with a JWKS: a token's aud must name one of these (empty: not checked).", roles=B),
    ConfigKey("sasl.oauthbearer.expected.issuer", "string", None,
              "OAUTHBEARER with a JWKS: the iss a token must have (unset: not checked).", nullable=True, roles=B),
    ConfigKey("sasl.oauthbearer.sub.claim.name", "string", "sub",
              "OAUTHBEARER with a JWKS: the claim naming the principal.", roles=B),
    ConfigKey("sasl.oauthbearer.scope.claim.name", "string", "scope",
              "OAUTHBEARER with a JWKS: the claim holding the token's scope.", roles=B),
    ConfigKey("sasl.oauthbearer.clock.skew.seconds", "int", 30,
              "OAUTHBEARER with a JWKS: tolerance when checking exp, iat and nbf.", at_least(0), roles=B),
    ConfigKey("connection.failed.authentication.delay.ms", "int", 100,
              "How long a failed SASL authentication waits before its error is answered and the "
              "connection closed (slows down password guessing).", at_least(0), roles=BC),
    ConfigKey("connections.max.reauth.ms", "long", 0,
              "KIP-368: the longest a SASL session lasts; a client must re-authenticate on the same "
              "connection before then, and a connection whose session expired is closed at its next "
              "request. 0: sessions never expire.", at_least(0), roles=B),
    # --- logs
    ConfigKey("log.dirs", "list", None,
              "Directories holding the partition logs; defaults to log.dir.", nullable=True),
    ConfigKey("log.dir", "string", "/tmp/kraftpy-logs",
              "The log directory used when log.dirs is not set."),
    ConfigKey("metadata.log.dir", "string", None,
              "Directory of the __cluster_metadata log; defaults to the first of log.dirs.", nullable=True),
    ConfigKey("metadata.log.segment.bytes", "int", 1073741824,
              "Segment size of the metadata log.", at_least(12)),
    ConfigKey("metadata.log.max.record.bytes.between.snapshots", "long", 20971520,
              "Bytes of metadata records appended after which a new metadata snapshot is written.",
              at_least(1)),
    ConfigKey("metadata.max.retention.ms", "long", 604800000,
              "How long metadata log segments below the latest snapshot are kept.", at_least(-1)),
    ConfigKey("log.segment.bytes", "int", 1073741824,
              "Largest size of one log segment file before a new one is rolled.", at_least(14)),
    ConfigKey("log.roll.ms", "long", None,
              "Longest time before a new segment is rolled; overrides log.roll.hours.",
              at_least(1), nullable=True),
    ConfigKey("log.roll.hours", "int", 168, "Longest time in hours before a new segment is rolled.",
              at_least(1)),
    ConfigKey("log.retention.ms", "long", None,
              "How long a log segment is kept; -1 keeps forever. Overrides log.retention.minutes and hours.",
              at_least(-1), nullable=True),
    ConfigKey("log.retention.minutes", "int", None,
              "How long a log segment is kept, in minutes; overrides log.retention.hours.",
              at_least(-1), nullable=True),
    ConfigKey("log.retention.hours", "int", 168, "How long a log segment is kept, in hours.", at_least(-1)),
    ConfigKey("log.retention.bytes", "long", -1,
              "Largest size of a partition's log before old segments are deleted; -1 for no limit.",
              at_least(-1)),
    ConfigKey("log.retention.check.interval.ms", "long", 300000,
              "How often the retention rules are applied.", at_least(1)),
    ConfigKey("log.index.interval.bytes", "int", 4096,
              "Bytes of log between two entries of the sparse offset and time indexes.", at_least(0)),
    ConfigKey("log.flush.interval.messages", "long", INT64_MAX,
              "Records appended to a partition after which it is fsynced.", at_least(1)),
    ConfigKey("log.flush.interval.ms", "long", None,
              "Longest time appended data stays in the page cache before an fsync; unset means never by time.",
              at_least(0), nullable=True),
    ConfigKey("log.cleanup.policy", "list", "delete", "Default cleanup policy of topics.",
              one_of("delete", "compact")),
    # --- the log cleaner (compacted topics)
    ConfigKey("log.cleaner.enable", "boolean", True,
              "Whether the log cleaner runs; without it, topics with cleanup.policy=compact are never compacted.",
              roles=B),
    ConfigKey("num.recovery.threads.per.data.dir", "int", 2,
              "Worker threads per log directory that open the logs when the broker starts (and when it "
              "is given new replicas), recovering those not closed cleanly: each reads its segments past "
              "the recovery point and checks every batch's CRC. A start after a clean stop, with nothing to "
              "recover, opens them on one thread (faster than several in one Python process).",
              at_least(1), roles=B),
    ConfigKey("log.open.segments.max", "int", 0,
              "The most log segment files the broker keeps open at once. Beyond it the least recently "
              "used are closed, and opened again when next read or written, so a broker holds any "
              "number of partitions within its open-file limit. 0: half of the open-file limit (the "
              "broker first raises its soft limit, ulimit -n, to the hard one); the other half is left "
              "for connections and index files.", at_least(0), roles=B),
    ConfigKey("log.writeback.interval.bytes", "int", 1048576,
              "Bytes appended to a log segment after which the broker asks the kernel to start writing "
              "them to disk (Linux's sync_file_range, from a worker thread). Nothing waits for those "
              "writes and durability is unchanged (log.flush.interval.messages and .ms decide the "
              "fsyncs); the page cache's dirty data stays small and the disk is written as the log "
              "grows, instead of in the bursts of the kernel's own write-back (at vm.dirty_background_ratio "
              "of memory, or 30 s), which take the CPU and the disk from the broker for a second and show "
              "as latency spikes. 0: the kernel's write-back alone, as Kafka leaves it. Not Linux: no "
              "effect.", at_least(0), roles=B),
    ConfigKey("log.preallocate", "boolean", False,
              "Whether a new log segment has the disk blocks of its whole size (log.segment.bytes) allocated "
              "when it is created (Linux fallocate; the file's size is unchanged), and those it did not use "
              "given back when it is rolled. Appends then write into blocks the file already has: on ext4 they "
              "no longer wait while the file system allocates blocks under other work of the disk (an fsync's "
              "cache flush, a deleted file's discards), stalls of 100 ms and more on a busy disk. Costs a "
              "whole segment of disk space per partition replica from the moment the segment is created. "
              "Where the file system cannot reserve blocks, or the disk has no room for them, segments are "
              "written as without. The default of the topic-level preallocate.", roles=B),
    ConfigKey("log.cleaner.threads", "int", 1,
              "How many logs are cleaned at the same time, each with its share of the dedupe buffer; 0 "
              "cleans none.", at_least(0), roles=B),
    ConfigKey("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308,
              "Bound on the bytes the cleaners read and write, together, per second.", at_least(1.0), roles=B),
    ConfigKey("log.cleaner.dedupe.buffer.size", "long", 134217728,
              "Memory of the cleaners' offset maps (key hash to offset, 24 bytes a key), shared among "
              "log.cleaner.threads; a pass maps at most this many keys and leaves the rest for the next.",
              at_least(48), roles=B),
    ConfigKey("log.cleaner.io.buffer.size", "int", 524288,
              "Read and write buffers of the cleaners, shared among log.cleaner.threads.", at_least(1024), roles=B),
    ConfigKey("log.cleaner.io.buffer.load.factor", "double", 0.9,
              "How full the offset map's slots may get.", between(0.01, 1.0), roles=B),
    ConfigKey("log.cleaner.backoff.ms", "long", 15000,
              "How long the cleaner waits before looking again when no log needs cleaning.", at_least(0), roles=B),
    ConfigKey("log.cleaner.min.cleanable.ratio", "double", 0.5,
              "Default min.cleanable.dirty.ratio of topics: the share of a log's bytes written since its last "
              "cleaning above which it is cleaned.", between(0.0, 1.0)),
    ConfigKey("log.cleaner.delete.retention.ms", "long", 86400000,
              "Default delete.retention.ms of topics: how long a tombstone is kept after the cleaning that "
              "first kept it, so that consumers reading from the start see the delete.", at_least(0)),
    ConfigKey("log.cleaner.min.compaction.lag.ms", "long", 0,
              "Default min.compaction.lag.ms of topics: a record younger than this is never compacted away.",
              at_least(0)),
    ConfigKey("log.cleaner.max.compaction.lag.ms", "long", INT64_MAX,
              "Default max.compaction.lag.ms of topics: a record older than this is compacted whatever the "
              "dirty ratio (and the active segment is rolled after this long).", at_least(1)),
    ConfigKey("log.message.timestamp.type", "string", "CreateTime",
              "Whether record timestamps are the producer's (CreateTime) or the broker's (LogAppendTime).",
              one_of("CreateTime", "LogAppendTime")),
    ConfigKey("log.message.timestamp.before.max.ms", "long", INT64_MAX,
              "How far before the broker's time a CreateTime record timestamp may lie; an older record is "
              "refused with INVALID_TIMESTAMP.", at_least(0)),
    ConfigKey("log.message.timestamp.after.max.ms", "long", 3600000,
              "How far after the broker's time a CreateTime record timestamp may lie; a later record is "
              "refused with INVALID_TIMESTAMP.", at_least(0)),
    ConfigKey("message.max.bytes", "int", 1048588,
              "Largest record batch the broker accepts (after compression).", at_least(0)),
    # --- topics and replication
    ConfigKey("num.partitions", "int", 1, "Partitions of a topic created without a count.", at_least(1)),
    ConfigKey("default.replication.factor", "int", 1,
              "Replication factor of a topic created without one.", between(1, 32767)),
    ConfigKey("min.insync.replicas", "int", 1,
              "Fewest in-sync replicas an acks=all write needs.", at_least(1)),
    ConfigKey("unclean.leader.election.enable", "boolean", False,
              "Whether a replica outside the ISR may become leader when no ISR member is alive (may lose data)."),
    # --- authorization (ACLs)
    ConfigKey("authorizer.class.name", "string", "",
              "The authorizer of Kafka API requests: empty for none (every request is allowed), or "
              "org.apache.kafka.metadata.authorizer.StandardAuthorizer to check every request against the "
              "ACLs stored in the metadata log. On a controller whose listener is SASL_PLAINTEXT or SASL_SSL it also "
              "decides who may use the control plane: super users and principals with ClusterAction on the cluster.",
              _authorizer_class, roles=BC),
    ConfigKey("super.users", "string", "",
              "Principals allowed everything whatever the ACLs say, separated by semicolons "
              "(User:admin;User:ops).", roles=BC),
    ConfigKey("allow.everyone.if.no.acl.found", "boolean", False,
              "Whether a resource without any ACL is open to everybody (true) or to super users only.",
              roles=BC),
    ConfigKey("auto.create.topics.enable", "boolean", True,
              "Whether a produce or metadata request for an unknown topic creates it."),
    ConfigKey("auto.leader.rebalance.enable", "boolean", True,
              "Whether leadership is moved back to preferred replicas in the background."),
    ConfigKey("leader.imbalance.check.interval.seconds", "long", 300,
              "How often the controller checks for leaders that are not the preferred replica.",
              at_least(1), roles=C),
    ConfigKey("leader.imbalance.per.broker.percentage", "int", 10,
              "Accepted for Kafka's configs and, as in Kafka's KRaft controller, not consulted: each "
              "leader imbalance check moves every partition it can to its preferred replica.", between(0, 100),
              roles=C),
    ConfigKey("delete.topic.enable", "boolean", True, "Whether topics may be deleted."),
    ConfigKey("replica.lag.time.max.ms", "long", 30000,
              "A follower that has not caught up for this long is removed from the ISR.", at_least(1),
              roles=B),
    ConfigKey("leader.replication.throttled.rate", "long", INT64_MAX,
              "Bytes per second a leader sends to the followers of throttled replicas (a topic's "
              "leader.replication.throttled.replicas); also a dynamic broker config.", at_least(0), roles=B),
    ConfigKey("follower.replication.throttled.rate", "long", INT64_MAX,
              "Bytes per second a follower fetches for throttled replicas (a topic's "
              "follower.replication.throttled.replicas); also a dynamic broker config.", at_least(0), roles=B),
    ConfigKey("replica.fetch.max.bytes", "int", 1048576,
              "Bytes a follower asks for per partition in one fetch.", at_least(0), roles=B),
    ConfigKey("replica.fetch.response.max.bytes", "int", 10485760,
              "Bytes a follower asks for in one whole fetch.", at_least(0), roles=B),
    ConfigKey("replica.fetch.wait.max.ms", "int", 500,
              "Longest time a follower's fetch waits on the leader for data.", at_least(0), roles=B),
    ConfigKey("replica.fetch.min.bytes", "int", 1,
              "Bytes a follower's fetch waits for.", at_least(1), roles=B),
    ConfigKey("replica.fetch.backoff.ms", "int", 1000,
              "Back-off after a follower's fetch failed.", at_least(0), roles=B),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", "long", 5000,
              "How often high watermarks are written to disk.", at_least(1), roles=B),
    ConfigKey("max.incremental.fetch.session.cache.slots", "int", 1000,
              "The most incremental fetch sessions (KIP-227) this broker keeps; 0 makes every fetch a full one. "
              "When it is full, a new session takes the place of one unused for 120 s, else of a smaller one "
              "at least 120 s old; a follower's new session may also take a consumer's at any age.", at_least(0), roles=B),
    ConfigKey("num.replica.fetchers", "int", 1,
              "Fetcher tasks per source broker for replication.", at_least(1), roles=B),
    ConfigKey("producer.id.expiration.ms", "int", 86400000,
              "How long a producer id's state is kept after its last write.", at_least(1), roles=B),
    ConfigKey("compression.type", "string", "producer",
              "Codec of stored batches: producer keeps what the producer sent.",
              one_of("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")),
    # --- broker lifecycle
    ConfigKey("broker.session.timeout.ms", "int", 9000,
              "A broker that sends no heartbeat for this long is fenced by the controller.", at_least(1)),
    ConfigKey("broker.heartbeat.interval.ms", "int", 2000,
              "How often a broker sends a heartbeat to the controller.", at_least(1), roles=B),
    # --- consumer groups
    ConfigKey("group.initial.rebalance.delay.ms", "int", 3000,
              "How long the first rebalance of an empty group waits for more members.", at_least(0),
              roles=B),
    ConfigKey("group.min.session.timeout.ms", "int", 6000,
              "Smallest session timeout a group member may ask for.", at_least(0), roles=B),
    ConfigKey("group.max.session.timeout.ms", "int", 1800000,
              "Largest session timeout a group member may ask for.", at_least(0), roles=B),
    ConfigKey("group.max.size", "int", 2**31 - 1,
              "Most members one consumer group may have; a member joining past it is refused with "
              "GROUP_MAX_SIZE_REACHED.", at_least(1), roles=B),
    ConfigKey("group.consumer.session.timeout.ms", "int", 45000,
              "Session timeout of members of groups using the consumer protocol (KIP-848), unless the group "
              "sets consumer.session.timeout.ms; classic-protocol members use the timeout their client sends.",
              at_least(1)),
    ConfigKey("group.consumer.min.session.timeout.ms", "int", 45000,
              "Smallest consumer.session.timeout.ms a consumer-protocol group may be given.", at_least(1)),
    ConfigKey("group.consumer.max.session.timeout.ms", "int", 60000,
              "Largest consumer.session.timeout.ms a consumer-protocol group may be given.", at_least(1)),
    ConfigKey("group.consumer.heartbeat.interval.ms", "int", 5000,
              "Heartbeat interval of members of groups using the consumer protocol (KIP-848), unless the "
              "group sets consumer.heartbeat.interval.ms.", at_least(1)),
    ConfigKey("group.coordinator.rebalance.protocols", "list", "classic",
              "The group protocols the group coordinator serves: classic, and consumer for KIP-848 consumer "
              "groups (ConsumerGroupHeartbeat and ConsumerGroupDescribe are advertised only with consumer).",
              one_of("classic", "consumer"), roles=B),
    ConfigKey("group.consumer.max.size", "int", 2**31 - 1,
              "Most members one consumer-protocol group may have; a member joining past it is refused with "
              "GROUP_MAX_SIZE_REACHED.", at_least(1), roles=B),
    ConfigKey("group.consumer.assignors", "list", "uniform,range",
              "The server-side assignors of consumer-protocol groups; the first is used unless the members "
              "name another (uniform: even and sticky; range: contiguous ranges per topic).",
              one_of("uniform", "range"), roles=B),
    ConfigKey("group.consumer.migration.policy", "string", "disabled",
              "Whether a group with members may change protocol while it runs (KIP-848 online migration): "
              "disabled, upgrade (a classic group becomes a consumer group when a consumer-protocol member "
              "joins), downgrade (a consumer group becomes classic when its last consumer-protocol member "
              "leaves) or bidirectional. Empty groups change protocol whatever the policy.",
              one_of("disabled", "upgrade", "downgrade", "bidirectional"), roles=B),
    ConfigKey("group.consumer.min.heartbeat.interval.ms", "int", 5000,
              "Smallest consumer.heartbeat.interval.ms a consumer-protocol group may be given.", at_least(1)),
    ConfigKey("group.consumer.max.heartbeat.interval.ms", "int", 15000,
              "Largest consumer.heartbeat.interval.ms a consumer-protocol group may be given.", at_least(1)),
    ConfigKey("offsets.topic.num.partitions", "int", 50,
              "Partitions of the internal __consumer_offsets topic (fixed once the topic exists: a group's "
              "coordinator is the leader of partition abs(hash(group.id)) % this).", at_least(1), roles=B),
    ConfigKey("offsets.topic.replication.factor", "int", 3,
              "Replication factor of __consumer_offsets when the first FindCoordinator creates it; lowered to "
              "the live brokers when there are fewer, with a warning.", between(1, 32767), roles=B),
    ConfigKey("offsets.topic.segment.bytes", "int", 104857600,
              "Segment size of __consumer_offsets, kept small so that compaction and loading stay fast.",
              at_least(14), roles=B),
    ConfigKey("offsets.topic.compression.codec", "int", 0,
              "Codec of the batches the group coordinator writes (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd); "
              "kraftpy writes them uncompressed.", between(0, 4), roles=B),
    ConfigKey("offsets.retention.minutes", "int", 10080,
              "How long committed offsets are kept once their group is empty (or, for a group that does not "
              "use the group protocol, after the commit); then they are removed with tombstones.",
              at_least(1), roles=B),
    ConfigKey("offsets.retention.check.interval.ms", "long", 600000,
              "How often the group coordinator looks for expired offsets and empty groups to remove.",
              at_least(1), roles=B),
    ConfigKey("offsets.commit.timeout.ms", "int", 5000,
              "How long an offset commit waits for every in-sync replica of its __consumer_offsets partition; "
              "past it the commit fails with REQUEST_TIMED_OUT.", at_least(1), roles=B),
    ConfigKey("offsets.load.buffer.size", "int", 5242880,
              "Bytes read at a time when a coordinator loads its __consumer_offsets partition.", at_least(1),
              roles=B),
    ConfigKey("offset.metadata.max.bytes", "int", 4096,
              "Largest metadata string a client may commit with an offset; a longer one is refused with "
              "OFFSET_METADATA_TOO_LARGE.", at_least(0), roles=B),
    # --- the transaction coordinator
    ConfigKey("transaction.max.timeout.ms", "int", 900000,
              "Largest transaction.timeout.ms a transactional producer may ask for; InitProducerId with a "
              "longer one is refused with INVALID_TRANSACTION_TIMEOUT.", at_least(1), roles=B),
    ConfigKey("transactional.id.expiration.ms", "int", 604800000,
              "How long the coordinator keeps a transactional id that has no open transaction and receives "
              "no transaction request; then the id is removed with a tombstone.", at_least(1), roles=B),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
              "How often the coordinator aborts transactions open for longer than their timeout (bumping "
              "the epoch, which fences their producer).", at_least(1), roles=B),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
              "How often the coordinator removes transactional ids past transactional.id.expiration.ms.",
              at_least(1), roles=B),
    ConfigKey("transaction.state.log.num.partitions", "int", 50,
              "Partitions of the internal __transaction_state topic (fixed once the topic exists: an id's "
              "coordinator is the leader of partition abs(hash(transactional.id)) % this).", at_least(1),
              roles=B),
    ConfigKey("transaction.state.log.replication.factor", "int", 3,
              "Replication factor of __transaction_state when it is created; lowered to the live brokers "
              "when there are fewer.", between(1, 32767), roles=B),
    ConfigKey("transaction.state.log.min.isr", "int", 2,
              "min.insync.replicas of __transaction_state: replicas that must have a coordinator's write "
              "before it is acknowledged; capped at the topic's replicas when it is created.", at_least(1), roles=B),
    ConfigKey("transaction.state.log.segment.bytes", "int", 104857600,
              "Segment size of __transaction_state, kept small so that compaction and loading stay fast.",
              at_least(14), roles=B),
    ConfigKey("transaction.partition.verification.enable", "boolean", True,
              "A partition leader asks the transaction coordinator whether a producer's first transactional "
              "batch in the partition belongs to an ongoing transaction that added it, and refuses it "
              "otherwise (KIP-890): a late or stray batch cannot open a transaction nobody will end.",
              roles=B),
    # --- observability
    ConfigKey("metrics.port", "int", None,
              "Port on metrics.host of the Prometheus endpoint (GET /metrics), readiness (GET /ready: 200 when the "
              "node is ready, 503 with the reason) and liveness (GET /healthz); 0 picks one; unset serves none.",
              between(0, 65535), nullable=True),
    ConfigKey("metrics.host", "string", "127.0.0.1",
              "Address the metrics.port endpoint listens on: an IP address of this machine or a host name "
              "resolving to one. 0.0.0.0 serves on every IPv4 interface and :: on every interface, IPv4 and "
              "IPv6: what a Kubernetes httpGet probe or a Prometheus on another host needs. The endpoint has "
              "no authentication; the default keeps it on this machine.",
              host_address()),
]

#: Kafka keys that kraftpy accepts without using: a copied server.properties starts cleanly.
IGNORED: dict[str, str] = {
    "num.network.threads": "kraftpy serves connections as trio tasks (answers of 256 KiB or more of log data are "
                           "written from worker threads, up to 40 at once)",
    "num.io.threads": "kraftpy serves requests as trio tasks",
    "socket.send.buffer.bytes": "the operating system's default buffers are used",
    "socket.receive.buffer.bytes": "the operating system's default buffers are used",
    "queued.max.requests": "request memory is bounded in bytes by queued.max.request.bytes",
}

BY_NAME: dict[str, ConfigKey] = {k.name: k for k in KEYS}
assert len(BY_NAME) == len(KEYS), "duplicate key in the schema"
