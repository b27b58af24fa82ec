"""What a compaction job did, partition by partition: its report, the partitions to mark
uncleanable and the checkpoint entries to write at its end, and what its commits left to remove;
shared by the stages that take, clean and commit the partitions."""

from __future__ import annotations

from dataclasses import dataclass, field

from kcompact.compaction.cleaning.partition_batches import PartitionBatches
from kcompact.compaction.pipeline.committing import ABORTED, COMMITTED, NOT_WRITTEN, UNFINISHED, Outcome
from kcompact.compaction.reports.report import PartitionReport, Report, group_outcomes
from kcompact.contracts.plan_row import PlanRow
from kcompact.errors.failure import Failure
from kcompact.logdir.listing import Partition


@dataclass(slots=True)
class JobResult:
    report: Report
    uncleanable: dict[str, str] = field(default_factory=dict)  # partition dir -> reason
    # object stores: partition dir -> the latest commit record generation seen under our lease
    generations: dict[str, int] = field(default_factory=dict)
    # object stores: partition dir -> the partition as listed under our lease, for the tasks to read
    listed: dict[str, Partition] = field(default_factory=dict)
    # log dir -> {(topic, partition): first dirty offset} of the partitions whose cleaning failed:
    # Kafka's cleanLog writes that entry (doneCleaning) whether the cleaning succeeded or threw
    done_cleaning: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)  # what the commits renamed to .deleted, to remove

    def fail(self, row: PlanRow | PartitionBatches, error: str, failure: Failure | str, transient: bool = False,
             groups: list[dict] = (), cleaning: bool = True, seconds: float = 0.0) -> None:
        """A partition this run could not clean (``failure``: its kind, ``error``: the message):
        reported (with what became of each segment group: ``groups``), and marked uncleanable at
        the end when its kind says the log is at fault (``Failure.marks_uncleanable``); never for a
        transient cause (an I/O error, a log that changed under the job), a file the job may not
        read (the operator's to fix: retried every run until then) or the task's memory."""
        if not transient and Failure(failure).marks_uncleanable:
            self.uncleanable[row.path] = error
        if cleaning and not transient:
            self.done_cleaning.setdefault(row.log_dir, {})[row.topic, row.partition] = row.first_dirty_offset
        self.report.partitions.append(PartitionReport.failed(row, error, failure, groups, seconds))

    def record(self, outcomes: list[Outcome], bytes_read, counts: dict) -> None:
        """Stage 5's ``outcomes`` (``committing.commit_partitions``) in the report, in order:
        ``bytes_read(pid)``: the bytes of a partition's batches; ``counts``: records per fate."""
        for o in outcomes:
            if o.status in (COMMITTED, UNFINISHED):
                self.deleted += o.deleted
            if o.status == COMMITTED:
                if inexact := sum(g.inexact_snappy for g in o.groups):
                    self.report.inexact_snappy[o.row.path] = inexact
                self.report.partitions.append(
                    PartitionReport.of(o.row, bytes_read(o.pid), counts, o.groups, committed=True)
                )
            elif o.status == UNFINISHED:  # readers see the new segments: no failure of the cleaning's
                self.report.partitions.append(PartitionReport.failed(o.row, o.error, o.failure))
            elif o.status == ABORTED:
                self.report.partitions.append(
                    PartitionReport.skipped_for(o.row, "aborted by an operator; old segments kept", Failure.ABORTED)
                )
            elif o.status == NOT_WRITTEN:
                self.fail(o.row, o.error, o.failure, groups=group_outcomes(o.row, o.groups, "written"))
            else:  # not committed: a log that changed, or a lease lost, is cleaned next run
                self.fail(o.row, o.error, o.failure, transient=o.failure in (Failure.LOG_CHANGED, Failure.LEASE_LOST))
