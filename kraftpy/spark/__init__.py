"""Spark connector: the ``kraftpy`` Python data source (pyspark 4.2 or later).

``register(spark)`` makes ``spark.read.format("kraftpy")``, ``spark.readStream.format("kraftpy")``
and the matching writers available in that session. The options and columns are those of Spark's
built-in Kafka source and sink; see docs/spark.md.
"""

from __future__ import annotations

import importlib.util
from typing import Any

FORMAT = "kraftpy"

#: What the connector imports besides kraftpy's own dependencies; ``kraftpy[spark]`` brings them.
NEEDS = ("pyspark", "pyarrow", "pandas")
INSTALL_HINT = "pip install 'kraftpy[spark]'"


class MissingDependencyError(ModuleNotFoundError):
    """The Spark connector's optional dependencies are not installed; the message is one line."""


def require_dependencies() -> None:
    """Raise `MissingDependencyError` naming the extra to install when pyspark, pyarrow or pandas is missing."""
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(
            f"the kraftpy Spark connector needs {', '.join(missing)}, which this Python does not have: "
            f"{INSTALL_HINT}", name=missing[0])


def register(spark: Any) -> None:
    """Register the ``kraftpy`` data source with a SparkSession."""
    require_dependencies()
    from kraftpy.spark.source import KraftpyDataSource

    spark.dataSource.register(KraftpyDataSource)


__all__ = ["FORMAT", "INSTALL_HINT", "MissingDependencyError", "register", "require_dependencies"]
