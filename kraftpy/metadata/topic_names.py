"""Kafka's topic name rules (``org.apache.kafka.common.internals.Topic``).

A legal name is 1 to 249 characters of ``[a-zA-Z0-9._-]`` and is neither ``.`` nor ``..``. Because
metric names turn ``.`` into ``_``, two topics whose names differ only there (``a.b`` and ``a_b``)
collide, and the controller refuses the second one.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
#: The metadata log's own name (its partition directory is ``__cluster_metadata-0``): never a topic.
CLUSTER_METADATA_TOPIC_NAME = "__cluster_metadata"
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
#: Kafka's internal topics (``Topic.isInternal``): the group coordinator's and the transaction
#: coordinator's logs. Clients may read them but not produce to them or delete them.
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})


def topic_name_error(name: str) -> str | None:
    """None for a legal topic name, else Kafka's message saying why it is not."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, topic name: {name}"
    if not _LEGAL.fullmatch(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def reserved_topic_error(name: str) -> str | None:
    """Kafka's message when ``name`` is one no client may create (None otherwise)."""
    if name == CLUSTER_METADATA_TOPIC_NAME:
        return f"Creation of internal topic {CLUSTER_METADATA_TOPIC_NAME} is prohibited."
    return None


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    """The form two colliding names share: every '.' as '_'."""
    return name.replace(".", "_")


def is_internal_topic(name: str) -> bool:
    """Whether ``name`` is one of Kafka's internal topics (what Metadata reports as ``is_internal``)."""
    return name in INTERNAL_TOPICS
