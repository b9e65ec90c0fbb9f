"""Spark connector: the ``kraftpy`` Python data source (pyspark 4.2 or later).

``register(spark)`` makes ``spark.read.format("kraftpy")``, ``spark.readStream.format("kraftpy")``
and the matching writers available in that session. The options and columns are those of Spark's
built-in Kafka source and sink; see docs/spark.md.
"""

from __future__ import annotations

from typing import Any

FORMAT = "kraftpy"


def register(spark: Any) -> None:
    """Register the ``kraftpy`` data source with a SparkSession."""
    from kraftpy.spark.source import KraftpyDataSource

    spark.dataSource.register(KraftpyDataSource)


__all__ = ["FORMAT", "register"]
