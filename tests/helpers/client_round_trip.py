"""Produce a few records with a real client, then read them back in a consumer group.

One function per client library, each taking that library's own connection settings (security
protocol, SASL and TLS options as the library spells them), so that a test about listeners or
authentication says only how it connects. Every function returns the values read, in order; each
bounds its wait (30 s) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

WAIT_S = 30.0


def values(count: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


def confluent_round_trip(config: dict[str, Any], topic: str, count: int = 5, *, prefix: str = "m",
                         group: str | None = None) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    producer = Producer({**config, "acks": "all"})
    for value in values(count, prefix):
        producer.produce(topic, value=value)
    assert producer.flush(WAIT_S) == 0
    consumer = Consumer({**config, "group.id": group or f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


def kafka_python_round_trip(config: dict[str, Any], topic: str, count: int = 5, *, prefix: str = "m",
                            group: str | None = None, check_producer=None) -> list[bytes]:
    """``check_producer(producer)`` runs after the records are sent, before the producer closes."""
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(acks="all", **config)
    for value in values(count, prefix):
        producer.send(topic, value).get(timeout=WAIT_S)
    if check_producer is not None:
        check_producer(producer)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=group or f"g-{topic}", auto_offset_reset="earliest",
                             consumer_timeout_ms=int(WAIT_S * 1000), **config)
    got: list[bytes] = []
    try:
        for message in consumer:
            got.append(message.value)
            if len(got) == count:
                break
    finally:
        consumer.close()
    return got


def aiokafka_round_trip(config: dict[str, Any], topic: str, count: int = 5, *, prefix: str = "m",
                        group: str | None = None, check_producer=None) -> list[bytes]:
    """``config`` may hold ``ssl_context``; it is made inside the event loop when given as a callable."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> list[bytes]:
        settings = dict(config)
        if callable(settings.get("ssl_context")):
            settings["ssl_context"] = settings["ssl_context"]()
        producer = AIOKafkaProducer(acks="all", **settings)
        await producer.start()
        try:
            for value in values(count, prefix):
                await producer.send_and_wait(topic, value)
            if check_producer is not None:
                check_producer(producer)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=group or f"g-{topic}", auto_offset_reset="earliest",
                                    **settings)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(WAIT_S):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == count:
                        break
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())
