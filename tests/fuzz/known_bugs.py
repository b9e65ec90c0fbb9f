"""Bugs the fuzzer finds that are not fixed yet, and what a campaign does about their inputs.

Each entry names the bug, the part of kraftpy whose fix removes it, and the frame tags (mutation
classes, or finer tags the generators set) of the inputs that reach it. A campaign given these
entries either does not send matching frames (``skip``: for bugs that stop the process or poison a
partition, which would hide everything after them) or sends them and reports the bug's findings as
known instead of failing on them (``tolerate``: the kinds listed). `make test` runs with `OPEN`, so
it stays green while a bug is open; when the fix lands, its entry is removed and the same inputs are
sent, and judged, again.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class KnownBug:
    name: str
    reason: str
    #: Where the fix belongs.
    fix: str
    #: A frame carrying any of these tags is affected.
    tags: frozenset[str] = attrs.field(converter=frozenset)
    #: Finding kinds reported as known for affected frames; empty: affected frames are not sent.
    tolerate: tuple[str, ...] = ()

    @property
    def skips(self) -> bool:
        return not self.tolerate

    def matches(self, tags: frozenset[str]) -> bool:
        return not self.tags.isdisjoint(tags)


RESPONSE_ENCODING_STOPS_PROCESS = KnownBug(
    "response-encoding-stops-process",
    "a response that cannot be encoded escapes KafkaApis.handle and stops the whole process: a Metadata "
    "v10-v11 request naming a topic by id (the answer carries a null name, allowed from v12 only), or an "
    "error message echoing a long name past the 32,767 bytes a non-flexible string holds",
    "kraftpy/broker/apis/dispatch.py (encode inside the handler's error handling: close that connection); "
    "kraftpy/broker/apis/metadata.py (topic ids below v12: INVALID_REQUEST, as Kafka answers)",
    {"metadata-null-name-before-v12", "long-string-int16"},
)
CLUSTER_METADATA_TOPIC = KnownBug(
    "cluster-metadata-topic",
    "CreateTopics accepts the name __cluster_metadata: its partition 0 is the metadata log's own "
    "directory, so a Produce to it appends client records to the Raft log (which then fails to read: "
    "'offset out of order') and a DeleteTopics of it deletes the metadata log; the process stops, and a "
    "restart starts from an empty metadata log, every topic gone",
    "topic name validation (kraftpy/metadata/topic_names.py): the name is reserved, as in Kafka",
    {"names-cluster-metadata"},
)

OPEN: tuple[KnownBug, ...] = ()
BY_NAME = {bug.name: bug for bug in OPEN}
