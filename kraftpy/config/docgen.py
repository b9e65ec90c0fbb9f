"""Render the configuration reference (docs/configuration.md) from the schema."""

from __future__ import annotations

from kraftpy.config.keys import IGNORED, KEYS
from kraftpy.config.schema import REQUIRED, ConfigKey

GROUPS = [
    ("The process", ("process.", "node.", "broker.rack")),
    ("The controller quorum", ("controller.",)),
    ("Listeners", ("listener", "advertised.", "inter.broker", "security.inter", "socket.", "queued.",
                   "connections.")),
    ("TLS", ("ssl.",)),
    ("Connection limits and client quotas", ("max.connection", "quota.")),
    ("Logs", ("log.", "metadata.log", "metadata.max", "message.max", "compression.")),
    ("Topics and replication", ("num.partitions", "default.replication", "min.insync", "unclean.",
                                "auto.", "leader.", "follower.", "delete.topic", "replica.", "num.replica",
                                "producer.id")),
    ("Broker lifecycle", ("broker.session", "broker.heartbeat")),
    ("Consumer groups", ("group.", "offsets.", "offset.metadata")),
    ("Transactions", ("transaction.", "transactional.")),
    ("Observability", ("metrics.",)),
]


def _default(key: ConfigKey) -> str:
    if key.default_doc is not None:
        return key.default_doc
    if key.default is REQUIRED:
        return "(required)"
    if key.default is None:
        return "(unset)"
    if isinstance(key.default, bool):
        return "true" if key.default else "false"
    if key.default == 2**63 - 1:
        return "9223372036854775807 (never)"
    return str(key.default)


def _group_of(key: ConfigKey) -> str:
    for title, prefixes in GROUPS:
        if key.name.startswith(prefixes):
            return title
    return "Other"


def render() -> str:
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from kraftpy/config/keys.py by `kraftpy config docs`; do not edit by hand. -->",
        "",
        "kraftpy reads Java-style `.properties` files with Kafka's key names, so a Kafka operator's",
        "habits carry over. Give the file with `--config FILE`; `--override key=value` (repeatable)",
        "wins over the file. Every value is checked when the process starts: a wrong one stops it",
        "with one line naming the file, the line, the key and the value, for example",
        "",
        "```",
        "kraftpy: configuration error: server.properties:7: node.id=abc: not an integer",
        "```",
        "",
        "Unknown keys are reported as warnings and otherwise ignored. Time settings resolve as in",
        "Kafka: `log.retention.ms` wins over `log.retention.minutes`, which wins over",
        "`log.retention.hours`; `log.roll.ms` wins over `log.roll.hours`.",
        "",
    ]
    groups: dict[str, list[ConfigKey]] = {}
    for key in KEYS:
        groups.setdefault(_group_of(key), []).append(key)
    for title, _ in [*GROUPS, ("Other", ())]:
        keys = groups.get(title)
        if not keys:
            continue
        out += [f"## {title}", "", "| key | type | default | valid | roles | meaning |",
                "|---|---|---|---|---|---|"]
        for key in keys:
            valid = key.describe_valid().replace("|", "\\|")
            out.append(f"| `{key.name}` | {key.type} | {_default(key)} | {valid} | "
                       f"{', '.join(key.roles)} | {key.doc} |")
        out.append("")
    out += ["## Kafka keys accepted and ignored", "",
            "A `server.properties` copied from Kafka may hold these; kraftpy starts without a warning.", "",
            "| key | why it does not apply |", "|---|---|"]
    out += [f"| `{k}` | {why} |" for k, why in sorted(IGNORED.items())]
    return "\n".join(out) + "\n"
