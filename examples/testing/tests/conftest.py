"""What the tests share: the topics of a test (from the kraftpy_topic fixture) and a reader of a topic."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition


@pytest.fixture
def orders_topic(kraftpy_topic) -> str:
    return kraftpy_topic(partitions=3)


@pytest.fixture
def totals_topic(kraftpy_topic) -> str:
    return kraftpy_topic(config={"cleanup.policy": "compact"})


@pytest.fixture
def read_all():
    """``read_all(bootstrap_servers, topic)``: see `read_committed`."""
    return read_committed


def read_committed(bootstrap_servers: str, topic: str, *, timeout: float = 30.0) -> list[tuple[str, int]]:
    """Every committed (customer, total) of ``topic``, in order per partition: read up to the end of
    each partition (the end of what is committed: read_committed stops before an open transaction)."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "reader", "enable.auto.commit": False,
                         "enable.partition.eof": True, "isolation.level": "read_committed"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    records, at_end = [], set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"{topic}: not read to its end within {timeout}s"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                raise KafkaException(message.error())
            records.append((message.key().decode(), int(message.value())))
    finally:
        consumer.close()
    return records
