"""What a report leads with (issue 43 item 6): the outcome in the JSON (exit code, verdict, what
failed, is held back, paused or uncleanable, each with what to do), and a page that shows it
first, then the plots (an empty one replaced by a sentence), then tables of a few columns each.

The reports are built by hand (``tests.unit.test_report``'s partitions and plan); the expected
rows and sentences are written out here.
"""

from __future__ import annotations

import html
import json
import re

from kcompact.compaction.reports.outcome import compaction_undone, outcome, retention_undone
from kcompact.compaction.reports.report import PartitionReport, Report
from kcompact.compaction.reports.report_html import render
from kcompact.contracts.plan_row import PlanRow
from kcompact.errors.failure import Failure
from kcompact.jobs.cli import main
from kcompact.operations.retention import PartitionRetention, RetentionReport
from tests.support import checkpoint_text, kp_keyed, write_partition
from tests.unit.test_report import NOW, cleaned, failed, undone_plan


def corrupt_run() -> Report:
    """orders-0 cleaned, orders-1 failed on a CRC and marked uncleanable by the run; the plan's
    orders-2 uncleanable before it, orders-6 held back by bad input, orders-3 paused."""
    r = Report(NOW, False, [cleaned(), failed()], seconds=2.0, stages={"plan": 1.0})
    r.observe_plan(PlanRow.read(undone_plan()), marked=["/logs/a/orders-1"])
    return r


def test_outcome_names_what_failed_and_what_to_do():
    found = outcome(4, compaction_undone(corrupt_run()))
    assert found["exit_code"] == 4 and found["meaning"].startswith("partial: ")
    assert found["verdict"] == ("Exit 4 (partial): 1 partition failed, 2 partitions held back until fixed, "
                                "2 partitions uncleanable, 1 partition paused")
    (row,) = found["failed"]
    assert row["partition"] == "orders-1" and row["log_dir"] == "/logs/a" and row["kind"] == "corrupt input"
    assert row["why"] == "/logs/a/orders-1/00000000000000000000.log: byte 42: CRC mismatch"
    assert "'kcompact verify /logs/a'" in row["way_out"]
    assert row["way_out"].endswith("then 'kcompact reset-uncleanable /logs/a orders-1'")
    assert [(r["partition"], r["way_out"]) for r in found["held_back"]] == [
        ("orders-2", "fix or remove the named file, then 'kcompact reset-uncleanable /logs/a orders-2'"),
        ("orders-6", "'kcompact verify /logs/a' lists every problem")]
    assert [(r["partition"], r["why"]) for r in found["uncleanable"]] == [
        ("orders-1", "/logs/a/orders-1/00000000000000000000.log: byte 42: CRC mismatch"),
        ("orders-2", "uncleanable: /logs/a/orders-2/00000000000000000000.log: byte 7: CRC mismatch "
                     "(reset-uncleanable after fixing)")]
    assert [(r["log_dir"], r["partition"], r["way_out"]) for r in found["paused"]] == [
        ("/logs/b", "orders-3", "'kcompact resume /logs/b orders-3'")]
    assert found["held"] == found["log_dirs"] == found["skipped"] == []


def test_a_clean_run_says_nothing_is_left_undone():
    r = Report(NOW, False, [cleaned()], seconds=1.0)
    r.observe_plan(PlanRow.read(undone_plan().slice(0, 1)))
    found = outcome(0, compaction_undone(r))
    assert found["verdict"] == "Exit 0 (done): nothing left undone"
    assert found["meaning"] == "done: all that was asked was done"


def test_retention_outcome_and_log_dirs_not_worked_on():
    held = PartitionRetention("clicks", 0, "/logs/b/clicks-0", "/logs/b", 0, None, skipped="bad input: x",
                              skip_kind=Failure.BAD_INPUT)
    broken = PartitionRetention("clicks", 1, "/logs/b/clicks-1", "/logs/b", 0, 5, error="/logs/b/clicks-1: changed")
    found = outcome(4, retention_undone(RetentionReport(NOW, False, [held, broken], paused={"/logs/b": ["users-0"]})),
                    log_dirs=[{"step": "retention", "partition": None, "log_dir": "/logs/c", "why": "in use",
                               "way_out": "wait"}])
    assert [(r["partition"], r["why"]) for r in found["failed"]] == [("clicks-1", "/logs/b/clicks-1: changed")]
    assert [(r["partition"], r["way_out"]) for r in found["held_back"]] == [
        ("clicks-0", "'kcompact verify /logs/b' lists every problem")]
    assert [r["partition"] for r in found["paused"]] == ["users-0"]
    assert found["verdict"] == ("Exit 4 (partial): 1 partition failed, 1 partition held back until fixed, "
                                "1 log dir not worked on, 1 partition paused")


def page(code: int, r: Report) -> str:
    return render({"outcome": outcome(code, compaction_undone(r)), **r.to_json()})


def test_page_leads_with_the_outcome_then_plots_then_tables():
    text = page(4, corrupt_run())
    body = text[text.index("<body>"):]
    first = body.index('<section id="outcome" class="outcome failed">')
    assert first < body.index("<img") < body.index('<section id="compaction"')
    # the outcome holds the verdict, the failed partition with its advice, the held back, uncleanable and paused
    block = html.unescape(body[first:body.index("</section>", first)])
    assert "<h2>Exit 4 (partial): 1 partition failed," in block
    for table in ("outcome-exit", "outcome-failed", "outcome-held_back", "outcome-uncleanable", "outcome-paused"):
        assert f'id="{table}"' in block
    assert "then 'kcompact reset-uncleanable /logs/a orders-1'" in block
    assert 'class="outcome ok"' in page(0, Report(NOW, False, [cleaned()], seconds=1.0))


def test_page_tables_are_narrow_and_headers_do_not_break():
    text = page(4, corrupt_run())
    assert "overflow-wrap: anywhere; min-width" not in text
    assert re.search(r"thead th \{[^}]*white-space: nowrap", text)
    widths = [len(re.findall(r"<th scope=\"col\">", head)) for head in re.findall(r"<thead>.*?</thead>", text)]
    assert widths and max(widths) <= 10, widths


def test_empty_plots_are_a_sentence_not_a_picture():
    r = Report(NOW, False, [failed()], seconds=1.0)  # nothing cleaned, nothing removed, no stage timed
    text = html.unescape(page(5, r))
    assert "<img" not in text
    for sentence in ("No plot of bytes before and after: no partition was cleaned.",
                     "No plot of records removed: no record was removed.",
                     "No plot of stage timings: no stage ran."):
        assert text.index(sentence) > text.index('<section id="outcome"')
    retention = RetentionReport(NOW, True)
    doc = {"outcome": outcome(0, retention_undone(retention)), **retention.to_json()}
    assert "No plots of retention: no segment was due for deletion." in render(doc) and "<img" not in render(doc)


def test_a_step_each_lists_a_partition_the_verdict_counts_once():
    r = Report(NOW, False, [cleaned()], seconds=1.0)
    r.observe_plan(PlanRow.read(undone_plan()))
    skipped = PartitionReport.skipped_for(PlanRow(topic="orders", partition=8, path="/logs/b/orders-8",
                                                  first_dirty_offset=0), "paused (1x; resume to clean)", Failure.PAUSED)
    r.partitions.append(skipped)
    held = PartitionRetention("orders", 6, "/logs/a/orders-6", "/logs/a", 0, None, skipped="bad input: x",
                              skip_kind=Failure.BAD_INPUT)
    found = outcome(4, retention_undone(RetentionReport(NOW, False, [held])), compaction_undone(r))
    assert [(r["step"], r["partition"]) for r in found["held_back"]] == [
        ("retention", "orders-6"), ("compaction", "orders-2"), ("compaction", "orders-6")]
    assert found["verdict"].startswith("Exit 4 (partial): 2 partitions held back until fixed,")
    assert [(r["partition"], r["way_out"]) for r in found["skipped"]] == [
        ("orders-8", "'kcompact resume /logs/b orders-8'")]


def test_recover_reports_its_outcome_and_page(tmp_path):
    """``recover --report`` (no Spark): a log dir with no partition makes it partial, and says so first."""
    empty, logs = tmp_path / "empty", tmp_path / "logs"
    empty.mkdir()
    (empty / "meta.properties").write_text("version=1\nnode.id=1\n")
    (empty / "recovery-point-offset-checkpoint").write_bytes(checkpoint_text([]))
    write_partition(logs / "orders-0", [(0, [kp_keyed(0, [b"a"], NOW)])])
    (logs / "orders-0" / f"{0:020d}.log.cleaned").write_bytes(b"")  # what a crashed run leaves
    code = main(["recover", str(logs), str(empty), "--report", str(tmp_path / "r.json")])
    doc = json.loads((tmp_path / "r.json").read_text())
    assert code == doc["outcome"]["exit_code"] == 4
    assert [(r["log_dir"], r["why"]) for r in doc["outcome"]["log_dirs"]] == [
        (str(empty), "no partitions in this log dir: nothing to do")]
    assert doc["outcome"]["verdict"] == "Exit 4 (partial): 1 log dir not worked on"
    assert doc["partitions"][0]["deleted"] == [f"{0:020d}.log.cleaned"]
    page = (tmp_path / "r.html").read_text()
    assert page.index('<section id="outcome" class="outcome failed">') < page.index('<section id="recovery">')
