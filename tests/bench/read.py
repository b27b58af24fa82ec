"""Reading with the ``kafka-log`` source on local Spark: the records mode and the table view on
the 10 M-key corpus's shape, beside the table computed as ``records`` + a Spark ``groupBy``.

Run as ``python -m tests.bench.read --dir bench-data/read [--scale 0.1] [--runs 2]``
(``make bench-read``). Not a test: nothing here runs under pytest.

The corpus is ``tests.bench.compact``'s ``keys`` (one partition, about 10 M distinct 24-byte keys
of 12 M records, values 40-160 bytes, none/lz4/zstd, 2% tombstones) scaled by ``--scale``
(records, key space and segment size alike: 0.1 is 1.2 M records, about 1 M keys, some 140 MB),
generated once with ``tools.generator`` and cached in ``--dir``. One session (``local[2]``),
each query written to Spark's ``noop`` sink so that only the read and its work are timed,
``maxSplitBytes`` a quarter of a segment so that the records mode keeps both cores busy:
  - ``records``: every record (read_uncommitted);
  - ``table``: ``mode=table``;
  - ``records + groupBy``: read_committed records, keyed ones, grouped by (topic, partition, key),
    each group's latest (``max_by`` over the offset), tombstones dropped: the same answer as
    ``table``, checked (row count and the sum of the rows' offsets) before anything is timed.
Printed per query: seconds (best of ``--runs``), MB/s of stored segment bytes and records/s of
the corpus's records; then the table view's speed-up over ``records + groupBy``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from tests.bench.compact import CORPORA, Corpus, _generated, log_bytes

MB = 1_000_000


def corpus(scale: float) -> Corpus:
    keys = CORPORA["keys"]
    topic = keys.topic | {"records": int(keys.topic["records"] * scale), "keys": int(keys.topic["keys"] * scale)}
    return Corpus(f"keys-{scale:g}", topic, max(1 << 20, int(keys.segment_bytes * scale)))


def queries(spark, path: str, split: int) -> dict:
    from pyspark.sql import functions as F

    def source(**options):
        reader = spark.read.format("kafka-log").option("maxSplitBytes", split)
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(path)

    def grouped():
        records = source(**{"kafka.isolation.level": "read_committed"}).filter(F.col("key").isNotNull())
        latest = records.groupBy("topic", "partition", "key").agg(
            F.max_by(F.struct("value", "offset", "timestamp", "timestampType", "headers"), "offset").alias("r"))
        return latest.select("key", "r.value", "topic", "partition", "r.offset", "r.timestamp", "r.timestampType",
                             "r.headers").filter(F.col("value").isNotNull())

    return {"records": lambda: source(), "table": lambda: source(mode="table"), "records + groupBy": grouped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="bench-data/read")
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    chosen = corpus(args.scale)
    root = Path(args.dir) / chosen.name / "corpus"
    root.parent.mkdir(parents=True, exist_ok=True)
    manifest = _generated(root, chosen.spec)
    size, records = log_bytes(manifest), manifest["records"]
    print(f"corpus {chosen.name}: {records:,} records, {size / MB:.0f} MB of segments, "
          f"segment.bytes {chosen.segment_bytes:,}", flush=True)

    from pyspark.sql import SparkSession

    import kcompact

    spark = (SparkSession.builder.master("local[2]").appName("bench-read")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kcompact.register_data_source(spark)
    runs = queries(spark, str(root), chosen.segment_bytes // 4)
    from pyspark.sql import functions as F

    checks = {name: runs[name]().agg(F.count("*"), F.sum("offset")).first() for name in ("table", "records + groupBy")}
    if tuple(checks["table"]) != tuple(checks["records + groupBy"]):
        raise SystemExit(f"the table view and records + groupBy differ: {checks}")
    print(f"table: {checks['table'][0]:,} live keys (the same from records + groupBy)", flush=True)
    results = {}
    for name, query in runs.items():
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            query().write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - started)
        best = min(times)
        results[name] = {"seconds": round(best, 2), "MB/s": round(size / MB / best, 1),
                         "records/s": round(records / best)}
        print(f"{name:>18}: {best:6.1f} s  {size / MB / best:7.1f} MB/s  {records / best:12,.0f} records/s", flush=True)
    speedup = results["records + groupBy"]["seconds"] / results["table"]["seconds"]
    print(f"table view: {speedup:.1f}x records + groupBy", flush=True)
    (root.parent / "results.json").write_text(json.dumps({"corpus": chosen.name, "records": records, "bytes": size,
                                                          "results": results, "speedup": speedup}, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
