"""The example notebook's steps, and a compaction to interrupt, run by a Spark client in its own
process: a Spark Connect client (``--remote sc://...``, the package shipped by ``--artifact``)
or a classic local session. ``tests/e2e/test_connect.py`` runs it both ways and compares.

``steps``: prints one JSON document: the plan's rows, the reports' counts, the digests of the
compacted copy's files, the data source's reads, what the session tells the memory model, and
the progress lines a ticker said during a slow job. ``compact``: compacts ``--work``/logs,
printing the job's progress lines as they come (the test signals it mid-way). ``store``: plans
``--url`` (an ``s3://`` log dir; the object store's settings are this process's environment's
only), says ``planned`` and waits for a line on stdin (the test reads the store's request counts
meanwhile), then compacts it by that plan and prints the plan's selection and the report's counts.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import shutil
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

NOW = 1_720_001_000_000
COUNTS = ("partitions", "cleaned", "skipped", "failed", "records_read", "records_kept", "bytes_read", "bytes_written",
          "removed")


def session(args: argparse.Namespace) -> SparkSession:
    if args.remote:
        spark = SparkSession.builder.remote(args.remote).getOrCreate()
        if args.artifact:
            spark.addArtifacts(args.artifact, pyfile=True)
        return spark
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.executor.pyspark.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def digests(root: Path) -> dict[str, str]:
    """Every file of a log dir but the last-run stamp (a wall clock) and the lock."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in ("kcompact-last-run.json", ".lock")}


def counts(report) -> dict:
    totals = report.totals
    return {key: totals[key] for key in COUNTS if key in totals}


def steps(spark: SparkSession, work: Path) -> dict:
    import kcompact
    from kcompact.compaction.pipeline.settings import JobSettings
    from kcompact.jobs.progress import Ticker
    from kcompact.session import kinds
    from kcompact.tools import generator

    out: dict = {"connect": kinds.is_connect(spark)}
    log_dir = str(work / "logs")
    generator.generate(log_dir, generator.load_spec(None), seed=7)
    plan = kcompact.plan(spark, [log_dir], now=NOW)
    rows = plan.df(spark).orderBy("topic", "partition").toPandas()
    # where the log dir is (its path, and config_sources naming its KRaft metadata) differs by run
    plan_rows = json.loads(rows.drop(columns=["log_dir", "path"]).to_json(orient="records"))
    out["plan"] = json.loads(json.dumps(plan_rows).replace(log_dir, "LOG_DIR"))
    png = io.BytesIO()
    kcompact.plot(plan).savefig(png, format="png")
    out["plot_bytes"] = png.tell() > 1000
    out["before"] = digests(Path(log_dir))
    dry = kcompact.compact(spark, plan=plan, now=NOW, dry_run=True, progress=lambda line: None).report
    out["dry_run"] = counts(dry)
    out["dry_run_left_files"] = digests(Path(log_dir)) == out["before"]

    copy = work / "copy"
    shutil.copytree(log_dir, copy)
    cleaned = kcompact.compact(spark, [str(copy)], now=NOW, progress=lambda line: None).report
    out["compacted"] = counts(cleaned)
    out["compacted_files"] = digests(copy)

    kcompact.register_data_source(spark)

    def records(path: str):
        return (spark.read.format("kafka-log").option("topics", "users").option("partitions", "users:1")
                .load(path).filter(~F.col("isControl") & F.col("key").isNotNull()))

    def latest(path: str) -> list:
        newest = Window.partitionBy("key").orderBy(F.col("offset").desc())
        rows = (records(path).withColumn("n", F.row_number().over(newest)).filter("n = 1")
                .select(F.col("key").cast("string").alias("key"), "offset", F.sha2("value", 256).alias("value")))
        return sorted(map(list, rows.collect()))

    out["records"] = [records(log_dir).count(), records(str(copy)).count()]
    out["latest"] = [latest(log_dir), latest(str(copy))]
    window = (spark.read.format("kafka-log").option("topics", "orders").option("partitions", "orders:0")
              .option("startingOffset", "100").option("endingOffset", "110").load(log_dir))
    out["window"] = [[r.offset, r.timestamp.isoformat(), r.key.decode() if r.key else None, len(r.value or b"")]
                     for r in window.orderBy("offset").collect()]

    retention = kcompact.retain(spark, [log_dir], now=NOW, dry_run=True, progress=lambda line: None).report
    out["retain"] = {key: value for key, value in retention.totals.items() if key != "seconds"}
    nightly = kcompact.run(spark, [str(copy)], now=NOW, dry_run=True, progress=lambda line: None)
    out["run"] = [nightly.failed, nightly.attempted, counts(nightly.compaction)]
    out["recover"] = [p.changed for p in kcompact.recover([str(copy)], progress=lambda line: None).partitions]

    out["parallelism"] = kinds.parallelism(spark)
    job = JobSettings.of(spark)  # as the job reads them, once, as it starts
    out["worker_cap"] = job.worker_cap
    out["map_memory"] = job.map_memory
    said: list[str] = []

    def slow(rows):
        time.sleep(1.5)
        return rows

    with kinds.status(spark) as tracker, Ticker(tracker, said.append, "probe", every=0.5):
        spark.range(0, 16, 1, 8).mapInPandas(lambda frames: map(slow, frames), "id long").collect()
    out["ticker"] = [line.split(":")[1].split(" tasks")[0].strip() for line in said]
    out["cleaning_ticks"] = cleaning_ticks(spark, work)
    return out


def on_store(spark: SparkSession, url: str) -> dict:
    import kcompact

    # as tests/e2e/test_s3_requests.py's MERGING: about 4 segments of orders, their dirty part into one
    plan = kcompact.plan(spark, [url], now=NOW, topic_config={"orders": {"internal.segment.bytes": 1000000}})
    print("planned", flush=True)
    sys.stdin.readline()
    report = kcompact.compact(spark, plan=plan, now=NOW, progress=lambda line: None).report
    return {"selected": sorted(row.path.rsplit("/", 1)[-1] for row in plan.rows if row.selected),
            "partitions": len(plan.rows), "compacted": counts(report),
            "failed": [p.error for p in report.partitions if p.error]}


def cleaning_ticks(spark: SparkSession, work: Path) -> list[list]:
    """(tasks done, tasks, MB done) of each ticker line said with an ETA while a compaction's
    cleaning stage ran, on a generated log dir of 8 partitions per topic cut as megabytes would be."""
    import re

    import kcompact
    from kcompact.compaction.pipeline.settings import STEP
    from kcompact.compaction.pipeline.tasks import sql_conf
    from kcompact.jobs.progress import Ticker
    from kcompact.session import kinds
    from kcompact.tools import generator

    logs = str(work / "moving")
    generator.generate(logs, generator.override(generator.load_spec(None), partitions=8), seed=5)
    said: list[str] = []

    class Ticking(kcompact.Observer):
        @contextlib.contextmanager
        def watch(self, what, total_bytes=None):
            with kinds.status(spark) as tracker, Ticker(tracker, said.append, what, total_bytes, every=0.05):
                yield

    with sql_conf(spark, {STEP: "1k"}):  # a few KB of log: cut as megabytes of it would be
        kcompact.compact(spark, [logs], now=NOW, topic_config={"*": {"cleanup.policy": "compact"}},
                         progress=said.append, observer=Ticking())
    start = next(i for i, line in enumerate(said) if line.startswith("stages 2-4"))
    end = next(i for i, line in enumerate(said) if line.startswith("stage 5/5"))
    pattern = r"  cleaning: (\d+)/(\d+) tasks done, about ([\d.]+) of [\d.]+ MB, \d+ s, ETA \d+ s"
    found = (re.fullmatch(pattern, line) for line in said[start:end])
    return [[int(m[1]), int(m[2]), float(m[3])] for m in found if m]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["steps", "compact", "store"])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--remote")
    parser.add_argument("--artifact")
    parser.add_argument("--url")
    args = parser.parse_args()
    spark = session(args)
    if args.what == "steps":
        print(json.dumps(steps(spark, args.work), sort_keys=True))
        return 0
    if args.what == "store":
        print(json.dumps(on_store(spark, args.url), sort_keys=True))
        return 0
    import kcompact

    try:
        result = kcompact.compact(spark, [str(args.work / "logs")], now=NOW,
                                  topic_config={"*": {"cleanup.policy": "compact"}},
                                  progress=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 130
    print(result.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
