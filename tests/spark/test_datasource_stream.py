"""``spark.readStream.format("kafka-log")`` with Trigger.AvailableNow over a log dir that grows,
is cleaned and loses segments to retention between runs of one query (one checkpoint). Truth:
the records the test wrote (built by kafka-python), and what it then removed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kcompact.datasource.kafka_log import KafkaLogDataSource
from kcompact.readers.records import Record
from tests.support import TS0, kp_build, write_partition


def batches(first: int, last: int, per_batch: int = 5, keep=lambda o: True) -> list[bytes]:
    """kafka-python batches of the records ``first``..``last`` that ``keep`` keeps (a cleaner's gaps)."""
    out = []
    for base in range(first, last + 1, per_batch):
        kept = [o for o in range(base, min(base + per_batch, last + 1)) if keep(o)]
        if kept:
            out.append(kp_build([Record(o, TS0 + 10 * o, b"k%d" % (o % 9), b"v%d" % o) for o in kept],
                                base_offset=kept[0]))
    return out


def run(spark, root: Path, work: Path, **options):
    """One run of the query: AvailableNow to the end, appending to a parquet sink."""
    reader = spark.readStream.format("kafka-log")
    for key, value in {"startingOffsets": "earliest", **options}.items():
        if value is not None:
            reader = reader.option(key, value)
    query = (reader.load(str(root)).select("topic", "partition", "offset", "value")
             .writeStream.format("parquet").option("path", str(work / "out"))
             .option("checkpointLocation", str(work / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    return query


def sink(spark, work: Path) -> list[tuple]:
    rows = spark.read.parquet(str(work / "out")).collect()
    return sorted((r.topic, r.partition, r.offset, bytes(r.value)) for r in rows)


def expected(*parts: tuple[str, int, list[int]]) -> list[tuple]:
    return sorted((topic, n, o, b"v%d" % o) for topic, n, offsets in parts for o in offsets)


@pytest.fixture(scope="module")
def source(spark):
    spark.dataSource.register(KafkaLogDataSource)
    return KafkaLogDataSource


def test_a_growing_log_dir_is_read_once_across_restarts(spark, source, tmp_path: Path):
    root, work = tmp_path / "logs", tmp_path / "work"
    orders0 = root / "orders-0"
    write_partition(orders0, [(0, batches(0, 49)), (50, batches(50, 99))])
    write_partition(root / "clicks-0", [(0, batches(0, 14))])

    first = run(spark, root, work, maxOffsetsPerTrigger="40")
    sizes = [p.numInputRows for p in first.recentProgress if p.numInputRows]
    assert len(sizes) >= 3 and max(sizes) <= 40  # admission control split the backlog
    assert json.loads(first.lastProgress.sources[0].endOffset) == {"orders": {"0": 100}, "clicks": {"0": 15}}
    assert sink(spark, work) == expected(("orders", 0, range(100)), ("clicks", 0, range(15)))

    # grows: appended batches, new segments (one cleaned before it is read), a new partition
    with (orders0 / f"{50:020d}.log").open("ab") as f:
        f.write(b"".join(batches(100, 124)))
    odd = lambda o: o % 2 == 1  # noqa: E731
    write_partition(orders0, [(125, batches(125, 174, keep=odd)), (175, batches(175, 199))])
    write_partition(root / "orders-1", [(0, batches(0, 9))])
    run(spark, root, work)
    assert sink(spark, work) == expected(
        ("orders", 0, [*range(125), *filter(odd, range(125, 175)), *range(175, 200)]),
        ("clicks", 0, range(15)), ("orders", 1, range(10)))
    before = sink(spark, work)

    # retention removes segments, one of them never read: the query fails naming the offsets
    write_partition(orders0, [(200, batches(200, 224)), (225, batches(225, 249))])
    for base in (0, 50, 125, 175, 200):
        for f in orders0.glob(f"{base:020d}.*"):
            f.unlink()
    with pytest.raises(Exception, match="orders-0 offsets 200 to 224"):
        run(spark, root, work)
    assert sink(spark, work) == before
    run(spark, root, work, failOnDataLoss="false")  # skipped: the rest is read, once
    assert sink(spark, work) == sorted(before + expected(("orders", 0, range(225, 250))))


def test_a_stream_starts_at_each_partitions_start_or_where_it_is_told(spark, source, tmp_path: Path):
    """With no starting option, from the log start (not Spark's latest: see ``datasource.streaming``)."""
    root = tmp_path / "logs"
    write_partition(root / "orders-0", [(0, batches(0, 9)), (10, batches(10, 29))])
    run(spark, root, tmp_path / "all", startingOffsets=None)
    assert sink(spark, tmp_path / "all") == expected(("orders", 0, range(30)))
    run(spark, root, tmp_path / "from", startingOffsets=json.dumps({"orders": {"0": 17}}))
    assert sink(spark, tmp_path / "from") == expected(("orders", 0, range(17, 30)))
    run(spark, root, tmp_path / "time", startingTimestamp=str(TS0 + 10 * 12))
    assert sink(spark, tmp_path / "time") == expected(("orders", 0, range(12, 30)))


def test_max_bytes_per_trigger_limits_each_micro_batch(spark, source, tmp_path: Path):
    root, work = tmp_path / "logs", tmp_path / "work"
    write_partition(root / "orders-0", [(0, batches(0, 199))])
    size = (root / "orders-0" / f"{0:020d}.log").stat().st_size
    query = run(spark, root, work, maxBytesPerTrigger=str(size // 4))
    sizes = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    assert len(sizes) >= 4 and sum(sizes) == 200
    assert sink(spark, work) == expected(("orders", 0, range(200)))
    shutil.rmtree(work)
