"""Fixtures of the trace-analytics tests: ONE local SparkSession for the whole session, and a
small hand-written set of journals whose right answers are worked out in the tests."""
from __future__ import annotations

import os
import shutil

import pytest

@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Java is not installed: the analytics tests need Java 17+ "
                    "(apt-get install openjdk-17-jre-headless; .ci/run installs it)")
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master("local[2]")
               .appName("speed-pipeline-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
