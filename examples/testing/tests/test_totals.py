"""The totals service, a consumer group: each customer's running total, offsets committed as it goes,
a new instance resuming where the group left off, exactly once with a transactional producer, and a
broker restart ridden out."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import TopicPartition
from orders.events import publish
from orders.totals import TotalsService

FIRST = [("ada", 5), ("bob", 7), ("ada", 1)]
SECOND = [("bob", 3), ("cy", 2), ("ada", 4)]


def latest(records: list[tuple[str, int]]) -> dict[str, int]:
    return dict(records)  # a customer's totals are in one partition, in order: the last one wins


def test_totals_per_customer(kraftpy_cluster, orders_topic, totals_topic, request, read_all):
    bootstrap = kraftpy_cluster.bootstrap_servers
    asyncio.run(publish(bootstrap, orders_topic, FIRST + SECOND))
    service = TotalsService(bootstrap, orders=orders_topic, totals=totals_topic, group=request.node.name)
    try:
        assert service.run(6) == 6
        committed = service.consumer.committed([TopicPartition(orders_topic, p) for p in range(3)], timeout=10)
    finally:
        service.close()
    assert sum(tp.offset for tp in committed if tp.offset > 0) == 6  # every order's offset is committed
    assert latest(read_all(bootstrap, totals_topic)) == {"ada": 10, "bob": 10, "cy": 2}


def test_a_new_instance_resumes_where_the_group_committed(kraftpy_cluster, orders_topic, totals_topic, request, read_all):
    bootstrap = kraftpy_cluster.bootstrap_servers
    asyncio.run(publish(bootstrap, orders_topic, FIRST))
    first = TotalsService(bootstrap, orders=orders_topic, totals=totals_topic, group=request.node.name)
    assert first.run(3) == 3
    first.close()
    asyncio.run(publish(bootstrap, orders_topic, SECOND))
    second = TotalsService(bootstrap, orders=orders_topic, totals=totals_topic, group=request.node.name)
    try:
        assert second.run(3) == 3
    finally:
        second.close()
    assert sorted(first.processed) == sorted(FIRST) and sorted(second.processed) == sorted(SECOND)
    assert len(read_all(bootstrap, totals_topic)) == 6


def test_exactly_once_across_a_crash_with_a_transactional_producer(kraftpy_cluster, orders_topic, totals_topic,
                                                                   request, read_all):
    bootstrap = kraftpy_cluster.bootstrap_servers
    asyncio.run(publish(bootstrap, orders_topic, FIRST + SECOND))
    crashed = TotalsService(bootstrap, orders=orders_topic, totals=totals_topic, group=request.node.name,
                            transactional_id=request.node.name)
    with pytest.raises(RuntimeError, match="crashed"):
        crashed.run(6, crash_after=2)  # two orders committed, the third's total left in an open transaction
    crashed.consumer.close()
    assert len(read_all(bootstrap, totals_topic)) == 2  # read_committed: the open transaction is not seen

    # The next instance with the same transactional id fences the crashed one and aborts its transaction;
    # it goes on from the offsets committed with the last committed transaction.
    again = TotalsService(bootstrap, orders=orders_topic, totals=totals_topic, group=request.node.name,
                          transactional_id=request.node.name)
    again.totals = crashed.totals  # (rebuilt from the totals topic by a real service)
    try:
        assert again.run(4) == 4
    finally:
        again.close()
    totals = read_all(bootstrap, totals_topic)
    assert len(totals) == 6 and latest(totals) == {"ada": 10, "bob": 10, "cy": 2}


def test_the_service_rides_out_a_broker_restart(kraftpy_cluster, orders_topic, totals_topic, request, read_all):
    bootstrap = kraftpy_cluster.bootstrap_servers
    service = TotalsService(bootstrap, orders=orders_topic, totals=totals_topic, group=request.node.name)
    try:
        asyncio.run(publish(bootstrap, orders_topic, FIRST))
        assert service.run(3) == 3
        kraftpy_cluster.brokers[0].restart()  # a controlled shutdown, then the broker serves again
        asyncio.run(publish(bootstrap, orders_topic, SECOND))
        assert service.run(3) == 3
    finally:
        service.close()
    assert latest(read_all(bootstrap, totals_topic)) == {"ada": 10, "bob": 10, "cy": 2}
