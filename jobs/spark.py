"""The SparkSession every job uses: the one spark-submit configured, else local Spark.

Executors must run the Python that has this project installed, so
PYSPARK_PYTHON defaults to the interpreter running the driver.
"""

from __future__ import annotations

import os
import sys


def session(app_name: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if not SparkConf().contains("spark.master"):  # not under spark-submit: embedded local Spark
        builder = (builder.master("local[*]")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", str(max(2, (os.cpu_count() or 2) * 2))))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("KCOMPACT_SPARK_LOG_LEVEL", "WARN"))
    return spark
