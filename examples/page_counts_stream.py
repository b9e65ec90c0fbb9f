"""Structured Streaming: page views per page and minute, from kraftpy to parquet.

    python examples/page_counts_stream.py --bootstrap-servers 127.0.0.1:9092 --topic clicks \
        --output out/page_counts --checkpoint out/page_counts_checkpoint

It reads the JSON events of ``clickstream_generator.py`` with the ``kraftpy`` source, counts
views per page in one-minute event-time windows (records may come up to one minute late) and
appends each finished minute to parquet as ``minute, page, views``. Stopped and started again
on the same checkpoint, it goes on where it stopped. ``--available-now`` processes what is in
the topic and stops.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import kraftpy.spark

EVENT_SCHEMA = "user string, page string, referrer string, ts long"


def page_counts(events: DataFrame) -> DataFrame:
    """Views per (minute, page) of a DataFrame with the kraftpy source's columns."""
    parsed = events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"), "timestamp")
    counts = (parsed.withWatermark("timestamp", "1 minute")
              .groupBy(F.window("timestamp", "1 minute"), F.col("e.page").alias("page"))
              .count())
    return counts.select(F.col("window.start").alias("minute"), "page", F.col("count").alias("views"))


def start_query(spark: SparkSession, bootstrap: str, topic: str, output: str, checkpoint: str,
                available_now: bool = False, starting_offsets: str = "earliest",
                max_offsets_per_trigger: int | None = None) -> StreamingQuery:
    reader = (spark.readStream.format("kraftpy")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", starting_offsets))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer = (page_counts(reader.load()).writeStream
              .format("parquet")
              .option("path", output)
              .option("checkpointLocation", checkpoint)
              .outputMode("append"))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="10 seconds")
    return writer.queryName(f"page_counts_{topic}").start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--output", default="out/page_counts")
    parser.add_argument("--checkpoint", default="out/page_counts_checkpoint")
    parser.add_argument("--master", default="local[*]", help="Spark master when not run by spark-submit")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    args = parser.parse_args(argv)

    # Spark's Python workers run the source's reads: they need this interpreter, where kraftpy is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(args.master).appName("page-counts")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", "4")
             .getOrCreate())
    kraftpy.spark.register(spark)
    query = start_query(spark, args.bootstrap_servers, args.topic, args.output, args.checkpoint,
                        available_now=args.available_now, max_offsets_per_trigger=args.max_offsets_per_trigger)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
