"""Publishing orders with aiokafka: one JSON record per order, keyed by customer (so that a customer's
orders keep their order, in one partition), acknowledged by every in-sync replica."""

from __future__ import annotations

import json
from collections.abc import Iterable

from aiokafka import AIOKafkaProducer


def encode(customer: str, amount: int) -> bytes:
    return json.dumps({"customer": customer, "amount": amount}).encode()


async def publish(bootstrap_servers: str, topic: str, orders: Iterable[tuple[str, int]]) -> int:
    """Send every (customer, amount) and wait until each is acknowledged; returns how many."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", enable_idempotence=True)
    await producer.start()
    sent = 0
    try:
        for customer, amount in orders:
            await producer.send_and_wait(topic, encode(customer, amount), key=customer.encode())
            sent += 1
    finally:
        await producer.stop()
    return sent
