"""What each step of ``kcompact`` returns: one object per command, all of one shape.

Each holds the reports of what it did (``compaction.reports.report.Report``,
``operations.retention.RetentionReport``, ``operations.recover.RecoveryReport``) and the plan it
followed, and says as properties what the command line's exit code counts (``failed``,
``attempted``, ``incomplete``: partitions left undone that are no failure); ``to_json()`` is the
report document's body. ``plan`` returns a ``planner.plan.Plan`` and ``recover`` a
``RecoveryReport``, each of the same conventions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from kcompact.compaction.reports.report import Report
    from kcompact.operations.recover import RecoveryReport
    from kcompact.operations.retention import RetentionReport
    from kcompact.planner.plan import Plan

R = TypeVar("R")  # the step's report


@dataclass(slots=True)
class _StepResult(Generic[R]):
    """What ``compact`` and ``retain`` both return: the step's report, the plan it followed, and the
    recovery it ran first (None: a dry run, or ``recover_first=False``)."""

    report: R
    plan: Plan
    recovery: RecoveryReport | None = None
    busy: dict[str, str] = field(default_factory=dict)  # log dir -> who holds its .lock: left alone (leave_busy)

    @property
    def failed(self) -> int:
        return self.report.totals["failed"]

    def to_json(self) -> dict:
        return self.report.to_json()


@dataclass(slots=True)
class CompactionResult(_StepResult["Report"]):
    """What ``compact`` did (``report``: a ``compaction.reports.report.Report``)."""

    @property
    def attempted(self) -> int:
        totals = self.report.totals
        return totals["partitions"] - totals["skipped"]

    @property
    def incomplete(self) -> int:
        """Partitions held back by bad input or an uncleanable state, or by another job's lease."""
        return len(self.report.blocked) + len(self.report.held)

    def text(self, each: bool = True) -> str:
        return self.report.text(each)


@dataclass(slots=True)
class RetentionResult(_StepResult["RetentionReport"]):
    """What ``retain`` did (``report``: an ``operations.retention.RetentionReport``)."""

    @property
    def attempted(self) -> int:
        return self.report.attempted

    @property
    def incomplete(self) -> int:
        """Partitions with segments due that bad input or an uncleanable state held back."""
        return len(self.report.blocked)

    def text(self) -> str:
        return self.report.text()


@dataclass(slots=True)
class NightlyReport:
    """What ``run`` did: each step's report, and the plan compaction followed."""

    now: int
    dry_run: bool
    recovery: RecoveryReport | None  # None on a dry run: recovery writes
    retention: RetentionReport
    compaction: Report
    plan: Plan  # the compaction plan, as retention left the log dirs
    run: dict = field(default_factory=dict)  # where and how the run ran (jobs.cli: clock, host, Spark, arguments)
    busy: dict[str, str] = field(default_factory=dict)  # log dir -> who holds its .lock: left alone (leave_busy)

    @property
    def failed(self) -> int:
        recovery = self.recovery.failed if self.recovery else 0
        return recovery + self.retention.totals["failed"] + self.compaction.totals["failed"]

    @property
    def attempted(self) -> int:
        totals = self.compaction.totals
        return self.retention.attempted + totals["partitions"] - totals["skipped"]

    @property
    def blocked(self) -> int:
        """Partitions bad input or an uncleanable state kept from retention or compaction (once each)."""
        return len({p.path for p in self.retention.blocked} | {b["path"] for b in self.compaction.blocked})

    @property
    def incomplete(self) -> int:
        """``blocked``, and the partitions another job's lease kept from compaction."""
        return self.blocked + len(self.compaction.held)

    def text(self, each: bool = True) -> str:
        """The compaction's summary (``Report.text``): recovery's and retention's went to the
        observer's ``summary`` as each ended."""
        return self.compaction.text(each)

    def to_json(self) -> dict:
        from kcompact.conf.units import UNIT_NOTE

        return {"run": self.run, "now": self.now, "dry_run": self.dry_run, "units": UNIT_NOTE,
                "recovery": self.recovery.to_json() if self.recovery else None,
                "retention": self.retention.to_json(), "compaction": self.compaction.to_json()}
