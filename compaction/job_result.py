"""What a compaction job did, partition by partition: its report, the partitions to mark
uncleanable and the checkpoint entries to write at its end, and what its commits left to remove;
shared by the stages that take, clean and commit the partitions."""

from __future__ import annotations

from dataclasses import dataclass, field

from kcompact.compaction.report import PartitionReport, Report
from kcompact.compaction.results import IO_ERROR, OUT_OF_MEMORY
from kcompact.logdir.listing import Partition
from kcompact.planner.scan import UNREADABLE


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

    def fail(self, row: dict, transient: bool = False, groups: list[dict] = (), cleaning: bool = True) -> None:
        """A partition this run could not clean: reported (with what became of each segment group:
        ``groups``), and marked uncleanable at the end unless the cause is transient (an I/O
        error, a log that changed under the job), a file the job may not read (the operator's
        to fix: retried every run until then) or the task's memory, no fault of the log's."""
        if not transient and not row["error"].startswith((IO_ERROR, OUT_OF_MEMORY, UNREADABLE)):
            self.uncleanable[row["path"]] = row["error"]
        if cleaning and not transient:
            self.done_cleaning.setdefault(row["log_dir"], {})[row["topic"], row["partition"]] = row["first_dirty_offset"]
        self.report.partitions.append(PartitionReport.failed(row, groups))
