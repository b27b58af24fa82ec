"""The SparkSession every job uses: the one spark-submit configured, else local Spark.

Executors must run the Python that has this project installed, so
PYSPARK_PYTHON defaults to the interpreter running the driver.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jobs import cds

LOG4J = Path(__file__).resolve().parent.parent / "conf" / "log4j2.properties"


def session(app_name: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    # spark-submit starts the driver with its gateway port set (and always a master); a
    # SparkConf read before the gateway exists would see none of spark-submit's settings
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit: embedded local Spark
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.master("local[*]")
                   # C1 only: a command's JVM lives seconds, and C2's compilations cost more CPU
                   # than they win back (bench-compact: JVM CPU 22.7 -> 13.7 s, whole run 22.9 -> 20.2 s)
                   .config("spark.driver.extraJavaOptions",
                           f"-Dlog4j2.configurationFile={LOG4J.as_uri()} -XX:TieredStopAtLevel=1 {cds.java_options()}")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.debug.maxToStringFields", "200")
                   .config("spark.sql.shuffle.partitions", str(max(2, (os.cpu_count() or 2) * 2))))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("KCOMPACT_SPARK_LOG_LEVEL", "WARN"))
    return spark
