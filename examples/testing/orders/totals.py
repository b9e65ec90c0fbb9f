"""The order totals service: a consumer group (confluent-kafka) reads orders and publishes each
customer's running total, keyed by customer, to a totals topic.

By default an order's offset is committed once its total is acknowledged (at least once: a crash
between the two means the order is counted again by the next instance). With ``transactional_id``
the total and the consumed offset are committed in one transaction (exactly once): a crashed
instance's transaction is aborted when the next one with the same id starts, and readers with
``isolation.level=read_committed`` never see its totals.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, KafkaException, Producer


class TotalsService:
    def __init__(self, bootstrap_servers: str, *, orders: str, totals: str, group: str = "order-totals",
                 transactional_id: str | None = None) -> None:
        self.orders, self.totals_topic = orders, totals
        self.transactional = transactional_id is not None
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap_servers, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        producer_config = {"bootstrap.servers": bootstrap_servers, "acks": "all", "enable.idempotence": True}
        if transactional_id is not None:
            producer_config["transactional.id"] = transactional_id
        self.producer = Producer(producer_config)
        if self.transactional:
            self.producer.init_transactions(30)
        self.totals: dict[str, int] = {}
        #: Every order this instance processed, (customer, amount), in the order it did.
        self.processed: list[tuple[str, int]] = []
        self.consumer.subscribe([orders])

    def run(self, count: int, *, timeout: float = 60.0, crash_after: int | None = None) -> int:
        """Process orders until ``count`` are done (or ``timeout`` passes); returns how many were.
        ``crash_after``: raise in the middle of the next order after that many (a crash, in a test)."""
        done = 0
        deadline = time.monotonic() + timeout
        while done < count and time.monotonic() < deadline:
            message = self.consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaException(message.error())
            order = json.loads(message.value())
            customer = order["customer"]
            total = self.totals.get(customer, 0) + order["amount"]
            if self.transactional:
                self.producer.begin_transaction()
            self.producer.produce(self.totals_topic, str(total).encode(), key=customer.encode())
            if crash_after is not None and done == crash_after:
                raise RuntimeError("crashed before committing")
            if self.transactional:
                self.producer.send_offsets_to_transaction(
                    self.consumer.position(self.consumer.assignment()), self.consumer.consumer_group_metadata(), 30)
                self.producer.commit_transaction(30)
            else:
                if self.producer.flush(30):
                    raise RuntimeError("a total was not acknowledged")
                self.consumer.commit(message=message, asynchronous=False)
            self.totals[customer] = total
            self.processed.append((customer, order["amount"]))
            done += 1
        return done

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(10)
