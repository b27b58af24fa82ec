"""Each rule once (issue 34): which failures mark a partition uncleanable, which skips block a run,
how a report counts its partitions, and whether a topic is compacted (Kafka's cleanup.policy is a
list: split on commas, each name trimmed)."""

from __future__ import annotations

import json

import pytest

from kcompact.compaction.reports.report import PartitionReport, Report
from kcompact.conf.policy import is_compacted, is_deleted
from kcompact.contracts.plan_row import PlanRow
from kcompact.errors.failure import Failure, problem_kind
from kcompact.operations.retention import PartitionRetention, RetentionReport
from kcompact.planner import output
from kcompact.planner.build import PLAN_SCHEMA

ROW = {"topic": "t", "partition": 0, "path": "/logs/t-0", "first_dirty_offset": 0}


def test_only_faults_of_the_log_mark_it_uncleanable():
    assert {k for k in Failure if k.marks_uncleanable} == {Failure.CORRUPT, Failure.INCOMPLETE}
    assert {k for k in Failure if k.blocks} == {Failure.BAD_INPUT, Failure.UNCLEANABLE}


def test_a_log_files_bytes_are_corrupt_input_anything_else_bad_input():
    assert problem_kind("/logs/t-0/00000000000000000000.log", 91) is Failure.CORRUPT
    assert problem_kind("/logs/t-0/00000000000000000000.log", None) is Failure.BAD_INPUT  # the file as a whole
    assert problem_kind("/logs/t-0/00000000000000000000.timeindex", 12) is Failure.BAD_INPUT


@pytest.mark.parametrize(("policy", "compacted", "deleted"), [
    ("compact", True, False), ("delete", False, True), ("compact,delete", True, True),
    ("delete, compact", True, True), (" compact ", True, False), (("compact", "delete"), True, True),
    ("", False, False), (None, False, False),
])
def test_cleanup_policy_is_a_list(policy, compacted, deleted):
    assert is_compacted(policy) is compacted and is_deleted(policy) is deleted


def test_both_reports_count_a_partition_once_skipped_before_failed():
    """A partition both skipped and carrying an error was not attempted: skipped, not failed, in the
    compaction report as in the retention report (they counted it differently before)."""
    both = PartitionReport("t", 0, "/logs/t-0", 0, None, error="x", skipped="y")
    failed = PartitionReport.failed(PlanRow.of(ROW), "e", Failure.IO)
    compaction = Report(1, False, [both, failed]).totals
    retained = [PartitionRetention("t", 0, "/logs/t-0", "/logs", 0, 0, error="x", skipped="y"),
                PartitionRetention("t", 1, "/logs/t-1", "/logs", 0, 0, error="e")]
    retention = RetentionReport(1, False, retained).totals
    assert {k: compaction[k] for k in ("partitions", "failed", "skipped")} == {
        "partitions": 2,
        "failed": 1,
        "skipped": 1,
    }
    assert {k: retention[k] for k in ("partitions", "failed", "skipped")} == {
        "partitions": 2,
        "failed": 1,
        "skipped": 1,
    }


def test_a_plan_without_the_kind_columns_is_refused(tmp_path):
    """A plan written before the kinds were columns: its decisions cannot be read, so plan again."""
    row = dict.fromkeys(PLAN_SCHEMA.names) | {"log_dir": "/logs", "path": "/logs/t-0", "topic": "t", "partition": 0}
    old = tmp_path / "old.json"
    old.write_text(json.dumps([{k: v for k, v in row.items() if k not in ("skip_kind", "fault_kind")}]))
    with pytest.raises(ValueError, match=r"a plan from another kcompact version \(no skip_kind, fault_kind column\)"):
        output.read(str(old))
    current = tmp_path / "plan.json"
    current.write_text(json.dumps([row]))
    assert output.read(str(current)).table.num_rows == 1
