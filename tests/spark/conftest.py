"""Fixtures of the Spark tests: one local SparkSession and one ``kraftpy dev`` per test module.

A SparkSession takes many seconds to start, so the Spark tests of a module share one, and one
``kraftpy dev`` process; each test uses its own topics. They are marked ``spark`` (select them
with ``pytest -m spark``) and skipped, with the reason, when pyspark or Java is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest

from tests.helpers.processes import DevProcess


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: tests that run a local SparkSession against kraftpy dev")


def spark_missing() -> str | None:
    for module in ("pyspark", "pyarrow", "pandas"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        return "java is not installed (Spark needs Java 17 or later)"
    return None


@pytest.fixture(scope="module")
def kraft(tmp_path_factory):
    with DevProcess(tmp_path_factory.mktemp("kraftpy-dev")) as dev:
        yield dev


@pytest.fixture(scope="module")
def spark():
    reason = spark_missing()
    if reason:
        pytest.skip(reason)
    from pyspark.sql import SparkSession

    import kraftpy.spark

    # The Python workers run read() and write(): they need this interpreter, where kraftpy is.
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kraftpy-tests")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    kraftpy.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
