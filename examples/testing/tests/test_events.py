"""Orders published with aiokafka, read back with kafka-python: a customer's orders share a partition,
in the order they were sent."""

from __future__ import annotations

import asyncio
import json

from kafka import KafkaConsumer, TopicPartition
from orders.events import publish

ORDERS = [("ada", 5), ("bob", 7), ("ada", 1), ("cy", 2), ("bob", 3), ("ada", 4)]


def test_a_customers_orders_share_a_partition_in_order(kraftpy_cluster, orders_topic):
    assert asyncio.run(publish(kraftpy_cluster.bootstrap_servers, orders_topic, ORDERS)) == len(ORDERS)

    consumer = KafkaConsumer(bootstrap_servers=kraftpy_cluster.bootstrap_servers, enable_auto_commit=False)
    consumer.assign([TopicPartition(orders_topic, p) for p in range(3)])
    consumer.seek_to_beginning()
    by_partition: dict[int, list[tuple[str, int]]] = {}
    received = 0
    while received < len(ORDERS):
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for record in records:
                order = json.loads(record.value)
                assert record.key.decode() == order["customer"]
                by_partition.setdefault(tp.partition, []).append((order["customer"], order["amount"]))
                received += 1
    consumer.close()

    partitions_of = {c: {p for p, orders in by_partition.items() for cust, _ in orders if cust == c}
                     for c, _ in ORDERS}
    assert all(len(parts) == 1 for parts in partitions_of.values())  # one partition per customer
    for customer, (partition,) in partitions_of.items():
        assert [a for c, a in by_partition[partition] if c == customer] == [a for c, a in ORDERS if c == customer]
