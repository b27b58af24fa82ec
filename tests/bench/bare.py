"""A bare PySpark job, the yardstick of a command's fixed cost: a local[2] session with Spark's
defaults and one two-task ``mapInArrow`` job, nothing of this project. ``tests.bench.compact``
times it as a whole process beside ``kcompact compact`` of a tiny log dir: the command must not
cost more than this."""

from __future__ import annotations

import sys
from collections.abc import Iterator


def main() -> int:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").appName("bare").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    rows = spark.range(0, 2, 1, 2).mapInArrow(identity, "id long").collect()
    spark.stop()
    return 0 if len(rows) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
