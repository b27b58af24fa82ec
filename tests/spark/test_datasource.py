"""The ``kafka-log`` Spark data source against independent truth: log dirs built from
kafka-python's batch builders (plus hand-built control, empty and legacy entries), every
column of every mode compared with what kafka-python's own reader finds in the same bytes,
and the Kafka-written fixture compared with Kafka's listing of it.

Spark queries cost seconds each, so planning and pruning are checked on the reader's own
``partitions()``/``read()`` and a few end-to-end queries confirm that Spark sees the same."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from pyspark.sql.datasource import EqualTo, GreaterThan, In, InputPartition, IsNotNull, LessThanOrEqual

from kcompact import storage
from kcompact.datasource.kafka_log import KafkaLogDataSource, Split, plan_splits, read_split
from kcompact.readers import codecs
from kcompact.readers.records import ABORT, COMMIT, Record
from tests.support import (
    FIXTURE_DIR,
    FIXTURE_INPUT,
    TS0,
    hand_control_batch,
    hand_v2_batch,
    headers_text,
    key_text,
    kp_build,
    make_batches,
    value_text,
    write_partition,
)

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}  # Kafka's names, written out
DELETE_HORIZON = 0x40


# -- a log dir ----------------------------------------------------------------------------------
def records(first: int, n: int) -> list[Record]:
    """Compressible records with null keys, tombstones and headers (one with a null value)."""
    out = []
    for o in range(first, first + n):
        key = None if o % 11 == 3 else b"key-%d" % (o % 13)
        value = None if o % 7 == 2 else b"value %d " % o * 8
        headers = (("h", b"%d" % o), ("nul", None)) if o % 3 == 0 else ()
        out.append(Record(o, TS0 + 10 * o, key, value, headers))
    return out


def legacy(magic: int, codec: int, first: int, n: int) -> bytes:
    """Magic v0/v1 entries from kafka-python's legacy builder, offsets as a broker assigns them."""
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 30)
    for i in range(n):
        offset = i if codec and magic == 1 else first + i  # compressed v1 wrappers hold relative offsets
        builder.append(offset, TS0 + i, None if i % 4 == 0 else b"old-%d" % i, b"old value %d " % i * 4)
    data = bytearray(builder.build())
    if codec:
        struct.pack_into(">q", data, 0, first + n - 1)  # a wrapper carries its last offset
    return bytes(data)


def marker(kind: int, offset: int, producer_id: int) -> bytes:
    return hand_control_batch(kind, offset=offset, timestamp=TS0 + 10 * offset, producer_id=producer_id,
                              producer_epoch=0, coordinator_epoch=3)


def orders_0() -> list[tuple[int, list[bytes]]]:
    """Three segments: every codec, a committed and an aborted transaction, LogAppendTime, a delete
    horizon, an empty batch, an idempotent producer."""
    seg0 = [kp_build(records(b, 10), codec=c, base_offset=b) for c, b in zip(range(5), range(0, 50, 10))]
    seg0 += [kp_build(records(50, 5), base_offset=50, producer_id=7, producer_epoch=0, base_sequence=0,
                      transactional=True, codec=codecs.LZ4), marker(COMMIT, 55, 7)]
    seg1 = [
        kp_build(records(56, 10), base_offset=56, codec=codecs.GZIP, log_append_time=TS0 + 999_999),
        kp_build(records(66, 5), base_offset=66, extra_attributes=DELETE_HORIZON),
        hand_v2_batch(b"", base_offset=71, count=0, last_offset_delta=3, first_timestamp=-1, max_timestamp=TS0,
                      producer_id=4, producer_epoch=1, base_sequence=9),
        kp_build(records(75, 5), base_offset=75, producer_id=8, producer_epoch=0, base_sequence=0,
                 transactional=True, codec=codecs.ZSTD),
        marker(ABORT, 80, 8),
        kp_build(records(81, 10), base_offset=81, producer_id=9, producer_epoch=2, base_sequence=0,
                 codec=codecs.SNAPPY),
    ]
    seg2 = [kp_build(records(b, 10), codec=c, base_offset=b) for c, b in ((1, 91), (3, 101), (0, 111))]
    return [(0, seg0), (56, seg1), (91, seg2)]


def legacy_log() -> bytes:
    """An old broker's segment: v0 and v1 messages, compressed wrappers, then v2 (no index)."""
    return (legacy(0, 0, 0, 5) + legacy(1, codecs.GZIP, 5, 5) + legacy(1, 0, 10, 3) + legacy(0, codecs.SNAPPY, 13, 4)
            + kp_build(records(17, 10), base_offset=17, codec=codecs.SNAPPY))


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    write_partition(root / "orders-0", orders_0())
    (root / "orders-1").mkdir()
    (root / "orders-1" / f"{0:020d}.log").write_bytes(legacy_log())
    write_partition(root / "user-events-0", [(0, make_batches(0, 40, codecs=(0, 2, 3))),
                                             (200, make_batches(200, 10))])
    (root / "orders-2.1a2b-delete").mkdir()  # not live: never read
    (root / "cleaner-offset-checkpoint").write_text("0\n0\n")
    return root


@pytest.fixture(scope="module")
def source(spark, s3_endpoint):
    """The registered source. Executors are separate processes: like a cluster's, they find the S3
    endpoint through fsspec's environment variable, passed with the session's executor environment
    (a registration carries the environment; set once, since each environment starts its own workers)."""
    import fsspec

    environment = spark.sparkContext.environment
    environment["FSSPEC_S3"] = json.dumps(fsspec.config.conf["s3"])
    spark.dataSource.register(KafkaLogDataSource)
    yield KafkaLogDataSource
    del environment["FSSPEC_S3"]


def read(spark, path: str | Path | None, **options) -> pa.Table:
    """Through Spark (tests using it also take the ``source`` fixture, which registers the source)."""
    reader = spark.read.format("kafka-log")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load() if path is None else reader.load(str(path))).toArrow()


# -- truth, from kafka-python ---------------------------------------------------------------------
def entries(log_dir: Path):
    """(topic, partition, segment base, position, data, kafka-python entry) of every entry."""
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir() and not p.name.endswith("-delete")):
        topic, _, partition = part.name.rpartition("-")
        for log in sorted(part.glob("*.log")):
            data, position = log.read_bytes(), 0
            for entry in MemoryRecords(data):
                yield topic, int(partition), int(log.stem), position, data, entry
                position += entry.size_in_bytes


def first_offset(entry, recs: list) -> int:
    return recs[0].offset if entry.magic < 2 and recs else entry.base_offset


def kp_batch_fields(entry, recs: list) -> dict:
    v2 = entry.magic == 2
    return {
        "batchBaseOffset": first_offset(entry, recs),
        "batchLastOffset": entry.last_offset if v2 else entry.base_offset,
        "producerId": entry.producer_id if v2 else -1,
        "producerEpoch": entry.producer_epoch if v2 else -1,
        "baseSequence": entry.base_sequence if v2 else -1,
        "isTransactional": v2 and entry.is_transactional,
        "isControl": v2 and entry.is_control_batch,
        "magic": entry.magic,
        "codec": CODEC_NAMES[entry.compression_type],
        "deleteHorizonMs": entry.first_timestamp if v2 and entry.attributes & DELETE_HORIZON else None,
    }


def timestamp_ms(r) -> int:
    return -1 if r.timestamp is None else r.timestamp


def expected_records(log_dir: Path) -> list[dict]:
    rows = []
    for topic, partition, base, position, _, entry in entries(log_dir):
        recs = list(entry)
        fields = kp_batch_fields(entry, recs)
        for r in recs:
            rows.append({
                "key": r.key, "value": r.value, "topic": topic, "partition": partition, "offset": r.offset,
                "timestamp": timestamp_ms(r) * 1000,
                "timestampType": -1 if r.timestamp_type is None else r.timestamp_type,
                "headers": [{"key": k, "value": v} for k, v in r.headers],
                "batchPosition": position, "segmentBaseOffset": base, **fields,
            })
    return rows


def expected_compaction(log_dir: Path) -> list[dict]:
    rows = []
    for topic, partition, base, position, _, entry in entries(log_dir):
        recs = list(entry)
        fields = kp_batch_fields(entry, recs)
        for i, r in enumerate(recs):
            rows.append({
                "topic": topic, "partition": partition, "segmentBaseOffset": base, "batchPosition": position,
                "batchBaseOffset": fields["batchBaseOffset"], "recordIndex": i, "offset": r.offset, "key": r.key,
                "tombstone": r.value is None, "timestamp": timestamp_ms(r), "isControl": fields["isControl"],
                "isTransactional": fields["isTransactional"], "producerId": fields["producerId"],
            })
    return rows


def expected_batches(log_dir: Path) -> list[dict]:
    rows = []
    for topic, partition, base, position, data, entry in entries(log_dir):
        crc_valid = entry.validate_crc()  # kafka-python checks only before iterating
        recs = list(entry)
        fields = kp_batch_fields(entry, recs)
        v2 = entry.magic == 2
        control = None
        if fields["isControl"]:
            control = "ABORT" if recs[0].abort else "COMMIT"
        legacy_ts = struct.unpack_from(">q", data, position + 18)[0] if entry.magic == 1 else -1
        rows.append({
            "topic": topic, "partition": partition, "segmentBaseOffset": base, "batchPosition": position,
            "batchSize": entry.size_in_bytes, "recordCount": entry.records_count if v2 else len(recs),
            "controlType": control, "maxTimestamp": entry.max_timestamp if v2 else legacy_ts,
            "leaderEpoch": entry.leader_epoch if v2 else -1, "crcValid": crc_valid,
            **fields,
        })
    return rows


def rows_of(table: pa.Table) -> list[dict]:
    """Spark's rows as plain values (timestamps as epoch microseconds), in offset order; the
    compaction mode's ``partitionDir`` (where a row came from, checked on its own) left out."""
    if "partitionDir" in table.column_names:
        table = table.drop_columns(["partitionDir"])
    if "timestamp" in table.column_names and pa.types.is_timestamp(table.schema.field("timestamp").type):
        i = table.column_names.index("timestamp")
        table = table.set_column(i, "timestamp", table.column(i).cast(pa.int64()))
    return sorted(table.to_pylist(), key=order)


def order(row: dict) -> tuple:
    return row["topic"], row["partition"], row["segmentBaseOffset"], row.get("offset", row["batchPosition"])


def local_rows(splits: list[Split], mode: str) -> list[dict]:
    """The reader's rows without Spark."""
    batches = [b for s in splits for b in read_split(s, mode)]
    return rows_of(pa.Table.from_batches(batches)) if batches else []


def settings(path: Path | str, **options):
    return KafkaLogDataSource({"path": str(path), **options}).reader(None).settings


def splits(path: Path | str, **options) -> list[Split]:
    return plan_splits(settings(path, **options))


# -- every column of every mode --------------------------------------------------------------
def test_records_mode_equals_kafka_python(spark, source, log_dir: Path):
    table = read(spark, log_dir)
    assert table.column_names == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
        "batchBaseOffset", "batchLastOffset", "batchPosition", "segmentBaseOffset", "producerId", "producerEpoch",
        "baseSequence", "isTransactional", "isControl", "magic", "codec", "deleteHorizonMs",
    ]
    expected = sorted(expected_records(log_dir), key=order)
    assert rows_of(table) == expected
    assert {r["codec"] for r in expected} == set(CODEC_NAMES.values()) and {r["magic"] for r in expected} == {0, 1, 2}
    assert any(r["deleteHorizonMs"] for r in expected) and any(r["timestampType"] == 1 for r in expected)


def test_compaction_mode_equals_kafka_python(spark, source, log_dir: Path):
    """Read in small splits: segments cut at index positions give the same rows as whole ones."""
    table = read(spark, log_dir, mode="compaction", maxSplitBytes="1500")
    assert table.column_names == [
        "partitionDir", "topic", "partition", "segmentBaseOffset", "batchPosition", "batchBaseOffset", "recordIndex",
        "offset", "key", "tombstone", "timestamp", "isControl", "isTransactional", "producerId",
    ]
    for row in table.select(["partitionDir", "topic", "partition"]).to_pylist():
        assert row["partitionDir"] == str(log_dir / f"{row['topic']}-{row['partition']}")
    assert rows_of(table) == sorted(expected_compaction(log_dir), key=order)


def test_partition_dirs_read_exactly_those_dirs_below_their_ending_offsets(spark, source, log_dir: Path):
    """The compaction job names partition dirs (replicas of one partition in several log dirs
    stay apart) and where each stops; no log-dir listing is involved."""
    dirs = sorted(p for p in log_dir.iterdir() if p.is_dir())
    chosen = {str(dirs[0]): 7, str(dirs[-1]): None}
    table = read(spark, None, mode="compaction", partitionDirs=json.dumps(chosen))
    got = {(r["partitionDir"], r["offset"]) for r in table.select(["partitionDir", "offset"]).to_pylist()}
    every = read(spark, log_dir, mode="compaction").select(["partitionDir", "offset"]).to_pylist()
    want = {
        (r["partitionDir"], r["offset"])
        for r in every
        if r["partitionDir"] in chosen
        and (chosen[r["partitionDir"]] is None or r["offset"] < chosen[r["partitionDir"]])
    }
    assert got == want and {d for d, _ in got} == set(chosen)


def test_batches_mode_equals_kafka_python(spark, source, log_dir: Path):
    table = read(spark, log_dir, mode="batches")
    expected = sorted(expected_batches(log_dir), key=order)
    assert rows_of(table) == expected
    assert [r["controlType"] for r in expected if r["isControl"]] == ["COMMIT", "ABORT"]
    assert any(r["recordCount"] == 0 for r in expected)


# -- splits ------------------------------------------------------------------------------------
def test_large_segments_split_at_index_positions(log_dir: Path):
    whole, small = splits(log_dir), splits(log_dir, maxSplitBytes="1500")
    assert len(whole) == 6  # one per non-empty segment
    by_segment: dict[str, list[Split]] = {}
    for s in small:
        by_segment.setdefault(s.path, []).append(s)
    for s in whole:  # the pieces tile the segment, and only a segment with an index is cut
        pieces = by_segment[s.path]
        assert pieces[0].start == 0 and pieces[-1].end == s.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
        assert len(pieces) > 1 or s.end <= 1500 or "orders-1" in s.path
    user_events = by_segment[str(log_dir / "user-events-0" / f"{0:020d}.log")]
    assert len(user_events) > 4 and all(p.end - p.start <= 1500 for p in user_events)
    for mode in ("records", "compaction", "batches"):
        assert local_rows(small, mode) == local_rows(whole, mode)


def test_paths_option_and_partition_dirs(log_dir: Path):
    assert {s.topic for s in splits(log_dir / "user-events-0")} == {"user-events"}
    both = KafkaLogDataSource({"paths": f"{log_dir / 'orders-1'}, {log_dir / 'user-events-0'}"}).reader(None)
    assert [(s.topic, s.partition, s.segment_base) for s in both.partitions()] == [
        ("orders", 1, 0), ("user-events", 0, 0), ("user-events", 0, 200)]


# -- pruning ------------------------------------------------------------------------------------
def test_topic_and_partition_options(log_dir: Path):
    assert {(s.topic, s.partition) for s in splits(log_dir, topics="orders")} == {("orders", 0), ("orders", 1)}
    assert {(s.topic, s.partition) for s in splits(log_dir, partitions="orders:1, 0")} == {
        ("orders", 0), ("orders", 1), ("user-events", 0)}
    picked = splits(log_dir, topics="orders,user-events", partitions="orders:1")
    assert {(s.topic, s.partition) for s in picked} == {("orders", 1)}
    assert splits(log_dir, partitions="9") == []
    reader = KafkaLogDataSource({"path": str(log_dir), "partitions": "9"}).reader(None)
    assert list(reader.read(InputPartition(None))) == []  # the task Spark runs when none was planned


def test_topics_that_do_not_exist_are_an_error_naming_those_that_do(log_dir: Path):
    """``topics=nosuch`` (a typo) is an error naming the topics the log dirs hold, not an empty result;
    a topic named beside one that exists (a broker holds replicas of some topics only) is not."""
    with pytest.raises(ValueError) as raised:
        splits(log_dir, topics="nosuch, ordres")
    assert str(raised.value) == (f"kafka-log: topics=nosuch,ordres: no such topic in {log_dir}; "
                                 "the topics there: orders, user-events")
    with pytest.raises(ValueError, match=r"no such topic in .*orders-1; the topics there: orders$"):
        splits(log_dir / "orders-1", topics="user-events")
    assert {s.topic for s in splits(log_dir, topics="orders,payments")} == {"orders"}
    # a pushed filter on a topic that does not exist is a query with no rows, as in SQL
    reader = KafkaLogDataSource({"path": str(log_dir), "pushFilters": "true"}).reader(None)
    assert list(reader.pushFilters([EqualTo(("topic",), "nosuch")])) == []
    assert reader.partitions() == []


def test_a_missing_topic_reaches_the_notebook_as_that_error(spark, source, log_dir: Path):
    with pytest.raises(Exception, match=r"no such topic in .*; the topics there: orders, user-events"):
        read(spark, log_dir, topics="nosuch")


def test_offset_range_prunes_segments_and_index_ranges(log_dir: Path):
    user_events = log_dir / "user-events-0"
    ranged = splits(user_events, startingOffset="60", endingOffset="80")
    (only,) = ranged  # the second segment (base 200) is skipped
    assert only.segment_base == 0 and only.start > 0 and only.end < (user_events / f"{0:020d}.log").stat().st_size
    rows = local_rows(ranged, "compaction")
    assert [r["offset"] for r in rows] == list(range(60, 80))
    everything = local_rows(splits(user_events), "compaction")
    assert rows == [r for r in everything if 60 <= r["offset"] < 80]


def test_per_partition_offsets(log_dir: Path):
    picked = splits(log_dir, topics="orders", startingOffset="orders:0=60,5", endingOffset="0=95")
    assert sorted((s.partition, s.segment_base) for s in picked) == [(0, 56), (0, 91), (1, 0)]
    rows = local_rows(picked, "records")
    assert {r["offset"] for r in rows if r["partition"] == 0} == set(range(60, 71)) | set(range(75, 95))
    assert [r["offset"] for r in rows if r["partition"] == 1] == list(range(5, 27))
    batches = local_rows(picked, "batches")
    assert [r["batchBaseOffset"] for r in batches if r["partition"] == 0] == [56, 66, 71, 75, 80, 81, 91]


def test_options_prune_through_spark(spark, source, log_dir: Path):
    table = read(spark, log_dir, mode="compaction", topics="orders", partitions="0",
                 startingOffset="10", endingOffset="60", maxSplitBytes="2000")
    expected = [r for r in expected_compaction(log_dir) if r["topic"] == "orders" and r["partition"] == 0
                and 10 <= r["offset"] < 60]
    assert rows_of(table) == sorted(expected, key=order)


def test_pushed_filters_narrow_the_plan(log_dir: Path):
    reader = KafkaLogDataSource({"path": str(log_dir), "mode": "compaction", "pushFilters": "true"}).reader(None)
    topic, part = EqualTo(("topic",), "orders"), In(("partition",), (0, 7))
    low, high, other = GreaterThan(("offset",), 57), LessThanOrEqual(("offset",), 90), IsNotNull(("key",))
    assert list(reader.pushFilters([topic, part, low, high, other])) == [other]
    planned = reader.partitions()
    assert [(s.partition, s.segment_base) for s in planned] == [(0, 56)]
    assert {r["offset"] for r in local_rows(planned, "compaction")} == set(range(58, 71)) | set(range(75, 91))
    batches = KafkaLogDataSource({"path": str(log_dir), "mode": "batches", "pushFilters": "true"}).reader(None)
    assert list(batches.pushFilters([topic, low])) == [low]  # batches have no offset column


def test_pushed_filters_through_spark(spark, source, log_dir: Path):
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = (spark.read.format("kafka-log").option("mode", "compaction").option("pushFilters", "true")
              .load(str(log_dir)).where("topic = 'orders' AND partition IN (0) AND offset > 57 AND offset <= 90"))
        rows = rows_of(df.toArrow())
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    expected = [r for r in expected_compaction(log_dir) if r["topic"] == "orders" and r["partition"] == 0
                and 57 < r["offset"] <= 90]
    assert rows == sorted(expected, key=order)


# -- Kafka's own fixture --------------------------------------------------------------------------
def flags(row: dict, control_type: str | None) -> str:
    text = ("c" if row["isControl"] else "d") + ("T" if row["isTransactional"] else "")
    return text + (f":{control_type}" if row["isControl"] else "")


def record_line(row: dict) -> str:
    control = None
    if row["isControl"]:
        control = {0: "ABORT", 1: "COMMIT"}[struct.unpack(">hh", row["key"])[1]]
    headers = [(h["key"], h["value"]) for h in row["headers"]]
    return "\t".join(map(str, (
        row["topic"], row["partition"], row["offset"], "R", row["timestamp"] // 1000, key_text(row["key"]),
        value_text(row["value"]), headers_text(headers), flags(row, control), row["producerId"])))


def batch_line(row: dict) -> str:
    horizon = -1 if row["deleteHorizonMs"] is None else row["deleteHorizonMs"]
    return (f"{row['topic']}\t{row['partition']}\t{row['batchBaseOffset']}\tB\tlast={row['batchLastOffset']}\t"
            f"count={row['recordCount']}\tcodec={row['codec']}\tflags={flags(row, row['controlType'])}\t"
            f"pid={row['producerId']}\tepoch={row['producerEpoch']}\tseq={row['baseSequence']}\t"
            f"maxTs={row['maxTimestamp']}\tdeleteHorizon={horizon}\tleaderEpoch={row['leaderEpoch']}")


def test_kafka_written_fixture_records(spark, source):
    lines = [record_line(r) for r in rows_of(read(spark, FIXTURE_INPUT))]
    assert lines == (FIXTURE_DIR / "input.records.tsv").read_text().splitlines()


def test_kafka_written_fixture_batches(spark, source):
    lines = [batch_line(r) for r in rows_of(read(spark, FIXTURE_INPUT, mode="batches"))]
    assert lines == (FIXTURE_DIR / "input.batches.tsv").read_text().splitlines()


# -- storage and errors ------------------------------------------------------------------------
def test_s3_reads_like_local(spark, source, log_dir: Path):
    fs, _ = storage.resolve("s3://kafka-log-source")
    fs.call_s3("create_bucket", Bucket="kafka-log-source")
    fs.put(str(log_dir), "kafka-log-source/logs", recursive=True)
    fs.invalidate_cache()
    remote = read(spark, "s3://kafka-log-source/logs", mode="compaction", maxSplitBytes="4000")
    assert len(splits("s3://kafka-log-source/logs", maxSplitBytes="4000")) > len(splits(log_dir))
    assert rows_of(remote) == sorted(expected_compaction(log_dir), key=order)


def test_s3_reads_like_local_on_a_real_server(spark, source, log_dir: Path, seaweedfs):
    """The same on SeaweedFS (tests/seaweedfs.py): a real server's listings and ranged reads, the
    executors reaching it through the environment the session gives them."""
    from tests.seaweedfs import ACCESS_KEY, SECRET_KEY
    from tests.stores import Store

    store = Store("seaweedfs", seaweedfs.proxy, seaweedfs.proxy.endpoint, ACCESS_KEY, SECRET_KEY)
    with store.installed(spark):
        spark.dataSource.register(source)  # a registration carries the environment it was made in
        fs = store.fs()
        if not fs.exists("kafka-log-real"):
            fs.mkdir("kafka-log-real")
        fs.put(str(log_dir), "kafka-log-real/logs", recursive=True)
        store.counter.reset()
        remote = read(spark, "s3://kafka-log-real/logs", mode="compaction", maxSplitBytes="4000")
        served = store.counter.snapshot()["requests"]
    spark.dataSource.register(source)  # back to the module's store
    assert rows_of(remote) == sorted(expected_compaction(log_dir), key=order)
    assert served.get("GET", 0) > 0 and served.get("PUT", 0) == 0, served  # read in place, nothing written


def corrupt_copy(log_dir: Path, tmp_path: Path) -> tuple[Path, int]:
    """user-events-0 with one byte of its 8th batch's records flipped; returns the .log and that batch's position."""
    part = tmp_path / "user-events-0"
    shutil.copytree(log_dir / "user-events-0", part)
    log = part / f"{0:020d}.log"
    data = bytearray(log.read_bytes())
    position = next(p for i, (_, _, _, p, _, _) in enumerate(entries(tmp_path)) if i == 7)
    data[position + 70] ^= 0xFF
    log.write_bytes(bytes(data))
    return log, position


def test_corrupt_batch_fails_the_task_naming_file_and_position(spark, source, log_dir: Path, tmp_path: Path):
    log, position = corrupt_copy(log_dir, tmp_path)
    with pytest.raises(Exception) as failure:
        read(spark, tmp_path, mode="compaction")
    assert f"{log}: byte {position}: " in str(failure.value) and "CRC mismatch" in str(failure.value)
    listed = local_rows(splits(tmp_path), "batches")  # the batch listing shows it instead
    assert [r["batchPosition"] for r in listed if not r["crcValid"]] == [position]


def test_bad_options_are_refused(log_dir: Path):
    for options in ({"mode": "rows"}, {"partitions": "orders:x"}, {"startingOffset": "a=1"},
                    {"maxSplitBytes": "0"}):
        with pytest.raises(ValueError):
            settings(log_dir, **options)
    with pytest.raises(ValueError, match="needs a path"):
        KafkaLogDataSource({}).schema()
