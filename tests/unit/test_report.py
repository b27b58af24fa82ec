"""The compaction report's text and metrics on a small report built by hand.

Expected lines follow LogCleaner.recordStats's format (MB = 2^20 bytes, Java's ``%,.1f``: the
shortest decimal of the double rounded half up, so 0.25 prints as 0.3 where Python's own format
says 0.2); expected metrics follow the gauges' definitions in LogCleaner and LogCleanerManager.
Every figure below is worked out by hand in the comments.
"""

from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pytest

from kcompact.compaction.reports.report import (
    METRICS,
    MIB,
    NO_BUFFER,
    NO_LAST_RUN,
    NO_PLAN,
    PartitionReport,
    Report,
    java_fixed,
)
from kcompact.compaction.reports.report_html import write_report
from kcompact.contracts.plan_row import LeaseHolder, PlanRow
from kcompact.planner.build import PLAN_SCHEMA

NOW = 1_720_001_000_000


def cleaned() -> PartitionReport:
    # 3 MiB read, 0.25 MiB written; 2,000 records, 500 kept; 1.5 s
    return PartitionReport("orders", 0, "/logs/a/orders-0", 100, 2100, bytes_read=3 * MIB, bytes_written=MIB // 4,
                           records_read=2000, records_kept=500,
                           removed={"superseded": 1400, "tombstone": 100, "aborted": 0, "keyless": 0, "marker": 0},
                           seconds=1.5, committed=True)


def users() -> PartitionReport:
    # 10 MiB read, 5 MiB written; 12,345 records, 2,345 kept; 0.25 s
    return PartitionReport("users", 1, "/logs/b/users-1", 0, 12345, bytes_read=10 * MIB, bytes_written=5 * MIB,
                           records_read=12345, records_kept=2345,
                           removed={"superseded": 10000, "tombstone": 0, "aborted": 0, "keyless": 0, "marker": 0},
                           seconds=0.25, committed=True)


def failed() -> PartitionReport:
    return PartitionReport.failed(PlanRow(topic="orders", partition=1, path="/logs/a/orders-1", first_dirty_offset=7),
                                  "/logs/a/orders-1/00000000000000000000.log: byte 42: CRC mismatch", "corrupt input",
                                  seconds=0.5)


def skipped() -> PartitionReport:
    return PartitionReport.skipped_for(PlanRow(topic="orders", partition=5, path="/logs/a/orders-5",
                                               first_dirty_offset=0), "held by another job")


def report(dry_run: bool = False) -> Report:
    return Report(NOW, dry_run, [cleaned(), users(), failed(), skipped()], seconds=4.0,
                  stages={"plan": 2.5, "1 batch plans": 0.5, "2-4 offset map, keep flags, rewrite": 3.0,
                          "5 commit": 0.5})


def plan_row(path: str, policy: str | None, state: str, total: int | None, cleanable: int | None,
             ratio: float | None, delay: int | None) -> dict:
    log_dir, _, name = path.rpartition("/")
    topic, _, number = name.rpartition("-")
    return {"topic": topic, "partition": int(number), "log_dir": log_dir, "path": path, "cleanup_policy": policy,
            "state": state, "total_bytes": total, "cleanable_bytes": cleanable, "cleanable_ratio": ratio,
            "max_compaction_delay_ms": delay, "selected": False}


def plan() -> pa.Table:
    rows = [
        plan_row("/logs/a/orders-0", "compact", "idle", 4_000_000, 3_000_000, 0.75, 0),
        plan_row("/logs/b/users-1", "compact,delete", "idle", 12_000_000, 10_500_000, 0.875, 61_999),
        plan_row("/logs/a/orders-1", "compact", "idle", None, None, None, None),  # unreadable: this run fails it
        plan_row("/logs/a/orders-2", "compact", "uncleanable", 9_000, 5_000, 0.99, 999_000),  # marked earlier
        plan_row("/logs/b/orders-3", "compact", "paused", 8_000, 7_600, 0.95, 500_000),
        plan_row("/logs/a/orders-4", "compact", "idle", 0, 0, 0.0, 0),  # empty
        plan_row("/logs/b/clicks-0", "delete", "idle", None, None, None, None),
    ]
    return pa.Table.from_pylist(rows, schema=PLAN_SCHEMA)


def test_java_fixed_rounds_as_javas_formatter():
    assert java_fixed(0.25, 1) == "0.3"  # Python: format(0.25, ".1f") == "0.2"
    assert java_fixed(0.125, 2) == "0.13"
    assert java_fixed(2.675, 2) == "2.68"  # the double is 2.67499999..., its shortest decimal 2.675
    assert java_fixed(1234567.891, 1) == "1,234,567.9"
    assert java_fixed(91.66666666666667, 1, grouping=False) == "91.7"
    assert java_fixed(3586.25, 0) == "3,586"


def test_summary_is_kafkas_stats_message():
    assert cleaned().summary().split("\n") == [
        "Log cleaner thread 0 cleaned log orders-0 (dirty section = [100, 2100])",
        "\t3.0 MB of log processed in 1.5 seconds (2.0 MB/sec).",  # 3 MiB / 1.5 s
        "\tStart size: 3.0 MB (2,000 messages)",
        "\tEnd size: 0.3 MB (500 messages)",  # 0.25 MiB, half up
        "\t91.7% size reduction (75.0% fewer messages)",  # 1 - 0.25/3 = 0.91666..; 1 - 500/2000
        "\tRemoved: 1,400 superseded, 100 tombstone",
    ]
    assert users().summary().split("\n")[1:3] == [
        "\t10.0 MB of log processed in 0.3 seconds (40.0 MB/sec).",  # 0.25 s prints 0.3; 10 MiB / 0.25 s = 40
        "\tStart size: 10.0 MB (12,345 messages)",
    ]


def test_summary_of_a_dry_run_failure_and_skip():
    dry = cleaned()
    dry.committed, dry.bytes_written = False, 0
    assert dry.summary().split("\n") == [
        "Log cleaner thread 0 would clean log orders-0 (dirty section = [100, 2100])",
        "\t3.0 MB of log processed in 1.5 seconds (2.0 MB/sec).",
        "\tStart size: 3.0 MB (2,000 messages)",
        "\tEnd size: not written in a dry run (500 messages)",
        "\t75.0% fewer messages",
        "\tRemoved: 1,400 superseded, 100 tombstone",
    ]
    assert failed().summary() == ("orders-1: NOT cleaned, its files left as they were: "
                                  "/logs/a/orders-1/00000000000000000000.log: byte 42: CRC mismatch")
    assert skipped().summary() == "orders-5: skipped: held by another job"


def test_text_ends_with_the_totals():
    # read 3 + 10 = 13 MiB, written 0.25 + 5 = 5.25 MiB (half up: 5.3); 2,000 + 12,345 = 14,345 messages,
    # 500 + 2,345 = 2,845 kept; 4.0 s: 13 / 4 = 3.25 MB/sec (3.3), 14,345 / 4 = 3,586.25 messages/sec
    assert report().text().split("\n")[-1] == (
        "4 partitions: 2 cleaned, 1 failed, 1 skipped; 13.0 MB -> 5.3 MB, 14,345 -> 2,845 messages in "
        "4.0 seconds (3.3 MB/sec, 3,586 messages/sec)")


def test_metrics_without_the_plan():
    values, notes = report().metrics
    assert values == {
        "max-dirty-percent": None,
        "max-clean-time-secs": 1,  # max(1.5, 0.25) truncated; the failed one's 0.5 s does not count
        "max-buffer-utilization-percent": 0,
        # (0.25 + 5) MiB / (3 + 10) MiB = 0.4038..: 40
        "cleaner-recopy-percent": 40,
        "max-compaction-delay-secs": None,
        "uncleanable-partitions-count": None,
        "uncleanable-bytes": None,
        "time-since-last-run-ms": {},  # no log dir with a previous run given
    }
    assert set(values) == set(METRICS)
    assert notes == {"max-buffer-utilization-percent": NO_BUFFER, "max-dirty-percent": NO_PLAN,
                     "max-compaction-delay-secs": NO_PLAN, "uncleanable-partitions-count": NO_PLAN,
                     "uncleanable-bytes": NO_PLAN}


def test_metrics_with_the_plan():
    r = report()
    r.observe_plan(PlanRow.read(plan()), marked=["/logs/a/orders-1"])
    values, _ = r.metrics
    # compacted and idle with bytes: orders-0 0.75, users-1 0.875 (orders-2 is uncleanable, orders-3 paused,
    # orders-4 empty, clicks-0 not compacted): 100 * 0.875 = 87.5 -> 87
    assert values["max-dirty-percent"] == 87
    # delays of the compacted idle ones: 0, 61,999 ms, 0 -> 61,999 // 1000 = 61 (orders-2's and orders-3's
    # larger delays do not count: Kafka's manager passes over uncleanable and paused partitions)
    assert values["max-compaction-delay-secs"] == 61
    # marked: orders-2 (before the run), orders-1 (by it), both in /logs/a; orders-1's bytes unknown: 0
    assert values["uncleanable-partitions-count"] == {"/logs/a": 2, "/logs/b": 0}
    assert values["uncleanable-bytes"] == {"/logs/a": 5_000, "/logs/b": 0}
    assert (values["cleaner-recopy-percent"], values["time-since-last-run-ms"]) == (40, {})


@pytest.mark.parametrize(("ratio", "percent"), [(0.29, 28), (0.5, 50), (1.0, 100)])
def test_max_dirty_percent_truncates_as_kafka(ratio, percent):
    r = Report(NOW, False)
    r.observe_plan(PlanRow.read(pa.Table.from_pylist([plan_row("/l/t-0", "compact", "idle", 100, 29, ratio, 0)],
                                        schema=PLAN_SCHEMA)))
    assert r.metrics[0]["max-dirty-percent"] == percent  # (100 * 0.29).toInt == 28 in Scala too


def test_dry_run_and_empty_run():
    values, notes = report(dry_run=True).metrics
    assert notes["cleaner-recopy-percent"] == "dry run: nothing was written"
    empty = Report(NOW, False, seconds=0.25)
    values, _ = empty.metrics
    assert (values["max-clean-time-secs"], values["cleaner-recopy-percent"], values["time-since-last-run-ms"]) \
        == (0, 0, {})
    empty.observe_plan(PlanRow.read(PLAN_SCHEMA.empty_table()))
    values, _ = empty.metrics
    assert (values["max-dirty-percent"], values["max-compaction-delay-secs"]) == (0, 0)
    assert values["uncleanable-partitions-count"] == values["uncleanable-bytes"] == {}


def test_json_carries_metrics_and_notes(tmp_path):
    r = report()
    r.observe_plan(PlanRow.read(plan()), marked=["/logs/a/orders-1"])
    path = tmp_path / "r.json"
    write_report(str(path), r.to_json(), page=False)
    doc = json.loads(path.read_text())
    assert doc["metrics"] == r.metrics[0] and doc["metric_notes"] == r.metrics[1]
    assert doc["totals"]["bytes_written"] == MIB // 4 + 5 * MIB
    nothing = {"superseded": 0, "tombstone": 0, "aborted": 0, "keyless": 0, "marker": 0}
    assert [p["removed"] for p in doc["partitions"][2:]] == [nothing, nothing]  # failed, skipped: none removed


# -- what a run leaves undone, said every run (issue 13 items 1, 3, 4, 6) ----------------------------
def undone_plan() -> pa.Table:
    rows = [
        plan_row("/logs/a/orders-0", "compact", "idle", 4_000_000, 3_000_000, 0.75, 0),
        plan_row("/logs/a/orders-2", "compact", "uncleanable", 9_000, 5_000, 0.99, 0),
        plan_row("/logs/a/orders-6", "compact", "idle", None, None, None, None),
        plan_row("/logs/b/orders-3", "compact", "paused", 8_000, 7_600, 0.95, 0),
        plan_row("/logs/b/clicks-0", "delete", "idle", None, None, None, None),
    ]
    rows[1]["skip_reason"] = (
        "uncleanable: /logs/a/orders-2/00000000000000000000.log: byte 7: CRC mismatch (reset-uncleanable after fixing)"
    )
    rows[2]["skip_reason"] = "bad input: /logs/a/cleaner-offset-checkpoint: byte 0: unsupported checkpoint version 'x'"
    rows[3]["skip_reason"] = "paused (1x; resume to clean)"
    rows[4]["skip_reason"] = "bad input: /logs/b/clicks-0/x: not a Kafka segment file name"  # retention's business
    for row, kind in zip(rows[1:], ("uncleanable", "bad input", "paused", "bad input")):
        row["skip_kind"] = kind
    rows[0].update(checkpoint_reset="checkpoint 1000 above log end 6", first_dirty_offset=0)
    return pa.Table.from_pylist(rows, schema=PLAN_SCHEMA)


def test_text_lists_blocked_and_uncleanable_partitions_and_checkpoint_resets():
    r = Report(NOW, False, [cleaned()], seconds=1.5)
    r.observe_plan(PlanRow.read(undone_plan()))
    r.checkpoint_resets.append({"log_dir": "/logs/a", "topic": "orders", "partition": 0, "from": 1000, "offset": 0,
                                "why": "checkpoint 1000 above log end 6"})
    lines = r.text().split("\n")
    at = lines.index("not cleaned until fixed (2 partitions):")
    assert lines[at + 1] == ("  orders-2: uncleanable: /logs/a/orders-2/00000000000000000000.log: byte 7: CRC mismatch "
                             "(reset-uncleanable after fixing) -> fix or remove the named file, then "
                             "'kcompact reset-uncleanable /logs/a orders-2'")
    assert lines[at + 2] == ("  orders-6: bad input: /logs/a/cleaner-offset-checkpoint: byte 0: unsupported checkpoint "
                             "version 'x' -> 'kcompact verify /logs/a' lists every problem")
    assert ("reset the cleaner checkpoint of orders-0 (/logs/a): checkpoint 1000 above log end 6, now the log start 0, "
            "as Kafka's cleaner resets it") in lines
    assert "uncleanable partitions: /logs/a: 1 (orders-2); /logs/b: 0" in lines
    assert lines[-1].startswith("1 partition: 1 cleaned, 0 failed, 0 skipped;")  # one, not "1 partitions"
    # paused (an operator's choice) and the delete-only partition are not blocked compaction work
    assert [b["partition"] for b in r.blocked] == ["orders-2", "orders-6"]


def test_a_partition_failed_by_the_run_is_not_listed_twice():
    r = Report(NOW, False, [cleaned()], seconds=1.0)
    failing = PartitionReport.failed(PlanRow(topic="orders", partition=2, path="/logs/a/orders-2",
                                             first_dirty_offset=0), "CRC", "corrupt input", seconds=0.1)
    r.partitions.append(failing)
    r.observe_plan(PlanRow.read(undone_plan()), marked=["/logs/a/orders-2"])
    assert [b["partition"] for b in r.blocked] == ["orders-6"]


def test_dry_run_says_would_clean():
    dry = cleaned()
    dry.committed = False
    r = Report(NOW, True, [dry, failed(), skipped()], seconds=2.0)
    assert r.text().split("\n")[-1].startswith("3 partitions: would clean 1, 1 failed, 1 skipped; 3.0 MB -> "
                                               "not written (dry run)")


def test_time_since_last_run_is_kafkas_gauge_before_this_run():
    # Kafka: time-since-last-run-ms = now - timeOfLastRun, stamped when grabFilthiestCompactedLog starts; read
    # just before this run stamped it: this run's start of choosing - the previous run's
    r = Report(NOW, False, seconds=1.0, previous_runs={"/logs/a": NOW - 86_400_000, "/logs/b": None},
               began_choosing_ms=NOW)
    values, notes = r.metrics
    assert values["time-since-last-run-ms"] == {"/logs/a": 86_400_000, "/logs/b": None}
    assert notes["time-since-last-run-ms"] == NO_LAST_RUN


def test_json_has_the_run_the_units_and_what_was_left_undone():
    r = Report(NOW, False, [cleaned()], seconds=1.5, run={"host": "h", "version": "0.1.0"})
    r.observe_plan(PlanRow.read(undone_plan()))
    doc = r.to_json()
    assert doc["run"] == {"host": "h", "version": "0.1.0"}
    assert doc["units"] == "MB = 2^20 bytes (as Kafka's cleaner log)"
    assert [b["partition"] for b in doc["blocked"]] == ["orders-2", "orders-6"]
    assert doc["partitions"][0]["mb_per_s"] == 2.0  # 3 MiB in 1.5 s, in the console's MB (2^20 bytes)


def test_a_partitions_json_row_is_every_field_as_asdict_gives_it():
    held = PartitionReport("orders", 3, "/logs/a/orders-3", 0, None, skipped="held by another job",
                           holder=LeaseHolder(owner="job-7", host="h2", pid=41, until="2024-07-03T10:00:00Z"))
    grouped = cleaned()
    grouped.groups = [{"base_offset": 0, "segments": [0, 400], "outcome": "swapped in"},
                      {"base_offset": 900, "segments": [900], "outcome": "swapped in"}]
    for p in (grouped, users(), failed(), skipped(), held):
        row = p.to_json()
        assert row == dataclasses.asdict(p) | {"mb_per_s": p.mb_per_s}
        assert list(row) == [f.name for f in dataclasses.fields(p)] + ["mb_per_s"]
        assert json.loads(json.dumps(row)) == json.loads(json.dumps(dataclasses.asdict(p) | {"mb_per_s": p.mb_per_s}))
    row = grouped.to_json()  # a copy: the report's own rows stay as they were
    row["groups"][0]["segments"].append(1)
    row["removed"]["superseded"] = 0
    assert grouped.groups[0]["segments"] == [0, 400] and grouped.removed["superseded"] == 1400


# -- issue 26 item 5: paused partitions said every run; a run that cleans nothing says why --------
def test_text_lists_paused_partitions_with_the_way_out():
    rows = undone_plan().to_pylist()
    rows.append(
        plan_row("/logs/b/orders-7", "compact", "paused", 8_000, 7_600, 0.95, 0)
        | {"skip_reason": "paused (2x; resume to clean)"}
    )
    rows.append(plan_row("/logs/b/clicks-1", "delete", "paused", None, None, None, None))  # no compaction to hold back
    r = Report(NOW, False, [cleaned()], seconds=1.5)
    r.observe_plan(PlanRow.read(pa.Table.from_pylist(rows, schema=PLAN_SCHEMA)))
    lines = r.text().split("\n")
    assert "paused partitions: /logs/b: 2 (orders-3, orders-7) -> 'kcompact resume /logs/b orders-3 orders-7'" in lines
    assert not [line for line in lines if line.startswith("paused partitions: /logs/a")]
    assert lines[-1].startswith("1 partition: 1 cleaned, 0 failed, 0 skipped;")  # a pause is no failure
    r.observe_plan(PlanRow.read(pa.Table.from_pylist(rows[:1], schema=PLAN_SCHEMA)))
    assert not [line for line in r.text().split("\n") if line.startswith("paused partitions")]


@pytest.mark.parametrize("rows, dry_run, last", [
    ([1, 2], False, "nothing cleaned: 2 partitions held back until fixed (above)"),
    ([1, 2, 3], True, "nothing to clean: 2 partitions held back until fixed (above), 1 paused (above)"),
    ([3], False, "nothing cleaned: 1 partition paused (above)"),
    ([0, 3], False, "nothing cleaned: 1 partition paused (above), 1 other not due ('kcompact plan' says why)"),
    ([0], False, "nothing cleaned: 1 compacted partition, not due ('kcompact plan' says why)"),
    ([4], False, "nothing cleaned: no compacted partition (cleanup.policy)"),
])
def test_a_run_that_cleans_nothing_says_why(rows, dry_run, last):
    table = undone_plan()
    r = Report(NOW, dry_run, [], seconds=0.5)
    r.observe_plan(PlanRow.read(table.take(rows)))
    lines = r.text().split("\n")
    assert lines[-1] == last
    assert not [line for line in lines if line.startswith("0 partitions")]


# -- the page stays flat as partitions grow (issue 39 item 4) ----------------------------------------
def many(n: int) -> Report:
    """``n`` cleaned partitions of sizes 1..n KiB in a shuffled order, then one failed and one skipped
    (the smallest of all: bytes_read 0)."""
    order = list(range(1, n + 1))
    order = order[1::2] + order[::2]  # odd sizes first, then the even ones
    parts = [PartitionReport("t", i, f"/logs/a/t-{i}", 0, 10, bytes_read=size * 1024, bytes_written=size * 100,
                             records_read=10, records_kept=3, seconds=0.01, committed=True,
                             groups=[{"base_offset": 0, "segments": [0], "outcome": "swapped in"}])
             for i, size in enumerate(order)]
    return Report(NOW, False, [*parts, failed(), skipped()], seconds=9.0, stages={"5 commit": 1.0})


def listed_rows(page: str, table: str) -> list[int]:
    """The JSON indexes of the partitions a table of the page lists, in its order."""
    body = page.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
    rows = body.split("<tr>")[2:]  # after the header row
    return [int(row.split('data-path="/partitions/', 1)[1].split("/", 1)[0]) for row in rows]


def test_page_lists_the_top_partitions_and_the_json_every_one(monkeypatch):
    from kcompact.compaction.reports import report_html
    from kcompact.compaction.reports.report_html import SHOWN, Plot, render

    # the plots draw TOP partitions at most whatever the count; their PNGs are the slow part
    monkeypatch.setattr(report_html, "_png", lambda name, caption, fig: Plot(name, caption, ""))
    n = 5_000
    doc = many(n).to_json()
    assert len(doc["partitions"]) == n + 2 and SHOWN == 500
    page = render(doc)
    # the failed and the skipped one (indexes n, n + 1), then the 498 largest: sizes n-497..n KiB
    largest = {i for i, p in enumerate(doc["partitions"][:n]) if p["bytes_read"] > (n - 498) * 1024}
    assert len(largest) == 498
    assert listed_rows(page, "compaction-partitions") == sorted(largest | {n, n + 1})
    assert listed_rows(page, "compaction-groups") == sorted(largest)  # failed and skipped have no groups
    assert "list 500 of the 5,002 partitions" in page
    small = render(many(SHOWN - 2).to_json())  # 500 partitions in all: every one listed, the same rows
    assert "The JSON report holds every partition" not in small
    assert len(page) < len(small) * 1.05  # longer numbers and the line saying so; not ten times the rows


def test_snappy_batches_written_by_executors_without_libsnappy_are_named(monkeypatch):
    """The driver has Google's snappy, an executor did not: the notes name those partitions."""
    from kcompact.writers import snappy_library

    monkeypatch.setattr(snappy_library, "missing", lambda: None)
    r = report()
    assert snappy_library.NOT_EXACT not in " ".join(r.notes)
    r.inexact_snappy = {"/logs/a/orders-0": 3, "/logs/b/users-1": 2}
    assert [n for n in r.notes if n.startswith(snappy_library.NOT_EXACT)] == [
        f"{snappy_library.NOT_EXACT} on the executors that wrote 5 snappy batches of 2 partitions: "
        "/logs/a/orders-0, /logs/b/users-1"]
    assert r.to_json()["notes"] == r.notes


def test_a_committed_partitions_inexact_snappy_batches_reach_the_report():
    """Stage 5's outcomes carry each group's count; the job's result keeps them per partition."""
    from kcompact.compaction.cleaning.partition_batches import PartitionBatches
    from kcompact.compaction.cleaning.results import GroupResult
    from kcompact.compaction.pipeline.committing import COMMITTED, Outcome
    from kcompact.compaction.pipeline.job_result import JobResult

    rows = [PartitionBatches(path=f"/logs/a/t-{i}", log_dir="/logs/a", topic="t", partition=i, first_dirty_offset=0,
                             first_uncleanable_dirty_offset=10, latest_offset=9) for i in range(2)]
    groups = [[GroupResult(0, rows[0].path, 0, 0, inexact_snappy=2), GroupResult(1, rows[0].path, 1, 5,
                                                                                  inexact_snappy=1)],
              [GroupResult(2, rows[1].path, 0, 0)]]
    result = JobResult(Report(now=NOW, dry_run=False))
    result.record([Outcome(i, rows[i], groups[i], COMMITTED) for i in range(2)], lambda pid: 100, {})
    assert result.report.inexact_snappy == {"/logs/a/t-0": 3}
