"""Produce a synthetic clickstream to kraftpy: one JSON event per page view, keyed by user.

    python examples/clickstream_generator.py --bootstrap-servers 127.0.0.1:9092 --topic clicks --rate 200

Each record's key is the user id, its value a JSON object ``{"user", "page", "referrer", "ts"}``
and its Kafka timestamp the event time ``ts`` (ms). The topic is created when missing. It runs
until ``--count`` events are written (forever with 0) or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

PAGES = ["/", "/search", "/products", "/products/42", "/products/7", "/cart", "/checkout", "/help"]
REFERRERS = [None, "https://example.com/", "https://news.example.org/", "https://search.example.net/?q=kraftpy"]


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    future = admin.create_topics([NewTopic(topic, partitions, 1)])[topic]
    try:
        future.result(30)
    except KafkaException as exc:
        if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise


def events(seed: int, users: int = 500):
    """An endless stream of (user, page, referrer); popular pages come up more often."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(PAGES))]
    while True:
        yield f"u{rng.randrange(users)}", rng.choices(PAGES, weights)[0], rng.choice(REFERRERS)


def generate(bootstrap: str, topic: str, count: int, rate: float = 0.0, seed: int = 1,
             start_ms: int | None = None, step_ms: int | None = None) -> int:
    """Produce ``count`` events (0: until interrupted) at ``rate`` events/s (0: as fast as possible).

    Event times are the wall clock, or ``start_ms + i * step_ms`` when both are given (for
    replaying a fixed history). Returns the number of events written.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 20, "partitioner": "murmur2_random"})
    failures: list = []
    written = 0
    began = time.monotonic()
    try:
        for i, (user, page, referrer) in enumerate(events(seed)):
            if count and i >= count:
                break
            ts = start_ms + i * step_ms if start_ms is not None and step_ms is not None else int(time.time() * 1000)
            value = json.dumps({"user": user, "page": page, "referrer": referrer, "ts": ts})
            while True:
                try:
                    producer.produce(topic, key=user, value=value, timestamp=ts,
                                     on_delivery=lambda err, _msg: err and failures.append(err))
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            if failures:
                raise RuntimeError(f"produce failed: {failures[0]}")
            written += 1
            if rate > 0:
                ahead = written / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
    except KeyboardInterrupt:
        pass
    finally:
        producer.flush(60)
    if failures:
        raise RuntimeError(f"produce failed: {failures[0]}")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the topic if it is created")
    parser.add_argument("--rate", type=float, default=200.0, help="events per second (0: as fast as possible)")
    parser.add_argument("--count", type=int, default=0, help="events to write (0: until Ctrl-C)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    ensure_topic(args.bootstrap_servers, args.topic, args.partitions)
    written = generate(args.bootstrap_servers, args.topic, args.count, args.rate, args.seed)
    print(f"wrote {written} events to {args.topic}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
