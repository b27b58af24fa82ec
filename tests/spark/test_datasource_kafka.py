"""The ``kafka-log`` source as Spark's Kafka source is used: read_committed, timestamps, the table
view and Spark's option names, on the Kafka-written fixture (committed, aborted and one open
transaction). Truth is the fixture's own record listing (written from Kafka's client library),
with Kafka's documented rules applied in the test alone."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from kcompact.datasource import positions as positions_module
from kcompact.datasource.kafka_log import KafkaLogDataSource, plan_splits
from kcompact.datasource.positions import Positions
from kcompact.logdir.listing import scan_partition
from tests.support import FIXTURE_DIR, FIXTURE_INPUT, key_text, value_text


# -- truth: the fixture's listing and Kafka's rules -----------------------------------------------
def listing() -> list[dict]:
    rows = []
    for line in (FIXTURE_DIR / "input.records.tsv").read_text().splitlines():
        topic, partition, offset, kind, ts, key, value, _headers, flags, pid = line.split("\t")
        if kind != "R":
            continue
        rows.append({"topic": topic, "partition": int(partition), "offset": int(offset), "timestamp": int(ts),
                     "key": key, "value": value, "flags": flags, "pid": int(pid)})
    return rows


def committed(rows: list[dict]) -> list[dict]:
    """What a read_committed consumer gets (Kafka's rule): no control record; no record of a
    transaction its producer's next marker aborts; nothing from the first record of a transaction
    with no marker yet (the last stable offset) on."""
    out = []
    for (topic, partition) in sorted({(r["topic"], r["partition"]) for r in rows}):
        part = [r for r in rows if (r["topic"], r["partition"]) == (topic, partition)]
        outcome, open_first = {}, None
        for i, r in enumerate(part):
            if r["flags"].startswith("dT"):
                marker = next((m for m in part[i + 1:] if m["pid"] == r["pid"] and m["flags"].startswith("c")), None)
                if marker is None:
                    open_first = r["offset"] if open_first is None else min(open_first, r["offset"])
                outcome[r["offset"]] = None if marker is None else marker["flags"].endswith("ABORT")
        for r in part:
            if r["flags"].startswith("c") or (open_first is not None and r["offset"] >= open_first):
                continue
            if outcome.get(r["offset"]):
                continue
            out.append(r)
    return out


def ours(table: pa.Table) -> list[tuple]:
    rows = table.to_pylist()
    return sorted((r["topic"], r["partition"], r["offset"], key_text(r["key"]), value_text(r["value"])) for r in rows)


def theirs(rows: list[dict]) -> list[tuple]:
    return sorted((r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows)


def read(spark, **options) -> pa.Table:
    reader = spark.read.format("kafka-log")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(FIXTURE_INPUT)).toArrow()


@pytest.fixture(scope="module")
def source(spark):
    spark.dataSource.register(KafkaLogDataSource)
    return KafkaLogDataSource


# -- isolation ------------------------------------------------------------------------------------
def test_the_fixture_holds_what_isolation_is_about():
    rows = listing()
    assert any(r["flags"] == "cT:ABORT" for r in rows) and any(r["flags"] == "cT:COMMIT" for r in rows)
    assert len(committed(rows)) < len([r for r in rows if not r["flags"].startswith("c")])


def test_read_committed_equals_kafka_rule(spark, source):
    table = read(spark, **{"kafka.isolation.level": "read_committed"})
    assert ours(table) == theirs(committed(listing()))


def test_read_uncommitted_is_every_record(spark, source):
    assert ours(read(spark, **{"kafka.isolation.level": "read_uncommitted"})) == theirs(listing())


def test_read_committed_over_small_splits_equals_one_split(spark, source):
    """Splits cut inside transactions still drop exactly the aborted records."""
    table = read(spark, **{"kafka.isolation.level": "read_committed", "maxSplitBytes": "20000"})
    assert ours(table) == theirs(committed(listing()))


# -- timestamps -----------------------------------------------------------------------------------
def first_at_or_after(rows: list[dict], topic: str, partition: int, ts: int) -> int | None:
    """ListOffsets' documented rule: the earliest offset whose timestamp is at or after ``ts``."""
    found = [r["offset"] for r in rows if (r["topic"], r["partition"]) == (topic, partition) and r["timestamp"] >= ts]
    return min(found) if found else None


def test_offset_of_time_is_listoffsets_rule_and_reads_one_segment(monkeypatch):
    rows = listing()
    part = scan_partition(str(FIXTURE_INPUT / "accounts-0"), "accounts", 0)
    stamps = sorted({r["timestamp"] for r in rows if r["topic"] == "accounts" and r["partition"] == 0})
    opened = []
    real = positions_module.storage.open_read
    monkeypatch.setattr(positions_module.storage, "open_read", lambda path, *a: opened.append(path) or real(path, *a))
    for ts in (stamps[0] - 1, stamps[len(stamps) // 3] + 1, stamps[-2], stamps[-1] + 1):
        opened.clear()
        assert Positions(part).offset_of_time(ts) == first_at_or_after(rows, "accounts", 0, ts)
        assert len(opened) <= 2  # the segment its time index points to (and the next, at a boundary)


def test_starting_and_ending_timestamps(spark, source):
    rows = listing()
    stamps = sorted(r["timestamp"] for r in rows)
    low, high = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    table = read(spark, startingTimestamp=str(low), endingTimestamp=str(high))
    expected = []
    for tp in sorted({(r["topic"], r["partition"]) for r in rows}):
        start, end = first_at_or_after(rows, *tp, low), first_at_or_after(rows, *tp, high)
        expected += [r for r in rows if (r["topic"], r["partition"]) == tp and start is not None
                     and r["offset"] >= start and (end is None or r["offset"] < end)]
    assert ours(table) == theirs(expected)


def test_offsets_by_timestamp_per_partition(spark, source):
    rows = listing()
    ts = sorted(r["timestamp"] for r in rows if r["topic"] == "accounts" and r["partition"] == 1)[500]
    table = read(spark, subscribe="accounts", startingOffsetsByTimestamp=json.dumps({"accounts": {"1": ts}}))
    start = first_at_or_after(rows, "accounts", 1, ts)
    expected = [r for r in rows if r["topic"] == "accounts" and (r["partition"] == 0 or r["offset"] >= start)]
    assert ours(table) == theirs(expected)


# -- Spark's option names -------------------------------------------------------------------------
def test_spark_offsets_json_with_earliest_and_latest(spark, source):
    rows = listing()
    offsets = json.dumps({"accounts": {"0": 23, "1": -2}})
    ends = json.dumps({"accounts": {"0": 500, "1": -1}})
    table = read(spark, subscribe="accounts", startingOffsets=offsets, endingOffsets=ends)
    expected = [r for r in rows if r["topic"] == "accounts" and (r["partition"] == 1 or 23 <= r["offset"] < 500)]
    assert ours(table) == theirs(expected)
    assert read(spark, subscribe="accounts", startingOffsets="latest").num_rows == 0


def test_assign_and_include_headers(spark, source):
    table = read(spark, assign=json.dumps({"accounts": [1]}), includeHeaders="false")
    assert "headers" not in table.column_names
    assert ours(table) == theirs([r for r in listing() if (r["topic"], r["partition"]) == ("accounts", 1)])


def test_bad_spark_options_are_refused():
    for options, said in [({"startingOffsets": "{bad"}, "startingOffsets must be JSON"),
                          ({"startingOffsets": '{"t":{"0":-3}}'}, "neither a position"),
                          ({"kafka.isolation.level": "dirty"}, "kafka.isolation.level must be"),
                          ({"subscribe": "a", "topics": "a"}, "mean the same"),
                          ({"startingTimestamp": "x"}, "milliseconds"),
                          ({"includeHeaders": "yes"}, "true or false")]:
        with pytest.raises(ValueError, match=said):
            plan_splits(KafkaLogDataSource({"path": str(FIXTURE_INPUT), **options}).reader(None).settings)


# -- the table view -------------------------------------------------------------------------------
def replayed(rows: list[dict], below: int | None = None) -> list[tuple]:
    """A replay of the committed records (below an offset): each key's latest, a tombstone
    removing the key."""
    latest = {}
    for r in committed(rows):
        if below is not None and r["offset"] >= below:
            continue
        if r["key"] == "NULL":
            continue
        latest[(r["topic"], r["partition"], r["key"])] = r
    return theirs([r for r in latest.values() if r["value"] != "NULL"])


def test_table_is_a_replay_of_the_committed_records(spark, source):
    table = read(spark, mode="table", subscribe="accounts", maxSplitBytes="30000")
    assert table.column_names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
                                  "headers"]
    assert ours(table) == replayed([r for r in listing() if r["topic"] == "accounts"])


def test_table_up_to_an_ending_offset(spark, source):
    rows = [r for r in listing() if r["topic"] == "accounts"]
    table = read(
        spark, mode="table", subscribe="accounts", endingOffsets=json.dumps({"accounts": {"0": 4000, "1": 4000}})
    )
    assert ours(table) == replayed(rows, below=4000)


def test_table_written_as_parquet(spark, source, tmp_path: Path):
    df = spark.read.format("kafka-log").option("mode", "table").option("subscribe", "accounts").load(str(FIXTURE_INPUT))
    df.write.parquet(str(tmp_path / "accounts"))
    back = spark.read.parquet(str(tmp_path / "accounts")).toArrow()
    assert ours(back) == replayed([r for r in listing() if r["topic"] == "accounts"])
