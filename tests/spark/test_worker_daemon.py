"""A Python worker of the product's sessions imports the installed pyspark, not Spark's zip copy
of it, which Python compiles from source at every daemon's start, and is forked with the
command's modules imported (``session.worker_daemon``)."""

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


def _prepared(_):
    import gc
    import sys

    from kcompact.session import warm_workers

    return [(gc.get_freeze_count(), [m for m in warm_workers.MODULES if m not in sys.modules])]


def test_workers_are_forked_with_the_commands_modules_imported_and_frozen(spark):
    """Only the daemon freezes objects (``gc.freeze``), and only once it imported the modules."""
    [(frozen, missing)] = spark.sparkContext.parallelize([0], 1).mapPartitions(_prepared).collect()
    assert frozen > 0
    assert missing == []
