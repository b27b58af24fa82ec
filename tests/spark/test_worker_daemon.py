"""A Python worker of the product's sessions imports the installed pyspark, not Spark's zip copy
of it, which Python compiles from source at every daemon's start (``session.worker_daemon``)."""

from pathlib import Path

import py4j
import pyspark


def _imported_from(_):
    import sys

    import py4j
    import pyspark

    return [(pyspark.__file__, py4j.__file__, sys.argv[0])]


def test_workers_import_the_installed_pyspark_and_py4j(spark):
    [(pyspark_file, py4j_file, daemon)] = spark.sparkContext.parallelize([0], 1).mapPartitions(_imported_from).collect()
    assert (pyspark_file, py4j_file) == (pyspark.__file__, py4j.__file__)
    assert Path(pyspark_file).is_file()  # not a path inside pyspark.zip
    assert Path(daemon).name == "worker_daemon.py"
